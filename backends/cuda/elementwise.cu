// Elementwise ops: the residual add and SiLU(gate) * up.
//
//   add_kernel       y += x, four values per thread (16-byte accesses) when both vectors are 16-byte
//                    aligned, else one.
//   silu_mul_kernel  out = fp16(silu(gate) * up) with silu(g) = g / (1 + exp(-g)) in fp32, exp at
//                    full precision, as the oracle writes it.
#include <algorithm>

#include "backends/cuda/cuda_backend_impl.cuh"

namespace tllm::cuda {
namespace {

constexpr int kEltThreads = 256;

__global__ void __launch_bounds__(kEltThreads) add_kernel(float* y, const float* x, int64_t n, bool vec) {
  grid_dependency_wait();
  allow_dependent_launch();
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (vec) {
    for (; i < n / 4; i += stride) {
      float4 a = reinterpret_cast<float4*>(y)[i];
      const float4 b = reinterpret_cast<const float4*>(x)[i];
      a.x += b.x;
      a.y += b.y;
      a.z += b.z;
      a.w += b.w;
      reinterpret_cast<float4*>(y)[i] = a;
    }
    // The last n % 4 values.
    const int64_t t = n / 4 * 4 + blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
    if (t < n) y[t] += x[t];
  } else {
    for (; i < n; i += stride) y[i] += x[i];
  }
}

__global__ void __launch_bounds__(kEltThreads) silu_mul_kernel(const float* gate, const float* up, __half* out,
                                                               int64_t n) {
  grid_dependency_wait();
  allow_dependent_launch();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float g = gate[i];
    out[i] = __float2half_rn(g / (1.0f + expf(-g)) * up[i]);
  }
}

}  // namespace

void CudaBackend::add(const AddDesc& d) {
  CUDA_REQUIRE(d.n >= 0 && (d.n == 0 || (d.y && d.x)), "add", "n must not be negative and y, x must be set");
  if (d.n == 0) return;
  const bool vec = aligned_to(d.y, 16) && aligned_to(d.x, 16);
  const int64_t items = vec ? std::max<int64_t>(d.n / 4, 1) : d.n;
  const int64_t blocks = std::min<int64_t>(ceil_div(items, kEltThreads), 8 * int64_t(sm_count_));
  launch(add_kernel, dim3(unsigned(blocks)), dim3(kEltThreads), 0, d.y, d.x, d.n, vec);
}

void CudaBackend::silu_mul(const SiluMulDesc& d) {
  CUDA_REQUIRE(d.n >= 0 && (d.n == 0 || (d.gate && d.up && d.out)), "silu_mul",
               "n must not be negative and gate, up, out must be set");
  if (d.n == 0) return;
  const int64_t blocks = std::min<int64_t>(ceil_div(d.n, kEltThreads), 8 * int64_t(sm_count_));
  launch(silu_mul_kernel, dim3(unsigned(blocks)), dim3(kEltThreads), 0, d.gate, d.up,
         reinterpret_cast<__half*>(d.out), d.n);
}

}  // namespace tllm::cuda
