// tiny_llm: generate, chat, inspect, tokenize, logits, synth.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>

#include "apps/common.h"
#include "model/chat_template.h"
#include "model/generator.h"
#include "model/synth.h"

namespace tllm {
namespace {

// Options shared by the subcommands that run a model.
struct RunOptions {
  ModelRequest req;
  SamplerParams sampling;
  int max_tokens = 256;
  std::string chat_template;  // "" = from the model
  std::string system;
  bool no_graphs = false;
  bool stats = false;
  bool no_special = false;  // special-token text in the prompt is plain text
  CLI::Option* ctx_opt = nullptr;
  CLI::Option* seed_opt = nullptr;            // null where the subcommand samples nothing (logits)
  // Options that change nothing at temperature 0 (--repeat-penalty does: it applies before the argmax).
  std::vector<CLI::Option*> sampling_only;
};

// A seed is a decimal integer in [0, 2^64); CLI11 alone would wrap "-1" and saturate larger values.
CLI::Validator seed_validator() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        const bool digits = !s.empty() && s.size() <= 20 && s.find_first_not_of("0123456789") == std::string::npos;
        errno = 0;
        if (digits) std::strtoull(s.c_str(), nullptr, 10);
        if (!digits || errno == ERANGE) return "expected an integer from 0 to 18446744073709551615, got '" + s + "'";
        return "";
      },
      "UINT64");
}

// The model is `-m FILE` or a bare FILE, one of them; require_model_path checks one was given, since
// CLI11's required() would print REQUIRED on both forms.
CLI::Option* add_model_path(CLI::App* app, std::string& path) {
  return app->add_option("-m,--model,model", path, "model: -m FILE or FILE (one of them), a GGUF file");
}

void require_model_path(const std::string& path) {
  if (path.empty()) throw AppError("--model is required: give -m FILE or a bare FILE");
}

void add_model_options(CLI::App* app, RunOptions& o) {
  add_model_path(app, o.req.path);
  app->add_option("--backend", o.req.backend, "compute backend: auto (cuda when a GPU is visible), cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  o.ctx_opt = app->add_option("--ctx", o.req.n_ctx,
                              "context size in tokens (KV cache rows); at most the model's trained context, where a "
                              "larger value is capped with a note")
                  ->check(CLI::Range(1, 1 << 20));
  app->add_flag("--no-graphs", o.no_graphs, "run decode steps without CUDA graphs");
  app->add_flag("-q,--quiet", o.req.quiet, "no progress on stderr");
  add_rope_options(app, o.req.rope);
}

void add_sampling_options(CLI::App* app, RunOptions& o) {
  app->add_option("-n,--max-tokens", o.max_tokens,
                  "tokens to generate at most (generation also stops, with a note on stderr, when the context is full)")
      ->check(CLI::Range(1, 1 << 20));
  app->add_option("--temp", o.sampling.temperature, "temperature (0 = greedy)");
  o.sampling_only = {
      app->add_option("--top-k", o.sampling.top_k, "keep the k most likely tokens (0 = off)"),
      app->add_option("--top-p", o.sampling.top_p, "nucleus sampling threshold (1 = off)"),
      app->add_option("--min-p", o.sampling.min_p, "drop tokens below min-p times the top probability (0 = off)")};
  app->add_option("--repeat-penalty", o.sampling.repeat_penalty, "penalty for recent tokens (1 = off)");
  app->add_option("--repeat-last-n", o.sampling.repeat_last_n, "how many recent tokens the penalty sees");
  o.seed_opt = app->add_option("--seed", o.sampling.seed,
                               "random seed for sampling (default: a random one, which --stats prints)")
                   ->check(seed_validator());
  app->add_option("--chat-template", o.chat_template,
                  "chat format: chatml, llama3, llama2, mistral, zephyr, deepseek-r1 or none (default: from the "
                  "model)")
      ->check(CLI::IsMember({"chatml", "llama3", "llama2", "mistral", "zephyr", "deepseek-r1", "none"}));
  app->add_option("--system", o.system, "system prompt (default: the model's own, if its template has one)");
  app->add_flag("--stats", o.stats, "print timing figures on stderr at the end");
}

