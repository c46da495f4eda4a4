// A decode step's layer stack as one persistent kernel, timed on synthetic weights: the work of 24
// Qwen2.5-0.5B layers at batch 1 (QKV projection with rmsnorm and bias, rope and KV append,
// attention over the cache, output projection and residual add, rmsnorm and gate/up with SwiGLU,
// down projection and residual add), W8 weights with fp16 group scales as tiny-llm stores them.
// Timing only: the arithmetic is tiny-llm's (int8 widened exactly, fp32 products), but the result
// is not compared with anything, and the lm_head is left out.
//
// One block per SM (cooperative launch): 15 compute warps that run the ops one after another, and
// a copy warp. Each block owns a contiguous share of every weighted op's rows; the shares' weights
// and scales live in shared memory, one area per op (about 121 KB in all), filled by bulk copies
// (cp.async.bulk, completion on an mbarrier). As soon as the compute warps finish an op, the copy
// warp asks for the op's next-layer share, so every op finds its weights in place, a layer ahead.
// Ops hand off through vectors of 64-bit words, each a value and the number of the op that wrote it
// (see persistent_layers.cu): a thread polls all the words it stages at once, so that it sees them
// one trip to memory after they are written. Whatever an op reads that an earlier op wrote (the
// residual, the norm weights, the bias, the cache rows) is requested before it waits for its input.
// Each warp keeps its part of x in registers for all its rows. Attention: blocks of one or seven
// query heads (one KV head) and a split of at most 256 cache rows, copied into shared memory before
// the wait; the output projection's stage merges the splits.
//
// Prints microseconds per step and per layer for three context lengths, for the whole work and for
// reductions of it that show where the time goes (see the variants in main).
// Built as ./build/persistent_decode_experiment with the CUDA backend; runs on sm_90 (bulk copies).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "backends/cuda/cuda_common.cuh"
#include "bench/experiments/experiment.cuh"

namespace {

constexpr int kE = 896, kF = 4864, kHeads = 14, kKvHeads = 2, kGroup = kHeads / kKvHeads, kHd = 64;
constexpr int kQkv = (kHeads + 2 * kKvHeads) * kHd;
constexpr int kLayers = 24, kCtx = 4096;
constexpr int kThreads = 480, kWarps = kThreads / 32;  // compute threads; one more warp asks for the copies
constexpr int kMinBlocks = 128;                 // the shared-memory shares are sized for this many blocks
constexpr int kSplitRows = 256;                 // cache rows of one attention split, at most
constexpr int kMaxSplits = kCtx / kSplitRows;
constexpr int kPart = kHd + 2;                  // a head's split result: o (not normalised), max, sum
constexpr int kMergeSplits = 2;                 // splits the merge polls at once
constexpr float kEps = 1e-6f, kTheta = 1000000.0f;
enum Op { kQkvOp, kAttnOp, kOutOp, kGateUpOp, kDownOp, kOps };
enum Weighted { kQkvW, kOutW, kGateUpW, kDownW, kWeighted };

struct LayerWeights {
  const int8_t* q[kWeighted];  // qkv (kQkv, kE), out (kE, kE), gate/up (2 kF, kE), down (kE, kF)
  const __half* s[kWeighted];  // their scales, one per 32 values of a row
  const float* bias;           // (kQkv)
  const float* norm[2];        // attention and FFN rmsnorm weights (kE)
  __half* k_cache;             // (kKvHeads, kCtx, kHd)
  __half* v_cache;
};
__constant__ LayerWeights c_layer[2][kLayers];  // [1]: every layer with layer 0's weights (see main)

struct Vectors {
  uint64_t* x;      // (kE) residual stream after a layer, tagged
  uint64_t* x2;     // (kE) residual stream after the attention block
  uint64_t* qkv;    // (kQkv)
  uint64_t* attn;   // (kMaxSplits, kHeads, kPart)
  uint64_t* ffn;    // (kF)
  const float* x0;  // (kE) the step's embedding row
  uint32_t* epoch;  // launches so far: makes every launch's tags new
  int n_kv;         // cache rows after this step's append
  int splits;       // attention splits per head
  int heads;        // query heads per attention block (1 or kGroup)
  int table;        // c_layer[table]
  int chunk;        // bytes per copy of the copy warp (0: an op's share at once)
  int period;       // cycles between two of its copies
};

// A weighted op's shape: rows (pairs for gate/up), row length, matrices (gate/up: 2).
struct Shape {
  int rows, k, parts;
};
__host__ __device__ constexpr Shape shape_of(int w) {
  return w == kQkvW ? Shape{kQkv, kE, 1} : w == kOutW ? Shape{kE, kE, 1} : w == kGateUpW ? Shape{kF, kE, 2} : Shape{kE, kF, 1};
}
__host__ __device__ constexpr int max_share(int rows) { return (rows + kMinBlocks - 1) / kMinBlocks; }
__host__ __device__ constexpr int scale_area(const Shape& s) { return max_share(s.rows) * (s.k / 32) * 2 + 32; }
__host__ __device__ constexpr int part_bytes(const Shape& s) { return (max_share(s.rows) * s.k + scale_area(s) + 15) / 16 * 16; }
__host__ __device__ constexpr int op_bytes(const Shape& s) { return s.parts * part_bytes(s); }
__host__ __device__ constexpr int area_offset(int w) { return w == 0 ? 0 : area_offset(w - 1) + op_bytes(shape_of(w - 1)); }
constexpr int kWeightBytes = area_offset(kWeighted);
constexpr int kKvOffset = kWeightBytes;                                    // K then V rows of a split
constexpr int kXsOffset = kKvOffset + 2 * kSplitRows * kHd * 2;            // staged input (kF floats)
constexpr int kScoresOffset = kXsOffset + kF * 4;                          // (kGroup, kSplitRows + 1)
constexpr int kQOffset = kScoresOffset + (kGroup * (kSplitRows + 1) * 4 + 15) / 16 * 16;  // q (kGroup, kHd), k, v
constexpr int kPvOffset = kQOffset + (kGroup + 2) * kHd * 4;              // PV partial sums (kThreads)
constexpr int kRedOffset = kPvOffset + kThreads * 4;                       // row results, sums, head stats
constexpr int kStatsAt = 2 * max_share(kF) + kWarps + kWarps * max_share(kE);  // (floats into the area)
constexpr int kSmemBytes = kRedOffset + (kStatsAt + kGroup * 2) * 4;

using tllm::cuda::dot_i8x4;
using tllm::cuda::mbarrier_arrive_expect;
using tllm::cuda::mbarrier_wait;
using tllm::cuda::smem_address;
using tllm::cuda::warp_max;
using tllm::cuda::warp_sum;

// The compute warps' barrier (the copy warp, kWarps, never joins it).
__device__ __forceinline__ void compute_sync() { asm volatile("bar.sync 1, %0;" ::"n"(kThreads) : "memory"); }

// Sum over the compute threads; every one gets the result.
__device__ __forceinline__ float compute_sum(float v, float* scratch) {
  v = warp_sum(v);
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
  compute_sync();
  float total = 0.f;
  for (int w = 0; w < kWarps; ++w) total += scratch[w];
  compute_sync();
  return total;
}

__device__ __forceinline__ void bulk_copy(void* dst, const void* src, uint32_t bytes, uint32_t bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   smem_address(dst)),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
#endif
}

