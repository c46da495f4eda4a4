// A decode step's layer stack as one persistent kernel, timed on synthetic weights: the work of 24
// Qwen2.5-0.5B layers at batch 1 (QKV projection with rmsnorm and bias, rope and KV append,
// attention over the cache, output projection and residual add, rmsnorm and gate/up with SwiGLU,
// down projection and residual add), W8 weights with fp16 group scales as tiny-llm stores them.
// Timing only: the arithmetic is tiny-llm's (int8 widened exactly, fp32 products), but the result
// is not compared with anything, and the lm_head is left out. It measures what the persistent form
// measured by persistent_layers.cu costs once each step does a layer's real work.
//
// One block of 1024 threads per SM (cooperative launch), the ops one after another in every block.
// Ops hand off through vectors of 64-bit words, each a value and the number of the op that wrote it
// (see persistent_layers.cu): a block spins on the values it reads. A block with no rows in an op
// skips it, so blocks without attention or output-projection rows go on to gate/up and request its
// weights while the others still compute. Each warp requests its weights for an op before it
// waits for the op's input. Rows go to warps in order (warp w of the grid takes row w, w + warps,
// ...), one warp per row (four per row of the down projection, whose partial sums meet in shared
// memory). Attention: one block per query head over n_kv cache rows, a warp per row at a time.
//
// Prints microseconds per step and per layer for a few context lengths, for the whole work and for
// two reductions of it that show where the time goes: without attention (each head's output is its
// q), and without attention or weight loads (the registers filled with made-up weights). Built as
// ./build/persistent_decode_experiment with the CUDA backend (needs a cooperative launch of one
// 1024-thread block per SM).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "backends/cuda/cuda_common.cuh"
#include "bench/experiments/experiment.cuh"

