// tiny_llm_kernel_bench: every backend op at the shapes one decode step (and one prefill chunk) of a
// model uses, timed in isolation. Prints a table, CSV or JSON (--json adds the commit, the device and
// the settings): name, shape, grid, block, µs, bytes moved, GB/s and the fraction of the device's
// nominal bandwidth.
//
// Method: each case runs `--warmup` times, then `--reps` times. Where the backend traces its work the
// time is the trace's: on CUDA (CUPTI) the kernels' own device time, with grid/block; on the CPU the
// backend's op records, which have no launch geometry. A backend without a trace gets host wall time
// around the repetitions with a synchronize. Weight matrices are cycled through enough copies to
// exceed the last-level cache (`--flush-mb`), so every repetition streams its weights from memory as
// a real decode step does.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>

#include "apps/common.h"

namespace tllm {
namespace {

struct Shapes {
  std::string source = "built-in Qwen2.5-0.5B";
  int n_embd = 896, n_ff = 4864, n_head = 14, n_head_kv = 2, head_dim = 64, n_vocab = 151936;
  float rms_eps = 1e-6f, theta = 1e6f;
  RopeMode mode = RopeMode::Neox;
  int q_dim() const { return n_head * head_dim; }  // the attention output; need not be n_embd
  int qkv_dim() const { return (n_head + 2 * n_head_kv) * head_dim; }
};

uint32_t g_rng = 0x9e3779b9u;
uint32_t next_u32() {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 17;
  g_rng ^= g_rng << 5;
  return g_rng;
}
float next_f(float scale) { return (float(next_u32() & 0xffffff) / float(0xffffff) * 2.0f - 1.0f) * scale; }

struct Result {
  std::string name, shape, grid, block;
  double us = 0;
  double bytes = 0;
  bool traced = false;  // us from the backend's trace, not host wall time
  double gb_s() const { return bytes / (us * 1e-6) / 1e9; }
};

class Bench {
 public:
  Bench(Backend& be, int warmup, int reps, size_t flush_bytes)
      : be_(be), warmup_(warmup), reps_(reps), flush_bytes_(flush_bytes) {}

  Buffer buffer_f32(size_t n, float scale) {
    std::vector<float> h(n);
    for (float& v : h) v = next_f(scale);
    Buffer b = be_.alloc(n * 4);
    be_.upload(b.data(), h.data(), n * 4);
    return b;
  }
  Buffer buffer_f16(size_t n, float scale) {
    std::vector<half_t> h(n);
    for (half_t& v : h) v = float_to_half(next_f(scale));
    Buffer b = be_.alloc(n * 2);
    be_.upload(b.data(), h.data(), n * 2);
    return b;
  }
  Buffer buffer_i32(const std::vector<int32_t>& v) {
    Buffer b = be_.alloc(v.size() * 4);
    be_.upload(b.data(), v.data(), v.size() * 4);
    return b;
  }

  // Enough copies of an (n, k) matrix that cycling through them streams past the cache. An F16 one
  // with int8_form also carries its int8 form (HostMatrix), as the model's lm_head from Q8_0 does.
  std::vector<std::unique_ptr<Matrix>> matrices(WeightType t, int64_t n, int64_t k, bool int8_form = false) {
    HostWeights w;
    w.type = t;
    w.n = n;
    w.k = k;
    if (t == WeightType::W8 || int8_form) {
      w.q.resize(size_t(n * k));
      w.scales.resize(size_t(n * k / kW8Group));
      for (int8_t& v : w.q) v = int8_t(int(next_u32() % 255) - 127);
      for (half_t& v : w.scales) v = float_to_half(0.0005f + 0.001f * std::fabs(next_f(1)));
      if (t == WeightType::F16) w.widen_to_f16();
    } else {
      w.f16.resize(size_t(n * k));
      for (half_t& v : w.f16) v = float_to_half(next_f(0.05f));
    }
    const HostMatrix hm = w.view();
    std::vector<std::unique_ptr<Matrix>> out;
    out.push_back(be_.upload_matrix(hm));
    const size_t one = out[0]->stream_bytes();
    const size_t copies = std::min<size_t>(64, std::max<size_t>(1, flush_bytes_ / std::max<size_t>(one, 1) + 1));
    while (out.size() < copies) out.push_back(be_.upload_matrix(hm));
    return out;
  }