void check_run_options(RunOptions& o) {
  require_model_path(o.req.path);
  const std::string bad = o.sampling.validate();
  if (!bad.empty()) throw AppError(bad);
  o.req.graphs = !o.no_graphs;
  o.req.n_ctx_given = o.ctx_opt->count() > 0;
  if (o.seed_opt != nullptr && o.seed_opt->count() == 0) {  // logits takes no sampling options
    std::random_device rd;
    o.sampling.seed = (uint64_t(rd()) << 32) ^ rd();
  }
  if (o.sampling.temperature <= 0.0f) {
    std::string ignored;
    for (const CLI::Option* opt : o.sampling_only) {
      if (opt->count() > 0) ignored += (ignored.empty() ? "" : ", ") + opt->get_name();
    }
    if (!ignored.empty()) warn(ignored + ": no effect at temperature 0 (greedy decoding); set --temp to sample");
  }
}

// The decode rate after the first token: the tokens timed over the time they took (0 when none).
double decode_tok_s(const GenerationResult& r) {
  double decode_ms = 0;
  for (double t : r.token_ms) decode_ms += t;
  return decode_ms > 0 ? 1000.0 * double(r.token_ms.size()) / decode_ms : 0.0;
}

// The reply's bytes, end tokens left out: the text printed, and the assistant message that the
// chat template renders in the next turn.
std::string reply_text(const GenerationResult& r, const Tokenizer& tok) {
  std::string text;
  for (int32_t id : r.tokens) {
    if (!tok.is_end_of_generation(id)) text += tok.token_bytes(id);
  }
  return text;
}

// `reused` (chat): the conversation's tokens already in the context, which did not run again.
void print_stats(const GenerationResult& r, uint64_t seed, int reused = -1) {
  const std::string kept = reused >= 0 ? " (" + std::to_string(reused) + " reused from the context)" : "";
  std::fprintf(stderr,
               "\n[prompt %d tokens%s, %.1f ms (%.1f tok/s); generated %zu tokens, TTFT %.1f ms, %.2f tok/s; "
               "stop: %s; seed %llu]\n",
               r.n_prompt, kept.c_str(), r.prefill_ms, r.prefill_ms > 0 ? 1000.0 * r.n_prompt / r.prefill_ms : 0.0,
               r.tokens.size(),
               r.ttft_ms, decode_tok_s(r), stop_reason_name(r.stop), (unsigned long long)seed);
}

// Streams generated tokens to stdout as whole UTF-8 characters; end tokens are not printed.
struct StdoutStream {
  const Tokenizer& tok;
  StreamDecoder dec;
  explicit StdoutStream(const Tokenizer& t) : tok(t), dec(t) {}
  bool operator()(int32_t id) {
    if (tok.is_end_of_generation(id)) return true;
    const std::string s = dec.push(id);
    std::fwrite(s.data(), 1, s.size(), stdout);
    flush_stdout();  // a failed write ends the run instead of generating on
    return true;
  }
  void finish() {
    const std::string s = dec.flush();
    std::fwrite(s.data(), 1, s.size(), stdout);
    flush_stdout();
  }
};

// Generates a reply to `ids`, printing it as it comes, and ends the line.
GenerationResult stream_reply(Session& session, const Tokenizer& tok, const std::vector<int32_t>& ids, int max_tokens) {
  StdoutStream out(tok);
  GenerateOptions g;
  g.max_tokens = max_tokens;
  GenerationResult r = session.generate(ids, g, [&](int32_t id) { return out(id); });
  out.finish();
  std::printf("\n");
  flush_stdout();
  return r;
}

// One line of `in` without its newline; false at the end of the input. A read error (stdin a
// folder, an I/O error) is reported, not taken for the end.
bool read_line(std::FILE* in, std::string& line) {
  line.clear();
  for (int ch; (ch = std::fgetc(in)) != EOF;) {
    if (ch == '\n') return true;
    line += char(ch);
  }
  if (std::ferror(in)) throw AppError(std::string("reading the input failed: ") + std::strerror(errno));
  return !line.empty();
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw AppError(path + ": cannot open the file");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// What generate renders: a prompt (-p), wrapped in the chat template with --chat, or a
// conversation read from --messages; --tools offers tools to the model in either chat form.
struct GenerateInput {
  bool has_prompt = false;  // -p given (perhaps empty)
  std::string prompt;
  bool chat = false;
  std::string messages_file;
  std::string tools_file;
  bool json = false;  // one JSON object at the end instead of the text as it comes
};

// generate --json: the reply, the assistant message it stands for in chat modes (tool calls
// parsed where the template renders them), and the figures --stats prints.
void print_reply_json(const GenerationResult& r, const Tokenizer& tok, const ChatFormat* fmt, uint64_t seed) {
  const std::string text = reply_text(r, tok);
  nlohmann::ordered_json j;
  j["text"] = text;
  if (fmt != nullptr) j["message"] = nlohmann::ordered_json::parse(chat_message_json(assistant_reply(*fmt, text)));
  j["stop"] = stop_reason_name(r.stop);
  j["prompt_tokens"] = r.n_prompt;
  j["generated_tokens"] = r.tokens.size();
  j["prefill_ms"] = r.prefill_ms;
  j["ttft_ms"] = r.ttft_ms;
  j["decode_tok_s"] = decode_tok_s(r);
  j["seed"] = seed;
  std::printf("%s\n", j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace).c_str());
  flush_stdout();
}

