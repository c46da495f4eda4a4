// Attention over the fp16 KV cache (n_head_kv, n_ctx, head_dim), grouped-query: query head h reads
// KV head h / (n_head / n_head_kv). Scores are kept in log2 units (q is pre-multiplied by
// scale · log2(e)) so that softmax weights are exp2 of differences.
//
// Decode: one query row against the first *n_kv cache rows. The K and V bytes set the time (64 KB
// at 128 rows of the benchmarked model, 2 MB at 4096), so the kernels keep many loads in flight and
// take as few dependent trips to memory as possible.
//   Splits. A block (8 warps; 4 in the generic kernel) takes up to 8 query heads of one KV head
//       (each K and V row is read once for all of them) and one split of the rows. The grid
//       (splits, n_head_kv, head tiles) is sized for n_ctx; each block reads *n_kv and works out
//       the split length, and the blocks past the last split exit at once, so a captured decode
//       step stays valid as the context grows.
//       Up to two chunks (a chunk is what a block loads at once: 64 KB of K and V, 256 rows at
//       head_dim 64) there is one split and the block writes the fp16 output itself: its second
//       chunk costs one more trip to memory, less than a combine of splits (measured on an H200,
//       decode after 256 tokens of context, 257 to 384 rows: 1,982 against 1,896 tok/s with one
//       chunk as the limit; three chunks lost after 512 tokens, 1,826 against 1,893). Past it,
//       splits are whole half chunks, as
//       short as possible within gridDim.x splits (about one block per multiprocessor, at most
//       kMaxSplits: the launcher's choice), or whole chunks where half chunks would take more
//       splits than one combine batch (below) holds: past 2,048 rows at head_dim 64 (measured on an
//       H200: 1,857–1,859 against 1,818 tok/s after 2,048 tokens of context, 1,814 against 1,789
//       after 4,096). Each split writes its unnormalised output with its maximum and
//       sum, and the last block to finish for a (KV head, head tile), found with an arrival counter,
//       combines the splits in a fixed order (deterministic), writes the output and resets the
//       counter for the next call. Up to kCombineBatch splits a thread the combine is one trip to
//       L2, each thread loading its splits' maximum, sum and values at once (measured on an H200:
//       1,879–1,881 against 1,862–1,864 tok/s at 512 rows of context, 1,867–1,869 against 1,852 at
//       1,024). Past one batch, two or four threads share each (head, 4 dims) where the block has
//       threads to spare (14/2 heads at head_dim 64: two, so 32 splits, 8,192 rows) and combine
//       their parts with shuffles: the kernel's many-splits form, which the launcher takes where the
//       caller's bound on the rows (max_n_kv, else n_ctx) may take that many splits. Measured on an
//       H200 after 4,096 tokens of context (17 splits): decode 2,075.9–2,077.3 against
//       2,051.6–2,052.0 tok/s, attention 4.51 µs in the chain against 4.80. The plain form holds
//       none of its code, so that shorter contexts keep their instruction schedule: with both in
//       one kernel, decode after 3,000 tokens lost 1.8% (12 splits, the same combine as before).
//       Past that, the splits' weights come first and their values follow in batches (a single
//       pass of batches with a running maximum lost there: 1,722 against 1,768 tok/s at 4,096).
//   Clusters. Where one KV head's n_ctx rows of K and V take at most kClusterMaxBytes (2,304 rows
//       at head_dim 64) and the GPU is sm_90 or later, the splits of one (KV head, head tile), at
//       most kClusterMaxSplits, are one thread-block cluster instead (the kernel's clusters
//       instantiation): each split pushes its partial into the shared memory of the cluster's
//       first block (st.async, counted on that block's mbarrier), which combines them in split
//       order once all have arrived. No arrival counter, no trip to L2 and back. Measured on an
//       H200, decode tok/s after 512 / 1,024 / 2,048 tokens of context (n_ctx 256 more): 1,984 /
//       1,957 / 1,914 against 1,910 / 1,897 / 1,877. With more rows it loses, as clusters of every
//       split (16 of a chunk each after 4,096 tokens: 1,740 against 1,816) and as several clusters
//       per KV head combining through memory (1,727): a cluster runs on one GPC, which then reads
//       all of its KV head's rows.
//   attention_decode_kernel<head_dim, clusters, many splits>  head_dim 64 or 128, 16-byte aligned q
//       and caches, on tensor cores (mma m16n8k16, fp32 accumulation). Each warp issues the loads of
//       all its 16-row steps of a chunk (two at head_dim 64, one at 128) into registers before using any:
//       eight warps of fewer steps each, rather than four of twice as many, shorten each warp's
//       chain of dependent steps (measured on an H200: decode 2,044 against 2,029 tok/s after the
//       "你好" chat prompt, 1,778 against 1,721 at 4,096 rows of context); split 0, which starts at
//       row 0 whatever n_kv is, issues its first chunk before it reads n_kv, so a context of one
//       chunk waits on memory once.
//       Where only the newest row comes from the kernel before (only_newest_row_fresh: the decode
//       step, whose QKV projection appends it), every block reads n_kv and loads its first chunk
//       before the dependency wait, while that kernel finishes, and reloads the newest row after.
//       A step computes Sᵀ = K·qᵀ (cache rows × 8 heads; q enters as fp16 hi + lo parts, lo scaled
//       by 2^11, which keeps the scores at fp32 accuracy) and Oᵀ += Vᵀ·Pᵀ (head_dim × 8 heads; P
//       rounded to fp16). No data goes through shared memory: a dot product may take the head_dim in
//       any order, so a lane loads a contiguous quarter of a K row (16-byte vectors) and holds q in
//       the same order; the rows of the P·V product may come in any order too, so a lane loads an
//       eighth of each of its four V rows and pairs the rows with byte permutes, and the P operand is
//       the score fragment transposed (movmatrix). The softmax is online per chunk, with one running
//       maximum per head and warp; the warps combine through shared memory once, at the end.
//   attention_decode_generic_kernel  any even head_dim up to 256, q and caches of any alignment: one
//       warp per cache row, lanes over the head_dim, a warp sum per head and an online softmax per row (fp32
//       weights). Much slower per row; the same splits (of 64 rows) and combine.
//
//   w8a16_matmul_m1_attention_decode<head_dim, split>  attention and the output projection with
//       its residual add (AttentionDecodeDesc::wo) in one kernel, so that a decode layer hands off
//       four times instead of five. A thread-block cluster holds one block of 8 warps per (KV head,
//       head tile) group, at most two (the 14/2 heads): each block runs its group's attention as
//       split 0 of the tensor-core kernel does and stores its heads' fp16 output into the shared
//       memory of every block of the cluster; then each multiplies the whole output by its 8 rows of
//       the projection, copied into shared memory before the dependency wait, one warp per row in
//       the order of w8a16_matmul_m1, and adds them to y: 112 blocks for 896 outputs. Taken where
//       the caller expects at most one chunk of rows a block (max_n_kv, the model's context class).
//       Past one chunk the cluster grows to kProjMaxCluster blocks, 2 or 4 per group (the `split`
//       instantiation): each block takes a run of whole 16-row steps of the rows, at most a chunk,
//       and pushes its unnormalised partials into every block of the cluster, and every block
//       combines each head's splits in split order. So the fused form reaches 1,024 rows of the
//       14/2 heads at head_dim 64. Measured on an H200, decode tok/s interleaved with the separate
//       kernels: 2,120 against 2,059 after the "你好" chat prompt, with blocks of 16 warps (both
//       groups) and 16 rows. An 8-warp block at 128 registers takes half a multiprocessor's
//       registers, so it starts beside the QKV projection's blocks and loads its rows while they
//       run, where a 16-warp block waited for a whole multiprocessor: 2,366-2,374 against
//       2,347-2,351. With splits (`--context C --ctx C+256`, rows C to C + 128): 2,292 against
//       2,184-2,186 at C = 256 (2 splits), 2,241 against 2,212 at 512 (4 splits). Lost: a second
//       chunk a block, one more trip to memory after the wait (2,141 at 512 with 2 splits; 2,082
//       against 2,200 at 1,024 with 4), and clusters of 16 (8 splits: 1,940 against 2,196 at
//       1,024). Clusters need sm_90; before it the kernel runs where one group covers every head,
//       and attention and the projection are two kernels otherwise.
//
//   attention_prefill_kernel  m query rows at positions pos0 .. pos0+m-1 (pos0 read from memory
//       when the op gives `pos`, as a recorded prefill does), causal, flash-attention 2 style on
//       tensor cores: a block takes 64 query rows of one head (16 per warp); K and V tiles of 64
//       cache rows go through shared memory; S = Q·Kᵀ and O += P·V use mma.sync m16n8k16 with fp32
//       accumulation and the softmax is online, so no (m, n_kv) matrix is ever stored. Q enters the
//       tensor cores as fp16 hi + lo parts (lo scaled by 2^11 to stay a normal number), which keeps
//       the scores at fp32 accuracy; P is rounded to fp16 for P·V. Warps skip the cache tiles, and the
//       16-key parts of a tile, that lie entirely after their last row (a 30-token prompt uses half
//       of its one tile), and a warp whose rows all lie past m only helps with the copies. Measured on
//       an H200, TTFT of the "你好" chat prompt (30 tokens): 1.068–1.076 → 1.048–1.050 ms. The first
//       tile's copies are requested before q is read, so that the two trips to memory overlap.
//       Heads of 64 and 128 (and narrower ones padded to them) only.
//   attention_prefill_generic_kernel  heads wider than 128, up to 256 (Falcon3's): one warp per
//       query row of one head, lanes over the head_dim, 4 cache rows scored at a time, online
//       softmax and P·V in fp32, K and V read from L2 by every row.
#include <algorithm>
#include <cmath>

