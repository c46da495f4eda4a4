// Shared pieces of the per-op benchmark programs (bench/<op family>_bench.cpp): the model shapes,
// random backend buffers and weight matrices, the backends to run on, and the timing loop with its
// roofline counters.
//
// A program defines `void register_cases()`, which calls register_op() once per case, and
//   int main(int argc, char** argv) { return tllm::bench::bench_main(argc, argv, register_cases); }
// register_op() registers the case once for every backend that can be created here (one that cannot,
// such as cuda without a visible GPU, is named on stderr with the reason),
// named "<op>/<backend>/<args>" (e.g. w8a16_matmul_m1/cuda/N:1152/K:896), so --benchmark_filter=cpu,
// --benchmark_format=json and the other standard flags work as usual.
//
// Timing: each iteration issues the op and then Backend::synchronize(); the host wall time of the
// pair is the iteration's manual time (UseManualTime), so asynchronous backends are timed to
// completion. For small ops on a GPU that time includes the launch and synchronisation latency
// (about 9 µs on an H200). The extra flag --ops_per_sync=N issues N ops (each on the next copy of
// its inputs) before each synchronize and reports the wall time divided by N, which amortises that
// latency the way a decode step of back-to-back ops does (the CPU-time column then covers all N);
// tiny_llm_kernel_bench reports the kernels' own device time instead.
//
// Counters (the roofline):
//   bytes             bytes one op moves: the napkin math each program states in its header comment;
//   bytes_per_second  bytes over the manual time (an iteration-invariant rate, shown as e.g. 3.2G/s);
//   GB/s              the same in units of 1e9 bytes/s;
//   peak_fraction     GB/s / DeviceInfo::peak_bandwidth_gbs; omitted where the backend does not know
//                     its nominal peak (the CPU backend reports 0);
//   FLOP/s            for compute-bound cases (prefill matmul and attention) that state their FLOPs.
//
// The inputs of one case are built on its first run and kept until another case starts, so the
// repeated runs Google Benchmark makes to pick an iteration count reuse them.
#pragma once

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"

namespace tllm {
namespace bench {

// Qwen2.5-0.5B-Instruct, the benchmarked model.
struct ModelShape {
  int n_embd = 896;
  int n_ff = 4864;
  int n_head = 14;
  int n_head_kv = 2;
  int head_dim = 64;
  int n_vocab = 151936;
  float rms_eps = 1e-6f;
  float rope_theta = 1e6f;
  RopeMode rope_mode = RopeMode::Neox;
  int q_dim() const { return n_head * head_dim; }                      // 896
  int kv_dim() const { return n_head_kv * head_dim; }                  // 128
  int qkv_dim() const { return (n_head + 2 * n_head_kv) * head_dim; }  // 1152
};
inline const ModelShape kModel{};

// Weight matrices (and KV caches) are cycled through enough copies to hold at least this many bytes,
// more than a GPU's L2, so each run streams its inputs from memory as a decode step does. On the CPU
// backend the copies add up to at least twice the largest host cache instead, when that is more.
constexpr size_t kFlushBytes = size_t(128) << 20;

inline size_t flush_bytes_for(const std::string& backend_name) {
  size_t bytes = kFlushBytes;
  if (backend_name == "cpu")
    for (const auto& c : benchmark::CPUInfo::Get().caches) bytes = std::max(bytes, 2 * size_t(std::max(c.size, 0)));
  return bytes;
}

// Deterministic xorshift32 generator for the random inputs.
class Rng {
 public:
  uint32_t next() {
    s_ ^= s_ << 13;
    s_ ^= s_ >> 17;
    s_ ^= s_ << 5;
    return s_;
  }
  float uniform(float scale) { return (float(next() & 0xffffff) / float(0xffffff) * 2.0f - 1.0f) * scale; }

 private:
  uint32_t s_ = 0x9e3779b9u;
};

// Backend memory for one case: random buffers and weight matrices, freed together.
class Workspace {
 public:
  Workspace(Backend& be, size_t flush_bytes) : be_(be), flush_bytes_(flush_bytes) {}
  Backend& backend() { return be_; }

  // (n) values uniform in [-scale, scale].
  float* f32(size_t n, float scale = 1.0f) {
    std::vector<float> h(n);
    for (float& v : h) v = rng_.uniform(scale);
    return static_cast<float*>(upload(h.data(), n * sizeof(float)));
  }
  half_t* f16(size_t n, float scale = 1.0f) {
    std::vector<half_t> h(n);
    for (half_t& v : h) v = float_to_half(rng_.uniform(scale));
    return static_cast<half_t*>(upload(h.data(), n * sizeof(half_t)));
  }
  // `copies` back-to-back copies of one random (n) block: (copies, n).
  half_t* f16_copies(size_t n, size_t copies, float scale = 1.0f) {
    std::vector<half_t> h(n);
    for (half_t& v : h) v = float_to_half(rng_.uniform(scale));
    buffers_.push_back(be_.alloc(std::max<size_t>(n * copies * sizeof(half_t), 1)));
    half_t* base = buffers_.back().as<half_t>();
    for (size_t i = 0; i < copies; ++i) be_.upload(base + i * n, h.data(), n * sizeof(half_t));
    return base;
  }
  int32_t* i32(const std::vector<int32_t>& values) {
    return static_cast<int32_t*>(upload(values.data(), values.size() * sizeof(int32_t)));
  }
  // (n) values in [0, bound).
  int32_t* random_i32(size_t n, int32_t bound) {
    std::vector<int32_t> h(n);
    for (int32_t& v : h) v = int32_t(rng_.next() % uint32_t(bound));
    return i32(h);
  }

