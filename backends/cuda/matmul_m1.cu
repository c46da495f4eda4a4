// Decode matmul (m = 1): y = x · Wᵀ (+ bias), or y += with `accumulate`; W is (n, k), x (k) fp16
// (or the rmsnorm prologue's fp16 output), y (n) fp32.
//
// Decode (m = 1) streams every weight once. At the model's sizes (1 to 9 MB per matrix) the time is
// set less by bandwidth than by how early the weights are requested, so the kernels are shaped to
// have the weights in flight before the previous kernel has finished:
//   w8a16_matmul_m1  W8 weights. A warp owns one output row (two weight rows with SwiGLU: gate row j
//                    and up row j + n/2, which share every x read; the same two rows of a plain matrix
//                    large for the GPU, w8a16_matmul_m1_two_rows, see two_rows_a_warp); each lane
//                    reads 16-byte vectors of 16 int8 weights, so one load of a warp covers 512
//                    contiguous bytes of a row. Long rows are split over 2 to 8 warps of a block
//                    ("slices") that add their sums in shared memory in a fixed order (ffn_down,
//                    n = 896, k = 4864: 4 warps per row). A
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
//                    thread issued before the first store; the y being accumulated into is requested
//                    before x is staged (and for each later row when it starts), so that its trip to
//                    memory overlaps x's. What no kernel writes, the rmsnorm prologue's weights and
//                    the first row's bias, is requested before the dependency wait, so that after it
//                    only x comes from memory: on an H200, decode 2,495.5-2,497.0 against
//                    2,476.7-2,480.3 tok/s after the "你好" chat prompt (interleaved), TTFT 0.860 /
//                    0.864 against 0.872 / 0.875 ms; without CUDA graphs 2,171.9-2,180.0 against
//                    2,195.7-2,198.7, after 4,096 tokens 2,040-2,043 against 2,040-2,049 (the
//                    2026-12-03 H200 report). int8 → fp32 is one byte permute and one
//                    subtract (the 2^23 magic number); the 16 products of a vector are summed in fp32,
//                    one 4-value unit of x at a time, and scaled by their group's scale. The QKV
//                    projection's epilogue applies rope and appends k and v to the caches: the block's
//                    8 warps take the 4 rotation pairs' rows (j and j + head_dim/2, or 2j and 2j + 1),
//                    so a pair is finished inside one block, with the angle in fp64 as in the rope
//                    kernel, computed after the dependency wait. Computed before it, at the position
//                    read then, the angle gained 0.25% after 4,096 tokens of context but lost 3%
//                    after 2,048, where attention runs in clusters of 16 blocks (2,148.7-2,150.3
//                    against 2,214.5-2,215.1 tok/s on an H200, interleaved; the 2026-12-03 report).
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
#include <algorithm>
#include <vector>

#include "backends/cuda/matmul_common.cuh"

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

// The rmsnorm prologue's weights in the thread's units of x (unit threadIdx.x + i · blockDim.x),
// where the prologue holds x in registers (norm_in_registers). They do not depend on the previous
// kernel, so they are requested before the dependency wait, and only x is read after it.
struct NormWeights {
  float4 w[kNormUnits];
};

__device__ __forceinline__ bool norm_in_registers(const GemvArgs& a) {
  return a.k % 4 == 0 && aligned_to(a.norm_x, 16) && aligned_to(a.norm_w, 16) &&
         a.k / 4 <= kNormUnits * int(blockDim.x);
}

template <bool kNorm>
__device__ __forceinline__ void load_norm_weights(const GemvArgs& a, NormWeights& nw) {
#pragma unroll
  for (int i = 0; i < kNormUnits; ++i) {
    const int u = threadIdx.x + i * blockDim.x;
    nw.w[i] = kNorm && norm_in_registers(a) && u < a.k / 4 ? reinterpret_cast<const float4*>(a.norm_w)[u]
                                                           : make_float4(0.f, 0.f, 0.f, 0.f);
  }
}

