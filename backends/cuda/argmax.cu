// Argmax: *out = the index of the largest x, the first one on ties (greedy sampling without
// downloading the logits).
//
//   argmax_kernel  each block scans a contiguous slice (threads strided, each keeping its first
//                  strict maximum) and hands its candidates to argmax_commit (argmax.cuh), which
//                  the decode GEMV's argmax epilogue shares.
#include <algorithm>
#include <cmath>

#include "backends/cuda/argmax.cuh"
#include "backends/cuda/cuda_backend_impl.cuh"

namespace tllm::cuda {
namespace {

constexpr int kArgmaxThreads = 256;

__global__ void __launch_bounds__(kArgmaxThreads) argmax_kernel(const float* x, int64_t n, int32_t* out,
                                                                ArgmaxWorkspace ws, int32_t* advance) {
  __shared__ ArgmaxCandidate scratch[kArgmaxThreads / 32];
  grid_dependency_wait();
  allow_dependent_launch();
  const int64_t per_block = (n + gridDim.x - 1) / gridDim.x;
  const int64_t begin = blockIdx.x * per_block, end = std::min<int64_t>(n, begin + per_block);
  ArgmaxCandidate c = argmax_none();
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) c.offer(x[i], int32_t(i));
  argmax_commit(c, scratch, out, ws, advance);
}

}  // namespace

ArgmaxWorkspace CudaBackend::argmax_workspace() {
  ArgmaxWorkspace ws;
  ws.v = argmax_partials_.as<float>();
  ws.i = reinterpret_cast<int32_t*>(ws.v + kArgmaxMaxBlocks);
  ws.counter = reinterpret_cast<unsigned*>(ws.i + kArgmaxMaxBlocks);
  return ws;
}

void CudaBackend::argmax(const ArgmaxDesc& d) {
  CUDA_REQUIRE(d.n >= 1 && d.n < (int64_t(1) << 31), "argmax", "n must be positive");
  CUDA_REQUIRE(d.x && d.out, "argmax", "a pointer is missing");
  // About 4 values per thread, at most two blocks per multiprocessor.
  const int64_t blocks = std::max<int64_t>(
      1, std::min<int64_t>({ceil_div(d.n, kArgmaxThreads * 4), 2 * int64_t(sm_count_), kArgmaxMaxBlocks}));
  launch(argmax_kernel, dim3(unsigned(blocks)), dim3(kArgmaxThreads), 0, d.x, d.n, d.out, argmax_workspace(),
         d.advance);
}

}  // namespace tllm::cuda