#include "backends/cuda/cuda_backend_impl.cuh"

namespace tllm::cuda {
namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr int kMaxHeadDim = 256;

// ---- decode --------------------------------------------------------------------------------------

constexpr int kDecodeWarps = 4;     // the generic kernel's blocks
constexpr int kDecodeThreads = 32 * kDecodeWarps;
constexpr int kDecodeMmaWarps = 8;  // the tensor-core kernel's blocks
constexpr int kDecodeMmaThreads = 32 * kDecodeMmaWarps;
constexpr int kDecodeHeads = 8;     // query heads per block: the n = 8 side of the mma tile
constexpr int kMaxSplits = 64;      // splits per (KV head, head tile): bounds the last block's combine
constexpr int kCombineBatch = 16;   // split partials a thread of the combine loads at once (one trip to L2)
constexpr int kGenericChunk = 64;   // rows of one split unit of the generic kernel
// The tensor-core kernel's splits of one (KV head, head tile) form one thread-block cluster where
// the cache's n_ctx rows of that KV head (K and V) take at most kClusterMaxBytes: one cluster, on
// one GPC, reads all of them. At most kClusterMaxSplits splits (the largest cluster sm_90 allows).
constexpr int kClusterMaxSplits = 16;
constexpr int64_t kClusterMaxBytes = 576 << 10;
static_assert(kMaxSplits == 2 * 32, "the combine's weights take two splits per lane");
static_assert(kMaxSplits % kCombineBatch == 0, "the combine reads whole batches of weights");

// 16-row steps per warp in one chunk of the tensor-core kernel: 8 KB of K and V per warp.
constexpr int decode_steps(int head_dim) { return 128 / head_dim; }
// Rows of one chunk (what a block loads at once, 64 KB of K and V). Past one split (decode_one),
// splits are whole units of half a chunk, twice the blocks streaming at once for a little more
// combine work, or of a chunk where half chunks would take more than kCombineBatch splits.
constexpr int decode_chunk(int head_dim) { return kDecodeMmaWarps * decode_steps(head_dim) * 16; }
constexpr int decode_unit(int head_dim) { return decode_chunk(head_dim) / 2; }
// The longest context taken as one split: two chunks.
constexpr int decode_one(int head_dim) { return 2 * decode_chunk(head_dim); }

struct DecodeArgs {
  const float* q = nullptr;         // (n_head, head_dim)
  const __half* k_cache = nullptr;  // (n_head_kv, n_ctx, head_dim)
  const __half* v_cache = nullptr;  // (n_head_kv, n_ctx, head_dim)
  __half* out = nullptr;            // (n_head, head_dim)
  const int32_t* n_kv = nullptr;    // scalar
  int head_dim = 0, n_ctx = 0;
  int group = 0;                    // query heads per KV head
  float qscale = 0;                 // scale · log2(e)
  float* part_o = nullptr;          // (n_head, gridDim.x, hd4): each split's unnormalised output,
                                    //   hd4 = head_dim rounded up to 4
  float* part_ml = nullptr;         // (n_head, gridDim.x, 2): its maximum and sum
  unsigned* counters = nullptr;     // (n_head_kv, gridDim.z), zero between calls
  bool early = false;               // AttentionDecodeDesc::only_newest_row_fresh
};

// What each warp of a block leaves for the block's combine, then the split weights of the combine.
template <int kHd, int kWarps>
struct alignas(16) DecodeShared {
  float m[kWarps][kDecodeHeads];       // the warp's maximum score per head (-inf: no rows)
  float l[kWarps][kDecodeHeads];       // Σ exp2(s - m) over the warp's rows
  float o[kWarps][kDecodeHeads][kHd];  // Σ exp2(s - m) · v, head_dim padded to 4 with zeros
  float w[kDecodeHeads][kMaxSplits];   // exp2(m_s - M) / L of each split
  uint64_t bar;                        // in clusters: the first block's arrival of the partials
};

// In clusters: the first block's copy of every split's partials, (splits, kDecodeHeads,
// hd4) values, then (splits, kDecodeHeads) (maximum, sum) pairs.
extern __shared__ __align__(16) float decode_partials[];

// Every block of a cluster arrives at the cluster barrier as it starts (the first block after
// initialising its mbarrier) and waits once before it leaves or pushes its partials.
template <bool kCluster>
__device__ __forceinline__ void cluster_leave() {
  if constexpr (kCluster) cluster_wait();
}

// Split length and the number of splits n_kv rows take: one split up to `one` rows, else whole
// units, as short as possible with at most max_splits splits. The unit is `unit`, or `long_unit`
// where `unit` would take more than kCombineBatch splits.
__host__ __device__ __forceinline__ void plan_splits(int n_kv, int one, int unit, int long_unit, int max_splits,
                                                     int& len, int& n_used) {
  if (n_kv <= one) {
    len = one;
    n_used = 1;
    return;
  }
  if ((n_kv + unit - 1) / unit > kCombineBatch) unit = long_unit;
  const int units = (n_kv + unit - 1) / unit;
  len = unit * ((units + max_splits - 1) / max_splits);
  n_used = (n_kv + len - 1) / len;
}

// *n_kv capped at n_ctx and, when positive, the split plan of its rows (plan_splits).
__device__ __forceinline__ int read_n_kv(const DecodeArgs& a, int one, int unit, int long_unit, int& len,
                                         int& n_used) {
  const int n_kv = min(*a.n_kv, a.n_ctx);
  if (n_kv > 0) plan_splits(n_kv, one, unit, long_unit, int(gridDim.x), len, n_used);
  return n_kv;
}

// No rows to attend to (outside the op's contract): split 0 writes the block's heads as zeros.
__device__ __forceinline__ void zero_heads(const DecodeArgs& a, int h0, int nh, int hd) {
  if (blockIdx.x != 0) return;
  for (int i = threadIdx.x; i < nh * hd; i += int(blockDim.x)) a.out[int64_t(h0) * hd + i] = __float2half_rn(0.f);
}

// acc + w · x, per component (one fused multiply-add each).
__device__ __forceinline__ float4 fma4(float w, float4 x, float4 acc) {
  return make_float4(fmaf(w, x.x, acc.x), fmaf(w, x.y, acc.y), fmaf(w, x.z, acc.z), fmaf(w, x.w, acc.w));
}

// Output values d .. d+3 of one head (fewer at the end of an odd-pair head_dim), times `scale`.
__device__ __forceinline__ void store_out4(__half* out_head, int d, int hd, float4 v, float scale) {
  *reinterpret_cast<uint32_t*>(out_head + d) = float2_to_half2_bits(v.x * scale, v.y * scale);
  if (d + 2 < hd) *reinterpret_cast<uint32_t*>(out_head + d + 2) = float2_to_half2_bits(v.z * scale, v.w * scale);
}

// The block's warps combined (in warp order) for head h, dims d .. d+3: the unnormalised output,
// with the maximum score in m and the sum in l. Finite where the block has a row.
template <int kHd, int kWarps>
__device__ __forceinline__ float4 combine_warps(const DecodeShared<kHd, kWarps>& sh, int h, int d, float& m, float& l) {
  m = -INFINITY;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) m = fmaxf(m, sh.m[w][h]);
  l = 0.f;
  float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    const float c = exp2f(sh.m[w][h] - m);  // 0 for a warp without rows
    l = fmaf(c, sh.l[w][h], l);
    o = fma4(c, *reinterpret_cast<const float4*>(&sh.o[w][h][d]), o);
  }
  return o;
}

// Splits 0 .. n - 1 of one head combined in split order: returns Σ e_s · o(s) and sets l to
// Σ e_s · l_s, where e_s = exp2(m_s - max m) (0 for a split without rows); ml(s) gives a split's
// (maximum, sum), o(s) its unnormalised values.
template <class Ml, class O>
__device__ __forceinline__ float4 combine_splits(int n, const Ml& ml, const O& o, float& l) {
  float mx = -INFINITY;
  for (int s = 0; s < n; ++s) mx = fmaxf(mx, ml(s).x);
  l = 0.f;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int s = 0; s < n; ++s) {
    const float2 v = ml(s);
    const float e = exp2f(v.x - mx);
    l = fmaf(e, v.y, l);
    acc = fma4(e, o(s), acc);
  }
  return acc;
}

