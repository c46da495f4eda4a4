// Matmul kernels: y = x · Wᵀ (+ bias), or y += with `accumulate`, with MatmulDesc's two fusions
// (rmsnorm prologue, SwiGLU epilogue). W is (n, k); x is (m, k) fp16; y is (m, n) fp32.
//
// Decode (m = 1) streams every weight once. At the model's sizes (1 to 9 MB per matrix) the time is
// set less by bandwidth than by how early the weights are requested, so the kernels are shaped to
// have the weights in flight before the previous kernel has finished:
//   w8a16_matmul_m1  W8 weights. A warp owns one output row (two weight rows with SwiGLU: gate row j
//                    and up row j + n/2, which share every x read); each lane reads 16-byte vectors of
//                    16 int8 weights, so one load of a warp covers 512 contiguous bytes of a row. Long
//                    rows are split over 2 to 8 warps of a block ("slices") that add their sums in
//                    shared memory in a fixed order (ffn_down, n = 896, k = 4864: 4 warps per row). A
//                    launch takes as many warps (64 registers each) as fit on the GPU at once, up to
//                    one per row and slice: the more warps, the more weights are requested before the
//                    previous kernel ends (programmatic dependent launch; the weights do not depend on
//                    it). ffn_down's kernel is held to 48 registers, which leaves room beside its
//                    blocks for the next kernel's (kGemvNarrow). Blocks have 8 warps where the rows
//                    fill the GPU (ffn_gate_up, lm_head); otherwise they are larger (24 warps, or 4
//                    rows of split rows), so that a small projection leaves most multiprocessors free
//                    for the next kernel's blocks (see gemv_plan). A lane requests its first batch of
//                    vectors (up to 8) before waiting on the previous kernel; a warp with more rows or
//                    batches (ffn_gate_up: 4864 rows for 4224 warps) requests each next batch before
//                    using the current one; right after the fused attention and output projection
//                    (decode steps up to 1,024 cache rows) ffn_gate_up takes two pairs a warp instead,
//                    all its weights in one batch (w8a16_matmul_m1_rmsnorm_swiglu_x2, 304 blocks of 80
//                    registers; see matmul_m1_kernel). Weights and scales are streaming loads
//                    (ld.global.cs: read once per step, evicted first). On an H200 they decode
//                    2,058-2,060 tok/s against 2,037-2,041 with read-only loads (ld.global.nc), and
//                    1,787-1,790 against 1,775-1,778 at 4,096 tokens of context; read-only loads with
//                    an evict-first L2 policy lost (2,029). x (k fp16 values, or the rmsnorm prologue's
//                    fp16 output) is staged once per block in shared memory as fp32, every load of a
//                    thread issued before the first store; the bias and the y being accumulated into
//                    are requested before x is staged (and for each later row when it starts), so that
//                    their trip to memory overlaps x's. int8 → fp32 is one byte permute and one
//                    subtract (the 2^23 magic number); the 16 products of a vector are summed in fp32,
//                    one 4-value unit of x at a time, and scaled by their group's scale. The QKV
//                    projection's epilogue applies rope and appends k and v to the caches: the block's
//                    8 warps take the 4 rotation pairs' rows (j and j + head_dim/2, or 2j and 2j + 1),
//                    so a pair is finished inside one block, with the angle in fp64 as in the rope
//                    kernel.
//   fp16_matmul_m1   F16 weights (the lm_head: n = 151936, k = 896): the same kernel with 8 fp16
//                    weights per 16-byte vector, and an argmax epilogue for greedy decoding (each
//                    warp keeps the best of its rows; argmax_commit in argmax.cuh combines them).
//   fp16_matmul_m1_int8_form  an F16 matrix kept in its int8 form (HostMatrix: the lm_head converted
//                    from Q8_0 blocks), stored in tiles of 16 rows × 128 values (CudaMatrix): each
//                    weight is rebuilt as fp16(q · s) by one fp16 multiply (int8_pair_as_f16), the
//                    fp16 lm_head's values bit for bit, and the products are summed on tensor cores
//                    in fp32. A warp owns 16 rows and walks them in steps of 128 values, each step
//                    one 2 KB tile, with 5 steps in its registers (128 registers a thread, two
//                    8-warp blocks per multiprocessor). On an H200 the lm_head takes 39.2–39.4 µs
//                    in the decode chain (40.7–41.1 with the rows stored row-major), where the
//                    previous form (two rows a warp on CUDA cores, 64 registers) took 54.3, and 2
//                    or 3 steps in flight 48.0 and 45.6.
// A block walks its rows with the grid as stride, staging x once. The x values in shared memory are
// laid out so that the 8 lanes of a quarter-warp read 8 different bank groups (see x_unit). A kernel's
// name carries its fusions (w8a16_matmul_m1_rmsnorm_rope, _rmsnorm_swiglu, fp16_matmul_m1_rmsnorm,
// ...), so that a profiler's filter on "rmsnorm" or "rope" finds them.
//
// Prefill of a short prompt (2 <= m <= 64) still streams weights: at m = 30 a projection's
// arithmetic takes less time than its weights (1 to 9 MB) take to arrive, so, as in decode, every
// weight is requested before the kernel waits for the previous one:
//   matmul_prefill_small  A warp owns a tile of 16 weight rows (SwiGLU: 16 gate rows and the 16
//                    matching up rows, so the epilogue has both) over up to 8 windows of 32 values
//                    of k (half as many for F16, and for SwiGLU at 64 rows of x), held in registers.
//                    The weights are the A operand of mma.sync m16n8k16, loaded straight into the
//                    fragments: lane (g, t) reads values 8t .. 8t + 7 of rows g and g + 8 of a window
//                    (an mma step sums over the 4 lanes of a quad, so a W8 group's 32 values are
//                    split 8 per lane: one 8-byte load for W8, 16 bytes for F16) and the mma's k
//                    order is permuted to match, in x as in the weights (see small_a_frag). int8 is
//                    widened to fp16 exactly and each window's product is scaled per weight row in
//                    fp32 into the sum, so the weights are never rounded. The rows of x (m rounded
//                    up to a multiple of 8) are the B operand, staged in shared memory for the
//                    block's windows as [window][row][32 values], so that a warp's 16-byte reads hit
//                    every bank once; a thread's chunks of x lie in one row, so staging is one
//                    copy request per chunk at a constant stride. The rmsnorm prologue computes its
//                    fp16 rows there instead of running as a kernel of its own (each block needs
//                    whole rows for their sums of squares, kept in fp32 per thread and added
//                    across threads in fp64, see SquareSums):
//                    where they fit (up to 32 rows of x at k = 896), the fp32 rows and the norm
//                    weights are copied into shared memory in one trip with every request in
//                    flight, then summed and converted from there, by the blocks of a thread-block
//                    cluster of 4 (2 up to 16 rows of x; none up to 8), each converting its share
//                    of the rows into every block's shared memory (distributed shared memory), so a
//                    block copies and converts a quarter of them (TTFT of the 30-token chat prompt
//                    on an H200: 1.041–1.050 → 0.946–0.950 ms). Otherwise (rows that do not fit, or
//                    past 8 rows a GPU without clusters) every block reads them from global memory
//                    in batches. Four warps ("slices") share a
//                    tile's k and add their sums in shared memory in slice order. A block has 8 warps
//                    (2 tiles, two blocks per SM), or 12 (3 tile pairs, one block per SM) for SwiGLU
//                    up to 32 rows of x, whose 64 registers of weights and 32 of sums do not fit
//                    the 128 registers of two blocks per SM. k is split over blocks (blockIdx.y) only
//                    where four warps do not cover it (ffn_down, k = 4864: 5 splits of 32 windows)
//                    or the staged x would not fit; the splits' sums go to a workspace and the last
//                    block of a row block to arrive adds them up in split order, so the result does
//                    not depend on timing. A plain projection with split k up to 32 rows of x takes
//                    16 warps (4 tiles, one block per SM): half as many blocks stage x and meet at
//                    the counters (measured on an H200, TTFT of the 30-token chat prompt 1.046–1.053
//                    → 1.028–1.031 ms; 16 warps for the projections without split k lost, 1.050–1.053
//                    → 1.073–1.076). At m = 30 on an H200 (132 SMs): qkv_proj 36 blocks (9 clusters
//                    of 4), attn_out 28, ffn_gate_up 104 (26 clusters of 4, two blocks without
//                    tiles), ffn_down 70, each launch resident at once.
//                    The QKV projection's rope epilogue (rotation, KV append) runs in the kernel
//                    when k is not split and each rotation pair falls into one block: Neox pairs
//                    (j, j + head_dim/2) are 2 tiles apart at head_dim 64, so the launch takes a
//                    head's tiles in the order that puts a tile and its partner in one block (see
//                    small_tile). The tiles' sums go through shared memory; each thread then turns
//                    one pair of columns row by row, its frequency worked out before the wait.
//
// Longer prompts (m > 64) are bound by arithmetic:
//   matmul_prefill   64x64 output tiles, 4 warps of 32x32, mma.sync m16n8k16 (fp16 in, fp32 out),
//                    k in steps of 32 (one W8 group) double-buffered in shared memory. W8 weights are
//                    widened to fp16 exactly (the int8 values themselves); each group's product is
//                    scaled per column in fp32, so the weights are never rounded. The SwiGLU form
//                    interleaves gate and up rows in the tile's columns, so each thread holds the gate
//                    and up value of the same output. The rmsnorm prologue runs first, as the rmsnorm
//                    kernel into a workspace. When the output tiles alone would leave SMs idle (up to
//                    a few hundred rows against n = 896) and the GPU has thread-block clusters
//                    (sm_90), k is split over the blocks of one cluster: each leaves its 64x64 sums
//                    in its shared memory, and after a cluster barrier block s adds up its share of
//                    the tile's rows over every block's sums (distributed shared memory) in split
//                    order, so the result does not depend on timing and nothing goes through L2.
//                    Without clusters k is not split.
#include <algorithm>

#include "backends/cuda/cuda_backend_impl.cuh"