  // Copies of one random (n, k) matrix, enough that together they hold at least the flush size of
  // backend memory (as the backend stores them: the CPU backend keeps fp32), at least one and at
  // most max_copies. An F16 one with int8_form also carries its int8 form (HostMatrix), as the
  // model's lm_head converted from Q8_0 does.
  std::vector<const Matrix*> matrices(WeightType type, int64_t n, int64_t k, size_t max_copies = 4096,
                                      bool int8_form = false) {
    HostWeights w;
    w.type = type;
    w.n = n;
    w.k = k;
    if (type == WeightType::W8 || int8_form) {
      w.q.resize(size_t(n * k));
      w.scales.resize(size_t(n * k / kW8Group));
      for (int8_t& v : w.q) v = int8_t(int(rng_.next() % 255) - 127);
      for (half_t& v : w.scales) v = float_to_half(0.0005f + 0.001f * std::fabs(rng_.uniform(1)));
      if (type == WeightType::F16) w.widen_to_f16();
    } else {
      w.f16.resize(size_t(n * k));
      for (half_t& v : w.f16) v = float_to_half(rng_.uniform(0.05f));
    }
    const HostMatrix hm = w.view();
    const size_t before = be_.memory_info().allocated_bytes;
    matrices_.push_back(be_.upload_matrix(hm));
    const size_t after = be_.memory_info().allocated_bytes;
    const size_t resident = after > before ? after - before : matrices_.back()->stream_bytes();
    std::vector<const Matrix*> out = {matrices_.back().get()};
    const size_t copies = std::min(flush_copies(resident), max_copies);
    while (out.size() < copies) {
      matrices_.push_back(be_.upload_matrix(hm));
      out.push_back(matrices_.back().get());
    }
    return out;
  }

  // How many copies of a `bytes`-sized input make up the flush size (at least one).
  size_t flush_copies(size_t bytes) const {
    return std::max<size_t>(1, (flush_bytes_ + bytes - 1) / std::max<size_t>(bytes, 1));
  }

 private:
  void* upload(const void* src, size_t bytes) {
    buffers_.push_back(be_.alloc(std::max<size_t>(bytes, 1)));
    be_.upload(buffers_.back().data(), src, bytes);
    return buffers_.back().data();
  }

