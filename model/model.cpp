// Qwen2 / Llama: configuration, weight loading and the forward pass (see model.h for the layer).
#include "model/model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <set>

#include "model/quants.h"

namespace tllm {
namespace {

[[noreturn]] void fail(const GgufFile& f, const std::string& what) {
  throw ModelError(f.path() + ": " + what);
}

int positive_int(const GgufFile& f, const std::string& key, int64_t limit) {
  if (!f.find(key)) fail(f, "missing metadata key '" + key + "'");
  const int64_t v = f.get_int(key);
  if (v <= 0 || v > limit) {
    fail(f, "metadata '" + key + "' = " + std::to_string(v) + " is out of range (expected 1.." +
                std::to_string(limit) + ")");
  }
  return int(v);
}

std::string dims_string(const std::vector<int64_t>& d) {
  std::string s = "{";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "}";
}

const TensorInfo& need_tensor(const GgufFile& f, const std::string& name, std::vector<int64_t> dims) {
  const TensorInfo* t = f.find_tensor(name);
  if (!t) fail(f, "missing tensor '" + name + "'");
  if (t->dims != dims) {
    fail(f, "tensor '" + name + "' has shape " + dims_string(t->dims) + ", expected " + dims_string(dims));
  }
  if (!can_dequantize(t->type)) {
    fail(f, "tensor '" + name + "' has unsupported type " + std::string(ggml_type_name(t->type)));
  }
  return *t;
}

// `s` with control characters written as \xNN: text from the file stays on one line in messages.
std::string printable(const std::string& s) {
  std::string out;
  for (char ch : s) {
    const unsigned char u = static_cast<unsigned char>(ch);
    if (u < 0x20 || u == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", u);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out;
}

// The tokenizer arrays must describe the embedding's rows: tokens (strings) and token_type
// (integers) of length n_vocab, merges of the form "left right" (one space, both sides non-empty),
// and special token ids inside the vocabulary (-1: none). A file without tokenizer.ggml.tokens has
// no tokenizer to check (the model can still run on token ids).
void check_vocabulary(const GgufFile& f, int n_vocab) {
  if (!f.find("tokenizer.ggml.tokens")) return;
  const size_t n_tokens = f.get_string_array("tokenizer.ggml.tokens").size();
  if (n_tokens != size_t(n_vocab)) {
    fail(f, "tokenizer.ggml.tokens has " + std::to_string(n_tokens) + " entries but token_embd.weight has " +
                std::to_string(n_vocab) + " rows");
  }
  if (f.find("tokenizer.ggml.token_type")) {
    const size_t n_types = f.get_int_array("tokenizer.ggml.token_type").size();
    if (n_types != n_tokens) {
      fail(f, "tokenizer.ggml.token_type has " + std::to_string(n_types) + " entries for " +
                  std::to_string(n_tokens) + " tokens");
    }
  }
  if (f.find("tokenizer.ggml.merges")) {
    const std::vector<std::string>& merges = f.get_string_array("tokenizer.ggml.merges");
    for (size_t i = 0; i < merges.size(); ++i) {
      const std::string& m = merges[i];
      const size_t sp = m.find(' ');
      if (sp == std::string::npos || sp == 0 || sp + 1 == m.size() || m.find(' ', sp + 1) != std::string::npos) {
        fail(f, "tokenizer.ggml.merges entry " + std::to_string(i) + " ('" + printable(m.substr(0, 64)) +
                    "') is not two tokens separated by one space");
      }
    }
  }
  for (const char* key : {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                          "tokenizer.ggml.eom_token_id", "tokenizer.ggml.padding_token_id"}) {
    if (!f.find(key)) continue;
    const int64_t id = f.get_int(key);
    if (id < -1 || id >= n_vocab) {
      fail(f, std::string(key) + " = " + std::to_string(id) + " is outside the vocabulary (0.." +
                  std::to_string(n_vocab - 1) + ")");
    }
  }
}


// Rope scaling as llama.cpp reads it. rope.scaling.factor (or the older rope.scale_linear) is
// applied by rope.scaling.type:
// - linear (the default when a factor is given): every frequency is divided by the factor;
// - yarn (YaRN's "NTK-by-parts"): pair j keeps its frequency where it turns more than kYarnBetaFast
//   times over rope.scaling.original_context_length (default: context_length), is divided by the
//   factor where it turns less than kYarnBetaSlow times, and is divided by a linear blend of the
//   two between (llama.cpp's correction dims, floor and ceil of where those counts fall); the
//   rotated q and k are multiplied by 1 + 0.1 ln(factor).
// The optional rope_freqs.weight tensor (Llama 3.1/3.2) divides pair j's frequency by its j-th
// value under every type, and rope.scaling.attn_factor multiplies the rotated q and k. Types that
// need more than per-pair divisors and that magnitude (longrope) are refused, not approximated.
void read_rope_scaling(const GgufFile& f, const std::string& a, const RopeScalingOverride& over, ModelConfig& c) {
  const int half = c.head_dim / 2;
  // `what` = v is out of range: a metadata key's value, or a value asked for in `over`.
  const auto out_of_range = [&](const std::string& what, double v, const char* range) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    fail(f, what + " = " + buf + " is out of range (expected " + range + ")");
  };
  const auto key_name = [](const std::string& key) { return "metadata '" + key + "'"; };
  double factor = 1.0;
  const std::string factor_key = f.find(a + "rope.scaling.factor") ? a + "rope.scaling.factor" : a + "rope.scale_linear";
  if (f.find(factor_key)) {
    factor = f.get_float(factor_key);
    if (!std::isfinite(factor) || factor < 0.0 || factor > 1e6) out_of_range(key_name(factor_key), factor, "0..1e6");
    if (factor == 0.0) factor = 1.0;  // llama.cpp: 0 means no scaling
  }
  if (over.factor != 0.0) {
    if (!std::isfinite(over.factor) || over.factor < 0.0 || over.factor > 1e6) {
      out_of_range("the rope scale asked for", over.factor, "0..1e6");
    }
    factor = over.factor;
  }
  const std::string type =
      !over.type.empty() ? over.type : f.get_string(a + "rope.scaling.type", factor != 1.0 ? "linear" : "none");
  if (type == "none") {
    factor = 1.0;
  } else if (type != "linear" && type != "yarn") {
    fail(f, "rope scaling type '" + printable(type) + "' is not supported (supported: none, linear, yarn, rope_freqs)");
  }
  const std::string attn_key = a + "rope.scaling.attn_factor";
  const double attn_factor = f.get_float(attn_key, 1.0);
  if (!std::isfinite(attn_factor) || attn_factor <= 0.0 || attn_factor > 1e3) {
    out_of_range(key_name(attn_key), attn_factor, "0 < value <= 1e3");
  }
  std::vector<float> per_pair(size_t(half), 1.0f);
  const TensorInfo* freqs = f.find_tensor("rope_freqs.weight");
  if (freqs) {
    if (freqs->dims != std::vector<int64_t>{half}) {
      fail(f, "tensor 'rope_freqs.weight' has shape " + dims_string(freqs->dims) + ", expected {" +
                  std::to_string(half) + "}");
    }
    if (!can_dequantize(freqs->type)) {
      fail(f, "tensor 'rope_freqs.weight' has unsupported type " + std::string(ggml_type_name(freqs->type)));
    }
    per_pair = dequantize_tensor(*freqs);
    for (float v : per_pair) {
      if (!(v > 0.0f) || !std::isfinite(v)) fail(f, "tensor 'rope_freqs.weight' holds a value that is not finite and > 0");
    }
  }
  // Each pair's frequency divisor from the type alone.
  std::vector<double> divisor(size_t(half), factor);
  double magnitude = attn_factor;
  if (type == "yarn") {
    const std::string orig_key = a + "rope.scaling.original_context_length";
    int orig = f.find(orig_key) ? positive_int(f, orig_key, 1 << 24) : c.n_ctx_train;
    if (over.original_context != 0) {
      if (over.original_context < 0 || over.original_context > (1 << 24)) {
        out_of_range("the original context asked for", over.original_context, "1..16777216");
      }
      orig = over.original_context;
    }
    const YarnRamp ramp = yarn_ramp(c.head_dim, orig, c.rope_theta);
    for (int j = 0; j < half; ++j) {
      const double mix = ramp.extrapolated_share(j);
      divisor[size_t(j)] = 1.0 / ((1.0 - mix) / factor + mix);
    }
    if (factor > 1.0) magnitude *= 1.0 + 0.1 * std::log(factor);
    // The context the scaling is for: the original one times the factor, where that is longer than
    // context_length (converters write the original there, as Qwen2.5's config has it).
    c.n_ctx_train = int(std::min(std::max(double(c.n_ctx_train), double(orig) * factor), double(1 << 24)));
  }
  c.rope_attn_scale = float(magnitude);
  const bool scaled = factor != 1.0;
  if (!scaled && !freqs) return;
  c.rope_freq_factors.resize(size_t(half));
  for (int j = 0; j < half; ++j) {
    c.rope_freq_factors[size_t(j)] = float(double(per_pair[size_t(j)]) * divisor[size_t(j)]);
  }
  c.rope_scaling = scaled ? (freqs ? type + " + rope_freqs" : type) : "rope_freqs";
}

}  // namespace

YarnRamp yarn_ramp(int head_dim, int original_context, float rope_theta) {
  // In float, as llama.cpp's ggml_rope_yarn_corr_dims, so that floor and ceil fall the same way.
  const float pi = 3.14159265358979323846f;
  const auto dim_of = [&](float turns) {
    return float(head_dim) * std::log(float(original_context) / (turns * 2.0f * pi)) / (2.0f * std::log(rope_theta));
  };
  YarnRamp r;
  r.low = std::max(0.0f, std::floor(dim_of(kYarnBetaFast)));
  r.high = std::min(float(head_dim - 1), std::ceil(dim_of(kYarnBetaSlow)));
  return r;
}

double YarnRamp::extrapolated_share(int j) const {
  const float y = (float(j) - low) / std::max(0.001f, high - low);
  return 1.0 - double(std::min(1.0f, std::max(0.0f, y)));
}

std::string fit_error(const ModelFootprint& need, const MemoryInfo& mem, const std::string& device, int n_ctx) {
  if (mem.device_total == 0) return "";
  const size_t free_bytes = mem.device_total > mem.device_used ? mem.device_total - mem.device_used : 0;
  if (need.total() <= free_bytes) return "";
  auto mib = [](size_t b) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f MiB", double(b) / (1024.0 * 1024.0));
    return std::string(buf);
  };
  return "the model needs " + mib(need.total()) + " on " + device + " (weights " + mib(need.weight_bytes) +
         ", KV cache " + mib(need.kv_cache_bytes) + " for " + std::to_string(n_ctx) + " tokens, activations " +
         mib(need.activation_bytes) + ") but only " + mib(free_bytes) + " is free; try a smaller --ctx";
}

ModelConfig read_model_config(const GgufFile& f, const RopeScalingOverride& rope) {
  ModelConfig c;
  if (!f.find("general.architecture")) fail(f, "missing metadata key 'general.architecture'");
  c.arch = f.get_string("general.architecture");
  if (c.arch != "qwen2" && c.arch != "llama") {
    fail(f, "unsupported architecture '" + printable(c.arch) + "' (supported: qwen2, llama)");
  }
  c.name = f.get_string("general.name", "");
  const std::string a = c.arch + ".";
  constexpr int64_t kMaxWidth = 1 << 16;
  c.n_layer = positive_int(f, a + "block_count", 1024);
  c.n_embd = positive_int(f, a + "embedding_length", kMaxWidth);
  c.n_ff = positive_int(f, a + "feed_forward_length", 1 << 18);
  c.n_head = positive_int(f, a + "attention.head_count", 1024);
  c.n_head_kv = c.n_head;
  if (f.find(a + "attention.head_count_kv")) c.n_head_kv = positive_int(f, a + "attention.head_count_kv", 1024);
  if (c.n_head % c.n_head_kv != 0) {
    fail(f, "attention.head_count_kv = " + std::to_string(c.n_head_kv) + " does not divide head_count = " +
                std::to_string(c.n_head));
  }
  // The heads' width: attention.key_length where the file gives it (Mistral-Nemo: 128, where
  // n_embd / n_head is 160), else n_embd / n_head. Values take attention.value_length, with the
  // same default, as llama.cpp reads them; keys, values and the rotary part must all be head_dim
  // wide.
  const std::string key_length = a + "attention.key_length";
  const std::string value_length = a + "attention.value_length";
  const bool has_key_length = f.find(key_length) != nullptr;
  const bool has_value_length = f.find(value_length) != nullptr;
  if ((!has_key_length || !has_value_length) && c.n_embd % c.n_head != 0) {
    fail(f, "embedding_length = " + std::to_string(c.n_embd) + " is not a multiple of head_count = " +
                std::to_string(c.n_head));
  }
  const int default_width = c.n_embd / c.n_head;
  c.head_dim = has_key_length ? positive_int(f, key_length, kMaxWidth) : default_width;
  if (c.head_dim % 2 != 0 || c.head_dim > 256) {
    fail(f, "head dimension " + std::to_string(c.head_dim) + " is not supported (even, at most 256)");
  }
  const int value_dim = has_value_length ? positive_int(f, value_length, kMaxWidth) : default_width;
  if (value_dim != c.head_dim) {
    const auto source = [&](bool given, const std::string& key) {
      return given ? "metadata '" + key + "'"
                   : "embedding_length / head_count, without '" + key + "'";
    };
    fail(f, "value heads are " + std::to_string(value_dim) + " wide (" +
                source(has_value_length, value_length) + ") but key heads " +
                std::to_string(c.head_dim) + " (" + source(has_key_length, key_length) +
                "); heads whose values and keys differ in width are not supported");
  }
  if (f.find(a + "rope.dimension_count") && f.get_int(a + "rope.dimension_count") != c.head_dim) {
    fail(f, "partial rotary embeddings (rope.dimension_count = " +
                std::to_string(f.get_int(a + "rope.dimension_count")) + ", head dimension " +
                std::to_string(c.head_dim) + ") are not supported");
  }
  c.n_ctx_train = positive_int(f, a + "context_length", 1 << 24);
  c.rope_theta = float(f.get_float(a + "rope.freq_base", 10000.0));
  c.rms_eps = float(f.get_float(a + "attention.layer_norm_rms_epsilon", 1e-5));
  if (!(c.rope_theta > 1.0f) || !std::isfinite(c.rope_theta)) fail(f, "rope.freq_base must be > 1");
  if (!(c.rms_eps > 0.0f) || c.rms_eps > 1.0f) fail(f, "attention.layer_norm_rms_epsilon must be in (0, 1]");
  // llama.cpp's converter permutes Llama's Q/K rows for adjacent-pair rotation; Qwen2 keeps halves.
  c.rope_mode = c.arch == "qwen2" ? RopeMode::Neox : RopeMode::Normal;
  read_rope_scaling(f, a, rope, c);

  const TensorInfo* embd = f.find_tensor("token_embd.weight");
  if (!embd) fail(f, "missing tensor 'token_embd.weight'");
  if (embd->dims.size() != 2 || embd->dims[0] != c.n_embd) {
    fail(f, "tensor 'token_embd.weight' has shape " + dims_string(embd->dims) + ", expected {" +
                std::to_string(c.n_embd) + ", n_vocab}");
  }
  if (embd->dims[1] > (int64_t(1) << 24)) fail(f, "vocabulary of " + std::to_string(embd->dims[1]) + " rows is too large");
  c.n_vocab = int(embd->dims[1]);
  check_vocabulary(f, c.n_vocab);
  c.tied_embeddings = f.find_tensor("output.weight") == nullptr;
  const GgmlType head = c.tied_embeddings ? embd->type : f.find_tensor("output.weight")->type;
  c.lm_head_int8_form = lm_head_has_int8_form(head);
  c.qkv_bias = f.find_tensor("blk.0.attn_q.bias") != nullptr;
  return c;
}

struct Model::Layer {
  std::unique_ptr<Matrix> wqkv;   // ((n_head + 2·n_head_kv)·head_dim, n_embd) W8: Q, K, V rows
  std::unique_ptr<Matrix> wo;     // (n_embd, n_head·head_dim) W8
  std::unique_ptr<Matrix> wgu;    // (2·n_ff, n_embd) W8: gate rows, then up rows
  std::unique_ptr<Matrix> wdown;  // (n_embd, n_ff) W8
  Buffer attn_norm;               // (n_embd) f32
  Buffer ffn_norm;                // (n_embd) f32
  Buffer bqkv;                    // ((n_head + 2·n_head_kv)·head_dim) f32, empty without QKV bias
  Buffer k_cache;                 // (n_head_kv, n_ctx, head_dim) f16
  Buffer v_cache;                 // (n_head_kv, n_ctx, head_dim) f16
};

Model::Model(Backend& be, ModelConfig cfg) : be_(be), cfg_(std::move(cfg)) {}
Model::~Model() = default;

ModelFootprint Model::footprint(const ModelConfig& c, const LoadOptions& opt, const Backend& be) {
  ModelFootprint fp;
  const int64_t E = c.n_embd, F = c.n_ff, V = c.n_vocab, QKV = c.qkv_dim(), Q = c.q_dim();
  const auto w8 = [&](int64_t n, int64_t k) { return be.matrix_bytes(WeightType::W8, n, k, false); };
  // The matrices, norms and biases that load() uploads, in its order.
  const size_t per_layer = w8(QKV, E) + w8(E, Q) + w8(2 * F, E) + w8(E, F) +
                           size_t(2 * E + (c.qkv_bias ? QKV : 0)) * sizeof(float);
  fp.weight_bytes = per_layer * size_t(c.n_layer) +
                    be.matrix_bytes(WeightType::F16, V, E, c.lm_head_int8_form) +
                    (c.tied_embeddings ? 0 : w8(V, E)) + size_t(E) * sizeof(float) +
                    c.rope_freq_factors.size() * sizeof(float);
  const int n_ctx = std::min(opt.n_ctx, c.n_ctx_train);
  fp.kv_cache_bytes = size_t(c.n_layer) * 2 * size_t(c.n_head_kv) * size_t(n_ctx) * size_t(c.head_dim) * sizeof(half_t);
  const size_t B = size_t(std::min(opt.max_batch, n_ctx));
  fp.activation_bytes = B * size_t(E) * sizeof(float) + B * size_t(QKV) * sizeof(float) +
                        B * size_t(Q) * sizeof(half_t) + B * size_t(F) * sizeof(half_t) +
                        2 * B * sizeof(int32_t) + size_t(V) * sizeof(float) +
                        (2 + kDecodeRunMax) * sizeof(int32_t);
  return fp;
}

std::unique_ptr<Model> Model::load(const GgufFile& f, Backend& be, const LoadOptions& opt) {
  ModelConfig c = read_model_config(f, opt.rope);
  if (opt.n_ctx <= 0) throw ModelError(f.path() + ": context size must be positive");
  if (opt.max_batch <= 0) throw ModelError(f.path() + ": batch size must be positive");
  if (c.head_dim > be.max_head_dim()) {
    throw BackendError(f.path() + ": the model's attention heads are " + std::to_string(c.head_dim) +
                       " wide; the " + be.name() + " backend takes heads at most " +
                       std::to_string(be.max_head_dim()) + " wide");
  }
  std::unique_ptr<Model> m(new Model(be, c));
  m->n_ctx_ = std::min(opt.n_ctx, c.n_ctx_train);
  m->max_batch_ = std::min(opt.max_batch, m->n_ctx_);
  LoadOptions eff = opt;
  eff.n_ctx = m->n_ctx_;
  eff.max_batch = m->max_batch_;
  m->footprint_ = footprint(c, eff, be);

  const int64_t E = c.n_embd, F = c.n_ff, Q = c.q_dim(), KV = c.kv_dim();
  // Check every tensor before converting any, so a bad file fails fast and allocates nothing.
  // The tensors the forward pass reads: each checked by `need`; rope_freqs.weight, when present, was
  // checked by read_model_config.
  std::set<std::string> used = {"rope_freqs.weight"};
  auto need = [&](const std::string& name, std::vector<int64_t> dims) {
    need_tensor(f, name, std::move(dims));
    used.insert(name);
  };
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    need(p + "attn_norm.weight", {E});
    need(p + "attn_q.weight", {E, Q});
    need(p + "attn_k.weight", {E, KV});
    need(p + "attn_v.weight", {E, KV});
    need(p + "attn_output.weight", {Q, E});
    need(p + "ffn_norm.weight", {E});
    need(p + "ffn_gate.weight", {E, F});
    need(p + "ffn_up.weight", {E, F});
    need(p + "ffn_down.weight", {F, E});
    if (c.qkv_bias) {
      need(p + "attn_q.bias", {Q});
      need(p + "attn_k.bias", {KV});
      need(p + "attn_v.bias", {KV});
    }
  }
  need("output_norm.weight", {E});
  need("token_embd.weight", {E, c.n_vocab});
  if (!c.tied_embeddings) need("output.weight", {E, c.n_vocab});
  // A tensor the forward pass would ignore (a bias on the output projection, say) means the file
  // describes a different computation than the one that would run.
  for (const TensorInfo& t : f.tensors()) {
    if (!used.count(t.name)) {
      fail(f, "tensor '" + printable(t.name) + "' is not used by the " + c.arch +
                  " forward pass; the file cannot be run correctly");
    }
  }
  // The rows of every matrix the layers requantise to W8: n_embd, n_ff and (the output
  // projection's) n_head·head_dim.
  if (E % kW8Group != 0 || F % kW8Group != 0 || Q % kW8Group != 0) {
    throw ModelError(f.path() + ": widths " + std::to_string(E) + "/" + std::to_string(F) + "/" +
                     std::to_string(Q) + " (n_embd/n_ff/n_head·head_dim) are not multiples of " +
                     "the W8 group size " + std::to_string(kW8Group));
  }

