// The built-in profiler behind `tiny_llm_bench --profile`: kernel-level timing from the backend's
// activity trace (CUPTI on CUDA — no hardware counters, so it works where ncu and nsys reports do
// not; host-timed ops on the CPU), turned into the tables of docs/performance/profiling.md:
//   - kernel summary and the same rolled up by category;
//   - kernels per decode step with and without step capture, and the gaps between kernels;
//   - the GEMM table of a decode step (M, N, K, kernel, grid, block);
//   - a diagnosis per category and for the step: launch-bound, bandwidth-bound, latency-bound (a
//     chain of short dependent kernels) or neither;
// and a Chrome-trace / Perfetto JSON timeline.
#pragma once

#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/model.h"

namespace tllm {

struct ProfileOptions {
  int decode_steps = 64;       // decode steps traced after the prefill
  std::string trace_path;      // Chrome-trace JSON output ("" = none)
};

// Runs the prompt and `decode_steps` greedy decode steps twice (with step capture, then without),
// tracing both, and prints the report on stdout. Returns false when the backend cannot trace.
bool run_profile(Model& model, const std::vector<int32_t>& prompt, const ProfileOptions& opt);

// Category of a kernel or copy by name: matmul, attention, rmsnorm, rope, elementwise or memcpy.
std::string kernel_category(const TraceRecord& r);
// The same for a kernel's name alone (every category but memcpy).
std::string kernel_name_category(const std::string& name);

// Device busy time (the union of the records' intervals) and the span from first start to last end.
struct Occupancy {
  double busy_us = 0;
  double span_us = 0;
  double gap_us() const { return span_us - busy_us; }
};
Occupancy occupancy(const std::vector<TraceRecord>& records);

// The device's waits for the host inside a stretch of kernels. Under programmatic dependent launch a
// kernel launched in time starts before its predecessor ends; one that starts after every earlier
// kernel has ended waited that long for its launch. Sums those waits (critical_path's, below): in
// all, over the first `head` kernels in start order, and the largest single wait.
struct LaunchWaits {
  double total_us = 0;
  double head_us = 0;
  double largest_us = 0;
};
LaunchWaits launch_waits(const std::vector<TraceRecord>& records, size_t head);

// The critical path of a stretch of kernels. Under programmatic dependent launch a kernel starts
// while its predecessor runs and waits on the device, so its own duration overstates what it costs.
// Taken in start order, a kernel's chain time is how much later the stream's last kernel ends
// because of it: its end minus the latest end before it, less the device's wait for its launch
// (the part of that interval before it started, when it started after every earlier end). The first
// kernel counts its duration; an op timed inside another (the CPU backend times the parts of its
// fused ops so) counts 0. Chain times and waits sum to the span from the first start to the last end.
struct ChainRow {
  std::string kernel;
  std::string grid;               // "gx x gy x gz", "-" for a host-timed op
  std::vector<double> chain_us;   // one per call, in start order
};
struct LaunchWait {
  size_t kernel = 0;              // the kernel that waited, in start order
  double us = 0;                  // > 0
};
struct CriticalPath {
  std::vector<ChainRow> rows;     // by kernel and grid (one kernel may serve two ops), largest total first
  std::vector<LaunchWait> waits;  // the device's waits for launches, in start order
  double span_us = 0;
};
CriticalPath critical_path(const std::vector<TraceRecord>& records);

// Chain times by position in a step: for each kernel j of the first of `steps` equal steps (in start
// order), the median chain time of the kernels at j, j + K, j + 2K, ... (K kernels a step) that have
// its name. Empty when there are fewer kernels than steps.
std::vector<double> step_chain_medians(const std::vector<TraceRecord>& records, size_t steps);

// What bounds a decode step, or one category of its kernels (the profile's verdicts):
//   launch     the device idles for more than 30% of the step (host time less busy time);
//   bandwidth  the bytes it must read, over its busy time (a category: over its chain time), exceed
//              60% of the nominal bandwidth;
//   latency    neither, and its kernels add under 5 us each to the critical path (chain time): each
//              waits for the one before it, so the step costs its number of hand-offs times what a
//              kernel does after its wait, whatever its bytes;
//   kernel     none of these: the kernels themselves are slow (occupancy, access pattern).
enum class Bound { Launch, Bandwidth, Latency, Kernel };
const char* bound_name(Bound b);  // "launch-bound", "bandwidth-bound", "latency-bound", "neither"
constexpr double kLaunchBoundIdle = 0.3;
constexpr double kBandwidthBoundFraction = 0.6;
constexpr double kLatencyBoundChainUs = 5.0;

// One decode step's figures, per step: host time, device busy time (union of kernel intervals), the
// kernels' chain times summed (critical_path: the span less the device's waits for launches), the
// kernels, the bytes the step must read (every weight once and the KV cache) and the nominal
// bandwidth (0 where unknown).
struct StepFigures {
  double host_us = 0;
  double busy_us = 0;
  double chain_us = 0;
  double kernels = 0;
  double bytes = 0;
  double peak_gbs = 0;
};
Bound step_bound(const StepFigures& f);
// A category of kernels over the traced steps: its calls, their chain time and the bytes they read.
Bound category_bound(int calls, double chain_us, double bytes, double peak_gbs);

// Writes records as a Chrome-trace ("traceEvents") JSON file that chrome://tracing and Perfetto open.
void write_chrome_trace(const std::string& path, const std::vector<std::pair<std::string, std::vector<TraceRecord>>>& phases);

}  // namespace tllm
