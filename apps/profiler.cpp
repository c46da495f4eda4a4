#include "apps/profiler.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <numeric>
#include <thread>
#include <utility>
#include <nlohmann/json.hpp>

#include "model/generator.h"

namespace tllm {

std::string kernel_category(const TraceRecord& r) {
  return r.kind == TraceRecord::Kind::Kernel ? kernel_name_category(r.name) : "memcpy";
}

std::string kernel_name_category(const std::string& n) {
  if (n.find("matmul") != std::string::npos) return "matmul";
  if (n.find("attention") != std::string::npos) return "attention";
  if (n.find("rmsnorm") != std::string::npos) return "rmsnorm";
  if (n.find("rope") != std::string::npos) return "rope";
  return "elementwise";
}

Occupancy occupancy(const std::vector<TraceRecord>& records) {
  Occupancy o;
  if (records.empty()) return o;
  std::vector<std::pair<uint64_t, uint64_t>> iv;
  iv.reserve(records.size());
  for (const TraceRecord& r : records) iv.emplace_back(r.start_ns, std::max(r.end_ns, r.start_ns));
  std::sort(iv.begin(), iv.end());
  uint64_t busy = 0, cur_s = iv[0].first, cur_e = iv[0].second, last = iv[0].second;
  for (size_t i = 1; i < iv.size(); ++i) {
    if (iv[i].first > cur_e) {
      busy += cur_e - cur_s;
      cur_s = iv[i].first;
    }
    cur_e = std::max(cur_e, iv[i].second);
    last = std::max(last, iv[i].second);
  }
  busy += cur_e - cur_s;
  o.busy_us = double(busy) / 1e3;
  o.span_us = double(last - iv[0].first) / 1e3;
  return o;
}

namespace {

// The kernels among the records, in start order.
std::vector<const TraceRecord*> kernels_by_start(const std::vector<TraceRecord>& records) {
  std::vector<const TraceRecord*> k;
  for (const TraceRecord& r : records) {
    if (r.kind == TraceRecord::Kind::Kernel) k.push_back(&r);
  }
  std::stable_sort(k.begin(), k.end(), [](const TraceRecord* a, const TraceRecord* b) { return a->start_ns < b->start_ns; });
  return k;
}

std::string dims(const int* d) {
  if (d[0] == 0) return "-";  // a host-timed op has no launch shape
  return std::to_string(d[0]) + "x" + std::to_string(d[1]) + "x" + std::to_string(d[2]);
}

double sum(const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0); }

// GB/s of `bytes` moved in `us` microseconds (0 for no time).
double gb_per_s(double bytes, double us) { return us > 0 ? bytes / (us * 1e-6) / 1e9 : 0.0; }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// The chain time of each kernel of k (in start order), and the device's waits for launches.
std::vector<double> chain_times(const std::vector<const TraceRecord*>& k, std::vector<LaunchWait>* waits) {
  std::vector<double> chain;
  chain.reserve(k.size());
  uint64_t last_end = k.empty() ? 0 : k[0]->start_ns;
  for (size_t i = 0; i < k.size(); ++i) {
    const TraceRecord* r = k[i];
    const uint64_t wait = r->start_ns > last_end ? r->start_ns - last_end : 0;
    if (wait > 0 && waits) waits->push_back({i, double(wait) / 1e3});
    chain.push_back(r->end_ns > last_end ? double(r->end_ns - last_end - wait) / 1e3 : 0.0);
    last_end = std::max(last_end, r->end_ns);
  }
  return chain;
}

}  // namespace

CriticalPath critical_path(const std::vector<TraceRecord>& records) {
  const std::vector<const TraceRecord*> k = kernels_by_start(records);
  CriticalPath p;
  if (k.empty()) return p;
  const std::vector<double> times = chain_times(k, &p.waits);
  std::map<std::pair<std::string, std::string>, std::vector<double>> chain;
  uint64_t last_end = k[0]->start_ns;
  for (size_t i = 0; i < k.size(); ++i) {
    chain[{k[i]->name, dims(k[i]->grid)}].push_back(times[i]);
    last_end = std::max(last_end, k[i]->end_ns);
  }
  for (auto& [key, v] : chain) p.rows.push_back({key.first, key.second, std::move(v)});
  std::stable_sort(p.rows.begin(), p.rows.end(),
                   [](const ChainRow& a, const ChainRow& b) { return sum(a.chain_us) > sum(b.chain_us); });
  p.span_us = double(last_end - k[0]->start_ns) / 1e3;
  return p;
}

