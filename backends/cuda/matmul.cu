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
//                    shared memory in a fixed order (ffn_down, n = 896, k = 4864: 2 warps per row).
//                    A launch takes as many blocks of 256 threads (64 registers each) as fit on the
//                    GPU at once: the more warps, the more weights are requested before the
//                    previous kernel ends (programmatic dependent launch; the weights do not depend
//                    on it). A lane requests its first batch of vectors (up to 8) before waiting on
//                    the previous kernel; a warp with more rows or batches (ffn_gate_up: 4864 rows
//                    for 4224 warps) requests each next batch before using the current one. x (k fp16 values, or the rmsnorm
//                    prologue's fp16 output) is staged once per block in shared memory as fp32, every
//                    load of a thread issued before the first store; the bias and the y being
//                    accumulated into are requested when a row starts. int8 → fp32 is one byte permute
//                    and one subtract (the 2^23 magic number); the 16 products of a vector are summed
//                    in fp32, one 4-value unit of x at a time, and scaled by their group's scale.
//                    The QKV projection's epilogue applies rope and appends k and v to the caches:
//                    the block's 8 warps take the 4 rotation pairs' rows (j and j + head_dim/2, or 2j
//                    and 2j + 1), so a pair is finished inside one block, with the angle in fp64 as
//                    in the rope kernel.
//   fp16_matmul_m1   F16 weights (the lm_head: n = 151936, k = 896): the same kernel with 8 fp16
//                    weights per 16-byte vector, and an argmax epilogue for greedy decoding (each
//                    warp keeps the best of its rows; argmax_commit in argmax.cuh combines them).
// A block walks its rows with the grid as stride, staging x once. The x values in shared memory are
// laid out so that the 8 lanes of a quarter-warp read 8 different bank groups (see x_unit).
//
// Prefill (m > 1) is bound by arithmetic:
//   matmul_prefill   64x64 output tiles, 4 warps of 32x32, mma.sync m16n8k16 (fp16 in, fp32 out),
//                    k in steps of 32 (one W8 group) double-buffered in shared memory. W8 weights are
//                    widened to fp16 exactly (the int8 values themselves); each group's product is
//                    scaled per column in fp32, so the weights are never rounded. The SwiGLU form
//                    interleaves gate and up rows in the tile's columns, so each thread holds the gate
//                    and up value of the same output. The rmsnorm prologue runs first, as the rmsnorm
//                    kernel into a workspace. When the output tiles alone would leave SMs idle (a
//                    short prompt against n = 896), k is split over blockIdx.z and the partial sums are
//                    added into y atomically (y zeroed first unless accumulating).
#include <algorithm>

#include "backends/cuda/cuda_backend_impl.cuh"