namespace tllm::cuda {
namespace {

// ---- decode: matrix-vector product -------------------------------------------------------------

// A block has 8 to 32 warps, the launch's choice (gemv_plan); every variant fits 64 registers per
// thread (the narrow one 48), so a multiprocessor holds 32 warps of it.
constexpr int kGemvMaxWarps = 32;
constexpr int kGemvRopeWarps = 8;  // the rope epilogue's blocks: 4 rotation pairs, 2 rows each
constexpr int kRopePairs = kGemvRopeWarps / 2;
constexpr int kNormUnits = 2;  // prologue: 4-value units per thread held in registers (k <= 2048)
constexpr int kStageBatch = 8;  // x staging: 4-value units per thread loaded before any is stored

// The rope epilogue (MatmulEpilogue::QkvRopeAppend) of the decode and short-prompt kernels: each
// row of y is a packed qkv row, (n_head + 2·n_head_kv) heads of head_dim.
struct RopeAppendArgs {
  const int32_t* pos = nullptr;    // (m) positions; null: no rope epilogue
  __half* k_cache = nullptr;       // (n_head_kv, n_ctx, head_dim)
  __half* v_cache = nullptr;       // (n_head_kv, n_ctx, head_dim)
  int n_head = 0, n_head_kv = 0, head_dim = 0, n_ctx = 0;
  float theta = 0;
  bool neox = false;
};

RopeAppendArgs rope_append_args(const QkvRopeAppendDesc& r) {
  RopeAppendArgs a;
  a.pos = r.pos;
  a.k_cache = reinterpret_cast<__half*>(r.k_cache);
  a.v_cache = reinterpret_cast<__half*>(r.v_cache);
  a.n_head = r.n_head;
  a.n_head_kv = r.n_head_kv;
  a.head_dim = r.head_dim;
  a.n_ctx = r.n_ctx;
  a.theta = r.theta;
  a.neox = r.mode == RopeMode::Neox;
  return a;
}

// Finishes rotation pair (d0, d1) of head `head` of the qkv row y_row at position pos: q and k
// heads are turned by the angle pos · freq (fp64, as in the rope kernel), v heads pass through; y
// gets both values, and k and v heads go to their cache row as fp16.
__device__ __forceinline__ void rope_append_pair(const RopeAppendArgs& r, float* y_row, int head, int d0, int d1,
                                                 float v0, float v1, double freq, int pos) {
  const int64_t at = int64_t(head) * r.head_dim;
  if (head < r.n_head + r.n_head_kv) {
    double sn, cs;
    sincos(double(pos) * freq, &sn, &cs);
    rope_turn(v0, v1, cs, sn, v0, v1);
  }
  y_row[at + d0] = v0;
  y_row[at + d1] = v1;
  if (head < r.n_head || pos < 0 || pos >= r.n_ctx) return;
  const bool is_k = head < r.n_head + r.n_head_kv;
  const int kv_head = head - r.n_head - (is_k ? 0 : r.n_head_kv);
  __half* dst = (is_k ? r.k_cache : r.v_cache) + (int64_t(kv_head) * r.n_ctx + pos) * r.head_dim;
  dst[d0] = __float2half_rn(v0);
  dst[d1] = __float2half_rn(v1);
}

struct GemvArgs {
  const uint8_t* q = nullptr;      // W8: (n, k), q + 128 (CudaMatrix)
  const __half* scales = nullptr;  // W8: (n, k / 32)
  const __half* w16 = nullptr;     // F16: (n, k_pad)
  int k = 0;                       // inputs
  int k_pad = 0;                   // F16 row stride in values
  int chunks = 0;                  // 16-byte vectors per weight row: k / 16 (W8), k_pad / 8 (F16)
  int rows = 0;                    // outputs: n, or n / 2 with SwiGLU
  int pair_offset = 0;             // SwiGLU: rows from gate row j to up row j (n / 2)
  int slices = 1;                  // warps sharing one row (1, 2, 4 or 8)
  const __half* x = nullptr;       // (k), unused with the prologue
  const float* norm_x = nullptr;   // (k) or null
  const float* norm_w = nullptr;   // (k)
  float norm_eps = 0;
  double norm_inv_k = 0;           // 1 / k, for inverse_rms
  const float* bias = nullptr;     // (n) or null
  float* y = nullptr;              // (n)
  __half* out16 = nullptr;         // SwiGLU: (n / 2)
  bool accumulate = false;
  RopeAppendArgs rope;             // rope epilogue: pos is a scalar
  int32_t* argmax = nullptr;       // scalar, or null: no argmax epilogue
  ArgmaxWorkspace argmax_ws;
  int32_t* argmax_advance = nullptr;  // (2) or null: see ArgmaxDesc
};

// Stores unit u (values 4u .. 4u + 3) of the staged x as fp32 into xs, in x_unit order.
template <bool kW8>
struct XUnitStore {
  float4* xs;
  __device__ void operator()(int u, float4 v) const {
    constexpr int kUnits = kW8 ? 4 : 2;  // units per weight vector
    xs[x_unit<kW8>(u / kUnits, u % kUnits)] = v;
  }
};

// Hands x (or the rmsnorm prologue's fp16 values) to store(u, v) in 4-value units v, zero past k,
// over the units of a weight row. Block-wide. Every global load a thread makes is issued before
// the first value is stored, so staging costs one trip to memory (the prologue's block sum adds a
// barrier).
template <bool kW8, bool kNorm, int kLoads = kStageBatch, class Store>
__device__ void stage_x(const GemvArgs& a, Store store) {
  const int units = a.chunks * (kW8 ? 4 : 2);
  __shared__ double scratch[32];
  if constexpr (kNorm) {
    // out = fp16(x / sqrt(mean(x²) + eps) * weight); the sum of squares in fp64 as in the oracle.
    const bool vec = a.k % 4 == 0 && aligned_to(a.norm_x, 16) && aligned_to(a.norm_w, 16);
    const int k_units = a.k / 4;
    if (vec && k_units <= kNormUnits * int(blockDim.x)) {
      // x and weight in registers: one trip to memory for both.
      float4 xv[kNormUnits], wv[kNormUnits];
      double ss = 0;
#pragma unroll
      for (int i = 0; i < kNormUnits; ++i) {
        const int u = threadIdx.x + i * blockDim.x;
        xv[i] = wv[i] = make_float4(0.f, 0.f, 0.f, 0.f);
        if (u < k_units) {
          xv[i] = reinterpret_cast<const float4*>(a.norm_x)[u];
          wv[i] = reinterpret_cast<const float4*>(a.norm_w)[u];
        }
      }
#pragma unroll
      for (int i = 0; i < kNormUnits; ++i)
        ss += double(xv[i].x) * xv[i].x + double(xv[i].y) * xv[i].y + double(xv[i].z) * xv[i].z + double(xv[i].w) * xv[i].w;
      ss = block_sum(ss, scratch);
      const float inv = inverse_rms(ss, a.norm_inv_k, a.norm_eps);
#pragma unroll
      for (int i = 0; i < kNormUnits; ++i) {
        const int u = threadIdx.x + i * blockDim.x;
        if (u < k_units)
          store(u, make_float4(round_half(xv[i].x * inv * wv[i].x), round_half(xv[i].y * inv * wv[i].y),
                               round_half(xv[i].z * inv * wv[i].z), round_half(xv[i].w * inv * wv[i].w)));
      }
      for (int u = k_units + threadIdx.x; u < units; u += blockDim.x)
        store(u, make_float4(0.f, 0.f, 0.f, 0.f));
      return;
    }
    double ss = 0;
    for (int e = threadIdx.x; e < a.k; e += blockDim.x) ss += double(a.norm_x[e]) * a.norm_x[e];
    ss = block_sum(ss, scratch);
    const float inv = inverse_rms(ss, a.norm_inv_k, a.norm_eps);
    for (int u = threadIdx.x; u < units; u += blockDim.x) {
      const int e = 4 * u;
      float t[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) t[i] = e + i < a.k ? round_half(a.norm_x[e + i] * inv * a.norm_w[e + i]) : 0.f;
      store(u, make_float4(t[0], t[1], t[2], t[3]));
    }
  } else if (a.k % 4 == 0 && aligned_to(a.x, 8)) {
    for (int base = 0; base < units; base += kLoads * int(blockDim.x)) {
      uint2 raw[kLoads];
#pragma unroll
      for (int i = 0; i < kLoads; ++i) {
        const int e = 4 * (base + i * int(blockDim.x) + int(threadIdx.x));
        raw[i] = e < a.k ? *reinterpret_cast<const uint2*>(a.x + e) : make_uint2(0u, 0u);  // 0 is +0.0 in fp16
      }
#pragma unroll
      for (int i = 0; i < kLoads; ++i) {
        const int u = base + i * int(blockDim.x) + int(threadIdx.x);
        if (u < units) {
          const float2 lo = half2_bits_to_float2(raw[i].x), hi = half2_bits_to_float2(raw[i].y);
          store(u, make_float4(lo.x, lo.y, hi.x, hi.y));
        }
      }
    }
  } else {
    for (int u = threadIdx.x; u < units; u += blockDim.x) {
      const int e = 4 * u;
      float t[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) t[i] = e + i < a.k ? __half2float(a.x[e + i]) : 0.f;
      store(u, make_float4(t[0], t[1], t[2], t[3]));
    }
  }
}

// Σ w[i]·x[i] over the 4 fp16 values of (w0, w1) into d.
__device__ __forceinline__ float dot_h4(uint32_t w0, uint32_t w1, float4 x, float d) {
  const float2 a = half2_bits_to_float2(w0), b = half2_bits_to_float2(w1);
  d = fmaf(a.x, x.x, d);
  d = fmaf(a.y, x.y, d);
  d = fmaf(b.x, x.z, d);
  d = fmaf(b.y, x.w, d);
  return d;
}

// One batch of a lane's weight vectors: kBatch vectors (32·slices apart) of each of kRows weight
// rows. A warp owns one output row: one weight row, or with SwiGLU its gate row (r = 0) and up
// row (r = 1).
template <int kRows, int kBatch>
struct GemvBatch {
  uint4 w[kRows][kBatch];
  __half scale[kRows][kBatch];  // W8 group scale of each vector
};

// A warp with two SwiGLU pairs (kRows = 4, w8a16_matmul_m1_rmsnorm_swiglu_x2) owns output rows j and
// j + kTwoPairWarps: its 8-warp block covers 16 consecutive rows.
constexpr int kTwoPairWarps = 8;
// Output row of weight row r of a warp whose first output row is `row`: r = 2, 3 are the second
// pair's.
template <int kRows>
__device__ __forceinline__ int out_row(int row, int r) {
  return kRows == 4 ? row + (r >> 1) * kTwoPairWarps : row;
}
// Weight row r of output row `row`: the row itself, or with SwiGLU its gate (r even) or up row (r odd).
template <int kRows>
__device__ __forceinline__ int64_t weight_row(const GemvArgs& a, int row, int r) {
  return out_row<kRows>(row, r) + int64_t(r & 1) * a.pair_offset;
}

// Vector c of batch b for a lane: c = first + step · (b · kBatch + i), i < kBatch. Rows past the
// last and vectors past the row's end read nothing and count as zeros.
template <bool kW8, int kRows, int kBatch>
__device__ __forceinline__ void gemv_load(const GemvArgs& a, int row, int batch, int first, int step,
                                          GemvBatch<kRows, kBatch>& r) {
  const int c0 = first + step * batch * kBatch;
#pragma unroll
  for (int p = 0; p < kRows; ++p) {
    const int64_t wrow = weight_row<kRows>(a, row, p);
    const uint4* wv = kW8 ? reinterpret_cast<const uint4*>(a.q + wrow * a.k) : reinterpret_cast<const uint4*>(a.w16 + wrow * a.k_pad);
    const __half* sv = kW8 ? a.scales + wrow * (a.k / kW8Group) : nullptr;
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int c = c0 + step * i;
      const bool ok = out_row<kRows>(row, p) < a.rows && c < a.chunks;
      r.w[p][i] = ok ? __ldcs(wv + c) : make_uint4(0u, 0u, 0u, 0u);
      if constexpr (kW8) r.scale[p][i] = ok ? __ldcs(sv + (c >> 1)) : __ushort_as_half(0);
    }
  }
}

template <bool kW8, int kRows, int kBatch>
__device__ __forceinline__ void gemv_accumulate(const GemvArgs& a, const float4* xs, int batch, int first,
                                                int step, const GemvBatch<kRows, kBatch>& r,
                                                float (&acc)[kRows]) {
#pragma unroll
  for (int i = 0; i < kBatch; ++i) {
    const int c = first + step * (batch * kBatch + i);
    if (c < a.chunks) {
      if constexpr (kW8) {
        // One 4-value unit of x at a time, used by every row: few registers besides the weights.
        float d[kRows];
        float4 x = xs[x_unit<true>(c, 0)];
#pragma unroll
        for (int p = 0; p < kRows; ++p) d[p] = dot_i8x4(r.w[p][i].x, x, 0.f);
        x = xs[x_unit<true>(c, 1)];
#pragma unroll
        for (int p = 0; p < kRows; ++p) d[p] = dot_i8x4(r.w[p][i].y, x, d[p]);
        x = xs[x_unit<true>(c, 2)];
#pragma unroll
        for (int p = 0; p < kRows; ++p) d[p] = dot_i8x4(r.w[p][i].z, x, d[p]);
        x = xs[x_unit<true>(c, 3)];
#pragma unroll
        for (int p = 0; p < kRows; ++p) {
          d[p] = dot_i8x4(r.w[p][i].w, x, d[p]);
          acc[p] = fmaf(d[p], __half2float(r.scale[p][i]), acc[p]);
        }
      } else {
        const float4 x0 = xs[x_unit<false>(c, 0)], x1 = xs[x_unit<false>(c, 1)];
#pragma unroll
        for (int p = 0; p < kRows; ++p) {
          const uint4 w = r.w[p][i];
          acc[p] = dot_h4(w.z, w.w, x1, dot_h4(w.x, w.y, x0, acc[p]));
        }
      }
    }
  }
}

// The values the epilogue of a row adds (bias, and y when accumulating), requested when the row
// starts so that they arrive while it is computed. Only the writing thread loads them.
template <int kRows>
struct GemvEpilogueInputs {
  float bias[kRows];
  float y;
};

template <int kRows>
__device__ __forceinline__ void gemv_epilogue_inputs(const GemvArgs& a, int row, bool writer, GemvEpilogueInputs<kRows>& e) {
  const bool mine = writer && row < a.rows;
#pragma unroll
  for (int p = 0; p < kRows; ++p) {
    const bool in_range = kRows < 4 || out_row<kRows>(row, p) < a.rows;  // a second pair may lie past the end
    e.bias[p] = mine && in_range && a.bias ? a.bias[weight_row<kRows>(a, row, p)] : 0.f;
  }
  e.y = kRows == 1 && mine && a.accumulate ? a.y[row] : 0.f;
}

// Adds up a row's sums (lanes, then slices in order) into the value of its warp's lane 0 (of slice
// 0). Block-wide when the row is split over several warps.
template <int kRows>
__device__ __forceinline__ void gemv_reduce(const GemvArgs& a, int warp, int slice, int lane, const float (&acc)[kRows],
                                            float (*partial)[kRows], float (&v)[kRows]) {
#pragma unroll
  for (int p = 0; p < kRows; ++p) v[p] = warp_sum(acc[p]);
  if (a.slices > 1) {
    if (lane == 0) {
#pragma unroll
      for (int p = 0; p < kRows; ++p) partial[warp][p] = v[p];
    }
    __syncthreads();
    if (slice == 0) {
#pragma unroll
      for (int p = 0; p < kRows; ++p) {
        float t = 0.f;
        for (int s = 0; s < a.slices; ++s) t += partial[warp + s][p];
        v[p] = t;
      }
    }
    __syncthreads();
  }
}

// Writes a row's output: y (+ bias, + y when accumulating), or the SwiGLU value; offers y to the
// argmax epilogue's candidate.
template <int kRows>
__device__ __forceinline__ void gemv_write(const GemvArgs& a, int row, const float (&v)[kRows],
                                           const GemvEpilogueInputs<kRows>& e, ArgmaxCandidate& best) {
  if (row >= a.rows) return;
  if constexpr (kRows == 1) {
    const float r = v[0] + e.bias[0];
    const float out = a.accumulate ? e.y + r : r;
    a.y[row] = out;
    best.offer(out, row);
  } else {
#pragma unroll
    for (int q = 0; q < kRows / 2; ++q) {
      const int r = out_row<kRows>(row, 2 * q);
      if (r >= a.rows) break;
      const float g = v[2 * q] + e.bias[2 * q];
      const float u = v[2 * q + 1] + e.bias[2 * q + 1];
      a.out16[r] = __float2half_rn(g / (1.0f + expf(-g)) * u);
    }
  }
}

// Rope epilogue: rotation pair p (0 .. n_rows / 2) of the packed qkv row is rows rope_row(p, 0) and
// rope_row(p, 1) of a head: (j, j + head_dim/2) in Neox mode, (2j, 2j + 1) otherwise. A block's warp
// w computes row rope_row(4·block + w % 4, w / 4), so each pair is finished inside one block.
__device__ __forceinline__ int rope_row(const GemvArgs& a, int pair, int second) {
  const int half = a.rope.head_dim >> 1;
  const int head = pair / half, j = pair - head * half;
  return head * a.rope.head_dim + (a.rope.neox ? j + second * half : 2 * j + second);
}

// The block's rotation pairs, one per thread 0..3: rotates q and k pairs (v heads pass through),
// writes y and appends the k and v values to the caches at *pos. `vals` holds each warp's row value.
__device__ __forceinline__ void gemv_rope_write(const GemvArgs& a, const float* vals, double freq, int pos) {
  const int t = threadIdx.x, pair = int(blockIdx.x) * kRopePairs + t;
  if (t >= kRopePairs || pair >= a.rows / 2) return;
  const int row0 = rope_row(a, pair, 0), row1 = rope_row(a, pair, 1);
  const int head = row0 / a.rope.head_dim, at = head * a.rope.head_dim;
  rope_append_pair(a.rope, a.y, head, row0 - at, row1 - at, vals[t], vals[t + kRopePairs], freq, pos);
}

// ffn_down's kernel (the plain W8 GEMV of batch 4: k = 4864, 4 warps a row, 16-warp blocks) is
// held to 48 registers a thread, so that beside two of its blocks a multiprocessor keeps 16,384
// registers: room for one 8-warp block of the QKV projection that follows (56 registers), whose
// 144 blocks can then all be resident, their weights requested, before ffn_down ends. At 64
// registers a multiprocessor with two ffn_down blocks had no room left, and the QKV blocks placed
// there started only when those ended. On an H200: decode 2,201 against 2,176 tok/s, the QKV
// projection 3.33 against 3.65 µs in the chain and ffn_down 3.30 against 3.39. To fit, it has no
// second set of registers for a next batch, and it stages x 3 units per thread at a time
// (ffn_down's 1,216 units over 512 threads: one trip; ptxas still spills 16 bytes).
template <bool kW8, bool kPair, int kBatch, bool kRope, bool kNorm>
constexpr bool kGemvNarrow = kW8 && !kPair && !kRope && !kNorm && kBatch == 4;
template <int kBatch>
constexpr int kGemvPlainRegs = kGemvNarrow<true, false, kBatch, false, false> ? 48 : 64;
constexpr int kNarrowStageBatch = 3;

// One block walks its output rows (the grid as stride) in batches of kBatch vectors per lane and
// weight row. The first batch is requested before the dependency wait. With kPrefetch a second set
// of registers holds the next batch, requested before the current one is used, so that a warp with
// several rows or batches always has weights in flight; variants that hold more than 4 vectors per
// lane (down: one row per warp, all of it in one batch) need no second set. kTwoPairs (SwiGLU, blocks
// of kTwoPairWarps warps, one slice): a warp owns output rows j and j + kTwoPairWarps.
template <bool kW8, bool kPair, int kBatch, bool kRope, bool kNorm, bool kTwoPairs = false>
__device__ __forceinline__ void gemv(const GemvArgs& a) {
  constexpr int kRows = kPair ? (kTwoPairs ? 4 : 2) : 1;
  constexpr bool kNarrow = kGemvNarrow<kW8, kPair, kBatch, kRope, kNorm>;
  constexpr bool kPrefetch = kRows * kBatch <= 4 && !kNarrow;
  extern __shared__ float4 xs[];  // (chunks · V / 4) units, see x_unit
  __shared__ float partial[kGemvMaxWarps][kRows];
  __shared__ float rope_vals[kGemvRopeWarps];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int rows_per_block = int(blockDim.x >> 5) / a.slices * (kTwoPairs ? 2 : 1);
  const int slice = warp % a.slices;
  const int first = slice * 32 + lane, step = 32 * a.slices;
  const int n_batches = (a.chunks + step * kBatch - 1) / (step * kBatch);
  const int row_step = gridDim.x * rows_per_block;
  const int block_row = blockIdx.x * rows_per_block;
  // Row passes of the block: the same for all its warps, so the barriers of gemv_reduce are reached
  // by all. The rope epilogue's grid covers the rows in one pass.
  const int passes = kRope ? 1 : block_row < a.rows ? (a.rows - block_row + row_step - 1) / row_step : 0;
  int row = kRope ? (int(blockIdx.x) * kRopePairs + warp % kRopePairs < a.rows / 2
                         ? rope_row(a, int(blockIdx.x) * kRopePairs + warp % kRopePairs, warp / kRopePairs)
                         : a.rows)
                  : block_row + warp / a.slices;  // the warp's output row

  GemvBatch<kRows, kBatch> w;
  gemv_load<kW8>(a, row, 0, first, step, w);  // weights: safe before the dependency wait
  double freq = 0.0;
  if (kRope && threadIdx.x < kRopePairs) {
    const int pair = int(blockIdx.x) * kRopePairs + int(threadIdx.x);
    const int half = a.rope.head_dim >> 1;
    freq = rope_frequency(pair % half, a.rope.head_dim, a.rope.theta);
  }
  const bool writer = slice == 0 && lane == 0;
  GemvEpilogueInputs<kRows> epi;
  grid_dependency_wait();
  allow_dependent_launch();
  const int pos = kRope && threadIdx.x < kRopePairs ? *a.rope.pos : 0;
  gemv_epilogue_inputs<kRows>(a, row, writer, epi);  // in flight while x is staged
  stage_x<kW8, kNorm, kNarrow ? kNarrowStageBatch : kStageBatch>(a, XUnitStore<kW8>{xs});
  __syncthreads();

  ArgmaxCandidate best = argmax_none();  // argmax epilogue: the first strict maximum of the warp's rows
  float acc[kRows];
#pragma unroll
  for (int p = 0; p < kRows; ++p) acc[p] = 0.f;
  const int total = passes * n_batches;
  int batch = 0;
  for (int it = 0; it < total; ++it) {
    GemvBatch<kRows, kBatch> next;
    if constexpr (kPrefetch) {
      if (it + 1 < total) {
        const bool new_row = batch + 1 == n_batches;
        gemv_load<kW8>(a, new_row ? row + row_step : row, new_row ? 0 : batch + 1, first, step, next);
      }
    } else if (it > 0) {
      gemv_load<kW8>(a, row, batch, first, step, w);
    }
    if (row < a.rows) gemv_accumulate<kW8>(a, xs, batch, first, step, w, acc);
    if constexpr (kPrefetch) w = next;
    if (++batch < n_batches) continue;

    float v[kRows];
    gemv_reduce<kRows>(a, warp, slice, lane, acc, partial, v);
    if constexpr (kRope) {
      if (writer) rope_vals[warp] = row < a.rows ? v[0] + epi.bias[0] : 0.f;
      __syncthreads();
      gemv_rope_write(a, rope_vals, freq, pos);
    } else if (writer) {
      gemv_write<kRows>(a, row, v, epi, best);
    }
    batch = 0;
    row += row_step;
#pragma unroll
    for (int p = 0; p < kRows; ++p) acc[p] = 0.f;
    if (it + 1 < total) gemv_epilogue_inputs<kRows>(a, row, writer, epi);
  }
  if constexpr (!kPair && !kRope) {
    if (a.argmax) {
      __shared__ ArgmaxCandidate scratch[kGemvMaxWarps];
      argmax_commit(best, scratch, a.argmax, a.argmax_ws, a.argmax_advance);
    }
  }
}

// The kernels, named after what a launch computes so that profiler filters on the op stems find
// the fused forms: every W8 GEMV matches "w8a16_matmul_m1", the ones with the rmsnorm prologue
// "rmsnorm", the QKV projection with its rope epilogue "rope". kBatch: vectors per lane and weight
// row in flight (2, 4 or 8; at most 4 with SwiGLU).
#define TLLM_GEMV_KERNELS(suffix, pair, rope, norm, bounds)                                         \
  template <int kBatch>                                                                          \
  __global__ void bounds w8a16_matmul_m1##suffix(const GemvArgs a) {                              \
    gemv<true, pair, kBatch, rope, norm>(a);                                                     \
  }                                                                                              \
  template <int kBatch>                                                                          \
  __global__ void __launch_bounds__(32 * kGemvMaxWarps, 1) fp16_matmul_m1##suffix(const GemvArgs a) { \
    gemv<false, pair, kBatch, rope, norm>(a);                                                    \
  }