LaunchWaits launch_waits(const std::vector<TraceRecord>& records, size_t head) {
  LaunchWaits w;
  for (const LaunchWait& x : critical_path(records).waits) {
    w.total_us += x.us;
    if (x.kernel < head) w.head_us += x.us;
    w.largest_us = std::max(w.largest_us, x.us);
  }
  return w;
}

std::vector<double> step_chain_medians(const std::vector<TraceRecord>& records, size_t steps) {
  const std::vector<const TraceRecord*> k = kernels_by_start(records);
  const std::vector<double> times = chain_times(k, nullptr);
  const size_t per = steps > 0 ? k.size() / steps : 0;
  std::vector<double> out(per, 0.0);
  for (size_t j = 0; j < per; ++j) {
    std::vector<double> v;
    for (size_t i = j; i < k.size(); i += per) {
      if (k[i]->name == k[j]->name) v.push_back(times[i]);
    }
    out[j] = median(std::move(v));
  }
  return out;
}

const char* bound_name(Bound b) {
  switch (b) {
    case Bound::Launch: return "launch-bound";
    case Bound::Bandwidth: return "bandwidth-bound";
    case Bound::Latency: return "latency-bound";
    case Bound::Kernel: break;
  }
  return "neither";
}

namespace {

// Latency-bound where the kernels' average chain time is short, else the kernels are slow.
Bound latency_or_kernel(double chain_us, double kernels) {
  return kernels > 0 && chain_us / kernels < kLatencyBoundChainUs ? Bound::Latency : Bound::Kernel;
}

bool near_peak(double bytes, double us, double peak_gbs) {
  return peak_gbs > 0 && gb_per_s(bytes, us) > kBandwidthBoundFraction * peak_gbs;
}

}  // namespace

Bound step_bound(const StepFigures& f) {
  if (f.host_us > 0 && (f.host_us - f.busy_us) / f.host_us > kLaunchBoundIdle) return Bound::Launch;
  if (near_peak(f.bytes, f.busy_us, f.peak_gbs)) return Bound::Bandwidth;
  return latency_or_kernel(f.chain_us, f.kernels);
}

Bound category_bound(int calls, double chain_us, double bytes, double peak_gbs) {
  if (near_peak(bytes, chain_us, peak_gbs)) return Bound::Bandwidth;
  return latency_or_kernel(chain_us, calls);
}

void write_chrome_trace(const std::string& path,
                        const std::vector<std::pair<std::string, std::vector<TraceRecord>>>& phases) {
  nlohmann::json events = nlohmann::json::array();
  uint64_t t0 = UINT64_MAX;
  for (const auto& p : phases) {
    for (const TraceRecord& r : p.second) t0 = std::min(t0, r.start_ns);
  }
  int pid = 0;
  for (const auto& p : phases) {
    events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"args", {{"name", p.first}}}});
    for (const TraceRecord& r : p.second) {
      nlohmann::json e = {{"name", r.name},
                          {"cat", kernel_category(r)},
                          {"ph", "X"},
                          {"pid", pid},
                          {"tid", r.kind == TraceRecord::Kind::Kernel ? 0 : 1},
                          {"ts", double(r.start_ns - t0) / 1e3},
                          {"dur", double(r.end_ns - r.start_ns) / 1e3}};
      if (r.kind == TraceRecord::Kind::Kernel) {
        e["args"] = {{"grid", {r.grid[0], r.grid[1], r.grid[2]}},
                     {"block", {r.block[0], r.block[1], r.block[2]}},
                     {"graph", r.from_graph}};
      } else {
        e["args"] = {{"bytes", r.bytes}};
      }
      events.push_back(e);
    }
    ++pid;
  }
  std::ofstream out(path);
  if (!out) throw std::runtime_error(path + ": cannot open for writing");
  out << nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ns"}}.dump() << "\n";
  if (!out) throw std::runtime_error(path + ": write failed");
}

