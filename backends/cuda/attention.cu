// Attention over the fp16 KV cache (n_head_kv, n_ctx, head_dim), grouped-query: query head h reads
// KV head h / (n_head / n_head_kv). Scores are kept in log2 units (q is pre-multiplied by
// scale · log2(e)) so that softmax weights are exp2 of differences.
//
//   attention_decode_kernel   one query row against the first *n_kv cache rows (flash-decoding).
//       The grid (splits, n_head_kv, head tiles) is sized for n_ctx (at most 32 splits per KV head);
//       each block reads *n_kv and takes the shortest split length (a multiple of 64 rows) that needs
//       at most 32 splits, and the blocks past the last split exit at once, so a captured decode
//       step stays valid as the context grows. A block of 256 threads takes up to 8 query heads of
//       one KV head, so each K and V row is read once for all of them, and walks its rows in tiles of
//       64: 4 threads per row compute the row's scores for every head (K straight from global
//       memory, issued before any barrier) while the V tile is copied to shared memory (cp.async);
//       one warp per head updates the running maximum and sum (online softmax); then threads own
//       output column pairs and accumulate p·v. With one split the block writes the output;
//       otherwise each split writes its unnormalised output with its maximum and sum, and the last
//       block to finish for a (KV head, head tile) combines the splits in split order
//       (deterministic) and writes the fp16 output. Indices avoid runtime integer division: with one
//       warp per scheduler, a short dependent chain per thread is what sets this kernel's time.
//   attention_prefill_kernel  m query rows at positions pos0 .. pos0+m-1, causal, flash-attention 2
//       style on tensor cores: a block takes 64 query rows of one head (16 per warp); K and V tiles of
//       64 cache rows go through shared memory; S = Q·Kᵀ and O += P·V use mma.sync m16n8k16 with fp32
//       accumulation and the softmax is online, so no (m, n_kv) matrix is ever stored. Q enters the
//       tensor cores as fp16 hi + lo parts (lo scaled by 2^11 to stay a normal number), which keeps
//       the scores at fp32 accuracy; P is rounded to fp16 for P·V. Warps skip the cache tiles that
//       lie entirely after their last row.
#include <algorithm>
#include <cmath>

#include "backends/cuda/cuda_backend_impl.cuh"

