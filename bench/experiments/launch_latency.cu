// Where does a prefill that follows a pause lose time? The benchmark's runs of 128 tokens read a
// TTFT 20–40 µs above its runs of one token, and a prefill 50 ms after the previous one takes about
// 90 µs longer on the host than its device span; the profiler shows the device waiting for the
// first layer's launches. This program times the launches themselves, with none of tiny-llm's
// kernels: a chain of 12 kernels launched the way the CUDA backend launches (132 blocks of 256
// threads, programmatic dependent launch, griddepcontrol.wait first), the first busy for 2 µs as
// the embedding is, the others for 6 µs each, after different histories:
//   back to back            right after another chain;
//   after graph replays     right after 40 replays of a captured graph of 100 small kernels, as
//                           the benchmark's prefill follows greedy decode runs in CUDA graphs;
//   graphs, then 4 launches the same, with four tiny kernels launched on the stream before the chain;
//   after a host pause      the host sleeping or spinning (no CUDA calls) for 0.2 to 60 ms first;
//   held on a host flag     after 60 ms of sleep, the stream waits on a flag in host memory
//                           (cuStreamWaitValue32) while the first 6 kernels are queued, so that the
//                           device finds them queued together.
// For each it prints the host time of the first launch call and the median of the others, the
// device's gap between the first kernel's end and the second's start (globaltimer), and the host
// time from the first launch to the end of the chain's synchronisation; medians of 5 rounds.
// Built as ./build/launch_latency_experiment with the CUDA backend (sm_90: dependent launch).
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <thread>
#include <vector>

#include "backends/cuda/cuda_common.cuh"
#include "bench/experiments/experiment.cuh"

namespace {

constexpr int kKernels = 12, kRounds = 5, kHeld = 6;
using Clock = std::chrono::steady_clock;

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Waits for the kernel before, then keeps its SMs busy for busy_ns; records its first start and
// last end (ns) in when[2·id] and when[2·id + 1].
__global__ void busy(unsigned long long* when, int id, long long busy_ns) {
  tllm::cuda::grid_dependency_wait();
  const unsigned long long t0 = global_ns();
  if (threadIdx.x == 0) atomicMin(&when[2 * id], t0);
  tllm::cuda::allow_dependent_launch();
  while (global_ns() - t0 < static_cast<unsigned long long>(busy_ns)) {
  }
  __syncthreads();
  if (threadIdx.x == 0) atomicMax(&when[2 * id + 1], global_ns());
}

__global__ void tiny() {}

double us_since(Clock::time_point t) { return std::chrono::duration<double, std::micro>(Clock::now() - t).count(); }

struct Chain {
  cudaStream_t s = nullptr;
  unsigned long long* when = nullptr;  // (kKernels, 2) device timestamps
  double launch_us[kKernels] = {};     // host time of each launch call

  cudaError_t launch(int id) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(132);
    cfg.blockDim = dim3(256);
    cfg.stream = s;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    const auto t = Clock::now();
    const cudaError_t err = cudaLaunchKernelEx(&cfg, busy, when, id, id == 0 ? 2000LL : 6000LL);
    launch_us[id] = us_since(t);
    return err;
  }
  cudaError_t reset() {
    std::vector<unsigned long long> h(2 * kKernels);
    for (int i = 0; i < kKernels; ++i) h[size_t(2 * i)] = ~0ull;
    return cudaMemcpy(when, h.data(), h.size() * sizeof(h[0]), cudaMemcpyHostToDevice);
  }
};

struct Sample {
  double first_launch = 0, other_launches = 0, first_gap = 0, host_total = 0;
};

// Launches from `first` on (the ones before are queued already), synchronises, and reads the times.
cudaError_t finish(Chain& c, int first, Clock::time_point t0, Sample& out) {
  for (int i = first; i < kKernels; ++i)
    if (const cudaError_t err = c.launch(i)) return err;
  if (const cudaError_t err = cudaStreamSynchronize(c.s)) return err;
  out.host_total = us_since(t0);
  std::vector<unsigned long long> h(2 * kKernels);
  if (const cudaError_t err = cudaMemcpy(h.data(), c.when, h.size() * sizeof(h[0]), cudaMemcpyDeviceToHost)) return err;
  out.first_launch = c.launch_us[0];
  std::vector<double> others(c.launch_us + 1, c.launch_us + kKernels);
  std::nth_element(others.begin(), others.begin() + others.size() / 2, others.end());
  out.other_launches = others[others.size() / 2];
  out.first_gap = (double(h[2]) - double(h[1])) / 1e3;
  return cudaSuccess;
}

cudaError_t run_chain(Chain& c, Sample& out) { return finish(c, 0, Clock::now(), out); }

