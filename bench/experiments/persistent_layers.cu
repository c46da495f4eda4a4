// Would a persistent kernel for the decode layer stack beat the chain of kernels tiny-llm runs now?
// Two measurements on the GPU, neither of them tiny-llm's kernels:
//
// 1. Hand-off latency between dependent steps, the cost a decode step pays per op boundary. The
//    steps follow one decode layer of Qwen2.5-0.5B, five dependent ops whose outputs have 1152,
//    896, 896, 4864 and 896 values (QKV, attention, attention output, gate/up, down), 24 layers:
//    120 hand-offs per run. Every block writes some of a step's values and reads all of the step
//    before's, as a GEMV reads its x; nothing else is computed, so what is timed is the hand-off.
//      kernel chain     one kernel per step, 120 launches in a CUDA graph; plain launches, or with
//                       programmatic dependent launch (the next kernel's blocks wait on the device in
//                       griddepcontrol.wait, as tiny-llm's decode kernels do), or with dependent
//                       launch and tagged values (below) instead of the wait: each kernel lets the
//                       next one launch at once, and its blocks spin on the values they read.
//      grid barrier     one cooperative kernel (one block per SM) running the 120 steps; between two
//                       steps each block adds 1 to a counter (release) and spins until all have
//                       (acquire).
//      tagged values    the same kernel without the barrier: each value is written with its step
//                       number in one 64-bit store, and a reader spins on each value until it
//                       carries the number of the step before (one trip to memory per hand-off).
// The three forms write the same values; the tagged ones need every block to write some of each
// step's values (see finish_step), and the chain needs every kernel of a step to be resident before
// the next is launched, which dependent launch provides (a kernel's blocks let the next one launch
// only once all of them run).
// 2. Weight streaming into shared memory, which a persistent kernel needs in order to request a
//    layer's weights ahead of the op that uses them: one block per SM copies its share of each of
//    the 96 weighted ops' weights (QKV, attention output, gate/up and down of 24 layers with their
//    W8 scales, 15.8 MB a layer) with bulk copies (cp.async.bulk, completion on an mbarrier) into a
//    ring of 1 to 3 stages of 69 KB, and takes each stage as it lands.
//
// Prints microseconds per hand-off for each form, and GB/s for each ring depth. Built as
// ./build/persistent_layers_experiment when the CUDA backend is on (sm_90 for programmatic dependent
// launch and bulk copies; on older GPUs the dependent-launch row is the plain chain and part 2 is
// skipped).
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "bench/experiments/experiment.cuh"