__device__ __forceinline__ void prefetch_l2(const void* src, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(src), "r"(bytes) : "memory");
#endif
}

// Block b's rows of an op with n rows: [n b / blocks, n (b + 1) / blocks).
__device__ __forceinline__ int share_begin(int n, int b) { return int(int64_t(n) * b / int(gridDim.x)); }

// Where the scales of rows [r0, ...) of a k-long matrix start in its copy: bulk copies move 16-byte
// aligned ranges, so the copy starts at the 16-byte boundary below the first scale.
__device__ __forceinline__ int scale_shift(int r0, int k) { return (r0 * (k / 32) * 2) & 15; }

// One thread: asks for bytes [lo, hi) of layer L's share of weighted op w (its parts' weights one after the other) into
// the op's area; the first range also arms the mbarrier for the whole share and copies the scales.
// kL2Only: the same bytes only brought into L2 (no copy, no mbarrier).
template <bool kL2Only = false>
__device__ void fetch_range(const LayerWeights& L, int w, uint8_t* smem, uint32_t bar, uint32_t lo, uint32_t hi) {
  const Shape sh = shape_of(w);
  const int r0 = share_begin(sh.rows, blockIdx.x), r1 = share_begin(sh.rows, blockIdx.x + 1);
  const int s0 = r0 * (sh.k / 32) * 2, s1 = r1 * (sh.k / 32) * 2;
  const uint32_t sbytes = uint32_t(((s1 + 15) & ~15) - (s0 & ~15));
  const uint32_t wbytes = uint32_t((r1 - r0) * sh.k);
  if (!kL2Only && lo == 0) mbarrier_arrive_expect(bar, sh.parts * (wbytes + sbytes));
  for (int p = 0; p < sh.parts; ++p) {
    uint8_t* area = smem + area_offset(w) + p * part_bytes(sh);
    const int row0 = r0 + p * sh.rows;  // gate/up: the up rows follow the gate rows
    const auto* q = reinterpret_cast<const uint8_t*>(L.q[w]) + int64_t(row0) * sh.k;
    const auto* s = reinterpret_cast<const uint8_t*>(L.s[w]) + ((int64_t(row0) * (sh.k / 32) * 2) & ~int64_t(15));
    const uint32_t a = max(lo, p * wbytes), e = min(hi, (p + 1) * wbytes);
    if (e > a) {
      if (kL2Only) prefetch_l2(q + (a - p * wbytes), e - a);
      else bulk_copy(area + (a - p * wbytes), q + (a - p * wbytes), e - a, bar);
    }
    if (lo == 0) {
      if (kL2Only) prefetch_l2(s, sbytes);
      else bulk_copy(area + max_share(sh.rows) * sh.k, s, sbytes, bar);
    }
  }
}
// The weight bytes of this block's share of weighted op w (all its parts).
__device__ __forceinline__ uint32_t share_bytes(int w) {
  const Shape sh = shape_of(w);
  return uint32_t(sh.parts * (share_begin(sh.rows, blockIdx.x + 1) - share_begin(sh.rows, blockIdx.x)) * sh.k);
}
// One thread: asks for layer L's whole share of weighted op w.
__device__ __forceinline__ void fetch(const LayerWeights& L, int w, uint8_t* smem, uint32_t bar) {
  fetch_range(L, w, smem, bar, 0, share_bytes(w));
}

