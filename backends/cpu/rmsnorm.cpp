// RMSNorm on the CPU: out = fp16(x / sqrt(mean(x²) + eps) * weight), one parallel task per row.
// The sum of squares is accumulated in fp64, so the oracle does not depend on summation order.
#include <cmath>

#include "backends/cpu/cpu_backend_impl.h"

namespace tllm::cpu {

void rmsnorm_rows(const float* x, const float* weight, half_t* out, int64_t m, int64_t n, float eps) {
  parallel_for(m, 2 * n, [&](int64_t r) {
    const float* xr = x + r * n;
    half_t* o = out + r * n;
    double ss = 0;
    for (int64_t j = 0; j < n; ++j) ss += double(xr[j]) * double(xr[j]);
    const float inv = float(1.0 / std::sqrt(ss / double(n) + double(eps)));
    for (int64_t j = 0; j < n; ++j) o[j] = float_to_half(xr[j] * inv * weight[j]);
  });
}

void CpuBackend::rmsnorm(const RmsNormDesc& d) {
  TraceScope t(trace_, "rmsnorm");
  TLLM_CPU_CHECK(d.m >= 1 && d.n >= 1 && d.x && d.weight && d.out);
  rmsnorm_rows(d.x, d.weight, d.out, d.m, d.n, d.eps);
}

}  // namespace tllm::cpu