  const size_t total = size_t(c.n_layer) + 1;
  auto upload_f32 = [&](const std::string& name) {
    std::vector<float> v = dequantize_tensor(*f.find_tensor(name));
    Buffer b = be.alloc(v.size() * sizeof(float));
    be.upload(b.data(), v.data(), v.size() * sizeof(float));
    return b;
  };
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    auto L = std::make_unique<Layer>();
    auto w8 = [&](const std::string& n) { return requantize_w8(*f.find_tensor(p + n)); };
    HostWeights qkv = w8("attn_q.weight");
    qkv.append_rows(w8("attn_k.weight"));
    qkv.append_rows(w8("attn_v.weight"));
    L->wqkv = be.upload_matrix(qkv.view());
    L->wo = be.upload_matrix(w8("attn_output.weight").view());
    HostWeights gate_up = w8("ffn_gate.weight");
    gate_up.append_rows(w8("ffn_up.weight"));
    L->wgu = be.upload_matrix(gate_up.view());
    L->wdown = be.upload_matrix(w8("ffn_down.weight").view());
    L->attn_norm = upload_f32(p + "attn_norm.weight");
    L->ffn_norm = upload_f32(p + "ffn_norm.weight");
    if (c.qkv_bias) {
      std::vector<float> b;
      for (const char* n : {"attn_q.bias", "attn_k.bias", "attn_v.bias"}) {
        std::vector<float> part = dequantize_tensor(*f.find_tensor(p + n));
        b.insert(b.end(), part.begin(), part.end());
      }
      L->bqkv = be.alloc(b.size() * sizeof(float));
      be.upload(L->bqkv.data(), b.data(), b.size() * sizeof(float));
    }
    const size_t cache = size_t(c.n_head_kv) * size_t(m->n_ctx_) * size_t(c.head_dim) * sizeof(half_t);
    L->k_cache = be.alloc(cache);
    L->v_cache = be.alloc(cache);
    m->layers_.push_back(std::move(L));
    if (opt.progress) opt.progress(size_t(l) + 1, total);
  }
  const TensorInfo& embd = *f.find_tensor("token_embd.weight");
  if (c.tied_embeddings) {
    m->lm_head_ = be.upload_matrix(convert_lm_head(embd).view());
  } else {
    m->lm_head_ = be.upload_matrix(convert_lm_head(*f.find_tensor("output.weight")).view());
    m->embd_ = be.upload_matrix(requantize_w8(embd).view());
  }
  m->output_norm_ = upload_f32("output_norm.weight");
  if (!c.rope_freq_factors.empty()) {
    const size_t bytes = c.rope_freq_factors.size() * sizeof(float);
    m->rope_factors_ = be.alloc(bytes);
    be.upload(m->rope_factors_.data(), c.rope_freq_factors.data(), bytes);
  }
  if (opt.progress) opt.progress(total, total);

  const size_t B = size_t(m->max_batch_);
  m->x_ = be.alloc(B * size_t(E) * sizeof(float));
  m->qkv_ = be.alloc(B * size_t(c.qkv_dim()) * sizeof(float));
  m->attn_ = be.alloc(B * size_t(Q) * sizeof(half_t));
  m->ffn_ = be.alloc(B * size_t(F) * sizeof(half_t));
  m->prompt_ = be.alloc(2 * B * sizeof(int32_t));
  m->logits_ = be.alloc(size_t(c.n_vocab) * sizeof(float));
  m->step_ = be.alloc((2 + kDecodeRunMax) * sizeof(int32_t));
  be.synchronize();
  return m;
}

