// The block-level end of an argmax, shared by argmax_kernel and the argmax epilogue of the decode
// GEMV: every thread offers (value, index) candidates; a block reduces them to its best (larger
// value, or equal value and smaller index), writes it to a workspace, and the last block to finish
// reduces the blocks' candidates in block order and writes *out. NaN is never selected; where no
// value beats -inf the result is 0, as for the oracle.
#pragma once

#include <cmath>

#include "backends/cuda/cuda_common.cuh"

namespace tllm::cuda {

struct ArgmaxCandidate {
  float v;
  int32_t i;  // -1: none

  // Keeps the first strict maximum of values offered in increasing index order.
  __device__ __forceinline__ void offer(float value, int32_t index) {
    if (value > v) {
      v = value;
      i = index;
    }
  }
};

__device__ __forceinline__ ArgmaxCandidate argmax_none() { return ArgmaxCandidate{-INFINITY, -1}; }

// Candidates of one launch: (gridDim.x) values and indices, and the arrival counter (zero between
// launches: the last block resets it).
struct ArgmaxWorkspace {
  float* v = nullptr;
  int32_t* i = nullptr;
  unsigned* counter = nullptr;
};

__device__ __forceinline__ ArgmaxCandidate argmax_better(ArgmaxCandidate a, ArgmaxCandidate b) {
  if (b.i < 0) return a;
  if (a.i < 0) return b;
  return (b.v > a.v || (b.v == a.v && b.i < a.i)) ? b : a;
}

// The block's best candidate, in every thread. Block-wide; scratch holds blockDim.x / 32 entries.
// The call ends with the block synchronised, so that scratch may be reused, unless kOnce: the
// caller synchronises the block before scratch is written again, or never writes it again.
template <bool kOnce = false>
__device__ inline ArgmaxCandidate argmax_block(ArgmaxCandidate c, ArgmaxCandidate* scratch) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    ArgmaxCandidate other;
    other.v = __shfl_xor_sync(0xffffffffu, c.v, o);
    other.i = __shfl_xor_sync(0xffffffffu, c.i, o);
    c = argmax_better(c, other);
  }
  if (lane == 0) scratch[warp] = c;
  __syncthreads();
  ArgmaxCandidate best = argmax_none();
  for (int w = 0; w < int(blockDim.x >> 5); ++w) best = argmax_better(best, scratch[w]);
  if constexpr (!kOnce) __syncthreads();  // scratch may be reused after return
  return best;
}

// Block-wide, a kernel's last use of scratch: reduces the block's candidates, and in the last block
// to arrive those of the whole grid, into *out; then, with `advance`, adds one to advance[0] and
// advance[1] (ArgmaxDesc). Neither reduction ends with a barrier: last_block_to_arrive begins with
// one before the second writes scratch, and nothing reads it after the second.
__device__ inline void argmax_commit(ArgmaxCandidate c, ArgmaxCandidate* scratch, int32_t* out, ArgmaxWorkspace ws,
                                     int32_t* advance) {
  c = argmax_block<true>(c, scratch);
  if (threadIdx.x == 0) {
    ws.v[blockIdx.x] = c.v;
    ws.i[blockIdx.x] = c.i;
  }
  if (!last_block_to_arrive(ws.counter, gridDim.x)) return;
  ArgmaxCandidate b = argmax_none();
  for (int k = threadIdx.x; k < int(gridDim.x); k += blockDim.x)
    b = argmax_better(b, ArgmaxCandidate{__ldcg(ws.v + k), __ldcg(ws.i + k)});
  b = argmax_block<true>(b, scratch);
  if (threadIdx.x == 0) {
    *out = b.i < 0 ? 0 : b.i;
    if (advance) {
      ++advance[0];
      ++advance[1];
    }
    *ws.counter = 0u;  // ready for the next launch
  }
}

}  // namespace tllm::cuda