// x in shared memory as fp32 units of 4 values, vector c's units rotated by c / 2 (bank spread).
__device__ __forceinline__ int x_unit(int c, int j) { return 4 * c + ((j + (c >> 1)) & 3); }

// Four tagged words at p (32-byte aligned) once all carry tag.
__device__ __forceinline__ float4 poll4(const uint64_t* p, uint32_t tag) {
  float4 v;
  while (!load_tagged4(p, tag, v)) {
  }
  return v;
}

// Polls the tagged words units u, u + kThreads, ... (4 words each) of a vector until all carry tag.
template <int kPer>
__device__ __forceinline__ void poll_units(const uint64_t* tagged, int units, uint32_t tag, float4 (&v)[kPer]) {
  bool all;
  do {
    all = true;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int u = int(threadIdx.x) + i * kThreads;
      if (u >= units) continue;
      const bool tagged_now = load_tagged4(tagged + 4 * u, tag, v[i]);
      all = all && tagged_now;
    }
  } while (!all);
}

// Stages kN values (a multiple of 4) into xs: tagged (each once it carries `tag`) or plain, with the
// rmsnorm when norm_w is given (values rounded to fp16, as the engine's prologue writes them).
template <int kN>
__device__ __forceinline__ void stage(const uint64_t* tagged, const float* plain, uint32_t tag, const float* norm_w,
                                      float4* xs, float* scratch) {
  constexpr int kUnits = kN / 4, kPer = (kUnits + kThreads - 1) / kThreads;
  float4 v[kPer], nw[kPer];
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int u = int(threadIdx.x) + i * kThreads;
    if (norm_w && u < kUnits) nw[i] = reinterpret_cast<const float4*>(norm_w)[u];
  }
  if (tagged) {
    poll_units<kPer>(tagged, kUnits, tag, v);
  } else {
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int u = int(threadIdx.x) + i * kThreads;
      if (u < kUnits) v[i] = reinterpret_cast<const float4*>(plain)[u];
    }
  }
  if (norm_w) {
    float ss = 0.f;
#pragma unroll
    for (int i = 0; i < kPer; ++i)
      if (int(threadIdx.x) + i * kThreads < kUnits)
        ss += v[i].x * v[i].x + v[i].y * v[i].y + v[i].z * v[i].z + v[i].w * v[i].w;
    const float inv = rsqrtf(compute_sum(ss, scratch) / float(kN) + kEps);
    auto r = [&](float a, float w) { return __half2float(__float2half_rn(a * inv * w)); };
#pragma unroll
    for (int i = 0; i < kPer; ++i) v[i] = make_float4(r(v[i].x, nw[i].x), r(v[i].y, nw[i].y), r(v[i].z, nw[i].z), r(v[i].w, nw[i].w));
  }
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int u = int(threadIdx.x) + i * kThreads;
    if (u < kUnits) xs[x_unit(u / 4, u % 4)] = v[i];
  }
  compute_sync();
}

// A lane's share of x for rows of kE values: chunks lane and lane + 32 (16 values each), read from
// xs once per op and used for every row the warp takes.
struct XShare {
  float4 x[2][4];
};
__device__ __forceinline__ void load_x(const float4* xs, int lane, XShare& r) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int c = lane + 32 * i;
#pragma unroll
    for (int j = 0; j < 4; ++j) r.x[i][j] = c < kE / 16 ? xs[x_unit(c, j)] : make_float4(0.f, 0.f, 0.f, 0.f);
  }
}

// 16 weights of chunk q against x, times the chunk's scale.
__device__ __forceinline__ float dot_chunk(uint4 q, const float4 (&x)[4], __half scale, float acc) {
  float d = dot_i8x4(q.x, x[0], 0.f);
  d = dot_i8x4(q.y, x[1], d);
  d = dot_i8x4(q.z, x[2], d);
  d = dot_i8x4(q.w, x[3], d);
  return fmaf(d, __half2float(scale), acc);
}

// This lane's part of row `row` (of kE values) of a share whose scales start at byte `shift` of
// their copy.
template <bool kArithmetic>
__device__ __forceinline__ float dot_row(const uint8_t* area, int max_rows, int shift, int row, const XShare& x, int lane) {
  if (!kArithmetic) return x.x[0][0].x;
  const uint8_t* w = area + row * kE;
  const __half* s = reinterpret_cast<const __half*>(area + max_rows * kE + shift) + row * (kE / 32);
  float acc = 0.f;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int c = lane + 32 * i;
    if (c < kE / 16) acc = dot_chunk(*reinterpret_cast<const uint4*>(w + 16 * c), x.x[i], s[c / 2], acc);
  }
  return acc;
}