void Model::run_layers(int m, const int32_t* pos, const int32_t* n_kv, int32_t pos0, bool decode,
                       bool last_row_out, bool recorded, int max_n_kv) {
  const ModelConfig& c = cfg_;
  float* x = x_.as<float>();
  float* qkv = qkv_.as<float>();
  half_t* attn = attn_.as<half_t>();
  half_t* ffn = ffn_.as<half_t>();
  // rope_attn_scale multiplies the rotated q and k alike, so their product takes its square.
  const float scale = c.rope_attn_scale * c.rope_attn_scale / std::sqrt(float(c.head_dim));

  for (int l = 0; l < c.n_layer; ++l) {
    Layer& L = *layers_[size_t(l)];
    ScopedRange range(be_, "layer");
    // Rows past the QKV projection: all m, or the last one in the last layer (its x row is `tail`).
    const bool one_row = last_row_out && l == c.n_layer - 1 && m > 1;
    const int m_out = one_row ? 1 : m;
    const size_t tail = one_row ? size_t(m - 1) : 0;
    float* x_out = x + tail * size_t(c.n_embd);
    const auto mm = [&](const MatmulDesc& d) { decode || one_row ? be_.matmul_m1(d) : be_.matmul(d); };
    // x_out += in · wᵀ: a projection back into the residual stream.
    const auto add_projection = [&](const Matrix* w, const half_t* in) {
      MatmulDesc d;
      d.w = w;
      d.x = in;
      d.y = x_out;
      d.m = m_out;
      d.accumulate = true;
      mm(d);
    };

    // QKV projection with rope and the KV append fused in.
    MatmulDesc q;
    q.w = L.wqkv.get();
    q.norm_x = x;
    q.norm_weight = L.attn_norm.as<float>();
    q.norm_eps = c.rms_eps;
    q.bias = L.bqkv ? L.bqkv.as<float>() : nullptr;
    q.y = qkv;
    q.m = m;
    q.epilogue = MatmulEpilogue::QkvRopeAppend;
    q.rope.pos = pos;
    q.rope.k_cache = L.k_cache.as<half_t>();
    q.rope.v_cache = L.v_cache.as<half_t>();
    q.rope.n_head = c.n_head;
    q.rope.n_head_kv = c.n_head_kv;
    q.rope.head_dim = c.head_dim;
    q.rope.n_ctx = n_ctx_;
    q.rope.theta = c.rope_theta;
    q.rope.freq_factors = rope_factors_ ? rope_factors_.as<float>() : nullptr;
    q.rope.mode = c.rope_mode;
    decode ? be_.matmul_m1(q) : be_.matmul(q);  // every row: the KV cache needs them all

    if (decode) {
      AttentionDecodeDesc a;
      a.q = qkv;
      a.k_cache = L.k_cache.as<half_t>();
      a.v_cache = L.v_cache.as<half_t>();
      a.out = attn;
      a.n_kv = n_kv;
      a.n_head = c.n_head;
      a.n_head_kv = c.n_head_kv;
      a.head_dim = c.head_dim;
      a.n_ctx = n_ctx_;
      a.scale = scale;
      a.only_newest_row_fresh = true;  // the step's position and n_kv come from the previous step or the host
      a.wo = L.wo.get();               // the output projection, with the residual add
      a.y = x_out;
      a.max_n_kv = max_n_kv;
      be_.attention_decode(a);
    } else {
      AttentionPrefillDesc a;
      a.q = qkv + tail * size_t(c.qkv_dim());
      a.q_row_stride = c.qkv_dim();
      a.k_cache = L.k_cache.as<half_t>();
      a.v_cache = L.v_cache.as<half_t>();
      a.out = attn;
      a.m = m_out;
      a.pos0 = pos0 + int32_t(tail);
      if (recorded) a.pos = pos + tail;  // the same position, read on the device when the recording replays
      a.n_head = c.n_head;
      a.n_head_kv = c.n_head_kv;
      a.head_dim = c.head_dim;
      a.n_ctx = n_ctx_;
      a.scale = scale;
      be_.attention_prefill(a);
      add_projection(L.wo.get(), attn);
    }

    MatmulDesc gu;
    gu.w = L.wgu.get();
    gu.norm_x = x_out;
    gu.norm_weight = L.ffn_norm.as<float>();
    gu.norm_eps = c.rms_eps;
    gu.epilogue = MatmulEpilogue::SwiGLU;
    gu.out16 = ffn;
    gu.m = m_out;
    mm(gu);

    add_projection(L.wdown.get(), ffn);
  }
}

