// KV append: rows of k and v (fp32) written to the fp16 caches at their positions.
//
//   kv_append_kernel  one thread per value of k (and the same value of v), consecutive threads on
//                     consecutive values of a head, so reads and writes are coalesced. Rows whose
//                     position lies outside the cache are skipped (the op's contract excludes them).
#include <algorithm>

#include "backends/cuda/cuda_backend_impl.cuh"

namespace tllm::cuda {
namespace {

constexpr int kKvThreads = 256;

__global__ void __launch_bounds__(kKvThreads) kv_append_kernel(const float* k, const float* v, __half* k_cache,
                                                               __half* v_cache, const int32_t* pos, int64_t total,
                                                               int row_values, int head_dim, int n_ctx) {
  grid_dependency_wait();
  allow_dependent_launch();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / row_values;
    const int c = int(i % row_values);
    const int p = pos[r];
    if (p < 0 || p >= n_ctx) continue;
    const int64_t dst = (int64_t(c / head_dim) * n_ctx + p) * head_dim + c % head_dim;
    k_cache[dst] = __float2half_rn(k[i]);
    v_cache[dst] = __float2half_rn(v[i]);
  }
}

}  // namespace

void CudaBackend::kv_append(const KvAppendDesc& d) {
  const char* op = "kv_append";
  CUDA_REQUIRE(d.m >= 1 && d.n_head_kv >= 1 && d.head_dim >= 1 && d.n_ctx >= 1, op,
               "m, n_head_kv, head_dim and n_ctx must be positive");
  CUDA_REQUIRE(d.k && d.v && d.k_cache && d.v_cache && d.pos, op, "a pointer is missing");
  const int row_values = d.n_head_kv * d.head_dim;
  const int64_t total = d.m * row_values;
  const int64_t blocks = std::min<int64_t>(ceil_div(total, kKvThreads), 8 * int64_t(sm_count_));
  launch(kv_append_kernel, dim3(unsigned(blocks)), dim3(kKvThreads), 0, d.k, d.v,
         reinterpret_cast<__half*>(d.k_cache), reinterpret_cast<__half*>(d.v_cache), d.pos, total, row_values,
         d.head_dim, d.n_ctx);
}

}  // namespace tllm::cuda
