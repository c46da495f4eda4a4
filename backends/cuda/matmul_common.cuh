// Pieces shared by the matmul kernels' files (matmul_m1.cu, matmul_prefill_small.cu,
// matmul_prefill.cu) and their dispatch (matmul.cu).
#pragma once

#include "backends/cuda/cuda_backend_impl.cuh"

namespace tllm::cuda {

// The rope epilogue (MatmulEpilogue::QkvRopeAppend) of the decode and short-prompt kernels: each
// row of y is a packed qkv row, (n_head + 2·n_head_kv) heads of head_dim.
struct RopeAppendArgs {
  const int32_t* pos = nullptr;    // (m) positions; null: no rope epilogue
  __half* k_cache = nullptr;       // (n_head_kv, n_ctx, head_dim)
  __half* v_cache = nullptr;       // (n_head_kv, n_ctx, head_dim)
  int n_head = 0, n_head_kv = 0, head_dim = 0, n_ctx = 0;
  float theta = 0;
  const float* freq_factors = nullptr;  // (head_dim/2), or null
  bool neox = false;
};

inline RopeAppendArgs rope_append_args(const QkvRopeAppendDesc& r) {
  RopeAppendArgs a;
  a.pos = r.pos;
  a.k_cache = reinterpret_cast<__half*>(r.k_cache);
  a.v_cache = reinterpret_cast<__half*>(r.v_cache);
  a.n_head = r.n_head;
  a.n_head_kv = r.n_head_kv;
  a.head_dim = r.head_dim;
  a.n_ctx = r.n_ctx;
  a.theta = r.theta;
  a.freq_factors = r.freq_factors;
  a.neox = r.mode == RopeMode::Neox;
  return a;
}

// Whether head `head` of a packed qkv row is a q or k head, which rope turns (v heads pass through).
__device__ __forceinline__ bool rope_turns(const RopeAppendArgs& r, int head) { return head < r.n_head + r.n_head_kv; }

// Finishes rotation pair (d0, d1) of head `head` of the qkv row y_row at position pos: q and k
// heads are turned by the angle pos · freq (fp64, as in the rope kernel), v heads pass through; y
// gets both values, and k and v heads go to their cache row as fp16.
__device__ __forceinline__ void rope_append_pair(const RopeAppendArgs& r, float* y_row, int head, int d0, int d1,
                                                 float v0, float v1, double freq, int pos) {
  const int64_t at = int64_t(head) * r.head_dim;
  if (rope_turns(r, head)) {
    double sn, cs;
    sincos(double(pos) * freq, &sn, &cs);
    rope_turn(v0, v1, cs, sn, v0, v1);
  }
  y_row[at + d0] = v0;
  y_row[at + d1] = v1;
  if (head < r.n_head || pos < 0 || pos >= r.n_ctx) return;
  const bool is_k = rope_turns(r, head);
  const int kv_head = head - r.n_head - (is_k ? 0 : r.n_head_kv);
  __half* dst = (is_k ? r.k_cache : r.v_cache) + (int64_t(kv_head) * r.n_ctx + pos) * r.head_dim;
  dst[d0] = __float2half_rn(v0);
  dst[d1] = __float2half_rn(v1);
}

// Widens 4 int8 values (bytes of u, each stored as q + 128) to 4 exact fp16 values (2 half2 words):
// each byte becomes the low mantissa byte of fp16 1024, and 1024 + 128 is subtracted.
__device__ __forceinline__ uint2 i8x4_to_h4(uint32_t u) {
  const uint32_t lo = __byte_perm(u, 0x64646464u, 0x5140), hi = __byte_perm(u, 0x64646464u, 0x5342);
  const __half2 bias = __halves2half2(__ushort_as_half(0x6480), __ushort_as_half(0x6480));  // 1152
  __half2 hlo, hhi;
  memcpy(&hlo, &lo, 4);
  memcpy(&hhi, &hi, 4);
  hlo = __hsub2(hlo, bias);
  hhi = __hsub2(hhi, bias);
  uint2 out;
  memcpy(&out.x, &hlo, 4);
  memcpy(&out.y, &hhi, 4);
  return out;
}

// The fields every matmul kernel's arguments share (GemvArgs, SmallArgs, GemmArgs): the weights,
// their row length, and where the outputs go.
template <class Args>
void set_matmul_args(Args& a, const MatmulDesc& d, const CudaMatrix& w) {
  const bool w8 = w.w8_layout();
  a.q = w8 ? w.q() : nullptr;
  a.scales = w8 ? w.scales() : nullptr;
  a.w16 = w8 ? nullptr : w.f16();
  a.k = int(w.k());
  a.k_pad = int(w.k_pad());
  a.bias = d.bias;
  a.y = d.y;
  a.out16 = reinterpret_cast<__half*>(d.out16);
  a.accumulate = d.accumulate;
}

}  // namespace tllm::cuda