namespace tllm::cuda {
namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr int kMaxHeadDim = 256;

// ---- decode --------------------------------------------------------------------------------------

constexpr int kDecodeThreads = 256;
constexpr int kDecodeTile = 64;  // cache rows per tile: 4 threads per row compute its scores
constexpr int kMaxSplits = 32;   // splits per KV head: bounds the last block's combine

struct DecodeArgs {
  const float* q = nullptr;         // (n_head, head_dim)
  const __half* k_cache = nullptr;  // (n_head_kv, n_ctx, head_dim)
  const __half* v_cache = nullptr;  // (n_head_kv, n_ctx, head_dim)
  __half* out = nullptr;            // (n_head, head_dim)
  const int32_t* n_kv = nullptr;    // scalar
  int head_dim = 0, n_ctx = 0;
  int hd_shift = -1;                // log2(head_dim) when it is a power of two, else -1
  int group = 0;                    // query heads per KV head
  float qscale = 0;                 // scale · log2(e)
  bool vec8 = false;                // head_dim % 8 == 0 and 16-byte aligned caches
  float* part_o = nullptr;          // (n_head, gridDim.x, head_dim)
  float* part_ml = nullptr;         // (n_head, gridDim.x, 2): maximum, sum
  unsigned* counters = nullptr;     // (n_head_kv, head tiles), zero between calls
};

// (g, d) of a flattened (head, column pair) index.
__device__ __forceinline__ void split_index(const DecodeArgs& a, int i, int& g, int& d2) {
  const int pairs = a.head_dim / 2;
  if (a.hd_shift >= 1) {
    g = i >> (a.hd_shift - 1);
    d2 = i & (pairs - 1);
  } else {
    g = i / pairs;
    d2 = i - g * pairs;
  }
}

// kHeads: query heads per block (1, 2, 4 or 8), the GQA group or a tile of it.
template <int kHeads>
__global__ void __launch_bounds__(kDecodeThreads) attention_decode_kernel(const DecodeArgs a) {
  extern __shared__ __align__(16) unsigned char decode_smem[];  // V tile: (kDecodeTile, head_dim) fp16
  __half* vs = reinterpret_cast<__half*>(decode_smem);
  __shared__ __align__(16) float qs[kHeads][kMaxHeadDim];  // scaled q of the block's heads
  __shared__ float ps[kHeads][kDecodeTile];                // the tile's scores, then weights
  __shared__ float m_run[kHeads], l_run[kHeads], alpha[kHeads];
  __shared__ __align__(16) float red[kHeads * 2 * kDecodeThreads];  // (row groups, kHeads, head_dim); combine weights
  __shared__ bool is_last;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int split = blockIdx.x, kvh = blockIdx.y, tile = blockIdx.z;
  const int hd = a.head_dim;
  const int h0 = kvh * a.group + tile * kHeads;         // first query head of the block
  const int nh = min(kHeads, a.group - tile * kHeads);  // its heads; the rest of the tile idles

  grid_dependency_wait();
  allow_dependent_launch();
  // q (column tid of every head) and n_kv in one trip to memory.
  float qv[kHeads];
#pragma unroll
  for (int g = 0; g < kHeads; ++g) qv[g] = tid < hd && g < nh ? a.q[int64_t(h0 + g) * hd + tid] : 0.f;
  const int n_kv = min(*a.n_kv, a.n_ctx);
  if (n_kv <= 0) {  // nothing to attend to (outside the op's contract): a zero output
    if (split == 0)
      for (int i = tid; i < nh * hd; i += kDecodeThreads) a.out[int64_t(h0) * hd + i] = __float2half_rn(0.f);
    return;
  }
  // Splits of a multiple of kDecodeTile rows: as short as possible, at most kMaxSplits of them.
  const int n_tiles = (n_kv + kDecodeTile - 1) / kDecodeTile;
  const int split_len = kDecodeTile * ((n_tiles + kMaxSplits - 1) / kMaxSplits);
  const int n_used = (n_kv + split_len - 1) / split_len;
  if (split >= n_used) return;
  const int t_begin = split * split_len, t_end = min(t_begin + split_len, n_kv);

  if (tid < hd) {
#pragma unroll
    for (int g = 0; g < kHeads; ++g) qs[g][tid] = qv[g] * a.qscale;
  }
  if (tid < kHeads) {
    m_run[tid] = -INFINITY;
    l_run[tid] = 0.f;
  }
  // Scores: 4 consecutive threads per cache row. P·V: thread (grp, col) owns columns 2·col and
  // 2·col + 1 and the rows grp, grp + n_grp, ... of the tile.
  const int row = tid >> 2, part = tid & 3;
  const int n_col = hd / 2, n_grp = kDecodeThreads / n_col;
  const int grp = tid / n_col, col = tid - grp * n_col;
  const bool owns_cols = grp < n_grp;
  float o[kHeads][2];
#pragma unroll
  for (int g = 0; g < kHeads; ++g) o[g][0] = o[g][1] = 0.f;

  const __half* k_head = a.k_cache + int64_t(kvh) * a.n_ctx * hd;
  const __half* v_head = a.v_cache + int64_t(kvh) * a.n_ctx * hd;
  for (int t0 = t_begin; t0 < t_end; t0 += kDecodeTile) {
    const int len = min(kDecodeTile, t_end - t0);
    // The V rows of the tile, contiguous in the cache, copied while the scores are computed.
    const __half* v_tile = v_head + int64_t(t0) * hd;
    if (a.vec8) {
      for (int i = tid; i < len * hd / 8; i += kDecodeThreads) cp_async16(vs + i * 8, v_tile + i * 8, 16);
    } else {
      for (int i = tid; i < len * hd / 2; i += kDecodeThreads)
        reinterpret_cast<uint32_t*>(vs)[i] = reinterpret_cast<const uint32_t*>(v_tile)[i];
    }
    cp_async_commit();

    // Scores of row t0 + row: this thread takes the row's 8-value vectors part, part + 4, ...
    // (pairs in the unaligned layout); the K loads are issued before the barrier that publishes q.
    float s[kHeads];
#pragma unroll
    for (int g = 0; g < kHeads; ++g) s[g] = 0.f;
    const bool has_row = row < len;
    const __half* k_row = k_head + int64_t(t0 + row) * hd;
    if (a.vec8) {
      constexpr int kVecs = kMaxHeadDim / 8 / 4;  // vectors per thread at the largest head_dim
      uint4 kv[kVecs];
#pragma unroll
      for (int i = 0; i < kVecs; ++i) {
        const int c = part + 4 * i;
        kv[i] = has_row && 8 * c < hd ? *reinterpret_cast<const uint4*>(k_row + 8 * c) : make_uint4(0u, 0u, 0u, 0u);
      }
      if (t0 == t_begin) __syncthreads();  // qs, m_run and l_run are ready
#pragma unroll
      for (int i = 0; i < kVecs; ++i) {
        const int d = 8 * (part + 4 * i);
        if (d >= hd) break;
        const float2 k0 = half2_bits_to_float2(kv[i].x), k1 = half2_bits_to_float2(kv[i].y);
        const float2 k2 = half2_bits_to_float2(kv[i].z), k3 = half2_bits_to_float2(kv[i].w);
#pragma unroll
        for (int g = 0; g < kHeads; ++g) {
          const float4 qa = *reinterpret_cast<const float4*>(&qs[g][d]);
          const float4 qb = *reinterpret_cast<const float4*>(&qs[g][d + 4]);
          float v = s[g];
          v = fmaf(qa.x, k0.x, v);
          v = fmaf(qa.y, k0.y, v);
          v = fmaf(qa.z, k1.x, v);
          v = fmaf(qa.w, k1.y, v);
          v = fmaf(qb.x, k2.x, v);
          v = fmaf(qb.y, k2.y, v);
          v = fmaf(qb.z, k3.x, v);
          v = fmaf(qb.w, k3.y, v);
          s[g] = v;
        }
      }
    } else {
      if (t0 == t_begin) __syncthreads();  // qs, m_run and l_run are ready
      if (has_row) {
        for (int c = part; c < hd / 2; c += 4) {
          const float2 kk = half2_bits_to_float2(*reinterpret_cast<const uint32_t*>(k_row + 2 * c));
#pragma unroll
          for (int g = 0; g < kHeads; ++g) s[g] = fmaf(qs[g][2 * c + 1], kk.y, fmaf(qs[g][2 * c], kk.x, s[g]));
        }
      }
    }
#pragma unroll
    for (int g = 0; g < kHeads; ++g) {
      s[g] += __shfl_xor_sync(0xffffffffu, s[g], 1);
      s[g] += __shfl_xor_sync(0xffffffffu, s[g], 2);
    }
    if (part == 0) {
#pragma unroll
      for (int g = 0; g < kHeads; ++g) ps[g][row] = has_row ? s[g] : -INFINITY;
    }
    __syncthreads();

    // Online softmax, one warp per head: new maximum, weights of the tile, rescaled running sum.
    if (warp < kHeads) {
      const int g = warp;
      const float v0 = ps[g][lane], v1 = ps[g][lane + 32];
      const float m_old = m_run[g];
      const float m_new = fmaxf(m_old, warp_max(fmaxf(v0, v1)));  // finite: the tile has a row
      const float p0 = exp2f(v0 - m_new), p1 = exp2f(v1 - m_new);
      ps[g][lane] = p0;
      ps[g][lane + 32] = p1;
      const float sum = warp_sum(p0 + p1);
      __syncwarp();  // every lane has read m_run[g] before lane 0 replaces it
      if (lane == 0) {
        const float c = exp2f(m_old - m_new);  // 0 on the first tile
        alpha[g] = c;
        l_run[g] = l_run[g] * c + sum;
        m_run[g] = m_new;
      }
    }
    cp_async_wait<0>();
    __syncthreads();

    if (owns_cols) {
#pragma unroll
      for (int g = 0; g < kHeads; ++g) {
        o[g][0] *= alpha[g];
        o[g][1] *= alpha[g];
      }
#pragma unroll 4
      for (int t = grp; t < len; t += n_grp) {
        const float2 v = half2_bits_to_float2(reinterpret_cast<const uint32_t*>(vs + t * hd)[col]);
#pragma unroll
        for (int g = 0; g < kHeads; ++g) {
          const float p = ps[g][t];
          o[g][0] = fmaf(p, v.x, o[g][0]);
          o[g][1] = fmaf(p, v.y, o[g][1]);
        }
      }
    }
    __syncthreads();  // ps and vs are rewritten by the next tile
  }

  // Column sums over the row groups (in group order), then the block's output or partial.
  if (owns_cols) {
#pragma unroll
    for (int g = 0; g < kHeads; ++g)
      *reinterpret_cast<float2*>(&red[(grp * kHeads + g) * hd + 2 * col]) = make_float2(o[g][0], o[g][1]);
  }
  __syncthreads();
  for (int i = tid; i < nh * n_col; i += kDecodeThreads) {
    int g, d2;
    split_index(a, i, g, d2);
    float2 v = make_float2(0.f, 0.f);
    for (int r = 0; r < n_grp; ++r) {
      const float2 x = *reinterpret_cast<const float2*>(&red[(r * kHeads + g) * hd + 2 * d2]);
      v.x += x.x;
      v.y += x.y;
    }
    const int64_t h = h0 + g;
    if (n_used == 1) {
      const float inv = 1.0f / l_run[g];
      *reinterpret_cast<uint32_t*>(a.out + h * hd + 2 * d2) = float2_to_half2_bits(v.x * inv, v.y * inv);
    } else {
      *reinterpret_cast<float2*>(a.part_o + (h * gridDim.x + split) * hd + 2 * d2) = v;
      if (d2 == 0) {
        a.part_ml[(h * gridDim.x + split) * 2] = m_run[g];
        a.part_ml[(h * gridDim.x + split) * 2 + 1] = l_run[g];
      }
    }
  }
  if (n_used == 1) return;

  // The last split block of this (KV head, head tile) to arrive combines the partials.
  unsigned* counter = a.counters + kvh * gridDim.z + tile;
  __threadfence();
  __syncthreads();
  if (tid == 0) is_last = atomicAdd(counter, 1u) == unsigned(n_used - 1);
  __syncthreads();
  if (!is_last) return;
  __threadfence();

  float* weight = red;  // (kHeads, kMaxSplits): exp2(m_s - M) / L of each split
  if (warp < nh) {
    const int g = warp;
    const float* ml = a.part_ml + int64_t(h0 + g) * gridDim.x * 2;
    const bool has = lane < n_used;  // n_used <= kMaxSplits = 32
    const float m = has ? __ldcg(ml + 2 * lane) : -INFINITY;
    const float l = has ? __ldcg(ml + 2 * lane + 1) : 0.f;
    const float mx = warp_max(m);
    const float e = has ? exp2f(m - mx) : 0.f;
    const float total = warp_sum(l * e);
    weight[g * kMaxSplits + lane] = e / total;
  }
  __syncthreads();
  for (int i = tid; i < nh * n_col; i += kDecodeThreads) {
    int g, d2;
    split_index(a, i, g, d2);
    const float* po = a.part_o + int64_t(h0 + g) * gridDim.x * hd + 2 * d2;
    float2 v = make_float2(0.f, 0.f);
#pragma unroll 8
    for (int sp = 0; sp < n_used; ++sp) {
      const float2 x = __ldcg(reinterpret_cast<const float2*>(po + int64_t(sp) * hd));
      const float w = weight[g * kMaxSplits + sp];
      v.x = fmaf(x.x, w, v.x);
      v.y = fmaf(x.y, w, v.y);
    }
    *reinterpret_cast<uint32_t*>(a.out + int64_t(h0 + g) * hd + 2 * d2) = float2_to_half2_bits(v.x, v.y);
  }
  if (tid == 0) *counter = 0u;  // ready for the next call
}

using DecodeKernel = void (*)(DecodeArgs);

DecodeKernel decode_kernel(int heads) {
  switch (heads) {
    case 1: return attention_decode_kernel<1>;
    case 2: return attention_decode_kernel<2>;
    case 4: return attention_decode_kernel<4>;
    default: return attention_decode_kernel<8>;
  }
}

// ---- prefill -------------------------------------------------------------------------------------

constexpr int kPrefillRows = 64;  // query rows per block, 16 per warp
constexpr int kPrefillKeys = 64;  // cache rows per tile
constexpr int kPrefillThreads = 128;
constexpr int kPrefillMaxHeadDim = 128;

struct PrefillArgs {
  const float* q = nullptr;         // (m, q_stride)
  int64_t q_stride = 0;
  const __half* k_cache = nullptr;  // (n_head_kv, n_ctx, head_dim)
  const __half* v_cache = nullptr;
  __half* out = nullptr;            // (m, n_head, head_dim)
  int m = 0, pos0 = 0, n_head = 0, head_dim = 0, n_ctx = 0, group = 0;
  float qscale = 0;                 // scale · log2(e)
  bool vec8 = false;                // head_dim % 8 == 0 and 16-byte aligned caches
};

// kHdp: head_dim rounded up to 64 or 128 (the padding is zeros).
template <int kHdp>
__global__ void __launch_bounds__(kPrefillThreads) attention_prefill_kernel(const PrefillArgs a) {
  constexpr int kLd = kHdp + 8;  // halves per shared row: rows 16 bytes apart modulo 128, ldmatrix without conflicts
  constexpr int kSteps = kHdp / 16;
  __shared__ __align__(16) __half Ks[kPrefillKeys][kLd];
  __shared__ __align__(16) __half Vs[kPrefillKeys][kLd];

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;  // fragment row and column pair
  const int h = blockIdx.y, kvh = h / a.group;
  const int hd = a.head_dim;
  const int row0 = blockIdx.x * kPrefillRows + warp * 16;  // the warp's first query row
  const int max_key = a.pos0 + min(a.m, int(blockIdx.x + 1) * kPrefillRows) - 1;  // last cache row the block reads
  const int warp_max_key = a.pos0 + min(a.m - 1, row0 + 15);
  const int n_tiles = max_key / kPrefillKeys + 1;
  const __half* k_head = a.k_cache + int64_t(kvh) * a.n_ctx * hd;
  const __half* v_head = a.v_cache + int64_t(kvh) * a.n_ctx * hd;

  grid_dependency_wait();
  allow_dependent_launch();

  // Columns head_dim .. kHdp are zero (the vector loads below never write them).
  if (a.vec8 && hd < kHdp) {
    const int pad = (kHdp - hd) / 2;
    for (int i = tid; i < kPrefillKeys * pad; i += kPrefillThreads) {
      const int r = i / pad, c = hd + 2 * (i % pad);
      *reinterpret_cast<uint32_t*>(&Ks[r][c]) = 0u;
      *reinterpret_cast<uint32_t*>(&Vs[r][c]) = 0u;
    }
  }

  // Q fragments as fp16 hi and lo·2^11 parts: register r holds row g + 8·(r & 1), columns
  // 16·kk + 2t + 8·(r >> 1) and the one after.
  uint32_t qh[kSteps][4], ql[kSteps][4];
#pragma unroll
  for (int kk = 0; kk < kSteps; ++kk) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int row = row0 + g + (r & 1) * 8, c = kk * 16 + 2 * t + (r >> 1) * 8;
      float x0 = 0.f, x1 = 0.f;
      if (row < a.m && c < hd) {
        const float2 v = *reinterpret_cast<const float2*>(a.q + int64_t(row) * a.q_stride + int64_t(h) * hd + c);
        x0 = v.x * a.qscale;
        x1 = v.y * a.qscale;
      }
      const __half2 hi = __floats2half2_rn(x0, x1);
      const float2 hf = __half22float2(hi);
      qh[kk][r] = float2_to_half2_bits(hf.x, hf.y);
      ql[kk][r] = float2_to_half2_bits((x0 - hf.x) * 2048.f, (x1 - hf.y) * 2048.f);
    }
  }

  float o[kHdp / 8][4] = {};                   // output fragments: rows g, g+8; columns 8·dt + 2t, +1
  float m_r[2] = {-INFINITY, -INFINITY};       // running maximum of rows g and g+8
  float l_r[2] = {0.f, 0.f};                   // this thread's part of their running sums
  for (int kt = 0; kt < n_tiles; ++kt) {
    const int k0 = kt * kPrefillKeys;
    __syncthreads();  // the previous tile is no longer read
    // K, then V: rows past max_key are zeros (never attended; keeps stale cache values out of P·V).
    if (a.vec8) {
      const int per_row = hd / 8;
      for (int i = tid; i < kPrefillKeys * per_row; i += kPrefillThreads) {
        const int r = i / per_row, c = (i % per_row) * 8;
        const bool ok = k0 + r <= max_key;
        cp_async16(&Ks[r][c], ok ? k_head + int64_t(k0 + r) * hd + c : k_head, ok ? 16 : 0);
      }
      cp_async_commit();
      for (int i = tid; i < kPrefillKeys * per_row; i += kPrefillThreads) {
        const int r = i / per_row, c = (i % per_row) * 8;
        const bool ok = k0 + r <= max_key;
        cp_async16(&Vs[r][c], ok ? v_head + int64_t(k0 + r) * hd + c : v_head, ok ? 16 : 0);
      }
      cp_async_commit();
    } else {
      constexpr int kPairs = kHdp / 2;
      for (int i = tid; i < kPrefillKeys * kPairs; i += kPrefillThreads) {
        const int r = i / kPairs, c = (i % kPairs) * 2;
        const bool ok = k0 + r <= max_key && c < hd;
        const int64_t at = int64_t(k0 + r) * hd + c;
        *reinterpret_cast<uint32_t*>(&Ks[r][c]) = ok ? *reinterpret_cast<const uint32_t*>(k_head + at) : 0u;
        *reinterpret_cast<uint32_t*>(&Vs[r][c]) = ok ? *reinterpret_cast<const uint32_t*>(v_head + at) : 0u;
      }
      cp_async_commit();
      cp_async_commit();
    }
    cp_async_wait<1>();  // K is here
    __syncthreads();

    const bool active = k0 <= warp_max_key;  // a tile wholly after the warp's rows adds nothing
    float s[kPrefillKeys / 8][4];
    if (active) {
      float sl[kPrefillKeys / 8][4];
#pragma unroll
      for (int nt = 0; nt < kPrefillKeys / 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) s[nt][e] = sl[nt][e] = 0.f;
      }
#pragma unroll
      for (int kk = 0; kk < kSteps; ++kk) {
#pragma unroll
        for (int np = 0; np < kPrefillKeys / 16; ++np) {
          uint32_t kb[4];
          ldmatrix_x4(kb, &Ks[np * 16 + (lane >> 4) * 8 + (lane & 7)][kk * 16 + ((lane >> 3) & 1) * 8]);
          mma_16816(s[2 * np], qh[kk], kb[0], kb[1]);
          mma_16816(s[2 * np + 1], qh[kk], kb[2], kb[3]);
          mma_16816(sl[2 * np], ql[kk], kb[0], kb[1]);
          mma_16816(sl[2 * np + 1], ql[kk], kb[2], kb[3]);
        }
      }
      // Causal mask, then the online softmax of rows g (e = 0, 1) and g + 8 (e = 2, 3).
#pragma unroll
      for (int nt = 0; nt < kPrefillKeys / 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = k0 + nt * 8 + 2 * t + (e & 1);
          const int pos = a.pos0 + row0 + g + (e >> 1) * 8;
          s[nt][e] = key > pos ? -INFINITY : fmaf(sl[nt][e], 1.0f / 2048.f, s[nt][e]);
        }
      }
