// Inputs that once broke a check (found by the fuzzers in fuzz/, or by hand), kept in
// tests/hardening/regressions/. Every *.gguf there is read in process the way gguf_fuzz reads it,
// where each failure must be one of the library's error types with a one-line message that starts
// with the file's path, and run through `tiny_llm inspect` and `tiny_llm generate`, which must fail
// cleanly (inspect may exit 0 for a file that is valid GGUF, see expect_inspect_outcome).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <memory>

#include "hardening/hardening_util.h"
#include "model/chat_template.h"
#include "model/model.h"
#include "model/quants.h"
#include "model/tokenizer.h"

namespace tllm::test {
namespace {

std::vector<std::string> regression_files(const std::string& ext) {
  std::vector<std::string> files;
  const std::filesystem::path dir = std::filesystem::path(TLLM_SOURCE_DIR) / "tests" / "hardening" / "regressions";
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() == ext) files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

void expect_one_line_naming(const std::string& path, const std::exception& e) {
  const std::string msg = e.what();
  EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

TEST(Regressions, GgufFilesAreRejectedCleanlyInProcess) {
  const std::vector<std::string> files = regression_files(".gguf");
  ASSERT_FALSE(files.empty());
  for (const std::string& path : files) {
    SCOPED_TRACE(path);
    std::unique_ptr<GgufFile> f;
    try {
      f = GgufFile::open(path);
    } catch (const GgufError& e) {
      expect_one_line_naming(path, e);
      continue;
    }
    for (const auto& kv : f->metadata()) (void)kv.second.to_string();
    try {
      read_model_config(*f);
    } catch (const ModelError& e) {
      expect_one_line_naming(path, e);
    } catch (const GgufError& e) {
      expect_one_line_naming(path, e);
    }
    std::unique_ptr<Tokenizer> tok;
    try {
      tok = Tokenizer::from_gguf(*f);
    } catch (const TokenizerError& e) {
      EXPECT_EQ(std::string(e.what()).rfind(path + ": ", 0), 0u) << e.what();
    }
    // The chat format takes its token texts from the tokenizer, so it is read only with one.
    if (tok) {
      try {
        detect_chat_format(*f, *tok, "");
      } catch (const ChatTemplateError& e) {
        EXPECT_EQ(std::string(e.what()).rfind(path + ": ", 0), 0u) << e.what();
      }
    }
    for (const TensorInfo& t : f->tensors()) {
      if (can_dequantize(t.type) && t.bytes <= (size_t(1) << 20)) (void)dequantize_tensor(t);
    }
  }
}

TEST(Regressions, GgufFilesFailTheProgramsCleanly) {
  const std::vector<std::string> files = regression_files(".gguf");
  std::vector<std::vector<std::string>> commands;
  for (const std::string& path : files) {
    commands.push_back(inspect_command(path));
    commands.push_back(generate_command(path));
    commands.push_back(inspect_command(path, true));
  }
  const std::vector<RunResult> r = run_all(commands);
  for (size_t i = 0; i < files.size(); ++i) {
    SCOPED_TRACE(files[i]);
    EXPECT_EQ(expect_inspect_outcome(r[3 * i + 2], files[i], true), expect_inspect_outcome(r[3 * i], files[i]));
    expect_clean_failure(r[3 * i + 1], "tiny_llm", {files[i]});
  }
}

}  // namespace
}  // namespace tllm::test