int cmd_generate(RunOptions& o, const GenerateInput& in) {
  check_run_options(o);
  const bool from_messages = !in.messages_file.empty();
  if (!from_messages && !in.has_prompt) throw AppError("generate: give a prompt (-p TEXT) or --messages FILE");
  if (!from_messages && in.prompt.empty()) throw AppError("the prompt is empty");
  if (!in.tools_file.empty() && !in.chat && !from_messages) throw AppError("--tools needs --chat or --messages");
  if (from_messages && !o.system.empty()) {
    throw AppError("--system does not go with --messages: put a system message first in the conversation");
  }
  ChatRequest request;
  if (from_messages) {
    request = parse_chat_request(read_file(in.messages_file), in.messages_file);
    if (request.messages.empty()) throw AppError(in.messages_file + ": the conversation has no messages");
  }
  if (!in.tools_file.empty()) {
    if (!request.tools.empty()) throw AppError(in.messages_file + " has tools of its own; leave out --tools");
    request.tools = parse_chat_tools(read_file(in.tools_file), in.tools_file);
  }
  LoadedModel lm = load_model(o.req);
  std::string text = in.prompt;
  std::optional<ChatFormat> fmt;
  if (in.chat || from_messages) {
    fmt = detect_chat_format(*lm.file, *lm.tokenizer, o.chat_template);
    if (!from_messages) {
      if (!o.system.empty()) request.messages.push_back({"system", o.system});
      request.messages.push_back({"user", in.prompt});
    }
    text = render_chat_request(*fmt, request, /*add_generation_prompt=*/true);
  }
  if (text.empty()) throw AppError("the prompt is empty");
  // The chat template's own special tokens always count as such; --no-special excludes --chat.
  const std::vector<int32_t> ids = encode_prompt(*lm.tokenizer, text, /*parse_special=*/!o.no_special);
  if (int(ids.size()) >= lm.model->n_ctx()) {
    throw AppError("the prompt has " + std::to_string(ids.size()) + " tokens but the context holds " +
                   std::to_string(lm.model->n_ctx()) + "; use a shorter prompt, or " + context_advice(*lm.model));
  }
  const Tokenizer& tok = *lm.tokenizer;
  Session session(*lm.model, o.sampling, [&](int32_t id) { return tok.is_end_of_generation(id); });
  GenerationResult r;
  if (in.json) {
    GenerateOptions g;
    g.max_tokens = o.max_tokens;
    r = session.generate(ids, g, [](int32_t) { return true; });
  } else {
    r = stream_reply(session, tok, ids, o.max_tokens);
  }
  if (r.stop == StopReason::ContextFull) {
    std::fprintf(stderr, "tiny_llm: the context of %d tokens is full; generation stopped\n", lm.model->n_ctx());
  }
  if (in.json) print_reply_json(r, tok, fmt ? &*fmt : nullptr, o.sampling.seed);
  if (o.stats) print_stats(r, o.sampling.seed);
  return 0;
}

// A line of chat that sends a tool's result instead of a user message.
constexpr const char* kToolCommand = "/tool ";

