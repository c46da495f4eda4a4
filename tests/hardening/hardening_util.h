// Shared by the hardening tests: a scratch folder, the valid base model, a map of where each header
// field of a GGUF file lies (to truncate or corrupt it precisely), a rewriter that copies a model
// with edits (keys dropped or replaced, tensors dropped, reshaped or retyped), and the expectation
// for `tiny_llm inspect` on any file.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "hardening/subprocess.h"
#include "model/gguf.h"

namespace tllm::test {

// A folder under the system temp directory, removed with everything in it when the object dies.
class ScratchDir {
 public:
  ScratchDir();
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  std::string file(const std::string& name) const { return dir_ + "/" + name; }

 private:
  std::string dir_;
};

std::vector<uint8_t> read_bytes(const std::string& path);
void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes);
void write_text(const std::string& path, const std::string& text);

// The valid base model (tiny_test_model(): qwen2, 2 layers, n_embd 64, 272 tokens, about 110 KB),
// written once per test process; returns its path.
const std::string& base_model_path();

// One field of a GGUF header: what it is, where it starts, how many bytes it takes.
struct GgufField {
  std::string what;  // "n_kv", "key 3 length", "type of tensor 'blk.0.attn_q.weight'", ...
  size_t offset = 0;
  size_t size = 0;
};
// Every field of a valid file's header, in file order, then "data section" (the first tensor byte).
// String arrays longer than 4 entries list only their first two and last elements.
std::vector<GgufField> gguf_fields(const std::vector<uint8_t>& bytes);
// The first field whose `what` equals `what` exactly; fails the test when there is none.
GgufField find_field(const std::vector<GgufField>& fields, const std::string& what);

// A copy of a model with edits, written with GgufWriter.
struct ModelEdit {
  std::set<std::string> drop_keys;
  std::map<std::string, GgufValue> set_keys;            // replaced in place, or appended
  std::set<std::string> drop_tensors;
  std::map<std::string, std::vector<int64_t>> reshape;  // new dims; the data is zeros
  std::map<std::string, GgmlType> retype;               // new type; the data is zeros
  // Tensors appended after the others: name -> (type, dims); the data is zeros.
  std::map<std::string, std::pair<GgmlType, std::vector<int64_t>>> add_tensors;
  // F32 tensors, of the file or added, written with these values (as many as the tensor holds).
  std::map<std::string, std::vector<float>> f32_values;
  // F32 tensors of the file written with every value multiplied by the factor.
  std::map<std::string, float> f32_scale;
};
void write_edited(const GgufFile& src, const std::string& path, const ModelEdit& edit);

GgufValue u32_value(uint32_t v);
GgufValue i32_value(int32_t v);
GgufValue u64_value(uint64_t v);
GgufValue f32_value(float v);
GgufValue string_value(const std::string& v);
GgufValue string_array_value(const std::vector<std::string>& v);
GgufValue i32_array_value(const std::vector<int32_t>& v);

// `tiny_llm inspect FILE [--json]` on any file: when the reader rejects the file, exit code 1 and
// stderr is exactly "tiny_llm: error: <the reader's message>"; when it opens (a valid GGUF file),
// exit code 0, nothing on stderr, and the model check's verdict on stdout ("not a runnable model:
// <message>" when read_model_config rejects it; with --json, JSON whose "model" is null and whose
// "not_runnable" is that message, and whose metadata and tensors are the reader's). Returns whether
// the file opened.
bool expect_inspect_outcome(const RunResult& r, const std::string& path, bool json = false);

// The commands every malformed file is run with.
std::vector<std::string> inspect_command(const std::string& path, bool json = false);
std::vector<std::string> generate_command(const std::string& path);

}  // namespace tllm::test
