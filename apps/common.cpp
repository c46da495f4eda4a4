#include "apps/common.h"

#include <fcntl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "model/synth.h"

namespace tllm {

namespace {
const char* g_program = "tiny-llm";  // set by run_main, for warnings and notes
}  // namespace

void warn(const std::string& what) { std::fprintf(stderr, "%s: warning: %s\n", g_program, what.c_str()); }

std::string default_backend_name() { return backend_available("cuda") ? "cuda" : "cpu"; }

std::string device_summary(const DeviceInfo& dev, bool gpu) {
  std::string s = dev.name + " | driver " + (dev.driver.empty() ? "-" : dev.driver) + " | " +
                  (dev.runtime.empty() ? "-" : dev.runtime);
  if (gpu) s += " | " + std::to_string(dev.multiprocessors) + " SMs";
  char bw[64];
  if (dev.peak_bandwidth_gbs > 0)
    std::snprintf(bw, sizeof(bw), " | nominal %.0f GB/s", dev.peak_bandwidth_gbs);
  else
    std::snprintf(bw, sizeof(bw), " | nominal bandwidth -");
  return s + bw;
}

nlohmann::json device_json(const DeviceInfo& dev, bool gpu) {
  auto known = [](auto v, bool is_known) { return is_known ? nlohmann::json(v) : nlohmann::json(); };
  return {{"name", dev.name},
          {"driver", known(dev.driver, !dev.driver.empty())},
          {"runtime", known(dev.runtime, !dev.runtime.empty())},
          {"multiprocessors", known(dev.multiprocessors, gpu)},
          {"peak_bandwidth_gbs", known(dev.peak_bandwidth_gbs, dev.peak_bandwidth_gbs > 0)}};
}

std::string json_text(const nlohmann::json& j) { return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace); }

Progress::Progress(std::string label, bool quiet)
    : label_(std::move(label)), quiet_(quiet), tty_(isatty(STDERR_FILENO) != 0) {}

void Progress::update(size_t done, size_t total) {
  if (quiet_ || total == 0) return;
  const int pct = int(done * 100 / total);
  // On a terminal the line redraws in place; in a log, one line every 25%.
  const int step = tty_ ? 1 : 25;
  if (pct / step == last_percent_ / step && pct != 100) return;
  if (pct == last_percent_) return;
  last_percent_ = pct;
  if (tty_) {
    std::fprintf(stderr, "\r%s %3d%%%s", label_.c_str(), pct, pct == 100 ? "\n" : "");
  } else {
    std::fprintf(stderr, "%s %3d%%\n", label_.c_str(), pct);
  }
  std::fflush(stderr);
}


std::unique_ptr<Tokenizer> load_tokenizer(const GgufFile& f) {
  std::unique_ptr<Tokenizer> tok = Tokenizer::from_gguf(f);
  if (!tok->is_sentencepiece() && !f.find("tokenizer.ggml.pre")) {
    warn(f.path() + ": tokenizer.ggml.pre is missing; assuming the gpt-2 pre-tokenizer ('default')");
  }
  return tok;
}

std::vector<int32_t> encode_prompt(const Tokenizer& tok, const std::string& text, bool parse_special) {
  std::vector<int32_t> ids = tok.encode(text, parse_special);
  if (tok.add_bos() && tok.bos_id() >= 0 && (ids.empty() || ids[0] != tok.bos_id())) ids.insert(ids.begin(), tok.bos_id());
  return ids;
}

std::string context_advice(const Model& model) {
  const int train = model.config().n_ctx_train;
  if (model.n_ctx() >= train) {
    return "the model's trained context is " + std::to_string(train) + " tokens, so --ctx cannot go higher";
  }
  return "raise --ctx (up to " + std::to_string(train) + ", the model's trained context)";
}

void check_output_path(const std::string& path, const std::string& option, bool regular_only) {
  namespace fs = std::filesystem;
  if (path.empty()) throw AppError(option + ": the output path is empty");
  const std::string cannot = path + ": cannot open for writing (" + option + "): ";
  const fs::path p(path);
  std::error_code ec;
  const fs::file_status st = fs::status(p, ec);
  if (fs::is_directory(st) || !p.has_filename()) throw AppError(cannot + "it is a folder");
  const bool exists = fs::exists(st);
  if (exists && regular_only && !fs::is_regular_file(st)) {
    throw AppError(cannot + "it exists and is not a regular file, which this output would replace");
  }
  if (exists && access(path.c_str(), W_OK) != 0) throw AppError(cannot + std::strerror(errno));
  // A new file, or one replaced through a temporary file beside it, needs a writable folder.
  if (!exists || regular_only) {
    const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
    if (!fs::is_directory(dir, ec)) throw AppError(cannot + "the folder " + dir.string() + " does not exist");
    if (access(dir.c_str(), W_OK) != 0) throw AppError(cannot + "the folder " + dir.string() + ": " + std::strerror(errno));
  }
}

void add_rope_options(CLI::App* app, RopeScalingOverride& rope) {
  app->add_option("--rope-scaling", rope.type,
                  "rope scaling over the file's: none, linear (every frequency divided by --rope-scale) or yarn "
                  "(YaRN, from --yarn-orig-ctx)")
      ->check(CLI::IsMember({"none", "linear", "yarn"}));
  app->add_option("--rope-scale", rope.factor,
                  "rope scaling factor: the context grows this many times (default: the file's)")
      ->check(CLI::Range(1e-6, 1e6));
  app->add_option("--yarn-orig-ctx", rope.original_context,
                  "the context YaRN scales from (default: the file's original context, else its context length)")
      ->check(CLI::Range(1, 1 << 24));
}