int cmd_chat(RunOptions& o, const std::string& tools_file) {
  check_run_options(o);
  ChatRequest request;  // the conversation so far and the tools offered
  if (!tools_file.empty()) request.tools = parse_chat_tools(read_file(tools_file), tools_file);
  LoadedModel lm = load_model(o.req);
  const Tokenizer& tok = *lm.tokenizer;
  const ChatFormat fmt = detect_chat_format(*lm.file, tok, o.chat_template);
  if (!request.tools.empty() && !renders_tools(fmt)) {
    throw AppError(std::string("--tools: the ") + chat_template_name(fmt.kind) +
                   " chat format of this model renders no tools (Qwen2.5's chatml template does)");
  }
  Session session(*lm.model, o.sampling, [&](int32_t id) { return tok.is_end_of_generation(id); });
  const bool tty = isatty(STDIN_FILENO) != 0;
  std::vector<ChatMessage>& msgs = request.messages;
  if (!o.system.empty()) msgs.push_back({"system", o.system});
  const size_t n_fixed = msgs.size();
  const int n_ctx = lm.model->n_ctx();
  if (tty) {
    std::fprintf(stderr, "chat with %s; /reset clears the conversation, %s/exit quits\n", o.req.path.c_str(),
                 renders_tools(fmt) ? "/tool TEXT sends a tool's result, " : "");
  }
  std::string line;
  for (;;) {
    if (tty) {
      std::fprintf(stdout, "> ");
      flush_stdout();
    }
    if (!read_line(stdin, line)) break;
    if (line == "/exit" || line == "/quit") break;
    if (line == "/reset") {
      msgs.resize(n_fixed);
      session.reset();
      std::printf("[conversation cleared]\n");
      continue;
    }
    if (line.empty()) continue;
    if (line.rfind(kToolCommand, 0) == 0) {
      if (!renders_tools(fmt)) {
        std::printf("[this model's chat format renders no tool messages]\n");
        continue;
      }
      msgs.push_back({"tool", line.substr(std::strlen(kToolCommand))});
    } else {
      msgs.push_back({"user", line});
    }
    // Each turn encodes the whole conversation as the template renders it, BOS first where the
    // tokenizer asks for one, and keeps the tokens the context already holds: only what is new
    // runs through the model. Where a template rewrites earlier turns (Llama 2 and Mistral strip
    // the replies, DeepSeek-R1 drops their reasoning), the context is rerun from the first token
    // that differs.
    std::vector<int32_t> ids = encode_prompt(tok, render_chat_request(fmt, request, /*add_generation_prompt=*/true), true);
    if (int64_t(ids.size()) + 1 >= n_ctx && msgs.size() > n_fixed + 1) {
      // Only earlier turns can be cleared to make room.
      std::printf("[the context of %d tokens is full; conversation cleared]\n", n_ctx);
      msgs.erase(msgs.begin() + long(n_fixed), msgs.end() - 1);
      ids = encode_prompt(tok, render_chat_request(fmt, request, true), true);
    }
    if (int64_t(ids.size()) + 1 >= n_ctx) {
      std::printf("[the message alone does not fit the context]\n");
      msgs.resize(n_fixed);
      session.reset();
      continue;
    }
    const size_t reused = session.reuse_prefix(ids);
    const GenerationResult r =
        stream_reply(session, tok, std::vector<int32_t>(ids.begin() + long(reused), ids.end()), o.max_tokens);
    msgs.push_back({"assistant", reply_text(r, tok)});
    if (r.stop == StopReason::ContextFull) {
      std::printf("[the context of %d tokens is full; conversation cleared]\n", n_ctx);
      msgs.resize(n_fixed);
      session.reset();
    }
    if (o.stats) print_stats(r, o.sampling.seed, int(reused));
  }
  return 0;
}

// A metadata value as JSON: numbers, booleans and strings as themselves (strings in full); an array
// as its element type, its length and its first items, as the table shows it.
nlohmann::json value_json(const GgufValue& v) {
  constexpr size_t kFirstItems = 8;
  switch (v.type) {
    case GgufType::U8: case GgufType::U16: case GgufType::U32: case GgufType::U64: return v.u;
    case GgufType::I8: case GgufType::I16: case GgufType::I32: case GgufType::I64: return v.i;
    case GgufType::F32: case GgufType::F64: return v.f;  // NaN and infinities become null
    case GgufType::BOOL: return v.i != 0;
    case GgufType::STRING: return v.str;
    case GgufType::ARRAY: break;
  }
  nlohmann::json first = nlohmann::json::array();
  for (size_t k = 0; k < v.array_size() && k < kFirstItems; ++k)
    first.push_back(v.elem_type == GgufType::STRING ? nlohmann::json(v.strs[k]) : value_json(v.arr[k]));
  return {{"element_type", gguf_type_name(v.elem_type)}, {"length", v.array_size()}, {"first", first}};
}