namespace {

struct Traced {
  std::vector<TraceRecord> records;
  double host_us = 0;  // wall time of the traced section
};

// `steps` greedy decode steps from token `first` at pos0, as Session::generate runs them.
void decode_runs(Model& m, int32_t first, int pos0, int steps) {
  GreedyRuns runs(m, first, pos0, steps);
  for (int i = 0; i < steps; ++i) runs.next();
  runs.close();
}

Traced trace_decode(Model& m, int32_t first, int pos0, int steps) {
  Backend& be = m.backend();
  Traced t;
  be.trace_begin();
  const auto t0 = std::chrono::steady_clock::now();
  decode_runs(m, first, pos0, steps);
  t.host_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  t.records = be.trace_end();
  return t;
}

size_t count_kernels(const std::vector<TraceRecord>& r) {
  return size_t(std::count_if(r.begin(), r.end(), [](const TraceRecord& x) { return x.kind == TraceRecord::Kind::Kernel; }));
}

void print_kernel_summary(const std::vector<TraceRecord>& recs, const char* title) {
  struct Row {
    int calls = 0;
    double total_us = 0;
  };
  std::map<std::string, Row> rows;
  double all = 0;
  for (const TraceRecord& r : recs) {
    Row& row = rows[r.name];
    ++row.calls;
    const double us = double(r.end_ns - r.start_ns) / 1e3;
    row.total_us += us;
    all += us;
  }
  std::vector<std::pair<std::string, Row>> sorted(rows.begin(), rows.end());
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second.total_us > b.second.total_us; });
  std::printf("\n%s\n", title);
  std::printf("%-44s %8s %12s %12s %8s\n", "kernel", "calls", "avg (us)", "total (ms)", "share");
  for (const auto& [name, row] : sorted) {
    std::printf("%-44s %8d %12.2f %12.3f %7.1f%%\n", name.substr(0, 44).c_str(), row.calls, row.total_us / row.calls,
                row.total_us / 1e3, all > 0 ? 100 * row.total_us / all : 0.0);
  }
}

// The critical path (critical_path) as a table: per kernel and grid, the calls, the median chain
// time and the total divided by `per` (the number of decode steps; 1 for a prefill), then the
// device's waits for launches the same way (between decode steps, the host's turn). Returns the
// span so divided.
double print_chain(const std::vector<TraceRecord>& recs, const char* title, int per, const char* per_label,
                   const char* span_label) {
  const CriticalPath p = critical_path(recs);
  std::vector<double> waits;
  for (const LaunchWait& x : p.waits) waits.push_back(x.us);
  std::printf("\n%s: chain time = a kernel's end minus the latest end before it, less its wait for its launch\n",
              title);
  std::printf("%-44s %-12s %8s %12s %14s\n", "kernel", "grid", "calls", "median (us)", per_label);
  for (const ChainRow& r : p.rows) {
    std::printf("%-44s %-12s %8zu %12.2f %14.1f\n", r.kernel.substr(0, 44).c_str(), r.grid.c_str(), r.chain_us.size(),
                median(r.chain_us), sum(r.chain_us) / per);
  }
  std::printf("%-44s %-12s %8zu %12.2f %14.1f\n", "(device waiting for a launch)", "", waits.size(), median(waits),
              sum(waits) / per);
  std::printf("%-44s %-12s %8s %12s %14.1f\n", span_label, "", "", "", p.span_us / per);
  return p.span_us / per;
}

// The last n records of a trace in start order (all of them when it holds no more).
std::vector<TraceRecord> last_records(std::vector<TraceRecord> records, size_t n) {
  std::sort(records.begin(), records.end(),
            [](const TraceRecord& a, const TraceRecord& b) { return a.start_ns < b.start_ns; });
  if (records.size() > n) records.erase(records.begin(), records.end() - std::ptrdiff_t(n));
  return records;
}

// The records of the second of two runs of the same work in one trace, in start order: both runs
// queue the same records, so the second half is the second run's.
std::vector<TraceRecord> second_run(std::vector<TraceRecord> records) {
  const size_t n = records.size() % 2 == 0 ? records.size() / 2 : records.size();
  return last_records(std::move(records), n);
}

}  // namespace

// How long the host sits without launching before the second traced prefill: a pause such as a
// user's between two requests, short enough not to slow the profile down.
constexpr int kIdleMs = 50;

