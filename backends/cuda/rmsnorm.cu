// RMSNorm: out = fp16(x / sqrt(mean(x²) + eps) * weight), row by row.
//
//   rmsnorm_kernel  one block per row. The sum of squares is accumulated in fp64 (as the CPU oracle
//                   does, so the scale matches it to the last bit almost always: inverse_rms), then
//                   each value is scaled and rounded to fp16. Rows whose width is a multiple of 4
//                   on aligned buffers use 16-byte loads. The decode path does not use it:
//                   matmul_m1 fuses the same computation into its prologue; prefill runs it before
//                   the matmul.
#include "backends/cuda/cuda_backend_impl.cuh"

namespace tllm::cuda {
namespace {

constexpr int kRmsThreads = 256;

__global__ void __launch_bounds__(kRmsThreads) rmsnorm_kernel(const float* x, const float* weight, __half* out,
                                                              int n, double inv_n, float eps, bool vec) {
  __shared__ double scratch[32];
  grid_dependency_wait();
  allow_dependent_launch();
  const float* xr = x + int64_t(blockIdx.x) * n;
  __half* o = out + int64_t(blockIdx.x) * n;
  double ss = 0;
  if (vec) {
    for (int u = threadIdx.x; u < n / 4; u += blockDim.x) {
      const float4 v = reinterpret_cast<const float4*>(xr)[u];
      ss += double(v.x) * v.x + double(v.y) * v.y + double(v.z) * v.z + double(v.w) * v.w;
    }
  } else {
    for (int j = threadIdx.x; j < n; j += blockDim.x) ss += double(xr[j]) * xr[j];
  }
  ss = block_sum<double, true>(ss, scratch);  // scratch is summed into once
  const float inv = inverse_rms(ss, inv_n, eps);
  if (vec) {
    for (int u = threadIdx.x; u < n / 4; u += blockDim.x) {
      const float4 v = reinterpret_cast<const float4*>(xr)[u];
      const float4 w = reinterpret_cast<const float4*>(weight)[u];
      reinterpret_cast<uint2*>(o)[u] = rms_scaled_half4(v, inv, w);
    }
  } else {
    for (int j = threadIdx.x; j < n; j += blockDim.x) o[j] = __float2half_rn(xr[j] * inv * weight[j]);
  }
}

}  // namespace

void CudaBackend::rmsnorm_rows(const float* x, const float* weight, __half* out, int64_t m, int64_t n, float eps) {
  const bool vec = n % 4 == 0 && aligned_to(x, 16) && aligned_to(weight, 16) && aligned_to(out, 8);
  launch(rmsnorm_kernel, dim3(unsigned(m)), dim3(kRmsThreads), 0, x, weight, out, int(n), 1.0 / double(n), eps, vec);
}

void CudaBackend::rmsnorm(const RmsNormDesc& d) {
  CUDA_REQUIRE(d.m >= 1 && d.n >= 1 && d.m < (int64_t(1) << 31) && d.n < (int64_t(1) << 30), "rmsnorm",
               "m and n must be positive");
  CUDA_REQUIRE(d.x && d.weight && d.out, "rmsnorm", "a pointer is missing");
  rmsnorm_rows(d.x, d.weight, reinterpret_cast<__half*>(d.out), d.m, d.n, d.eps);
}

}  // namespace tllm::cuda