int cmd_inspect(const std::string& path, bool json) {
  require_model_path(path);
  std::unique_ptr<GgufFile> f = GgufFile::open(path);
  if (json) {
    nlohmann::json j;
    j["file"] = path;
    j["version"] = f->version();
    j["alignment"] = f->alignment();
    j["metadata"] = nlohmann::json::object();
    for (const auto& kv : f->metadata()) j["metadata"][kv.first] = value_json(kv.second);
    j["tensors"] = nlohmann::json::array();
    for (const TensorInfo& t : f->tensors()) {
      j["tensors"].push_back({{"name", t.name}, {"type", ggml_type_name(t.type)}, {"shape", t.dims}, {"bytes", t.bytes}});
    }
    try {
      const ModelConfig c = read_model_config(*f);
      j["model"] = {{"arch", c.arch}, {"n_layer", c.n_layer}, {"n_embd", c.n_embd}, {"n_ff", c.n_ff},
                    {"n_head", c.n_head}, {"n_head_kv", c.n_head_kv}, {"head_dim", c.head_dim},
                    {"n_vocab", c.n_vocab}, {"n_ctx_train", c.n_ctx_train}, {"rope_theta", c.rope_theta},
                    {"rms_eps", c.rms_eps}, {"tied_embeddings", c.tied_embeddings}, {"qkv_bias", c.qkv_bias}};
      j["model"]["rope_scaling"] = c.rope_scaling.empty() ? nlohmann::json(nullptr) : nlohmann::json(c.rope_scaling);
      j["model"]["rope_attn_scale"] = c.rope_attn_scale;
    } catch (const std::exception& e) {
      j["model"] = nullptr;
      j["not_runnable"] = e.what();
    }
    std::printf("%s\n", json_text(j).c_str());  // a file's strings need not be UTF-8
    return 0;
  }
  std::printf("file: %s\nGGUF version %u, alignment %llu, %zu metadata keys, %zu tensors\n\n", path.c_str(),
              f->version(), (unsigned long long)f->alignment(), f->metadata().size(), f->tensors().size());
  std::printf("%-44s %s\n", "key", "value");
  for (const auto& kv : f->metadata()) std::printf("%-44s %s\n", kv.first.c_str(), kv.second.to_string().c_str());
  std::printf("\n%-40s %-6s %-20s %12s\n", "tensor", "type", "shape", "bytes");
  size_t total = 0;
  for (const TensorInfo& t : f->tensors()) {
    std::string shape;
    for (size_t i = 0; i < t.dims.size(); ++i) shape += (i ? " x " : "") + std::to_string(t.dims[i]);
    std::printf("%-40s %-6s %-20s %12zu\n", t.name.c_str(), ggml_type_name(t.type), shape.c_str(), t.bytes);
    total += t.bytes;
  }
  std::printf("%-40s %-6s %-20s %12zu\n", "total", "", "", total);
  try {
    const ModelConfig c = read_model_config(*f);
    char magnitude[48] = "";
    if (c.rope_attn_scale != 1.0f) {
      std::snprintf(magnitude, sizeof magnitude, " (q and k x %.6g)", double(c.rope_attn_scale));
    }
    std::printf("\nmodel: %s, %d layers, n_embd %d, n_ff %d, %d heads / %d KV heads (head_dim %d), n_vocab %d, "
                "context %d, rope theta %g%s%s%s, rms eps %g, %s embeddings, %s QKV bias\n",
                c.arch.c_str(), c.n_layer, c.n_embd, c.n_ff, c.n_head, c.n_head_kv, c.head_dim, c.n_vocab,
                c.n_ctx_train, double(c.rope_theta), c.rope_scaling.empty() ? "" : " scaled by ",
                c.rope_scaling.c_str(), magnitude, double(c.rms_eps), c.tied_embeddings ? "tied" : "separate",
                c.qkv_bias ? "with" : "no");
  } catch (const std::exception& e) {
    std::printf("\nnot a runnable model: %s\n", e.what());
  }
  return 0;
}

int cmd_tokenize(const std::string& path, std::string text, const std::string& file, bool no_special) {
  if (!file.empty()) text = read_file(file);
  std::unique_ptr<GgufFile> f = GgufFile::open(path);
  std::unique_ptr<Tokenizer> tok = load_tokenizer(*f);
  const std::vector<int32_t> ids = tok->encode(text, !no_special);
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) line += (i ? " " : "") + std::to_string(ids[i]);
  std::printf("%s\n", line.c_str());
  return 0;
}

std::vector<int32_t> parse_ids(const std::string& s) {
  std::vector<int32_t> ids;
  std::istringstream in(s);
  std::string w;
  while (in >> w) {
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(w, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != w.size() || v < 0 || v > INT32_MAX) throw AppError("'" + w + "' is not a token id");
    ids.push_back(int32_t(v));
  }
  return ids;
}