namespace tllm::cuda {
namespace {

// ---- decode: matrix-vector product -------------------------------------------------------------

constexpr int kGemvWarps = 8;
constexpr int kGemvThreads = kGemvWarps * 32;
// Every variant fits 64 registers per thread: 4 blocks per multiprocessor.
constexpr int kGemvMinBlocks = 4;
constexpr int kRopePairs = kGemvWarps / 2;  // rope epilogue: a block's warps hold 4 rotation pairs
constexpr int kNormUnits = 2;  // prologue: 4-value units per thread held in registers (k <= 2048)
constexpr int kStageBatch = 8;  // x staging: 4-value units per thread loaded before any is stored

struct GemvArgs {
  const int8_t* q = nullptr;       // W8: (n, k)
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
  const float* bias = nullptr;     // (n) or null
  float* y = nullptr;              // (n)
  __half* out16 = nullptr;         // SwiGLU: (n / 2)
  bool accumulate = false;
  // Rope epilogue: y is a packed qkv row, (n_head + 2·n_head_kv) heads of head_dim.
  const int32_t* pos = nullptr;    // scalar
  __half* k_cache = nullptr;       // (n_head_kv, n_ctx, head_dim)
  __half* v_cache = nullptr;       // (n_head_kv, n_ctx, head_dim)
  int n_head = 0, n_head_kv = 0, head_dim = 0, n_ctx = 0;
  float theta = 0;
  bool neox = false;
  int32_t* argmax = nullptr;       // scalar, or null: no argmax epilogue
  ArgmaxWorkspace argmax_ws;
};

// x lives in shared memory as fp32, in units of 4 values: unit (c, j) holds x[c·V + 4j .. + 3] for
// weight vector c (V = 16 values for W8, 8 for F16). A lane reads the units of vectors 32 apart from
// its neighbours', so without care the 8 lanes of a quarter-warp would hit the same bank group;
// rotating a vector's units by (c / 2) (W8) or swapping them by (c / 4) (F16) spreads them over all 8.
template <bool kW8>
__device__ __forceinline__ int x_unit(int c, int j) {
  if constexpr (kW8) {
    return 4 * c + ((j + (c >> 1)) & 3);
  } else {
    return 2 * c + (j ^ ((c >> 2) & 1));
  }
}

__device__ __forceinline__ float round_half(float v) { return __half2float(__float2half_rn(v)); }

// Writes x (or the rmsnorm prologue's fp16 values) as fp32 into xs, zero past k. Block-wide. Every
// global load a thread makes is issued before the first value is stored, so staging costs one
// trip to memory (the prologue's block sum adds a barrier).
template <bool kW8>
__device__ void stage_x(const GemvArgs& a, float4* xs) {
  constexpr int kUnits = kW8 ? 4 : 2;  // units per weight vector
  const int units = a.chunks * kUnits;
  __shared__ double scratch[32];
  if (a.norm_x) {
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
      const float inv = float(1.0 / sqrt(ss / double(a.k) + double(a.norm_eps)));
#pragma unroll
      for (int i = 0; i < kNormUnits; ++i) {
        const int u = threadIdx.x + i * blockDim.x;
        if (u < k_units)
          xs[x_unit<kW8>(u / kUnits, u % kUnits)] =
              make_float4(round_half(xv[i].x * inv * wv[i].x), round_half(xv[i].y * inv * wv[i].y),
                          round_half(xv[i].z * inv * wv[i].z), round_half(xv[i].w * inv * wv[i].w));
      }
      for (int u = k_units + threadIdx.x; u < units; u += blockDim.x)
        xs[x_unit<kW8>(u / kUnits, u % kUnits)] = make_float4(0.f, 0.f, 0.f, 0.f);
      return;
    }
    double ss = 0;
    for (int e = threadIdx.x; e < a.k; e += blockDim.x) ss += double(a.norm_x[e]) * a.norm_x[e];
    ss = block_sum(ss, scratch);
    const float inv = float(1.0 / sqrt(ss / double(a.k) + double(a.norm_eps)));
    for (int u = threadIdx.x; u < units; u += blockDim.x) {
      const int e = 4 * u;
      float t[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) t[i] = e + i < a.k ? round_half(a.norm_x[e + i] * inv * a.norm_w[e + i]) : 0.f;
      xs[x_unit<kW8>(u / kUnits, u % kUnits)] = make_float4(t[0], t[1], t[2], t[3]);
    }
  } else if (a.k % 4 == 0 && aligned_to(a.x, 8)) {
    for (int base = 0; base < units; base += kStageBatch * int(blockDim.x)) {
      uint2 raw[kStageBatch];
#pragma unroll
      for (int i = 0; i < kStageBatch; ++i) {
        const int e = 4 * (base + i * int(blockDim.x) + int(threadIdx.x));
        raw[i] = e < a.k ? *reinterpret_cast<const uint2*>(a.x + e) : make_uint2(0u, 0u);  // 0 is +0.0 in fp16
      }
#pragma unroll
      for (int i = 0; i < kStageBatch; ++i) {
        const int u = base + i * int(blockDim.x) + int(threadIdx.x);
        if (u < units) {
          const float2 lo = half2_bits_to_float2(raw[i].x), hi = half2_bits_to_float2(raw[i].y);
          xs[x_unit<kW8>(u / kUnits, u % kUnits)] = make_float4(lo.x, lo.y, hi.x, hi.y);
        }
      }
    }
  } else {
    for (int u = threadIdx.x; u < units; u += blockDim.x) {
      const int e = 4 * u;
      float t[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) t[i] = e + i < a.k ? __half2float(a.x[e + i]) : 0.f;
      xs[x_unit<kW8>(u / kUnits, u % kUnits)] = make_float4(t[0], t[1], t[2], t[3]);
    }
  }
}

// Σ q[i]·x[i] over the 4 int8 values of w (signed bytes) into d. Byte b, made unsigned by flipping
// its top bit, is placed in the low mantissa bits of 2^23: the float 2^23 + (b + 128), exact; one
// subtract of 2^23 + 128 leaves b.
__device__ __forceinline__ float dot_i8x4(uint32_t w, float4 x, float d) {
  constexpr float kMagic = 8388736.0f;  // 2^23 + 128
  const uint32_t u = w ^ 0x80808080u;
  d = fmaf(__uint_as_float(__byte_perm(u, 0x4B000000u, 0x7650)) - kMagic, x.x, d);
  d = fmaf(__uint_as_float(__byte_perm(u, 0x4B000000u, 0x7651)) - kMagic, x.y, d);
  d = fmaf(__uint_as_float(__byte_perm(u, 0x4B000000u, 0x7652)) - kMagic, x.z, d);
  d = fmaf(__uint_as_float(__byte_perm(u, 0x4B000000u, 0x7653)) - kMagic, x.w, d);
  return d;
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

// Weight row r of output row `row`: the row itself, or with SwiGLU its gate (r = 0) or up row (r = 1).
__device__ __forceinline__ int64_t weight_row(const GemvArgs& a, int row, int r) {
  return row + int64_t(r) * a.pair_offset;
}

// Vector c of batch b for a lane: c = first + step · (b · kBatch + i), i < kBatch. Rows past the
// last and vectors past the row's end read nothing and count as zeros.
template <bool kW8, int kRows, int kBatch>
__device__ __forceinline__ void gemv_load(const GemvArgs& a, int row, int batch, int first, int step,
                                          GemvBatch<kRows, kBatch>& r) {
  const int c0 = first + step * batch * kBatch;
#pragma unroll
  for (int p = 0; p < kRows; ++p) {
    const int64_t wrow = weight_row(a, row, p);
    const uint4* wv = kW8 ? reinterpret_cast<const uint4*>(a.q + wrow * a.k) : reinterpret_cast<const uint4*>(a.w16 + wrow * a.k_pad);
    const __half* sv = kW8 ? a.scales + wrow * (a.k / kW8Group) : nullptr;
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int c = c0 + step * i;
      const bool ok = row < a.rows && c < a.chunks;
      r.w[p][i] = ok ? __ldg(wv + c) : make_uint4(0u, 0u, 0u, 0u);
      if constexpr (kW8) r.scale[p][i] = ok ? __ldg(sv + (c >> 1)) : __ushort_as_half(0);
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
  for (int p = 0; p < kRows; ++p) e.bias[p] = mine && a.bias ? a.bias[weight_row(a, row, p)] : 0.f;
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
    const float g = v[0] + e.bias[0];
    const float u = v[1] + e.bias[1];
    a.out16[row] = __float2half_rn(g / (1.0f + expf(-g)) * u);
  }
}

// Rope epilogue: rotation pair p (0 .. n_rows / 2) of the packed qkv row is rows rope_row(p, 0) and
// rope_row(p, 1) of a head: (j, j + head_dim/2) in Neox mode, (2j, 2j + 1) otherwise. A block's warp
// w computes row rope_row(4·block + w % 4, w / 4), so each pair is finished inside one block.
__device__ __forceinline__ int rope_row(const GemvArgs& a, int pair, int second) {
  const int half = a.head_dim >> 1;
  const int head = pair / half, j = pair - head * half;
  return head * a.head_dim + (a.neox ? j + second * half : 2 * j + second);
}

// The block's rotation pairs, one per thread 0..3: rotates q and k pairs (v heads pass through),
// writes y and appends the k and v values to the caches at *pos. `vals` holds each warp's row value.
__device__ __forceinline__ void gemv_rope_write(const GemvArgs& a, const float* vals, double freq, int pos) {
  const int t = threadIdx.x, pair = int(blockIdx.x) * kRopePairs + t;
  if (t >= kRopePairs || pair >= a.rows / 2) return;
  const int row0 = rope_row(a, pair, 0), row1 = rope_row(a, pair, 1);
  const int head = row0 / a.head_dim;
  float r0 = vals[t], r1 = vals[t + kRopePairs];
  if (head < a.n_head + a.n_head_kv) {
    double sn, cs;
    sincos(double(pos) * freq, &sn, &cs);
    rope_turn(r0, r1, cs, sn, r0, r1);
  }
  a.y[row0] = r0;
  a.y[row1] = r1;
  if (head < a.n_head || pos < 0 || pos >= a.n_ctx) return;
  const bool is_k = head < a.n_head + a.n_head_kv;
  const int kv_head = head - a.n_head - (is_k ? 0 : a.n_head_kv);
  __half* dst = (is_k ? a.k_cache : a.v_cache) + (int64_t(kv_head) * a.n_ctx + pos) * a.head_dim;
  dst[row0 - head * a.head_dim] = __float2half_rn(r0);
  dst[row1 - head * a.head_dim] = __float2half_rn(r1);
}

// One block walks its output rows (the grid as stride) in batches of kBatch vectors per lane and
// weight row. The first batch is requested before the dependency wait. With kPrefetch a second set
// of registers holds the next batch, requested before the current one is used, so that a warp with
// several rows or batches always has weights in flight; variants that hold more than 4 vectors per
// lane (down: one row per warp, all of it in one batch) need no second set.
template <bool kW8, bool kPair, int kBatch, bool kRope>
__device__ __forceinline__ void gemv(const GemvArgs& a) {
  constexpr int kRows = kPair ? 2 : 1;
  constexpr bool kPrefetch = kRows * kBatch <= 4;
  extern __shared__ float4 xs[];  // (chunks · V / 4) units, see x_unit
  __shared__ float partial[kGemvWarps][kRows];
  __shared__ float rope_vals[kGemvWarps];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int rows_per_block = kGemvWarps / a.slices;
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
    const int half = a.head_dim >> 1;
    freq = rope_frequency(pair % half, a.head_dim, a.theta);
  }
  grid_dependency_wait();
  allow_dependent_launch();
  const int pos = kRope && threadIdx.x < kRopePairs ? *a.pos : 0;
  stage_x<kW8>(a, xs);
  __syncthreads();

  const bool writer = slice == 0 && lane == 0;
  ArgmaxCandidate best = argmax_none();  // argmax epilogue: the first strict maximum of the warp's rows
  GemvEpilogueInputs<kRows> epi;
  gemv_epilogue_inputs<kRows>(a, row, writer, epi);
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
      __shared__ ArgmaxCandidate scratch[kGemvWarps];
      argmax_commit(best, scratch, a.argmax, a.argmax_ws);
    }
  }
}