LoadedModel load_model(const ModelRequest& req) {
  LoadedModel lm;
  lm.file = GgufFile::open(req.path);
  const ModelConfig cfg = read_model_config(*lm.file, req.rope);
  if (req.n_ctx_given && req.n_ctx > cfg.n_ctx_train && !req.quiet) {
    std::fprintf(stderr, "%s: note: --ctx %d is above the model's trained context of %d tokens; using %d\n", g_program,
                 req.n_ctx, cfg.n_ctx_train, cfg.n_ctx_train);
  }
  // The tokenizer is checked before the weights are converted, so a bad vocabulary fails fast.
  if (req.need_tokenizer) lm.tokenizer = load_tokenizer(*lm.file);
  const std::string be_name = req.backend == "auto" ? default_backend_name() : req.backend;
  lm.backend = create_backend(be_name);
  lm.backend->set_step_capture(req.graphs);

  LoadOptions opt;
  opt.n_ctx = req.n_ctx;
  opt.max_batch = req.max_batch;
  opt.rope = req.rope;
  const ModelFootprint need = Model::footprint(cfg, opt, *lm.backend);
  const MemoryInfo mem = lm.backend->memory_info();
  const std::string too_big = fit_error(need, mem, be_name, std::min(req.n_ctx, cfg.n_ctx_train));
  if (!too_big.empty()) throw AppError(req.path + ": " + too_big);
  Progress progress("loading " + std::filesystem::path(req.path).filename().string() + " onto " + be_name, req.quiet);
  opt.progress = [&](size_t done, size_t total) { progress.update(done, total); };
  lm.model = Model::load(*lm.file, *lm.backend, opt);
  return lm;
}

std::string default_bench_model(bool quiet) {
  namespace fs = std::filesystem;
  fs::path dir;
  if (const char* c = std::getenv("TINY_LLM_CACHE"); c && *c) {
    dir = c;
  } else if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) {
    dir = fs::path(x) / "tiny-llm";
  } else if (const char* h = std::getenv("HOME"); h && *h) {
    dir = fs::path(h) / ".cache" / "tiny-llm";
  } else {
    dir = fs::temp_directory_path() / "tiny-llm";
  }
  const fs::path path = dir / "qwen2.5-0.5b-instruct-synthetic-q4_k_m.gguf";
  if (fs::exists(path)) return path.string();
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw AppError(dir.string() + ": cannot create the cache folder: " + ec.message());
  if (!quiet) std::fprintf(stderr, "writing the synthetic benchmark model to %s (once)\n", path.c_str());
  const fs::path tmp = path.string() + ".part";
  Progress progress("writing synthetic model", quiet);
  write_synth_model(qwen25_05b_q4km(), tmp.string(), [&](size_t d, size_t t) { progress.update(d, t); });
  fs::rename(tmp, path, ec);
  if (ec) throw AppError(path.string() + ": cannot move the model into place: " + ec.message());
  return path.string();
}

int parse_cli(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string what = e.what();
    // CLI11 checks for required options and subcommands before it reports arguments it did not
    // recognise, so `tiny_llm --bogus` would say only that a subcommand is required: name the argument.
    const std::vector<std::string> unknown = app.remaining(/*recurse=*/true);
    if (dynamic_cast<const CLI::RequiredError*>(&e) && !unknown.empty()) {
      what = "unknown option or subcommand '" + unknown.front() + "'";
    }
    while (!what.empty() && (what.back() == '\n' || what.back() == ' ')) what.pop_back();
    for (char& ch : what) {
      if (ch == '\n') ch = ' ';
    }
    std::fprintf(stderr, "%s: error: %s; see --help\n", app.get_name().c_str(), what.c_str());
    return 1;
  }
  return -1;
}

void flush_stdout() {
  const bool flushed = std::fflush(stdout) == 0;
  const int err = errno;
  if (flushed && !std::ferror(stdout)) return;
  // When an earlier write failed (the stream's error flag), errno is still that write's, as nothing
  // since has failed; EIO if something reset it.
  throw AppError(std::string("writing the output failed: ") + std::strerror(err != 0 ? err : EIO));
}

namespace {
// Opens /dev/null on fd 0, 1 or 2 when it is closed: otherwise the next file opened (a model, a
// temporary output) would get that number, and reads from stdin or writes to stderr would use it.
void open_closed_standard_fds() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
    const int got = open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
    if (got >= 0 && got != fd) {  // only when a lower number was closed too, which the loop fills first
      dup2(got, fd);
      close(got);
    }
  }
}
}  // namespace

int run_main(const char* program, int (*body)(int, char**), int argc, char** argv) {
  g_program = program;
  open_closed_standard_fds();
  try {
    const int rc = body(argc, argv);
    flush_stdout();
    return rc;
  } catch (const std::exception& e) {
    // Messages can quote text from a file: control characters would break the one-line report.
    std::string what = e.what();
    for (char& ch : what) {
      if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7F) ch = ' ';
    }
    std::fflush(stdout);
    std::fprintf(stderr, "%s: error: %s\n", program, what.c_str());
    return 1;
  }
}

}  // namespace tllm
