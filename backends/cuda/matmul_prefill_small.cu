// Prefill matmul of a short prompt: y = x · Wᵀ (+ bias) for 2 to 64 rows of x; W is (n, k), x
// (m, k) fp16, y (m, n) fp32.
//
// Prefill of a short prompt still streams weights: at m = 30 a projection's
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
#include <algorithm>

#include "backends/cuda/matmul_common.cuh"

namespace tllm::cuda {
namespace {

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
  return rope_frequency(a.rope.neox ? d : d >> 1, a.rope.head_dim, a.rope.theta, a.rope.freq_factors);
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

}  // namespace

// Every matmul_prefill_small kernel may use small_smem_limit() bytes of shared memory.
void CudaBackend::prepare_matmul_small() {
  if (small_prepared_) return;
  for (bool w8 : {true, false}) {
    for (bool swiglu : {true, false}) {
      for (int nt : {1, 2, 4, 8}) {
        for (bool norm : {false, true}) {
          for (bool rope : {false, true}) {
            for (bool wide : {false, true}) {
              if (const SmallKernel k = small_kernel(w8, swiglu, norm, rope, nt, wide))
                CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(small_smem_limit())));
            }
          }
        }
      }
    }
  }
  small_prepared_ = true;
}

size_t CudaBackend::small_smem_limit() const {
  // What a block may ask for, less the kernel's static shared memory.
  return smem_optin_ > kSmallStaticSmem ? smem_optin_ - kSmallStaticSmem : 0;
}

size_t CudaBackend::small_smem_cap() const { return std::min(kSmallSmemCap, small_smem_limit()); }

bool CudaBackend::matmul_small_kernel(const MatmulDesc& d, const CudaMatrix& w) {
  if (d.m > kSmallMaxM) return false;
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

}  // namespace tllm::cuda
