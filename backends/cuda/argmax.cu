// Argmax: *out = the index of the largest x, the first one on ties (greedy sampling without
// downloading the logits).
//
//   argmax_kernel  each block scans a contiguous slice (threads strided, each keeping its first
//                  strict maximum), reduces (value, index) pairs to the block's candidate (larger
//                  value, or equal value and smaller index), and writes it to a workspace; the last
//                  block to finish reduces the candidates in block order and writes *out. NaN is
//                  never selected; where no value beats -inf the result is 0, as for the oracle.
#include <algorithm>
#include <cmath>

#include "backends/cuda/cuda_backend_impl.cuh"

namespace tllm::cuda {
namespace {

constexpr int kArgmaxThreads = 256;

struct Candidate {
  float v;
  int32_t i;  // -1: none
};

__device__ __forceinline__ Candidate better(Candidate a, Candidate b) {
  if (b.i < 0) return a;
  if (a.i < 0) return b;
  return (b.v > a.v || (b.v == a.v && b.i < a.i)) ? b : a;
}

__device__ Candidate block_best(Candidate c, Candidate* scratch) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    Candidate other;
    other.v = __shfl_xor_sync(0xffffffffu, c.v, o);
    other.i = __shfl_xor_sync(0xffffffffu, c.i, o);
    c = better(c, other);
  }
  if (lane == 0) scratch[warp] = c;
  __syncthreads();
  Candidate best{-INFINITY, -1};
  for (int w = 0; w < int(blockDim.x >> 5); ++w) best = better(best, scratch[w]);
  return best;
}

__global__ void __launch_bounds__(kArgmaxThreads) argmax_kernel(const float* x, int64_t n, int32_t* out,
                                                                float* cand_v, int32_t* cand_i, unsigned* counter) {
  __shared__ Candidate scratch[kArgmaxThreads / 32];
  __shared__ bool is_last;
  grid_dependency_wait();
  allow_dependent_launch();
  const int64_t per_block = (n + gridDim.x - 1) / gridDim.x;
  const int64_t begin = blockIdx.x * per_block, end = std::min<int64_t>(n, begin + per_block);
  Candidate c{-INFINITY, -1};
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const float v = x[i];
    if (v > c.v) c = Candidate{v, int32_t(i)};  // first strict maximum of this thread's values
  }
  c = block_best(c, scratch);
  if (threadIdx.x == 0) {
    cand_v[blockIdx.x] = c.v;
    cand_i[blockIdx.x] = c.i;
    __threadfence();
    is_last = atomicAdd(counter, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!is_last) return;
  __threadfence();
  Candidate b{-INFINITY, -1};
  for (int k = threadIdx.x; k < int(gridDim.x); k += blockDim.x)
    b = better(b, Candidate{__ldcg(cand_v + k), __ldcg(cand_i + k)});
  __syncthreads();  // scratch is reused
  b = block_best(b, scratch);
  if (threadIdx.x == 0) {
    *out = b.i < 0 ? 0 : b.i;
    *counter = 0u;  // ready for the next call
  }
}

}  // namespace

void CudaBackend::argmax(const ArgmaxDesc& d) {
  CUDA_REQUIRE(d.n >= 1 && d.n < (int64_t(1) << 31), "argmax", "n must be positive");
  CUDA_REQUIRE(d.x && d.out, "argmax", "a pointer is missing");
  // About 4 values per thread, at most two blocks per multiprocessor.
  const int64_t blocks = std::max<int64_t>(
      1, std::min<int64_t>({ceil_div(d.n, kArgmaxThreads * 4), 2 * int64_t(sm_count_), kArgmaxMaxBlocks}));
  float* cand_v = argmax_partials_.as<float>();
  int32_t* cand_i = reinterpret_cast<int32_t*>(cand_v + kArgmaxMaxBlocks);
  unsigned* counter = reinterpret_cast<unsigned*>(cand_i + kArgmaxMaxBlocks);
  launch(argmax_kernel, dim3(unsigned(blocks)), dim3(kArgmaxThreads), 0, d.x, d.n, d.out, cand_v, cand_i, counter);
}

}  // namespace tllm::cuda