#pragma unroll
      for (int r2 = 0; r2 < 2; ++r2) {
        float mx = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < kPrefillKeys / 8; ++nt) mx = fmaxf(mx, fmaxf(s[nt][2 * r2], s[nt][2 * r2 + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(m_r[r2], mx);  // finite: tile 0 holds cache row 0 <= every position
        const float c = exp2f(m_r[r2] - m_new);
        m_r[r2] = m_new;
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < kPrefillKeys / 8; ++nt) {
          s[nt][2 * r2] = exp2f(s[nt][2 * r2] - m_new);
          s[nt][2 * r2 + 1] = exp2f(s[nt][2 * r2 + 1] - m_new);
          sum += s[nt][2 * r2] + s[nt][2 * r2 + 1];
        }
        l_r[r2] = l_r[r2] * c + sum;
#pragma unroll
        for (int dt = 0; dt < kHdp / 8; ++dt) {
          o[dt][2 * r2] *= c;
          o[dt][2 * r2 + 1] *= c;
        }
      }
    }
    cp_async_wait<0>();  // V is here
    __syncthreads();
    if (active) {
#pragma unroll
      for (int j = 0; j < kPrefillKeys / 16; ++j) {
        // P as the A operand: the score fragments of key tiles 2j and 2j+1, rounded to fp16.
        const uint32_t pa[4] = {float2_to_half2_bits(s[2 * j][0], s[2 * j][1]),
                                float2_to_half2_bits(s[2 * j][2], s[2 * j][3]),
                                float2_to_half2_bits(s[2 * j + 1][0], s[2 * j + 1][1]),
                                float2_to_half2_bits(s[2 * j + 1][2], s[2 * j + 1][3])};
#pragma unroll
        for (int dp = 0; dp < kHdp / 16; ++dp) {
          uint32_t vb[4];
          ldmatrix_x4_trans(vb, &Vs[j * 16 + (lane & 7) + ((lane >> 3) & 1) * 8][dp * 16 + (lane >> 4) * 8]);
          mma_16816(o[2 * dp], pa, vb[0], vb[1]);
          mma_16816(o[2 * dp + 1], pa, vb[2], vb[3]);
        }
      }
    }
  }