namespace {

constexpr int kLayers = 24;
constexpr int kOps = 5;
constexpr int kSteps = kLayers * kOps;
constexpr int kMaxWidth = 4864;
__constant__ int c_width[kOps] = {1152, 896, 896, 4864, 896};  // outputs of op o; its input is op o-1's

__device__ __forceinline__ int width_of(int step) { return c_width[step % kOps]; }
__device__ __forceinline__ int input_width(int step) { return c_width[(step + kOps - 1) % kOps]; }

__device__ __forceinline__ uint32_t load_acquire(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void add_release(uint32_t* p, uint32_t v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
// Stages the n values of a tagged vector into xs, each once it carries `tag` (the block's threads
// spin on their own values).
__device__ void stage_tagged(const uint64_t* in, int n, uint32_t tag, float* xs) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) xs[i] = wait_tagged(in + i, tag);
}

// Writes the step's outputs from what the block staged: value i by block i % blocks, so that every
// block writes in every step (a block that has written its step-s values has finished reading the
// step's input, which the next step's values overwrite). `write(i, v)` stores one value.
template <class Write>
__device__ void finish_step(const float* xs, int n_in, int n_out, Write write) {
  for (int i = int(blockIdx.x + threadIdx.x * gridDim.x); i < n_out; i += int(blockDim.x * gridDim.x))
    write(i, xs[(i * 7) % n_in] * 1e-6f + 1.0f);
}

// ---- kernel chain ----
enum ChainMode { kPlain, kDependent, kDependentTagged };

// kDependentTagged: the kernel lets the next one launch at once and, instead of waiting for the
// previous kernel to finish, spins on its tagged values; the run's number (*epoch, advanced by a
// kernel at the start of each graph launch) makes the tags of every launch new. Step 0 waits.
template <int kMode>
__global__ void chain_step(const float* in, float* out, const uint64_t* tin, uint64_t* tout, const uint32_t* epoch,
                           int step) {
  __shared__ float xs[kMaxWidth];
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (kMode == kDependent || (kMode == kDependentTagged && step == 0)) asm volatile("griddepcontrol.wait;" ::: "memory");
  if (kMode != kPlain) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
  const int n_in = input_width(step);
  if constexpr (kMode == kDependentTagged) {
    const uint32_t tag = load_acquire(epoch) * kSteps + uint32_t(step);
    if (step > 0) {
      stage_tagged(tin, n_in, tag - 1, xs);
    } else {
      for (int i = threadIdx.x; i < n_in; i += blockDim.x) xs[i] = 1.0f;
    }
    __syncthreads();
    finish_step(xs, n_in, width_of(step), [&](int i, float v) { store_tagged(tout + i, tag, v); });
  } else {
    for (int i = threadIdx.x; i < n_in; i += blockDim.x) xs[i] = __ldcg(in + i);
    __syncthreads();
    finish_step(xs, n_in, width_of(step), [&](int i, float v) { out[i] = v; });
  }
}

__global__ void advance_epoch(uint32_t* epoch) { ++*epoch; }

// ---- persistent kernels ----
// run: the launch's number, from 1; it makes the barrier targets and the tags of every launch new.
template <bool kTagged>
__global__ void persistent_steps(uint64_t* tagged0, uint64_t* tagged1, float* plain0, float* plain1, uint32_t* arrivals,
                                 uint32_t run) {
  __shared__ float xs[kMaxWidth];
  const uint32_t blocks = gridDim.x;
  for (int step = 0; step < kSteps; ++step) {
    const int n_in = input_width(step);
    const uint32_t tag = run * kSteps + uint32_t(step);  // the number this step's values carry
    if (kTagged) {
      if (step > 0) {
        stage_tagged((step & 1) ? tagged1 : tagged0, n_in, tag - 1, xs);
      } else {
        for (int i = threadIdx.x; i < n_in; i += blockDim.x) xs[i] = 1.0f;
      }
    } else {
      if (step > 0) {
        __syncthreads();
        if (threadIdx.x == 0) {
          __threadfence();
          add_release(arrivals, 1u);
          const uint32_t target = ((run - 1) * (kSteps - 1) + uint32_t(step)) * blocks;
          while (int32_t(load_acquire(arrivals) - target) < 0) {
          }
        }
        __syncthreads();
      }
      const float* in = (step & 1) ? plain1 : plain0;
      for (int i = threadIdx.x; i < n_in; i += blockDim.x) xs[i] = step > 0 ? __ldcg(in + i) : 1.0f;
    }
    __syncthreads();
    uint64_t* tout = (step & 1) ? tagged0 : tagged1;
    float* pout = (step & 1) ? plain0 : plain1;
    finish_step(xs, n_in, width_of(step), [&](int i, float v) {
      if (kTagged)
        store_tagged(tout + i, tag, v);
      else
        pout[i] = v;
    });
    __syncthreads();
  }
}

// ---- weight streaming ----
constexpr int kWeightedOps = 4;  // QKV, attention output, gate/up, down
constexpr int kMaxDepth = 3;
struct WeightLayout {
  long long bytes[kWeightedOps];   // int8 weights + fp16 scales of one op: n · k · (1 + 2/32)
  long long offset[kWeightedOps];  // in a layer
  long long layer = 0;             // bytes per layer
};

// (Device code for sm_90 and later only; the host pass sees the declarations.)
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
__device__ __forceinline__ uint32_t shared_address(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }

// Block b's share of weighted op j of the run (layer j / 4, op j % 4): a contiguous range.
__device__ __forceinline__ void block_share(const WeightLayout& w, int j, long long& offset, uint32_t& bytes) {
  const int op = j % kWeightedOps;
  const long long per = ((w.bytes[op] + gridDim.x - 1) / gridDim.x + 15) / 16 * 16;
  const long long b0 = min(w.bytes[op], per * blockIdx.x), b1 = min(w.bytes[op], b0 + per);
  offset = (j / kWeightedOps) * w.layer + w.offset[op] + b0;
  bytes = uint32_t(b1 - b0);
}

// Thread 0 asks for `bytes` at src into dst; the stage's mbarrier completes when they have landed.
__device__ __forceinline__ void request_stage(void* dst, const uint8_t* src, uint32_t bytes, uint64_t* bar) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_address(bar)), "r"(bytes) : "memory");
  if (bytes)
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     shared_address(dst)),
                 "l"(src), "r"(bytes), "r"(shared_address(bar))
                 : "memory");
}

__device__ __forceinline__ void wait_stage(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
  while (!done)
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(done)
                 : "r"(shared_address(bar)), "r"(parity)
                 : "memory");
}
#endif