// 64 registers a thread (32 warps per multiprocessor), the narrow kernel 48.
#define TLLM_GEMV_BOUNDS __launch_bounds__(32 * kGemvMaxWarps, 1)
#define TLLM_GEMV_PLAIN_BOUNDS __maxnreg__(kGemvPlainRegs<kBatch>)
TLLM_GEMV_KERNELS(, false, false, false, TLLM_GEMV_PLAIN_BOUNDS)
TLLM_GEMV_KERNELS(_rmsnorm, false, false, true, TLLM_GEMV_BOUNDS)
TLLM_GEMV_KERNELS(_swiglu, true, false, false, TLLM_GEMV_BOUNDS)
TLLM_GEMV_KERNELS(_rmsnorm_swiglu, true, false, true, TLLM_GEMV_BOUNDS)
TLLM_GEMV_KERNELS(_rope, false, true, false, TLLM_GEMV_BOUNDS)
TLLM_GEMV_KERNELS(_rmsnorm_rope, false, true, true, TLLM_GEMV_BOUNDS)
#undef TLLM_GEMV_KERNELS
// ffn_gate_up after the fused attention and output projection: two SwiGLU pairs a warp (rows j
// and j + 8 of an 8-warp block), every weight in one batch requested before the wait, 80 registers
// (three blocks a multiprocessor, no spills; at 64 registers it spills 96 bytes). See
// CudaBackend::matmul_m1_kernel.
__global__ void __maxnreg__(80) w8a16_matmul_m1_rmsnorm_swiglu_x2(const GemvArgs a) {
  gemv<true, true, 2, false, true, /*kTwoPairs=*/true>(a);
}
#undef TLLM_GEMV_BOUNDS
#undef TLLM_GEMV_PLAIN_BOUNDS

// ---- decode: an F16 matrix in its int8 form, on tensor cores -------------------------------------
//
// Each weight is rebuilt as fp16(q · s) by int8_pair_as_f16 and the products are summed by mma.sync
// m16n8k16 (fp16 in, fp32 sums): the A operand is 16 weight rows and every B column holds x, so
// every column of the result is the product. A warp owns 16 rows at a time, all of k, in steps of
// 128 values: lane (g, t) loads bytes 32t .. 32t + 31 of rows g and g + 8 (one W8 group, one scale
// each). The matrix is stored in these steps' tiles (CudaMatrix), so a warp's step reads one whole
// 2 KB tile and its scales one 128-byte line. The k slots of the step's 8 mma are permuted to
// match: in mma j, A slots 2t, 2t + 1 take bytes 4j, 4j + 1 of the lane's 32 and slots 2t + 8,
// 2t + 9 bytes 4j + 2, 4j + 3, and the B slots take x at the same k. A warp's steps run on through
// its row blocks as one stream with kI8fStages steps in registers: the loads of step i + kI8fStages
// are issued as step i is used, across row blocks, and the first kI8fStages before the dependency
// wait; no barrier follows the staging of x. Measured on an H200 (decode tok/s after the "你好" chat
// prompt, interleaved): 4 stages at 128 registers 2,334–2,338, 3 stages at 80 (with spills)
// 2,319, 2 at 64 2,298–2,300; the previous form 2,272–2,273. Warps of 8 rows (x as the A operand,
// finer shares of the rows) with 4, 6 or 8 stages were no faster in the chain (2,324–2,333 against
// 2,332) though faster alone (42.6–44.6 against 49.0 µs), nor were blocks of 4 warps (2,328 against
// 2,334). 5 stages still fit 128 registers without spills (6 spill 172 bytes): 2,449.7–2,460.0
// against 2,426.8–2,434.8 tok/s at the chat prompt in two calls, 2,031 against 2,028–2,030 after
// 4,096 tokens, though the lm_head itself was no faster in the traced chain (40.7–41.1 against
// 40.4–41.0 µs); where the untraced step gains was not found.
constexpr int kI8fWarps = 8;   // per block
constexpr int kI8fStages = 5;  // steps in a warp's registers
// Shared memory offset (bytes) of x[e] in fp16: 16 bytes of padding after every 64 values, so that
// the 4 lanes of a quad (64 bytes apart) read 4 different bank groups.
__host__ __device__ constexpr int i8f_x_offset(int e) { return 2 * e + 16 * (e / 64); }

struct I8fStep {
  uint4 v[2][2];  // rows g and g + 8: 32 bytes each
  __half s[2];    // their W8 group scales
};

// Step `step` of row block rb (rows 16·rb ..; `steps` a row): one tile of the matrix (CudaMatrix),
// 2 KB and its 128 bytes of scales, each read whole by the warp. A row block past the matrix (the
// stream's requests after a warp's last) loads nothing; the tiles' padding is zeros.
__device__ __forceinline__ void i8f_load(const GemvArgs& a, int rb, int step, int steps, int g, int t, I8fStep& r) {
  const int64_t piece = i8f_piece(int64_t(kI8fTileRows) * rb + g, step, steps);
  const uint4* p = reinterpret_cast<const uint4*>(a.q + piece * kI8fStep) + 2 * t;
  const __half* sp = a.scales + piece * (kI8fStep / kW8Group) + t;
  const bool ok = kI8fTileRows * rb < a.rows;
#pragma unroll
  for (int h = 0; h < 2; ++h) {  // rows g and g + 8: 8 pieces on
    r.v[h][0] = ok ? __ldcs(p + h * 8 * (kI8fStep / 16)) : make_uint4(0u, 0u, 0u, 0u);
    r.v[h][1] = ok ? __ldcs(p + h * 8 * (kI8fStep / 16) + 1) : make_uint4(0u, 0u, 0u, 0u);
    r.s[h] = ok ? __ldcs(sp + h * 8 * (kI8fStep / kW8Group)) : __ushort_as_half(0);
  }
}

// c += the step's products (x from the padded fp16 copy in shared memory).
__device__ __forceinline__ void i8f_accumulate(const I8fStep& r, const unsigned char* xh, int step, int t, float (&c)[4]) {
  const int e = step * kI8fStep + 32 * t;
  const uint4* xp = reinterpret_cast<const uint4*>(xh + i8f_x_offset(e));
  const __half2 s0 = __half2half2(r.s[0]), s1 = __half2half2(r.s[1]);
#pragma unroll
  for (int q = 0; q < 4; ++q) {  // 16-byte quarters of the lane's 32 bytes: 8 values of x each
    const uint4 xv = xp[q], w0 = r.v[0][q >> 1], w1 = r.v[1][q >> 1];
    const uint32_t xw[4] = {xv.x, xv.y, xv.z, xv.w};
    const uint32_t row0[4] = {w0.x, w0.y, w0.z, w0.w}, row1[4] = {w1.x, w1.y, w1.z, w1.w};
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const uint32_t u0 = row0[2 * (q & 1) + j], u1 = row1[2 * (q & 1) + j];
      const __half2 f[4] = {int8_pair_as_f16(u0, 0x4140, s0), int8_pair_as_f16(u1, 0x4140, s1),
                            int8_pair_as_f16(u0, 0x4342, s0), int8_pair_as_f16(u1, 0x4342, s1)};
      uint32_t af[4];
      memcpy(af, f, sizeof(af));
      mma_16816(c, af, xw[2 * j], xw[2 * j + 1]);
    }
  }
}

template <bool kNorm>
__device__ __forceinline__ void int8_form_gemv(const GemvArgs& a) {
  extern __shared__ float4 xs[];  // x as padded fp16 (i8f_x_offset)
  unsigned char* xh = reinterpret_cast<unsigned char*>(xs);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int steps = i8f_steps(a.k), row_blocks = (a.rows + kI8fTileRows - 1) / kI8fTileRows;
  const int warps = int(gridDim.x) * kI8fWarps, first = int(blockIdx.x) * kI8fWarps + warp;
  const int total = first < row_blocks ? (row_blocks - first + warps - 1) / warps * steps : 0;
  const auto store_x = [xh](int u, uint2 h) { *reinterpret_cast<uint2*>(xh + i8f_x_offset(4 * u)) = h; };

  I8fStep buf[kI8fStages];
  int ld_rb = first, ld_step = 0;  // the next step to load
  const auto load_next = [&](I8fStep& r) {
    i8f_load(a, ld_rb, ld_step, steps, g, t, r);
    if (++ld_step == steps) {
      ld_step = 0;
      ld_rb += warps;
    }
  };
#pragma unroll
  for (int s = 0; s < kI8fStages; ++s) load_next(buf[s]);  // weights: safe before the dependency wait
  for (int u = a.k / 4 + int(threadIdx.x); u < steps * kI8fStep / 4; u += blockDim.x) store_x(u, make_uint2(0u, 0u));
  grid_dependency_wait();
  allow_dependent_launch();
  // Few registers beside the steps in flight; the staged values are fp16 values, exact in fp16.
  stage_x<true, kNorm, 2>(a, [&](int u, float4 f) {
    store_x(u, make_uint2(float2_to_half2_bits(f.x, f.y), float2_to_half2_bits(f.z, f.w)));
  });
  __syncthreads();

  ArgmaxCandidate best = argmax_none();
  float c[4] = {0.f, 0.f, 0.f, 0.f};
  int rb = first, step = 0;
  for (int i = 0; i < total; i += kI8fStages) {
#pragma unroll
    for (int s = 0; s < kI8fStages; ++s) {
      if (i + s >= total) break;
      i8f_accumulate(buf[s], xh, step, t, c);
      load_next(buf[s]);
      if (++step < steps) continue;
      // Column 0 of the result: c[0] is row g, c[2] row g + 8 (lanes t = 0 write them, in order).
      if (t == 0) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = kI8fTileRows * rb + g + 8 * h;
          GemvEpilogueInputs<1> epi;
          gemv_epilogue_inputs<1>(a, row, true, epi);
          gemv_write<1>(a, row, {c[2 * h]}, epi, best);
        }
      }
      c[0] = c[1] = c[2] = c[3] = 0.f;
      step = 0;
      rb += warps;
    }
  }
  if (a.argmax) {
    __shared__ ArgmaxCandidate scratch[kI8fWarps];
    argmax_commit(best, scratch, a.argmax, a.argmax_ws, a.argmax_advance);
  }
}

// Named as the F16 GEMV they compute (plain, and with the rmsnorm prologue: the lm_head's forms);
// other epilogues run as kernels of their own after the plain product. 128 registers a thread.
__global__ void __launch_bounds__(32 * kI8fWarps, 2) fp16_matmul_m1_int8_form(const GemvArgs a) {
  int8_form_gemv<false>(a);
}
__global__ void __launch_bounds__(32 * kI8fWarps, 2) fp16_matmul_m1_int8_form_rmsnorm(const GemvArgs a) {
  int8_form_gemv<true>(a);
}

using GemvKernel = void (*)(GemvArgs);

template <int kBatch>
GemvKernel gemv_kernel_of(bool w8, MatmulEpilogue e, bool norm) {
  switch (e) {
    case MatmulEpilogue::SwiGLU:
      if constexpr (kBatch <= 4) {
        if (norm) return w8 ? w8a16_matmul_m1_rmsnorm_swiglu<kBatch> : fp16_matmul_m1_rmsnorm_swiglu<kBatch>;
        return w8 ? w8a16_matmul_m1_swiglu<kBatch> : fp16_matmul_m1_swiglu<kBatch>;
      }
      break;  // the plan gives SwiGLU at most 4 vectors per lane and row
    case MatmulEpilogue::QkvRopeAppend:
      if (norm) return w8 ? w8a16_matmul_m1_rmsnorm_rope<kBatch> : fp16_matmul_m1_rmsnorm_rope<kBatch>;
      return w8 ? w8a16_matmul_m1_rope<kBatch> : fp16_matmul_m1_rope<kBatch>;
    case MatmulEpilogue::None:
      if (norm) return w8 ? w8a16_matmul_m1_rmsnorm<kBatch> : fp16_matmul_m1_rmsnorm<kBatch>;
      return w8 ? w8a16_matmul_m1<kBatch> : fp16_matmul_m1<kBatch>;
  }
  return nullptr;
}

// The kernel for a weight type, epilogue, rmsnorm prologue (norm) and batch.
GemvKernel gemv_kernel(bool w8, MatmulEpilogue e, bool norm, int batch) {
  if (batch <= 2) return gemv_kernel_of<2>(w8, e, norm);
  if (batch <= 4) return gemv_kernel_of<4>(w8, e, norm);
  return gemv_kernel_of<8>(w8, e, norm);
}

// The kernel for matrix w: its layout, the epilogue (none for the int8 form), prologue and batch.
GemvKernel gemv_kernel(const CudaMatrix& w, MatmulEpilogue e, bool norm, int batch) {
  if (w.f16_as_w8()) {
    if (e != MatmulEpilogue::None) return nullptr;
    return norm ? fp16_matmul_m1_int8_form_rmsnorm : fp16_matmul_m1_int8_form;
  }
  return gemv_kernel(w.type() == WeightType::W8, e, norm, batch);
}