// The last split block's combine of its (KV head, head tile) in one trip to L2, for at most
// kLanes · kCombineBatch splits: each item (head h, dims d .. d+3) is taken by kLanes adjacent
// threads of one warp, lane j loading the maximum, sum and values of splits j, j + kLanes, ... at
// once; the lanes then combine their parts with shuffles, in a fixed order (deterministic). One
// lane is the combine in split order.
template <int kLanes, int kWarps>
__device__ __forceinline__ void combine_one_trip(const DecodeArgs& a, int n_used, int h0, int nh) {
  const int hd = a.head_dim, hd4 = (hd + 3) & ~3, n4 = hd4 / 4;
  const unsigned group = (0xffffffffu >> (32 - kLanes)) << (threadIdx.x & 31 & ~(kLanes - 1));
  for (int i = threadIdx.x; i < kLanes * nh * n4; i += 32 * kWarps) {
    const int item = i / kLanes, j = i % kLanes, h = item / n4, d = 4 * (item - h * n4);
    const int64_t at = int64_t(h0 + h) * gridDim.x;
    float4 x[kCombineBatch];
    float2 ml[kCombineBatch];
#pragma unroll
    for (int s = 0; s < kCombineBatch; ++s) {
      const int split = j + kLanes * s;
      const bool used = split < n_used;
      x[s] = used ? __ldcg(reinterpret_cast<const float4*>(a.part_o + (at + split) * hd4 + d))
                  : make_float4(0.f, 0.f, 0.f, 0.f);
      ml[s] = used ? __ldcg(reinterpret_cast<const float2*>(a.part_ml + 2 * (at + split)))
                   : make_float2(-INFINITY, 0.f);
    }
    float mx = -INFINITY;
#pragma unroll
    for (int s = 0; s < kCombineBatch; ++s) mx = fmaxf(mx, ml[s].x);
#pragma unroll
    for (int step = 1; step < kLanes; step <<= 1) mx = fmaxf(mx, __shfl_xor_sync(group, mx, step));
    float l = 0.f;
    float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int s = 0; s < kCombineBatch; ++s) {
      const float e = exp2f(ml[s].x - mx);  // 0 past the last split
      l = fmaf(e, ml[s].y, l);
      o = fma4(e, x[s], o);
    }
#pragma unroll
    for (int step = 1; step < kLanes; step <<= 1) {
      l += __shfl_xor_sync(group, l, step);
      o.x += __shfl_xor_sync(group, o.x, step);
      o.y += __shfl_xor_sync(group, o.y, step);
      o.z += __shfl_xor_sync(group, o.z, step);
      o.w += __shfl_xor_sync(group, o.w, step);
    }
    if (j == 0) store_out4(a.out + int64_t(h0 + h) * hd, d, hd, o, 1.0f / l);
  }
}

// The end of a block, after every warp has filled sh.m, sh.l and sh.o and the block has synchronised:
// combines the warps (in warp order), then writes the output (one split) or the split's partial; the
// last split block to arrive for its (KV head, head tile) combines the partials in a fixed order.
template <int kHd, int kWarps, bool kCluster = false, bool kManySplits = false>
__device__ void decode_finish(const DecodeArgs& a, DecodeShared<kHd, kWarps>& sh, int n_used, int h0, int nh) {
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int split = blockIdx.x, hd = a.head_dim, hd4 = (hd + 3) & ~3, n4 = hd4 / 4;
  cluster_leave<kCluster>();
  const float* cluster_ml = decode_partials + gridDim.x * kDecodeHeads * hd4;
  for (int i = tid; i < nh * n4; i += 32 * kWarps) {
    const int h = i / n4, d = 4 * (i - h * n4);
    float m, l;
    const float4 o = combine_warps(sh, h, d, m, l);
    if (n_used == 1) {
      store_out4(a.out + int64_t(h0 + h) * hd, d, hd, o, 1.0f / l);
    } else if (kCluster) {
      const uint32_t bar = cluster_address(smem_address(&sh.bar), 0);
      push_f4(cluster_address(smem_address(decode_partials + (split * kDecodeHeads + h) * hd4 + d), 0), o, bar);
      if (d == 0) push_f2(cluster_address(smem_address(cluster_ml + 2 * (split * kDecodeHeads + h)), 0), m, l, bar);
    } else {
      const int64_t at = int64_t(h0 + h) * gridDim.x + split;
      *reinterpret_cast<float4*>(a.part_o + at * hd4 + d) = o;
      if (d == 0) {
        a.part_ml[2 * at] = m;
        a.part_ml[2 * at + 1] = l;
      }
    }
  }
  if (n_used == 1) return;
  if constexpr (kCluster) {
    // The first block combines the partials in split order once all of them have arrived.
    if (split != 0) return;
    const uint32_t bar = smem_address(&sh.bar);
    if (tid == 0) mbarrier_arrive_expect(bar, unsigned(n_used * nh * (hd4 + 2)) * 4u);
    mbarrier_wait(bar, 0);
    for (int i = tid; i < nh * n4; i += 32 * kWarps) {
      const int h = i / n4, d = 4 * (i - h * n4);
      const auto at = [&](int s) { return s * kDecodeHeads + h; };
      float l;
      const float4 o = combine_splits(
          n_used, [&](int s) { return make_float2(cluster_ml[2 * at(s)], cluster_ml[2 * at(s) + 1]); },
          [&](int s) { return *reinterpret_cast<const float4*>(decode_partials + at(s) * hd4 + d); }, l);
      store_out4(a.out + int64_t(h0 + h) * hd, d, hd, o, 1.0f / l);
    }
    return;
  }

  unsigned* counter = a.counters + blockIdx.y * gridDim.z + blockIdx.z;
  if (!last_block_to_arrive(counter, unsigned(n_used))) return;
  if (tid == 0) *counter = 0u;  // every split has arrived: ready for the next call

  // Up to kCombineBatch splits a thread, in one trip to L2 (combine_one_trip); past one batch, two or
  // four threads an item where the block has the threads to spare, in the kernel's many-splits form,
  // which the launcher takes where the rows may take that many splits (many_splits).
  if (n_used <= kCombineBatch) return combine_one_trip<1, kWarps>(a, n_used, h0, nh);
  if constexpr (kManySplits) {
    const int items = nh * n4;
    if (n_used <= 2 * kCombineBatch && 2 * items <= 32 * kWarps)
      return combine_one_trip<2, kWarps>(a, n_used, h0, nh);
    if (n_used <= 4 * kCombineBatch && 4 * items <= 32 * kWarps)
      return combine_one_trip<4, kWarps>(a, n_used, h0, nh);
  }

  // More splits: first their weights, one warp per head: split s (lane s and s - 32) contributes
  // exp2(m_s - M) / L.
  for (int h = warp; h < nh; h += kWarps) {
    const float* ml = a.part_ml + int64_t(h0 + h) * gridDim.x * 2;
    float m[2], l[2];
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const int s = lane + 32 * k;
      m[k] = s < n_used ? __ldcg(ml + 2 * s) : -INFINITY;
      l[k] = s < n_used ? __ldcg(ml + 2 * s + 1) : 0.f;
    }
    const float mx = warp_max(fmaxf(m[0], m[1]));
    const float e0 = exp2f(m[0] - mx), e1 = exp2f(m[1] - mx);  // 0 past the last split
    const float inv = 1.0f / warp_sum(fmaf(l[0], e0, l[1] * e1));
    sh.w[h][lane] = e0 * inv;
    sh.w[h][lane + 32] = e1 * inv;
  }
  __syncthreads();
  for (int i = tid; i < nh * n4; i += 32 * kWarps) {
    const int h = i / n4, d = 4 * (i - h * n4);
    const float* po = a.part_o + int64_t(h0 + h) * gridDim.x * hd4 + d;
    float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int s0 = 0; s0 < n_used; s0 += kCombineBatch) {
      float4 x[kCombineBatch];  // loaded together: one trip to L2 per batch
#pragma unroll
      for (int j = 0; j < kCombineBatch; ++j) {
        x[j] = s0 + j < n_used ? __ldcg(reinterpret_cast<const float4*>(po + int64_t(s0 + j) * hd4))
                               : make_float4(0.f, 0.f, 0.f, 0.f);
      }
#pragma unroll
      for (int j = 0; j < kCombineBatch; ++j) {
        const float w = sh.w[h][s0 + j];
        o = fma4(w, x[j], o);
      }
    }
    store_out4(a.out + int64_t(h0 + h) * hd, d, hd, o, 1.0f);
  }
}

// The 8x8 fp16 matrix whose fragment (lane t holds row t / 4, columns 2·(t % 4) and 2·(t % 4) + 1)
// is x, transposed, in the same fragment layout.
__device__ __forceinline__ uint32_t transpose8x8(uint32_t x) {
  uint32_t y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

// The K and V registers of one warp's steps of a chunk (g = lane / 4, t = lane % 4). Step i of the
// chunk at row c covers rows r0 = c + 16·(kDecodeMmaWarps·i + warp) .. r0 + 15.
//   k[i][j]: row r0 + g + 8j, dims (head_dim / 4)·t .. + head_dim / 4, as half2 words;
//   v[i][j]: row r0 + 2t + (j & 1) + 8·(j >> 1), dims (head_dim / 8)·g .. + head_dim / 8.
template <int kHd>
struct DecodeRegs {
  static constexpr int kSteps = decode_steps(kHd);
  uint32_t k[kSteps][2][kHd / 8];
  uint32_t v[kSteps][4][kHd / 16];
};

// Fills the kWords words of one row's fragment from src in 16-byte loads, or with zeros when !ok.
template <int kWords>
__device__ __forceinline__ void load_row_words(uint32_t (&dst)[kWords], const __half* src, bool ok) {
#pragma unroll
  for (int u = 0; u < kWords / 4; ++u) {
    const uint4 x = ok ? load_ro16(src + 8 * u) : make_uint4(0u, 0u, 0u, 0u);
    dst[4 * u] = x.x;
    dst[4 * u + 1] = x.y;
    dst[4 * u + 2] = x.z;
    dst[4 * u + 3] = x.w;
  }
}

// Loads the warp's steps of the chunk at row c; rows at or past `limit` are not read (zeros). With
// only >= 0, loads row `only` alone (where the warp holds it) and leaves the other registers.
template <int kHd>
__device__ __forceinline__ void load_chunk(DecodeRegs<kHd>& r, const __half* k_head, const __half* v_head, int c,
                                           int limit, int warp, int g, int t, int only = -1) {
#pragma unroll
  for (int i = 0; i < DecodeRegs<kHd>::kSteps; ++i) {
    const int r0 = c + 16 * (kDecodeMmaWarps * i + warp);
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int row = r0 + g + 8 * j;
      if (only < 0 || row == only) load_row_words(r.k[i][j], k_head + int64_t(row) * kHd + kHd / 4 * t, row < limit);
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int row = r0 + 2 * t + (j & 1) + 8 * (j >> 1);
      if (only < 0 || row == only) load_row_words(r.v[i][j], v_head + int64_t(row) * kHd + kHd / 8 * g, row < limit);
    }
  }
}

