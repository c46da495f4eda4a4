// Embedding lookup: out[i] = row ids[i] of the table as fp32 (exact: int8 · fp16 scale fits in
// fp32, and fp16 widens exactly).
//
//   embedding_kernel  one block per id (the id is read from backend memory, so a captured decode
//                     step looks up whatever token the step uploaded, or, for a prompt's first
//                     kernel, taken from the kernel's arguments: no upload ahead of it); threads walk
//                     the row, and thread 0 writes the row's position when asked. An id outside the
//                     table (excluded by the op's contract) gives a zero row.
#include <algorithm>

#include "backends/cuda/cuda_backend_impl.cuh"

namespace tllm::cuda {
namespace {

constexpr int kEmbThreads = 256;

struct EmbeddingArgs {
  const int8_t* q = nullptr;       // W8: (n_vocab, n_embd)
  const __half* scales = nullptr;  // W8: (n_vocab, n_embd / 32)
  const __half* w16 = nullptr;     // F16: (n_vocab, k_pad)
  int64_t n_vocab = 0;
  int n_embd = 0, k_pad = 0;
  const int32_t* ids = nullptr;    // (m), or null: host_ids
  int32_t host_ids[kEmbeddingHostIds] = {};
  float* out = nullptr;            // (m, n_embd)
  int32_t* positions = nullptr;    // (m) or null
  int32_t pos0 = 0;
};

__global__ void __launch_bounds__(kEmbThreads) embedding_kernel(const EmbeddingArgs a) {
  grid_dependency_wait();
  allow_dependent_launch();
  const int32_t id = a.ids ? a.ids[blockIdx.x] : a.host_ids[blockIdx.x];
  if (a.positions && threadIdx.x == 0) a.positions[blockIdx.x] = a.pos0 + int32_t(blockIdx.x);
  float* o = a.out + int64_t(blockIdx.x) * a.n_embd;
  const bool ok = id >= 0 && id < a.n_vocab;
  for (int e = threadIdx.x; e < a.n_embd; e += blockDim.x) {
    float v = 0.f;
    if (ok) {
      if (a.q) {
        v = float(a.q[int64_t(id) * a.n_embd + e]) *
            __half2float(a.scales[int64_t(id) * (a.n_embd / kW8Group) + e / kW8Group]);
      } else {
        v = __half2float(a.w16[int64_t(id) * a.k_pad + e]);
      }
    }
    o[e] = v;
  }
}

}  // namespace

void CudaBackend::embedding(const EmbeddingDesc& d) {
  const CudaMatrix& t = cuda_matrix(d.table, "embedding");
  CUDA_REQUIRE(d.m >= 0 && d.m < (int64_t(1) << 31), "embedding", "m must not be negative");
  if (d.m == 0) return;
  CUDA_REQUIRE((d.ids || d.host_ids) && d.out, "embedding", "a pointer is missing");
  CUDA_REQUIRE(d.ids || d.m <= kEmbeddingHostIds, "embedding",
               "at most " + std::to_string(kEmbeddingHostIds) + " host ids");
  EmbeddingArgs a;
  const bool w8 = t.type() == WeightType::W8;
  a.q = w8 ? t.q() : nullptr;
  a.scales = w8 ? t.scales() : nullptr;
  a.w16 = w8 ? nullptr : t.f16();
  a.n_vocab = t.n();
  a.n_embd = int(t.k());
  a.k_pad = int(t.k_pad());
  a.ids = d.ids;
  if (!d.ids) std::copy(d.host_ids, d.host_ids + d.m, a.host_ids);
  a.out = d.out;
  a.positions = d.positions;
  a.pos0 = d.pos0;
  launch(embedding_kernel, dim3(unsigned(d.m)), dim3(kEmbThreads), 0, a);
}

}  // namespace tllm::cuda