// Launch shape of matmul_m1 for a matrix (see the top of the file).
struct GemvPlan {
  int slices = 1;  // warps per row
  int batch = 2;   // vectors per lane and weight row in flight
  int warps = 8;   // per block
};

// max_warps: the warps of the kernel the GPU holds at once.
GemvPlan gemv_plan(int rows, int chunks, bool pair, int64_t max_warps) {
  GemvPlan p;
  // Long rows are split over several warps while each lane keeps at least two vectors of the row
  // and the rows still fit the GPU: ffn_down (896 rows of 304 vectors) gets 4 warps per row and
  // has all its weights in flight at once.
  while (p.slices < 8 && chunks >= 2 * 32 * (2 * p.slices) && int64_t(rows) * (2 * p.slices) <= max_warps)
    p.slices *= 2;
  const int64_t per_lane = ceil_div(chunks, 32 * p.slices);
  p.batch = per_lane <= 2 ? 2 : per_lane <= 4 || pair ? 4 : 8;
  // Block size, measured on an H200 (decode tok/s against 8 warps everywhere: 1,965). A matrix with
  // rows for at least half the GPU's warps (ffn_gate_up, the lm_head) takes 8-warp blocks, four per
  // multiprocessor. One with fewer runs in larger blocks on fewer multiprocessors, which leaves the
  // others free for the next kernel's blocks to start and request their weights early: attn_out
  // in 24-warp blocks (38 of them: 2,004 tok/s alone), ffn_down in blocks of 4 rows of 4 warps
  // (224; with attn_out, 2,024; 3 rows, 2,030, or 5, 1,897). 32-warp blocks for ffn_gate_up or
  // ffn_down, which leave no room for the next kernel, lose (1,830 and 1,765).
  if (int64_t(rows) < max_warps / 2) p.warps = p.slices > 1 ? 4 * p.slices : 24;
  return p;
}

// Shared memory of the staged x: one fp32 per value of a padded row (the int8 form: padded fp16).
size_t gemv_smem(const CudaMatrix& w) {
  if (w.f16_as_w8()) return size_t(i8f_x_offset(i8f_steps(int(w.k())) * kI8fStep));  // padded fp16
  return size_t(w.w8_layout() ? w.k() : w.k_pad()) * sizeof(float);
}

// ---- prefill: tensor-core matmul ----------------------------------------------------------------

constexpr int kTileM = 64, kTileN = 64, kTileK = 32;
constexpr int kTileLd = kTileK + 8;  // halves per shared row: 80 bytes, so ldmatrix rows hit distinct banks
constexpr int kGemmThreads = 128;
constexpr int kMaxGemmSplits = 8;  // split k: blocks of one cluster (the portable maximum)

struct GemmArgs {
  const __half* x = nullptr;       // (m, k)
  const uint8_t* q = nullptr;      // W8: (n, k), q + 128 (CudaMatrix)
  const __half* scales = nullptr;  // W8: (n, k / 32)
  const __half* w16 = nullptr;     // F16: (n, k_pad)
  const float* bias = nullptr;     // (n) or null
  float* y = nullptr;              // (m, n)
  __half* out16 = nullptr;         // SwiGLU: (m, n / 2)
  int m = 0, n = 0, k = 0, k_pad = 0;
  int n_out = 0;                   // output columns: n, or n / 2 with SwiGLU
  bool accumulate = false;
  bool x_vec = false;              // every x row starts 16-byte aligned (k % 8 == 0, aligned base)
  int splits = 1;                  // split k: blocks of one cluster (along x) that share a tile
  int k_tiles_per_split = 0;       // split k: k tiles of one split (0: all of k)
};

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

constexpr int kSumsLd = kTileN + 4;  // floats per row of a split's sums in shared memory

// Split k: a block's sums of the tile, rows 0..31 in the x buffers, rows 32..63 in the weight
// buffers (free after the product).
using SplitSums = float[kTileM / 2][kSumsLd];
static_assert(sizeof(SplitSums) <= sizeof(__half) * 2 * kTileM * kTileLd, "a half tile of sums fits a double buffer");

// Split k: adds the cluster's sums of the tile (every block's sums, in split order) for this
// block's share of its rows, with the bias, into y (onto y when accumulating). Cluster-wide: every
// block of the cluster calls it with its sums in place. A thread takes up to kSplitUnits 4-value
// units; their y and bias values are requested while it waits at the cluster barrier, the splits' sums
// of a unit kSplitLoads at a time after it.
constexpr int kSplitUnits = 4;  // a tile's 1,024 units over at least 2 splits of 128 threads
constexpr int kSplitLoads = 4;  // splits' sums of a unit requested at once
__device__ void add_splits(const GemmArgs& a, uint32_t top, uint32_t bottom, int split, int row0, int col0) {
  constexpr int kUnits = kTileM * kTileN / 4;  // float4 units of a tile
  cluster_arrive();  // this block's sums are written
  const int u0 = split * kUnits / a.splits, u1 = (split + 1) * kUnits / a.splits;
  const bool vec = a.n % 4 == 0 && aligned_to(a.y, 16);
  float4 base[kSplitUnits];  // y (accumulating) + bias
#pragma unroll
  for (int j = 0; j < kSplitUnits; ++j) {
    const int u = u0 + int(threadIdx.x) + j * kGemmThreads;
    const int row = row0 + u / (kTileN / 4), col = col0 + (u % (kTileN / 4)) * 4;
    float t[4] = {0.f, 0.f, 0.f, 0.f};
    if (u < u1 && row < a.m && col < a.n) {
      const float* y = a.y + int64_t(row) * a.n + col;
      if (vec && a.accumulate) {
        const float4 v = *reinterpret_cast<const float4*>(y);
        t[0] = v.x, t[1] = v.y, t[2] = v.z, t[3] = v.w;
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if (col + e >= a.n) break;
        if (a.accumulate && !vec) t[e] = y[e];
        if (a.bias) t[e] += a.bias[col + e];
      }
    }
    base[j] = make_float4(t[0], t[1], t[2], t[3]);
  }
  cluster_wait();  // every split's sums are written
#pragma unroll
  for (int j = 0; j < kSplitUnits; ++j) {
    const int u = u0 + int(threadIdx.x) + j * kGemmThreads;
    const int r = u / (kTileN / 4), c = (u % (kTileN / 4)) * 4;
    const int row = row0 + r, col = col0 + c;
    if (u >= u1 || row >= a.m || col >= a.n) continue;
    const uint32_t at = (r < kTileM / 2 ? top : bottom) + uint32_t(((r % (kTileM / 2)) * kSumsLd + c) * sizeof(float));
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int s0 = 0; s0 < kMaxGemmSplits; s0 += kSplitLoads) {
      if (s0 >= a.splits) break;
      float4 part[kSplitLoads];
#pragma unroll
      for (int s = 0; s < kSplitLoads; ++s)
        if (s0 + s < a.splits) part[s] = ld_cluster_f4(cluster_address(at, unsigned(s0 + s)));
#pragma unroll
      for (int s = 0; s < kSplitLoads; ++s) {
        if (s0 + s == 0) {
          v = part[0];
        } else if (s0 + s < a.splits) {
          v = make_float4(v.x + part[s].x, v.y + part[s].y, v.z + part[s].z, v.w + part[s].w);
        }
      }
    }
    // The splits' sum (in split order) plus y + bias.
    const float4 b = base[j];
    const float out[4] = {v.x + b.x, v.y + b.y, v.z + b.z, v.w + b.w};
    float* y = a.y + int64_t(row) * a.n + col;
    if (vec) {
      *reinterpret_cast<float4*>(y) = make_float4(out[0], out[1], out[2], out[3]);
    } else {
      for (int e = 0; e < 4 && col + e < a.n; ++e) y[e] = out[e];
    }
  }
  cluster_arrive();
  cluster_wait();  // no block leaves while another reads its sums
}

// Calls f(mt, nt, h, r, c) for each pair of accumulator elements (2h, 2h + 1) of a warp's 32x32
// fragments: row r (0 .. 31) of the warp's rows, and c, the first of the pair's two columns in the
// block's tile (the warp's columns start at 32·wn).
template <class F>
__device__ __forceinline__ void gemm_fragment_pairs(int lane, int wn, F&& f) {
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      const int c = wn * 32 + nt * 8 + 2 * (lane & 3);
#pragma unroll
      for (int h = 0; h < 2; ++h) f(mt, nt, h, mt * 16 + (lane >> 2) + h * 8, c);
    }
  }
}

template <bool kW8, bool kSwiGLU>
__global__ void __launch_bounds__(kGemmThreads) matmul_prefill(const GemmArgs a) {
  __shared__ __align__(16) __half As[2][kTileM][kTileLd];  // x tile (rows, k)
  __shared__ __align__(16) __half Bs[2][kTileN][kTileLd];  // weight tile (tile columns, k)
  __shared__ float Ss[2][kTileN];                          // W8: group scale of each tile column

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int wm = warp >> 1, wn = warp & 1;  // the warp's 32x32 quarter of the tile
  const int row0 = blockIdx.y * kTileM;
  // Split k (a.splits > 1, never with SwiGLU): the blocks of a cluster, along x, share one tile,
  // whose column tile is then blockIdx.z.
  const int splits = kSwiGLU ? 1 : a.splits;
  const int split = splits > 1 ? int(blockIdx.x) : 0;
  const int col0 = int(splits > 1 ? blockIdx.z : blockIdx.x) * (kSwiGLU ? kTileN / 2 : kTileN);  // first output column
  const int k_tiles = kW8 ? a.k / kTileK : (a.k_pad + kTileK - 1) / kTileK;
  const int kt0 = a.k_tiles_per_split > 0 ? split * a.k_tiles_per_split : 0;
  const int kt1 = a.k_tiles_per_split > 0 ? min(k_tiles, kt0 + a.k_tiles_per_split) : k_tiles;

  // Tile column c computes weight row weight_row(c). SwiGLU: even columns gate rows, odd up rows.
  auto weight_row = [&](int c) { return kSwiGLU ? col0 + (c >> 1) + ((c & 1) ? a.n_out : 0) : col0 + c; };
  auto column_ok = [&](int c) { return kSwiGLU ? col0 + (c >> 1) < a.n_out : col0 + c < a.n; };

  auto load_x = [&](int kt, int st) {
    for (int i = tid; i < kTileM * 4; i += kGemmThreads) {  // 4 vectors of 8 values per row
      const int r = i >> 2, kk = kt * kTileK + (i & 3) * 8;
      const int row = row0 + r;
      __half* dst = &As[st][r][(i & 3) * 8];
      if (a.x_vec) {
        const bool ok = row < a.m && kk < a.k;
        cp_async16(dst, ok ? a.x + int64_t(row) * a.k + kk : a.x, ok ? 16 : 0);
      } else {
        __half v[8];
#pragma unroll
        for (int e = 0; e < 8; ++e)
          v[e] = row < a.m && kk + e < a.k ? a.x[int64_t(row) * a.k + kk + e] : __ushort_as_half(0);
        memcpy(dst, v, 16);
      }
    }
  };
  // F16 weights: straight copies (rows are padded with zeros to k_pad, a multiple of 8).
  auto load_w16 = [&](int kt, int st) {
    for (int i = tid; i < kTileN * 4; i += kGemmThreads) {
      const int c = i >> 2, kk = kt * kTileK + (i & 3) * 8;
      const bool ok = column_ok(c) && kk < a.k_pad;
      cp_async16(&Bs[st][c][(i & 3) * 8], ok ? a.w16 + int64_t(weight_row(c)) * a.k_pad + kk : a.w16, ok ? 16 : 0);
    }
  };
  // W8 weights: 16 int8 per thread through registers (fetch), widened into shared memory (store).
  const int wc = tid >> 1, wh = tid & 1;  // tile column and half of the 32-value group
  uint4 wq = make_uint4(0u, 0u, 0u, 0u);
  float wscale = 0.f;
  auto fetch_w8 = [&](int kt) {
    wq = make_uint4(0u, 0u, 0u, 0u);
    wscale = 0.f;
    if (column_ok(wc)) {
      const int64_t wr = weight_row(wc);
      wq = load_ro16(a.q + wr * a.k + kt * kTileK + wh * 16);
      if (wh == 0) wscale = __half2float(__ldg(a.scales + wr * (a.k / kW8Group) + kt));
    }
  };
  auto store_w8 = [&](int st) {
    const uint2 h0 = i8x4_to_h4(wq.x), h1 = i8x4_to_h4(wq.y), h2 = i8x4_to_h4(wq.z), h3 = i8x4_to_h4(wq.w);
    *reinterpret_cast<uint4*>(&Bs[st][wc][wh * 16]) = make_uint4(h0.x, h0.y, h1.x, h1.y);
    *reinterpret_cast<uint4*>(&Bs[st][wc][wh * 16 + 8]) = make_uint4(h2.x, h2.y, h3.x, h3.y);
    if (wh == 0) Ss[st][wc] = wscale;
  };

  // Weights of the first tile before the dependency wait; x after it.
  if constexpr (kW8) {
    fetch_w8(kt0);
  } else {
    load_w16(kt0, 0);
  }
  grid_dependency_wait();
  allow_dependent_launch();
  load_x(kt0, 0);
  cp_async_commit();
  if constexpr (kW8) store_w8(0);
  cp_async_wait<0>();
  __syncthreads();

  float acc[2][4][4] = {};  // [m16 tile][n8 tile][fragment]
  for (int kt = kt0; kt < kt1; ++kt) {
    const int st = (kt - kt0) & 1;
    const bool more = kt + 1 < kt1;
    if (more) {
      load_x(kt + 1, st ^ 1);
      if constexpr (kW8) {
        fetch_w8(kt + 1);
      } else {
        load_w16(kt + 1, st ^ 1);
      }
      cp_async_commit();
    }

    float part[2][4][4] = {};  // W8: this group's product, scaled per column below
#pragma unroll
    for (int ks = 0; ks < kTileK / 16; ++ks) {
      uint32_t af[2][4], bf[2][4];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
        ldmatrix_x4(af[mt], &As[st][wm * 32 + mt * 16 + (lane & 15)][ks * 16 + (lane >> 4) * 8]);
#pragma unroll
      for (int np = 0; np < 2; ++np)
        ldmatrix_x4(bf[np], &Bs[st][wn * 32 + np * 16 + (lane >> 4) * 8 + (lane & 7)][ks * 16 + ((lane >> 3) & 1) * 8]);
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
          const uint32_t b0 = bf[nt >> 1][(nt & 1) * 2], b1 = bf[nt >> 1][(nt & 1) * 2 + 1];
          if constexpr (kW8) {
            mma_16816(part[mt][nt], af[mt], b0, b1);
          } else {
            mma_16816(acc[mt][nt], af[mt], b0, b1);
          }
        }
      }
    }
    if constexpr (kW8) {
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        const int c = wn * 32 + nt * 8 + 2 * (lane & 3);
        const float s0 = Ss[st][c], s1 = Ss[st][c + 1];
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          acc[mt][nt][0] = fmaf(part[mt][nt][0], s0, acc[mt][nt][0]);
          acc[mt][nt][1] = fmaf(part[mt][nt][1], s1, acc[mt][nt][1]);
          acc[mt][nt][2] = fmaf(part[mt][nt][2], s0, acc[mt][nt][2]);
          acc[mt][nt][3] = fmaf(part[mt][nt][3], s1, acc[mt][nt][3]);
        }
      }
      if (more) store_w8(st ^ 1);
    }
    cp_async_wait<0>();
    __syncthreads();
  }

  // Epilogue. Fragment element e of tile (mt, nt): row g (+8 for e >= 2), tile column 2t + (e & 1).
  if (!kSwiGLU && splits > 1) {
    // The tile buffers are free: the loop's last barrier follows its last reads. Warp row wm
    // writes half wm.
    SplitSums& sums = *reinterpret_cast<SplitSums*>(wm == 0 ? &As[0][0][0] : &Bs[0][0][0]);
    gemm_fragment_pairs(lane, wn, [&](int mt, int nt, int h, int r, int c) {
      *reinterpret_cast<float2*>(&sums[r][c]) = make_float2(acc[mt][nt][2 * h], acc[mt][nt][2 * h + 1]);
    });
    add_splits(a, smem_address(&As[0][0][0]), smem_address(&Bs[0][0][0]), split, row0, col0);
    return;
  }
  gemm_fragment_pairs(lane, wn, [&](int mt, int nt, int h, int r, int c) {
    const int row = row0 + wm * 32 + r;
    if (row >= a.m) return;
    if constexpr (kSwiGLU) {
      const int j = col0 + (c >> 1);
      if (j >= a.n_out) return;
      const float g = acc[mt][nt][2 * h] + (a.bias ? a.bias[j] : 0.f);
      const float u = acc[mt][nt][2 * h + 1] + (a.bias ? a.bias[a.n_out + j] : 0.f);
      a.out16[int64_t(row) * a.n_out + j] = __float2half_rn(g / (1.0f + expf(-g)) * u);
    } else {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int col = col0 + c + e;
        if (col >= a.n) continue;
        const float v = acc[mt][nt][2 * h + e] + (a.bias ? a.bias[col] : 0.f);
        float* y = a.y + int64_t(row) * a.n + col;
        *y = a.accumulate ? *y + v : v;
      }
    }
  });
}