// Streams every weighted op's share through a ring of `depth` stages; each stage is read (one byte
// per thread, to consume it) and handed back for the op `depth` later.
__global__ void __launch_bounds__(1024, 1) stream_weights(const uint8_t* weights, WeightLayout w, int depth,
                                                          uint32_t stage_bytes, int* sink) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(128) uint8_t stage[];
  __shared__ uint64_t bars[kMaxDepth];
  const int ops = kLayers * kWeightedOps;
  if (threadIdx.x == 0) {
    for (int i = 0; i < depth; ++i)
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(shared_address(&bars[i])) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int j = 0; j < depth && j < ops; ++j) {
      long long offset;
      uint32_t bytes;
      block_share(w, j, offset, bytes);
      request_stage(stage + size_t(j) * stage_bytes, weights + offset, bytes, &bars[j]);
    }
  }
  int sum = 0;
  for (int j = 0; j < ops; ++j) {
    const int st = j % depth;
    wait_stage(&bars[st], uint32_t((j / depth) & 1));
    sum += stage[size_t(st) * stage_bytes + threadIdx.x];
    __syncthreads();  // the stage is free again
    if (threadIdx.x == 0 && j + depth < ops) {
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      long long offset;
      uint32_t bytes;
      block_share(w, j + depth, offset, bytes);
      request_stage(stage + size_t(st) * stage_bytes, weights + offset, bytes, &bars[st]);
    }
  }
  if (sum == -1) *sink = sum;
#else
  (void)weights, (void)w, (void)depth, (void)stage_bytes, (void)sink;
#endif
}

struct Buffers {
  uint64_t* tagged[2] = {};
  float* plain[2] = {};
  uint32_t* arrivals = nullptr;  // grid barrier
  uint32_t* epoch = nullptr;     // tagged kernel chain
};

constexpr int kReps = 20;

int time_chain(ChainMode mode, int blocks, int threads, const Buffers& b, cudaStream_t s, float& us_per_step) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK(cudaMemsetAsync(b.epoch, 0, sizeof(uint32_t), s));
  CHECK(cudaMemsetAsync(b.tagged[0], 0, kMaxWidth * sizeof(uint64_t), s));
  CHECK(cudaMemsetAsync(b.tagged[1], 0, kMaxWidth * sizeof(uint64_t), s));
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  if (mode == kDependentTagged) advance_epoch<<<1, 1, 0, s>>>(b.epoch);
  void (*kernel)(const float*, float*, const uint64_t*, uint64_t*, const uint32_t*, int) =
      mode == kPlain ? chain_step<kPlain> : mode == kDependent ? chain_step<kDependent> : chain_step<kDependentTagged>;
  for (int step = 0; step < kSteps; ++step) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(blocks);
    cfg.blockDim = dim3(threads);
    cfg.stream = s;
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = &attr;
    cfg.numAttrs = mode == kPlain ? 0 : 1;
    CHECK(cudaLaunchKernelEx(&cfg, kernel, static_cast<const float*>(b.plain[step & 1]), b.plain[(step + 1) & 1],
                             static_cast<const uint64_t*>(b.tagged[step & 1]), b.tagged[(step + 1) & 1],
                             static_cast<const uint32_t*>(b.epoch), step));
  }
  CHECK(cudaStreamEndCapture(s, &graph));
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  const double us = time_launches(s, kReps, [&] { return cudaGraphLaunch(exec, s); });
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  us_per_step = float(us / kSteps);
  return us < 0 ? 1 : 0;
}

int time_persistent(bool tagged, int threads, const Buffers& b, cudaStream_t s, float& us_per_step) {
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CHECK(cudaMemsetAsync(b.arrivals, 0, sizeof(uint32_t), s));
  CHECK(cudaMemsetAsync(b.tagged[0], 0, kMaxWidth * sizeof(uint64_t), s));
  CHECK(cudaMemsetAsync(b.tagged[1], 0, kMaxWidth * sizeof(uint64_t), s));
  void (*kernel)(uint64_t*, uint64_t*, float*, float*, uint32_t*, uint32_t) =
      tagged ? persistent_steps<true> : persistent_steps<false>;
  uint32_t run = 1;
  const double us = time_launches(s, kReps, [&] {
    void* args[] = {(void*)&b.tagged[0], (void*)&b.tagged[1], (void*)&b.plain[0], (void*)&b.plain[1],
                    (void*)&b.arrivals, &run};
    const cudaError_t e = cudaLaunchCooperativeKernel((void*)kernel, dim3(sms), dim3(threads), args, 0, s);
    ++run;
    return e;
  });
  us_per_step = float(us / kSteps);
  return us < 0 ? 1 : 0;
}

}  // namespace