// q of head h0 + g (zeros past nh), dims (head_dim / 4)·t .., as the K registers hold them.
template <int kHd>
__device__ __forceinline__ void load_q(const DecodeArgs& a, int h0, int nh, int g, int t, float4 (&qf)[kHd / 16]) {
#pragma unroll
  for (int i = 0; i < kHd / 16; ++i) {
    qf[i] = g < nh ? *reinterpret_cast<const float4*>(a.q + int64_t(h0 + g) * kHd + kHd / 4 * t + 4 * i)
                   : make_float4(0.f, 0.f, 0.f, 0.f);
  }
}

// One warp's part of a block's rows r_begin .. r_end - 1 (every chunk of them: the first already in
// r, the later ones loaded here), for the 8 heads whose q the warp holds in qf; leaves the warp's
// maximum, sum and output in sh.m, sh.l and sh.o[warp]. Fragment layouts as described at
// attention_decode_kernel below.
template <int kHd>
__device__ __forceinline__ void decode_rows(const DecodeArgs& a, DecodeRegs<kHd>& r, const float4 (&qf)[kHd / 16],
                                            const __half* k_head, const __half* v_head, int r_begin, int r_end,
                                            int warp, int lane, DecodeShared<kHd, kDecodeMmaWarps>& sh) {
  constexpr int kSteps = decode_steps(kHd), kChunk = decode_chunk(kHd);
  constexpr int kKWords = kHd / 8, kVWords = kHd / 16;
  const int g = lane >> 2, t = lane & 3;
  // q · scale · log2(e) as fp16 hi and lo · 2^11 parts, in the K registers' word order.
  uint32_t qh[kKWords], ql[kKWords];
#pragma unroll
  for (int w = 0; w < kKWords; ++w) {
    const float4 v = qf[w / 2];
    const float x0 = (w % 2 ? v.z : v.x) * a.qscale, x1 = (w % 2 ? v.w : v.y) * a.qscale;
    const __half2 hi = __floats2half2_rn(x0, x1);
    const float2 hf = __half22float2(hi);
    memcpy(&qh[w], &hi, 4);
    ql[w] = float2_to_half2_bits((x0 - hf.x) * 2048.f, (x1 - hf.y) * 2048.f);
  }

  float m_run[2] = {-INFINITY, -INFINITY};  // running maximum of heads 2t, 2t + 1 (same in all g)
  float l_run[2] = {0.f, 0.f};              // this lane's part of their running sums
  float o[kVWords][4] = {};                 // Oᵀ fragments
  for (int c = r_begin; c < r_end; c += kChunk) {
    if (c + 16 * warp >= r_end) break;  // the warp has no rows here or after
    if (c != r_begin) load_chunk(r, k_head, v_head, c, r_end, warp, g, t);

    // Scores of the warp's steps; rows past r_end are -inf, steps past it are skipped.
    float s[kSteps][4];
#pragma unroll
    for (int i = 0; i < kSteps; ++i) {
      const int r0 = c + 16 * (kDecodeMmaWarps * i + warp);
#pragma unroll
      for (int e = 0; e < 4; ++e) s[i][e] = -INFINITY;
      if (r0 >= r_end) continue;
      float hi[4] = {}, lo[4] = {};
#pragma unroll
      for (int kk = 0; kk < kHd / 16; ++kk) {
        const uint32_t ka[4] = {r.k[i][0][2 * kk], r.k[i][1][2 * kk], r.k[i][0][2 * kk + 1], r.k[i][1][2 * kk + 1]};
        mma_16816(hi, ka, qh[2 * kk], qh[2 * kk + 1]);
        mma_16816(lo, ka, ql[2 * kk], ql[2 * kk + 1]);
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if (r0 + g + 8 * (e >> 1) < r_end) s[i][e] = fmaf(lo[e], 1.0f / 2048.f, hi[e]);
      }
    }

    // Online softmax over the chunk: the maximum over the warp's rows (lanes of equal t hold the
    // same heads), finite because the warp's first step has its row 0.
    float mx[2] = {m_run[0], m_run[1]};
#pragma unroll
    for (int i = 0; i < kSteps; ++i) {
      mx[0] = fmaxf(mx[0], fmaxf(s[i][0], s[i][2]));
      mx[1] = fmaxf(mx[1], fmaxf(s[i][1], s[i][3]));
    }
#pragma unroll
    for (int x = 4; x < 32; x <<= 1) {
      mx[0] = fmaxf(mx[0], __shfl_xor_sync(0xffffffffu, mx[0], x));
      mx[1] = fmaxf(mx[1], __shfl_xor_sync(0xffffffffu, mx[1], x));
    }
    const float alpha[2] = {exp2f(m_run[0] - mx[0]), exp2f(m_run[1] - mx[1])};  // 0 on the first chunk
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      m_run[e] = mx[e];
      l_run[e] *= alpha[e];
    }
#pragma unroll
    for (int j = 0; j < kVWords; ++j) {
      o[j][0] *= alpha[0];
      o[j][1] *= alpha[1];
      o[j][2] *= alpha[0];
      o[j][3] *= alpha[1];
    }

#pragma unroll
    for (int i = 0; i < kSteps; ++i) {
      const int r0 = c + 16 * (kDecodeMmaWarps * i + warp);
      if (r0 >= r_end) continue;
      float p[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        p[e] = exp2f(s[i][e] - m_run[e & 1]);
        l_run[e & 1] += p[e];
      }
      const uint32_t pb0 = transpose8x8(float2_to_half2_bits(p[0], p[1]));  // rows 2t, 2t+1 of head g
      const uint32_t pb1 = transpose8x8(float2_to_half2_bits(p[2], p[3]));  // rows 2t+8, 2t+9
      if (r0 + 16 > r_end) {  // V rows past r_end may hold anything (split 0 reads ahead): zero them
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          if (r0 + 2 * t + (j & 1) + 8 * (j >> 1) >= r_end) {
#pragma unroll
            for (int w = 0; w < kVWords; ++w) r.v[i][j][w] = 0u;
          }
        }
      }
#pragma unroll
      for (int j = 0; j < kVWords; ++j) {
        const uint32_t va[4] = {__byte_perm(r.v[i][0][j], r.v[i][1][j], 0x5410), __byte_perm(r.v[i][0][j], r.v[i][1][j], 0x7632),
                                __byte_perm(r.v[i][2][j], r.v[i][3][j], 0x5410), __byte_perm(r.v[i][2][j], r.v[i][3][j], 0x7632)};
        mma_16816(o[j], va, pb0, pb1);
      }
    }
  }

  // The warp's sums over its rows, then its results for the block's combine.
#pragma unroll
  for (int x = 4; x < 32; x <<= 1) {
    l_run[0] += __shfl_xor_sync(0xffffffffu, l_run[0], x);
    l_run[1] += __shfl_xor_sync(0xffffffffu, l_run[1], x);
  }
  if (g == 0) {
    sh.m[warp][2 * t] = m_run[0];
    sh.m[warp][2 * t + 1] = m_run[1];
    sh.l[warp][2 * t] = l_run[0];
    sh.l[warp][2 * t + 1] = l_run[1];
  }
#pragma unroll
  for (int j = 0; j < kVWords; ++j) {
    const int d = kHd / 8 * g + 2 * j;
    *reinterpret_cast<float2*>(&sh.o[warp][2 * t][d]) = make_float2(o[j][0], o[j][2]);
    *reinterpret_cast<float2*>(&sh.o[warp][2 * t + 1][d]) = make_float2(o[j][1], o[j][3]);
  }
}