#pragma unroll
  for (int r2 = 0; r2 < 2; ++r2) {
    float l = l_r[r2];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const float inv = 1.0f / l;
    const int row = row0 + g + r2 * 8;
    if (row >= a.m) continue;
    __half* out_row = a.out + (int64_t(row) * a.n_head + h) * hd;
#pragma unroll
    for (int dt = 0; dt < kHdp / 8; ++dt) {
      const int c = dt * 8 + 2 * t;
      if (c < hd)
        *reinterpret_cast<uint32_t*>(out_row + c) = float2_to_half2_bits(o[dt][2 * r2] * inv, o[dt][2 * r2 + 1] * inv);
    }
  }
}

void check_heads(const char* op, int n_head, int n_head_kv, int head_dim, int n_ctx, int max_head_dim) {
  CUDA_REQUIRE(n_head >= 1 && n_head_kv >= 1 && n_head % n_head_kv == 0, op,
               "n_head must be a positive multiple of n_head_kv");
  CUDA_REQUIRE(head_dim >= 2 && head_dim % 2 == 0 && head_dim <= max_head_dim, op,
               "head_dim must be even and at most " + std::to_string(max_head_dim));
  CUDA_REQUIRE(n_ctx >= 1, op, "n_ctx must be positive");
}

}  // namespace