int main() {
  cudaDeviceProp prop;
  if (!device_properties("persistent_layers", prop)) return 1;
  Buffers b;
  for (int i = 0; i < 2; ++i) {
    CHECK(cudaMalloc(&b.tagged[i], kMaxWidth * sizeof(uint64_t)));
    CHECK(cudaMalloc(&b.plain[i], kMaxWidth * sizeof(float)));
    CHECK(cudaMemset(b.plain[i], 0, kMaxWidth * sizeof(float)));
  }
  CHECK(cudaMalloc(&b.arrivals, sizeof(uint32_t)));
  CHECK(cudaMalloc(&b.epoch, sizeof(uint32_t)));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::printf("%s, %d SMs: %d dependent steps (24 layers x 5 ops), median of 3 runs of %d repetitions\n", prop.name,
              prop.multiProcessorCount, kSteps, kReps);
  std::printf("%-34s %-14s %s\n", "hand-off", "grid", "us per step");
  const int sms = prop.multiProcessorCount;
  auto median3 = [](float a, float b, float c) { return a > b ? (b > c ? b : (a > c ? c : a)) : (a > c ? a : (b > c ? c : b)); };
  const char* chain_names[] = {"kernel chain, plain launch", "kernel chain, dependent launch",
                               "kernel chain, tagged values"};
  for (int threads : {256, 1024}) {
    for (ChainMode mode : {kPlain, kDependent, kDependentTagged}) {
      float t[3];
      for (float& v : t)
        if (time_chain(mode, sms, threads, b, s, v)) return 1;
      char grid[32];
      std::snprintf(grid, sizeof grid, "%d x %d", sms, threads);
      std::printf("%-34s %-14s %.2f\n", chain_names[mode], grid, median3(t[0], t[1], t[2]));
    }
  }
  for (bool tagged : {false, true}) {
    float t[3];
    for (float& v : t)
      if (time_persistent(tagged, 1024, b, s, v)) return 1;
    char grid[32];
    std::snprintf(grid, sizeof grid, "%d x %d", sms, 1024);
    std::printf("%-34s %-14s %.2f\n", tagged ? "persistent, tagged values" : "persistent, grid barrier", grid,
                median3(t[0], t[1], t[2]));
  }

  if (prop.major < 9) {
    std::printf("weight streaming: skipped (bulk copies need sm_90)\n");
    return 0;
  }
  WeightLayout w;
  const long long shapes[kWeightedOps][2] = {{1152, 896}, {896, 896}, {9728, 896}, {896, 4864}};  // (n, k)
  long long max_share = 0;
  for (int op = 0; op < kWeightedOps; ++op) {
    w.bytes[op] = shapes[op][0] * shapes[op][1] * 17 / 16;
    w.offset[op] = w.layer;
    w.layer += (w.bytes[op] + 255) / 256 * 256;
    const long long share = ((w.bytes[op] + sms - 1) / sms + 15) / 16 * 16;
    if (share > max_share) max_share = share;
  }
  const uint32_t stage_bytes = uint32_t((max_share + 127) / 128 * 128);
  uint8_t* weights = nullptr;
  int* sink = nullptr;
  CHECK(cudaMalloc(&weights, size_t(w.layer) * kLayers));
  CHECK(cudaMemset(weights, 1, size_t(w.layer) * kLayers));
  CHECK(cudaMalloc(&sink, sizeof(int)));
  std::printf("weight streaming: %.1f MB per layer, %d layers, one block per SM, stages of %u bytes\n",
              double(w.layer) / 1e6, kLayers, stage_bytes);
  std::printf("%-34s %s\n", "ring", "GB/s");
  for (int depth = 1; depth <= kMaxDepth; ++depth) {
    const size_t smem = size_t(depth) * stage_bytes;
    if (smem > size_t(prop.sharedMemPerBlockOptin)) break;
    CHECK(cudaFuncSetAttribute(stream_weights, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    const double us = time_launches(s, kReps, [&] {
      stream_weights<<<sms, 1024, smem, s>>>(weights, w, depth, stage_bytes, sink);
      return cudaGetLastError();
    });
    if (us < 0) return 1;
    char name[40];
    std::snprintf(name, sizeof name, "%d stage%s", depth, depth > 1 ? "s" : "");
    std::printf("%-34s %.0f\n", name, double(w.layer) * kLayers / us * 1e-3);
  }
  return 0;
}
