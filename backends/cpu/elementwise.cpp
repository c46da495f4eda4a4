// Elementwise ops on the CPU: the residual add and SiLU(gate) * up.
// Both split the vector into chunks so that each parallel task runs a plain, vectorisable loop.
#include <algorithm>
#include <cmath>

#include "backends/cpu/cpu_backend_impl.h"

namespace tllm::cpu {

namespace {
constexpr int64_t kChunk = 4096;  // values per parallel task
}

void silu_mul_row(const float* gate, const float* up, half_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = float_to_half(g / (1.0f + std::exp(-g)) * up[i]);
  }
}

void CpuBackend::add(const AddDesc& d) {
  TraceScope t(trace_, "add");
  TLLM_CPU_CHECK(d.n >= 0 && (d.n == 0 || (d.y && d.x)));
  parallel_for((d.n + kChunk - 1) / kChunk, kChunk, [&](int64_t c) {
    const int64_t end = std::min(d.n, (c + 1) * kChunk);
    for (int64_t i = c * kChunk; i < end; ++i) d.y[i] += d.x[i];
  });
}

void CpuBackend::silu_mul(const SiluMulDesc& d) {
  TraceScope t(trace_, "silu_mul");
  TLLM_CPU_CHECK(d.n >= 0 && (d.n == 0 || (d.gate && d.up && d.out)));
  parallel_for((d.n + kChunk - 1) / kChunk, 16 * kChunk, [&](int64_t c) {  // exp ~ 16 ops
    const int64_t begin = c * kChunk;
    silu_mul_row(d.gate + begin, d.up + begin, d.out + begin, std::min(kChunk, d.n - begin));
  });
}

}  // namespace tllm::cpu
