// Prefill matmul of a longer prompt: y = x · Wᵀ (+ bias) for more than 64 rows of x; W is (n, k),
// x (m, k) fp16, y (m, n) fp32.
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

#include "backends/cuda/matmul_common.cuh"

namespace tllm::cuda {
namespace {

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

}  // namespace

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

}  // namespace tllm::cuda