  // Times fn(rep) and records the result; the name is the op, the kernels are found by the trace.
  void run(const std::string& name, const std::string& shape, double bytes, const std::function<void(int)>& fn) {
    for (int i = 0; i < warmup_; ++i) fn(i);
    be_.synchronize();
    Result r;
    r.name = name;
    r.shape = shape;
    r.bytes = bytes;
    const bool traced = be_.trace_begin();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps_; ++i) fn(i);
    be_.synchronize();
    const double wall_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    r.us = wall_us / reps_;
    if (traced) {
      const std::vector<TraceRecord> recs = be_.trace_end();
      double kernel_ns = 0;
      std::map<std::string, int> seen;
      for (const TraceRecord& t : recs) {
        if (t.kind != TraceRecord::Kind::Kernel) continue;
        kernel_ns += double(t.end_ns - t.start_ns);
        if (seen[t.name]++ == 0 && t.grid[0] > 0) {  // the CPU backend's ops have no launch geometry
          const std::string g = std::to_string(t.grid[0]) + "x" + std::to_string(t.grid[1]) + "x" + std::to_string(t.grid[2]);
          const std::string b = std::to_string(t.block[0]) + "x" + std::to_string(t.block[1]) + "x" + std::to_string(t.block[2]);
          r.grid += (r.grid.empty() ? "" : "+") + g;
          r.block += (r.block.empty() ? "" : "+") + b;
        }
      }
      r.traced = kernel_ns > 0;
      if (r.traced) r.us = kernel_ns / 1000.0 / reps_;
    }
    if (r.grid.empty()) r.grid = r.block = "-";
    results_.push_back(r);
  }

  const std::vector<Result>& results() const { return results_; }
  Backend& backend() { return be_; }

