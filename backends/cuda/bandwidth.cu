// The device's read bandwidth, measured (Backend::measure_read_bandwidth): the figure a decode
// step's bytes are judged against, since no kernel reaches the nominal one.
//
//   read_bandwidth_kernel  streams the buffer once: a grid of full multiprocessors, each thread
//                          requesting kReadBatch 16-byte vectors before using any, with the
//                          streaming loads the decode GEMVs read their weights with (__ldcs), and
//                          folding them into one word. The word is stored only where it equals a
//                          value the caller passes and the buffer's contents cannot produce, so no
//                          load can be dropped and nothing is written.
#include <algorithm>

#include "backends/cuda/cuda_backend_impl.cuh"

namespace tllm::cuda {
namespace {

constexpr int kReadThreads = 512;
constexpr int kReadBatch = 4;               // vectors a thread requests before using any
constexpr unsigned char kReadFill = 0x5a;   // the buffer's bytes: every vector folds to 0
constexpr uint32_t kReadNever = 0xffffffffu;

__global__ void __launch_bounds__(kReadThreads)
    read_bandwidth_kernel(const uint4* p, int64_t n, uint32_t never, uint32_t* out) {
  grid_dependency_wait();
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  uint32_t acc = 0;
  for (; i + (kReadBatch - 1) * stride < n; i += kReadBatch * stride) {
    uint4 v[kReadBatch];
#pragma unroll
    for (int b = 0; b < kReadBatch; ++b) v[b] = __ldcs(p + i + b * stride);
#pragma unroll
    for (int b = 0; b < kReadBatch; ++b) acc ^= v[b].x ^ v[b].y ^ v[b].z ^ v[b].w;
  }
  for (; i < n; i += stride) {
    const uint4 v = __ldcs(p + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == never) *out = acc;
}

}  // namespace

double CudaBackend::measure_read_bandwidth(size_t bytes, int passes) {
  const char* op = "measure_read_bandwidth";
  CUDA_REQUIRE(bytes >= 4096, op, "the buffer must be at least 4096 bytes");
  CUDA_REQUIRE(passes >= 1, op, "at least one timed pass");
  const int64_t n = int64_t(bytes / sizeof(uint4));
  DeviceMemory buffer(size_t(n) * sizeof(uint4));  // throws BackendError when it does not fit
  DeviceMemory out(sizeof(uint32_t));
  CUDA_CHECK(cudaMemsetAsync(buffer.get(), kReadFill, buffer.bytes(), stream()));
  cudaEvent_t raw[2];
  CUDA_CHECK(cudaEventCreate(&raw[0]));
  EventOwner start(raw[0]);
  CUDA_CHECK(cudaEventCreate(&raw[1]));
  EventOwner end(raw[1]);
  int per_sm = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, read_bandwidth_kernel, kReadThreads, 0));
  const int64_t blocks = std::max<int64_t>(
      1, std::min<int64_t>(int64_t(std::max(per_sm, 1)) * sm_count_, ceil_div(n, kReadThreads)));
  double best = 0;
  for (int pass = 0; pass <= passes; ++pass) {  // pass 0 is untimed
    CUDA_CHECK(cudaEventRecord(start.get(), stream()));
    launch(read_bandwidth_kernel, dim3(unsigned(blocks)), dim3(kReadThreads), 0, buffer.as<const uint4>(), n,
           kReadNever, out.as<uint32_t>());
    CUDA_CHECK(cudaEventRecord(end.get(), stream()));
    CUDA_CHECK(cudaEventSynchronize(end.get()));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), end.get()));
    if (pass > 0 && ms > 0) best = std::max(best, double(buffer.bytes()) / (double(ms) * 1e-3) / 1e9);
  }
  return best;
}

}  // namespace tllm::cuda