using GemmKernel = void (*)(GemmArgs);

GemmKernel gemm_kernel(bool w8, bool swiglu) {
  if (w8) return swiglu ? matmul_prefill<true, true> : matmul_prefill<true, false>;
  return swiglu ? matmul_prefill<false, true> : matmul_prefill<false, false>;
}

// ---- prefill, short prompts: weight-streaming tensor-core matmul --------------------------------

constexpr int kSmallMaxM = 64;  // rows of x the path takes (8 tiles of 8)
constexpr int kSmallNormBatch = 8;   // rmsnorm prologue: float4 loads per thread in flight (sum of squares)
constexpr int kSmallStageBatch = 2;  // rmsnorm prologue: 8-value chunks per thread loaded before any is stored
constexpr int kSmallCounters = 4096;  // split-k: arrival counters, one per row block
constexpr size_t kSmallSmemCap = 104 * 1024;  // staged x: two blocks still fit a 228 KB multiprocessor
constexpr size_t kSmallStaticSmem = 8 * 1024;  // bound on the kernel's static shared memory (W8 scales)
// Blocks of a thread-block cluster that share the rmsnorm prologue's rows (small_stage_norm_rows).
// On an H200, TTFT of the 30-token chat prompt: 1.041–1.050 ms with none, 0.974–0.983 with 2,
// 0.946–0.950 with 4 (runs of one token, interleaved). Clusters of 8 (4 rows a block) read no
// better than 4 in the same build.
constexpr int kSmallNormCluster = 4;
// The cluster size for 8·nt rows of x: at least 8 rows a block.
__host__ __device__ constexpr int small_norm_cluster(int nt) { return nt < kSmallNormCluster ? nt : kSmallNormCluster; }

// Windows (32 values of k) of weights a warp holds in registers at once: 32 registers per weight
// tile (W8: 2 rows x 8 bytes per window; F16: 2 rows x 16 bytes), halved for SwiGLU at 64 rows of
// x, whose two tiles' accumulators take 64 registers.
__host__ __device__ constexpr int small_max_windows(bool w8, bool swiglu, int nt) {
  return (w8 ? 8 : 4) / (swiglu && nt == 8 ? 2 : 1);
}

// Warps of a block. SwiGLU up to 32 rows of x takes 12 (three gate/up tile pairs of 4 slices): its
// 64 registers of weights and 32 of sums need more than the 128 registers a thread of two 8-warp
// blocks per multiprocessor may have, and one 12-warp block per multiprocessor still holds all of
// ffn_gate_up's weights at once (102 blocks). The others take 8 (two blocks per multiprocessor).
__host__ __device__ constexpr int small_warps(bool swiglu, int nt) { return swiglu && nt <= 4 ? 12 : 8; }
// With k split over blocks (ffn_down), a projection of up to 32 rows of x without prologue or
// epilogue takes blocks of 16 warps (4 tiles) instead of 8: the split already gives blocks enough
// (70 at m = 30), and half as many stage x and meet at the arrival counters.
constexpr int kSmallWideWarps = 16;
// The projections that may take kSmallWideWarps blocks: no SwiGLU, up to 32 rows of x (nt <= 4),
// no rmsnorm prologue and no rope epilogue (whose pairs need k unsplit). small_plan chooses them
// where k is split; small_kernel_named instantiates them.
__host__ __device__ constexpr bool small_wide_allowed(bool swiglu, int nt, bool norm, bool rope) {
  return !swiglu && nt <= 4 && !norm && !rope;
}
__host__ __device__ constexpr int small_min_blocks(bool swiglu, int warps) { return swiglu || warps > 8 ? 1 : 2; }

struct SmallArgs {
  const uint8_t* q = nullptr;      // W8: (n, k), q + 128 (CudaMatrix)
  const __half* scales = nullptr;  // W8: (n, k / 32)
  const __half* w16 = nullptr;     // F16: (n, k_pad)
  const __half* x = nullptr;       // (m, k), unused with the prologue
  const float* norm_x = nullptr;   // (m, k) or null
  const float* norm_w = nullptr;   // (k)
  float norm_eps = 0;
  double norm_inv_k = 0;           // 1 / k, for inverse_rms
  const float* bias = nullptr;     // (n) or null
  float* y = nullptr;              // (m, n)
  __half* out16 = nullptr;         // SwiGLU: (m, n / 2)
  int m = 0, n = 0, k = 0, k_pad = 0;
  int n_out = 0;                   // output columns: n, or n / 2 with SwiGLU (gate row j, up row n_out + j)
  int windows = 0;                 // 32-value windows of k: k / 32 (W8), k_pad / 32 rounded up (F16)
  int slices = 1;                  // warps per tile along k (1, 2 or 4); a block has warps / slices tiles
  int slice_bits = 0;              // log2(slices)
  int groups = 1;                  // windows per warp (at most small_max_windows)
  int splits = 1;                  // blocks along k (blockIdx.y)
  bool accumulate = false;
  bool x_vec = false;              // x rows in 16-byte copies (k % 8 == 0, aligned base)
  bool norm_vec = false;           // norm_x and norm_w in 16-byte loads (k % 8 == 0, aligned bases)
  int raw_offset = 0;              // prologue: bytes from the staged x to its fp32 rows in shared memory, or 0
  int cluster = 1;                 // prologue in shared memory: blocks of a cluster sharing its rows (1, 2, 4)
  RopeAppendArgs rope;             // rope epilogue (no split k; Neox pairs need head_dim % 32 == 0)
  // Split k (splits > 1): each block's sums, (row blocks, splits, warps / slices tiles, kA, nt,
  // 32 lanes, 4), kA = 2 with SwiGLU, and one arrival counter per row block, zero between launches.
  float* partials = nullptr;
  unsigned* counters = nullptr;
};

// Output (row, column) of accumulator element e of a lane's fragment for x tile nt: the mma's rows
// are weight rows (g and g + 8), its columns rows of x (2t and 2t + 1).
__device__ __forceinline__ int small_out_row(int nt, int lane, int e) {
  return 8 * nt + 2 * (lane & 3) + (e & 1);
}
__device__ __forceinline__ int small_out_col(int tile, int lane, int e) {
  return 16 * tile + (lane >> 2) + 8 * (e >> 1);
}

// Bias and (accumulating) y of one lane's fragment for x tile nt, requested before any is used.
template <int kA>
struct SmallOutInputs {
  float bias[kA][2];  // columns g and g + 8 (gate and up with SwiGLU)
  float y[4];
};

template <int kA>
__device__ __forceinline__ void small_out_inputs(const SmallArgs& a, int tile, int nt, int lane,
                                                 SmallOutInputs<kA>& in) {
#pragma unroll
  for (int p = 0; p < kA; ++p) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int col = small_out_col(tile, lane, 2 * h);
      in.bias[p][h] = a.bias && col < a.n_out ? a.bias[col + p * a.n_out] : 0.f;
    }
  }
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const int row = small_out_row(nt, lane, e), col = small_out_col(tile, lane, e);
    in.y[e] = kA == 1 && a.accumulate && row < a.m && col < a.n_out ? a.y[int64_t(row) * a.n + col] : 0.f;
  }
}

// Writes one fragment's outputs: y (+ bias, + y when accumulating), or the SwiGLU value.
template <int kA>
__device__ __forceinline__ void small_out_write(const SmallArgs& a, int tile, int nt, int lane, const float (&v)[kA][4],
                                                const SmallOutInputs<kA>& in) {
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const int row = small_out_row(nt, lane, e), col = small_out_col(tile, lane, e);
    if (row >= a.m || col >= a.n_out) continue;
    if constexpr (kA == 2) {
      const float g = v[0][e] + in.bias[0][e >> 1];
      const float u = v[1][e] + in.bias[1][e >> 1];
      a.out16[int64_t(row) * a.n_out + col] = __float2half_rn(g / (1.0f + expf(-g)) * u);
    } else {
      const float r = v[0][e] + in.bias[0][e >> 1];
      a.y[int64_t(row) * a.n + col] = a.accumulate ? in.y[e] + r : r;
    }
  }
}

// A thread's share of a row's sum of squares for the short-prompt rmsnorm prologue: four fp32
// running sums (one per component of a float4), added in fp64 at the end. Every block of a
// projection sums all m rows (26,880 squares per block at 30 rows of 896), so the arithmetic
// counts: widening each value to fp64 first, as the rmsnorm kernel does for its one block per row,
// runs at 16 conversions per clock and multiprocessor, four times slower than the fp32 products.
// Each fp32 sum takes k / (4·kTPR) squares (28 at k = 896, 32 rows), so its relative error stays
// below that many units of 2⁻²⁴ (1.7e-6); the 1e-5 the rmsnorm op allows would take every rounding
// going the same way at some 5,000 values of k.
struct SquareSums {
  float s[4] = {0.f, 0.f, 0.f, 0.f};
  __device__ __forceinline__ void add(float4 v) {
    s[0] = fmaf(v.x, v.x, s[0]);
    s[1] = fmaf(v.y, v.y, s[1]);
    s[2] = fmaf(v.z, v.z, s[2]);
    s[3] = fmaf(v.w, v.w, s[3]);
  }
  __device__ __forceinline__ double total() const { return (double(s[0]) + double(s[1])) + (double(s[2]) + double(s[3])); }
};