// kHd: head_dim, 64 or 128. Fragment layouts as in mma_16816 (cuda_common.cuh), g = lane / 4,
// t = lane % 4:
//   Sᵀ = K·qᵀ, per step and k-step kk (16 dims): A = K rows (m = row g, g + 8), its k = 2t.., 2t+8..
//       being the lane's dims (head_dim / 4)·t + 4kk + {0, 1} and + {2, 3} (words 2kk and 2kk + 1 of
//       its K registers); B = q with the same dims, n = head g. The result holds the scores of rows
//       g and g + 8 for heads 2t and 2t + 1.
//   Oᵀ += Vᵀ·Pᵀ, per step and m-tile j: A = V (m = dims (head_dim / 8)·g + 2j and + 1, the low and
//       high halves of word j; k = rows 2t, 2t+1, 2t+8, 2t+9); B = P (k = those rows, n = head g):
//       the transposes of the score fragments as fp16. Lane (g, t) accumulates heads 2t, 2t + 1 at
//       dims (head_dim / 8)·g + 2j, + 1.
template <int kHd, bool kCluster, bool kManySplits = false>
__global__ void __launch_bounds__(kDecodeMmaThreads) attention_decode_kernel(const DecodeArgs a) {
  constexpr int kChunk = decode_chunk(kHd);
  __shared__ __align__(16) DecodeShared<kHd, kDecodeMmaWarps> sh;

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int split = blockIdx.x, kvh = blockIdx.y;
  const int h0 = kvh * a.group + blockIdx.z * kDecodeHeads;         // first query head of the block
  const int nh = min(kDecodeHeads, a.group - int(blockIdx.z) * kDecodeHeads);  // its heads
  const __half* k_head = a.k_cache + int64_t(kvh) * a.n_ctx * kHd;
  const __half* v_head = a.v_cache + int64_t(kvh) * a.n_ctx * kHd;
  if constexpr (kCluster) {
    if (split == 0 && threadIdx.x == 0) mbarrier_init_cluster(smem_address(&sh.bar), 1);
    cluster_arrive();
  }

  // With a.early, n_kv and every row but the newest are final before the previous kernel ends: the
  // block plans its split and loads its first chunk before the dependency wait, and reloads the
  // newest row after it. Otherwise split 0 starts at row 0 for any n_kv: its first chunk is loaded
  // before n_kv is known (rows past n_kv are masked below), so that a one-chunk context waits on
  // memory once.
  DecodeRegs<kHd> r;
  int n_kv = 0, len = 0, n_used = 0;
  if (a.early) {
    n_kv = read_n_kv(a, decode_one(kHd), decode_unit(kHd), kChunk, len, n_used);
    if (n_kv > 0) {
      if (split >= n_used) return cluster_leave<kCluster>();
      load_chunk(r, k_head, v_head, split * len, min(split * len + len, n_kv), warp, g, t);
    }
  }
  grid_dependency_wait();
  allow_dependent_launch();
  if (!a.early && split == 0) load_chunk(r, k_head, v_head, 0, a.n_ctx, warp, g, t);
  float4 qf[kHd / 16];
  load_q<kHd>(a, h0, nh, g, t, qf);
  if (!a.early) n_kv = read_n_kv(a, decode_one(kHd), decode_unit(kHd), kChunk, len, n_used);
  if (n_kv <= 0) {
    zero_heads(a, h0, nh, kHd);
    return cluster_leave<kCluster>();
  }
  if (split >= n_used) return cluster_leave<kCluster>();
  const int r_begin = split * len, r_end = min(r_begin + len, n_kv);
  if (a.early && n_kv - 1 < r_begin + kChunk && n_kv - 1 < r_end)  // the newest row is in the first chunk
    load_chunk(r, k_head, v_head, r_begin, r_end, warp, g, t, n_kv - 1);

  if (!a.early && split != 0) load_chunk(r, k_head, v_head, r_begin, r_end, warp, g, t);
  decode_rows<kHd>(a, r, qf, k_head, v_head, r_begin, r_end, warp, lane, sh);
  __syncthreads();
  decode_finish<kHd, kDecodeMmaWarps, kCluster, kManySplits>(a, sh, n_used, h0, nh);
}

__global__ void __launch_bounds__(kDecodeThreads) attention_decode_generic_kernel(const DecodeArgs a) {
  constexpr int kPer = kMaxHeadDim / 32;  // dims per lane: lane + 32·i
  __shared__ __align__(16) DecodeShared<kMaxHeadDim, kDecodeWarps> sh;

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int split = blockIdx.x, kvh = blockIdx.y, hd = a.head_dim;
  const int h0 = kvh * a.group + blockIdx.z * kDecodeHeads;
  const int nh = min(kDecodeHeads, a.group - int(blockIdx.z) * kDecodeHeads);

  grid_dependency_wait();
  allow_dependent_launch();
  float q[kDecodeHeads][kPer];  // scaled q of the block's heads (zeros past head_dim and nh)
#pragma unroll
  for (int h = 0; h < kDecodeHeads; ++h) {
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int d = lane + 32 * i;
      q[h][i] = h < nh && d < hd ? a.q[int64_t(h0 + h) * hd + d] * a.qscale : 0.f;
    }
  }
  int len = 0, n_used = 0;
  const int n_kv = read_n_kv(a, kGenericChunk, kGenericChunk, kGenericChunk, len, n_used);
  if (n_kv <= 0) {
    zero_heads(a, h0, nh, hd);
    return;
  }
  if (split >= n_used) return;
  const int r_begin = split * len, r_end = min(r_begin + len, n_kv);

  float m[kDecodeHeads], l[kDecodeHeads], o[kDecodeHeads][kPer];
#pragma unroll
  for (int h = 0; h < kDecodeHeads; ++h) {
    m[h] = -INFINITY;
    l[h] = 0.f;
#pragma unroll
    for (int i = 0; i < kPer; ++i) o[h][i] = 0.f;
  }
  const __half* k_head = a.k_cache + int64_t(kvh) * a.n_ctx * hd;
  const __half* v_head = a.v_cache + int64_t(kvh) * a.n_ctx * hd;
  for (int row = r_begin + warp; row < r_end; row += kDecodeWarps) {
    float kf[kPer] = {}, vf[kPer] = {};
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int d = lane + 32 * i;
      if (32 * i >= hd) break;
      if (d < hd) {
        kf[i] = __half2float(k_head[int64_t(row) * hd + d]);
        vf[i] = __half2float(v_head[int64_t(row) * hd + d]);
      }
    }
#pragma unroll
    for (int h = 0; h < kDecodeHeads; ++h) {
      if (h >= nh) break;
      float s = 0.f;
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        if (32 * i >= hd) break;
        s = fmaf(q[h][i], kf[i], s);
      }
      s = warp_sum(s);
      const float m_new = fmaxf(m[h], s);
      const float c = exp2f(m[h] - m_new), p = exp2f(s - m_new);  // c = 0 on the first row
      m[h] = m_new;
      l[h] = fmaf(l[h], c, p);
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        if (32 * i >= hd) break;
        o[h][i] = fmaf(o[h][i], c, p * vf[i]);
      }
    }
  }

  const int hd4 = (hd + 3) & ~3;
#pragma unroll
  for (int h = 0; h < kDecodeHeads; ++h) {
    if (lane == 0) {
      sh.m[warp][h] = m[h];
      sh.l[warp][h] = l[h];
    }
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int d = lane + 32 * i;
      if (d < hd4) sh.o[warp][h][d] = d < hd ? o[h][i] : 0.f;
    }
  }
  __syncthreads();
  decode_finish(a, sh, n_used, h0, nh);
}

// ---- decode with the output projection ------------------------------------------------------------

constexpr int kProjGroups = 2;  // (KV head, head tile) groups, one block of 8 warps each, per cluster
constexpr int kProjRows = kDecodeMmaWarps;  // output rows per block, one per warp; a multiple of 8, so
                                            // that its scales start 16-byte aligned (k: a multiple of 32)
constexpr int kProjMaxCluster = 8;  // blocks per cluster with splits: the portable maximum

struct ProjArgs {
  DecodeArgs att;
  const uint8_t* wq = nullptr;     // (n_out, k), q + 128 (CudaMatrix)
  const __half* ws = nullptr;      // (n_out, k / 32)
  float* y = nullptr;              // (n_out)
  int n_out = 0, k = 0;            // k = n_head · head_dim
  int head_tiles = 0;
  int groups = 1;                  // (KV head, head tile) groups: n_head_kv · head_tiles
  int splits = 1;                  // blocks per group, each a split of the rows; a cluster holds
                                   //   groups · splits blocks
};

// The rows r_begin .. r_end - 1 of split `split` of n_kv rows: one split takes them all; more take
// runs of whole 16-row steps, as equal as that allows (the last ones may be short or empty).
__device__ __forceinline__ void proj_split_rows(int n_kv, int splits, int split, int& r_begin, int& r_end) {
  const int len = splits == 1 ? n_kv : (n_kv + 16 * splits - 1) / (16 * splits) * 16;
  r_begin = min(n_kv, split * len);
  r_end = min(n_kv, r_begin + len);
}

// Dynamic shared memory of the fused kernel: the group's DecodeShared, the block's weight rows and
// scales, and the attention output staged as fp32 (x_unit order).
// With splits, then every block's partials: (cluster rank, kDecodeHeads) unnormalised outputs of
// head_dim values, then (cluster rank, kDecodeHeads) (maximum, sum, -, -) as float4.
template <int kHd>
size_t proj_smem_bytes(int k, int cluster) {
  static_assert(sizeof(DecodeShared<kHd, kDecodeMmaWarps>) % 16 == 0, "the parts after it stay 16-byte aligned");
  return sizeof(DecodeShared<kHd, kDecodeMmaWarps>) + size_t(kProjRows) * k + size_t(kProjRows) * k / 16 +
         size_t(k) * sizeof(float) + size_t(cluster) * kDecodeHeads * (kHd + 4) * sizeof(float);
}