// kPair: the SwiGLU form (gate and up row per output). kBatch: vectors per lane and weight row in
// flight (2, 4 or 8). kRope: the QKV projection with rope + KV append.
template <bool kPair, int kBatch, bool kRope>
__global__ void __launch_bounds__(kGemvThreads, kGemvMinBlocks) w8a16_matmul_m1(const GemvArgs a) {
  gemv<true, kPair, kBatch, kRope>(a);
}

template <bool kPair, int kBatch, bool kRope>
__global__ void __launch_bounds__(kGemvThreads, kGemvMinBlocks) fp16_matmul_m1(const GemvArgs a) {
  gemv<false, kPair, kBatch, kRope>(a);
}

using GemvKernel = void (*)(GemvArgs);

template <int kBatch>
GemvKernel gemv_kernel_of(bool w8, MatmulEpilogue e) {
  switch (e) {
    case MatmulEpilogue::SwiGLU:
      if constexpr (kBatch <= 4) return w8 ? w8a16_matmul_m1<true, kBatch, false> : fp16_matmul_m1<true, kBatch, false>;
      break;  // the plan gives SwiGLU at most 4 vectors per lane and row
    case MatmulEpilogue::QkvRopeAppend:
      return w8 ? w8a16_matmul_m1<false, kBatch, true> : fp16_matmul_m1<false, kBatch, true>;
    case MatmulEpilogue::None:
      return w8 ? w8a16_matmul_m1<false, kBatch, false> : fp16_matmul_m1<false, kBatch, false>;
  }
  return nullptr;
}