void CudaBackend::prepare_attention() {
  // The decode V tile for the largest head_dim.
  const int smem = kDecodeTile * kMaxHeadDim * int(sizeof(__half));
  for (int heads : {1, 2, 4, 8})
    CUDA_CHECK(cudaFuncSetAttribute(decode_kernel(heads), cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
}

void CudaBackend::attention_decode(const AttentionDecodeDesc& d) {
  const char* op = "attention_decode";
  check_heads(op, d.n_head, d.n_head_kv, d.head_dim, d.n_ctx, kMaxHeadDim);
  CUDA_REQUIRE(d.q && d.k_cache && d.v_cache && d.out && d.n_kv, op, "a pointer is missing");
  const int group = d.n_head / d.n_head_kv;
  const int heads = group > 4 ? 8 : group > 2 ? 4 : group;  // a power of two covering the group, at most 8
  const int head_tiles = int(ceil_div(group, heads));
  CUDA_REQUIRE(int64_t(d.n_head_kv) * head_tiles <= kAttnCounters, op, "too many KV heads");

  // The grid covers the most splits a context of n_ctx rows can use; the kernel picks the split
  // length from *n_kv and the blocks past the last split exit.
  const int n_splits = int(std::min<int64_t>(ceil_div(d.n_ctx, kDecodeTile), kMaxSplits));
  CUDA_REQUIRE(int64_t(d.n_head) * n_splits * (d.head_dim + 2) <= int64_t(kAttnPartialFloats), op,
               "too many heads for the split workspace");
  DecodeArgs a;
  a.q = d.q;
  a.k_cache = reinterpret_cast<const __half*>(d.k_cache);
  a.v_cache = reinterpret_cast<const __half*>(d.v_cache);
  a.out = reinterpret_cast<__half*>(d.out);
  a.n_kv = d.n_kv;
  a.head_dim = d.head_dim;
  a.n_ctx = d.n_ctx;
  a.hd_shift = (d.head_dim & (d.head_dim - 1)) == 0 ? __builtin_ctz(unsigned(d.head_dim)) : -1;
  a.group = group;
  a.qscale = d.scale * kLog2e;
  a.vec8 = d.head_dim % 8 == 0 && aligned_to(d.k_cache, 16) && aligned_to(d.v_cache, 16);
  a.part_o = attn_partials_.as<float>();
  a.part_ml = a.part_o + int64_t(d.n_head) * n_splits * d.head_dim;
  a.counters = attn_counters_.as<unsigned>();
  const size_t smem = size_t(kDecodeTile) * size_t(d.head_dim) * sizeof(__half);
  launch(decode_kernel(heads), dim3(unsigned(n_splits), unsigned(d.n_head_kv), unsigned(head_tiles)),
         dim3(kDecodeThreads), smem, a);
}

void CudaBackend::attention_prefill(const AttentionPrefillDesc& d) {
  const char* op = "attention_prefill";
  check_heads(op, d.n_head, d.n_head_kv, d.head_dim, d.n_ctx, kPrefillMaxHeadDim);
  CUDA_REQUIRE(d.q && d.k_cache && d.v_cache && d.out, op, "a pointer is missing");
  CUDA_REQUIRE(d.m >= 1 && d.pos0 >= 0 && int64_t(d.pos0) + d.m <= d.n_ctx, op,
               "rows pos0 .. pos0+m-1 must lie inside the cache");
  const int64_t q_dim = int64_t(d.n_head) * d.head_dim;
  const int64_t q_stride = d.q_row_stride ? d.q_row_stride : q_dim;
  CUDA_REQUIRE(q_stride >= q_dim && q_stride % 2 == 0, op, "q_row_stride must be even and at least n_head·head_dim");
  CUDA_REQUIRE(aligned_to(d.q, 8), op, "q must be 8-byte aligned");

  PrefillArgs a;
  a.q = d.q;
  a.q_stride = q_stride;
  a.k_cache = reinterpret_cast<const __half*>(d.k_cache);
  a.v_cache = reinterpret_cast<const __half*>(d.v_cache);
  a.out = reinterpret_cast<__half*>(d.out);
  a.m = int(d.m);
  a.pos0 = d.pos0;
  a.n_head = d.n_head;
  a.head_dim = d.head_dim;
  a.n_ctx = d.n_ctx;
  a.group = d.n_head / d.n_head_kv;
  a.qscale = d.scale * kLog2e;
  a.vec8 = d.head_dim % 8 == 0 && aligned_to(d.k_cache, 16) && aligned_to(d.v_cache, 16);
  const dim3 grid(unsigned(ceil_div(d.m, kPrefillRows)), unsigned(d.n_head));
  if (d.head_dim <= 64) {
    launch(attention_prefill_kernel<64>, grid, dim3(kPrefillThreads), 0, a);
  } else {
    launch(attention_prefill_kernel<128>, grid, dim3(kPrefillThreads), 0, a);
  }
}

}  // namespace tllm::cuda