void Model::prefill(const int32_t* tokens, int n, int pos0,
                    const std::function<void(int, const float*, int)>& all_logits) {
  if (n <= 0) throw ModelError("prefill: no tokens");
  if (pos0 < 0 || int64_t(pos0) + n > n_ctx_) {
    throw ModelError("prompt of " + std::to_string(n) + " tokens at position " + std::to_string(pos0) +
                     " does not fit the context of " + std::to_string(n_ctx_) + " tokens");
  }
  for (int i = 0; i < n; ++i) {
    if (tokens[i] < 0 || tokens[i] >= cfg_.n_vocab) {
      throw ModelError("token id " + std::to_string(tokens[i]) + " is outside the vocabulary (0.." +
                       std::to_string(cfg_.n_vocab - 1) + ")");
    }
  }
  ScopedRange range(be_, "prefill");
  drop_argmax_download();
  // A short prompt in one chunk is one recorded unit (a CUDA graph) per length, recorded the second
  // time a prompt of that length comes: its ids and positions are copied in by the unit and every op
  // reads them from memory, so the recording serves any prompt of that length at any position.
  if (!all_logits && n <= kPrefillRecordRows && n <= max_batch_ && be_.supports(Op::StepCapture) &&
      prefill_seen_[size_t(n)]++ > 0) {
    prefill_seen_[size_t(n)] = 2;
    // The ids and positions come in through the backend's staging area and the argmax goes out
    // through its readback area, both copies part of the recording: the host queues the replay
    // alone (on CUDA, a graph launch and the event behind it).
    fill_prompt(static_cast<int32_t*>(be_.staging()), tokens, n, pos0);
    be_.run_step(kPrefillStepKey - n, /*steps=*/0, [&] {
      be_.upload_staged(prompt_.data(), size_t(2 * n) * sizeof(int32_t));
      embed_chunk(nullptr, n, pos0);
      run_layers(n, prompt_.as<int32_t>() + n, nullptr, pos0, /*decode=*/false, /*last_row_out=*/true,
                 /*recorded=*/true);
      lm_head_row(n - 1);
      be_.queue_readback(token_slots(), sizeof(int32_t));
    });
    argmax_ready_ = true;
    argmax_readback_ = true;
    return;
  }
  std::vector<float> row_logits(all_logits ? size_t(cfg_.n_vocab) : 0);
  for (int start = 0; start < n; start += max_batch_) {
    const int m = std::min(max_batch_, n - start);
    if (m <= kEmbeddingHostIds) {  // the ids go with the embedding op, which writes the positions
      embed_chunk(tokens + start, m, pos0 + start);
    } else {
      upload_prompt(tokens + start, m, pos0 + start);
      embed_chunk(nullptr, m, pos0 + start);
    }
    // Logits of every row when asked for, otherwise only of the prompt's last row: then the last
    // layer of the last chunk finishes that row alone.
    const bool last_chunk = start + m == n;
    run_layers(m, prompt_.as<int32_t>() + m, nullptr, pos0 + start, /*decode=*/false,
               /*last_row_out=*/last_chunk && !all_logits);

    if (!all_logits && !last_chunk) continue;
    for (int i = all_logits ? 0 : m - 1; i < m; ++i) {
      lm_head_row(i);
      argmax_ready_ = true;
      if (!all_logits) argmax_ticket_ = be_.queue_download(token_slots(), sizeof(int32_t));
      if (all_logits) {
        be_.download(row_logits.data(), logits_.data(), row_logits.size() * sizeof(float));
        all_logits(start + i, row_logits.data(), cfg_.n_vocab);
      }
    }
  }
}