// The prologue's 1 / rms of row r from the partial sums of squares of its kTPR consecutive threads
// (seg 0 .. kTPR - 1), into inv_rms[r] (0 past m). Block-wide: ends with a barrier.
template <int kRows, int kTPR>
__device__ __forceinline__ void small_finish_rms(const SmallArgs& a, double ss, int r, int seg, float* inv_rms) {
  if (r < kRows) {  // whole warps
#pragma unroll
    for (int o = kTPR / 2; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if (seg == 0) inv_rms[r] = r < a.m ? inverse_rms(ss, a.norm_inv_k, a.norm_eps) : 0.f;
  }
  __syncthreads();
}

// The rmsnorm prologue with its rows in shared memory (a.raw_offset), for small_stage_x: the rows
// (fp32, row stride k + 4 so that rows start 4 banks apart) and the norm weights are copied in one
// trip, every request in flight at once, then summed and converted from there.
//
// Past 8 rows of x the launch is a thread-block cluster of kC = small_norm_cluster(kNT) blocks (all
// need the same rows of x; without clusters the launcher leaves a.raw_offset at 0 and small_stage_x
// reads the rows from global memory instead). Block `rank` copies, sums and converts only rows
// rank·R .. + R - 1, R = 8·kNT / kC (8; 16 at 64 rows), and stores each fp16 chunk both into its
// own xs and into the same place of every other block of the cluster (distributed shared memory),
// so each block moves 1 / kC of the rows from L2 and spends that share of the prologue's
// instructions. The caller's cluster barrier makes the chunks visible; the one that small_matmul
// arrives at on entry is waited for here, before the first store into another block, so that every
// block of the cluster has started.
//
// The sum of squares of a row is taken by 256 / R consecutive threads (32 or 16), each thread's
// share in four fp32 running sums (SquareSums), the threads' sums added in fp64 in a fixed order.
//
// Everything that depends on the share is a compile-time constant: against the same code with the
// cluster size a run-time value, TTFT of the chat prompt 0.899–0.906 against 0.945–0.956 ms on an
// H200 (runs of one token, interleaved, both built from the same source path). The two loop
// pragmas keep the 64-row kernels, which run at their 128-register bound, from spilling.
template <int kNT, int kThreads>
__device__ void small_stage_norm_rows(const SmallArgs& a, int win_block, int nw, __half* xs, float* inv_rms) {
  constexpr int kRows = 8 * kNT;
  constexpr int kC = small_norm_cluster(kNT);
  constexpr int own = kRows / kC;                 // rows of the block
  constexpr int cpr = kThreads / own;             // threads per row of the copy
  constexpr int tpr = 256 / own;                  // threads per row of the sum of squares
  constexpr int win_step = kThreads / (4 * own);  // windows between a thread's chunks
  static_assert(own * kC == kRows && kThreads % own == 0 && tpr <= 32, "a block's share is whole rows");
  const int tid = threadIdx.x;
  const int rank = kC > 1 ? int(blockIdx.x) % kC : 0;
  const int r0 = rank * own, r1 = min(r0 + own, a.m);  // rows [r0, r1) are the block's
  const int units = a.k / 4;                           // float4s of a row (k % 8 == 0)
  const int stride = a.k + 4;
  float* raw = reinterpret_cast<float*>(reinterpret_cast<char*>(xs) + a.raw_offset);
  float* wts = raw + int64_t(kRows) * stride;

  // The block's rows, cpr threads per row, and the weights.
  if (const int rr = r0 + tid / cpr; rr < r1) {
    const float* src = a.norm_x + int64_t(rr) * a.k;
    for (int u = tid % cpr; u < units; u += cpr) cp_async16(raw + rr * stride + 4 * u, src + 4 * u, 16);
  }
  for (int u = tid; u < units; u += kThreads) cp_async16(wts + 4 * u, a.norm_w + 4 * u, 16);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();

  const int r = r0 + tid / tpr, seg = tid % tpr;
  if (tid < 256) {  // whole warps: a row's threads lie in one warp
    SquareSums ss;
    if (r < r1) {
      const float4* xr = reinterpret_cast<const float4*>(raw + r * stride);
#pragma unroll 4
      for (int u = seg; u < units; u += tpr) ss.add(xr[u]);
    }
    double t = ss.total();
#pragma unroll
    for (int o = tpr / 2; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
    if (seg == 0) inv_rms[r] = r < a.m ? inverse_rms(t, a.norm_inv_k, a.norm_eps) : 0.f;
  }
  __syncthreads();

  // Chunk j of the block's (8 values) is window j / (4·own), row r0 + (j / 4) % own, values
  // 8·(j % 4) .. + 7: xs chunk q = (window · kRows + row) · 4 + j % 4. A thread's chunks lie in one row.
  const int row = r0 + (tid >> 2) % own;
  const bool row_ok = row < a.m;
  const int chunks = nw * own * 4;
  const float inv = inv_rms[row];
  const float* xr = raw + row * stride;
  uint32_t peer[kC > 1 ? kC - 1 : 1];  // xs in the other blocks of the cluster
  if constexpr (kC > 1) {
    cluster_wait();
#pragma unroll
    for (int p = 0; p < kC - 1; ++p) peer[p] = cluster_address(smem_address(xs), unsigned((rank + 1 + p) % kC));
  }
  int w = tid / (4 * own);
#pragma unroll 1
  for (int j = tid; j < chunks; j += kThreads, w += win_step) {
    const int kk = 32 * (win_block + w) + 8 * (tid & 3);
    uint4 h = make_uint4(0u, 0u, 0u, 0u);
    if (row_ok && kk < a.k) {
      const float4 x0 = *reinterpret_cast<const float4*>(xr + kk), x1 = *reinterpret_cast<const float4*>(xr + kk + 4);
      const float4 w0 = *reinterpret_cast<const float4*>(wts + kk), w1 = *reinterpret_cast<const float4*>(wts + kk + 4);
      h = rms_scaled_half8(x0, x1, inv, w0, w1);
    }
    const int q = (w * kRows + row) * 4 + (tid & 3);
    *reinterpret_cast<uint4*>(xs + 8 * q) = h;
#pragma unroll
    for (int p = 0; p < kC - 1; ++p) st_cluster_u4(peer[p] + 16u * unsigned(q), h);
  }
}

// Stages the block's windows of x, or of the rmsnorm prologue's fp16 rows, in shared memory as
// xs[window][row][32 values] (rows m .. 8·kNT - 1 and values past k are zero). Block-wide.
//
// Chunk q (8 values, xs[q·8 .. q·8 + 7]) is window q / (4·kRows), row (q / 4) % kRows, values
// 8·(q % 4) .. + 7 of the window. Thread t writes chunks t, t + kThreads, ...: all in one row, the
// window advancing by kWinStep, so its source moves by a constant stride.
//
// The prologue, out = fp16(x / sqrt(mean(x²) + eps) · weight), needs whole rows: the sum of
// squares of row r by the kTPR consecutive threads r·kTPR .. + kTPR - 1 (256 threads in all), each
// thread's share in four fp32 running sums (SquareSums), the threads' sums added in fp64 in a fixed
// order. With a.raw_offset the rows go through shared memory (small_stage_norm_rows); otherwise the
// block reads them from global memory.
template <int kNT, int kThreads>
__device__ void small_stage_x(const SmallArgs& a, int win_block, int nw, __half* xs) {
  constexpr int kRows = 8 * kNT;
  constexpr int kWinStep = kThreads / (4 * kRows);
  static_assert(kThreads % (4 * kRows) == 0, "a thread's chunks must stay in one row");
  constexpr int kTPR = 256 / kRows;
  static_assert(kThreads >= 256, "the sum of squares takes 256 threads");
  __shared__ float inv_rms[kRows];
  const int tid = threadIdx.x;
  const int chunks = nw * kRows * 4;
  const int row = (tid >> 2) % kRows;
  const int kk0 = 32 * (win_block + tid / (4 * kRows)) + 8 * (tid & 3);  // k of the thread's first chunk
  constexpr int kKStep = 32 * kWinStep;                                   // and its advance per chunk
  const bool row_ok = row < a.m;

  if (!a.norm_x) {
    if (a.x_vec) {
      const __half* src = a.x + int64_t(row_ok ? row : 0) * a.k + kk0;
      int kk = kk0;
      for (int q = tid; q < chunks; q += kThreads, kk += kKStep, src += kKStep) {
        const bool ok = row_ok && kk < a.k;
        cp_async16(xs + 8 * q, ok ? src : a.x, ok ? 16 : 0);
      }
      cp_async_commit();
      cp_async_wait<0>();
    } else {
      int kk = kk0;
      for (int q = tid; q < chunks; q += kThreads, kk += kKStep) {
        __half v[8];
#pragma unroll
        for (int e = 0; e < 8; ++e)
          v[e] = row_ok && kk + e < a.k ? a.x[int64_t(row) * a.k + kk + e] : __ushort_as_half(0);
        memcpy(xs + 8 * q, v, 16);
      }
    }
    return;
  }

  if (a.raw_offset) {
    small_stage_norm_rows<kNT, kThreads>(a, win_block, nw, xs, inv_rms);
    return;
  }
  const int r = tid / kTPR, seg = tid % kTPR;  // sum of squares: row r, segment seg
  const int units = a.k / 4;                   // float4s of a row (norm_vec: k % 8 == 0)
  SquareSums ss;
  if (r < a.m) {
    const float* xr = a.norm_x + int64_t(r) * a.k;
    if (a.norm_vec) {
      for (int u0 = seg; u0 < units; u0 += kTPR * kSmallNormBatch) {
        float4 v[kSmallNormBatch];
#pragma unroll
        for (int i = 0; i < kSmallNormBatch; ++i) {
          const int u = u0 + i * kTPR;
          v[i] = u < units ? reinterpret_cast<const float4*>(xr)[u] : make_float4(0.f, 0.f, 0.f, 0.f);
        }
#pragma unroll
        for (int i = 0; i < kSmallNormBatch; ++i) ss.add(v[i]);
      }
    } else {
      for (int e = seg, i = 0; e < a.k; e += kTPR, i = (i + 1) & 3) ss.s[i] = fmaf(xr[e], xr[e], ss.s[i]);
    }
  }
  small_finish_rms<kRows, kTPR>(a, ss.total(), r, seg, inv_rms);
  const float inv = inv_rms[row];
  const float* xr = a.norm_x + int64_t(row_ok ? row : 0) * a.k;
  if (a.norm_vec) {
    int kk = kk0;
    for (int q0 = tid; q0 < chunks; q0 += kThreads * kSmallStageBatch, kk += kKStep * kSmallStageBatch) {
      float4 xv[kSmallStageBatch][2], wv[kSmallStageBatch][2];
#pragma unroll
      for (int i = 0; i < kSmallStageBatch; ++i) {
        const int ki = kk + i * kKStep;
        const bool ok = q0 + i * kThreads < chunks && row_ok && ki < a.k;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          xv[i][h] = ok ? reinterpret_cast<const float4*>(xr + ki)[h] : make_float4(0.f, 0.f, 0.f, 0.f);
          wv[i][h] = ok ? reinterpret_cast<const float4*>(a.norm_w + ki)[h] : make_float4(0.f, 0.f, 0.f, 0.f);
        }
      }
#pragma unroll
      for (int i = 0; i < kSmallStageBatch; ++i) {
        const int q = q0 + i * kThreads;
        if (q >= chunks) continue;
        *reinterpret_cast<uint4*>(xs + 8 * q) = rms_scaled_half8(xv[i][0], xv[i][1], inv, wv[i][0], wv[i][1]);
      }
    }
  } else {
    int kk = kk0;
    for (int q = tid; q < chunks; q += kThreads, kk += kKStep) {
      __half v[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const bool ok = row_ok && kk + e < a.k;
        v[e] = __float2half_rn(ok ? xr[kk + e] * inv * a.norm_w[kk + e] : 0.f);
      }
      memcpy(xs + 8 * q, v, 16);
    }
  }
}

// One warp's weights: kA tiles of 16 rows (a tile, or a gate tile and its up tile with SwiGLU),
// kMaxW windows each. Lane (g, t) holds, of window j, values 8t .. 8t + 7 of rows g and g + 8, and
// the W8 scales of rows g and g + 8 (as half2) for windows t, t + 4, ...; those move to shared
// memory once x is staged, where the quad reads them (registers are short in the main loop).
template <bool kW8, int kA, int kMaxW>
struct SmallWeights {
  static constexpr int kScaleRegs = (kMaxW + 3) / 4;
  using Vec = std::conditional_t<kW8, uint2, uint4>;  // 8 int8 or 8 fp16 values
  Vec w[kA][kMaxW][2];
  uint32_t scale[kA][kScaleRegs];
};

// The mma's k order: in window j, the product of tile values κ (0..15) of step s (0, 1) is that of
// window value 8t + 4s + {0, 1, 2, 3} for κ = 2t, 2t + 1, 2t + 8, 2t + 9, in x as in the weights, so
// each lane's 8 values of a row (one load) feed both steps, and each step stays in one W8 group.
// The A fragments of step s from a lane's two rows (row g: r0, row g + 8: r1).
__device__ __forceinline__ void small_a_frag(uint2 r0, uint2 r1, int s, uint32_t (&f)[4]) {  // W8
  const uint2 lo = i8x4_to_h4(s ? r0.y : r0.x), hi = i8x4_to_h4(s ? r1.y : r1.x);
  f[0] = lo.x;
  f[1] = hi.x;
  f[2] = lo.y;
  f[3] = hi.y;
}
__device__ __forceinline__ void small_a_frag(uint4 r0, uint4 r1, int s, uint32_t (&f)[4]) {  // F16
  f[0] = s ? r0.z : r0.x;
  f[1] = s ? r1.z : r1.x;
  f[2] = s ? r0.w : r0.y;
  f[3] = s ? r1.w : r1.y;
}

// The rope epilogue groups a block's tiles so that each rotation pair lies in one block: Neox pairs
// (j, j + head_dim/2) of a head are ht = head_dim / 32 tiles apart, so tiles 2i and 2i + 1 of the
// launch's order are tile i and its partner i + ht of a head's 2·ht tiles; normal pairs (2j, 2j + 1)
// lie in one tile.
template <bool kRope>
__device__ __forceinline__ int small_tile(const SmallArgs& a, int tile) {
  if (!kRope || !a.rope.neox) return tile;
  const int ht = a.rope.head_dim >> 5, l = tile % (2 * ht);
  return tile - l + (l >> 1) + (l & 1) * ht;
}

// Rotation pair p (0 .. 8·tiles_per_block) of a block's rows: the block tiles t0, t1 and their
// columns l0, l1 holding its two values (Neox: column l of tiles 2i and 2i + 1; normal: columns 2j
// and 2j + 1 of one tile), and its first output column c0 (n_out or more: no pair).
struct SmallRopePair {
  int t0, t1, l0, l1, c0, c1;
};

__device__ __forceinline__ SmallRopePair small_rope_pair(const SmallArgs& a, int tiles_per_block, int p) {
  SmallRopePair q;
  const bool neox = a.rope.neox;
  q.t0 = neox ? 2 * (p >> 4) : p >> 3;
  q.t1 = neox ? q.t0 + 1 : q.t0;
  q.l0 = neox ? p & 15 : 2 * (p & 7);
  q.l1 = neox ? q.l0 : q.l0 + 1;
  q.c0 = 16 * small_tile<true>(a, int(blockIdx.x) * tiles_per_block + q.t0) + q.l0;
  q.c1 = 16 * small_tile<true>(a, int(blockIdx.x) * tiles_per_block + q.t1) + q.l1;
  return q;
}

// The rotation frequency of the block's pair p (see small_rope_pair): needs no memory, so it is
// worked out before the dependency wait. A thread's pairs all have p = threadIdx.x % pairs.
__device__ __forceinline__ double small_rope_frequency(const SmallArgs& a, int tiles_per_block) {
  const SmallRopePair q = small_rope_pair(a, tiles_per_block, int(threadIdx.x) % (tiles_per_block * 8));
  const int d = q.c0 % a.rope.head_dim;
  return rope_frequency(a.rope.neox ? d : d >> 1, a.rope.head_dim, a.rope.theta);
}

// The rope epilogue: slice 0 of each tile leaves its sums (+ bias) in shared memory (vals, aliasing
// the staged x), then the block's threads take its rotation pairs row by row. Block-wide.
template <int kNT>
__device__ void small_rope_write(const SmallArgs& a, const float (&acc)[kNT][4], const float (&bias)[2], int slice,
                                 int tile_in_block, int tiles_per_block, const int* pos, double freq, float* vals) {
  constexpr int kRows = 8 * kNT;
  const int lane = threadIdx.x & 31;
  const RopeAppendArgs& r = a.rope;
  __syncthreads();  // the slices' partial sums, which vals overwrites, have been read
  if (slice == 0) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
        for (int e = 2 * h; e < 2 * h + 2; ++e)
          vals[(tile_in_block * kRows + small_out_row(nt, lane, e)) * 16 + (lane >> 2) + 8 * h] = acc[nt][e] + bias[h];
      }
    }
  }
  __syncthreads();
  const int pairs = tiles_per_block * 8;  // per row of x; blockDim.x is a multiple
  const SmallRopePair q = small_rope_pair(a, tiles_per_block, int(threadIdx.x) % pairs);
  if (q.c0 >= a.n_out) return;
  const int head = q.c0 / r.head_dim, at = head * r.head_dim;
  for (int row = int(threadIdx.x) / pairs; row < a.m; row += int(blockDim.x) / pairs) {
    rope_append_pair(r, a.y + int64_t(row) * a.n, head, q.c0 - at, q.c1 - at, vals[(q.t0 * kRows + row) * 16 + q.l0],
                     vals[(q.t1 * kRows + row) * 16 + q.l1], freq, pos[row]);
  }
}

// y (m <= 64 rows) = x · Wᵀ for short prompts; see the top of the file. Warp w of a block takes
// tile blockIdx.x · (warps / slices) + w / slices (16 output columns: 16 weight rows, or 16 gate and
// 16 up rows) over windows [first, first + groups), first = (blockIdx.y · slices + w % slices) · groups.
template <bool kW8, bool kSwiGLU, int kNT, bool kRope, int kWarps>
__device__ __forceinline__ void small_matmul(const SmallArgs& a) {
  static_assert(!(kSwiGLU && kRope), "one epilogue at a time");
  constexpr int kThreads = 32 * kWarps;
  constexpr int kA = kSwiGLU ? 2 : 1;
  constexpr int kRows = 8 * kNT;  // rows of x staged, m rounded up
  constexpr int kMaxW = small_max_windows(kW8, kSwiGLU, kNT);
  extern __shared__ uint4 small_smem[];  // staged x, then the slices' partial sums
  __half* xs = reinterpret_cast<__half*>(small_smem);
  float4* red = reinterpret_cast<float4*>(small_smem);

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int tiles_per_block = kWarps >> a.slice_bits;
  const int slice = warp & (a.slices - 1), tile_in_block = warp >> a.slice_bits;
  const int tile = small_tile<kRope>(a, blockIdx.x * tiles_per_block + tile_in_block);
  const int win_block = int(blockIdx.y) * a.slices * a.groups;  // the block's first window
  const int nw = min(a.windows - win_block, a.slices * a.groups);
  const int win0 = win_block + slice * a.groups;  // the warp's
  const int ng = max(0, min(a.groups, a.windows - win0));

  // Weights and scales: constant, requested before the dependency wait. Streaming loads (read
  // once, evicted first): ptxas keeps these ahead of griddepcontrol.wait, whereas it may move the
  // wait above read-only (ld.global.nc, __ldg) loads, which would then start only after it.
  if (a.cluster > 1) cluster_arrive();  // waited for before the first store into another block
  SmallWeights<kW8, kA, kMaxW> wt;
  const int col_lo = 16 * tile + g;  // output columns of rows g and g + 8
#pragma unroll
  for (int p = 0; p < kA; ++p) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int col = col_lo + 8 * h;
      const bool ok = col < a.n_out;
      const int64_t wrow = col + int64_t(p) * a.n_out;
#pragma unroll
      for (int j = 0; j < kMaxW; ++j) {
        const int kk = 32 * (win0 + j) + 8 * t;
        if constexpr (kW8) {
          const uint2* src = reinterpret_cast<const uint2*>(a.q + wrow * a.k + kk);
          wt.w[p][j][h] = ok && j < ng ? __ldcs(src) : make_uint2(0u, 0u);
        } else {
          const uint4* src = reinterpret_cast<const uint4*>(a.w16 + wrow * a.k_pad + kk);
          wt.w[p][j][h] = ok && j < ng && kk < a.k_pad ? __ldcs(src) : make_uint4(0u, 0u, 0u, 0u);
        }
      }
    }
    if constexpr (kW8) {
      const int64_t scale_row = a.k / kW8Group;
#pragma unroll
      for (int i = 0; i < (kMaxW + 3) / 4; ++i) {
        const int j = 4 * i + t;
        __half s[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int col = col_lo + 8 * h;
          const int64_t wrow = col + int64_t(p) * a.n_out;
          s[h] = col < a.n_out && j < ng ? __ldcs(a.scales + wrow * scale_row + win0 + j) : __ushort_as_half(0);
        }
        const __half2 pair = __halves2half2(s[0], s[1]);
        memcpy(&wt.scale[p][i], &pair, 4);
      }
    }
  }

  const double rope_freq = kRope ? small_rope_frequency(a, tiles_per_block) : 0.0;
  // The rope epilogue's bias (constant, like the weights) before the wait; for a plain projection
  // of up to 32 rows without split k (attn_out) slice 0 requests its bias and the y it accumulates
  // into right after it, so that their trip to memory overlaps the staging of x instead of
  // following the sums. (SwiGLU's registers, and those of 64 rows, are spoken for.)
  float rope_bias[2] = {0.f, 0.f};
  if (kRope && slice == 0 && a.bias) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int col = small_out_col(tile, lane, 2 * h);
      rope_bias[h] = col < a.n_out ? __ldcs(a.bias + col) : 0.f;
    }
  }
  constexpr bool kEarlyInputs = kA == 1 && !kRope && kNT <= 4;
  SmallOutInputs<kA> in[kNT];
  grid_dependency_wait();
  allow_dependent_launch();
  if (kEarlyInputs && a.splits == 1 && slice == 0) {
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) small_out_inputs<kA>(a, tile, nt, lane, in[nt]);
  }
  small_stage_x<kNT, kThreads>(a, win_block, nw, xs);
  // W8 scales: scale_s[warp][p][i][lane] holds the lane's scale register i of tile p.
  __shared__ uint32_t scale_s[kW8 ? kWarps : 1][kA][SmallWeights<kW8, kA, kMaxW>::kScaleRegs][32];
  __shared__ int rope_pos[kRope ? kSmallMaxM : 1];  // the rope epilogue's positions
  static_assert(sizeof(scale_s) + sizeof(rope_pos) + kRows * sizeof(float) + 16 <= kSmallStaticSmem,
                "see small_smem_cap");
  if (kRope && int(threadIdx.x) < a.m) rope_pos[threadIdx.x] = a.rope.pos[threadIdx.x];
  if constexpr (kW8) {
#pragma unroll
    for (int p = 0; p < kA; ++p) {
#pragma unroll
      for (int i = 0; i < SmallWeights<kW8, kA, kMaxW>::kScaleRegs; ++i) scale_s[warp][p][i][lane] = wt.scale[p][i];
    }
  }
  if (a.cluster > 1) {  // the other blocks' chunks of x have landed too
    cluster_arrive();
    cluster_wait();
  } else {
    __syncthreads();
  }

  // acc[p][nt]: tile p's sums against x rows 8·nt .. 8·nt + 7 (mma fragment layout).
  float acc[kA][kNT][4] = {};
  const __half* xw = xs + (slice * a.groups * kRows + g) * 32 + 8 * t;  // window 0 of the warp, row g, value 8t