// The blocks of a cluster run the whole attention, each one (KV head, head tile) group of 8 warps
// as a split of attention_decode_kernel. With one split per group, a block runs its group's
// attention over every chunk of rows and stores its heads' output, rounded to fp16, into the shared
// memory of every block of the cluster. With more, each block runs its split of the rows
// (proj_split_rows) and stores its unnormalised partials into every block of the cluster, and every
// block then combines the splits of each head (in split order, as the split kernels do). Then each
// block multiplies that input by its kProjRows rows of the projection, copied into shared memory
// before the dependency wait, and adds them to y. The first block also writes the attention output
// (with one split, the first cluster's blocks write their heads).
template <int kHd, bool kSplit>
__global__ void __launch_bounds__(kDecodeMmaThreads, 2) w8a16_matmul_m1_attention_decode(const ProjArgs p) {
  using Shared = DecodeShared<kHd, kDecodeMmaWarps>;
  constexpr int kChunk = decode_chunk(kHd);
  extern __shared__ __align__(16) unsigned char proj_smem[];
  const DecodeArgs& a = p.att;
  const int splits = kSplit ? p.splits : 1;
  const int cluster = p.groups * splits;
  const int rank = int(blockIdx.x) % cluster;  // the block's rank in its cluster
  const int grp = rank % p.groups, split = rank / p.groups;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int kvh = grp / p.head_tiles, tile = grp % p.head_tiles;
  const int h0 = kvh * a.group + tile * kDecodeHeads, nh = min(kDecodeHeads, a.group - tile * kDecodeHeads);
  const __half* k_head = a.k_cache + int64_t(kvh) * a.n_ctx * kHd;
  const __half* v_head = a.v_cache + int64_t(kvh) * a.n_ctx * kHd;
  Shared& sh = *reinterpret_cast<Shared*>(proj_smem);
  int8_t* w_s = reinterpret_cast<int8_t*>(proj_smem + sizeof(Shared));
  __half* s_s = reinterpret_cast<__half*>(w_s + kProjRows * p.k);
  float4* xs = reinterpret_cast<float4*>(s_s + kProjRows * (p.k / kW8Group));
  float* part_o = reinterpret_cast<float*>(xs + p.k / 4);                        // with splits
  float4* part_ml = reinterpret_cast<float4*>(part_o + cluster * kDecodeHeads * kHd);
  const int row0 = int(blockIdx.x) * kProjRows, rows = max(0, min(kProjRows, p.n_out - row0));
  if (cluster > 1) cluster_arrive();  // waited for before the first store into another block

  // Before the wait (as attention_decode_kernel with a.early): n_kv and the first chunk of the
  // block's rows, then its weight rows and scales (each a contiguous run) into shared memory.
  DecodeRegs<kHd> r;
  int n_kv = 0, r_begin = 0, r_end = 0;
  if (a.early) {
    n_kv = min(*a.n_kv, a.n_ctx);
    proj_split_rows(n_kv, splits, split, r_begin, r_end);
    if (r_begin < r_end) load_chunk(r, k_head, v_head, r_begin, min(r_begin + kChunk, r_end), warp, g, t);
  }
  for (int i = tid; i < rows * p.k / 16; i += kDecodeMmaThreads)
    cp_async16(w_s + 16 * i, p.wq + int64_t(row0) * p.k + 16 * i, 16);
  const int s_bytes = rows * p.k / 16;
  const char* s_src = reinterpret_cast<const char*>(p.ws + int64_t(row0) * (p.k / kW8Group));
  for (int i = tid; 16 * i < s_bytes; i += kDecodeMmaThreads)
    cp_async16(reinterpret_cast<char*>(s_s) + 16 * i, s_src + 16 * i, min(16, s_bytes - 16 * i));
  cp_async_commit();
  grid_dependency_wait();
  allow_dependent_launch();
  // The y value the warp's row adds to, in flight during the attention.
  const float y0 = lane == 0 && warp < rows ? p.y[row0 + warp] : 0.f;
  float4 qf[kHd / 16];
  load_q<kHd>(a, h0, nh, g, t, qf);
  if (!a.early) {
    n_kv = min(*a.n_kv, a.n_ctx);
    proj_split_rows(n_kv, splits, split, r_begin, r_end);
    if (r_begin < r_end) load_chunk(r, k_head, v_head, r_begin, min(r_begin + kChunk, r_end), warp, g, t);
  } else if (n_kv - 1 >= r_begin && n_kv - 1 < min(r_begin + kChunk, r_end)) {
    load_chunk(r, k_head, v_head, r_begin, min(r_begin + kChunk, r_end), warp, g, t, n_kv - 1);  // the newest row
  }
  if (r_begin < r_end) decode_rows<kHd>(a, r, qf, k_head, v_head, r_begin, r_end, warp, lane, sh);
  __syncthreads();
  if (cluster > 1) cluster_wait();  // every block of the cluster has started

  constexpr int kN4 = kHd / 4;
  if constexpr (!kSplit) {
    // The group's heads normalised and rounded to fp16, the projection's input (zeros without
    // rows), into every block of the cluster.
    for (int i = tid; i < nh * kN4; i += kDecodeMmaThreads) {
      const int h = i / kN4, d = 4 * (i - h * kN4), e = (h0 + h) * kHd + d;
      float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
      if (n_kv > 0) {
        float m, l;
        const float4 o = combine_warps(sh, h, d, m, l);
        const float inv = 1.0f / l;
        v = make_float4(o.x * inv, o.y * inv, o.z * inv, o.w * inv);
      }
      if (int(blockIdx.x) < p.groups) store_out4(a.out + int64_t(h0 + h) * kHd, d, kHd, v, 1.0f);
      const float4 x = make_float4(round_half(v.x), round_half(v.y), round_half(v.z), round_half(v.w));
      float4* to = &xs[x_unit<true>(e / 16, (e % 16) / 4)];
      if (cluster == 1) {
        *to = x;
      } else {
        for (int to_rank = 0; to_rank < cluster; ++to_rank)
          st_cluster_u4(cluster_address(smem_address(to), unsigned(to_rank)), *reinterpret_cast<const uint4*>(&x));
      }
    }
    cp_async_wait<0>();
    __syncthreads();
    if (cluster > 1) {  // every block's heads have arrived
      cluster_arrive();
      cluster_wait();
    }
  } else {
    // The block's partials (maximum -inf, sum and values 0 without rows) into every block.
    for (int i = tid; i < nh * kN4; i += kDecodeMmaThreads) {
      const int h = i / kN4, d = 4 * (i - h * kN4);
      float m = -INFINITY, l = 0.f;
      float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
      if (r_begin < r_end) o = combine_warps(sh, h, d, m, l);
      const float4 ml = make_float4(m, l, 0.f, 0.f);
      const uint32_t o_at = smem_address(part_o + (rank * kDecodeHeads + h) * kHd + d);
      const uint32_t ml_at = smem_address(part_ml + rank * kDecodeHeads + h);
      for (int to_rank = 0; to_rank < cluster; ++to_rank) {
        st_cluster_u4(cluster_address(o_at, unsigned(to_rank)), *reinterpret_cast<const uint4*>(&o));
        if (d == 0) st_cluster_u4(cluster_address(ml_at, unsigned(to_rank)), *reinterpret_cast<const uint4*>(&ml));
      }
    }
    cluster_arrive();
    cluster_wait();  // every block's partials have arrived
    // Every head of every group: its splits combined in split order, normalised and rounded to
    // fp16 (zeros without rows).
    for (int i = tid; i < p.groups * kDecodeHeads * kN4; i += kDecodeMmaThreads) {
      const int gg = i / (kDecodeHeads * kN4), h = (i / kN4) % kDecodeHeads, d = 4 * (i % kN4);
      const int tile_g = gg % p.head_tiles, hg0 = (gg / p.head_tiles) * a.group + tile_g * kDecodeHeads;
      if (h >= min(kDecodeHeads, a.group - tile_g * kDecodeHeads)) continue;
      float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
      if (n_kv > 0) {
        const auto at = [&](int s) { return (s * p.groups + gg) * kDecodeHeads + h; };
        float l;
        const float4 o = combine_splits(
            splits, [&](int s) { return make_float2(part_ml[at(s)].x, part_ml[at(s)].y); },
            [&](int s) { return *reinterpret_cast<const float4*>(part_o + at(s) * kHd + d); }, l);
        const float inv = 1.0f / l;
        v = make_float4(o.x * inv, o.y * inv, o.z * inv, o.w * inv);
      }
      const int e = (hg0 + h) * kHd + d;
      if (blockIdx.x == 0) store_out4(a.out + e - d, d, kHd, v, 1.0f);
      xs[x_unit<true>(e / 16, (e % 16) / 4)] =
          make_float4(round_half(v.x), round_half(v.y), round_half(v.z), round_half(v.w));
    }
    cp_async_wait<0>();
    __syncthreads();
  }

  // One warp per output row, as w8a16_matmul_m1 does it (same order of products and sums).
  if (warp >= rows) return;
  const uint4* w_row = reinterpret_cast<const uint4*>(w_s + warp * p.k);
  const __half* s_row = s_s + warp * (p.k / kW8Group);
  float acc = 0.f;
  for (int c = lane; c < p.k / 16; c += 32) {
    const uint4 w = w_row[c];
    float d = dot_i8x4(w.x, xs[x_unit<true>(c, 0)], 0.f);
    d = dot_i8x4(w.y, xs[x_unit<true>(c, 1)], d);
    d = dot_i8x4(w.z, xs[x_unit<true>(c, 2)], d);
    d = dot_i8x4(w.w, xs[x_unit<true>(c, 3)], d);
    acc = fmaf(d, __half2float(s_row[c >> 1]), acc);
  }
  acc = warp_sum(acc);
  if (lane == 0) p.y[row0 + warp] = y0 + acc;
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
  const int32_t* pos = nullptr;     // row 0's position (kPosInMemory)
};