void Model::fill_prompt(int32_t* out, const int32_t* tokens, int m, int pos0) {
  std::copy(tokens, tokens + m, out);
  for (int i = 0; i < m; ++i) out[m + i] = pos0 + i;
}

void Model::upload_prompt(const int32_t* tokens, int m, int pos0) {
  std::vector<int32_t> ids_pos(size_t(2 * m));
  fill_prompt(ids_pos.data(), tokens, m, pos0);
  be_.upload(prompt_.data(), ids_pos.data(), size_t(2 * m) * sizeof(int32_t));
}

void Model::embed_chunk(const int32_t* host_ids, int m, int pos0) {
  EmbeddingDesc e;
  e.table = embd_ ? embd_.get() : lm_head_.get();
  e.out = x_.as<float>();
  e.m = m;
  if (host_ids) {
    e.host_ids = host_ids;
    e.positions = prompt_.as<int32_t>() + m;
    e.pos0 = pos0;
  } else {
    e.ids = prompt_.as<int32_t>();
  }
  be_.embedding(e);
}

void Model::lm_head_row(int i) {
  MatmulDesc h;
  h.w = lm_head_.get();
  h.norm_x = x_.as<float>() + size_t(i) * size_t(cfg_.n_embd);
  h.norm_weight = output_norm_.as<float>();
  h.norm_eps = cfg_.rms_eps;
  h.y = logits_.as<float>();
  h.argmax = token_slots();
  be_.matmul_m1(h);
}

