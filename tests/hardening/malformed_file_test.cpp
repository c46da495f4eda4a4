// Malformed GGUF files made from the valid tiny model: truncated at every header field boundary (and
// one byte into each field) and every 1 KiB of the file, and with each kind of header field
// corrupted. Each file goes through `tiny_llm inspect FILE` and `tiny_llm generate -m FILE ...` as
// child processes (10 s and 4 GiB address space each), which must fail with exit code 1 and one
// line on stderr naming the file and the problem, never a signal, a hang or a runaway allocation.
//
// `inspect` exits 0 for a file that is valid GGUF but not a runnable model (it prints the model
// check's verdict on stdout instead); expect_inspect_outcome decides which applies by opening the
// file in this process.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <set>

#include "hardening/hardening_util.h"
#include "model/gguf.h"

namespace tllm::test {
namespace {

constexpr uint64_t kHuge = uint64_t(1) << 40;

// Runs inspect (as a table and with --json) and generate on every path; checks inspect against the
// reader and generate for a clean failure holding the path and the case's needle. Returns the paths
// that opened as GGUF (inspect exits 0 for those).
struct Case {
  std::string path;
  std::string needle;  // expected in generate's message ("" = only the path)
};

std::set<std::string> run_cases(const std::vector<Case>& cases) {
  std::vector<std::vector<std::string>> commands;
  for (const Case& c : cases) {
    commands.push_back(inspect_command(c.path));
    commands.push_back(generate_command(c.path));
    commands.push_back(inspect_command(c.path, true));
  }
  const std::vector<RunResult> results = run_all(commands);
  std::set<std::string> opened;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    SCOPED_TRACE(c.path);
    const RunResult& inspect = results[3 * i];
    const RunResult& generate = results[3 * i + 1];
    const bool valid_gguf = expect_inspect_outcome(inspect, c.path);
    EXPECT_EQ(expect_inspect_outcome(results[3 * i + 2], c.path, true), valid_gguf);
    if (valid_gguf) opened.insert(c.path);
    std::vector<std::string> needles = {c.path};
    if (!c.needle.empty()) needles.push_back(c.needle);
    expect_clean_failure(generate, "tiny_llm", needles);
    // A file the reader rejects fails the same way whatever the command.
    if (!valid_gguf) {
      EXPECT_EQ(generate.err, inspect.err);
    }
  }
  return opened;
}

TEST(MalformedFile, TheBaseModelRuns) {
  const std::string& path = base_model_path();
  const std::vector<RunResult> r = run_all({inspect_command(path), generate_command(path)});
  expect_success(r[0]);
  EXPECT_TRUE(expect_inspect_outcome(r[0], path));
  EXPECT_NE(r[0].out.find("model: qwen2, 2 layers"), std::string::npos) << r[0].describe();
  expect_success(r[1]);
  EXPECT_EQ(r[1].err, "") << r[1].describe();
}

TEST(MalformedFile, TruncatedAnywhere) {
  const std::vector<uint8_t> bytes = read_bytes(base_model_path());
  const std::vector<GgufField> fields = gguf_fields(bytes);
  // The file is valid again once every tensor's bytes are there (the writer may pad the end).
  size_t data_end = 0;
  {
    auto f = GgufFile::open(base_model_path());
    for (const TensorInfo& t : f->tensors()) {
      data_end = std::max(data_end, size_t(t.data - f->tensors()[0].data) + t.bytes);
    }
    data_end += find_field(fields, "data section").offset;
  }
  ASSERT_LE(data_end, bytes.size());

  std::set<size_t> cuts = {0, 1, 3};
  for (const GgufField& f : fields) {
    cuts.insert(f.offset);
    if (f.size > 1) cuts.insert(f.offset + 1);
  }
  for (size_t at = 1024; at < bytes.size(); at += 1024) cuts.insert(at);
  cuts.insert(data_end - 1);

  ScratchDir dir;
  std::vector<Case> cases;
  for (size_t at : cuts) {
    if (at >= data_end) continue;
    const std::string path = dir.file("truncated-" + std::to_string(at) + ".gguf");
    write_bytes(path, std::vector<uint8_t>(bytes.begin(), bytes.begin() + long(at)));
    cases.push_back({path, at == 0 ? "empty file" : ""});
  }
  EXPECT_GT(cases.size(), 300u);
  std::printf("%zu truncated files\n", cases.size());
  EXPECT_EQ(run_cases(cases).size(), 0u) << "a truncated file opened";
}

struct Corruption {
  std::string name;    // file name
  std::string field;   // GgufField::what
  uint64_t value;      // written little-endian over the field's first `size` bytes
  std::string needle;  // expected in generate's message
  size_t size = 0;     // bytes written; 0: the whole field (8 at most)
};

TEST(MalformedFile, CorruptedHeaderFields) {
  const std::vector<uint8_t> base = read_bytes(base_model_path());
  const std::vector<GgufField> fields = gguf_fields(base);
  uint64_t n_tensors = 0, n_kv = 0, q_offset = 0;
  {
    auto f = GgufFile::open(base_model_path());
    n_tensors = f->tensors().size();
    n_kv = f->metadata().size();
    q_offset = f->find_tensor("blk.0.attn_q.weight")->offset;
  }
  const uint64_t key0_len = std::string("general.architecture").size();
  const std::string q = "tensor 'blk.0.attn_q.weight'";
  const std::vector<Corruption> corruptions = {
      {"magic", "magic", 0x58554747 /* "GGUX" */, "not a GGUF file (bad magic)"},
      {"version-1", "version", 1, "GGUF version 1 is not supported"},
      {"version-4", "version", 4, "unsupported GGUF version 4"},
      {"version-big-endian", "version", 0x03000000, "big-endian"},
      {"n-tensors-huge", "n_tensors", kHuge << 20, "implausible tensor count"},
      {"n-tensors-zero", "n_tensors", 0, "missing tensor 'token_embd.weight'"},
      {"n-tensors-plus-one", "n_tensors", n_tensors + 1, ""},
      {"n-kv-huge", "n_kv", kHuge << 20, "implausible metadata count"},
      {"n-kv-zero", "n_kv", 0, ""},
      {"n-kv-minus-one", "n_kv", n_kv - 1, ""},
      {"n-kv-plus-one", "n_kv", n_kv + 1, ""},
      {"key-length-zero", "key 0 length", 0, "has an empty key"},
      {"key-length-huge", "key 0 length", kHuge, "truncated"},
      {"key-length-short", "key 0 length", key0_len - 1, ""},
      {"key-renamed", "key 0 bytes", 0x5f5f5f5f /* "____" */, "missing metadata key 'general.architecture'", 4},
      {"string-length-huge", "string of 'general.name' length", kHuge, "truncated"},
      {"string-length-long", "string of 'general.name' length", 100, ""},
      {"value-type-unknown", "value type of 'general.name'", 99, "unknown value type 99"},
      {"value-type-string", "value type of 'qwen2.block_count'", 8, ""},
      {"value-type-array", "value type of 'qwen2.embedding_length'", 9, ""},
      {"value-type-u64", "value type of 'qwen2.context_length'", 10, ""},
      {"element-type-unknown", "element type of 'tokenizer.ggml.tokens'", 99, "unknown element type 99"},
      {"element-type-string", "element type of 'tokenizer.ggml.token_type'", 8, ""},
      {"element-type-u8", "element type of 'tokenizer.ggml.token_type'", 0, ""},
      {"array-length-huge", "array length of 'tokenizer.ggml.tokens'", kHuge, "does not fit"},
      {"array-length-short", "array length of 'tokenizer.ggml.tokens'", 271, ""},
      {"array-length-huge-ints", "array length of 'tokenizer.ggml.token_type'", kHuge << 20, "does not fit"},
      {"array-string-length-huge", "element 0 of 'tokenizer.ggml.tokens' length", kHuge, "truncated"},
      {"bool-two", "value of 'tokenizer.ggml.add_bos_token'", 2, "neither 0 nor 1"},
      {"n-dims-zero", "n_dims of tensor 'token_embd.weight'", 0, "has 0 dimensions"},
      {"n-dims-five", "n_dims of " + q, 5, "has 5 dimensions"},
      {"dim-zero", "dim 0 of " + q, 0, "dimension 0 is 0"},
      {"dim-huge", "dim 1 of tensor 'token_embd.weight'", kHuge << 20, ""},
      {"dim-overflow", "dim 1 of " + q, uint64_t(1) << 62, "overflows"},
      {"dim-not-whole-blocks", "dim 0 of " + q, 65, "not a multiple of the Q5_0 block size"},
      {"dim-smaller", "dim 1 of " + q, 32, "tensor 'blk.0.attn_q.weight' has shape {64, 32}, expected {64, 64}"},
      {"tensor-type-unknown", "type of " + q, 99, "unknown type 99"},
      {"tensor-type-unsupported", "type of " + q, 27, "I64 (27), which is not supported"},
      // F32 (256 bytes) to Q8_1 (72 bytes): still inside its slot, but the loader cannot read Q8_1.
      {"tensor-type-no-dequant", "type of tensor 'blk.0.ffn_norm.weight'", 9, "unsupported type Q8_1"},
      {"tensor-type-bigger", "type of tensor 'token_embd.weight'", 0, ""},
      {"tensor-name-length", "tensor 3 name length", 65, "bytes long"},
      {"tensor-name-duplicate", "tensor 2 name bytes", 0x312e6b6c62 /* "blk.1" */, "duplicate tensor name", 5},
      {"offset-misaligned", "offset of " + q, q_offset + 1, "is not a multiple of the alignment"},
      {"offset-past-end", "offset of tensor 'output_norm.weight'", kHuge, "extends past the end of the file"},
      {"offset-overlap", "offset of " + q, 0, "overlap"},
  };

  ScratchDir dir;
  std::vector<Case> cases;
  for (const Corruption& c : corruptions) {
    const GgufField f = find_field(fields, c.field);
    ASSERT_GT(f.size, 0u) << c.name;
    std::vector<uint8_t> bytes = base;
    const size_t n = c.size ? c.size : std::min<size_t>(f.size, 8);
    ASSERT_LE(n, f.size) << c.name;
    std::memcpy(bytes.data() + f.offset, &c.value, n);
    const std::string path = dir.file(c.name + ".gguf");
    write_bytes(path, bytes);
    cases.push_back({path, c.needle});
  }
  // These corruptions leave a well-formed GGUF file that is not a runnable model: inspect prints
  // it (exit code 0) and generate fails. Every other one is rejected by the reader.
  const std::set<std::string> expected_valid = {dir.file("n-tensors-zero.gguf"), dir.file("key-renamed.gguf"),
                                                dir.file("dim-smaller.gguf"), dir.file("tensor-type-no-dequant.gguf")};
  EXPECT_EQ(run_cases(cases), expected_valid);
}

}  // namespace
}  // namespace tllm::test
