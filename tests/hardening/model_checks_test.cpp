// Model-level checks: files that are valid GGUF but not a usable model, made by rewriting the tiny
// model with one thing wrong (a key missing, of the wrong type or out of range; a tensor missing or
// mis-shaped; the vocabulary not matching the embedding; a special token id out of range; malformed
// merges; an unusable tokenizer). Each must be rejected
//   - in process, by the stage that owns the check (read_model_config, Model::load before it
//     allocates anything on the backend, or Tokenizer::from_gguf), with a message naming the file;
//   - by `tiny_llm generate` (exit code 1, one line naming the file and the problem), while
//     `tiny_llm inspect` prints the file and exits 0 (with "not a runnable model: ..." when
//     read_model_config rejects it).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>

#include "backend/backend.h"
#include "hardening/hardening_util.h"
#include "logits_util.h"
#include "model/model.h"
#include "model/synth.h"
#include "model/tokenizer.h"

namespace tllm::test {
namespace {

enum class Stage { Config, Load, Tokenizer };

struct ModelCase {
  std::string name;
  ModelEdit edit;
  Stage stage;
  std::string needle;
};

ModelEdit set_key(const std::string& key, const GgufValue& v) {
  ModelEdit e;
  e.set_keys[key] = v;
  return e;
}

ModelEdit drop_key(const std::string& key) {
  ModelEdit e;
  e.drop_keys.insert(key);
  return e;
}

ModelEdit drop_tensor(const std::string& name) {
  ModelEdit e;
  e.drop_tensors.insert(name);
  return e;
}

ModelEdit reshape(const std::string& name, std::vector<int64_t> dims) {
  ModelEdit e;
  e.reshape[name] = std::move(dims);
  return e;
}

// A merge list that is valid apart from `bad` at index 1.
ModelEdit merges_with(const std::string& bad) {
  return set_key("tokenizer.ggml.merges", string_array_value({"\xc4\xa0 t", bad, "h e"}));
}

std::vector<ModelCase> model_cases(const GgufFile& base) {
  const std::vector<std::string> tokens = base.get_string_array("tokenizer.ggml.tokens");
  const std::vector<int64_t> types64 = base.get_int_array("tokenizer.ggml.token_type");
  const std::vector<int32_t> types(types64.begin(), types64.end());
  const size_t n = tokens.size();
  const std::string nv = std::to_string(n);
  const std::string a = "qwen2.";

  std::vector<ModelCase> c;
  auto add = [&](std::string name, ModelEdit e, Stage s, std::string needle) {
    c.push_back({std::move(name), std::move(e), s, std::move(needle)});
  };

  // Hyper-parameters.
  add("no-architecture", drop_key("general.architecture"), Stage::Config, "missing metadata key 'general.architecture'");
  add("architecture-u32", set_key("general.architecture", u32_value(2)), Stage::Config,
      "key 'general.architecture' has type u32, expected string");
  add("architecture-unknown", set_key("general.architecture", string_value("gptj")), Stage::Config,
      "unsupported architecture 'gptj'");
  add("architecture-newline", set_key("general.architecture", string_value("qw\nen2")), Stage::Config,
      "unsupported architecture 'qw\\x0aen2'");
  for (const char* k : {"block_count", "embedding_length", "feed_forward_length", "attention.head_count",
                        "context_length"}) {
    add(std::string("no-") + k, drop_key(a + k), Stage::Config, "missing metadata key '" + a + k + "'");
    add(std::string("zero-") + k, set_key(a + k, u32_value(0)), Stage::Config, "'" + a + k + "' = 0 is out of range");
    add(std::string("negative-") + k, set_key(a + k, i32_value(-1)), Stage::Config,
        "'" + a + k + "' = -1 is out of range");
  }
  add("zero-head_count_kv", set_key(a + "attention.head_count_kv", u32_value(0)), Stage::Config,
      "'qwen2.attention.head_count_kv' = 0 is out of range");
  add("huge-block_count", set_key(a + "block_count", u64_value(uint64_t(1) << 40)), Stage::Config,
      "= 1099511627776 is out of range");
  add("huge-embedding_length", set_key(a + "embedding_length", u32_value(1u << 20)), Stage::Config,
      "= 1048576 is out of range");
  add("huge-context_length", set_key(a + "context_length", u64_value(~uint64_t(0))), Stage::Config,
      "does not fit in int64");
  add("block_count-string", set_key(a + "block_count", string_value("2")), Stage::Config,
      "key 'qwen2.block_count' has type string, expected an integer");
  add("block_count-f32", set_key(a + "block_count", f32_value(2.0f)), Stage::Config,
      "key 'qwen2.block_count' has type f32, expected an integer");
  add("kv-heads-not-dividing", set_key(a + "attention.head_count_kv", u32_value(3)), Stage::Config,
      "head_count_kv = 3 does not divide head_count = 4");
  add("width-not-multiple-of-heads", set_key(a + "attention.head_count", u32_value(6)), Stage::Config,
      "embedding_length = 64 is not a multiple of head_count = 6");
  add("head-dim-one", set_key(a + "attention.head_count", u32_value(64)), Stage::Config, "head dimension 1");
  // Heads as wide as attention.key_length says (the base model's are n_embd / n_head = 16 wide).
  add("key-length-without-value-length", set_key(a + "attention.key_length", u32_value(32)),
      Stage::Config,
      "value heads are 16 wide (embedding_length / head_count, without "
      "'qwen2.attention.value_length') but key heads 32 (metadata 'qwen2.attention.key_length'); "
      "heads whose values and keys differ in width are not supported");
  add("value-length-other-than-head-dim", set_key(a + "attention.value_length", u32_value(8)),
      Stage::Config,
      "value heads are 8 wide (metadata 'qwen2.attention.value_length') but key heads 16 "
      "(embedding_length / head_count, without 'qwen2.attention.key_length')");
  const auto head_width = [&](uint32_t key, uint32_t value, uint32_t rope) {
    ModelEdit e = set_key(a + "attention.key_length", u32_value(key));
    e.set_keys[a + "attention.value_length"] = u32_value(value);
    e.set_keys[a + "rope.dimension_count"] = u32_value(rope);
    return e;
  };
  add("value-length-other-than-key-length", head_width(32, 16, 32), Stage::Config,
      "value heads are 16 wide (metadata 'qwen2.attention.value_length') but key heads 32 "
      "(metadata 'qwen2.attention.key_length')");
  add("key-length-zero", set_key(a + "attention.key_length", u32_value(0)), Stage::Config,
      "metadata 'qwen2.attention.key_length' = 0 is out of range");
  add("key-length-odd", head_width(15, 15, 15), Stage::Config,
      "head dimension 15 is not supported (even, at most 256)");
  add("key-length-over-256", head_width(512, 512, 512), Stage::Config,
      "head dimension 512 is not supported (even, at most 256)");
  add("key-length-partial-rope", head_width(32, 32, 16), Stage::Config,
      "partial rotary embeddings (rope.dimension_count = 16, head dimension 32) are not supported");
  add("partial-rope", set_key(a + "rope.dimension_count", u32_value(8)), Stage::Config, "partial rotary");
  add("rope-theta-zero", set_key(a + "rope.freq_base", f32_value(0.0f)), Stage::Config, "rope.freq_base must be > 1");
  add("rope-theta-nan", set_key(a + "rope.freq_base", f32_value(std::nanf(""))), Stage::Config,
      "rope.freq_base must be > 1");
  add("rope-scaling-longrope", set_key(a + "rope.scaling.type", string_value("longrope")), Stage::Config,
      "rope scaling type 'longrope' is not supported (supported: none, linear, yarn, rope_freqs)");
  {
    ModelEdit e = set_key(a + "rope.scaling.type", string_value("yarn"));
    e.set_keys[a + "rope.scaling.factor"] = f32_value(4.0f);
    e.set_keys[a + "rope.scaling.original_context_length"] = u32_value(0);
    add("yarn-original-context-zero", e, Stage::Config,
        "metadata 'qwen2.rope.scaling.original_context_length' = 0 is out of range");
  }
  add("rope-attn-factor-zero", set_key(a + "rope.scaling.attn_factor", f32_value(0.0f)), Stage::Config,
      "metadata 'qwen2.rope.scaling.attn_factor' = 0 is out of range (expected 0 < value <= 1e3)");
  add("rope-attn-factor-nan", set_key(a + "rope.scaling.attn_factor", f32_value(std::nanf(""))), Stage::Config,
      "metadata 'qwen2.rope.scaling.attn_factor' = nan is out of range");
  add("rope-scaling-factor-negative", set_key(a + "rope.scaling.factor", f32_value(-2.0f)), Stage::Config,
      "metadata 'qwen2.rope.scaling.factor' = -2 is out of range");
  add("rope-scale-linear-nan", set_key(a + "rope.scale_linear", f32_value(std::nanf(""))), Stage::Config,
      "metadata 'qwen2.rope.scale_linear' = nan is out of range");
  {
    ModelEdit e;
    e.add_tensors["rope_freqs.weight"] = {GgmlType::F32, {5}};
    add("rope-freqs-misshaped", e, Stage::Config, "tensor 'rope_freqs.weight' has shape {5}, expected {8}");
    e.add_tensors["rope_freqs.weight"] = {GgmlType::F32, {8}};
    add("rope-freqs-zero", e, Stage::Config, "tensor 'rope_freqs.weight' holds a value that is not finite and > 0");
  }
  add("rms-eps-negative", set_key(a + "attention.layer_norm_rms_epsilon", f32_value(-1.0f)), Stage::Config,
      "layer_norm_rms_epsilon must be in (0, 1]");

  // The embedding and the vocabulary.
  add("no-token-embd", drop_tensor("token_embd.weight"), Stage::Config, "missing tensor 'token_embd.weight'");
  add("token-embd-1d", reshape("token_embd.weight", {64}), Stage::Config,
      "tensor 'token_embd.weight' has shape {64}, expected {64, n_vocab}");
  add("token-embd-narrow", reshape("token_embd.weight", {32, int64_t(n)}), Stage::Config,
      "expected {64, n_vocab}");
  add("vocab-more-rows", reshape("token_embd.weight", {64, int64_t(n) + 28}), Stage::Config,
      "tokenizer.ggml.tokens has " + nv + " entries but token_embd.weight has " + std::to_string(n + 28) + " rows");
  {
    ModelEdit e;
    e.set_keys["tokenizer.ggml.tokens"] = string_array_value({tokens.begin(), tokens.end() - 1});
    e.set_keys["tokenizer.ggml.token_type"] = i32_array_value({types.begin(), types.end() - 1});
    add("vocab-fewer-tokens", e, Stage::Config,
        "tokenizer.ggml.tokens has " + std::to_string(n - 1) + " entries but token_embd.weight has " + nv + " rows");
  }
  add("tokens-ints", set_key("tokenizer.ggml.tokens", i32_array_value(types)), Stage::Config,
      "key 'tokenizer.ggml.tokens' has type array of i32, expected array of string");
  add("token-type-short", set_key("tokenizer.ggml.token_type", i32_array_value({types.begin(), types.end() - 1})),
      Stage::Config, "tokenizer.ggml.token_type has " + std::to_string(n - 1) + " entries for " + nv + " tokens");
  add("token-type-strings", set_key("tokenizer.ggml.token_type", string_array_value(tokens)), Stage::Config,
      "key 'tokenizer.ggml.token_type' has type array of string, expected array of integers");
  add("bos-out-of-range", set_key("tokenizer.ggml.bos_token_id", u32_value(uint32_t(n))), Stage::Config,
      "tokenizer.ggml.bos_token_id = " + nv + " is outside the vocabulary");
  add("eos-negative", set_key("tokenizer.ggml.eos_token_id", i32_value(-5)), Stage::Config,
      "tokenizer.ggml.eos_token_id = -5 is outside the vocabulary");
  add("eot-out-of-range", set_key("tokenizer.ggml.eot_token_id", u32_value(100000)), Stage::Config,
      "tokenizer.ggml.eot_token_id = 100000 is outside the vocabulary");
  add("padding-huge", set_key("tokenizer.ggml.padding_token_id", u64_value(uint64_t(1) << 40)), Stage::Config,
      "tokenizer.ggml.padding_token_id = 1099511627776 is outside the vocabulary");
  add("merge-two-spaces", merges_with("a  b"), Stage::Config, "tokenizer.ggml.merges entry 1 ('a  b')");
  add("merge-no-space", merges_with("ab"), Stage::Config, "tokenizer.ggml.merges entry 1 ('ab')");
  add("merge-leading-space", merges_with(" ab"), Stage::Config, "tokenizer.ggml.merges entry 1 (' ab')");
  add("merge-trailing-space", merges_with("ab "), Stage::Config, "tokenizer.ggml.merges entry 1 ('ab ')");
  add("merge-three-parts", merges_with("a b c"), Stage::Config, "tokenizer.ggml.merges entry 1 ('a b c')");
  add("merge-empty", merges_with(""), Stage::Config, "tokenizer.ggml.merges entry 1 ('')");
  add("merges-ints", set_key("tokenizer.ggml.merges", i32_array_value({1, 2})), Stage::Config,
      "key 'tokenizer.ggml.merges' has type array of i32, expected array of string");

  // Tensors (checked by Model::load before anything is allocated).
  add("no-ffn-down", drop_tensor("blk.1.ffn_down.weight"), Stage::Load, "missing tensor 'blk.1.ffn_down.weight'");
  add("no-output-norm", drop_tensor("output_norm.weight"), Stage::Load, "missing tensor 'output_norm.weight'");
  add("no-k-bias", drop_tensor("blk.0.attn_k.bias"), Stage::Load, "missing tensor 'blk.0.attn_k.bias'");
  add("more-layers-than-tensors", set_key(a + "block_count", u32_value(3)), Stage::Load,
      "missing tensor 'blk.2.attn_norm.weight'");
  add("q-misshaped", reshape("blk.0.attn_q.weight", {64, 32}), Stage::Load,
      "tensor 'blk.0.attn_q.weight' has shape {64, 32}, expected {64, 64}");
  add("q-3d", reshape("blk.0.attn_q.weight", {64, 64, 1}), Stage::Load,
      "tensor 'blk.0.attn_q.weight' has shape {64, 64, 1}, expected {64, 64}");
  add("up-misshaped", reshape("blk.1.ffn_up.weight", {64, 128}), Stage::Load,
      "tensor 'blk.1.ffn_up.weight' has shape {64, 128}, expected {64, 256}");
  add("norm-misshaped", reshape("blk.0.attn_norm.weight", {32}), Stage::Load,
      "tensor 'blk.0.attn_norm.weight' has shape {32}, expected {64}");
  add("v-bias-misshaped", reshape("blk.0.attn_v.bias", {64}), Stage::Load,
      "tensor 'blk.0.attn_v.bias' has shape {64}, expected {32}");
  add("n-ff-mismatch", set_key(a + "feed_forward_length", u32_value(512)), Stage::Load,
      "tensor 'blk.0.ffn_gate.weight' has shape {64, 256}, expected {64, 512}");
  add("kv-heads-mismatch", set_key(a + "attention.head_count_kv", u32_value(4)), Stage::Load,
      "tensor 'blk.0.attn_k.weight' has shape {64, 32}, expected {64, 64}");
  // Heads of key_length 32: q has n_head·32 = 128 rows, the output projection 128 columns.
  add("heads-wider-than-the-tensors", head_width(32, 32, 32), Stage::Load,
      "tensor 'blk.0.attn_q.weight' has shape {64, 64}, expected {64, 128}");
  {
    // Heads 2 wide, every tensor shaped for them: the output projection's rows of n_head·2 = 8
    // values are not whole W8 groups.
    ModelEdit e = head_width(2, 2, 2);
    for (const std::string l : {"blk.0.", "blk.1."}) {
      e.reshape[l + "attn_q.weight"] = {64, 8};
      e.reshape[l + "attn_q.bias"] = {8};
      for (const char* kv : {"attn_k.", "attn_v."}) {
        e.reshape[l + kv + "weight"] = {64, 4};
        e.reshape[l + kv + "bias"] = {4};
      }
      e.reshape[l + "attn_output.weight"] = {8, 64};
      e.retype[l + "attn_output.weight"] = GgmlType::F16;  // rows of 8 values: no whole Q5_0 blocks
    }
    add("heads-not-whole-w8-groups", e, Stage::Load,
        "widths 64/256/8 (n_embd/n_ff/n_head·head_dim) are not multiples of the W8 group size 32");
  }
  {
    ModelEdit e;
    e.retype["blk.0.attn_output.weight"] = GgmlType::Q8_1;
    add("type-without-dequantisation", e, Stage::Load, "tensor 'blk.0.attn_output.weight' has unsupported type Q8_1");
  }
  {
    ModelEdit e;
    e.add_tensors["output.weight"] = {GgmlType::F16, {64, 100}};
    add("output-misshaped", e, Stage::Load, "tensor 'output.weight' has shape {64, 100}, expected {64, " + nv + "}");
  }
  // A tensor the forward pass would not read (rope_freqs.weight, which it does, runs: see
  // CliBehaviour.ModelsWithRopeFrequencyFactorsStillLoad).
  for (const std::string extra : {"blk.0.attn_output.bias", "blk.1.ffn_down.bias", "blk.2.attn_q.weight"}) {
    ModelEdit e;
    e.add_tensors[extra] = {GgmlType::F32, {64}};
    add("unused-" + extra, e, Stage::Load, "tensor '" + extra + "' is not used by the qwen2 forward pass");
  }

  // The tokenizer itself.
  add("no-tokenizer-model", drop_key("tokenizer.ggml.model"), Stage::Tokenizer, "missing tokenizer.ggml.model");
  add("tokenizer-t5", set_key("tokenizer.ggml.model", string_value("t5")), Stage::Tokenizer,
      "tokenizer.ggml.model is 't5'; supported: 'gpt2' (byte-level BPE) and 'llama' (SentencePiece BPE)");
  add("tokenizer-llama-no-scores", set_key("tokenizer.ggml.model", string_value("llama")), Stage::Tokenizer,
      "missing tokenizer.ggml.scores");
  add("tokenizer-model-u32", set_key("tokenizer.ggml.model", u32_value(1)), Stage::Tokenizer,
      "key 'tokenizer.ggml.model' has type u32, expected string");
  add("pre-unknown", set_key("tokenizer.ggml.pre", string_value("bogus")), Stage::Tokenizer,
      "tokenizer.ggml.pre 'bogus' is not supported");
  add("no-merges", drop_key("tokenizer.ggml.merges"), Stage::Tokenizer, "missing tokenizer.ggml.merges");
  {
    ModelEdit e = drop_key("tokenizer.ggml.tokens");
    e.drop_keys.insert("tokenizer.ggml.token_type");
    add("no-tokens", e, Stage::Tokenizer, "missing tokenizer.ggml.tokens");
  }
  {
    // Most byte tokens renamed: not a byte-level vocabulary (ids 0..255 are the byte tokens).
    std::vector<std::string> t = tokens;
    for (size_t i = 0; i < 200; ++i) t[i] = "[R" + std::to_string(i) + "]";
    add("no-byte-tokens", set_key("tokenizer.ggml.tokens", string_array_value(t)), Stage::Tokenizer,
        "of the 256 bytes; not a byte-level BPE vocabulary");
  }
  add("add-bos-u32", set_key("tokenizer.ggml.add_bos_token", u32_value(1)), Stage::Tokenizer,
      "key 'tokenizer.ggml.add_bos_token' has type u32, expected bool");
  return c;
}

TEST(ModelChecks, AnUneditedRewriteRuns) {
  auto base = GgufFile::open(base_model_path());
  ScratchDir dir;
  const std::string path = dir.file("rewritten.gguf");
  write_edited(*base, path, merges_with("Hel lo"));
  const std::vector<RunResult> r = run_all({inspect_command(path), generate_command(path)});
  expect_success(r[0]);
  EXPECT_TRUE(expect_inspect_outcome(r[0], path));
  expect_success(r[1]);
}

// Linear rope scaling as llama.cpp reads it: the factor divides every frequency, with type linear
// or with no type; type none turns it off.
TEST(ModelChecks, LinearRopeScalingIsRead) {
  auto base = GgufFile::open(base_model_path());
  ScratchDir dir;
  const std::string a = "qwen2.";
  struct Case {
    ModelEdit edit;
    std::vector<float> factors;
    std::string scaling;
  };
  ModelEdit linear = set_key(a + "rope.scaling.type", string_value("linear"));
  linear.set_keys[a + "rope.scaling.factor"] = f32_value(4.0f);
  ModelEdit none = linear;
  none.set_keys[a + "rope.scaling.type"] = string_value("none");
  const std::vector<Case> cases = {{linear, std::vector<float>(8, 4.0f), "linear"},
                                   {set_key(a + "rope.scale_linear", f32_value(2.0f)), std::vector<float>(8, 2.0f), "linear"},
                                   {none, {}, ""}};
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string path = dir.file("scaling" + std::to_string(i) + ".gguf");
    write_edited(*base, path, cases[i].edit);
    const ModelConfig c = read_model_config(*GgufFile::open(path));
    EXPECT_EQ(c.rope_freq_factors, cases[i].factors) << "case " << i;
    EXPECT_EQ(c.rope_scaling, cases[i].scaling) << "case " << i;
  }
}

// The keys of a YaRN file of the base model: rope.scaling.type yarn, the factor and, where not 0,
// the original context.
ModelEdit yarn_keys(float factor, uint32_t original) {
  ModelEdit e = set_key("qwen2.rope.scaling.type", string_value("yarn"));
  e.set_keys["qwen2.rope.scaling.factor"] = f32_value(factor);
  if (original) e.set_keys["qwen2.rope.scaling.original_context_length"] = u32_value(original);
  return e;
}

// YaRN as llama.cpp reads it. The base model's heads are 16 wide (8 pairs) with rope theta 1e6; over
// an original context of 64 positions pair j turns 64 / (2 pi 1e6^(j/8)) times: 10.2 for pair 0,
// 1.8 for pair 1, 0.3 for pair 2. So llama.cpp's correction dims are low = 0 (no pair turns 32
// times; the dim where one would is -0.66, floored, clamped to 0) and high = 2 (the dim where a pair
// turns once is 1.34, ceiled): pair 0 keeps its frequency, pair 1 half of it (divisor
// 1 / (0.5 / 4 + 0.5) = 1.6 at factor 4), pairs 2 to 7 are divided by 4. q and k are multiplied by
// 1 + 0.1 ln 4, and by rope.scaling.attn_factor where the file gives one.
TEST(ModelChecks, YarnRopeScalingIsRead) {
  auto base = GgufFile::open(base_model_path());
  ScratchDir dir;
  const std::string a = "qwen2.";
  const auto yarn = yarn_keys;
  const auto read = [&](const std::string& name, const ModelEdit& e) {
    const std::string path = dir.file(name + ".gguf");
    write_edited(*base, path, e);
    return read_model_config(*GgufFile::open(path));
  };
  const float magnitude = float(1.0 + 0.1 * std::log(4.0));
  {
    const ModelConfig c = read("yarn", yarn(4.0f, 64));
    EXPECT_EQ(c.rope_scaling, "yarn");
    EXPECT_EQ(c.rope_freq_factors, (std::vector<float>{1.0f, 1.6f, 4.0f, 4.0f, 4.0f, 4.0f, 4.0f, 4.0f}));
    EXPECT_FLOAT_EQ(c.rope_attn_scale, magnitude);
    EXPECT_EQ(c.n_ctx_train, 256);  // the file's context: 64 x 4 is no longer
  }
  {
    // Over an original context of 128 positions pair 1 turns 3.6 times, pair 2 0.64 times: the
    // dims are those of 64 (-0.26 and 1.75), and the scaling reaches 128 x 4 = 512 positions,
    // beyond the file's 256. attn_factor multiplies YaRN's magnitude.
    ModelEdit e = yarn(4.0f, 128);
    e.set_keys[a + "rope.scaling.attn_factor"] = f32_value(0.5f);
    const ModelConfig c = read("yarn128", e);
    EXPECT_EQ(c.rope_freq_factors, (std::vector<float>{1.0f, 1.6f, 4.0f, 4.0f, 4.0f, 4.0f, 4.0f, 4.0f}));
    EXPECT_FLOAT_EQ(c.rope_attn_scale, 0.5f * magnitude);
    EXPECT_EQ(c.n_ctx_train, 512);
  }
  {
    // Without original_context_length, context_length (256) is the original: the dims are 0.14
    // floored and 2.15 ceiled, low 0 and high 3, so pairs 1 and 2 keep 2/3 and 1/3 of their
    // frequency: divisors 1 / (1/6 + 2/3) and 1 / (1/3 + 1/3) at factor 2.
    const ModelConfig c = read("yarn-no-original", yarn(2.0f, 0));
    ASSERT_EQ(c.rope_freq_factors.size(), 8u);
    EXPECT_EQ(c.rope_freq_factors[0], 1.0f);
    EXPECT_FLOAT_EQ(c.rope_freq_factors[1], 1.2f);
    EXPECT_FLOAT_EQ(c.rope_freq_factors[2], 1.5f);
    EXPECT_EQ(c.rope_freq_factors[3], 2.0f);
    EXPECT_EQ(c.n_ctx_train, 512);
  }
  {
    // A factor of 1 changes nothing; attn_factor alone scales q and k under no rope scaling.
    const ModelConfig one = read("yarn-one", yarn(1.0f, 64));
    EXPECT_TRUE(one.rope_freq_factors.empty());
    EXPECT_EQ(one.rope_attn_scale, 1.0f);
    const ModelConfig attn = read("attn-factor", set_key(a + "rope.scaling.attn_factor", f32_value(1.25f)));
    EXPECT_TRUE(attn.rope_freq_factors.empty());
    EXPECT_EQ(attn.rope_scaling, "");
    EXPECT_EQ(attn.rope_attn_scale, 1.25f);
  }
}

// Rope scaling asked for when loading (RopeScalingOverride, the programs' --rope-scaling,
// --rope-scale and --yarn-orig-ctx) reads as the same keys in the file would; what it leaves unset
// keeps the file's value, and type none turns a file's scaling off (its attn_factor stays).
TEST(ModelChecks, RopeScalingAskedForOverridesTheFile) {
  auto base = GgufFile::open(base_model_path());
  ScratchDir dir;
  const std::string a = "qwen2.";
  const std::vector<float> yarn_64{1.0f, 1.6f, 4.0f, 4.0f, 4.0f, 4.0f, 4.0f, 4.0f};
  RopeScalingOverride yarn;
  yarn.type = "yarn";
  yarn.factor = 4.0;
  yarn.original_context = 64;
  {
    const ModelConfig c = read_model_config(*base, yarn);
    EXPECT_EQ(c.rope_scaling, "yarn");
    EXPECT_EQ(c.rope_freq_factors, yarn_64);
    EXPECT_FLOAT_EQ(c.rope_attn_scale, float(1.0 + 0.1 * std::log(4.0)));
  }
  ModelEdit keys = yarn_keys(2.0f, 64);
  keys.set_keys[a + "rope.scaling.attn_factor"] = f32_value(0.5f);
  const std::string path = dir.file("yarn.gguf");
  write_edited(*base, path, keys);
  auto f = GgufFile::open(path);
  {
    RopeScalingOverride factor_only;
    factor_only.factor = 4.0;  // the file's type and original context
    const ModelConfig c = read_model_config(*f, factor_only);
    EXPECT_EQ(c.rope_freq_factors, yarn_64);
    EXPECT_FLOAT_EQ(c.rope_attn_scale, float(0.5 * (1.0 + 0.1 * std::log(4.0))));
  }
  {
    RopeScalingOverride none;
    none.type = "none";
    const ModelConfig c = read_model_config(*f, none);
    EXPECT_TRUE(c.rope_freq_factors.empty());
    EXPECT_EQ(c.rope_scaling, "");
    EXPECT_EQ(c.rope_attn_scale, 0.5f);
    EXPECT_EQ(c.n_ctx_train, 256);
  }
  {
    RopeScalingOverride bad;
    bad.factor = -1.0;
    try {
      read_model_config(*f, bad);
      ADD_FAILURE() << "a negative rope scale was taken";
    } catch (const ModelError& e) {
      EXPECT_NE(std::string(e.what()).find("the rope scale asked for = -1 is out of range"), std::string::npos)
          << e.what();
    }
  }
}

// The programs' options reach the model: generate and logits on the plain file with
// --rope-scaling yarn --rope-scale 4 --yarn-orig-ctx 64 print what they print on the file that
// carries those keys, and other than without them.
TEST(ModelChecks, RopeScalingOptionsOfThePrograms) {
  auto base = GgufFile::open(base_model_path());
  ScratchDir dir;
  const std::string keyed = dir.file("yarn.gguf");
  write_edited(*base, keyed, yarn_keys(4.0f, 64));
  const std::vector<std::string> options = {"--rope-scaling", "yarn", "--rope-scale", "4", "--yarn-orig-ctx", "64"};
  const auto logits = [&](const std::string& model, const std::vector<std::string>& extra, const std::string& out) {
    std::vector<std::string> c = {tiny_llm_path(), "logits", "-m", model, "--backend", "cpu", "-q",
                                  "-p", "Hello, world! 0123456789", "-o", out};
    c.insert(c.end(), extra.begin(), extra.end());
    expect_success(run(c));
    std::ifstream in(out, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string with_keys = logits(keyed, {}, dir.file("a.f32"));
  const std::string with_options = logits(base_model_path(), options, dir.file("b.f32"));
  const std::string plain = logits(base_model_path(), {}, dir.file("c.f32"));
  ASSERT_FALSE(with_keys.empty());
  EXPECT_EQ(with_keys, with_options);
  EXPECT_NE(with_keys, plain);
  std::vector<std::string> gen = {tiny_llm_path(), "generate", "-m", base_model_path(), "--backend", "cpu", "-q",
                                  "-p", "Hello", "-n", "12", "--temp", "0"};
  std::vector<std::string> gen_keyed = gen;
  gen_keyed[3] = keyed;
  gen.insert(gen.end(), options.begin(), options.end());
  const RunResult by_keys = run(gen_keyed), by_options = run(gen);
  expect_success(by_keys);
  expect_success(by_options);
  EXPECT_EQ(by_keys.out, by_options.out);
}

// The correction dims of Qwen2.5's YaRN configuration (heads of 64, rope theta 1e6, an original
// context of 32,768): pair j turns 32768 / (2 pi 1e6^(j/32)) times over it, 32 times at j = 11.80
// and once at j = 19.83, so pairs up to 11 keep their frequency and pairs from 20 on are divided
// by the factor.
TEST(ModelChecks, YarnRampOfQwen25) {
  const YarnRamp r = yarn_ramp(64, 32768, 1e6f);
  EXPECT_EQ(r.low, 11.0f);
  EXPECT_EQ(r.high, 20.0f);
  EXPECT_EQ(r.extrapolated_share(11), 1.0);
  EXPECT_NEAR(r.extrapolated_share(14), 6.0 / 9.0, 1e-6);
  EXPECT_EQ(r.extrapolated_share(20), 0.0);
}

// Every position's logits of a model on the CPU backend.
std::vector<float> cpu_logits(const std::string& path, int n_tokens) {
  auto f = GgufFile::open(path);
  auto be = create_backend("cpu");
  LoadOptions opt;
  opt.n_ctx = 64;
  auto m = Model::load(*f, *be, opt);
  const int V = m->config().n_vocab;
  std::vector<int32_t> toks;
  for (int i = 0; i < n_tokens; ++i) toks.push_back(int32_t((i * 37 + 11) % V));
  return all_logits(*m, toks);
}

// rope.scaling.attn_factor multiplies the rotated q and k. Rope is linear, so that is the model
// whose q and k projections (weights and biases) are that many times larger: with a factor of 2
// every rounding on the way (int8 codes, fp16 scales, the fp16 KV cache) scales exactly, and the
// logits agree to float rounding. Against the unedited model they differ.
TEST(ModelChecks, RopeAttnFactorIsLargerQAndK) {
  SynthConfig sc = tiny_test_model();
  set_synth_weights(sc, "f32");
  ScratchDir dir;
  const std::string plain = dir.file("f32.gguf");
  write_synth_model(sc, plain);
  auto base = GgufFile::open(plain);
  const std::string factor_path = dir.file("attn-factor.gguf"), weights_path = dir.file("qk-x2.gguf");
  write_edited(*base, factor_path, set_key("qwen2.rope.scaling.attn_factor", f32_value(2.0f)));
  ModelEdit larger;
  for (int l = 0; l < sc.n_layer; ++l) {
    for (const char* t : {"attn_q.weight", "attn_q.bias", "attn_k.weight", "attn_k.bias"}) {
      larger.f32_scale["blk." + std::to_string(l) + "." + t] = 2.0f;
    }
  }
  write_edited(*base, weights_path, larger);
  const std::vector<float> by_factor = cpu_logits(factor_path, 12), by_weights = cpu_logits(weights_path, 12);
  const std::vector<float> unscaled = cpu_logits(plain, 12);
  EXPECT_LE(max_abs_diff(by_factor, by_weights), 1e-5f);
  EXPECT_GT(max_abs_diff(by_factor, unscaled), 1e-2f);
}

// A YaRN file runs as the same file with its per-pair divisors in rope_freqs.weight and its
// magnitude as rope.scaling.attn_factor (the divisors and magnitude of YarnRopeScalingIsRead).
TEST(ModelChecks, YarnIsItsDivisorsAndMagnitude) {
  auto base = GgufFile::open(base_model_path());
  ScratchDir dir;
  const std::string a = "qwen2.";
  const ModelEdit yarn = yarn_keys(4.0f, 64);
  ModelEdit spelled = set_key(a + "rope.scaling.attn_factor", f32_value(float(1.0 + 0.1 * std::log(4.0))));
  spelled.add_tensors["rope_freqs.weight"] = {GgmlType::F32, {8}};
  spelled.f32_values["rope_freqs.weight"] = {1.0f, 1.6f, 4.0f, 4.0f, 4.0f, 4.0f, 4.0f, 4.0f};
  const std::string yarn_path = dir.file("yarn.gguf"), spelled_path = dir.file("spelled.gguf");
  write_edited(*base, yarn_path, yarn);
  write_edited(*base, spelled_path, spelled);
  const std::vector<float> y = cpu_logits(yarn_path, 24), s = cpu_logits(spelled_path, 24);
  EXPECT_EQ(max_abs_diff(y, s), 0.0f);
  // The base model's attention is nearly flat (small random weights), so rope scaling moves its
  // logits by thousandths (3.3e-3 measured).
  EXPECT_GT(max_abs_diff(y, cpu_logits(base_model_path(), 24)), 1e-3f);
}

// The type column of a tensor's row in inspect's table; "(not listed)" when it has no row.
std::string listed_type(const RunResult& inspect, const std::string& tensor) {
  std::istringstream lines(inspect.out);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream fields(line);
    std::string name, type;
    if (fields >> name >> type && name == tensor) return type;
  }
  return "(not listed)";
}

// Weight matrices stored as IQ4_NL and IQ4_XS load (requantised to W8) and run, and inspect names
// their types. The retyped matrices hold zeros (write_edited): valid blocks of either type.
TEST(ModelChecks, Iq4MatricesLoadAndRun) {
  auto base = GgufFile::open(base_model_path());
  ScratchDir dir;
  const std::string path = dir.file("iq4.gguf");
  ModelEdit e;
  e.retype["blk.0.attn_q.weight"] = GgmlType::IQ4_NL;
  e.retype["blk.1.ffn_down.weight"] = GgmlType::IQ4_XS;  // rows of n_ff = 256 values: one super-block
  write_edited(*base, path, e);
  const std::vector<RunResult> r = run_all({inspect_command(path), generate_command(path)});
  expect_success(r[0]);
  EXPECT_TRUE(expect_inspect_outcome(r[0], path));
  EXPECT_EQ(listed_type(r[0], "blk.0.attn_q.weight"), "IQ4_NL") << r[0].describe();
  EXPECT_EQ(listed_type(r[0], "blk.1.ffn_down.weight"), "IQ4_XS") << r[0].describe();
  expect_success(r[1]);
}

// For types of 256-value super-blocks only ffn_down's rows (n_ff = 256 values) fit: one file per
// pair, with layer 0's ffn_down retyped to the first type and layer 1's to the second. Each file
// loads and generates, and inspect lists both types. All-zero blocks are valid in each type (d = 0:
// every value 0).
void expect_ffn_down_types_load_and_run(const std::vector<std::array<GgmlType, 2>>& pairs) {
  auto base = GgufFile::open(base_model_path());
  ScratchDir dir;
  std::vector<std::vector<std::string>> commands;
  for (size_t i = 0; i < pairs.size(); ++i) {
    const std::string path = dir.file("ffn_down" + std::to_string(i) + ".gguf");
    ModelEdit e;
    for (int layer = 0; layer < 2; ++layer) {
      e.retype["blk." + std::to_string(layer) + ".ffn_down.weight"] = pairs[i][size_t(layer)];
    }
    write_edited(*base, path, e);
    commands.push_back(inspect_command(path));
    commands.push_back(generate_command(path));
  }
  const std::vector<RunResult> r = run_all(commands);
  for (size_t i = 0; i < pairs.size(); ++i) {
    const RunResult& inspect = r[2 * i];
    expect_success(inspect);
    for (int layer = 0; layer < 2; ++layer) {
      EXPECT_EQ(listed_type(inspect, "blk." + std::to_string(layer) + ".ffn_down.weight"),
                ggml_type_name(pairs[i][size_t(layer)]))
          << inspect.describe();
    }
    expect_success(r[2 * i + 1]);
  }
}

// The i-quants, every type once.
TEST(ModelChecks, IquantMatricesLoadAndRun) {
  expect_ffn_down_types_load_and_run({{GgmlType::IQ2_XXS, GgmlType::IQ2_XS},
                                      {GgmlType::IQ2_S, GgmlType::IQ3_XXS},
                                      {GgmlType::IQ3_S, GgmlType::IQ1_S},
                                      {GgmlType::IQ1_M, GgmlType::IQ2_XXS}});
}

// The ternary types of TriLM / BitNet b1.58 conversions, each in either layer.
TEST(ModelChecks, TernaryMatricesLoadAndRun) {
  expect_ffn_down_types_load_and_run(
      {{GgmlType::TQ1_0, GgmlType::TQ2_0}, {GgmlType::TQ2_0, GgmlType::TQ1_0}});
}

TEST(ModelChecks, EveryViolationIsRejectedInProcessBeforeAllocating) {
  auto base = GgufFile::open(base_model_path());
  ScratchDir dir;
  for (const ModelCase& c : model_cases(*base)) {
    SCOPED_TRACE(c.name);
    const std::string path = dir.file(c.name + ".gguf");
    write_edited(*base, path, c.edit);
    auto f = GgufFile::open(path);
    auto expect_message = [&](const std::exception& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << msg;
      EXPECT_NE(msg.find(c.needle), std::string::npos) << "expected '" << c.needle << "' in: " << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    };
    if (c.stage == Stage::Config) {
      try {
        read_model_config(*f);
        ADD_FAILURE() << "read_model_config accepted the file";
      } catch (const ModelError& e) {
        expect_message(e);
      } catch (const GgufError& e) {
        expect_message(e);
      }
      continue;
    }
    EXPECT_NO_THROW(read_model_config(*f));
    if (c.stage == Stage::Load) {
      auto be = create_backend("cpu");
      LoadOptions opt;
      try {
        Model::load(*f, *be, opt);
        ADD_FAILURE() << "Model::load accepted the file";
      } catch (const ModelError& e) {
        expect_message(e);
      }
      EXPECT_EQ(be->memory_info().peak_bytes, 0u) << "Model::load allocated before rejecting the file";
    } else {
      try {
        Tokenizer::from_gguf(*f);
        ADD_FAILURE() << "Tokenizer::from_gguf accepted the file";
      } catch (const TokenizerError& e) {
        expect_message(e);
      }
    }
  }
}

TEST(ModelChecks, EveryViolationFailsTheProgramsCleanly) {
  auto base = GgufFile::open(base_model_path());
  ScratchDir dir;
  const std::vector<ModelCase> cases = model_cases(*base);
  std::vector<std::vector<std::string>> commands;
  for (const ModelCase& c : cases) {
    const std::string path = dir.file(c.name + ".gguf");
    write_edited(*base, path, c.edit);
    commands.push_back(inspect_command(path));
    commands.push_back(generate_command(path));
    commands.push_back(inspect_command(path, true));
  }
  const std::vector<RunResult> r = run_all(commands);
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string path = dir.file(cases[i].name + ".gguf");
    SCOPED_TRACE(cases[i].name);
    EXPECT_TRUE(expect_inspect_outcome(r[3 * i], path)) << "inspect must show a valid GGUF file";
    EXPECT_TRUE(expect_inspect_outcome(r[3 * i + 2], path, true)) << "inspect --json must show a valid GGUF file";
    if (cases[i].stage == Stage::Config) {
      EXPECT_NE(r[3 * i].out.find("not a runnable model: "), std::string::npos) << r[3 * i].describe();
      EXPECT_NE(r[3 * i + 2].out.find("\"not_runnable\""), std::string::npos) << r[3 * i + 2].describe();
    }
    expect_clean_failure(r[3 * i + 1], "tiny_llm", {path, cases[i].needle});
  }
}

}  // namespace
}  // namespace tllm::test