GemvKernel gemv_kernel(bool w8, MatmulEpilogue e, int batch) {
  if (batch <= 2) return gemv_kernel_of<2>(w8, e);
  if (batch <= 4) return gemv_kernel_of<4>(w8, e);
  return gemv_kernel_of<8>(w8, e);
}

// Launch shape of matmul_m1 for a matrix (see the top of the file).
struct GemvPlan {
  int slices = 1;  // warps per row
  int batch = 2;   // vectors per lane and weight row in flight
  int64_t blocks = 0;
};

GemvPlan gemv_plan(int rows, int chunks, bool pair, int sm_count, int occupancy) {
  GemvPlan p;
  const int64_t max_blocks = int64_t(occupancy) * sm_count;
  // Long rows are split over several warps while each lane keeps at least two vectors of the row
  // and the rows still fit the launch: ffn_down (896 rows of 304 vectors) gets 2 warps per row,
  // 224 blocks, and has all its weights in flight at once.
  const int64_t target_warps = max_blocks * kGemvWarps;
  while (p.slices < kGemvWarps && chunks >= 2 * 32 * (2 * p.slices) && int64_t(rows) * (2 * p.slices) <= target_warps)
    p.slices *= 2;
  const int64_t per_lane = ceil_div(chunks, 32 * p.slices);
  p.batch = per_lane <= 2 ? 2 : per_lane <= 4 || pair ? 4 : 8;
  p.blocks = std::min<int64_t>(ceil_div(rows, kGemvWarps / p.slices), max_blocks);
  return p;
}

