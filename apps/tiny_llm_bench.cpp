// tiny_llm_bench: time one request end to end — prefill, time to first token, decode — on a
// backend, with warm-up and repeated iterations, and report medians (docs/performance/
// benchmark-methodology.md says exactly what each figure measures).
#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "apps/common.h"
#include "apps/profiler.h"
#include "model/chat_template.h"
#include "model/generator.h"

namespace tllm {
namespace {

struct Stat {
  double median = 0, min = 0, max = 0;
};

Stat stat_of(std::vector<double> v) {
  Stat s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  s.median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  s.min = v.front();
  s.max = v.back();
  return s;
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / double(v.size());
}

size_t host_rss_bytes() {
  long pages = 0, resident = 0;
  if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return size_t(resident) * size_t(sysconf(_SC_PAGESIZE));
}

size_t host_peak_rss_bytes() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return size_t(ru.ru_maxrss) * 1024;
}

constexpr int kBandwidthPasses = 5;  // timed reads of the bandwidth measurement's buffer; the fastest counts

struct Options {
  std::string model;
  std::string backend = "auto";
  std::string prompt = "你好";
  int max_tokens = 128;
  int warmup = 1;
  int iters = 5;
  int n_ctx = 4096;
  int context = 0;       // fill the prompt up to this many tokens (decode at depth)
  bool raw = false;      // no chat template
  bool json = false;
  bool no_graphs = false;
  bool quiet = false;
  bool profile = false;
  std::string trace_out = "reports/profile-trace.json";
  int bandwidth_mb = 4096;  // buffer of the read-bandwidth measurement, MiB (0: not measured)
  int soak_tokens = 0;   // generate this many tokens across context resets, checking memory stays flat
};

// Generates `total` tokens, emptying the context whenever it fills, and reports host and device
// memory at the start and the end: a long session must not grow either.
int run_soak(Model& model, const std::vector<int32_t>& prompt, int total) {
  Backend& be = model.backend();
  Session session(model, SamplerParams{}, {});
  GenerateOptions g;
  g.stop_at_end_token = false;
  int done = 0, resets = 0;
  size_t rss0 = 0, dev0 = 0, eng0 = 0;
  const auto t0 = std::chrono::steady_clock::now();
  while (done < total) {
    session.reset();
    g.max_tokens = std::min(total - done, model.n_ctx() - int(prompt.size()));
    const GenerationResult r = session.generate(prompt, g);
    done += int(r.tokens.size());
    if (resets++ == 0) {
      rss0 = host_rss_bytes();
      dev0 = be.memory_info().device_used;
      eng0 = be.memory_info().allocated_bytes;
    }
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const MemoryInfo m = be.memory_info();
  const size_t rss1 = host_rss_bytes();
  std::printf("soak: %d tokens in %d contexts of %d rows, %.1f s (%.0f tok/s)\n", done, resets, model.n_ctx(), s, done / s);
  std::printf("soak: host RSS %.1f -> %.1f MiB, engine %.1f -> %.1f MiB, device in use %.1f -> %.1f MiB\n",
              rss0 / 1048576.0, rss1 / 1048576.0, eng0 / 1048576.0, m.allocated_bytes / 1048576.0, dev0 / 1048576.0,
              m.device_used / 1048576.0);
  // On the CPU backend the "device" is the host, whose memory in use counts every other process:
  // there the process's own RSS is the figure that must stay flat.
  const bool device_flat = be.name() == "cpu" || m.device_used <= dev0 + (16u << 20);
  const bool flat = m.allocated_bytes == eng0 && device_flat && rss1 <= rss0 + (16u << 20);
  std::printf("soak: memory %s\n", flat ? "flat" : "GREW");
  return flat ? 0 : 1;
}

int bench_main(int argc, char** argv) {
  Options o;
  CLI::App app{"tiny_llm_bench: time prefill, TTFT and decode of one request (medians over --iters runs)",
               "tiny_llm_bench"};
  app.add_option("model", o.model, "GGUF model (default: the synthetic Qwen2.5-0.5B-Instruct Q4_K_M, made once)");
  app.add_option("--backend", o.backend, "auto (cuda when a GPU is visible), cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  app.add_option("-p,--prompt", o.prompt, "prompt text (wrapped in the chat template unless --raw)");
  app.add_option("-n,--max-tokens", o.max_tokens,
                 "tokens generated per iteration (always exactly this many); with 1 there is no decode step, so "
                 "TPOT, decode tok/s and GB/s are not measured (\"-\", null in --json)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--warmup", o.warmup, "untimed iterations first")->check(CLI::Range(0, 1000));
  app.add_option("--iters", o.iters, "timed iterations")->check(CLI::Range(1, 10000));
  CLI::Option* ctx_opt = app.add_option("--ctx", o.n_ctx,
                                        "context size (KV cache rows); at most the model's trained context, where a "
                                        "larger value is capped with a note")
                             ->check(CLI::Range(1, 1 << 20));
  app.add_option("--context", o.context, "repeat the prompt up to this many tokens, to time decode at depth")
      ->check(CLI::Range(0, 1 << 20));
  app.add_flag("--raw", o.raw, "use the prompt as is, without the chat template");
  app.add_flag("--json", o.json, "print the results as JSON on stdout");
  app.add_flag("--no-graphs", o.no_graphs, "run decode steps without CUDA graphs");
  app.add_flag("-q,--quiet", o.quiet, "no progress on stderr");
  app.add_flag("--profile", o.profile,
               "after the timed runs, trace one request kernel by kernel (CUPTI on CUDA) and print the "
               "profiler's tables and diagnosis");
  app.add_option("--soak-tokens", o.soak_tokens,
                 "instead of timing, generate this many tokens across context resets and check that host and "
                 "device memory stay flat")
      ->check(CLI::Range(1, 100000000));
  app.add_option("--bandwidth-mb", o.bandwidth_mb,
                 "MiB the device's read bandwidth is measured on after the timed runs, at most half its free "
                 "memory (0: not measured)")
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--trace-out", o.trace_out, "Chrome-trace / Perfetto JSON timeline written by --profile");
  RopeScalingOverride rope;
  add_rope_options(&app, rope);
  if (int rc = parse_cli(app, argc, argv); rc >= 0) return rc;

  if (o.profile && o.json) throw AppError("--profile prints tables; run it without --json");
  if (o.profile) {
    // The trace is written after all the timed runs: a path that cannot be written fails now instead.
    const std::filesystem::path trace(o.trace_out);
    std::error_code ec;
    if (trace.has_parent_path()) std::filesystem::create_directories(trace.parent_path(), ec);
    check_output_path(o.trace_out, "--trace-out", /*regular_only=*/false);
  }
  if (o.model.empty()) o.model = default_bench_model(o.quiet);
  ModelRequest req;
  req.path = o.model;
  req.backend = o.backend;
  req.n_ctx = o.n_ctx;
  req.n_ctx_given = ctx_opt->count() > 0;
  req.graphs = !o.no_graphs;
  req.quiet = o.quiet;
  req.rope = rope;
  LoadedModel lm = load_model(req);
  Model& model = *lm.model;
  const Tokenizer& tok = *lm.tokenizer;

  std::string text = o.prompt;
  if (!o.raw) {
    const ChatFormat fmt = detect_chat_format(*lm.file, tok, "");
    text = render_chat(fmt, {{"user", o.prompt}}, /*add_generation_prompt=*/true);
  }
  std::vector<int32_t> prompt = tok.encode(text, /*parse_special=*/!o.raw);
  if (prompt.empty()) throw AppError("the prompt has no tokens");
  if (o.context > int(prompt.size())) {
    const std::vector<int32_t> unit = prompt;
    while (int(prompt.size()) < o.context) prompt.push_back(unit[prompt.size() % unit.size()]);
  }
  if (o.soak_tokens > 0) {
    if (int(prompt.size()) >= model.n_ctx()) {
      throw AppError("the prompt does not fit the context of " + std::to_string(model.n_ctx()) + " tokens; " +
                     context_advice(model));
    }
    return run_soak(model, prompt, o.soak_tokens);
  }
  if (int64_t(prompt.size()) + o.max_tokens > model.n_ctx()) {
    throw AppError("prompt (" + std::to_string(prompt.size()) + " tokens) + --max-tokens " + std::to_string(o.max_tokens) +
                   " exceed the context of " + std::to_string(model.n_ctx()) + " tokens; " + context_advice(model));
  }

  SamplerParams greedy;
  Session session(model, greedy, {});
  GenerateOptions g;
  g.max_tokens = o.max_tokens;
  g.stop_at_end_token = false;  // a benchmark always generates exactly max_tokens

  std::vector<double> ttft, tpot, prefill_tps, decode_tps, e2e;
  std::vector<int32_t> first_tokens;
  for (int it = 0; it < o.warmup + o.iters; ++it) {
    session.reset();
    const auto t0 = std::chrono::steady_clock::now();
    GenerationResult r = session.generate(prompt, g);
    const double total = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (it < o.warmup) continue;
    if (first_tokens.empty()) first_tokens = r.tokens;
    ttft.push_back(r.ttft_ms);
    prefill_tps.push_back(1000.0 * r.n_prompt / r.prefill_ms);
    e2e.push_back(total);
    if (r.token_ms.empty()) continue;  // -n 1: the first token comes from prefill, no decode step ran
    const double step = mean(r.token_ms);
    tpot.push_back(step);
    decode_tps.push_back(step > 0 ? 1000.0 / step : 0);
  }

  const DeviceInfo dev = lm.backend->device_info();
  // Memory before the bandwidth measurement, whose buffer is not the engine's.
  const MemoryInfo mem = lm.backend->memory_info();
  const size_t peak_rss = host_peak_rss_bytes();
  // The bandwidth the device reaches, for the fraction of it that decode's bytes per step take.
  double measured_gbs = 0;
  size_t read_mib = size_t(o.bandwidth_mb);
  if (mem.device_total > mem.device_used) read_mib = std::min(read_mib, (mem.device_total - mem.device_used) / 2 >> 20);
  if (read_mib > 0) {
    try {
      measured_gbs = lm.backend->measure_read_bandwidth(read_mib << 20, kBandwidthPasses);
    } catch (const BackendError& e) {
      std::fprintf(stderr, "tiny_llm_bench: read bandwidth not measured: %s\n", e.what());
    }
  }
  const Stat s_ttft = stat_of(ttft), s_tpot = stat_of(tpot), s_pf = stat_of(prefill_tps), s_dec = stat_of(decode_tps),
             s_e2e = stat_of(e2e);
  const bool decoded = !tpot.empty();
  // Bytes one decode step must read: every weight matrix once, plus the KV cache at the mean depth.
  const int mean_ctx = int(prompt.size()) + o.max_tokens / 2;
  const size_t step_bytes = model.decode_weight_bytes() + model.decode_kv_bytes(mean_ctx);
  const double step_gbs = s_tpot.median > 0 ? double(step_bytes) / (s_tpot.median * 1e-3) / 1e9 : 0;
  const double bw_frac = dev.peak_bandwidth_gbs > 0 ? step_gbs / dev.peak_bandwidth_gbs : 0;
  const double measured_frac = measured_gbs > 0 ? step_gbs / measured_gbs : 0;
  std::string tokens_text;
  for (int32_t id : first_tokens) tokens_text += std::to_string(id) + " ";

  if (o.json) {
    nlohmann::json j;
    j["commit"] = build_commit();
    // What was not known or not measured is null, never 0.
    auto if_positive = [](auto v) { return v > 0 ? nlohmann::json(v) : nlohmann::json(); };
    j["device"] = device_json(dev, lm.backend->name() != "cpu");
    j["device"]["measured_read_gbs"] = if_positive(measured_gbs);
    j["device"]["measured_read_mib"] = if_positive(measured_gbs > 0 ? read_mib : 0);
    j["backend"] = lm.backend->name();
    j["graphs"] = !o.no_graphs && lm.backend->supports(Op::StepCapture);
    j["model"] = o.model;
    j["arch"] = model.config().arch;
    const std::string& scaling = model.config().rope_scaling;
    j["rope_scaling"] = scaling.empty() ? nlohmann::json() : nlohmann::json(scaling);
    j["prompt_tokens"] = prompt.size();
    j["max_tokens"] = o.max_tokens;
    j["warmup"] = o.warmup;
    j["iters"] = o.iters;
    auto put = [&](const char* k, const Stat& s, bool measured) {
      j[k] = measured ? nlohmann::json{{"median", s.median}, {"min", s.min}, {"max", s.max}} : nlohmann::json();
    };
    put("ttft_ms", s_ttft, true);
    put("tpot_ms", s_tpot, decoded);
    put("decode_tok_s", s_dec, decoded);
    put("prefill_tok_s", s_pf, true);
    put("e2e_ms", s_e2e, true);
    j["kernels_per_decode_step"] = if_positive(lm.backend->kernels_per_step());
    j["decode_step_bytes"] = step_bytes;
    j["decode_gb_s"] = if_positive(step_gbs);
    j["decode_bandwidth_fraction"] = if_positive(bw_frac);
    j["decode_measured_bandwidth_fraction"] = if_positive(measured_frac);
    j["memory"] = {{"engine_peak_bytes", mem.peak_bytes}, {"engine_allocated_bytes", mem.allocated_bytes},
                   {"device_used_bytes", mem.device_used}, {"device_total_bytes", mem.device_total},
                   {"host_peak_rss_bytes", peak_rss}};
    j["tokens"] = first_tokens;
    std::printf("%s\n", json_text(j).c_str());
    return 0;
  }

  std::printf("tiny_llm_bench  commit %s\n", build_commit());
  std::printf("device   %s\n", device_summary(dev, lm.backend->name() != "cpu").c_str());
  std::printf("backend  %s%s\n", lm.backend->name().c_str(),
              lm.backend->supports(Op::StepCapture) ? (o.no_graphs ? " (graphs off)" : " (CUDA graphs)") : "");
  const std::string& rope_scaling = model.config().rope_scaling;
  const std::string scaling = rope_scaling.empty() ? "" : ", rope scaling " + rope_scaling;
  std::printf("model    %s (%s, %d layers%s)\n", o.model.c_str(), model.config().arch.c_str(), model.config().n_layer,
              scaling.c_str());
  std::printf("request  %zu prompt tokens, %d generated, %d warm-up + %d timed iterations\n\n", prompt.size(),
              o.max_tokens, o.warmup, o.iters);
  std::printf("%-22s %12s %12s %12s\n", "metric", "median", "min", "max");
  auto row = [](const char* name, const Stat& s, bool measured) {
    if (measured) {
      std::printf("%-22s %12.3f %12.3f %12.3f\n", name, s.median, s.min, s.max);
    } else {
      std::printf("%-22s %12s %12s %12s\n", name, "-", "-", "-");
    }
  };
  row("TTFT (ms)", s_ttft, true);
  row("TPOT (ms)", s_tpot, decoded);
  row("decode (tok/s)", s_dec, decoded);
  row("prefill (tok/s)", s_pf, true);
  row("end to end (ms)", s_e2e, true);
  std::printf("\ndecode step reads %.1f MB (weights %.1f MB + KV %.1f MB) -> ", step_bytes / 1e6,
              model.decode_weight_bytes() / 1e6, model.decode_kv_bytes(mean_ctx) / 1e6);
  if (decoded) {
    std::printf("%.0f GB/s", step_gbs);
  } else {
    std::printf("- GB/s (no decode step with -n 1)");
  }
  if (bw_frac > 0) std::printf(" = %.0f%% of nominal bandwidth", 100 * bw_frac);
  if (measured_frac > 0) {
    std::printf("%s%.0f%% of the %.0f GB/s measured (reads of %zu MiB)", bw_frac > 0 ? ", " : " = ", 100 * measured_frac,
                measured_gbs, read_mib);
  }
  if (lm.backend->kernels_per_step() > 0) {
    std::printf("\nkernels per decode step: %d (%s)", lm.backend->kernels_per_step(),
                o.no_graphs ? "launched one by one" : "replayed as one CUDA graph");
  }
  std::printf("\nmemory: engine peak %.1f MiB", mem.peak_bytes / 1048576.0);
  if (mem.device_total) std::printf(", device in use %.1f / %.1f MiB", mem.device_used / 1048576.0, mem.device_total / 1048576.0);
  std::printf(", host peak RSS %.1f MiB\n", peak_rss / 1048576.0);
  std::printf("tokens: %s\n", tokens_text.c_str());
  if (o.profile) {
    ProfileOptions po;
    po.decode_steps = o.max_tokens;
    po.trace_path = o.trace_out;
    if (!run_profile(model, prompt, po)) throw AppError("backend " + lm.backend->name() + " cannot trace its kernels");
  }
  return 0;
}

}  // namespace
}  // namespace tllm

int main(int argc, char** argv) { return tllm::run_main("tiny_llm_bench", tllm::bench_main, argc, argv); }