void spin_for(std::chrono::microseconds d) {
  const auto t = Clock::now();
  while (Clock::now() - t < d) {
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main() {
  cudaDeviceProp prop;
  if (!device_properties("launch_latency", prop)) return 1;
  Chain c;
  CHECK(cudaStreamCreateWithFlags(&c.s, cudaStreamNonBlocking));
  CHECK(cudaMalloc(&c.when, 2 * kKernels * sizeof(unsigned long long)));
  cudaGraph_t graph;
  cudaGraphExec_t replay;
  CHECK(cudaStreamBeginCapture(c.s, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < 100; ++i) tiny<<<132, 256, 0, c.s>>>();
  CHECK(cudaStreamEndCapture(c.s, &graph));
  CHECK(cudaGraphInstantiate(&replay, graph, 0));
  // cuStreamWaitValue32 from the driver the runtime loaded, so that the program links no driver
  // library and reports a missing GPU like the others.
  using WaitValue = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
  WaitValue wait_value = nullptr;
  cudaDriverEntryPointQueryResult found;
  CHECK(cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", reinterpret_cast<void**>(&wait_value), 12000,
                                         cudaEnableDefault, &found));
  if (found != cudaDriverEntryPointSuccess || !wait_value) {
    std::fprintf(stderr, "launch_latency: the driver has no cuStreamWaitValue32\n");
    return 1;
  }
  int* flag = nullptr;
  CHECK(cudaHostAlloc(&flag, sizeof(int), cudaHostAllocMapped));
  int* flag_dev = nullptr;
  CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&flag_dev), flag, 0));
  const auto replays = [&]() -> cudaError_t {
    for (int i = 0; i < 40; ++i)
      if (const cudaError_t err = cudaGraphLaunch(replay, c.s)) return err;
    return cudaStreamSynchronize(c.s);
  };

  // The histories, each as what it does before its chain and the chain itself, in this order.
  const auto sleep_us = [](int us) { std::this_thread::sleep_for(std::chrono::microseconds(us)); };
  const auto after_spin = [&](int ms) {
    return [&c, ms](Sample& s) -> cudaError_t {
      if (const cudaError_t err = c.reset()) return err;
      spin_for(std::chrono::milliseconds(ms));
      return run_chain(c, s);
    };
  };
  const auto after_replays = [&](int tiny_launches, int sleep) {
    return [&, tiny_launches, sleep](Sample& s) -> cudaError_t {
      if (const cudaError_t err = replays()) return err;
      if (const cudaError_t err = c.reset()) return err;
      for (int i = 0; i < tiny_launches; ++i) tiny<<<1, 32, 0, c.s>>>();
      if (sleep > 0) sleep_us(sleep);
      return run_chain(c, s);
    };
  };
  const auto held = [&](Sample& s) -> cudaError_t {
    if (const cudaError_t err = c.reset()) return err;
    sleep_us(60000);
    const auto t0 = Clock::now();
    *reinterpret_cast<volatile int*>(flag) = 0;
    if (const CUresult r = wait_value(c.s, reinterpret_cast<CUdeviceptr>(flag_dev), 1, CU_STREAM_WAIT_VALUE_GEQ)) {
      std::fprintf(stderr, "cuStreamWaitValue32 failed: %d\n", int(r));
      return cudaErrorUnknown;
    }
    for (int i = 0; i < kHeld; ++i)
      if (const cudaError_t err = c.launch(i)) return err;
    *reinterpret_cast<volatile int*>(flag) = 1;
    return finish(c, kHeld, t0, s);
  };
  struct Case {
    const char* name;
    std::function<cudaError_t(Sample&)> run;
    std::vector<Sample> samples;
  };
  std::vector<Case> cases = {
      {"back to back",
       [&](Sample& s) -> cudaError_t {
         Sample before;  // the chain that this one follows
         if (const cudaError_t err = c.reset()) return err;
         if (const cudaError_t err = run_chain(c, before)) return err;
         if (const cudaError_t err = c.reset()) return err;
         return run_chain(c, s);
       },
       {}},
      {"after 40 graph replays", after_replays(0, 0), {}},
      {"graph replays, then 4 launches", after_replays(4, 0), {}},
      {"graph replays, then 0.2 ms sleep", after_replays(0, 200), {}},
      {"after 2 ms of host spin", after_spin(2), {}},
      {"after 10 ms of host spin", after_spin(10), {}},
      {"after 60 ms of host spin", after_spin(60), {}},
      {"after 60 ms of host sleep",
       [&](Sample& s) -> cudaError_t {
         if (const cudaError_t err = c.reset()) return err;
         sleep_us(60000);
         return run_chain(c, s);
       },
       {}},
      {"60 ms sleep, held on a host flag", held, {}}};
  Sample warm;
  CHECK(c.reset());
  CHECK(run_chain(c, warm));
  for (int round = 0; round < kRounds; ++round) {
    for (Case& cs : cases) {
      Sample s;
      CHECK(cs.run(s));
      cs.samples.push_back(s);
    }
  }

  std::printf("%s, %d SMs: a chain of %d dependent kernels (2 us, then 6 us each) after each history;\n"
              "medians of %d rounds\n",
              prop.name, prop.multiProcessorCount, kKernels, kRounds);
  std::printf("%-34s %14s %14s %16s %14s\n", "history", "1st launch us", "others us", "device gap 1 us",
              "host total us");
  for (const Case& cs : cases) {
    std::vector<double> a, b, g, t;
    for (const Sample& s : cs.samples) {
      a.push_back(s.first_launch);
      b.push_back(s.other_launches);
      g.push_back(s.first_gap);
      t.push_back(s.host_total);
    }
    std::printf("%-34s %14.1f %14.1f %16.1f %14.1f\n", cs.name, median(a), median(b), median(g), median(t));
  }
  return 0;
}