#pragma unroll
  for (int j = 0; j < kMaxW; ++j) {
    if (j >= ng) break;  // warp-uniform
    uint32_t af[kA][2][4];
    float2 sc[kA];
#pragma unroll
    for (int p = 0; p < kA; ++p) {
      small_a_frag(wt.w[p][j][0], wt.w[p][j][1], 0, af[p][0]);
      small_a_frag(wt.w[p][j][0], wt.w[p][j][1], 1, af[p][1]);
      if constexpr (kW8) sc[p] = half2_bits_to_float2(scale_s[warp][p][j / 4][(lane & ~3) | (j & 3)]);
    }
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      const uint4 b = *reinterpret_cast<const uint4*>(xw + (j * kRows + 8 * nt) * 32);
#pragma unroll
      for (int p = 0; p < kA; ++p) {
        if constexpr (kW8) {
          // The window's product in fp32, scaled per weight row into the sum: weights never rounded.
          float part[4] = {0.f, 0.f, 0.f, 0.f};
          mma_16816(part, af[p][0], b.x, b.y);
          mma_16816(part, af[p][1], b.z, b.w);
          acc[p][nt][0] = fmaf(part[0], sc[p].x, acc[p][nt][0]);
          acc[p][nt][1] = fmaf(part[1], sc[p].x, acc[p][nt][1]);
          acc[p][nt][2] = fmaf(part[2], sc[p].y, acc[p][nt][2]);
          acc[p][nt][3] = fmaf(part[3], sc[p].y, acc[p][nt][3]);
        } else {
          mma_16816(acc[p][nt], af[p][0], b.x, b.y);
          mma_16816(acc[p][nt], af[p][1], b.z, b.w);
        }
      }
    }
  }

  // The slices of a tile add up in slice 0, in slice order. red aliases xs.
  if (a.slices > 1) {
    __syncthreads();
    if (slice > 0) {
      float4* mine = red + ((tile_in_block * (a.slices - 1) + slice - 1) * kA * kNT) * 32 + lane;
#pragma unroll
      for (int p = 0; p < kA; ++p) {
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
          mine[(p * kNT + nt) * 32] = make_float4(acc[p][nt][0], acc[p][nt][1], acc[p][nt][2], acc[p][nt][3]);
      }
    }
    __syncthreads();
    if (slice == 0) {
      for (int s = 1; s < a.slices; ++s) {
        const float4* theirs = red + ((tile_in_block * (a.slices - 1) + s - 1) * kA * kNT) * 32 + lane;
#pragma unroll
        for (int p = 0; p < kA; ++p) {
#pragma unroll
          for (int nt = 0; nt < kNT; ++nt) {
            const float4 v = theirs[(p * kNT + nt) * 32];
            acc[p][nt][0] += v.x;
            acc[p][nt][1] += v.y;
            acc[p][nt][2] += v.z;
            acc[p][nt][3] += v.w;
          }
        }
      }
    }
  }

  if (a.splits == 1) {
    if constexpr (kRope) {
      small_rope_write<kNT>(a, acc[0], rope_bias, slice, tile_in_block, tiles_per_block, rope_pos, rope_freq,
                            reinterpret_cast<float*>(small_smem));
      return;
    }
    if (slice != 0) return;
    if constexpr (!kEarlyInputs) {
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) small_out_inputs<kA>(a, tile, nt, lane, in[nt]);
    }
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      float v[kA][4];
#pragma unroll
      for (int p = 0; p < kA; ++p) {
#pragma unroll
        for (int e = 0; e < 4; ++e) v[p][e] = acc[p][nt][e];
      }
      small_out_write<kA>(a, tile, nt, lane, v, in[nt]);
    }
    return;
  }

  // Split k: the blocks' sums go to the workspace, and the last block of the row block to arrive
  // adds them up in split order (the same order whichever block is last) and writes the outputs.
  constexpr int kTileVecs = kA * kNT * 32;  // float4s of one tile's fragments
  float4* partials =
      reinterpret_cast<float4*>(a.partials) + int64_t(blockIdx.x) * a.splits * tiles_per_block * kTileVecs;
  if (slice == 0) {
    float4* mine = partials + (int(blockIdx.y) * tiles_per_block + tile_in_block) * kTileVecs + lane;
#pragma unroll
    for (int p = 0; p < kA; ++p) {
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
        __stcg(mine + (p * kNT + nt) * 32, make_float4(acc[p][nt][0], acc[p][nt][1], acc[p][nt][2], acc[p][nt][3]));
    }
  }
  if (!last_block_to_arrive(a.counters + blockIdx.x, unsigned(a.splits))) return;
  // One fragment (tile, x tile nt, lane l) per thread and step.
  for (int i = threadIdx.x; i < tiles_per_block * kNT * 32; i += kThreads) {
    const int l = i & 31, nt = (i >> 5) % kNT, tb = i / (32 * kNT);
    const int tl = int(blockIdx.x) * tiles_per_block + tb;
    SmallOutInputs<kA> in;
    small_out_inputs<kA>(a, tl, nt, l, in);
    float v[kA][4] = {};
#pragma unroll 4
    for (int z = 0; z < a.splits; ++z) {
#pragma unroll
      for (int p = 0; p < kA; ++p) {
        const float4 s = __ldcg(partials + (z * tiles_per_block + tb) * kTileVecs + (p * kNT + nt) * 32 + l);
        v[p][0] += s.x;
        v[p][1] += s.y;
        v[p][2] += s.z;
        v[p][3] += s.w;
      }
    }
    small_out_write<kA>(a, tl, nt, l, v, in);
  }
  if (threadIdx.x == 0) a.counters[blockIdx.x] = 0u;  // ready for the next launch
}

// The kernel, named after its fusions so that profiler filters on the op stems find them:
// "rmsnorm" (the prologue), "rope" (the QKV projection's epilogue).
#define TLLM_SMALL_KERNEL(name, rope)                                                                       \
  template <bool kW8, bool kSwiGLU, int kNT, int kWarps = small_warps(kSwiGLU, kNT)>                        \
  __global__ void __launch_bounds__(32 * kWarps, small_min_blocks(kSwiGLU, kWarps)) name(const SmallArgs a) { \
    small_matmul<kW8, kSwiGLU, kNT, rope, kWarps>(a);                                                       \
  }
TLLM_SMALL_KERNEL(matmul_prefill_small, false)
TLLM_SMALL_KERNEL(matmul_prefill_small_rmsnorm, false)
TLLM_SMALL_KERNEL(matmul_prefill_small_rope, true)
TLLM_SMALL_KERNEL(matmul_prefill_small_rmsnorm_rope, true)
#undef TLLM_SMALL_KERNEL

using SmallKernel = void (*)(SmallArgs);

// The kernel for an epilogue (SwiGLU, rope or none), the rmsnorm prologue (norm), 8-row tiles of x
// (nt) and blocks of small_warps or, with wide, kSmallWideWarps warps (a plain projection with
// split k); null where there is none (SwiGLU with rope; wide with a prologue, an epilogue or 64
// rows).
template <bool kW8, bool kSwiGLU, int kNT>
SmallKernel small_kernel_named(bool norm, bool rope, bool wide) {
  if (wide) {
    if constexpr (small_wide_allowed(kSwiGLU, kNT, false, false)) {
      if (small_wide_allowed(kSwiGLU, kNT, norm, rope)) return matmul_prefill_small<kW8, kSwiGLU, kNT, kSmallWideWarps>;
    }
    return nullptr;
  }
  if constexpr (kSwiGLU) {
    if (rope) return nullptr;
  } else if (rope) {
    return norm ? matmul_prefill_small_rmsnorm_rope<kW8, false, kNT> : matmul_prefill_small_rope<kW8, false, kNT>;
  }
  return norm ? matmul_prefill_small_rmsnorm<kW8, kSwiGLU, kNT> : matmul_prefill_small<kW8, kSwiGLU, kNT>;
}

template <bool kW8, bool kSwiGLU>
SmallKernel small_kernel_of(int nt, bool norm, bool rope, bool wide) {
  switch (nt) {
    case 1: return small_kernel_named<kW8, kSwiGLU, 1>(norm, rope, wide);
    case 2: return small_kernel_named<kW8, kSwiGLU, 2>(norm, rope, wide);
    case 4: return small_kernel_named<kW8, kSwiGLU, 4>(norm, rope, wide);
    default: return small_kernel_named<kW8, kSwiGLU, 8>(norm, rope, wide);
  }
}

SmallKernel small_kernel(bool w8, bool swiglu, bool norm, bool rope, int nt, bool wide) {
  if (w8) {
    return swiglu ? small_kernel_of<true, true>(nt, norm, rope, wide)
                  : small_kernel_of<true, false>(nt, norm, rope, wide);
  }
  return swiglu ? small_kernel_of<false, true>(nt, norm, rope, wide) : small_kernel_of<false, false>(nt, norm, rope, wide);
}

// Launch shape of matmul_prefill_small (see the top of the file).
struct SmallPlan {
  int nt = 1;       // 8-row tiles of x (1, 2, 4 or 8)
  int warps = 8;    // per block
  int slices = 1;   // warps of a block along k
  int groups = 1;   // windows per warp
  int splits = 1;   // blocks along k
  int64_t row_blocks = 0;
  size_t smem = 0;  // dynamic shared memory: the staged x, then the slices' partial sums
};

// Four warps of a block share a tile's k (fewer when k has fewer windows), each holding up to
// small_max_windows windows of it; k is split over blocks only where that is not enough
// (ffn_down, k = 4864: 5 splits of 32 windows) or the staged x would not fit smem_cap. norm: the
// rmsnorm prologue (no kSmallWideWarps blocks with it).
SmallPlan small_plan(int m, int windows, int tiles, bool w8, bool swiglu, bool norm, size_t smem_cap) {
  SmallPlan p;
  while (8 * p.nt < m) p.nt *= 2;
  p.slices = windows >= 4 ? 4 : windows >= 2 ? 2 : 1;
  const size_t window_bytes = size_t(8 * p.nt) * 32 * sizeof(__half);  // one window of x, staged
  p.groups = int(std::min<int64_t>(small_max_windows(w8, swiglu, p.nt), ceil_div(windows, p.slices)));
  while (p.groups > 1 && size_t(p.slices * p.groups) * window_bytes > smem_cap) --p.groups;
  p.splits = int(ceil_div(windows, p.slices * p.groups));
  p.groups = int(ceil_div(windows, int64_t(p.slices) * p.splits));  // even shares
  p.splits = int(ceil_div(windows, p.slices * p.groups));
  p.warps = small_wide_allowed(swiglu, p.nt, norm, false) && p.splits > 1 ? kSmallWideWarps : small_warps(swiglu, p.nt);
  const int tiles_per_block = p.warps / p.slices;
  p.row_blocks = ceil_div(tiles, tiles_per_block);
  const size_t partial_sums = size_t(tiles_per_block) * (p.slices - 1) * (swiglu ? 2 : 1) * p.nt * 32 * sizeof(float4);
  p.smem = std::max(size_t(p.slices * p.groups) * window_bytes, partial_sums);
  return p;
}

void check_matmul(const MatmulDesc& d, const CudaMatrix& w, const char* op) {
  CUDA_REQUIRE(d.m >= 1, op, "m must be at least 1");
  CUDA_REQUIRE(d.norm_x ? d.norm_weight != nullptr : d.x != nullptr, op,
               "x (or norm_x with norm_weight) is missing");
  if (d.epilogue == MatmulEpilogue::SwiGLU) {
    CUDA_REQUIRE(d.out16 != nullptr, op, "the SwiGLU epilogue needs out16");
    CUDA_REQUIRE(w.n() % 2 == 0, op, "the SwiGLU epilogue needs an even n (gate and up rows)");
    CUDA_REQUIRE(!d.accumulate, op, "the SwiGLU epilogue cannot accumulate");
  } else {
    CUDA_REQUIRE(d.y != nullptr, op, "y is missing");
  }
  CUDA_REQUIRE(!d.argmax || (d.m == 1 && d.epilogue == MatmulEpilogue::None), op,
               "the argmax epilogue needs m = 1 and no other epilogue");
  CUDA_REQUIRE(!d.argmax_advance || d.argmax, op, "argmax_advance needs the argmax epilogue");
  if (d.epilogue == MatmulEpilogue::QkvRopeAppend) {
    const QkvRopeAppendDesc& r = d.rope;
    CUDA_REQUIRE(!d.accumulate, op, "the rope epilogue cannot accumulate");
    CUDA_REQUIRE(r.head_dim >= 2 && r.head_dim % 2 == 0 && r.n_head >= 1 && r.n_head_kv >= 1 &&
                     w.n() == (int64_t(r.n_head) + 2 * r.n_head_kv) * r.head_dim,
                 op, "the rope epilogue needs n = (n_head + 2·n_head_kv) · head_dim with an even head_dim");
  }
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

}  // namespace

void CudaBackend::prepare_matmul(const CudaMatrix& w) {
  if (!small_prepared_) {
    for (bool w8 : {true, false}) {
      for (bool swiglu : {true, false}) {
        for (int nt : {1, 2, 4, 8}) {
          for (bool norm : {false, true}) {
            for (bool rope : {false, true}) {
              for (bool wide : {false, true}) {
                if (const SmallKernel k = small_kernel(w8, swiglu, norm, rope, nt, wide))
                  CUDA_CHECK(
                      cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(small_smem_limit())));
              }
            }
          }
        }
      }
    }
    small_prepared_ = true;
  }
  const size_t smem = gemv_smem(w);
  if (smem <= 48 * 1024) return;
  for (MatmulEpilogue e : {MatmulEpilogue::None, MatmulEpilogue::SwiGLU, MatmulEpilogue::QkvRopeAppend}) {
    for (int batch : {2, 4, 8}) {
      for (bool norm : {false, true}) {
        const GemvKernel k = gemv_kernel(w, e, norm, batch);
        if (!k) continue;
        // A block's dynamic shared memory may take what the kernel's static part leaves.
        cudaFuncAttributes attr{};
        CUDA_CHECK(cudaFuncGetAttributes(&attr, k));
        const size_t limit = smem_optin_ > attr.sharedSizeBytes ? smem_optin_ - attr.sharedSizeBytes : 0;
        CUDA_REQUIRE(smem <= limit, "upload_matrix",
                     "k = " + std::to_string(w.k()) + " needs " + std::to_string(smem) +
                         " bytes of shared memory in matmul_m1; this GPU allows " + std::to_string(limit));
        CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(limit)));
      }
    }
  }
}