// Shared memory of the staged x: one fp32 per value of a padded row.
size_t gemv_smem(const CudaMatrix& w) {
  return size_t(w.type() == WeightType::W8 ? w.k() : w.k_pad()) * sizeof(float);
}

// ---- prefill: tensor-core matmul ----------------------------------------------------------------

constexpr int kTileM = 64, kTileN = 64, kTileK = 32;
constexpr int kTileLd = kTileK + 8;  // halves per shared row: 80 bytes, so ldmatrix rows hit distinct banks
constexpr int kGemmThreads = 128;

struct GemmArgs {
  const __half* x = nullptr;       // (m, k)
  const int8_t* q = nullptr;       // W8: (n, k)
  const __half* scales = nullptr;  // W8: (n, k / 32)
  const __half* w16 = nullptr;     // F16: (n, k_pad)
  const float* bias = nullptr;     // (n) or null
  float* y = nullptr;              // (m, n)
  __half* out16 = nullptr;         // SwiGLU: (m, n / 2)
  int m = 0, n = 0, k = 0, k_pad = 0;
  int n_out = 0;                   // output columns: n, or n / 2 with SwiGLU
  bool accumulate = false;
  bool x_vec = false;              // every x row starts 16-byte aligned (k % 8 == 0, aligned base)
  int k_tiles_per_split = 0;       // split-K: blockIdx.z covers this many k tiles (0: all of k)
};

// Widens 4 int8 values (signed bytes of w) to 4 exact fp16 values (2 half2 words): each byte with
// its top bit flipped becomes the low mantissa byte of fp16 1024, and 1024 + 128 is subtracted.
__device__ __forceinline__ uint2 i8x4_to_h4(uint32_t w) {
  const uint32_t u = w ^ 0x80808080u;
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

template <bool kW8, bool kSwiGLU>
__global__ void __launch_bounds__(kGemmThreads) matmul_prefill(const GemmArgs a) {
  __shared__ __align__(16) __half As[2][kTileM][kTileLd];  // x tile (rows, k)
  __shared__ __align__(16) __half Bs[2][kTileN][kTileLd];  // weight tile (tile columns, k)
  __shared__ float Ss[2][kTileN];                          // W8: group scale of each tile column

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int wm = warp >> 1, wn = warp & 1;  // the warp's 32x32 quarter of the tile
  const int row0 = blockIdx.y * kTileM;
  const int col0 = blockIdx.x * (kSwiGLU ? kTileN / 2 : kTileN);  // first output column
  const int k_tiles = kW8 ? a.k / kTileK : (a.k_pad + kTileK - 1) / kTileK;
  // Split-K: this block's share of k (gridDim.z > 1 only without SwiGLU; partial sums are added).
  const int kt0 = a.k_tiles_per_split > 0 ? int(blockIdx.z) * a.k_tiles_per_split : 0;
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
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      const int c = wn * 32 + nt * 8 + 2 * (lane & 3);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = row0 + wm * 32 + mt * 16 + (lane >> 2) + h * 8;
        if (row >= a.m) continue;
        if constexpr (kSwiGLU) {
          const int j = col0 + (c >> 1);
          if (j >= a.n_out) continue;
          const float g = acc[mt][nt][2 * h] + (a.bias ? a.bias[j] : 0.f);
          const float u = acc[mt][nt][2 * h + 1] + (a.bias ? a.bias[a.n_out + j] : 0.f);
          a.out16[int64_t(row) * a.n_out + j] = __float2half_rn(g / (1.0f + expf(-g)) * u);
        } else {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int col = col0 + c + e;
            if (col >= a.n) continue;
            // With split-K the first split adds the bias and every split adds into y (zeroed by
            // the host first unless accumulating).
            const float v = acc[mt][nt][2 * h + e] + (a.bias && blockIdx.z == 0 ? a.bias[col] : 0.f);
            float* y = a.y + int64_t(row) * a.n + col;
            if (a.k_tiles_per_split > 0) {
              atomicAdd(y, v);
            } else {
              *y = a.accumulate ? *y + v : v;
            }
          }
        }
      }
    }
  }
}