int cmd_logits(RunOptions& o, const std::string& tokens, const std::string& tokens_file, const std::string& prompt,
               const std::string& out_path) {
  check_run_options(o);
  check_output_path(out_path, "--output", /*regular_only=*/false);
  o.req.need_tokenizer = !prompt.empty();
  std::vector<int32_t> ids;
  if (!tokens.empty()) ids = parse_ids(tokens);
  if (!tokens_file.empty()) ids = parse_ids(read_file(tokens_file));
  LoadedModel lm = load_model(o.req);
  if (!prompt.empty()) ids = encode_prompt(*lm.tokenizer, prompt, /*parse_special=*/!o.no_special);
  if (ids.empty()) throw AppError("no tokens given (use --tokens, --tokens-file or -p)");
  if (int(ids.size()) > lm.model->n_ctx()) {
    throw AppError(std::to_string(ids.size()) + " tokens do not fit the context of " + std::to_string(lm.model->n_ctx()) +
                   "; " + context_advice(*lm.model));
  }
  for (int32_t id : ids) {
    if (id >= lm.model->config().n_vocab) {
      throw AppError("token id " + std::to_string(id) + " is outside the vocabulary of " +
                     std::to_string(lm.model->config().n_vocab));
    }
  }
  std::FILE* out = std::fopen(out_path.c_str(), "wb");
  if (!out) throw AppError(out_path + ": cannot open for writing");
  bool ok = true;
  lm.model->prefill(ids.data(), int(ids.size()), 0, [&](int, const float* row, int n) {
    ok = ok && std::fwrite(row, sizeof(float), size_t(n), out) == size_t(n);
  });
  ok = std::fclose(out) == 0 && ok;
  if (!ok) throw AppError(out_path + ": write failed");
  std::fprintf(stderr, "wrote %zu x %d float32 logits to %s\n", ids.size(), lm.model->config().n_vocab, out_path.c_str());
  return 0;
}

// What `tiny_llm synth` was asked for.
struct SynthArgs {
  std::string out, tokenizer_dir, preset = "qwen2.5-0.5b", weights = "q4_k_m";
  uint64_t seed = 0;
  bool seed_given = false, quiet = false;
  std::string tokenizer_pre;  // "": the preset's
  std::string rope_scaling;   // "", "linear" or "yarn"
  float rope_factor = 0.0f;
  int rope_original_context = 0;
};

int cmd_synth(const SynthArgs& a) {
  check_output_path(a.out, "--output", /*regular_only=*/true);
  const std::string& preset = a.preset;
  SynthConfig c = preset == "tiny"          ? tiny_test_model()
                  : preset == "tiny-llama"  ? tiny_llama_test_model()
                  : preset == "tiny-llama2" ? tiny_llama2_test_model()
                  : preset == "tiny-llama3" ? tiny_llama3_test_model()
                  : preset == "tiny-nemo"   ? tiny_nemo_test_model()
                  : preset == "tiny-wide"   ? tiny_wide_heads_test_model()
                  : preset == "llama3.2-1b" ? llama32_1b_q4km()
                  : preset == "falcon3-1b"  ? falcon3_1b_q4km()
                                            : qwen25_05b_q4km();
  if (a.seed_given) c.seed = a.seed;
  set_synth_weights(c, a.weights);
  if (!a.tokenizer_dir.empty() && c.vocab != SynthVocab::ByteLevel) {
    throw AppError("--tokenizer-dir: the " + preset + " preset writes its own SentencePiece vocabulary");
  }
  c.tokenizer_dir = a.tokenizer_dir;
  if (!a.tokenizer_pre.empty()) {
    if (c.vocab != SynthVocab::ByteLevel) {
      throw AppError("--tokenizer-pre: the " + preset + " preset writes a SentencePiece vocabulary");
    }
    c.tokenizer_pre = a.tokenizer_pre;
  }
  if (!a.rope_scaling.empty()) {
    if (!(a.rope_factor > 0.0f)) throw AppError("--rope-scaling " + a.rope_scaling + " needs a --rope-scale above 0");
    if (a.rope_original_context > 0 && a.rope_scaling != "yarn") {
      throw AppError("--yarn-orig-ctx is for --rope-scaling yarn");
    }
    c.rope_scaling = a.rope_scaling;
    c.rope_factor = a.rope_factor;
    c.rope_original_context = a.rope_original_context;
  }
  Progress progress("writing " + a.out, a.quiet);
  write_synth_model(c, a.out, [&](size_t d, size_t t) { progress.update(d, t); });
  if (!a.quiet) std::fprintf(stderr, "wrote %s\n", a.out.c_str());
  return 0;
}

