// The built-in profiler behind `tiny_llm_bench --profile`: kernel-level timing from the backend's
// activity trace (CUPTI on CUDA — no hardware counters, so it works where ncu and nsys reports do
// not; host-timed ops on the CPU), turned into the tables of docs/performance/profiling.md:
//   - kernel summary and the same rolled up by category;
//   - kernels per decode step with and without step capture, and the gaps between kernels;
//   - the GEMM table of a decode step (M, N, K, kernel, grid, block);
//   - a diagnosis per category and for the step: launch-bound, bandwidth-bound or neither;
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

// Writes records as a Chrome-trace ("traceEvents") JSON file that chrome://tracing and Perfetto open.
void write_chrome_trace(const std::string& path, const std::vector<std::pair<std::string, std::vector<TraceRecord>>>& phases);

}  // namespace tllm