void Model::check_position(int pos) const {
  if (pos < 0 || pos >= n_ctx_) {
    throw ModelError("position " + std::to_string(pos) + " is outside the context of " + std::to_string(n_ctx_) +
                     " tokens");
  }
}

void Model::decode(int32_t token, int pos) {
  if (token < 0 || token >= cfg_.n_vocab) {
    throw ModelError("token id " + std::to_string(token) + " is outside the vocabulary");
  }
  check_position(pos);
  drop_argmax_download();
  const int32_t step[3] = {pos, pos + 1, token};
  be_.upload(step_.data(), step, sizeof(step));
  run_decode_steps(pos, 1);
}

void Model::decode_run(int pos, int n) {
  if (!argmax_ready_) throw ModelError("decode_run: no step has computed a token to continue from");
  if (n < 1 || n > kDecodeRunMax) {
    throw ModelError("decode_run: " + std::to_string(n) + " steps (1.." + std::to_string(kDecodeRunMax) + ")");
  }
  check_position(pos);
  check_position(pos + n - 1);
  drop_argmax_download();
  if (pos != next_step_pos_) {
    const int32_t step[2] = {pos, pos + 1};
    be_.upload(step_.data(), step, sizeof(step));  // the token slot keeps the last step's argmax
  }
  run_decode_steps(pos, n);
}