int main_body(int argc, char** argv) {
  CLI::App app{"tiny-llm: a small, fast LLM inference engine (Qwen2 and Llama GGUF models on CPU or CUDA)", "tiny_llm"};
  app.require_subcommand(1);

  RunOptions gen;
  GenerateInput gen_in;
  CLI::App* g = app.add_subcommand("generate", "generate text from a prompt");
  add_model_options(g, gen);
  add_sampling_options(g, gen);
  CLI::Option* prompt_opt = g->add_option("-p,--prompt", gen_in.prompt, "the prompt (or --messages)");
  CLI::Option* chat_flag =
      g->add_flag("--chat", gen_in.chat, "wrap the prompt in the model's chat template as a user message");
  CLI::Option* messages_opt =
      g->add_option("--messages", gen_in.messages_file,
                    "a conversation to continue, rendered with the model's chat template: a JSON array of "
                    "messages ({\"role\", \"content\"}; tool calls and tool messages where the template "
                    "renders them, as Qwen2.5's does) or an object with \"messages\" and \"tools\"")
          ->check(CLI::ExistingFile)
          ->excludes(prompt_opt)
          ->excludes(chat_flag);
  g->add_option("--tools", gen_in.tools_file,
                "a JSON array of tool (function) definitions offered to the model, with --chat or --messages")
      ->check(CLI::ExistingFile);
  g->add_flag("--json", gen_in.json,
              "print one JSON object at the end instead of the text as it comes: the text, in chat modes the "
              "assistant message it stands for (tool calls parsed where the template renders them, ready to "
              "append to --messages), the stop reason and the figures of --stats");
  g->add_flag("--no-special", gen.no_special, "treat special-token text in the prompt (<|im_end|>, ...) as plain text")
      ->excludes(chat_flag)
      ->excludes(messages_opt);

  RunOptions ch;
  std::string chat_tools;
  CLI::App* c = app.add_subcommand("chat", "interactive multi-turn chat (reads lines from the terminal or a pipe)");
  add_model_options(c, ch);
  add_sampling_options(c, ch);
  c->add_option("--tools", chat_tools,
                "a JSON array of tool (function) definitions offered to the model, where its chat template "
                "renders tools (Qwen2.5's); a line '/tool TEXT' then sends a tool's result")
      ->check(CLI::ExistingFile);

  std::string inspect_path;
  bool inspect_json = false;
  CLI::App* in = app.add_subcommand("inspect", "print a GGUF file's metadata and tensor table");
  add_model_path(in, inspect_path);
  in->add_flag("--json", inspect_json, "machine-readable output");

  std::string tok_path, tok_text, tok_file;
  bool no_special = false;
  CLI::App* tk = app.add_subcommand("tokenize", "print the token ids of a text, space-separated on one line");
  tk->add_option("-m,--model", tok_path, "GGUF file with a tokenizer")->required();
  CLI::Option* tk_text = tk->add_option("text", tok_text, "text to tokenize");
  tk->add_option("--file", tok_file, "read the text from a file (instead of TEXT)")
      ->check(CLI::ExistingFile)
      ->excludes(tk_text);
  tk->add_flag("--no-special", no_special, "treat special-token text as plain text");

  RunOptions lg;
  std::string lg_tokens, lg_tokens_file, lg_prompt, lg_out;
  CLI::App* l = app.add_subcommand("logits", "write the logits of every position as raw float32 [n_tokens x n_vocab]");
  add_model_options(l, lg);
  CLI::Option* lg_tokens_opt = l->add_option("--tokens", lg_tokens, "token ids, space-separated");
  CLI::Option* lg_file_opt = l->add_option("--tokens-file", lg_tokens_file, "file of space-separated token ids")
                                 ->check(CLI::ExistingFile)
                                 ->excludes(lg_tokens_opt);
  l->add_option("-p,--prompt", lg_prompt, "text to tokenize instead of ids (a BOS first where the model asks for one)")
      ->excludes(lg_tokens_opt)
      ->excludes(lg_file_opt);
  l->add_flag("--no-special", lg.no_special, "treat special-token text in -p as plain text");
  l->add_option("-o,--output", lg_out, "output file")->required();

  SynthArgs sy;
  CLI::App* s = app.add_subcommand("synth", "write a synthetic GGUF model with random weights");
  s->add_option("-o,--output", sy.out, "output GGUF file")->required();
  s->add_option("--tokenizer-dir", sy.tokenizer_dir, "folder with a Hugging Face vocab.json + merges.txt to embed")
      ->check(CLI::ExistingDirectory);
  s->add_option("--preset", sy.preset,
                "shapes: qwen2.5-0.5b (Qwen2.5-0.5B-Instruct Q4_K_M), llama3.2-1b (Llama-3.2-1B-Instruct "
                "Q4_K_M, with a byte-level vocabulary), falcon3-1b (Falcon3-1B-Instruct Q4_K_M: heads of 256, "
                "a byte-level vocabulary), tiny, tiny-llama, tiny-llama2 (with "
                "a SentencePiece vocabulary and the Llama 2 chat template), tiny-llama3 (with Llama 3.1's "
                "rope scaling), tiny-nemo (heads of head_dim 128 from attention.key_length, "
                "not n_embd / n_head, as Mistral-Nemo's), tiny-wide (heads of 256, as Falcon3's)")
      ->check(CLI::IsMember({"qwen2.5-0.5b", "llama3.2-1b", "falcon3-1b", "tiny", "tiny-llama", "tiny-llama2",
                             "tiny-llama3", "tiny-nemo", "tiny-wide"}));
  s->add_option("--weights", sy.weights,
                "how the weight matrices are stored (norm weights and biases stay f32): q4_k_m, llama.cpp's "
                "mix (q4_k; q6_k for attn_v and ffn_down in some layers and for the output), or one type "
                "for every matrix, the output too. Rows that are not whole blocks of the type fall back "
                "as llama.cpp does: tq1_0, tq2_0 -> q4_0; q2_k, q3_k, iq4_xs, iq1_s .. iq3_s -> iq4_nl; "
                "q4_k -> q5_0; "
                "q5_k -> q5_1; q6_k -> q8_0")
      ->check(CLI::IsMember(synth_weight_names()));
  CLI::Option* seed_opt = s->add_option("--seed", sy.seed, "random seed for the weights")->check(seed_validator());
  s->add_flag("-q,--quiet", sy.quiet, "no progress");
  s->add_option("--tokenizer-pre", sy.tokenizer_pre,
                "tokenizer.ggml.pre of the byte-level vocabulary (default qwen2): a pre-tokenizer tiny-llm reads")
      ->check(CLI::IsMember(Tokenizer::pre_tokenizer_names()));
  CLI::Option* rope_opt =
      s->add_option("--rope-scaling", sy.rope_scaling,
                    "write rope.scaling.type: linear (every frequency divided by --rope-scale) or yarn")
          ->check(CLI::IsMember({"linear", "yarn"}));
  s->add_option("--rope-scale", sy.rope_factor, "rope.scaling.factor (with --rope-scaling)")
      ->check(CLI::Range(1e-6f, 1e6f))
      ->needs(rope_opt);
  s->add_option("--yarn-orig-ctx", sy.rope_original_context,
                "rope.scaling.original_context_length, the context YaRN scales from (with --rope-scaling "
                "yarn; default: the file's context_length)")
      ->check(CLI::Range(1, 1 << 24))
      ->needs(rope_opt);

  // inspect, tokenize and synth compute nothing on a backend; they accept --backend so that scripts
  // can pass the same options to every subcommand.
  std::string unused_backend;
  for (CLI::App* sub : {in, tk, s}) {
    sub->add_option("--backend", unused_backend, "accepted for uniformity; this subcommand runs on the host")
        ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  }
  if (int rc = parse_cli(app, argc, argv); rc >= 0) return rc;
  if (g->parsed()) {
    gen_in.has_prompt = g->count("--prompt") > 0;
    return cmd_generate(gen, gen_in);
  }
  if (c->parsed()) return cmd_chat(ch, chat_tools);
  if (in->parsed()) return cmd_inspect(inspect_path, inspect_json);
  if (tk->parsed()) {
    if (tok_file.empty() && tk->count("text") == 0) throw AppError("tokenize: give a TEXT or --file");
    return cmd_tokenize(tok_path, tok_text, tok_file, no_special);
  }
  if (l->parsed()) return cmd_logits(lg, lg_tokens, lg_tokens_file, lg_prompt, lg_out);
  if (s->parsed()) {
    sy.seed_given = seed_opt->count() > 0;
    return cmd_synth(sy);
  }
  return 1;
}

}  // namespace
}  // namespace tllm

int main(int argc, char** argv) { return tllm::run_main("tiny_llm", tllm::main_body, argc, argv); }