  Backend& be_;
  size_t flush_bytes_;
  Rng rng_;
  std::vector<Buffer> buffers_;
  std::vector<std::unique_ptr<Matrix>> matrices_;
};

// One benchmark case, built by a program's factory from a Workspace that holds its inputs.
struct OpCase {
  Op op = Op::Add;                  // checked with Backend::supports before the case runs
  double bytes = 0;                 // bytes one op moves
  double flops = 0;                 // floating-point operations of one op; 0: not reported
  std::string label;                // shown beside the result (which projection, which fusion)
  std::function<void(int64_t)> issue;  // issues the op once; the argument counts the runs (to cycle copies)
};
using OpFactory = std::function<OpCase(Workspace&)>;

struct BackendEntry {
  std::string name;
  std::unique_ptr<Backend> backend;
  DeviceInfo info;
  size_t flush_bytes = kFlushBytes;  // see flush_bytes_for
};

// The backends this process runs on: every compiled-in backend that can be created here.
inline std::vector<BackendEntry>& backends() {
  static std::vector<BackendEntry> list;
  return list;
}

// The case whose inputs are alive now; a new case frees the previous one first.
struct LiveCase {
  std::string key;
  std::unique_ptr<Workspace> ws;
  OpCase c;
  int64_t runs = 0;
};
inline LiveCase& live_case() {
  static LiveCase live;
  return live;
}

// Ops issued per synchronize (--ops_per_sync).
inline int& ops_per_sync() {
  static int n = 1;
  return n;
}

// Cases that stopped with an error (bench_main then exits non-zero).
inline int& failed_cases() {
  static int n = 0;
  return n;
}

inline void skip_with_error(benchmark::State& state, const std::string& what) {
  ++failed_cases();
  state.SkipWithError(what.c_str());
}

inline void run_op(benchmark::State& state, BackendEntry& be, const std::string& key, const OpFactory& make) {
  Backend& b = *be.backend;
  LiveCase& live = live_case();
  try {
    if (live.key != key) {
      live = LiveCase{};
      live.ws = std::make_unique<Workspace>(b, be.flush_bytes);
      live.c = make(*live.ws);
      live.key = key;
      if (b.supports(live.c.op)) {
        live.c.issue(live.runs++);  // warm-up: first-touch, lazy initialisation
        b.synchronize();
      }
    }
  } catch (const std::exception& e) {
    live = LiveCase{};
    skip_with_error(state, e.what());
    return;
  }
  const OpCase& c = live.c;
  if (!b.supports(c.op)) {
    skip_with_error(state, be.name + " backend does not support " + op_name(c.op));
    return;
  }
  const int batch = ops_per_sync();
  double seconds = 0;
  for (auto _ : state) {
    try {
      const auto t0 = std::chrono::steady_clock::now();
      for (int j = 0; j < batch; ++j) c.issue(live.runs++);
      b.synchronize();
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / batch;
      state.SetIterationTime(s);
      seconds += s;
    } catch (const std::exception& e) {
      skip_with_error(state, e.what());
      break;
    }
  }
  if (!c.label.empty()) state.SetLabel(c.label);
  const double gbs = seconds > 0 ? c.bytes * double(state.iterations()) / seconds / 1e9 : 0;
  state.counters["bytes"] = benchmark::Counter(c.bytes);
  state.counters["bytes_per_second"] = benchmark::Counter(c.bytes, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GB/s"] = benchmark::Counter(gbs);
  if (be.info.peak_bandwidth_gbs > 0) state.counters["peak_fraction"] = benchmark::Counter(gbs / be.info.peak_bandwidth_gbs);
  if (c.flops > 0) state.counters["FLOP/s"] = benchmark::Counter(c.flops, benchmark::Counter::kIsIterationInvariantRate);
}

// Registers "<op>/<backend>/<args>" for every backend in backends().
inline void register_op(const std::string& op, const std::string& args, OpFactory make) {
  for (BackendEntry& be : backends()) {
    const std::string key = op + "/" + be.name + (args.empty() ? "" : "/" + args);
    BackendEntry* entry = &be;
    benchmark::RegisterBenchmark(key.c_str(), [entry, key, make](benchmark::State& state) { run_op(state, *entry, key, make); })
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
  }
}

// BENCHMARK_MAIN with the backends created first (their devices go into the report's context).
// Exits non-zero when a case fails or no case matches the filter.
inline int bench_main(int argc, char** argv, void (*register_cases)()) {
  benchmark::Initialize(&argc, argv);
  const std::string flag = "--ops_per_sync=";
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind(flag, 0) != 0) {
      argv[kept++] = argv[i];
      continue;
    }
    char* end = nullptr;
    const long n = std::strtol(a.c_str() + flag.size(), &end, 10);
    if (*end != '\0' || n < 1 || n > 100000) {
      std::fprintf(stderr, "%s: %s: expected a whole number from 1 to 100000\n", argv[0], a.c_str());
      return 1;
    }
    ops_per_sync() = int(n);
  }
  argc = kept;
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("ops_per_sync", std::to_string(ops_per_sync()));
  for (const std::string& name : backend_names()) {
    // A backend built in but not usable here (no GPU visible) says so, rather than its cases
    // vanishing from the list without a word.
    try {
      BackendEntry be;
      be.name = name;
      be.backend = create_backend(name);
      be.info = be.backend->device_info();
      be.flush_bytes = flush_bytes_for(name);
      char peak[64];
      std::snprintf(peak, sizeof peak, "%.0f GB/s", be.info.peak_bandwidth_gbs);
      benchmark::AddCustomContext("backend." + name, be.info.name + " | " + be.info.runtime + " | peak " +
                                                         (be.info.peak_bandwidth_gbs > 0 ? peak : "unknown") +
                                                         " | inputs cycled over " + std::to_string(be.flush_bytes >> 20) + " MiB");
      backends().push_back(std::move(be));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s: %s; its cases are not run\n", argv[0], e.what());
    }
  }
  register_cases();
  const size_t ran = benchmark::RunSpecifiedBenchmarks();
  live_case() = LiveCase{};  // free the last case's memory while its backend is alive
  backends().clear();
  benchmark::Shutdown();
  if (failed_cases() > 0) {
    std::fprintf(stderr, "%s: %d case(s) failed\n", argv[0], failed_cases());
    return 1;
  }
  return ran > 0 ? 0 : 1;  // a filter that matches nothing is an error too
}

// "N:1152/K:896"-style argument strings.
inline std::string args(std::initializer_list<std::pair<const char*, int64_t>> kv) {
  std::string s;
  for (const auto& [k, v] : kv) s += (s.empty() ? "" : "/") + std::string(k) + ":" + std::to_string(v);
  return s;
}

}  // namespace bench
}  // namespace tllm
