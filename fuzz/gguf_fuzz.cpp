// Fuzz target: a GGUF file of arbitrary bytes, opened and then read the way the programs read a
// model before allocating anything: GgufFile::open, every metadata value printed (inspect),
// read_model_config, Tokenizer::from_gguf (then a short encode/decode), detect_chat_format, and
// every tensor's bytes dequantised (tensors up to kMaxDequantBytes).
//
// The input is written to a memfd and opened through /proc/self/fd, so the reader runs unchanged
// (open, fstat, mmap) without touching the disk. A failure must be one of the library's error types
// (GgufError, ModelError, TokenizerError, ChatTemplateError) with a message that starts with the
// file's path (and is one line, for the reader and the model checks); anything else (another
// exception, a crash, a sanitizer report) is a finding.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "model/chat_template.h"
#include "model/gguf.h"
#include "model/model.h"
#include "model/quants.h"
#include "model/tokenizer.h"

namespace {

constexpr size_t kMaxDequantBytes = size_t(1) << 20;

// One memfd, rewritten for every input.
class MemFile {
 public:
  MemFile() {
    fd_ = memfd_create("gguf_fuzz", MFD_CLOEXEC);
    if (fd_ < 0) {
      std::perror("memfd_create");
      std::abort();
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  void set(const uint8_t* data, size_t size) {
    if (ftruncate(fd_, 0) != 0) std::abort();
    size_t done = 0;
    while (done < size) {
      const ssize_t n = pwrite(fd_, data + done, size - done, off_t(done));
      if (n <= 0) std::abort();
      done += size_t(n);
    }
  }
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

// A user-facing error message names the file first and (one_line) has no line break. The
// tokenizer and chat-template loaders quote file text as it is, so only the name is required of
// them; the programs print every message with control characters blanked.
void check_message(const std::string& path, const char* what, bool one_line = true) {
  const std::string msg = what;
  if (msg.rfind(path + ": ", 0) != 0 || (one_line && msg.find('\n') != std::string::npos)) {
    std::fprintf(stderr, "badly formed error message: %s\n", msg.c_str());
    std::abort();
  }
}

void read_everything(const tllm::GgufFile& f) {
  using namespace tllm;
  const std::string& path = f.path();
  size_t printed = 0;
  for (const auto& kv : f.metadata()) printed += kv.second.to_string().size();
  for (const TensorInfo& t : f.tensors()) printed += t.name.size() + t.dims.size();
  (void)printed;

  try {
    const ModelConfig c = read_model_config(f);
    // What the loader would size from the file must be computable without overflow traps.
    LoadOptions opt;
    static const std::unique_ptr<Backend> cpu = create_backend("cpu");
    (void)Model::footprint(c, opt, *cpu).total();
  } catch (const ModelError& e) {
    check_message(path, e.what());
  } catch (const GgufError& e) {
    check_message(path, e.what());
  }

  std::unique_ptr<Tokenizer> tok;
  try {
    tok = Tokenizer::from_gguf(f);
    const std::vector<int32_t> ids = tok->encode("Hello, world! 123 <|im_end|>\xe4\xbd\xa0", true);
    (void)tok->decode(ids);
  } catch (const TokenizerError& e) {
    check_message(path, e.what(), /*one_line=*/false);
  }

  // The chat format takes its token texts from the tokenizer, so it is read only with one.
  if (tok) {
    try {
      (void)detect_chat_format(f, *tok, "");
    } catch (const ChatTemplateError& e) {
      check_message(path, e.what(), /*one_line=*/false);
    }
  }

  std::vector<float> out;
  for (const TensorInfo& t : f.tensors()) {
    if (!can_dequantize(t.type) || t.bytes > kMaxDequantBytes) continue;
    out.resize(size_t(t.n_elements()));
    dequantize_row(t.type, t.data, out.data(), t.n_elements());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static MemFile file;
  file.set(data, size);
  std::unique_ptr<tllm::GgufFile> f;
  try {
    f = tllm::GgufFile::open(file.path());
  } catch (const tllm::GgufError& e) {
    check_message(file.path(), e.what());
    return 0;
  }
  read_everything(*f);
  return 0;
}