using GemmKernel = void (*)(GemmArgs);

GemmKernel gemm_kernel(bool w8, bool swiglu) {
  if (w8) return swiglu ? matmul_prefill<true, true> : matmul_prefill<true, false>;
  return swiglu ? matmul_prefill<false, true> : matmul_prefill<false, false>;
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
  if (d.epilogue == MatmulEpilogue::QkvRopeAppend) {
    const QkvRopeAppendDesc& r = d.rope;
    CUDA_REQUIRE(!d.accumulate, op, "the rope epilogue cannot accumulate");
    CUDA_REQUIRE(r.head_dim >= 2 && r.head_dim % 2 == 0 && r.n_head >= 1 && r.n_head_kv >= 1 &&
                     w.n() == (int64_t(r.n_head) + 2 * r.n_head_kv) * r.head_dim,
                 op, "the rope epilogue needs n = (n_head + 2·n_head_kv) · head_dim with an even head_dim");
  }
}

}  // namespace

void CudaBackend::prepare_matmul(const CudaMatrix& w) {
  const size_t smem = gemv_smem(w);
  if (smem <= 48 * 1024) return;
  CUDA_REQUIRE(smem <= smem_optin_, "upload_matrix",
               "k = " + std::to_string(w.k()) + " needs " + std::to_string(smem) +
                   " bytes of shared memory in matmul_m1; this GPU allows " + std::to_string(smem_optin_));
  const bool w8 = w.type() == WeightType::W8;
  for (MatmulEpilogue e : {MatmulEpilogue::None, MatmulEpilogue::SwiGLU, MatmulEpilogue::QkvRopeAppend}) {
    for (int batch : {2, 4, 8}) {
      if (const GemvKernel k = gemv_kernel(w8, e, batch))
        CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem_optin_)));
    }
  }
}