// n decode steps at pos .. pos + n - 1 on the scalars in step_ (see there). Each lm_head's argmax
// writes the next step's token and advances pos and n_kv, so the steps, and the next run, start
// from them without the host. One captured unit per n.
void Model::run_decode_steps(int pos, int n) {
  ScopedRange range(be_, "decode");
  int32_t* s = step_.as<int32_t>();
  int32_t* t = token_slots();
  // The run's context class: the rows it ends within, doubling from kShortDecodeRows up to n_ctx.
  int64_t bound = kShortDecodeRows;
  int cls = 0;
  for (; bound < n_ctx_ && int64_t(pos) + n > bound; bound *= 2) ++cls;
  const int max_n_kv = int(std::min<int64_t>(bound, n_ctx_));
  be_.run_step(/*key=*/cls * kDecodeRunMax + n, /*steps=*/n, [&] {
    for (int j = 0; j < n; ++j) {
      EmbeddingDesc e;
      e.table = embd_ ? embd_.get() : lm_head_.get();
      e.ids = t + j;
      e.out = x_.as<float>();
      be_.embedding(e);
      run_layers(1, s, s + 1, 0, /*decode=*/true, false, false, max_n_kv);
      MatmulDesc h;
      h.w = lm_head_.get();
      h.norm_x = x_.as<float>();
      h.norm_weight = output_norm_.as<float>();
      h.norm_eps = cfg_.rms_eps;
      h.y = logits_.as<float>();
      h.argmax = t + (j + 1) % n;
      h.argmax_advance = s;
      be_.matmul_m1(h);
    }
  });
  argmax_ready_ = true;
  next_step_pos_ = pos + n;
  decode_steps_queued_ += uint64_t(n);
}