// The rmsnorm + SwiGLU GEMV right after the fused attention and output projection (decode steps up
// to 1,024 cache rows) takes two pairs a warp (w8a16_matmul_m1_rmsnorm_swiglu_x2: 304 blocks at the
// benchmarked model's 4,864 pairs, every weight requested before the wait, none in a second pass)
// instead of one (528 blocks, the first 80 of which take a second pass). On an H200 decode runs
// 2,430.5 / 2,430.6 against 2,376.5 / 2,377.5 tok/s (interleaved with the build without it); in
// the chain, gate/up 4.96 against 5.22 µs, the QKV projection after down 2.85 against 3.29, down
// 3.33 against 3.17 (2026-12-02 H200 report). After the separate output projection of longer
// contexts it loses (1,937 against 2,024 tok/s at 4,096 tokens, 2,104 against 2,209 at 512): gate/up
// gains 0.36 µs but the output projection before it and down after it lose 0.54 and 0.55. After
// the fused form with its rows split (257 to 1,024 rows) it pays: 2,233 / 2,238 against 2,131 /
// 2,131 tok/s with one pair a warp at 512 tokens of context.

bool CudaBackend::matmul_m1_kernel(const MatmulDesc& d, const CudaMatrix& w) {
  const bool after_attention_projection = last_launch_ == LastLaunch::AttentionWithProjection;
  const bool w8 = w.w8_layout();
  const bool pair = d.epilogue == MatmulEpilogue::SwiGLU;
  GemvArgs a;
  set_matmul_args(a, d, w);
  a.chunks = w8 ? a.k / 16 : a.k_pad / 8;
  a.rows = int(pair ? w.n() / 2 : w.n());  // outputs: n, or n / 2 SwiGLU pairs
  a.pair_offset = pair ? a.rows : 0;
  a.x = reinterpret_cast<const __half*>(d.x);
  a.norm_x = d.norm_x;
  a.norm_w = d.norm_weight;
  a.norm_eps = d.norm_eps;
  a.norm_inv_k = 1.0 / double(w.k());

  const size_t smem = gemv_smem(w);
  const bool norm = d.norm_x != nullptr;
  const GemvKernel probe = gemv_kernel(w, d.epilogue, norm, 2);
  if (!probe) return false;
  // Blocks of a size that the GPU holds at once: every weight is requested before the wait.
  const auto max_blocks = [&](int warps) {
    return int64_t(resident_blocks(reinterpret_cast<const void*>(probe), 32 * warps, smem)) * sm_count_;
  };
  GemvPlan plan;
  int64_t blocks = 0;
  if (w.f16_as_w8()) {  // 16 rows a warp, as many blocks of kI8fWarps as the GPU holds at once
    plan.warps = kI8fWarps;
    blocks = std::min(ceil_div(ceil_div(a.rows, kI8fTileRows), kI8fWarps), max_blocks(kI8fWarps));
  } else {
    plan = gemv_plan(a.rows, a.chunks, pair, max_blocks(8) * 8);
    if (d.epilogue == MatmulEpilogue::QkvRopeAppend) plan.warps = kGemvRopeWarps;
    blocks = std::min(ceil_div(a.rows, plan.warps / plan.slices), max_blocks(plan.warps));
  }
  a.slices = plan.slices;
  if (d.epilogue == MatmulEpilogue::QkvRopeAppend) {
    // The rope epilogue needs whole rows per warp and every rotation pair in the one pass.
    const int64_t rope_blocks = ceil_div(a.rows / 2, kRopePairs);
    if (plan.slices != 1 || rope_blocks > blocks) return false;
    blocks = rope_blocks;
    a.rope = rope_append_args(d.rope);
  }
  if (d.argmax) {
    if (blocks > kArgmaxMaxBlocks) return false;
    a.argmax = d.argmax;
    a.argmax_ws = argmax_workspace();
    a.argmax_advance = d.argmax_advance;
  }
  if (after_attention_projection && pair && norm && w.type() == WeightType::W8 && plan.slices == 1 &&
      plan.batch == 2 && plan.warps == kTwoPairWarps) {
    const auto x2 = w8a16_matmul_m1_rmsnorm_swiglu_x2;
    const int64_t x2_resident =
        int64_t(resident_blocks(reinterpret_cast<const void*>(x2), 32 * kTwoPairWarps, smem)) * sm_count_;
    launch(x2, dim3(unsigned(std::min(ceil_div(a.rows, 2 * kTwoPairWarps), x2_resident))), dim3(32 * kTwoPairWarps),
           smem, a);
    return true;
  }
  launch(gemv_kernel(w, d.epilogue, norm, plan.batch), dim3(unsigned(blocks)), dim3(32 * plan.warps), smem, a);
  return true;
}

size_t CudaBackend::small_smem_limit() const {
  // What a block may ask for, less the kernel's static shared memory.
  return smem_optin_ > kSmallStaticSmem ? smem_optin_ - kSmallStaticSmem : 0;
}

size_t CudaBackend::small_smem_cap() const { return std::min(kSmallSmemCap, small_smem_limit()); }

bool CudaBackend::matmul_small_kernel(const MatmulDesc& d, const CudaMatrix& w) {
  const bool w8 = w.type() == WeightType::W8;
  const bool swiglu = d.epilogue == MatmulEpilogue::SwiGLU;
  SmallArgs a;
  set_matmul_args(a, d, w);
  a.x = reinterpret_cast<const __half*>(d.x);
  a.norm_x = d.norm_x;
  a.norm_w = d.norm_weight;
  a.norm_eps = d.norm_eps;
  a.norm_inv_k = 1.0 / double(w.k());
  a.m = int(d.m);
  a.n = int(w.n());
  a.n_out = swiglu ? a.n / 2 : a.n;
  a.windows = int(w8 ? a.k / kW8Group : ceil_div(a.k_pad, 32));
  a.x_vec = a.k % 8 == 0 && aligned_to(d.x, 16);
  a.norm_vec = a.k % 8 == 0 && aligned_to(d.norm_x, 16) && aligned_to(d.norm_weight, 16);

  const SmallPlan p =
      small_plan(a.m, a.windows, int(ceil_div(a.n_out, 16)), w8, swiglu, d.norm_x != nullptr, small_smem_cap());
  if (p.smem > small_smem_cap() || p.splits > 65535) return false;
  a.slices = p.slices;
  a.slice_bits = p.slices == 4 ? 2 : p.slices == 2 ? 1 : 0;
  a.groups = p.groups;
  a.splits = p.splits;
  size_t smem = p.smem;
  size_t raw_smem = 0;
  if (d.norm_x && a.norm_vec && p.splits == 1) {
    // The prologue's rows and weights in shared memory too, past the staged x, where they fit.
    const size_t staged = (size_t(p.slices * p.groups) * size_t(8 * p.nt) * 32 * sizeof(__half) + 15) / 16 * 16;
    const size_t raw = (size_t(8 * p.nt) * size_t(a.k + 4) + size_t(a.k)) * sizeof(float);
    if (staged + raw <= small_smem_limit()) {
      a.raw_offset = int(staged);
      raw_smem = staged + raw;
    }
  }
  if (p.splits > 1) {
    if (p.row_blocks > kSmallCounters) return false;
    const size_t counters = kSmallCounters * sizeof(unsigned);
    const size_t bytes = counters + size_t(p.row_blocks) * size_t(p.splits) * size_t(p.warps / p.slices) *
                                        size_t(swiglu ? 2 : 1) * size_t(p.nt) * 32 * sizeof(float4);
    if (small_partials_.bytes() < bytes) {
      grow_workspace(small_partials_, bytes, "matmul (split-k partial sums)");
      CUDA_CHECK(cudaMemsetAsync(small_partials_.get(), 0, counters, stream_.get()));
    }
    a.counters = small_partials_.as<unsigned>();
    a.partials = reinterpret_cast<float*>(small_partials_.as<char>() + counters);
  }
  // The rope epilogue in the kernel where its pairs fall into one block without split k (see
  // small_tile); otherwise as its own kernel.
  const RopeAppendArgs rope = rope_append_args(d.rope);
  const size_t rope_vals = size_t(p.warps / p.slices) * size_t(8 * p.nt) * 16 * sizeof(float);
  const bool fuse_rope = d.epilogue == MatmulEpilogue::QkvRopeAppend && p.splits == 1 &&
                         (!rope.neox || rope.head_dim % 32 == 0) && rope_vals <= small_smem_limit();
  if (fuse_rope) {
    a.rope = rope;
    smem = std::max(smem, rope_vals);
  }
  const SmallKernel kernel = small_kernel(w8, swiglu, d.norm_x != nullptr, fuse_rope, p.nt, p.warps == kSmallWideWarps);
  const dim3 block(32 * p.warps);
  dim3 grid(unsigned(p.row_blocks), unsigned(p.splits));
  // Past 8 rows of x, the prologue's rows in shared memory are shared by the blocks of a cluster
  // (small_stage_norm_rows); where the GPU runs no such cluster, small_stage_x reads them from
  // global memory instead.
  const unsigned want = unsigned(small_norm_cluster(p.nt));
  unsigned cluster = 1;
  if (a.raw_offset && want > 1) {
    const dim3 clustered(unsigned(ceil_div(p.row_blocks, want) * want), grid.y);
    if (cc_major_ >= 9 &&
        active_clusters(reinterpret_cast<const void*>(kernel), clustered, block, std::max(smem, raw_smem), want) > 0) {
      grid = clustered;
      cluster = want;
    } else {
      a.raw_offset = 0;
    }
  }
  if (a.raw_offset) smem = std::max(smem, raw_smem);
  a.cluster = int(cluster);
  launch_clusters(kernel, grid, block, smem, cluster, a);
  if (d.epilogue == MatmulEpilogue::QkvRopeAppend && !fuse_rope) rope_epilogue(d);
  return true;
}

void CudaBackend::matmul_prefill_kernel(const MatmulDesc& d, const CudaMatrix& w, const __half* x) {
  const bool w8 = w.type() == WeightType::W8;
  const bool swiglu = d.epilogue == MatmulEpilogue::SwiGLU;
  GemmArgs a;
  set_matmul_args(a, d, w);
  a.x = x;
  a.m = int(d.m);
  a.n = int(w.n());
  a.n_out = swiglu ? a.n / 2 : a.n;
  a.x_vec = a.k % 8 == 0 && aligned_to(x, 16);
  const int cols_per_tile = swiglu ? kTileN / 2 : kTileN;
  dim3 grid(unsigned(ceil_div(a.n_out, cols_per_tile)), unsigned(ceil_div(a.m, kTileM)));
  // A shorter prompt gives few output tiles (N = 896 at m <= 128: 28 blocks for 132 SMs): split k so
  // that about two blocks per SM run, each covering at least 4 k tiles, the splits of a tile one
  // cluster (at most kMaxGemmSplits blocks, the portable cluster size). SwiGLU needs the whole sum
  // before its nonlinearity and is never split (its n is large anyway).
  const int k_tiles = w8 ? a.k / kTileK : int(ceil_div(a.k_pad, kTileK));
  const int64_t tiles = int64_t(grid.x) * grid.y;
  const int64_t want = ceil_div(int64_t(2) * sm_count_, tiles);
  const GemmKernel kernel = gemm_kernel(w8, swiglu);
  if (!swiglu && cc_major_ >= 9 && want > 1 && k_tiles >= 8) {
    const int splits = int(std::min<int64_t>({want, int64_t(k_tiles / 4), int64_t(kMaxGemmSplits)}));
    a.k_tiles_per_split = int(ceil_div(k_tiles, splits));
    a.splits = int(ceil_div(k_tiles, a.k_tiles_per_split));  // every split has at least one tile
    const dim3 split_grid(unsigned(a.splits), grid.y, grid.x);  // a cluster: the splits of one tile
    if (active_clusters(reinterpret_cast<const void*>(kernel), split_grid, dim3(kGemmThreads), 0,
                        unsigned(a.splits)) > 0) {
      launch_clusters(kernel, split_grid, dim3(kGemmThreads), 0, unsigned(a.splits), a);
      return;
    }
    a.splits = 1;
    a.k_tiles_per_split = 0;
  }
  launch(kernel, grid, dim3(kGemmThreads), 0, a);
}

void CudaBackend::matmul_m1(const MatmulDesc& d) {
  const CudaMatrix& w = cuda_matrix(d.w, "matmul_m1");
  check_matmul(d, w, "matmul_m1");
  CUDA_REQUIRE(d.m == 1, "matmul_m1", "m must be 1 (use matmul)");
  if (matmul_m1_kernel(d, w)) return;
  // The epilogue as its own kernel after the plain product.
  MatmulDesc plain = d;
  plain.epilogue = MatmulEpilogue::None;
  plain.argmax = nullptr;
  plain.argmax_advance = nullptr;
  if (d.epilogue == MatmulEpilogue::SwiGLU) {
    // [gate | up] into a workspace, then silu(gate) · up (an F16 matrix in its int8 form).
    grow_workspace(swiglu_y_, size_t(w.n()) * sizeof(float), "matmul_m1 (SwiGLU)");
    plain.y = swiglu_y_.as<float>();
    matmul_m1_kernel(plain, w);
    SiluMulDesc s;
    s.gate = plain.y;
    s.up = plain.y + w.n() / 2;
    s.out = d.out16;
    s.n = w.n() / 2;
    silu_mul(s);
    return;
  }
  matmul_m1_kernel(plain, w);
  if (d.epilogue == MatmulEpilogue::QkvRopeAppend) rope_epilogue(d);
  if (d.argmax) {
    ArgmaxDesc a;
    a.x = d.y;
    a.out = d.argmax;
    a.n = w.n();
    a.advance = d.argmax_advance;
    argmax(a);
  }
}

// The rope epilogue as its own kernel, on the y a matmul wrote.
void CudaBackend::rope_epilogue(const MatmulDesc& d) {
  QkvRopeAppendDesc r = d.rope;
  r.qkv = d.y;
  r.m = d.m;
  qkv_rope_append(r);
}

void CudaBackend::matmul(const MatmulDesc& d) {
  const CudaMatrix& w = cuda_matrix(d.w, "matmul");
  check_matmul(d, w, "matmul");
  CUDA_REQUIRE(d.m < (int64_t(1) << 22), "matmul", "m is too large");
  if (d.m == 1) {
    matmul_m1(d);
    return;
  }
  if (w.f16_as_w8()) {
    // The prefill kernels read fp16 or W8 weights, not this form (the lm_head's, which sees one
    // row at a time): its rows go through the GEMV one by one.
    const int64_t k = w.k(), n = w.n();
    for (int64_t i = 0; i < d.m; ++i) {
      MatmulDesc r = d;
      r.m = 1;
      if (d.x) r.x = d.x + i * k;
      if (d.norm_x) r.norm_x = d.norm_x + i * k;
      if (d.y) r.y = d.y + i * n;
      if (d.out16) r.out16 = d.out16 + i * (n / 2);
      if (d.rope.pos) r.rope.pos = d.rope.pos + i;
      matmul_m1(r);
    }
    return;
  }
  if (d.m <= kSmallMaxM && matmul_small_kernel(d, w)) return;
  const __half* x = reinterpret_cast<const __half*>(d.x);
  if (d.norm_x) {
    // The prologue as its own kernel: its rows are shared by every column tile of the matmul.
    grow_workspace(norm_x16_, size_t(d.m) * size_t(w.k()) * sizeof(__half), "matmul (rmsnorm prologue)");
    rmsnorm_rows(d.norm_x, d.norm_weight, norm_x16_.as<__half>(), d.m, w.k(), d.norm_eps);
    x = norm_x16_.as<__half>();
  }
  matmul_prefill_kernel(d, w, x);
  if (d.epilogue == MatmulEpilogue::QkvRopeAppend) rope_epilogue(d);
}

}  // namespace tllm::cuda