bool CudaBackend::matmul_m1_kernel(const MatmulDesc& d, const CudaMatrix& w) {
  const bool w8 = w.type() == WeightType::W8;
  const bool pair = d.epilogue == MatmulEpilogue::SwiGLU;
  GemvArgs a;
  a.q = w8 ? w.q() : nullptr;
  a.scales = w8 ? w.scales() : nullptr;
  a.w16 = w8 ? nullptr : w.f16();
  a.k = int(w.k());
  a.k_pad = int(w.k_pad());
  a.chunks = w8 ? a.k / 16 : a.k_pad / 8;
  a.rows = int(pair ? w.n() / 2 : w.n());
  a.pair_offset = pair ? a.rows : 0;
  a.x = reinterpret_cast<const __half*>(d.x);
  a.norm_x = d.norm_x;
  a.norm_w = d.norm_weight;
  a.norm_eps = d.norm_eps;
  a.bias = d.bias;
  a.y = d.y;
  a.out16 = reinterpret_cast<__half*>(d.out16);
  a.accumulate = d.accumulate;

  const size_t smem = gemv_smem(w);
  const GemvKernel probe = gemv_kernel(w8, d.epilogue, 2);
  const int occupancy = resident_blocks(reinterpret_cast<const void*>(probe), kGemvThreads, smem);
  const GemvPlan plan = gemv_plan(a.rows, a.chunks, pair, sm_count_, occupancy);
  a.slices = plan.slices;
  int64_t blocks = plan.blocks;
  if (d.epilogue == MatmulEpilogue::QkvRopeAppend) {
    // The rope epilogue needs whole rows per warp and every rotation pair in the one pass.
    const int64_t rope_blocks = ceil_div(a.rows / 2, kRopePairs);
    if (plan.slices != 1 || rope_blocks > plan.blocks) return false;
    blocks = rope_blocks;
    const QkvRopeAppendDesc& r = d.rope;
    a.pos = r.pos;
    a.k_cache = reinterpret_cast<__half*>(r.k_cache);
    a.v_cache = reinterpret_cast<__half*>(r.v_cache);
    a.n_head = r.n_head;
    a.n_head_kv = r.n_head_kv;
    a.head_dim = r.head_dim;
    a.n_ctx = r.n_ctx;
    a.theta = r.theta;
    a.neox = r.mode == RopeMode::Neox;
  }
  if (d.argmax) {
    if (blocks > kArgmaxMaxBlocks) return false;
    a.argmax = d.argmax;
    a.argmax_ws = argmax_workspace();
  }
  launch(gemv_kernel(w8, d.epilogue, plan.batch), dim3(unsigned(blocks)), dim3(kGemvThreads), smem, a);
  return true;
}

void CudaBackend::matmul_prefill_kernel(const MatmulDesc& d, const CudaMatrix& w, const __half* x) {
  const bool w8 = w.type() == WeightType::W8;
  const bool swiglu = d.epilogue == MatmulEpilogue::SwiGLU;
  GemmArgs a;
  a.x = x;
  a.q = w8 ? w.q() : nullptr;
  a.scales = w8 ? w.scales() : nullptr;
  a.w16 = w8 ? nullptr : w.f16();
  a.bias = d.bias;
  a.y = d.y;
  a.out16 = reinterpret_cast<__half*>(d.out16);
  a.m = int(d.m);
  a.n = int(w.n());
  a.k = int(w.k());
  a.k_pad = int(w.k_pad());
  a.n_out = swiglu ? a.n / 2 : a.n;
  a.accumulate = d.accumulate;
  a.x_vec = a.k % 8 == 0 && aligned_to(x, 16);
  const int cols_per_tile = swiglu ? kTileN / 2 : kTileN;
  dim3 grid(unsigned(ceil_div(a.n_out, cols_per_tile)), unsigned(ceil_div(a.m, kTileM)));
  // A short prompt gives few output tiles (N = 896 at m <= 64: 14 blocks for 132 SMs): split k so
  // that about two blocks per SM run, each covering at least 4 k tiles. SwiGLU needs the whole sum
  // before its nonlinearity and is never split (its n is large anyway).
  const int k_tiles = w8 ? a.k / kTileK : int(ceil_div(a.k_pad, kTileK));
  const int64_t tiles = int64_t(grid.x) * grid.y;
  const int64_t want = ceil_div(int64_t(2) * sm_count_, tiles);
  if (!swiglu && want > 1 && k_tiles >= 8) {
    const int splits = int(std::min<int64_t>(want, k_tiles / 4));
    a.k_tiles_per_split = int(ceil_div(k_tiles, splits));
    grid.z = unsigned(ceil_div(k_tiles, a.k_tiles_per_split));  // every split has at least one tile
    if (!a.accumulate) {
      CUDA_CHECK(cudaMemsetAsync(a.y, 0, size_t(a.m) * size_t(a.n) * sizeof(float), stream_.get()));
    }
  }
  launch(gemm_kernel(w8, swiglu), grid, dim3(kGemmThreads), 0, a);
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
  matmul_m1_kernel(plain, w);
  if (d.epilogue == MatmulEpilogue::QkvRopeAppend) rope_epilogue(d);
  if (d.argmax) {
    ArgmaxDesc a;
    a.x = d.y;
    a.out = d.argmax;
    a.n = w.n();
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