// Attention of one block: query heads h0 .. h0 + heads - 1 (one KV head g) over split `split` of the
// cache rows before the new one (the last split also takes the new row, which it appends).
__device__ void attention(const LayerWeights& L, const Vectors& v, int h0, int heads, int split, uint32_t tag_in,
                          uint32_t tag_out, uint8_t* smem, uint32_t kv_bar, uint32_t parity) {
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const int g = h0 / kGroup, pos = v.n_kv - 1;
  const int r0 = pos * split / v.splits, r1 = pos * (split + 1) / v.splits;
  const bool last = split == v.splits - 1;
  const int rows = r1 - r0, all_rows = rows + (last ? 1 : 0);
  const __half2* kc = reinterpret_cast<const __half2*>(smem + kKvOffset);
  const __half* vc = reinterpret_cast<const __half*>(smem + kKvOffset + kSplitRows * kHd * 2);
  float* scores = reinterpret_cast<float*>(smem + kScoresOffset);  // (heads, kSplitRows + 1)
  float* q = reinterpret_cast<float*>(smem + kQOffset);            // (heads, kHd), then k, v
  float* kn = q + heads * kHd;
  float* vn = kn + kHd;
  float* pv = reinterpret_cast<float*>(smem + kPvOffset);
  float* stats = reinterpret_cast<float*>(smem + kRedOffset) + kStatsAt;  // (heads, 2)
  if (t == 0) {
    const uint32_t bytes = uint32_t(rows * kHd * 2);
    mbarrier_arrive_expect(kv_bar, 2 * bytes);
    if (bytes) {
      bulk_copy(smem + kKvOffset, L.k_cache + (int64_t(g) * kCtx + r0) * kHd, bytes, kv_bar);
      bulk_copy(smem + kKvOffset + kSplitRows * kHd * 2, L.v_cache + (int64_t(g) * kCtx + r0) * kHd, bytes, kv_bar);
    }
  }
  // q of the block's heads, then k and v of the KV head: 16 units of 4 words each.
  const int units = (heads + 2) * (kHd / 4);
  if (t < units) {
    const int part = t / (kHd / 4), j = t % (kHd / 4);
    const int at = part < heads ? (h0 + part) * kHd : part == heads ? (kHeads + g) * kHd : (kHeads + kKvHeads + g) * kHd;
    reinterpret_cast<float4*>(q)[t] = poll4(v.qkv + at + 4 * j, tag_in);
  }
  compute_sync();
  if (t < (heads + 1) * (kHd / 2)) {  // Neox rope on q and k: pairs (i, i + 32)
    const int i = t % (kHd / 2);
    float* vec = q + (t / (kHd / 2)) * kHd;
    float sn, cs;
    sincosf(float(pos) * powf(kTheta, -2.0f * float(i) / float(kHd)), &sn, &cs);
    const float a = vec[i], b = vec[i + kHd / 2];
    vec[i] = a * cs - b * sn;
    vec[i + kHd / 2] = a * sn + b * cs;
  }
  compute_sync();
  if (last && h0 % kGroup == 0 && t < kHd) {
    L.k_cache[(int64_t(g) * kCtx + pos) * kHd + t] = __float2half_rn(kn[t]);
    L.v_cache[(int64_t(g) * kCtx + pos) * kHd + t] = __float2half_rn(vn[t]);
  }
  mbarrier_wait(kv_bar, parity);
  for (int i = t; i < heads * all_rows; i += kThreads) {
    const int hh = i / all_rows, r = i % all_rows;
    const float* qh = q + hh * kHd;
    float acc = 0.f;
    if (r < rows) {
      for (int j = 0; j < kHd / 2; ++j) {  // pair (r + j) mod 32 first: lanes of a warp in distinct banks
        const int jj = (j + r) & (kHd / 2 - 1);
        const float2 k2 = __half22float2(kc[r * (kHd / 2) + jj]);
        acc = fmaf(qh[2 * jj], k2.x, fmaf(qh[2 * jj + 1], k2.y, acc));
      }
    } else {
      for (int j = 0; j < kHd; ++j) acc = fmaf(qh[j], kn[j], acc);
    }
    scores[hh * (kSplitRows + 1) + r] = acc * 0.125f;
  }
  compute_sync();
  if (warp < heads) {  // softmax over the split, a warp per head
    float* sc = scores + warp * (kSplitRows + 1);
    float mx = -INFINITY;
    for (int r = lane; r < all_rows; r += 32) mx = fmaxf(mx, sc[r]);
    mx = warp_max(mx);
    float sum = 0.f;
    for (int r = lane; r < all_rows; r += 32) {
      const float p = __expf(sc[r] - mx);
      sc[r] = p;
      sum += p;
    }
    sum = warp_sum(sum);
    if (lane == 0) {
      stats[2 * warp] = mx;
      stats[2 * warp + 1] = sum;
    }
  }
  compute_sync();
  const int parts = kThreads / (heads * kHd);  // PV: thread (part, head, d) sums rows part, part + parts, ...
  {
    const int part = t / (heads * kHd), hh = (t / kHd) % heads, d = t % kHd;
    float o = 0.f;
    if (part < parts) {
      const float* p = scores + hh * (kSplitRows + 1);
      for (int r = part; r < all_rows; r += parts) o = fmaf(p[r], r < rows ? __half2float(vc[r * kHd + d]) : vn[d], o);
    }
    pv[t] = o;
  }
  compute_sync();
  if (t < heads * kHd) {
    float o = 0.f;
    for (int p = 0; p < parts; ++p) o += pv[p * heads * kHd + t];
    const int hh = t / kHd, d = t % kHd;
    uint64_t* out = v.attn + (int64_t(split) * kHeads + h0 + hh) * kPart;
    store_tagged(out + d, tag_out, o);
    if (d == 0) store_tagged(out + kHd, tag_out, stats[2 * hh]);
    if (d == 1) store_tagged(out + kHd + 1, tag_out, stats[2 * hh + 1]);
  }
  compute_sync();
}