// Rows k0 .. k0 + kPrefillKeys - 1 of one cache into a shared tile in 16-byte copies (per_row of them
// per row); rows past max_key are zeros (never attended; keeps stale cache values out of P·V).
// Inlined, a constant per_row (head_dim = kHdp) leaves the index arithmetic without a division.
template <int kLd>
__device__ __forceinline__ void prefill_copy_tile(int per_row, __half (*dst)[kLd], const __half* src, int k0,
                                                  int max_key, int hd) {
  for (int i = threadIdx.x; i < kPrefillKeys * per_row; i += kPrefillThreads) {
    const int r = i / per_row, c = (i % per_row) * 8;
    const bool ok = k0 + r <= max_key;
    cp_async16(&dst[r][c], ok ? src + int64_t(k0 + r) * hd + c : src, ok ? 16 : 0);
  }
}

// kHdp: head_dim rounded up to 64 or 128 (the padding is zeros). kPosInMemory: row 0's position
// from a.pos (a recorded prefill), otherwise a.pos0; its own instantiation, so that the kernel the
// other prefills run keeps its code.
template <int kHdp, bool kPosInMemory>
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
  // Row 0's position: written by an op before the previous one (the embedding, or an upload), so it
  // is read before the dependency wait, as a streaming load (ptxas keeps those ahead of the wait).
  const int pos0 = kPosInMemory ? __ldcs(a.pos) : a.pos0;
  const int max_key = pos0 + min(a.m, int(blockIdx.x + 1) * kPrefillRows) - 1;  // last cache row the block reads
  const int warp_max_key = pos0 + min(a.m - 1, row0 + 15);
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

  // Cache tile kt into Ks and Vs: K, then V, two commit groups.
  const auto load_tile = [&](int kt) {
    const int k0 = kt * kPrefillKeys;
    if (a.vec8) {
      if (hd == kHdp) {
        prefill_copy_tile<kLd>(kHdp / 8, Ks, k_head, k0, max_key, hd);
        cp_async_commit();
        prefill_copy_tile<kLd>(kHdp / 8, Vs, v_head, k0, max_key, hd);
      } else {
        prefill_copy_tile<kLd>(hd / 8, Ks, k_head, k0, max_key, hd);
        cp_async_commit();
        prefill_copy_tile<kLd>(hd / 8, Vs, v_head, k0, max_key, hd);
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
  };
  load_tile(0);  // requested before q is read, so that the two trips to memory overlap

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
    if (kt > 0) {
      __syncthreads();  // the previous tile is no longer read
      load_tile(kt);
    }
    cp_async_wait<1>();  // K is here
    __syncthreads();

    // A tile wholly after the warp's rows adds nothing, nor do its 16-key parts after them (a 30-token
    // prompt: half of tile 0), nor anything to a warp whose rows all lie past m.
    const int live = row0 < a.m && k0 <= warp_max_key ? min(kPrefillKeys / 16, (warp_max_key - k0) / 16 + 1) : 0;
    const bool active = live > 0;
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
          if (np >= live) break;  // warp-uniform
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
          const int pos = pos0 + row0 + g + (e >> 1) * 8;
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
          if (nt / 2 < live) {  // the others hold -inf scores only
            s[nt][2 * r2] = exp2f(s[nt][2 * r2] - m_new);
            s[nt][2 * r2 + 1] = exp2f(s[nt][2 * r2 + 1] - m_new);
            sum += s[nt][2 * r2] + s[nt][2 * r2 + 1];
          } else {
            s[nt][2 * r2] = s[nt][2 * r2 + 1] = 0.f;
          }
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
        if (j >= live) break;  // warp-uniform: P is zero there
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

// Heads wider than the tensor-core kernel holds (kPrefillMaxHeadDim < head_dim <= kMaxHeadDim): one
// warp per query row of one head, lanes over the head_dim (lane + 32·i), kPrefillGenericKeys cache
// rows scored at once, an online softmax in fp32 and fp32 weights for P·V. K and V come from L2,
// read again by every row and head of the group.
constexpr int kPrefillGenericWarps = 4;
constexpr int kPrefillGenericKeys = 4;

template <bool kPosInMemory>
__global__ void __launch_bounds__(32 * kPrefillGenericWarps) attention_prefill_generic_kernel(const PrefillArgs a) {
  constexpr int kPer = kMaxHeadDim / 32;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int row = int(blockIdx.x) * kPrefillGenericWarps + warp, h = blockIdx.y, kvh = h / a.group;
  const int hd = a.head_dim;
  const int pos0 = kPosInMemory ? __ldcs(a.pos) : a.pos0;

  grid_dependency_wait();
  allow_dependent_launch();
  if (row >= a.m) return;
  float q[kPer], o[kPer];
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int d = lane + 32 * i;
    q[i] = d < hd ? a.q[int64_t(row) * a.q_stride + int64_t(h) * hd + d] * a.qscale : 0.f;
    o[i] = 0.f;
  }
  const __half* k_head = a.k_cache + int64_t(kvh) * a.n_ctx * hd;
  const __half* v_head = a.v_cache + int64_t(kvh) * a.n_ctx * hd;
  const int last = pos0 + row;  // causal: cache rows 0 .. last
  float m = -INFINITY, l = 0.f;
  for (int k0 = 0; k0 <= last; k0 += kPrefillGenericKeys) {
    float s[kPrefillGenericKeys], v[kPrefillGenericKeys][kPer];
#pragma unroll
    for (int j = 0; j < kPrefillGenericKeys; ++j) {
      const int key = min(k0 + j, last);  // rows past last repeat it and are masked below
      float dot = 0.f;
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        const int d = lane + 32 * i;
        const bool ok = d < hd;
        dot = fmaf(q[i], ok ? __half2float(k_head[int64_t(key) * hd + d]) : 0.f, dot);
        v[j][i] = ok ? __half2float(v_head[int64_t(key) * hd + d]) : 0.f;
      }
      s[j] = dot;
    }
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < kPrefillGenericKeys; ++j) {
      s[j] = k0 + j <= last ? warp_sum(s[j]) : -INFINITY;
      mx = fmaxf(mx, s[j]);
    }
    const float m_new = fmaxf(m, mx);  // finite: key k0 <= last
    const float c = exp2f(m - m_new);  // 0 on the first keys
    m = m_new;
    l *= c;
#pragma unroll
    for (int i = 0; i < kPer; ++i) o[i] *= c;
#pragma unroll
    for (int j = 0; j < kPrefillGenericKeys; ++j) {
      const float p = exp2f(s[j] - m_new);
      l += p;
#pragma unroll
      for (int i = 0; i < kPer; ++i) o[i] = fmaf(p, v[j][i], o[i]);
    }
  }
  const float inv = 1.0f / l;
  __half* out_row = a.out + (int64_t(row) * a.n_head + h) * hd;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int d = lane + 32 * i;
    if (d < hd) out_row[d] = __float2half(o[i] * inv);
  }
}

// Whether the non-cluster tensor-core kernel takes its many-splits form (decode_finish): where
// `rows` (the most the call may attend to) take more splits than one batch of the combine holds and
// at most what 2 or 4 threads an item hold, with the threads for its `items` (heads times
// head_dim / 4) in the block.
bool many_splits(int rows, int one, int unit, int long_unit, int n_splits, int items) {
  if (rows <= one) return false;
  int len = 0, n_used = 0;
  plan_splits(rows, one, unit, long_unit, n_splits, len, n_used);
  if (n_used <= kCombineBatch) return false;
  return (n_used <= 2 * kCombineBatch && 2 * items <= kDecodeMmaThreads) ||
         (n_used <= 4 * kCombineBatch && 4 * items <= kDecodeMmaThreads);
}

void check_heads(const char* op, int n_head, int n_head_kv, int head_dim, int n_ctx) {
  CUDA_REQUIRE(n_head >= 1 && n_head_kv >= 1 && n_head % n_head_kv == 0, op,
               "n_head must be a positive multiple of n_head_kv");
  CUDA_REQUIRE(head_dim >= 2 && head_dim % 2 == 0 && head_dim <= kMaxHeadDim, op,
               "head_dim must be even and at most " + std::to_string(kMaxHeadDim));
  CUDA_REQUIRE(n_ctx >= 1, op, "n_ctx must be positive");
}

}  // namespace

void CudaBackend::prepare_attention() {
  // The fused projection's rows and staged input: as much as the device allows (checked per launch).
  for (const void* k : {reinterpret_cast<const void*>(w8a16_matmul_m1_attention_decode<64, false>),
                        reinterpret_cast<const void*>(w8a16_matmul_m1_attention_decode<128, false>),
                        reinterpret_cast<const void*>(w8a16_matmul_m1_attention_decode<64, true>),
                        reinterpret_cast<const void*>(w8a16_matmul_m1_attention_decode<128, true>)})
    CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem_optin_)));
  // Clusters of up to kClusterMaxSplits blocks, the first holding every split's partials.
  if (cc_major_ < 9) return;
  const auto allow = [](const void* kernel, int head_dim) {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(kClusterMaxSplits * kDecodeHeads * (head_dim + 2) * sizeof(float))));
  };
  allow(reinterpret_cast<const void*>(attention_decode_kernel<64, true>), 64);
  allow(reinterpret_cast<const void*>(attention_decode_kernel<128, true>), 128);
}