uint64_t Model::queue_run_tokens(int n) {
  if (!argmax_ready_) throw ModelError("queue_run_tokens: no step has computed logits");
  if (n < 1 || n > kDecodeRunMax) throw ModelError("queue_run_tokens: " + std::to_string(n) + " tokens");
  drop_argmax_download();
  return be_.queue_download(token_slots(), size_t(n) * sizeof(int32_t));
}

void Model::take_run_tokens(uint64_t ticket, int n, int32_t* out) {
  int32_t t[kDecodeRunMax];
  be_.collect_download(ticket, t);
  // Step j's argmax is in t(j + 1), the last step's in t0.
  for (int j = 0; j < n; ++j) out[j] = t[(j + 1) % n];
}

void Model::download_logits(float* dst) {
  be_.download(dst, logits_.data(), size_t(cfg_.n_vocab) * sizeof(float));
}

int32_t Model::argmax() {
  int32_t id = -1;
  if (argmax_readback_) {
    std::memcpy(&id, be_.readback(), sizeof(id));
    argmax_readback_ = false;
  } else if (argmax_ticket_) {
    be_.collect_download(argmax_ticket_, &id);
    argmax_ticket_ = 0;
  } else {
    be_.download(&id, token_slots(), sizeof(id));
  }
  return id;
}

void Model::drop_argmax_download() {
  argmax_readback_ = false;  // the readback area needs no collecting
  if (!argmax_ticket_) return;
  int32_t unused = 0;
  be_.collect_download(argmax_ticket_, &unused);
  argmax_ticket_ = 0;
}

size_t Model::decode_weight_bytes() const {
  size_t b = lm_head_->stream_bytes();
  for (const auto& L : layers_) {
    b += L->wqkv->stream_bytes() + L->wo->stream_bytes() + L->wgu->stream_bytes() + L->wdown->stream_bytes();
  }
  return b;
}

size_t Model::decode_kv_bytes(int n_kv) const {
  return size_t(cfg_.n_layer) * 2 * size_t(cfg_.n_head_kv) * size_t(n_kv) * size_t(cfg_.head_dim) * sizeof(half_t);
}

std::vector<Model::GemmShape> Model::decode_gemms() const {
  const ModelConfig& c = cfg_;
  const Layer& L = *layers_.front();
  return {
      {"qkv_proj", c.qkv_dim(), c.n_embd, WeightType::W8, L.wqkv->stream_bytes()},
      {"attn_out_proj", c.n_embd, c.q_dim(), WeightType::W8, L.wo->stream_bytes()},
      {"ffn_gate_up", int64_t(2) * c.n_ff, c.n_embd, WeightType::W8, L.wgu->stream_bytes()},
      {"ffn_down", c.n_embd, c.n_ff, WeightType::W8, L.wdown->stream_bytes()},
      {"lm_head", c.n_vocab, c.n_embd, WeightType::F16, lm_head_->stream_bytes()},
  };
}

}  // namespace tllm
