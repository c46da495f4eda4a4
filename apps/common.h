// What the programs in apps/ share: loading a model onto a backend with progress, the default
// backend and model, one-line error reporting, and the facts a report must record.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "backend/backend.h"
#include "model/gguf.h"
#include "model/model.h"
#include "model/tokenizer.h"

namespace CLI {
class App;
}

namespace tllm {

const char* build_commit();  // generated at build time (cmake/BuildInfo.cmake)

// The device line of a benchmark's header: name | driver | runtime | [multiprocessors |] nominal
// bandwidth, with "-" for what the backend does not know. The CPU backend's name carries its thread
// count, so `multiprocessors` is printed as SMs only for a GPU backend.
std::string device_summary(const DeviceInfo& dev, bool gpu);

// The same facts for --json: name, driver, runtime, multiprocessors, peak_bandwidth_gbs, with null
// where device_summary prints "-" or leaves the field out.
nlohmann::json device_json(const DeviceInfo& dev, bool gpu);

// --json output, indented; bytes that are not UTF-8 (a file's strings, a path) become U+FFFD
// instead of an error.
std::string json_text(const nlohmann::json& j);

// An error a user caused (bad option, unusable file); main prints its message on one line, exit 1.
class AppError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// "cuda" when a CUDA device is visible in this build, otherwise "cpu".
std::string default_backend_name();

struct LoadedModel {
  std::unique_ptr<GgufFile> file;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
};

struct ModelRequest {
  std::string path;
  std::string backend = "auto";  // "auto", "cpu" or "cuda"
  int n_ctx = 4096;
  bool n_ctx_given = false;      // --ctx was on the command line: note on stderr when the model caps it
  int max_batch = 512;
  bool graphs = true;            // CUDA Graph decode where the backend supports it
  bool quiet = false;            // no progress on stderr
  bool need_tokenizer = true;
  RopeScalingOverride rope;      // --rope-scaling, --rope-scale, --yarn-orig-ctx (add_rope_options)
};

// Opens the file, creates the backend, checks the model fits (sizes in the message when not),
// uploads the weights with progress on stderr, and loads the tokenizer. A --ctx above the model's
// trained context is capped there, with a note on stderr unless quiet.
LoadedModel load_model(const ModelRequest& req);

// Tokenizer::from_gguf, with a warning on stderr when a byte-level BPE file names no pre-tokenizer.
std::unique_ptr<Tokenizer> load_tokenizer(const GgufFile& f);

// The tokens of a prompt that starts a context: a BOS first when the tokenizer asks for one
// (tokenizer.ggml.add_bos_token) and the text does not already begin with it.
std::vector<int32_t> encode_prompt(const Tokenizer& tok, const std::string& text, bool parse_special);

// What a user can do about a prompt that does not fit `model`'s context: raise --ctx, up to the
// trained context, or, once --ctx is there, shorten the prompt.
std::string context_advice(const Model& model);

// Checks, before any work, that `path` (the value of `option`) can be written: not empty, not a
// folder, in a folder that exists and is writable, and writable itself if it exists. With
// `regular_only`, an existing file that is not a regular file (a device, a pipe) is refused too.
void check_output_path(const std::string& path, const std::string& option, bool regular_only);

// A warning on stderr, one line: "<program>: warning: <what>".
void warn(const std::string& what);

// The synthetic Qwen2.5-0.5B-Instruct Q4_K_M model used when a benchmark names no model: written
// once into the cache folder ($TINY_LLM_CACHE, else $XDG_CACHE_HOME/tiny-llm, else ~/.cache/tiny-llm)
// and reused. Returns its path.
std::string default_bench_model(bool quiet);

// Prints a progress line on stderr ("\r<label> 42%"), throttled; finishes the line at 100%.
class Progress {
 public:
  Progress(std::string label, bool quiet);
  void update(size_t done, size_t total);

 private:
  std::string label_;
  bool quiet_;
  bool tty_;
  int last_percent_ = -1;
};

// Runs `body` and turns every failure into a one-line message on stderr and exit code 1. Before
// it, a closed stdin, stdout or stderr is opened on /dev/null, so that no file the program opens
// takes its number; after it, output that could not be written is such a failure.
int run_main(const char* program, int (*body)(int, char**), int argc, char** argv);

// Flushes stdout; throws AppError("writing the output failed: <reason>") when it or an earlier
// write to it failed.
void flush_stdout();

// Parses argv with CLI11: --help prints help and returns 0; a parse error prints one line
// ("<program>: error: <what>; see --help") and returns 1; -1 means parsing succeeded.
int parse_cli(CLI::App& app, int argc, char** argv);

// --rope-scaling, --rope-scale and --yarn-orig-ctx, as llama.cpp names them: rope scaling over the
// file's (RopeScalingOverride).
void add_rope_options(CLI::App* app, RopeScalingOverride& rope);

}  // namespace tllm