// Decode and prefill take heads up to kMaxHeadDim; prefill's tensor-core kernel up to
// kPrefillMaxHeadDim, its generic one the wider.
int CudaBackend::max_head_dim() const { return kMaxHeadDim; }

void CudaBackend::attention_decode(const AttentionDecodeDesc& d) {
  const char* op = "attention_decode";
  check_heads(op, d.n_head, d.n_head_kv, d.head_dim, d.n_ctx);
  CUDA_REQUIRE(d.q && d.k_cache && d.v_cache && d.out && d.n_kv, op, "a pointer is missing");
  const int group = d.n_head / d.n_head_kv;
  const int head_tiles = int(ceil_div(group, kDecodeHeads));
  CUDA_REQUIRE(int64_t(d.n_head_kv) * head_tiles <= kAttnCounters, op, "too many KV heads");

  // Tensor cores for head_dim 64 and 128 with 16-byte aligned q and caches, the generic kernel
  // otherwise.
  const bool tensor = (d.head_dim == 64 || d.head_dim == 128) && aligned_to(d.q, 16) && aligned_to(d.k_cache, 16) &&
                      aligned_to(d.v_cache, 16);
  const int one = tensor ? decode_one(d.head_dim) : kGenericChunk;  // rows taken as one split
  const int unit = tensor ? decode_unit(d.head_dim) : kGenericChunk;
  // Long contexts split into about one block per multiprocessor (at most kMaxSplits per KV head and
  // head tile, and as many as the partials workspace holds); the grid covers the splits a context of
  // n_ctx rows can use, and the kernel picks the split length from *n_kv (plan_splits).
  const int64_t hd4 = ceil_div(d.head_dim, 4) * 4;
  const int64_t per_split = int64_t(d.n_head) * (hd4 + 2);  // partial floats of one split of every head
  CUDA_REQUIRE(per_split <= int64_t(kAttnPartialFloats), op, "too many heads for the split workspace");
  const bool cluster = tensor && cc_major_ >= 9 && int64_t(d.n_ctx) * d.head_dim * 4 <= kClusterMaxBytes;
  const int64_t max_splits = std::min<int64_t>(
      {std::max<int64_t>(1, multiprocessors() / (int64_t(d.n_head_kv) * head_tiles)),
       cluster ? kClusterMaxSplits : kMaxSplits, int64_t(kAttnPartialFloats) / per_split});
  const int n_splits = d.n_ctx <= one ? 1 : int(std::min<int64_t>(max_splits, ceil_div(d.n_ctx, unit)));

  DecodeArgs a;
  a.q = d.q;
  a.k_cache = reinterpret_cast<const __half*>(d.k_cache);
  a.v_cache = reinterpret_cast<const __half*>(d.v_cache);
  a.out = reinterpret_cast<__half*>(d.out);
  a.n_kv = d.n_kv;
  a.head_dim = d.head_dim;
  a.n_ctx = d.n_ctx;
  a.group = group;
  a.qscale = d.scale * kLog2e;
  a.part_o = attn_partials_.as<float>();
  a.part_ml = a.part_o + int64_t(d.n_head) * n_splits * hd4;
  a.counters = attn_counters_.as<unsigned>();
  a.early = d.only_newest_row_fresh;
  const int max_rows = d.max_n_kv > 0 ? std::min(d.max_n_kv, d.n_ctx) : d.n_ctx;  // the caller's bound
  if (d.wo) {
    CUDA_REQUIRE(d.y && d.wo->type() == WeightType::W8 && d.wo->k() == int64_t(d.n_head) * d.head_dim, op,
                 "the output projection needs y and W8 weights of k = n_head * head_dim");
    // Fused where the heads fit at most kProjGroups groups of 8 warps (14/2 heads: two) and the
    // caller's bound on the rows gives each block at most one chunk, the rows split over up to
    // kProjMaxCluster / groups blocks per group (14/2 heads: up to 1,024 rows at head_dim 64).
    const int groups = d.n_head_kv * head_tiles;
    const int chunk = decode_chunk(d.head_dim);
    int splits = 1;
    while (max_rows > splits * chunk && groups * splits * 2 <= kProjMaxCluster) splits *= 2;
    const int cluster = groups * splits;
    const size_t smem = d.head_dim == 64 ? proj_smem_bytes<64>(int(d.wo->k()), splits > 1 ? cluster : 0)
                                         : proj_smem_bytes<128>(int(d.wo->k()), splits > 1 ? cluster : 0);
    const auto fused = splits > 1 ? (d.head_dim == 64 ? w8a16_matmul_m1_attention_decode<64, true>
                                                      : w8a16_matmul_m1_attention_decode<128, true>)
                                  : (d.head_dim == 64 ? w8a16_matmul_m1_attention_decode<64, false>
                                                      : w8a16_matmul_m1_attention_decode<128, false>);
    const unsigned blocks = unsigned(ceil_div(ceil_div(d.wo->n(), kProjRows), cluster) * cluster);
    if (tensor && groups <= kProjGroups && max_rows <= splits * chunk && smem <= smem_optin_ &&
        (cluster == 1 || (cc_major_ >= 9 && active_clusters(reinterpret_cast<const void*>(fused), dim3(blocks),
                                                            dim3(kDecodeMmaThreads), smem, unsigned(cluster)) > 0))) {
      const CudaMatrix& w = cuda_matrix(d.wo, op);
      ProjArgs p;
      p.att = a;
      p.wq = w.q();
      p.ws = w.scales();
      p.y = d.y;
      p.n_out = int(w.n());
      p.k = int(w.k());
      p.head_tiles = head_tiles;
      p.groups = groups;
      p.splits = splits;
      launch_clusters(fused, dim3(blocks), dim3(kDecodeMmaThreads), smem, unsigned(cluster), p);
      last_launch_ = LastLaunch::AttentionWithProjection;
      return;
    }
  }
  const dim3 grid(unsigned(n_splits), unsigned(d.n_head_kv), unsigned(head_tiles));
  if (!tensor) {
    launch(attention_decode_generic_kernel, grid, dim3(kDecodeThreads), 0, a);
  } else {
    const auto in_clusters = d.head_dim == 64 ? attention_decode_kernel<64, true> : attention_decode_kernel<128, true>;
    const size_t smem = size_t(n_splits) * kDecodeHeads * size_t(hd4 + 2) * sizeof(float);
    if (cluster && n_splits > 1 &&
        active_clusters(reinterpret_cast<const void*>(in_clusters), grid, dim3(kDecodeMmaThreads), smem,
                        unsigned(n_splits)) >= int(grid.y * grid.z)) {
      launch_clusters(in_clusters, grid, dim3(kDecodeMmaThreads), smem, unsigned(n_splits), a);
    } else {
      const int items = std::min(group, kDecodeHeads) * int(hd4 / 4);
      const bool many = many_splits(max_rows, one, unit, decode_chunk(d.head_dim), n_splits, items);
      const auto kernel = d.head_dim == 64
                              ? (many ? attention_decode_kernel<64, false, true> : attention_decode_kernel<64, false>)
                              : (many ? attention_decode_kernel<128, false, true> : attention_decode_kernel<128, false>);
      launch(kernel, grid, dim3(kDecodeMmaThreads), 0, a);
    }
  }
  if (d.wo) matmul_m1(output_projection(d));  // the projection as its own kernel
}


void CudaBackend::attention_prefill(const AttentionPrefillDesc& d) {
  const char* op = "attention_prefill";
  check_heads(op, d.n_head, d.n_head_kv, d.head_dim, d.n_ctx);
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
  a.pos = d.pos;
  a.n_head = d.n_head;
  a.head_dim = d.head_dim;
  a.n_ctx = d.n_ctx;
  a.group = d.n_head / d.n_head_kv;
  a.qscale = d.scale * kLog2e;
  a.vec8 = d.head_dim % 8 == 0 && aligned_to(d.k_cache, 16) && aligned_to(d.v_cache, 16);
  if (d.head_dim > kPrefillMaxHeadDim) {
    const dim3 grid(unsigned(ceil_div(d.m, kPrefillGenericWarps)), unsigned(d.n_head));
    launch(d.pos ? attention_prefill_generic_kernel<true> : attention_prefill_generic_kernel<false>, grid,
           dim3(32 * kPrefillGenericWarps), 0, a);
    return;
  }
  const dim3 grid(unsigned(ceil_div(d.m, kPrefillRows)), unsigned(d.n_head));
  if (d.head_dim <= 64) {
    launch(d.pos ? attention_prefill_kernel<64, true> : attention_prefill_kernel<64, false>, grid,
           dim3(kPrefillThreads), 0, a);
  } else {
    launch(d.pos ? attention_prefill_kernel<128, true> : attention_prefill_kernel<128, false>, grid,
           dim3(kPrefillThreads), 0, a);
  }
}

}  // namespace tllm::cuda