// Stages the attention output (kE values) into xs, merging the splits of each head: a thread polls
// all its values of kMergeSplits splits at once.
__device__ void stage_attention(const Vectors& v, uint32_t tag, float4* xs) {
  constexpr int kPer = (kE + kThreads - 1) / kThreads;
  float m[kPer], l[kPer], o[kPer];
#pragma unroll
  for (int i = 0; i < kPer; ++i) m[i] = -INFINITY, l[i] = 0.f, o[i] = 0.f;
  for (int s0 = 0; s0 < v.splits; s0 += kMergeSplits) {
    float val[kPer][kMergeSplits][3];
    bool all;
    do {
      all = true;
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        const int t = int(threadIdx.x) + i * kThreads;
#pragma unroll
        for (int j = 0; j < kMergeSplits; ++j) {
          if (t >= kE || s0 + j >= v.splits) continue;
          const uint64_t* p = v.attn + (int64_t(s0 + j) * kHeads + t / kHd) * kPart;
          const uint64_t w[3] = {load_relaxed(p + t % kHd), load_relaxed(p + kHd), load_relaxed(p + kHd + 1)};
#pragma unroll
          for (int e = 0; e < 3; ++e) {
            all = all && uint32_t(w[e] >> 32) == tag;
            val[i][j][e] = __uint_as_float(uint32_t(w[e]));
          }
        }
      }
    } while (!all);
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
#pragma unroll
      for (int j = 0; j < kMergeSplits; ++j) {
        if (s0 + j >= v.splits) continue;
        const float mn = fmaxf(m[i], val[i][j][1]);
        const float a = __expf(m[i] - mn), b = __expf(val[i][j][1] - mn);
        o[i] = o[i] * a + val[i][j][0] * b;
        l[i] = l[i] * a + val[i][j][2] * b;
        m[i] = mn;
      }
    }
  }
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int t = int(threadIdx.x) + i * kThreads;
    if (t < kE) reinterpret_cast<float*>(xs)[x_unit(t / 16, (t / 4) % 4) * 4 + t % 4] = o[i] / l[i];
  }
  compute_sync();
}