bool run_profile(Model& m, const std::vector<int32_t>& prompt, const ProfileOptions& opt) {
  Backend& be = m.backend();
  if (!be.trace_begin()) return false;
  be.trace_end();
  const int steps = std::max(1, std::min(opt.decode_steps, m.n_ctx() - int(prompt.size()) - 1));
  const int n = int(prompt.size());
  const DeviceInfo dev = be.device_info();
  const bool can_capture = be.supports(Op::StepCapture);

  // Prefill, traced on its own, and the host's time from the call to the first token. The prompt
  // runs twice in one trace and only the second run is kept: a trace's first kernels wait for the
  // tracer (milliseconds on CUDA).
  be.set_step_capture(true);
  be.trace_begin();
  m.prefill(prompt.data(), n, 0);
  m.argmax();
  const auto t0 = std::chrono::steady_clock::now();
  m.prefill(prompt.data(), n, 0);
  const int32_t first = m.argmax();
  const double ttft_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  const std::vector<TraceRecord> prefill = second_run(be.trace_end());
  // The same prefill after the host has launched nothing for a while, as between a user's requests.
  be.trace_begin();
  m.prefill(prompt.data(), n, 0);
  m.argmax();
  std::this_thread::sleep_for(std::chrono::milliseconds(kIdleMs));
  const auto t1 = std::chrono::steady_clock::now();
  m.prefill(prompt.data(), n, 0);
  m.argmax();
  const double idle_ttft_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t1).count();
  const std::vector<TraceRecord> idle = second_run(be.trace_end());

  // Decode with step capture (the first runs record the graphs, so warm them up untraced).
  decode_runs(m, first, n, steps);
  const Traced graphs = trace_decode(m, first, n, steps);
  // The same prefill right after those decode steps, as in a benchmark's iterations: its records
  // are the trace's last prefill.size() in start order (none of the decode's starts after the
  // prefill's first).
  be.trace_begin();
  decode_runs(m, first, n, steps);
  const auto t2 = std::chrono::steady_clock::now();
  m.prefill(prompt.data(), n, 0);
  m.argmax();
  const double decode_ttft_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t2).count();
  const std::vector<TraceRecord> after_decode = last_records(be.trace_end(), prefill.size());
  const int graph_kernels = be.kernels_per_step();
  // Decode without step capture.
  be.set_step_capture(false);
  const Traced plain = trace_decode(m, first, n, steps);
  be.set_step_capture(true);

  std::printf("\n== Profile: %s on %s; prompt %d tokens; %d decode steps traced%s\n", be.name().c_str(), dev.name.c_str(),
              n, steps, can_capture ? " with and without CUDA graphs" : "");
  std::vector<TraceRecord> all = prefill;
  all.insert(all.end(), graphs.records.begin(), graphs.records.end());
  print_kernel_summary(all, "Kernel summary (prefill + decode, sorted by total time)");

  // Categories over the decode steps, by what their kernels add to the step: the chain times of the
  // critical path (a copy counts its duration), not the kernels' durations, which under
  // programmatic dependent launch include their wait for the kernel before.
  const double step_weight_bytes = double(m.decode_weight_bytes());
  const double step_kv_bytes = double(m.decode_kv_bytes(n + steps / 2));
  struct Cat {
    int calls = 0;
    double us = 0;
    double chain_us = 0;
    double bytes = 0;
  };
  std::map<std::string, Cat> cats;
  for (const TraceRecord& r : graphs.records) {
    Cat& c = cats[kernel_category(r)];
    ++c.calls;
    const double us = double(r.end_ns - r.start_ns) / 1e3;
    c.us += us;
    if (r.kind != TraceRecord::Kind::Kernel) {
      c.bytes += double(r.bytes);
      c.chain_us += us;
    }
  }
  const CriticalPath decode_path = critical_path(graphs.records);
  double decode_chain_us = 0;  // the kernels' chain times, all steps
  for (const ChainRow& row : decode_path.rows) {
    cats[kernel_name_category(row.kernel)].chain_us += sum(row.chain_us);
    decode_chain_us += sum(row.chain_us);
  }
  cats["matmul"].bytes += step_weight_bytes * steps;
  cats["attention"].bytes += step_kv_bytes * steps;
  double all_chain_us = 0;
  for (const auto& kv : cats) all_chain_us += kv.second.chain_us;
  const double peak = dev.peak_bandwidth_gbs;
  auto verdict = [&](const Cat& c, double gbs) -> std::string {
    const double avg = c.calls ? c.chain_us / c.calls : 0;
    char buf[160];
    if (c.chain_us <= 0) return "timed inside other ops: adds nothing of its own";
    switch (category_bound(c.calls, c.chain_us, c.bytes, peak)) {
      case Bound::Bandwidth:
        std::snprintf(buf, sizeof buf, "bandwidth-bound (%.0f%% of %.0f GB/s)", 100 * gbs / peak, peak);
        break;
      case Bound::Latency:
        std::snprintf(buf, sizeof buf, "latency-bound: %.1f us each in the chain; fewer hand-offs", avg);
        break;
      default:
        std::snprintf(buf, sizeof buf, "neither: %.0f GB/s, %.1f us each in the chain; improve the kernel", gbs, avg);
    }
    return buf;
  };
  std::printf("\nBy category (decode steps; chain = what the kernels add to the step, as in the critical path below)\n"
              "%-12s %8s %12s %12s %8s %10s  %s\n",
              "category", "calls", "kernel (ms)", "chain (ms)", "share", "GB/s", "diagnosis");
  for (const char* name : {"matmul", "attention", "rmsnorm", "rope", "elementwise", "memcpy"}) {
    auto it = cats.find(name);
    if (it == cats.end() || it->second.calls == 0) {
      std::printf("%-12s %8d %12s %12s %8s %10s  %s\n", name, 0, "-", "-", "-", "-", "(fused into other kernels or not used)");
      continue;
    }
    const Cat& c = it->second;
    const double gbs = gb_per_s(c.bytes, c.chain_us);
    std::printf("%-12s %8d %12.3f %12.3f %7.1f%% %10.0f  %s\n", name, c.calls, c.us / 1e3, c.chain_us / 1e3,
                all_chain_us > 0 ? 100 * c.chain_us / all_chain_us : 0, gbs, verdict(c, gbs).c_str());
  }

  // Launches and gaps per step.
  const Occupancy og = occupancy(graphs.records), op = occupancy(plain.records);
  auto per = [&](double v) { return v / steps; };
  std::printf("\nDecode launches and gaps (per step)\n%-36s %14s %14s\n", "", can_capture ? "CUDA graphs" : "traced",
              "no graphs");
  std::printf("%-36s %14.1f %14.1f\n", "kernels", per(double(count_kernels(graphs.records))),
              per(double(count_kernels(plain.records))));
  std::printf("%-36s %14.1f %14.1f\n", "copies / memsets", per(double(graphs.records.size() - count_kernels(graphs.records))),
              per(double(plain.records.size() - count_kernels(plain.records))));
  std::printf("%-36s %14.1f %14.1f\n", "host time per step (us)", per(graphs.host_us), per(plain.host_us));
  std::printf("%-36s %14.1f %14.1f\n", "device busy per step (us)", per(og.busy_us), per(op.busy_us));
  std::printf("%-36s %14.1f %14.1f\n", "idle between kernels (us)", per(graphs.host_us - og.busy_us),
              per(plain.host_us - op.busy_us));
  if (can_capture) std::printf("(the captured decode graph holds %d kernel launches)\n", graph_kernels);
  if (can_capture) print_chain(graphs.records, "Decode critical path (CUDA graphs)", steps, "per step (us)", "step span");
  // The same steps launched one by one, to set against the graphs' chain kernel by kernel.
  print_chain(plain.records, can_capture ? "Decode critical path (no graphs)" : "Decode critical path", steps,
              "per step (us)", "step span");

  // Time to first token: the prefill's device span against the host's time for the same call.
  char title[96];
  std::snprintf(title, sizeof title, "Prefill critical path (%d tokens)", n);
  const double prefill_span = print_chain(prefill, title, 1, "total (us)", "prefill span");
  std::printf("time to first token (traced): %.1f us on the host = %.1f us of device span + %.1f us outside it\n"
              "(the launches before the first kernel starts and the token's trip back after the last one ends;\n"
              "tracing adds to both)\n",
              ttft_us, prefill_span, ttft_us - prefill_span);
  // The first layer's kernels (and the embedding before them): where a late launch shows.
  const size_t head = 1 + count_kernels(prefill) / size_t(std::max(1, m.config().n_layer));
  const LaunchWaits warm_waits = launch_waits(prefill, head);
  const LaunchWaits idle_waits = launch_waits(idle, head);
  const LaunchWaits decode_waits = launch_waits(after_decode, head);
  const auto kernel_span = [](const std::vector<TraceRecord>& records) {
    std::vector<TraceRecord> kernels;
    std::copy_if(records.begin(), records.end(), std::back_inserter(kernels),
                 [](const TraceRecord& r) { return r.kind == TraceRecord::Kind::Kernel; });
    return occupancy(kernels).span_us;
  };
  const double idle_span = kernel_span(idle), decode_span = kernel_span(after_decode);
  std::printf("device waiting for launches inside that span: %.1f us (%.1f us before its first %zu kernels; "
              "largest %.1f us)\n",
              warm_waits.total_us, warm_waits.head_us, head, warm_waits.largest_us);
  std::printf("after %d ms without launches (as between requests): %.1f us on the host = %.1f us of device span + "
              "%.1f us outside it;\n  device waiting for launches %.1f us (%.1f us before its first %zu kernels; "
              "largest %.1f us)\n",
              kIdleMs, idle_ttft_us, idle_span, idle_ttft_us - idle_span, idle_waits.total_us, idle_waits.head_us,
              head, idle_waits.largest_us);
  std::printf("after %d decode steps (as in a benchmark's iterations): %.1f us on the host = %.1f us of device span + "
              "%.1f us outside it;\n  device waiting for launches %.1f us (%.1f us before its first %zu kernels; "
              "largest %.1f us)\n",
              steps, decode_ttft_us, decode_span, decode_ttft_us - decode_span, decode_waits.total_us,
              decode_waits.head_us, head, decode_waits.largest_us);

  // GEMM table: the matmul kernels of the first decode step, in launch order, with their chain times
  // (the median over the steps at the same place in the step).
  const std::vector<const TraceRecord*> kernels = kernels_by_start(graphs.records);
  const std::vector<double> step_chain = step_chain_medians(graphs.records, size_t(steps));
  std::vector<size_t> mms;  // indices into kernels (and step_chain)
  for (size_t j = 0; j < step_chain.size(); ++j) {
    if (kernels[j]->name.find("matmul") != std::string::npos) mms.push_back(j);
  }
  const std::vector<Model::GemmShape> gemms = m.decode_gemms();
  std::printf("\nGEMM shapes of one decode step: layer 0's kernels and the lm_head (kernel: its duration in the first step;\n"
              "chain: what it adds to the step, median over the steps; weights: MB read, and their time at the nominal\n"
              "bandwidth; a GEMM's kernel may do more: rmsnorm, rope, attention)\n"
              "%-16s %4s %8s %6s  %-34s %-10s %-9s %8s %8s %8s %8s\n",
              "GEMM", "M", "N", "K", "kernel", "grid", "block", "kernel", "chain", "weights", "at peak");
  for (size_t i = 0; i < gemms.size(); ++i) {
    // Layer 0's four projections come first; lm_head is the step's last matmul.
    size_t j = SIZE_MAX;
    if (i + 1 < gemms.size() && i < mms.size()) j = mms[i];
    if (i + 1 == gemms.size() && !mms.empty()) j = mms.back();
    const TraceRecord* r = j == SIZE_MAX ? nullptr : kernels[j];
    char at_peak[16] = "-";  // no nominal bandwidth (the CPU states none): no time at it
    if (peak > 0) std::snprintf(at_peak, sizeof at_peak, "%.2f", double(gemms[i].bytes) / (peak * 1e3));
    std::printf("%-16s %4d %8lld %6lld  %-34s %-10s %-9s %8.2f %8.2f %8.2f %8s\n", gemms[i].name.c_str(), 1,
                (long long)gemms[i].n, (long long)gemms[i].k, r ? r->name.substr(0, 34).c_str() : "-",
                r ? dims(r->grid).c_str() : "-", r ? dims(r->block).c_str() : "-",
                r ? double(r->end_ns - r->start_ns) / 1e3 : 0.0, r ? step_chain[j] : 0.0, double(gemms[i].bytes) / 1e6,
                at_peak);
  }

  // Diagnosis for the step as a whole.
  StepFigures f;
  f.host_us = per(graphs.host_us);
  f.busy_us = per(og.busy_us);
  f.chain_us = per(decode_chain_us);
  f.kernels = per(double(count_kernels(graphs.records)));
  f.bytes = step_weight_bytes + step_kv_bytes;
  f.peak_gbs = peak;
  const Bound bound = step_bound(f);
  const double idle_frac = f.host_us > 0 ? std::max(0.0, f.host_us - f.busy_us) / f.host_us : 0;
  const double busy_gbs = gb_per_s(f.bytes, f.busy_us), wall_gbs = gb_per_s(f.bytes, f.host_us);
  const double chain_each = f.kernels > 0 ? f.chain_us / f.kernels : 0;
  std::printf("\nDiagnosis of a decode step: %.1f us per step, device busy %.1f us (%.0f%%), %.1f MB read\n", f.host_us,
              f.busy_us, 100 * (1 - idle_frac), f.bytes / 1e6);
  std::printf("%-44s %-26s %-34s %s\n", "symptom", "measured", "cause", "remedy");
  char meas[64];
  std::snprintf(meas, sizeof meas, "idle %.0f%% of the step", 100 * idle_frac);
  std::printf("%-44s %-26s %-34s %s\n", "many small kernels, gaps between them", meas,
              bound == Bound::Launch ? "LAUNCH-BOUND" : "not the limit", "CUDA graphs, kernel fusion, PDL");
  std::snprintf(meas, sizeof meas, "%.0f GB/s busy, %.0f GB/s wall", busy_gbs, wall_gbs);
  std::printf("%-44s %-26s %-34s %s\n", "kernels stream near peak bandwidth", meas,
              bound == Bound::Bandwidth ? "BANDWIDTH-BOUND"
              : peak > 0                ? "below 60% of nominal bandwidth"
                                        : "nominal bandwidth not known",
              "fewer bytes: smaller weights, KV reuse");
  std::snprintf(meas, sizeof meas, "%.0f kernels, %.2f us each", f.kernels, chain_each);
  std::printf("%-44s %-26s %-34s %s\n", "each kernel waits for the one before it", meas,
              bound == Bound::Latency ? "LATENCY-BOUND CHAIN" : "not the limit",
              "fewer hand-offs: fuse dependent ops, less work after each wait");
  const TraceRecord* lm = mms.empty() ? nullptr : kernels[mms.back()];
  const double lm_share = lm && f.busy_us > 0 ? double(lm->end_ns - lm->start_ns) / 1e3 / f.busy_us : 0;
  std::snprintf(meas, sizeof meas, "lm_head %.0f%% of busy time", 100 * lm_share);
  std::printf("%-44s %-26s %-34s %s\n", "lm_head kernel takes a large share", meas,
              lm_share > 0.3 ? "LARGE-N GEMV DOMINATES" : "not the limit", "tile for bandwidth, fewer lm_head bytes");
  std::snprintf(meas, sizeof meas, "%.1f copies per step", per(double(graphs.records.size() - count_kernels(graphs.records))));
  std::printf("%-44s %-26s %-34s %s\n", "host waits on device copies", meas, "token ids read once per run of steps",
              "keep sampling on the device");
  std::printf("verdict: %s\n", bound_name(bound));
  if (peak > 0) {
    std::printf("(the kernels' chain takes %.1f us a step, %.2f us a kernel; the %.1f MB the step reads take %.1f us at the\n"
                "nominal %.0f GB/s)\n",
                f.chain_us, chain_each, f.bytes / 1e6, f.bytes / (peak * 1e3), peak);
  }

  if (!opt.trace_path.empty()) {
    write_chrome_trace(opt.trace_path, {{"prefill", prefill}, {"decode (graphs)", graphs.records}, {"decode (no graphs)", plain.records}});
    std::printf("timeline written to %s (open it in chrome://tracing or ui.perfetto.dev)\n", opt.trace_path.c_str());
  }
  return true;
}

}  // namespace tllm
