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
  int max_batch = 512;
  bool graphs = true;            // CUDA Graph decode where the backend supports it
  bool quiet = false;            // no progress on stderr
  bool need_tokenizer = true;
};

// Opens the file, creates the backend, checks the model fits (sizes in the message when not),
// uploads the weights with progress on stderr, and loads the tokenizer.
LoadedModel load_model(const ModelRequest& req);

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

// Runs `body` and turns every failure into a one-line message on stderr and exit code 1.
int run_main(const char* program, int (*body)(int, char**), int argc, char** argv);

// Parses argv with CLI11: --help prints help and returns 0; a parse error prints one line
// ("<program>: error: <what>; see --help") and returns 1; -1 means parsing succeeded.
int parse_cli(CLI::App& app, int argc, char** argv);

}  // namespace tllm