namespace {

constexpr int kE = 896, kF = 4864, kHeads = 14, kKvHeads = 2, kHd = 64, kQkv = (kHeads + 2 * kKvHeads) * kHd;
constexpr int kLayers = 24, kOps = 5, kCtx = 4096, kThreads = 1024, kWarps = kThreads / 32;
constexpr int kDownSlices = 4;
constexpr float kEps = 1e-6f, kTheta = 1000000.0f;
enum Op { kQkvOp, kAttnOp, kOutOp, kGateUpOp, kDownOp };

struct LayerWeights {
  const int8_t* q[4];     // qkv (kQkv, kE), out (kE, kE), gate/up (2 kF, kE), down (kE, kF)
  const __half* s[4];     // their scales, one per 32 values of a row
  const float* bias;      // (kQkv)
  const float* norm[2];   // attention and FFN rmsnorm weights (kE)
  __half* k_cache;        // (kKvHeads, kCtx, kHd)
  __half* v_cache;
};
__constant__ LayerWeights c_layer[kLayers];

struct Vectors {
  uint64_t* x;      // (kE) residual stream, tagged
  uint64_t* qkv;    // (kQkv)
  uint64_t* attn;   // (kE)
  uint64_t* ffn;    // (kF)
  const float* x0;  // (kE) the step's embedding row
  uint32_t* epoch;  // launches so far: makes every launch's tags new
  int n_kv;         // cache rows after this step's append
};

using tllm::cuda::block_sum;
using tllm::cuda::dot_i8x4;
using tllm::cuda::warp_max;
using tllm::cuda::warp_sum;

__device__ float block_max(float v, float* scratch) {
  v = warp_max(v);
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
  __syncthreads();
  float t = -INFINITY;
  for (int w = 0; w < kWarps; ++w) t = fmaxf(t, scratch[w]);
  __syncthreads();
  return t;
}

// x in shared memory as fp32 units of 4 values, vector c's units rotated by c / 2 (bank spread).
__device__ __forceinline__ int x_unit(int c, int j) { return 4 * c + ((j + (c >> 1)) & 3); }

// Stages n values (a multiple of 4) into xs: tagged (each once it carries `tag`) or plain, with the
// rmsnorm when norm_w is given (values rounded to fp16, as the engine's prologue writes them).
__device__ __forceinline__ void stage(const uint64_t* tagged, const float* plain, uint32_t tag, int n, const float* norm_w,
                      float4* xs, float* scratch) {
  const int units = n / 4;
  float ss = 0.f;
  for (int u = threadIdx.x; u < units; u += kThreads) {
    float v[4];
    for (int i = 0; i < 4; ++i) v[i] = tagged ? wait_tagged(tagged + 4 * u + i, tag) : plain[4 * u + i];
    xs[x_unit(u / 4, u % 4)] = make_float4(v[0], v[1], v[2], v[3]);
    ss += v[0] * v[0] + v[1] * v[1] + v[2] * v[2] + v[3] * v[3];
  }
  if (!norm_w) {
    __syncthreads();
    return;
  }
  const float inv = rsqrtf(block_sum(ss, scratch) / float(n) + kEps);
  for (int u = threadIdx.x; u < units; u += kThreads) {
    float4& x = xs[x_unit(u / 4, u % 4)];
    const float4 w = reinterpret_cast<const float4*>(norm_w)[u];
    x = make_float4(__half2float(__float2half_rn(x.x * inv * w.x)), __half2float(__float2half_rn(x.y * inv * w.y)),
                    __half2float(__float2half_rn(x.z * inv * w.z)), __half2float(__float2half_rn(x.w * inv * w.w)));
  }
  __syncthreads();
}

// A lane's share of one weight row: vectors first, first + step, ... (kN of them, 16 int8 each).
template <int kN>
struct RowShare {
  uint4 w[kN];
  __half s[kN];
};
// kLoad false: the same registers filled without a load (the timing of everything but the weights).
template <bool kLoad, int kN>
__device__ __forceinline__ void load_share(const int8_t* q, const __half* s, int k, int row, int first, int step,
                                           RowShare<kN>& r) {
  const int chunks = k / 16;
#pragma unroll
  for (int i = 0; i < kN; ++i) {
    const int c = first + i * step;
    const bool ok = c < chunks;
    if (kLoad) {
      r.w[i] = ok ? __ldg(reinterpret_cast<const uint4*>(q + int64_t(row) * k) + c) : make_uint4(0, 0, 0, 0);
      r.s[i] = ok ? __ldg(s + int64_t(row) * (k / 32) + c / 2) : __float2half(0.f);
    } else {
      r.w[i] = make_uint4(uint32_t(row), uint32_t(c), 0u, 0u);
      r.s[i] = __float2half(ok ? 0.001f : 0.f);
    }
  }
}
template <int kN>
__device__ __forceinline__ float dot_share(const RowShare<kN>& r, const float4* xs, int k, int first, int step) {
  float acc = 0.f;
#pragma unroll
  for (int i = 0; i < kN; ++i) {
    const int c = first + i * step;
    if (c < k / 16) {
      float d = dot_i8x4(r.w[i].x, xs[x_unit(c, 0)], 0.f);
      d = dot_i8x4(r.w[i].y, xs[x_unit(c, 1)], d);
      d = dot_i8x4(r.w[i].z, xs[x_unit(c, 2)], d);
      d = dot_i8x4(r.w[i].w, xs[x_unit(c, 3)], d);
      acc = fmaf(d, __half2float(r.s[i]), acc);
    }
  }
  return acc;
}

// One attention head: q head h and the KV head's new row (rope at position n_kv - 1; the first
// query head of a KV head appends the row), then softmax(q·Kᵀ / 8)·V over n_kv rows.
__device__ __noinline__ void attention_head(const LayerWeights& L, const Vectors& v, int h, uint32_t tag_in, uint32_t tag_out,
                               float* smem) {
  float* q = smem;              // (kHd)
  float* k_new = q + kHd;       // (kHd)
  float* v_new = k_new + kHd;   // (kHd)
  float* scores = v_new + kHd;  // (kCtx)
  float* partial = scores + kCtx;  // (kWarps, kHd)
  float* scratch = partial + kWarps * kHd;
  const int g = h / (kHeads / kKvHeads), pos = v.n_kv - 1;
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  if (t < 3 * kHd) {
    const int part = t / kHd, d = t % kHd;
    const int at = part == 0 ? h * kHd + d : part == 1 ? (kHeads + g) * kHd + d : (kHeads + kKvHeads + g) * kHd + d;
    (part == 0 ? q : part == 1 ? k_new : v_new)[d] = wait_tagged(v.qkv + at, tag_in);
  }
  __syncthreads();
  if (t < kHd) {  // Neox rope on q and k: pairs (i, i + 32)
    const int i = t % (kHd / 2);
    float* vec = t < kHd / 2 ? q : k_new;
    const float a = float(pos) * powf(kTheta, -2.0f * float(i) / float(kHd));
    float s, c;
    sincosf(a, &s, &c);
    const float x0 = vec[i], x1 = vec[i + kHd / 2];
    __syncwarp();
    vec[i] = x0 * c - x1 * s;
    vec[i + kHd / 2] = x0 * s + x1 * c;
  }
  __syncthreads();
  if (h % (kHeads / kKvHeads) == 0 && t < kHd) {
    L.k_cache[(int64_t(g) * kCtx + pos) * kHd + t] = __float2half_rn(k_new[t]);
    L.v_cache[(int64_t(g) * kCtx + pos) * kHd + t] = __float2half_rn(v_new[t]);
  }
  const __half* kc = L.k_cache + int64_t(g) * kCtx * kHd;
  const __half* vc = L.v_cache + int64_t(g) * kCtx * kHd;
  const float q0 = q[2 * lane] * 0.125f, q1 = q[2 * lane + 1] * 0.125f;
  float mx = -INFINITY;
  for (int r = warp; r < v.n_kv; r += kWarps) {
    float2 k2;
    if (r == pos) {
      k2 = make_float2(k_new[2 * lane], k_new[2 * lane + 1]);
    } else {
      k2 = __half22float2(reinterpret_cast<const __half2*>(kc + int64_t(r) * kHd)[lane]);
    }
    const float sc = warp_sum(q0 * k2.x + q1 * k2.y);
    if (lane == 0) scores[r] = sc;
    mx = fmaxf(mx, sc);
  }
  mx = block_max(mx, scratch);
  float o0 = 0.f, o1 = 0.f, sum = 0.f;
  for (int r = warp; r < v.n_kv; r += kWarps) {
    const float p = __expf(scores[r] - mx);
    sum += p;
    float2 v2;
    if (r == pos) {
      v2 = make_float2(v_new[2 * lane], v_new[2 * lane + 1]);
    } else {
      v2 = __half22float2(reinterpret_cast<const __half2*>(vc + int64_t(r) * kHd)[lane]);
    }
    o0 = fmaf(p, v2.x, o0);
    o1 = fmaf(p, v2.y, o1);
  }
  partial[warp * kHd + 2 * lane] = o0;
  partial[warp * kHd + 2 * lane + 1] = o1;
  sum = block_sum(lane == 0 ? sum : 0.f, scratch);  // each warp's lanes hold the same sum
  if (t < kHd) {
    float o = 0.f;
    for (int w = 0; w < kWarps; ++w) o += partial[w * kHd + t];
    store_tagged(v.attn + h * kHd + t, tag_out, o / sum);
  }
  __syncthreads();
}

// kWeights false: no weight is loaded; kAttention false: each head's output is its q (no attention).
template <bool kWeights, bool kAttention>
__global__ void __launch_bounds__(kThreads, 1) decode_layers(Vectors v) {
  extern __shared__ float4 smem4[];
  float4* xs = smem4;                                          // (kF / 4) units
  float* red = reinterpret_cast<float*>(smem4 + kF / 4);       // (kWarps)
  float* scratch = red + kWarps;                               // (kWarps)
  float* attn_smem = scratch + kWarps;                         // attention_head's
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int gw = int(blockIdx.x) * kWarps + warp, warps = int(gridDim.x) * kWarps;
  const uint32_t epoch = *v.epoch;
  auto tag = [&](int layer, int op) { return epoch * uint32_t(kLayers * kOps + 1) + uint32_t(layer * kOps + op) + 1; };

  for (int l = 0; l < kLayers; ++l) {
    const LayerWeights& L = c_layer[l];
    const uint32_t x_tag = l == 0 ? 0 : tag(l - 1, kDownOp);

    // QKV: rows 0 .. kQkv - 1, one per warp.
    if (int(blockIdx.x) * kWarps < kQkv) {
      RowShare<2> w;
      const int row = gw;
      if (row < kQkv) load_share<kWeights>(L.q[0], L.s[0], kE, row, lane, 32, w);
      stage(l ? v.x : nullptr, v.x0, x_tag, kE, L.norm[0], xs, scratch);
      if (row < kQkv) {
        const float d = warp_sum(dot_share(w, xs, kE, lane, 32));
        if (lane == 0) store_tagged(v.qkv + row, tag(l, kQkvOp), d + L.bias[row]);
      }
      __syncthreads();
    }
    // Attention: blocks 0 .. kHeads - 1.
    if (int(blockIdx.x) < kHeads) {
      if (kAttention) {
        attention_head(L, v, int(blockIdx.x), tag(l, kQkvOp), tag(l, kAttnOp), attn_smem);
      } else if (threadIdx.x < kHd) {
        const int at = int(blockIdx.x) * kHd + int(threadIdx.x);
        store_tagged(v.attn + at, tag(l, kAttnOp), wait_tagged(v.qkv + at, tag(l, kQkvOp)));
      }
    }
    // Output projection + residual: rows 0 .. kE - 1.
    if (int(blockIdx.x) * kWarps < kE) {
      RowShare<2> w;
      const int row = gw;
      if (row < kE) load_share<kWeights>(L.q[1], L.s[1], kE, row, lane, 32, w);
      stage(v.attn, nullptr, tag(l, kAttnOp), kE, nullptr, xs, scratch);
      if (row < kE) {
        const float d = warp_sum(dot_share(w, xs, kE, lane, 32));
        if (lane == 0) {
          const float old = l ? wait_tagged(v.x + row, x_tag) : v.x0[row];
          store_tagged(v.x + row, tag(l, kOutOp), old + d);
        }
      }
      __syncthreads();
    }
    // gate/up + SwiGLU: output j from gate row j and up row kF + j, j = gw, gw + warps.
    {
      RowShare<2> g, u;
      int j = gw;
      if (j < kF) {
        load_share<kWeights>(L.q[2], L.s[2], kE, j, lane, 32, g);
        load_share<kWeights>(L.q[2], L.s[2], kE, kF + j, lane, 32, u);
      }
      stage(v.x, nullptr, tag(l, kOutOp), kE, L.norm[1], xs, scratch);
      for (; j < kF; j += warps) {
        if (j != gw) {
          load_share<kWeights>(L.q[2], L.s[2], kE, j, lane, 32, g);
          load_share<kWeights>(L.q[2], L.s[2], kE, kF + j, lane, 32, u);
        }
        const float a = warp_sum(dot_share(g, xs, kE, lane, 32));
        const float b = warp_sum(dot_share(u, xs, kE, lane, 32));
        if (lane == 0) store_tagged(v.ffn + j, tag(l, kGateUpOp), __half2float(__float2half_rn(a / (1.0f + __expf(-a)) * b)));
      }
      __syncthreads();
    }
    // Down + residual: row gw / 4, slice gw % 4 of its 304 vectors.
    if (int(blockIdx.x) * kWarps < kE * kDownSlices) {
      RowShare<3> w;
      const int row = gw / kDownSlices, slice = gw % kDownSlices;
      if (row < kE) load_share<kWeights>(L.q[3], L.s[3], kF, row, slice * 32 + lane, 32 * kDownSlices, w);
      stage(v.ffn, nullptr, tag(l, kGateUpOp), kF, nullptr, xs, scratch);
      float d = 0.f;
      if (row < kE) d = warp_sum(dot_share(w, xs, kF, slice * 32 + lane, 32 * kDownSlices));
      if (lane == 0) red[warp] = d;
      __syncthreads();
      if (row < kE && slice == 0 && lane == 0) {
        float t = 0.f;
        for (int s = 0; s < kDownSlices; ++s) t += red[warp + s];
        const float old = wait_tagged(v.x + row, tag(l, kOutOp));
        store_tagged(v.x + row, tag(l, kDownOp), old + t);
      }
      __syncthreads();
    }
  }
  // Every block has read the epoch: block 0's last op read values that every block wrote after it.
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    wait_tagged(v.x, tag(kLayers - 1, kDownOp));
    atomicAdd(v.epoch, 1u);
  }
}

}  // namespace

