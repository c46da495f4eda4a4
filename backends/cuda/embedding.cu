// Embedding lookup: out[i] = row ids[i] of the table as fp32 (exact: int8 · fp16 scale fits in
// fp32, and fp16 widens exactly; an F16 table in its int8 form rounds that product to fp16 first).
//
//   embedding_kernel  one block per id (the id is read from backend memory, so a captured decode
//                     step looks up whatever token the step uploaded, or, for a prompt's first
//                     kernel, taken from the kernel's arguments: no upload ahead of it); thread 0
//                     writes the row's position when asked. A thread reads the row in 16-byte
//                     vectors (16 int8 values or 8 fp16), kEmbBatch of them requested before any
//                     value is written, so that a row of up to 4,096 W8 or 2,048 F16 values (256
//                     threads) takes one trip to memory after the id's. An id outside the table
//                     (excluded by the op's contract) gives a zero row.
#include <algorithm>

#include "backends/cuda/cuda_backend_impl.cuh"

namespace tllm::cuda {
namespace {

constexpr int kEmbThreads = 256;

struct EmbeddingArgs {
  const uint8_t* q = nullptr;      // W8: (n_vocab, n_embd), q + 128; an F16 table's int8 form in tiles
  const __half* scales = nullptr;  // W8: (n_vocab, n_embd / 32); the int8 form's in tiles
  bool as_f16 = false;             // an F16 table's int8 form: each value is fp16(q · scale)
  const __half* w16 = nullptr;     // F16: (n_vocab, k_pad)
  int64_t n_vocab = 0;
  int n_embd = 0, k_pad = 0;
  const int32_t* ids = nullptr;    // (m), or null: host_ids
  int32_t host_ids[kEmbeddingHostIds] = {};
  float* out = nullptr;            // (m, n_embd)
  int32_t* positions = nullptr;    // (m) or null
  int32_t pos0 = 0;
};

constexpr int kEmbBatch = 2;  // 16-byte vectors per thread requested at once

// Writes the `count` values of one vector of the row (16 int8 times `scale`, rounded to fp16 with
// as_f16 as int8_pair_as_f16 rounds them, or 8 fp16) from out[0].
__device__ __forceinline__ void write_vector(uint4 v, bool w8, bool as_f16, float scale, float* out, int count) {
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
  float vals[16];
  if (w8 && as_f16) {  // the values the int8-form GEMV multiplies by
    const __half2 s = __float2half2_rn(scale);  // an fp16 value: exact
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 lo = __half22float2(int8_pair_as_f16(words[i], 0x4140, s));
      const float2 hi = __half22float2(int8_pair_as_f16(words[i], 0x4342, s));
      vals[4 * i] = lo.x;
      vals[4 * i + 1] = lo.y;
      vals[4 * i + 2] = hi.x;
      vals[4 * i + 3] = hi.y;
    }
  } else if (w8) {
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const int q = int((words[i / 4] >> (8 * (i % 4))) & 0xffu) - 128;  // stored as q + 128
      vals[i] = float(q) * scale;                                        // int8 · fp16: exact in fp32
    }
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = half2_bits_to_float2(words[i]);
      vals[2 * i] = f.x;
      vals[2 * i + 1] = f.y;
    }
  }
  const int width = w8 ? 16 : 8;
  if (count == width && aligned_to(out, 16)) {
    for (int i = 0; i < width; i += 4) *reinterpret_cast<float4*>(out + i) = make_float4(vals[i], vals[i + 1], vals[i + 2], vals[i + 3]);
  } else {
    for (int i = 0; i < count; ++i) out[i] = vals[i];
  }
}

__global__ void __launch_bounds__(kEmbThreads) embedding_kernel(const EmbeddingArgs a) {
  grid_dependency_wait();
  allow_dependent_launch();
  const int32_t id = a.ids ? a.ids[blockIdx.x] : a.host_ids[blockIdx.x];
  if (a.positions && threadIdx.x == 0) a.positions[blockIdx.x] = a.pos0 + int32_t(blockIdx.x);
  float* o = a.out + int64_t(blockIdx.x) * a.n_embd;
  const bool ok = id >= 0 && id < a.n_vocab;
  const bool w8 = a.q != nullptr;
  const int width = w8 ? 16 : 8;  // values per vector
  const int vecs = (a.n_embd + width - 1) / width;
  // W8 rows are k bytes (a multiple of 32) and F16 rows k_pad values (a multiple of 8): every
  // vector is 16-byte aligned and inside its row (F16 padding is zeros). In the int8 form's tiles
  // a row's 128-value pieces lie a tile apart (i8f_piece).
  const int64_t r = ok ? id : 0, steps = i8f_steps(a.n_embd);
  constexpr int kPieceVectors = kI8fStep / 16;  // vectors of an int8-form piece
  // Vector c of the row, and its W8 group's scale (16 values: half a group).
  const auto vector = [&](int c) -> const uint4* {
    if (!w8) return reinterpret_cast<const uint4*>(a.w16 + r * a.k_pad) + c;
    if (!a.as_f16) return reinterpret_cast<const uint4*>(a.q + r * a.n_embd) + c;
    return reinterpret_cast<const uint4*>(a.q + i8f_piece(r, c / kPieceVectors, steps) * kI8fStep) + c % kPieceVectors;
  };
  const auto scale = [&](int c) -> const __half* {
    if (!a.as_f16) return a.scales + r * (a.n_embd / kW8Group) + c / 2;
    return a.scales + i8f_piece(r, c / kPieceVectors, steps) * (kI8fStep / kW8Group) + c % kPieceVectors / 2;
  };
  for (int base = 0; base < vecs; base += kEmbBatch * kEmbThreads) {
    uint4 v[kEmbBatch];
    float s[kEmbBatch];
#pragma unroll
    for (int i = 0; i < kEmbBatch; ++i) {
      const int c = base + i * kEmbThreads + int(threadIdx.x);
      const bool in = ok && c < vecs;
      v[i] = in ? __ldg(vector(c)) : make_uint4(0u, 0u, 0u, 0u);
      s[i] = in && w8 ? __half2float(__ldg(scale(c))) : 0.f;
    }
#pragma unroll
    for (int i = 0; i < kEmbBatch; ++i) {
      const int c = base + i * kEmbThreads + int(threadIdx.x);
      if (c < vecs) write_vector(v[i], w8, a.as_f16, s[i], o + c * width, min(width, a.n_embd - c * width));
    }
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
  const bool w8 = t.w8_layout();
  a.as_f16 = t.f16_as_w8();
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