// kWeights false: every layer computes with layer 0's weights, copied once (no weight traffic);
// kAttention false: each head's output is its q (no attention); kArithmetic false: the GEMVs skip
// their products (each row's value is a staged input); kCopyWarp false: the last compute warp asks
// for the copies itself, at the end of each op.
// kL2Prefetch (with kWeights false): the copy warp still brings each layer's weights into L2, as
// the copies would, so that only the copies' own cost is missing.
template <bool kWeights, bool kAttention, bool kArithmetic = true, bool kCopyWarp = true, bool kL2Prefetch = false>
__global__ void __launch_bounds__(kThreads + 32, 1) decode_layers(Vectors v) {
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ __align__(8) uint64_t bars[kWeighted + 1];
  __shared__ LayerWeights layers[kLayers];  // c_layer, read from shared memory by the ops and the copies
  __shared__ int ops_done;                  // weighted ops finished by the compute warps (for the copy warp)
  float4* xs = reinterpret_cast<float4*>(smem + kXsOffset);
  float* red = reinterpret_cast<float*>(smem + kRedOffset);  // (2 max_share(kF)) row results
  float* scratch = red + 2 * max_share(kF);                  // (kWarps)
  float* sums = scratch + kWarps;                            // (kWarps, max_share(kE)) down's partial sums
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5, b = blockIdx.x;
  const uint32_t epoch = *v.epoch;
  auto tag = [&](int layer, int op) { return epoch * uint32_t(kLayers * kOps + 1) + uint32_t(layer * kOps + op) + 1; };
  auto bar = [&](int i) { return smem_address(&bars[i]); };
  for (int i = t; i < int(sizeof layers / 4); i += kThreads + 32)
    reinterpret_cast<uint32_t*>(layers)[i] = reinterpret_cast<const uint32_t*>(c_layer[v.table])[i];
  if (t == 0) {
    for (int i = 0; i <= kWeighted; ++i) tllm::cuda::mbarrier_init_cluster(bar(i), 1);
    ops_done = 0;
  }
  __syncthreads();
  const int copier = kCopyWarp ? kThreads : kThreads - 32;
  if (t == copier)
    for (int w = 0; w < kWeighted; ++w) fetch(layers[0], w, smem, bar(w));
  if (warp == kWarps) {  // the copy warp: each op's next-layer weights once the op is done
    if (kCopyWarp && (kWeights || kL2Prefetch) && lane == 0) {
      // Refills in the order the ops finish; with v.chunk, in pieces of v.chunk bytes at most one
      // per v.period cycles (a steady stream rather than one burst per op).
      constexpr int kRefills = (kLayers - 1) * kWeighted;
      long long next = clock64();
      uint32_t off = 0;
      for (int h = 0; h < kRefills;) {
        while (*static_cast<volatile int*>(&ops_done) < h + 1) {
        }
        const int l = h / kWeighted + 1, w = h % kWeighted;
        const uint32_t bytes = share_bytes(w);
        if (v.chunk == 0) {
          fetch_range<kL2Prefetch>(layers[l], w, smem, bar(w), 0, bytes);
          ++h;
          continue;
        }
        while (clock64() < next) {
        }
        const uint32_t hi = min(bytes, off + uint32_t(v.chunk));
        fetch_range<kL2Prefetch>(layers[l], w, smem, bar(w), off, hi);
        next = clock64() + v.period;
        off = hi;
        if (off == bytes) off = 0, ++h;
      }
    }
    return;
  }
  const int attn_blocks = (kAttention ? kHeads / v.heads * v.splits : kHeads);
  auto refetch = [&](int l, int w) {  // at the end of weighted op w of layer l (the compute warps in step)
    if (!(kWeights || kL2Prefetch) || l + 1 >= kLayers) return;
    if (!kCopyWarp && t == copier) fetch(layers[l + 1], w, smem, bar(w));
    if (kCopyWarp && t == 0) *static_cast<volatile int*>(&ops_done) = l * kWeighted + w + 1;
  };
  auto weights_ready = [&](int l, int w) {
    if (kWeights || l == 0) mbarrier_wait(bar(w), uint32_t(l & 1));
  };
  for (int l = 0; l < kLayers; ++l) {
    const LayerWeights& L = layers[l];
    const uint32_t x_tag = l == 0 ? 0 : tag(l - 1, kDownOp);

    {  // QKV: a warp per row
      const int r0 = share_begin(kQkv, b), n = share_begin(kQkv, b + 1) - r0;
      const float bias = warp < n ? L.bias[r0 + warp] : 0.f;
      stage<kE>(l ? v.x : nullptr, v.x0, x_tag, L.norm[0], xs, scratch);
      weights_ready(l, kQkvW);
      if (warp < n) {
        XShare x;
        load_x(xs, lane, x);
        const float d = warp_sum(
            dot_row<kArithmetic>(smem + area_offset(kQkvW), max_share(kQkv), scale_shift(r0, kE), warp, x, lane));
        if (lane == 0) store_tagged(v.qkv + r0 + warp, tag(l, kQkvOp), d + bias);
      }
      compute_sync();
      refetch(l, kQkvW);
    }
    if (b < attn_blocks) {
      if (kAttention) {
        const int group = b / v.splits;
        attention(L, v, group * v.heads, v.heads, b % v.splits, tag(l, kQkvOp), tag(l, kAttnOp), smem, bar(kWeighted),
                  uint32_t(l & 1));
      } else if (t < kHd) {
        uint64_t* out = v.attn + int64_t(b) * kPart;
        store_tagged(out + t, tag(l, kAttnOp), wait_tagged(v.qkv + b * kHd + t, tag(l, kQkvOp)));
        if (t < 2) store_tagged(out + kHd + t, tag(l, kAttnOp), t == 0 ? 0.f : 1.f);
      }
    }
    {  // Output projection + residual: a warp per row
      const int r0 = share_begin(kE, b), n = share_begin(kE, b + 1) - r0;
      const float old = warp < n && lane == 0 ? (l ? wait_tagged(v.x + r0 + warp, x_tag) : v.x0[r0 + warp]) : 0.f;
      stage_attention(v, tag(l, kAttnOp), xs);
      weights_ready(l, kOutW);
      if (warp < n) {
        XShare x;
        load_x(xs, lane, x);
        const float d =
            warp_sum(dot_row<kArithmetic>(smem + area_offset(kOutW), max_share(kE), scale_shift(r0, kE), warp, x, lane));
        if (lane == 0) store_tagged(v.x2 + r0 + warp, tag(l, kOutOp), old + d);
      }
      compute_sync();
      refetch(l, kOutW);
    }
    {  // gate/up + SwiGLU: rows 0 .. n - 1 gate, n .. 2n - 1 up, a warp per row
      const int j0 = share_begin(kF, b), n = share_begin(kF, b + 1) - j0;
      stage<kE>(v.x2, nullptr, tag(l, kOutOp), L.norm[1], xs, scratch);
      weights_ready(l, kGateUpW);
      const Shape sh = shape_of(kGateUpW);
      XShare x;
      load_x(xs, lane, x);
      for (int r = warp; r < 2 * n; r += kWarps) {
        const int part = r < n ? 0 : 1, row = r - part * n;
        const float d = warp_sum(dot_row<kArithmetic>(smem + area_offset(kGateUpW) + part * part_bytes(sh), max_share(kF),
                                                      scale_shift(j0 + part * kF, kE), row, x, lane));
        if (lane == 0) red[r] = d;
      }
      compute_sync();
      refetch(l, kGateUpW);
      if (t < n) {
        const float a = red[t], u = red[n + t];
        store_tagged(v.ffn + j0 + t, tag(l, kGateUpOp), __half2float(__float2half_rn(a / (1.0f + __expf(-a)) * u)));
      }
    }
    {  // Down + residual: thread t takes chunk t (16 values) of every row of the share
      constexpr int kRows = max_share(kE), kChunks = kF / 16;
      const int r0 = share_begin(kE, b), n = share_begin(kE, b + 1) - r0;
      const float old = t < n ? wait_tagged(v.x2 + r0 + t, tag(l, kOutOp)) : 0.f;
      stage<kF>(v.ffn, nullptr, tag(l, kGateUpOp), nullptr, xs, scratch);
      weights_ready(l, kDownW);
      float part[kRows];
#pragma unroll
      for (int r = 0; r < kRows; ++r) part[r] = 0.f;
      for (int c = t; c < kChunks; c += kThreads) {
        float4 x[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) x[j] = xs[x_unit(c, j)];
        const uint8_t* area = smem + area_offset(kDownW);
        const __half* sc = reinterpret_cast<const __half*>(area + kRows * kF + scale_shift(r0, kF));
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          if (r >= n) break;
          part[r] = kArithmetic ? dot_chunk(*reinterpret_cast<const uint4*>(area + r * kF + 16 * c), x, sc[r * (kF / 32) + c / 2],
                                            part[r])
                                : x[0].x;
        }
      }
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const float d = warp_sum(part[r]);
        if (lane == 0) sums[warp * kRows + r] = d;
      }
      compute_sync();
      refetch(l, kDownW);
      if (t < n) {
        float s = 0.f;
        for (int w = 0; w < (kChunks + 31) / 32 && w < kWarps; ++w) s += sums[w * kRows + t];
        store_tagged(v.x + r0 + t, tag(l, kDownOp), old + s);
      }
    }
  }
  // Every block has read the epoch: block 0's last op read values that every block wrote after it.
  if (b == 0 && t == 0) {
    wait_tagged(v.x, tag(kLayers - 1, kDownOp));
    atomicAdd(v.epoch, 1u);
  }
}

}  // namespace