 private:
  Backend& be_;
  int warmup_, reps_;
  size_t flush_bytes_;
  std::vector<Result> results_;
};

void bench_all(Bench& b, const Shapes& s, int prefill_m, const std::vector<int>& contexts) {
  Backend& be = b.backend();
  const int E = s.n_embd, F = s.n_ff, A = s.q_dim(), Q = s.qkv_dim(), V = s.n_vocab;
  const int max_ctx = std::max(prefill_m, *std::max_element(contexts.begin(), contexts.end()));
  Buffer x = b.buffer_f32(size_t(prefill_m) * std::max(E, F) * 2, 1.0f);
  Buffer x16 = b.buffer_f16(size_t(prefill_m) * std::max({E, 2 * F, A}), 1.0f);
  Buffer y = b.buffer_f32(size_t(prefill_m) * std::max({Q, 2 * F, E}), 1.0f);
  Buffer logits = b.buffer_f32(size_t(V), 1.0f);
  Buffer normw = b.buffer_f32(size_t(std::max(E, F)), 1.0f);
  Buffer bias = b.buffer_f32(size_t(Q), 0.1f);
  Buffer kc = b.buffer_f16(size_t(s.n_head_kv) * max_ctx * s.head_dim, 1.0f);
  Buffer vc = b.buffer_f16(size_t(s.n_head_kv) * max_ctx * s.head_dim, 1.0f);
  Buffer out16 = b.buffer_f16(size_t(prefill_m) * std::max({E, F, A}), 1.0f);
  std::vector<int32_t> posv(static_cast<size_t>(prefill_m));
  for (int i = 0; i < prefill_m; ++i) posv[size_t(i)] = i;
  Buffer pos = b.buffer_i32(posv);
  // [token, position, n_kv, argmax]: the position the rope and append cases write must lie inside
  // the max_ctx rows of the cache.
  Buffer scalar = b.buffer_i32({7, std::min(100, max_ctx - 1), 1, 0});
  const double h = 2.0, f = 4.0;

  struct Gemm {
    const char* name;
    int n, k;
    bool norm, swiglu, acc;
  };
  const Gemm gemms[] = {{"qkv_proj", Q, E, true, false, false},
                        {"attn_out_proj", E, A, false, false, true},
                        {"ffn_gate_up", 2 * F, E, true, true, false},
                        {"ffn_down", E, F, false, false, true}};
  for (const Gemm& g : gemms) {
    auto ws = b.matrices(WeightType::W8, g.n, g.k);
    const std::string shape = "M=1 N=" + std::to_string(g.n) + " K=" + std::to_string(g.k);
    const double bytes = double(ws[0]->stream_bytes()) + g.k * (g.norm ? f : h) + g.n * (g.swiglu ? h / 2 : f * (g.acc ? 2 : 1));
    b.run(std::string("w8a16_matmul_m1 ") + g.name, shape, bytes, [&](int i) {
      MatmulDesc d;
      d.w = ws[size_t(i) % ws.size()].get();
      d.m = 1;
      if (g.norm) {
        d.norm_x = x.as<float>();
        d.norm_weight = normw.as<float>();
        d.norm_eps = s.rms_eps;
      } else {
        d.x = x16.as<half_t>();
      }
      if (g.swiglu) {
        d.epilogue = MatmulEpilogue::SwiGLU;
        d.out16 = out16.as<half_t>();
      } else {
        d.y = y.as<float>();
        d.accumulate = g.acc;
        d.bias = g.norm ? bias.as<float>() : nullptr;
      }
      be.matmul_m1(d);
    });
  }
  // The lm_head as fp16 values, and as the model keeps one converted from Q8_0 (its int8 form).
  for (bool int8_form : {false, true}) {
    auto ws = b.matrices(WeightType::F16, V, E, int8_form);
    b.run(int8_form ? "fp16_matmul_m1 lm_head (int8 form)" : "fp16_matmul_m1 lm_head",
          "M=1 N=" + std::to_string(V) + " K=" + std::to_string(E), double(ws[0]->stream_bytes()) + E * f + V * f,
          [&](int i) {
            MatmulDesc d;
            d.w = ws[size_t(i) % ws.size()].get();
            d.norm_x = x.as<float>();
            d.norm_weight = normw.as<float>();
            d.norm_eps = s.rms_eps;
            d.y = logits.as<float>();
            be.matmul_m1(d);
          });
  }
  for (const Gemm& g : gemms) {
    auto ws = b.matrices(WeightType::W8, g.n, g.k);
    const std::string shape = "M=" + std::to_string(prefill_m) + " N=" + std::to_string(g.n) + " K=" + std::to_string(g.k);
    const double bytes = double(ws[0]->stream_bytes()) + double(prefill_m) * (g.k * h + g.n * f);
    b.run(std::string("matmul_prefill ") + g.name, shape, bytes, [&](int i) {
      MatmulDesc d;
      d.w = ws[size_t(i) % ws.size()].get();
      d.m = prefill_m;
      d.x = x16.as<half_t>();
      d.y = y.as<float>();
      be.matmul(d);
    });
  }
  {
    QkvRopeAppendDesc r;
    r.qkv = y.as<float>();
    r.pos = scalar.as<int32_t>() + 1;
    r.k_cache = kc.as<half_t>();
    r.v_cache = vc.as<half_t>();
    r.n_head = s.n_head;
    r.n_head_kv = s.n_head_kv;
    r.head_dim = s.head_dim;
    r.n_ctx = max_ctx;
    r.theta = s.theta;
    r.mode = s.mode;
    b.run("rope_qkv_append", "heads=" + std::to_string(s.n_head) + "+" + std::to_string(s.n_head_kv) + " dim=" + std::to_string(s.head_dim),
          Q * f * 2 + 2 * s.n_head_kv * s.head_dim * h, [&](int) { be.qkv_rope_append(r); });
  }
  for (int ctx : contexts) {
    std::vector<int32_t> nkv = {ctx};
    Buffer nk = b.buffer_i32(nkv);
    AttentionDecodeDesc a;
    a.q = y.as<float>();
    a.k_cache = kc.as<half_t>();
    a.v_cache = vc.as<half_t>();
    a.out = out16.as<half_t>();
    a.n_kv = nk.as<int32_t>();
    a.n_head = s.n_head;
    a.n_head_kv = s.n_head_kv;
    a.head_dim = s.head_dim;
    a.n_ctx = max_ctx;
    a.scale = 0.125f;
    b.run("attention_decode", "n_kv=" + std::to_string(ctx), 2.0 * s.n_head_kv * ctx * s.head_dim * h,
          [&](int) { be.attention_decode(a); });
    if (ctx > 1024) continue;
    // With the output projection fused in, as a decode step of up to 1,024 cache rows runs it (past
    // 256 rows with the rows split over the blocks of a cluster).
    auto wo = b.matrices(WeightType::W8, E, A);
    a.y = y.as<float>();
    a.max_n_kv = ctx;
    b.run("w8a16_matmul_m1_attention_decode", "n_kv=" + std::to_string(ctx) + " N=" + std::to_string(E),
          2.0 * s.n_head_kv * ctx * s.head_dim * h + double(wo[0]->stream_bytes()) + 2.0 * E * f, [&](int i) {
            a.wo = wo[size_t(i) % wo.size()].get();
            be.attention_decode(a);
          });
    a.wo = nullptr;
  }
  {
    AttentionPrefillDesc a;
    a.q = y.as<float>();
    a.k_cache = kc.as<half_t>();
    a.v_cache = vc.as<half_t>();
    a.out = out16.as<half_t>();
    a.m = prefill_m;
    a.n_head = s.n_head;
    a.n_head_kv = s.n_head_kv;
    a.head_dim = s.head_dim;
    a.n_ctx = max_ctx;
    a.scale = 0.125f;
    b.run("attention_prefill", "T=" + std::to_string(prefill_m),
          double(prefill_m) * s.n_head * s.head_dim * (f + h) + 2.0 * s.n_head_kv * prefill_m * s.head_dim * h,
          [&](int) { be.attention_prefill(a); });
  }
  {
    RmsNormDesc r;
    r.x = x.as<float>();
    r.weight = normw.as<float>();
    r.out = out16.as<half_t>();
    r.n = E;
    r.eps = s.rms_eps;
    b.run("rmsnorm", "n=" + std::to_string(E), E * (f + f + h), [&](int) { be.rmsnorm(r); });
  }
  {
    RopeDesc r;
    r.x = y.as<float>();
    r.pos = scalar.as<int32_t>() + 1;
    r.n_heads = s.n_head;
    r.head_dim = s.head_dim;
    r.theta = s.theta;
    r.mode = s.mode;
    b.run("rope", "heads=" + std::to_string(s.n_head), s.n_head * s.head_dim * 2 * f, [&](int) { be.rope(r); });
  }
  {
    KvAppendDesc k;
    k.k = y.as<float>();
    k.v = y.as<float>() + s.n_head_kv * s.head_dim;
    k.k_cache = kc.as<half_t>();
    k.v_cache = vc.as<half_t>();
    k.pos = scalar.as<int32_t>() + 1;
    k.n_head_kv = s.n_head_kv;
    k.head_dim = s.head_dim;
    k.n_ctx = max_ctx;
    b.run("kv_append", "kv_dim=" + std::to_string(s.n_head_kv * s.head_dim), 2.0 * s.n_head_kv * s.head_dim * (f + h),
          [&](int) { be.kv_append(k); });
  }
  {
    AddDesc a;
    a.y = y.as<float>();
    a.x = x.as<float>();
    a.n = E;
    b.run("add", "n=" + std::to_string(E), 3.0 * E * f, [&](int) { be.add(a); });
    SiluMulDesc m;
    m.gate = x.as<float>();
    m.up = y.as<float>();
    m.out = out16.as<half_t>();
    m.n = F;
    b.run("silu_mul", "n=" + std::to_string(F), F * (2 * f + h), [&](int) { be.silu_mul(m); });
  }
  {
    auto tables = b.matrices(WeightType::F16, V, E, /*int8_form=*/true);  // the tied lm_head's table
    EmbeddingDesc e;
    e.ids = scalar.as<int32_t>();
    e.out = x.as<float>();
    const double row_bytes = double(tables[0]->stream_bytes()) / double(V);
    b.run("embedding", "row of " + std::to_string(V) + "x" + std::to_string(E), row_bytes + E * f, [&](int i) {
      e.table = tables[size_t(i) % tables.size()].get();
      be.embedding(e);
    });
    ArgmaxDesc a;
    a.x = logits.as<float>();
    a.out = scalar.as<int32_t>() + 3;
    a.n = V;
    b.run("argmax", "n=" + std::to_string(V), V * f, [&](int) { be.argmax(a); });
  }
}

std::string one_number(const char* fmt, double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

int kernel_bench_main(int argc, char** argv) {
  std::string model, backend = "auto";
  int warmup = 10, reps = 100, prefill_m = 512, flush_mb = 256;
  bool csv = false, json = false;
  std::vector<int> contexts = {128, 1024, 4096};
  CLI::App app{"tiny_llm_kernel_bench: every op at a model's decode shapes: µs, bytes moved, GB/s, fraction of peak",
               "tiny_llm_kernel_bench"};
  app.add_option("model", model, "GGUF model whose shapes to use (default: built-in Qwen2.5-0.5B shapes)");
  app.add_option("--backend", backend, "auto, cpu or cuda")->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  app.add_option("--warmup", warmup, "untimed runs per case")->check(CLI::Range(0, 100000));
  app.add_option("--reps", reps, "timed runs per case")->check(CLI::Range(1, 100000));
  app.add_option("--prefill", prefill_m, "rows for the prefill cases")->check(CLI::Range(2, 8192));
  app.add_option("--contexts", contexts, "KV lengths for attention_decode")->check(CLI::Range(1, 1 << 20));
  app.add_option("--flush-mb", flush_mb, "cycle weights through at least this many MB (defeats the L2)")
      ->check(CLI::Range(0, 1 << 16));
  CLI::Option* csv_flag = app.add_flag("--csv", csv, "CSV output (results only)");
  app.add_flag("--json", json, "JSON output on stdout: commit, device, settings and results")->excludes(csv_flag);
  if (int rc = parse_cli(app, argc, argv); rc >= 0) return rc;

  Shapes s;
  if (!model.empty()) {
    auto f = GgufFile::open(model);
    const ModelConfig c = read_model_config(*f);
    s.source = model;
    s.n_embd = c.n_embd;
    s.n_ff = c.n_ff;
    s.n_head = c.n_head;
    s.n_head_kv = c.n_head_kv;
    s.head_dim = c.head_dim;
    s.n_vocab = c.n_vocab;
    s.rms_eps = c.rms_eps;
    s.theta = c.rope_theta;
    s.mode = c.rope_mode;
  }
  auto be = create_backend(backend == "auto" ? default_backend_name() : backend);
  be->set_step_capture(false);
  const DeviceInfo dev = be->device_info();
  Bench b(*be, warmup, reps, size_t(flush_mb) << 20);
  bench_all(b, s, prefill_m, contexts);

  const double peak = dev.peak_bandwidth_gbs;
  const bool gpu = be->name() != "cpu";
  const bool traced = !b.results().empty() && b.results().front().traced;
  const char* timing = !traced ? "host wall time" : gpu ? "device kernel time (CUPTI)" : "op time (the CPU backend's trace)";
  if (json) {
    nlohmann::json j;
    j["commit"] = build_commit();
    j["device"] = device_json(dev, gpu);
    j["backend"] = be->name();
    j["shapes"] = s.source;
    j["warmup"] = warmup;
    j["reps"] = reps;
    j["flush_mb"] = flush_mb;
    j["timing"] = timing;
    j["results"] = nlohmann::json::array();
    for (const Result& r : b.results()) {
      const double gbs = r.gb_s();
      j["results"].push_back({{"name", r.name}, {"shape", r.shape}, {"grid", r.grid}, {"block", r.block}, {"us", r.us},
                              {"bytes", r.bytes}, {"gb_s", gbs}, {"fraction_of_peak", peak > 0 ? nlohmann::json(gbs / peak) : nlohmann::json()}});
    }
    std::printf("%s\n", json_text(j).c_str());
    return 0;
  }
  if (csv) {
    std::printf("name,shape,grid,block,us,bytes,gb_s,fraction_of_peak\n");
    for (const Result& r : b.results()) {
      const double gbs = r.gb_s();
      // No nominal bandwidth (the CPU states none): the fraction's field stays empty.
      const std::string fraction = peak > 0 ? one_number("%.3f", gbs / peak) : "";
      std::printf("%s,%s,%s,%s,%.3f,%.0f,%.1f,%s\n", r.name.c_str(), r.shape.c_str(), r.grid.c_str(), r.block.c_str(),
                  r.us, r.bytes, gbs, fraction.c_str());
    }
    return 0;
  }
  std::printf("tiny_llm_kernel_bench  commit %s\n", build_commit());
  std::printf("device  %s\n", device_summary(dev, gpu).c_str());
  std::printf("shapes  %s; %d warm-up + %d timed runs per case; weights cycled over >= %d MB; time: %s\n\n",
              s.source.c_str(), warmup, reps, flush_mb, timing);
  std::printf("%-35s %-26s %-16s %-12s %10s %12s %9s %7s\n", "op", "shape", "grid", "block", "us", "bytes", "GB/s", "peak");
  for (const Result& r : b.results()) {
    const double gbs = r.gb_s();
    const std::string percent = peak > 0 ? one_number("%.1f%%", 100 * gbs / peak) : "-";
    std::printf("%-35s %-26s %-16s %-12s %10.2f %12.0f %9.1f %7s\n", r.name.c_str(), r.shape.c_str(), r.grid.c_str(),
                r.block.c_str(), r.us, r.bytes, gbs, percent.c_str());
  }
  return 0;
}

}  // namespace
}  // namespace tllm

int main(int argc, char** argv) { return tllm::run_main("tiny_llm_kernel_bench", tllm::kernel_bench_main, argc, argv); }