// Hands x (or the rmsnorm prologue's fp16 values) to store(u, v) in 4-value units v, zero past k,
// over the units of a weight row. Block-wide. Every global load a thread makes is issued before
// the first value is stored, so staging costs one trip to memory (the prologue's block sum adds
// one barrier: a kernel stages x once, so its scratch is never reused). nw: the prologue's weights
// (load_norm_weights).
template <bool kW8, bool kNorm, int kLoads = kStageBatch, class Store>
__device__ void stage_x(const GemvArgs& a, const NormWeights& nw, Store store) {
  const int units = a.chunks * (kW8 ? 4 : 2);
  __shared__ double scratch[32];
  if constexpr (kNorm) {
    // out = fp16(x / sqrt(mean(x²) + eps) * weight); the sum of squares in fp64 as in the oracle.
    const int k_units = a.k / 4;
    if (norm_in_registers(a)) {
      // x in registers, the weights already there: one trip to memory.
      float4 xv[kNormUnits];
      const float4* wv = nw.w;
      double ss = 0;
#pragma unroll
      for (int i = 0; i < kNormUnits; ++i) {
        const int u = threadIdx.x + i * blockDim.x;
        xv[i] = u < k_units ? reinterpret_cast<const float4*>(a.norm_x)[u] : make_float4(0.f, 0.f, 0.f, 0.f);
      }
#pragma unroll
      for (int i = 0; i < kNormUnits; ++i)
        ss += double(xv[i].x) * xv[i].x + double(xv[i].y) * xv[i].y + double(xv[i].z) * xv[i].z + double(xv[i].w) * xv[i].w;
      ss = block_sum<double, true>(ss, scratch);
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
    ss = block_sum<double, true>(ss, scratch);
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
// starts so that they arrive while it is computed; the first row's bias, which no kernel writes,
// before the dependency wait. Only the writing thread loads them.
// kY: the rows whose y is accumulated into, 1, or 2 for w8a16_matmul_m1_two_rows.
template <int kRows, int kY = 1>
struct GemvEpilogueInputs {
  float bias[kRows];
  float y[kY];
};

template <int kRows, int kY>
__device__ __forceinline__ void gemv_epilogue_bias(const GemvArgs& a, int row, bool writer,
                                                   GemvEpilogueInputs<kRows, kY>& e) {
  const bool mine = writer && row < a.rows;
#pragma unroll
  for (int p = 0; p < kRows; ++p) {
    const bool in_range = kRows < 4 || out_row<kRows>(row, p) < a.rows;  // a second pair may lie past the end
    e.bias[p] = mine && in_range && a.bias ? a.bias[weight_row<kRows>(a, row, p)] : 0.f;
  }
}

// The y a row accumulates into: written by an earlier kernel, so read after the dependency wait.
template <int kRows, int kY>
__device__ __forceinline__ void gemv_epilogue_y(const GemvArgs& a, int row, bool writer,
                                                GemvEpilogueInputs<kRows, kY>& e) {
  if constexpr (kY == 2) {
    const bool mine = writer && row < a.rows && a.accumulate;
    e.y[0] = mine ? a.y[row] : 0.f;
    e.y[1] = mine ? a.y[row + a.pair_offset] : 0.f;
  } else {
    e.y[0] = kRows == 1 && writer && row < a.rows && a.accumulate ? a.y[row] : 0.f;
  }
}

template <int kRows, int kY>
__device__ __forceinline__ void gemv_epilogue_inputs(const GemvArgs& a, int row, bool writer,
                                                     GemvEpilogueInputs<kRows, kY>& e) {
  gemv_epilogue_bias(a, row, writer, e);
  gemv_epilogue_y(a, row, writer, e);
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
template <int kRows, int kY>
__device__ __forceinline__ void gemv_write(const GemvArgs& a, int row, const float (&v)[kRows],
                                           const GemvEpilogueInputs<kRows, kY>& e, ArgmaxCandidate& best) {
  if (row >= a.rows) return;
  if constexpr (kRows == 1) {
    const float r = v[0] + e.bias[0];
    const float out = a.accumulate ? e.y[0] + r : r;
    a.y[row] = out;
    best.offer(out, row);
  } else if constexpr (kY == 2) {  // two plain rows: row and row + n/2
#pragma unroll
    for (int p = 0; p < 2; ++p) {
      const int r = row + p * a.pair_offset;
      const float out = a.accumulate ? e.y[p] + (v[p] + e.bias[p]) : v[p] + e.bias[p];
      a.y[r] = out;
      best.offer(out, r);
    }
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
template <bool kW8, bool kPair, int kBatch, bool kRope, bool kNorm, bool kTwoPairs = false, bool kTwoRows = false>
__device__ __forceinline__ void gemv(const GemvArgs& a) {
  constexpr int kRows = kPair ? (kTwoPairs ? 4 : 2) : kTwoRows ? 2 : 1;
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
    freq = rope_frequency(pair % half, a.rope.head_dim, a.rope.theta, a.rope.freq_factors);
  }
  const bool writer = slice == 0 && lane == 0;
  GemvEpilogueInputs<kRows, kTwoRows ? 2 : 1> epi;
  gemv_epilogue_bias(a, row, writer, epi);
  NormWeights nw;
  load_norm_weights<kNorm>(a, nw);
  grid_dependency_wait();
  allow_dependent_launch();
  const int pos = kRope && threadIdx.x < kRopePairs ? *a.rope.pos : 0;
  gemv_epilogue_y(a, row, writer, epi);  // in flight while x is staged
  stage_x<kW8, kNorm, kNarrow ? kNarrowStageBatch : kStageBatch>(a, nw, XUnitStore<kW8>{xs});
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
      gemv_write(a, row, v, epi, best);
    }
    batch = 0;
    row += row_step;
#pragma unroll
    for (int p = 0; p < kRows; ++p) acc[p] = 0.f;
    if (it + 1 < total) gemv_epilogue_inputs(a, row, writer, epi);
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
// A plain W8 GEMV with two rows a warp (rows j and j + n/2), for matrices large enough that reading
// x from shared memory, once per row, costs more than the time the next kernel has to start: see
// two_rows_a_warp. Batches of 2 vectors per lane and row with a second set in flight; 64 registers
// (ptxas spills 12 bytes).
__global__ void __launch_bounds__(32 * kGemvMaxWarps, 1) w8a16_matmul_m1_two_rows(const GemvArgs a) {
  gemv<true, false, 2, false, false, false, /*kTwoRows=*/true>(a);
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
  NormWeights nw;
  load_norm_weights<kNorm>(a, nw);
  grid_dependency_wait();
  allow_dependent_launch();
  // Few registers beside the steps in flight; the staged values are fp16 values, exact in fp16.
  stage_x<true, kNorm, 2>(a, nw, [&](int u, float4 f) {
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
          gemv_epilogue_inputs(a, row, true, epi);
          gemv_write(a, row, {c[2 * h]}, epi, best);
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

// max_warps: the warps of the kernel the GPU holds at once. two_rows: a warp owns two weight rows
// (a SwiGLU pair, or the two rows of w8a16_matmul_m1_two_rows).
GemvPlan gemv_plan(int rows, int chunks, bool two_rows, int64_t max_warps) {
  GemvPlan p;
  // Rows longer than one batch of 4 vectors a lane are split over several warps while the rows
  // still fit the GPU: ffn_down (896 rows of 304 vectors) gets 4 warps per row and has all its
  // weights in flight at once. Rows of at most 4 vectors a lane stay whole: Llama-3.2-1B's
  // attn_out (2,048 rows of 128 vectors) in 24-warp blocks, 1,261 tok/s on an H100 against 1,231
  // split over 2 warps in 8-warp blocks (the 2026-12-07 Llama-shape report).
  while (p.slices < 8 && chunks > 4 * 32 * p.slices && int64_t(rows) * (2 * p.slices) <= max_warps)
    p.slices *= 2;
  const int64_t per_lane = ceil_div(chunks, 32 * p.slices);
  // Two rows a warp take batches of 2 with the next batch in flight (kPrefetch) rather than 4
  // without: Llama-3.2-1B's ffn_gate_up (4 vectors a lane) 1,291 against 1,231 tok/s on an H100.
  p.batch = two_rows || per_lane <= 2 ? 2 : per_lane <= 4 ? 4 : 8;
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

// Whether a plain W8 GEMV takes two rows a warp (w8a16_matmul_m1_two_rows): where the GPU's
// multiprocessors each have at least kTwoRowsWeights weights to multiply. Every weight reads its x
// value from shared memory (4 bytes per int8 weight, at 128 bytes a cycle: about 1 µs for 64 Ki
// weights on a multiprocessor), after the dependency wait; a warp with two rows reads each x value
// once for both, and a block stages x for twice the rows. Llama-3.2-1B's ffn_down (2,048 × 8,192:
// 127 Ki weights a multiprocessor): 1,319.5 against 1,232 tok/s on an H100 alone, and with the rest
// of this plan 1,448.7 against 1,227.3 (ffn_down 7.26 against 11.62 µs in the chain); the
// benchmarked model's ffn_down (896 × 4,864: 33 Ki) lost with it, 2,183–2,198 against 2,316–2,327
// tok/s, and keeps one row a warp (the 2026-12-07 H100 Llama-shape report).
constexpr int64_t kTwoRowsWeights = int64_t(1) << 16;

bool two_rows_a_warp(const MatmulDesc& d, const CudaMatrix& w, int sm_count) {
  return w.type() == WeightType::W8 && !w.f16_as_w8() && d.epilogue == MatmulEpilogue::None &&
         d.norm_x == nullptr && !d.argmax && w.n() % 2 == 0 && w.n() * w.k() >= kTwoRowsWeights * sm_count;
}

// Shared memory of the staged x: one fp32 per value of a padded row (the int8 form: padded fp16).
size_t gemv_smem(const CudaMatrix& w) {
  if (w.f16_as_w8()) return size_t(i8f_x_offset(i8f_steps(int(w.k())) * kI8fStep));  // padded fp16
  return size_t(w.w8_layout() ? w.k() : w.k_pad()) * sizeof(float);
}

}  // namespace

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
  const bool two_rows = two_rows_a_warp(d, w, sm_count_);
  a.rows = int(pair || two_rows ? w.n() / 2 : w.n());  // outputs: n, or n / 2 SwiGLU or row pairs
  a.pair_offset = pair || two_rows ? a.rows : 0;
  a.x = reinterpret_cast<const __half*>(d.x);
  a.norm_x = d.norm_x;
  a.norm_w = d.norm_weight;
  a.norm_eps = d.norm_eps;
  a.norm_inv_k = 1.0 / double(w.k());

  const size_t smem = gemv_smem(w);
  const bool norm = d.norm_x != nullptr;
  const GemvKernel probe = two_rows ? w8a16_matmul_m1_two_rows : gemv_kernel(w, d.epilogue, norm, 2);
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
    plan = gemv_plan(a.rows, a.chunks, pair || two_rows, max_blocks(8) * 8);
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
  const GemvKernel kernel = two_rows ? w8a16_matmul_m1_two_rows : gemv_kernel(w, d.epilogue, norm, plan.batch);
  launch(kernel, dim3(unsigned(blocks)), dim3(32 * plan.warps), smem, a);
  return true;
}

// The GEMVs' shared memory for w's staged x, where it is past the 48 KB a kernel gets without asking.
void CudaBackend::prepare_matmul_m1(const CudaMatrix& w) {
  const size_t smem = gemv_smem(w);
  if (smem <= 48 * 1024) return;
  std::vector<GemvKernel> kernels;
  if (w.type() == WeightType::W8 && !w.f16_as_w8()) kernels.push_back(w8a16_matmul_m1_two_rows);
  for (MatmulEpilogue e : {MatmulEpilogue::None, MatmulEpilogue::SwiGLU, MatmulEpilogue::QkvRopeAppend})
    for (int batch : {2, 4, 8})
      for (bool norm : {false, true})
        if (const GemvKernel k = gemv_kernel(w, e, norm, batch)) kernels.push_back(k);
  for (const GemvKernel k : kernels) {
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

}  // namespace tllm::cuda