int main() {
  cudaDeviceProp prop;
  if (!device_properties("persistent_decode", prop)) return 1;
  const int sms = prop.multiProcessorCount;
  if (sms < kMinBlocks || prop.major < 9 || int(prop.sharedMemPerBlockOptin) < kSmemBytes) {
    std::fprintf(stderr, "persistent_decode: needs sm_90, %d SMs and %d bytes of shared memory per block\n", kMinBlocks,
                 kSmemBytes);
    return 1;
  }
  // Synthetic weights: small random int8 values and scales, so that the activations stay finite.
  // Scale arrays get 32 bytes more: the bulk copies round their ranges up to 16 bytes.
  std::vector<void*> owned;
  auto fill = [&](size_t bytes, auto make) -> void* {
    std::vector<uint8_t> host(bytes);
    make(host);
    void* d = nullptr;
    if (cudaMalloc(&d, bytes) != cudaSuccess || cudaMemcpy(d, host.data(), bytes, cudaMemcpyHostToDevice) != cudaSuccess)
      return nullptr;
    owned.push_back(d);
    return d;
  };
  uint32_t seed = 12345;
  auto rnd = [&]() { return seed = seed * 1664525u + 1013904223u; };
  LayerWeights layers[kLayers];
  double weight_bytes = 0;
  for (int l = 0; l < kLayers; ++l) {
    for (int m = 0; m < kWeighted; ++m) {
      const size_t n = size_t(shape_of(m).rows) * shape_of(m).parts, k = size_t(shape_of(m).k);
      layers[l].q[m] = static_cast<const int8_t*>(fill(n * k, [&](std::vector<uint8_t>& h) {
        for (auto& b : h) b = uint8_t(int(rnd() >> 24) % 33 - 16);
      }));
      layers[l].s[m] = static_cast<const __half*>(fill(n * (k / 32) * 2 + 32, [&](std::vector<uint8_t>& h) {
        const __half s = __float2half(0.004f);
        for (size_t i = 0; i + 1 < h.size(); i += 2) std::memcpy(&h[i], &s, 2);
      }));
      weight_bytes += double(n * k + n * (k / 32) * 2);
      if (!layers[l].q[m] || !layers[l].s[m]) {
        std::fprintf(stderr, "persistent_decode: could not place the synthetic weights on the GPU\n");
        return 1;
      }
    }
    auto ones = [&](size_t n, float value) {
      return static_cast<const float*>(fill(n * 4, [&](std::vector<uint8_t>& h) {
        for (size_t i = 0; i < n; ++i) std::memcpy(&h[4 * i], &value, 4);
      }));
    };
    layers[l].bias = ones(kQkv, 0.01f);
    layers[l].norm[0] = ones(kE, 1.0f);
    layers[l].norm[1] = ones(kE, 1.0f);
    const size_t cache = size_t(kKvHeads) * kCtx * kHd * 2;
    auto random_halves = [&](std::vector<uint8_t>& h) {  // multiples of 1/8 in [-1, 1]
      for (size_t i = 0; i + 1 < h.size(); i += 2) {
        const __half value = __float2half(float(int(rnd() >> 24) % 17 - 8) / 8.f);
        std::memcpy(&h[i], &value, 2);
      }
    };
    layers[l].k_cache = static_cast<__half*>(fill(cache, random_halves));
    layers[l].v_cache = static_cast<__half*>(fill(cache, random_halves));
    if (!layers[l].bias || !layers[l].norm[0] || !layers[l].norm[1] || !layers[l].k_cache || !layers[l].v_cache) {
      std::fprintf(stderr, "persistent_decode: could not place the synthetic weights on the GPU\n");
      return 1;
    }
  }
  CHECK(cudaMemcpyToSymbol(c_layer, layers, sizeof layers));
  LayerWeights aliased[kLayers];  // the same, with layer 0's weights in every layer: copies that hit L2
  for (int l = 0; l < kLayers; ++l) {
    aliased[l] = layers[l];
    for (int m = 0; m < kWeighted; ++m) {
      aliased[l].q[m] = layers[0].q[m];
      aliased[l].s[m] = layers[0].s[m];
    }
  }
  CHECK(cudaMemcpyToSymbol(c_layer, aliased, sizeof aliased, sizeof layers));
  Vectors v;
  const size_t attn_words = size_t(kMaxSplits) * kHeads * kPart;
  CHECK(cudaMalloc(&v.x, kE * 8));
  CHECK(cudaMalloc(&v.x2, kE * 8));
  CHECK(cudaMalloc(&v.qkv, kQkv * 8));
  CHECK(cudaMalloc(&v.attn, attn_words * 8));
  CHECK(cudaMalloc(&v.ffn, kF * 8));
  CHECK(cudaMalloc(&v.epoch, 4));
  CHECK(cudaMemset(v.epoch, 0, 4));
  for (uint64_t* p : {v.x, v.x2, v.qkv, v.ffn}) CHECK(cudaMemset(p, 0xff, (p == v.ffn ? kF : p == v.qkv ? kQkv : kE) * 8));
  CHECK(cudaMemset(v.attn, 0xff, attn_words * 8));
  float* x0 = nullptr;
  CHECK(cudaMalloc(&x0, kE * 4));
  {
    std::vector<float> h(kE);
    for (auto& f : h) f = float(int(rnd() >> 24) % 17 - 8) / 8.f;
    CHECK(cudaMemcpy(x0, h.data(), kE * 4, cudaMemcpyHostToDevice));
  }
  v.x0 = x0;

  using Kernel = void (*)(Vectors);
  const struct {
    Kernel kernel;
    bool attention;
    int table;
    const char* name;
    int chunk = 0, period = 0;
  } variants[] = {{decode_layers<true, true>, true, 0, "the layer's work"},
                  {decode_layers<true, true>, true, 0, "copies of 4 KB, one per 512 cycles", 4096, 512},
                  {decode_layers<true, true>, true, 0, "copies of 16 KB, one per 2048 cycles", 16384, 2048},
                  {decode_layers<true, true, true, false>, true, 0, "copies asked by a compute warp"},
                  {decode_layers<true, true>, true, 1, "copies of layer 0's weights (from L2)"},
                  {decode_layers<true, true, false>, true, 0, "without the GEMVs' products"},
                  {decode_layers<true, false>, false, 0, "without attention (q passed through)"},
                  {decode_layers<false, true>, true, 0, "layer 0's weights, already in place"},
                  {decode_layers<false, true, true, true, true>, true, 0, "in place, each layer's brought into L2"},
                  {decode_layers<false, true, false>, true, 0, "in place, without the GEMVs' products"},
                  {decode_layers<false, false, false>, false, 0, "in place, without products or attention"}};
  for (const auto& var : variants)
    CHECK(cudaFuncSetAttribute(var.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::printf("%s, %d SMs: %d layers of Qwen2.5-0.5B at batch 1 in one persistent kernel (%d x %d + 32, %d bytes of shared "
              "memory), W8 weights %.1f MB\n",
              prop.name, sms, kLayers, sms, kThreads, kSmemBytes, weight_bytes / 1e6);
  std::printf("%-38s %-7s %-16s %-12s %-13s %s\n", "variant", "n_kv", "attention blocks", "us per step", "us per layer",
              "GB/s (weights)");
  for (const auto& var : variants) {
    for (int n_kv : {128, 1024, 4096}) {
      v.n_kv = n_kv;
      v.table = var.table;
      v.chunk = var.chunk;
      v.period = var.period;
      v.splits = var.attention ? std::max(1, (n_kv - 1 + kSplitRows - 1) / kSplitRows) : 1;
      v.heads = kHeads * v.splits <= sms ? 1 : kGroup;
      void* args[] = {&v};
      const double us = time_launches(s, 50, [&] {
        return cudaLaunchCooperativeKernel((void*)var.kernel, dim3(sms), dim3(kThreads + 32), args, kSmemBytes, s);
      });
      if (us < 0) return 1;
      std::vector<uint64_t> x(kE);
      CHECK(cudaMemcpy(x.data(), v.x, kE * 8, cudaMemcpyDeviceToHost));
      double norm = 0;
      bool finite = true;
      for (uint64_t w : x) {
        float f;
        const uint32_t bits = uint32_t(w);
        std::memcpy(&f, &bits, 4);
        finite = finite && std::isfinite(f);
        norm += double(f) * f;
      }
      char blocks[32];
      std::snprintf(blocks, sizeof blocks, "%d x %d head%s", kHeads / v.heads * v.splits, v.heads, v.heads > 1 ? "s" : "");
      std::printf("%-38s %-7d %-16s %-12.1f %-13.2f %-14.0f (output |x| %.3g%s)\n", var.name, n_kv,
                  var.attention ? blocks : "-", us, us / kLayers, weight_bytes / us * 1e-3, std::sqrt(norm),
                  finite ? "" : ", not finite");
    }
  }
  for (void* p : owned) cudaFree(p);
  return 0;
}