int main() {
  cudaDeviceProp prop;
  if (!device_properties("persistent_decode", prop)) return 1;
  const int sms = prop.multiProcessorCount;
  if (sms * kWarps < kE * kDownSlices || sms < kHeads) {
    std::fprintf(stderr, "persistent_decode: needs %d warps resident at once\n", kE * kDownSlices);
    return 1;
  }
  // Synthetic weights: small random int8 values and scales, so that the activations stay finite.
  const int64_t sizes[4][2] = {{kQkv, kE}, {kE, kE}, {2 * kF, kE}, {kE, kF}};
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
    for (int m = 0; m < 4; ++m) {
      const size_t n = size_t(sizes[m][0]), k = size_t(sizes[m][1]);
      layers[l].q[m] = static_cast<const int8_t*>(fill(n * k, [&](std::vector<uint8_t>& h) {
        for (auto& b : h) b = uint8_t(int(rnd() >> 24) % 33 - 16);
      }));
      layers[l].s[m] = static_cast<const __half*>(fill(n * (k / 32) * 2, [&](std::vector<uint8_t>& h) {
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
  Vectors v;
  CHECK(cudaMalloc(&v.x, kE * 8));
  CHECK(cudaMalloc(&v.qkv, kQkv * 8));
  CHECK(cudaMalloc(&v.attn, kE * 8));
  CHECK(cudaMalloc(&v.ffn, kF * 8));
  CHECK(cudaMalloc(&v.epoch, 4));
  CHECK(cudaMemset(v.epoch, 0, 4));
  for (uint64_t* p : {v.x, v.qkv, v.attn, v.ffn}) CHECK(cudaMemset(p, 0xff, (p == v.ffn ? kF : p == v.qkv ? kQkv : kE) * 8));
  float* x0 = nullptr;
  CHECK(cudaMalloc(&x0, kE * 4));
  {
    std::vector<float> h(kE);
    for (auto& f : h) f = float(int(rnd() >> 24) % 17 - 8) / 8.f;
    CHECK(cudaMemcpy(x0, h.data(), kE * 4, cudaMemcpyHostToDevice));
  }
  v.x0 = x0;

  const size_t smem = kF * sizeof(float) + 2 * kWarps * sizeof(float) +
                      (3 * kHd + kCtx + kWarps * kHd + kWarps) * sizeof(float);
  using Kernel = void (*)(Vectors);
  const struct {
    Kernel kernel;
    const char* name;
  } variants[] = {{decode_layers<true, true>, "the layer's work"},
                  {decode_layers<true, false>, "without attention (q passed through)"},
                  {decode_layers<false, false>, "without attention or weight loads"}};
  for (const auto& var : variants)
    CHECK(cudaFuncSetAttribute(var.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::printf("%s, %d SMs: %d layers of Qwen2.5-0.5B at batch 1 in one persistent kernel (%d x %d), W8 weights %.1f MB\n",
              prop.name, sms, kLayers, sms, kThreads, weight_bytes / 1e6);
  std::printf("%-38s %-7s %-12s %-13s %s\n", "variant", "n_kv", "us per step", "us per layer", "GB/s (weights)");
  for (const auto& var : variants) {
    for (int n_kv : {128, 1024, 4096}) {
      v.n_kv = n_kv;
      void* args[] = {&v};
      const double us = time_launches(s, 50, [&] {
        return cudaLaunchCooperativeKernel((void*)var.kernel, dim3(sms), dim3(kThreads), args, smem, s);
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
      std::printf("%-38s %-7d %-12.1f %-13.2f %-14.0f (output |x| %.3g%s)\n", var.name, n_kv, us, us / kLayers,
                  weight_bytes / us * 1e-3, std::sqrt(norm), finite ? "" : ", not finite");
    }
  }
  for (void* p : owned) cudaFree(p);
  return 0;
}
