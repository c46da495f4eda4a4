// The synthetic model writer: the benchmark config declares exactly the tensors of
// Qwen2.5-0.5B-Instruct Q4_K_M; the tiny presets write files that reopen with the declared tensors,
// complete metadata, sane weights and identical bytes for the same seed; a Hugging Face tokenizer
// folder is embedded with the Qwen2 ids; the SentencePiece vocabulary is laid out as Llama 2's and
// reads back into a tokenizer that encodes the Llama 2 chat prompt as Llama 2's does.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

#include "gguf_test_util.h"
#include "model/chat_template.h"
#include "model/quants.h"
#include "model/synth.h"
#include "model/tokenizer.h"

namespace tllm {
namespace {

using test::ScratchDir;

// The bytes a declared tensor takes in the file: whole blocks of its type.
size_t stored_bytes(const SynthTensor& t) {
  int64_t bv = 0, bb = 0;
  ggml_type_block(t.type, &bv, &bb);
  int64_t n = 1;
  for (int64_t d : t.dims) n *= d;
  return size_t(n / bv * bb);
}

// The bytes of a Q4_K_M preset's tensors, after checking each one's type: Q4_K matrices, Q6_K for
// attn_v and ffn_down in the layers `more_bits` names and for the output projection (`output`).
size_t q4_k_m_bytes(const std::vector<SynthTensor>& ts, const std::set<int>& more_bits, const std::string& output) {
  size_t bytes = 0;
  for (const SynthTensor& t : ts) {
    bytes += stored_bytes(t);
    const size_t dot = t.name.find('.', 4);
    const bool more = t.name.rfind("blk.", 0) == 0 && more_bits.count(std::stoi(t.name.substr(4, dot - 4))) > 0;
    GgmlType want = GgmlType::F32;
    if (t.name == output) {
      want = GgmlType::Q6_K;
    } else if (t.name.find("attn_v.weight") != std::string::npos || t.name.find("ffn_down.weight") != std::string::npos) {
      want = more ? GgmlType::Q6_K : GgmlType::Q4_K;
    } else if (t.dims.size() == 2) {
      want = GgmlType::Q4_K;
    }
    EXPECT_EQ(t.type, want) << t.name << " is " << ggml_type_name(t.type);
  }
  return bytes;
}

TEST(Synth, BenchmarkConfigDeclaresTheQwen25Q4KMTensors) {
  const SynthConfig c = qwen25_05b_q4km();
  EXPECT_EQ(c.arch, "qwen2");
  EXPECT_TRUE(c.tied);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_EQ(c.n_ctx, 32768);
  EXPECT_FLOAT_EQ(c.rope_theta, 1e6f);

  // The layout of the llama.cpp Q4_K_M file, written out from its tensor list.
  const std::set<int> more_bits = {0, 1, 2, 5, 8, 11, 14, 17, 20, 21, 22, 23};
  std::map<std::string, std::pair<GgmlType, std::vector<int64_t>>> want;
  want["token_embd.weight"] = {GgmlType::Q8_0, {896, 151936}};
  for (int l = 0; l < 24; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    const bool more = more_bits.count(l) > 0;
    want[p + "attn_norm.weight"] = {GgmlType::F32, {896}};
    want[p + "attn_q.weight"] = {GgmlType::Q5_0, {896, 896}};
    want[p + "attn_q.bias"] = {GgmlType::F32, {896}};
    want[p + "attn_k.weight"] = {GgmlType::Q5_0, {896, 128}};
    want[p + "attn_k.bias"] = {GgmlType::F32, {128}};
    want[p + "attn_v.weight"] = {more ? GgmlType::Q8_0 : GgmlType::Q5_0, {896, 128}};
    want[p + "attn_v.bias"] = {GgmlType::F32, {128}};
    want[p + "attn_output.weight"] = {GgmlType::Q5_0, {896, 896}};
    want[p + "ffn_norm.weight"] = {GgmlType::F32, {896}};
    want[p + "ffn_gate.weight"] = {GgmlType::Q5_0, {896, 4864}};
    want[p + "ffn_up.weight"] = {GgmlType::Q5_0, {896, 4864}};
    want[p + "ffn_down.weight"] = {more ? GgmlType::Q6_K : GgmlType::Q4_K, {4864, 896}};
  }
  want["output_norm.weight"] = {GgmlType::F32, {896}};
  ASSERT_EQ(want.size(), 290u);

  const std::vector<SynthTensor> ts = synth_tensors(c);
  ASSERT_EQ(ts.size(), 290u);
  std::set<std::string> seen;
  size_t bytes = 0;
  for (const SynthTensor& t : ts) {
    EXPECT_TRUE(seen.insert(t.name).second) << "declared twice: " << t.name;
    auto it = want.find(t.name);
    ASSERT_NE(it, want.end()) << "unexpected tensor " << t.name;
    EXPECT_EQ(t.type, it->second.first) << t.name << " is " << ggml_type_name(t.type);
    EXPECT_EQ(t.dims, it->second.second) << t.name;
    bytes += stored_bytes(t);
  }
  EXPECT_EQ(ts.front().name, "token_embd.weight");
  // About 400 MB of weights to stream, as in the real file.
  EXPECT_GT(bytes, size_t(390) * 1000 * 1000);
  EXPECT_LT(bytes, size_t(400) * 1000 * 1000);
}

// The llama3.2-1b preset: Llama-3.2-1B-Instruct's shapes, Q4_K_M's types (Q4_K, Q6_K for attn_v
// and ffn_down in the layers that get more bits and for the tied embeddings) and Llama 3.2's rope
// scaling, 147 tensors as in the real file.
TEST(Synth, LlamaBenchmarkConfigDeclaresItsTensors) {
  const SynthConfig c = llama32_1b_q4km();
  EXPECT_EQ(c.arch, "llama");
  EXPECT_EQ(c.head_width(), 64);
  EXPECT_EQ(c.n_head / c.n_head_kv, 4);
  ASSERT_EQ(c.rope_freqs.size(), 32u);
  EXPECT_EQ(c.rope_freqs.front(), 1.0f);
  EXPECT_EQ(c.rope_freqs.back(), 32.0f);
  const std::vector<SynthTensor> ts = synth_tensors(c);
  ASSERT_EQ(ts.size(), 147u);
  const size_t bytes = q4_k_m_bytes(ts, {0, 1, 4, 7, 10, 13, 14, 15}, "token_embd.weight");
  // The real file holds 808 MB (its tokenizer included).
  EXPECT_GT(bytes, size_t(750) * 1000 * 1000);
  EXPECT_LT(bytes, size_t(810) * 1000 * 1000);
}

// The falcon3-1b preset: Falcon3-1B-Instruct's shapes (18 layers, heads of 256 over 4 KV heads,
// an untied output.weight), no rope scaling, and Q4_K_M's layer choice for 18 layers.
TEST(Synth, FalconShapesDeclareTheirTensors) {
  const SynthConfig c = falcon3_1b_q4km();
  EXPECT_EQ(c.arch, "llama");
  EXPECT_EQ(c.head_width(), 256);
  EXPECT_EQ(c.n_head * c.head_width(), c.n_embd);
  EXPECT_EQ(c.n_head / c.n_head_kv, 2);
  EXPECT_TRUE(c.rope_freqs.empty());
  const std::vector<SynthTensor> ts = synth_tensors(c);
  ASSERT_EQ(ts.size(), 165u);
  EXPECT_EQ(ts.back().name, "output.weight");
  EXPECT_EQ(ts.back().dims, (std::vector<int64_t>{2048, 131072}));
  const size_t bytes = q4_k_m_bytes(ts, {0, 1, 4, 7, 10, 13, 15, 16, 17}, "output.weight");
  // 1.13 billion layer weights at 4.5 to 6.6 bits, 268 million of embeddings at 4.5 and as many of
  // output.weight at 6.6.
  EXPECT_GT(bytes, size_t(950) * 1000 * 1000);
  EXPECT_LT(bytes, size_t(1100) * 1000 * 1000);
}

TEST(Synth, OtherMixesAndTheLlamaLayout) {
  SynthConfig c = tiny_test_model();
  c.mix = SynthMix::Uniform;
  c.weight_type = GgmlType::Q8_0;
  for (const SynthTensor& t : synth_tensors(c)) {
    EXPECT_EQ(t.type, t.dims.size() == 2 ? GgmlType::Q8_0 : GgmlType::F32) << t.name;
  }
  c.weight_type = GgmlType::F16;
  for (const SynthTensor& t : synth_tensors(c)) {
    EXPECT_EQ(t.type, t.dims.size() == 2 ? GgmlType::F16 : GgmlType::F32) << t.name;
  }

  const std::vector<SynthTensor> llama = synth_tensors(tiny_llama_test_model());
  std::set<std::string> names;
  for (const SynthTensor& t : llama) names.insert(t.name);
  EXPECT_EQ(llama.size(), 1 + 2 * 9 + 2u);
  EXPECT_TRUE(names.count("output.weight"));
  EXPECT_FALSE(names.count("blk.0.attn_q.bias"));
  EXPECT_EQ(llama.back().name, "output.weight");
  EXPECT_EQ(llama.back().type, GgmlType::Q8_0);  // Q6_K falls back: a row of 64 is not a super-block
  EXPECT_EQ(llama.front().type, GgmlType::Q5_0);  // untied token_embd is a plain Q4_K matrix, falling back
}

TEST(Synth, RejectsInconsistentConfigs) {
  auto expect_error = [](const SynthConfig& c, const std::string& needle) {
    try {
      synth_tensors(c);
      ScratchDir dir;
      write_synth_model(c, dir.file("bad.gguf"));
      ADD_FAILURE() << "no error; expected '" << needle << "'";
    } catch (const GgufError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  SynthConfig c = tiny_test_model();
  c.n_head = 3;
  expect_error(c, "n_embd 64 is not a multiple of n_head 3");
  c = tiny_test_model();
  c.n_head_kv = 3;
  expect_error(c, "n_head 4 is not a multiple of n_head_kv 3");
  c = tiny_test_model();
  c.arch = "gpt2";
  expect_error(c, "unknown arch 'gpt2'");
  c = tiny_test_model();
  c.n_ff = 100;
  expect_error(c, "multiples of 32");
  c = tiny_test_model();
  c.head_dim = -2;
  expect_error(c, "head_dim must not be negative");
  c.head_dim = 9;
  expect_error(c, "head_dim 9 is odd");
  c.head_dim = 6;  // q rows of 4 · 6 = 24 values: the output projection's rows are not whole blocks
  expect_error(c, "n_embd, n_ff and n_head·head_dim must be multiples of 32");
  c.head_dim = 32;
  c.rope_freqs.assign(8, 1.0f);  // n_embd / n_head / 2, not head_dim / 2
  expect_error(c, "rope_freqs has 8 values, expected head_dim/2");
  c = tiny_test_model();
  c.rope_scaling = "longrope";
  expect_error(c, "rope scaling 'longrope' (linear or yarn)");
  c.rope_scaling = "yarn";
  c.rope_factor = 0.0f;
  expect_error(c, "rope factor 0.000000 is not in (0, 1e6]");
  c.rope_scaling = "linear";
  c.rope_factor = 2.0f;
  c.rope_original_context = 64;
  expect_error(c, "an original context (64) is for yarn rope scaling only");
  c = tiny_test_model();
  c.tokenizer_pre.clear();
  expect_error(c, "tokenizer_pre is empty");
  c = tiny_test_model();
  c.rope_attn_factor = -1.0f;
  expect_error(c, "rope attn_factor -1.000000 is not in [0, 1e3]");
  c = tiny_test_model();
  c.n_vocab = 200;
  expect_error(c, "n_vocab 200 is smaller than the 259 tokens");
  c = tiny_test_model();
  c.tokenizer_dir = "/nonexistent-tokenizer";
  expect_error(c, "/nonexistent-tokenizer/vocab.json: cannot open");
  // The SentencePiece vocabulary: 299 pieces before the padding, and no tokenizer folder.
  c = tiny_llama2_test_model();
  c.n_vocab = 272;
  expect_error(c, "n_vocab 272 is smaller than the 299 tokens of the SentencePiece vocabulary");
  c.n_vocab = 320;
  c.tokenizer_dir = "/some-tokenizer";
  expect_error(c, "tokenizer_dir '/some-tokenizer' holds a byte-level tokenizer");
}

// Writes the tiny model once per test and reopens it.
struct TinyFile {
  explicit TinyFile(const SynthConfig& c) {
    path = dir.file("tiny.gguf");
    write_synth_model(c, path, [&](size_t done, size_t total) { progress.emplace_back(done, total); });
    file = GgufFile::open(path);
  }
  ScratchDir dir;
  std::string path;
  std::vector<std::pair<size_t, size_t>> progress;
  std::unique_ptr<GgufFile> file;
};

TEST(Synth, TinyModelReopensWithTheDeclaredTensors) {
  const SynthConfig c = tiny_test_model();
  TinyFile t(c);
  const GgufFile& f = *t.file;
  const std::vector<SynthTensor> declared = synth_tensors(c);
  ASSERT_EQ(f.tensors().size(), declared.size());
  for (size_t i = 0; i < declared.size(); ++i) {
    EXPECT_EQ(f.tensors()[i].name, declared[i].name);
    EXPECT_EQ(f.tensors()[i].type, declared[i].type);
    EXPECT_EQ(f.tensors()[i].dims, declared[i].dims);
  }
  // The same type mix as the benchmark model: layer 0 plain, layer 1 with more bits.
  EXPECT_EQ(f.find_tensor("token_embd.weight")->type, GgmlType::Q8_0);
  EXPECT_EQ(f.find_tensor("blk.0.attn_q.weight")->type, GgmlType::Q5_0);
  EXPECT_EQ(f.find_tensor("blk.0.attn_v.weight")->type, GgmlType::Q5_0);
  EXPECT_EQ(f.find_tensor("blk.1.attn_v.weight")->type, GgmlType::Q8_0);
  EXPECT_EQ(f.find_tensor("blk.0.ffn_down.weight")->type, GgmlType::Q4_K);
  EXPECT_EQ(f.find_tensor("blk.1.ffn_down.weight")->type, GgmlType::Q6_K);
  EXPECT_EQ(f.find_tensor("output.weight"), nullptr);

  ASSERT_FALSE(t.progress.empty());
  for (size_t i = 1; i < t.progress.size(); ++i) EXPECT_GE(t.progress[i].first, t.progress[i - 1].first);
  EXPECT_EQ(t.progress.back().first, t.progress.back().second);
  EXPECT_LT(t.progress.back().second, f.file_size());
}

// Rope scaling keys: written where the config asks for them, and only there.
TEST(Synth, RopeScalingKeys) {
  {
    TinyFile t(tiny_test_model());
    EXPECT_EQ(t.file->find("qwen2.rope.scaling.type"), nullptr);
    EXPECT_EQ(t.file->find("qwen2.rope.scaling.factor"), nullptr);
    EXPECT_EQ(t.file->find("qwen2.rope.scaling.attn_factor"), nullptr);
  }
  SynthConfig c = tiny_test_model();
  c.rope_scaling = "yarn";
  c.rope_factor = 4.0f;
  c.rope_original_context = 64;
  c.rope_attn_factor = 0.75f;
  TinyFile t(c);
  EXPECT_EQ(t.file->get_string("qwen2.rope.scaling.type"), "yarn");
  EXPECT_EQ(t.file->get_float("qwen2.rope.scaling.factor"), 4.0);
  EXPECT_EQ(t.file->get_int("qwen2.rope.scaling.original_context_length"), 64);
  EXPECT_EQ(t.file->get_float("qwen2.rope.scaling.attn_factor"), 0.75);
}

TEST(Synth, TinyModelMetadata) {
  TinyFile t(tiny_test_model());
  const GgufFile& f = *t.file;
  EXPECT_EQ(f.get_string("general.architecture"), "qwen2");
  EXPECT_FALSE(f.get_string("general.name").empty());
  EXPECT_EQ(f.get_int("general.file_type"), 15);
  EXPECT_EQ(f.get_int("qwen2.context_length"), 256);
  EXPECT_EQ(f.get_int("qwen2.embedding_length"), 64);
  EXPECT_EQ(f.get_int("qwen2.feed_forward_length"), 256);
  EXPECT_EQ(f.get_int("qwen2.block_count"), 2);
  EXPECT_EQ(f.get_int("qwen2.attention.head_count"), 4);
  EXPECT_EQ(f.get_int("qwen2.attention.head_count_kv"), 2);
  EXPECT_EQ(f.get_int("qwen2.rope.dimension_count"), 16);
  EXPECT_FLOAT_EQ(float(f.get_float("qwen2.rope.freq_base")), 1e6f);
  EXPECT_FLOAT_EQ(float(f.get_float("qwen2.attention.layer_norm_rms_epsilon")), 1e-6f);
  EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(f.get_string("tokenizer.ggml.pre"), "qwen2");
  EXPECT_FALSE(f.get_bool("tokenizer.ggml.add_bos_token", true));
  EXPECT_TRUE(f.get_string_array("tokenizer.ggml.merges").empty());

  // 256 byte tokens, three control tokens, then padding up to n_vocab = 272.
  const auto& tokens = f.get_string_array("tokenizer.ggml.tokens");
  const auto types = f.get_int_array("tokenizer.ggml.token_type");
  ASSERT_EQ(tokens.size(), 272u);
  ASSERT_EQ(types.size(), 272u);
  EXPECT_EQ(tokens[0], "!");
  EXPECT_EQ(tokens[93], "~");
  EXPECT_EQ(tokens[188], "\xc4\x80");  // U+0100 stands for byte 0
  EXPECT_EQ(tokens[220], "\xc4\xa0");  // U+0120 "Ġ" stands for the space, as in GPT-2
  EXPECT_EQ(std::set<std::string>(tokens.begin(), tokens.begin() + 256).size(), 256u);
  EXPECT_EQ(tokens[256], "<|endoftext|>");
  EXPECT_EQ(tokens[257], "<|im_start|>");
  EXPECT_EQ(tokens[258], "<|im_end|>");
  EXPECT_EQ(tokens[259], "[PAD259]");
  EXPECT_EQ(tokens[271], "[PAD271]");
  for (int i = 0; i < 256; ++i) EXPECT_EQ(types[size_t(i)], 1) << i;
  for (int i = 256; i < 259; ++i) EXPECT_EQ(types[size_t(i)], 3) << i;
  for (int i = 259; i < 272; ++i) EXPECT_EQ(types[size_t(i)], 5) << i;
  EXPECT_EQ(f.get_int("tokenizer.ggml.bos_token_id"), 256);
  EXPECT_EQ(f.get_int("tokenizer.ggml.eos_token_id"), 258);
  EXPECT_EQ(f.get_int("tokenizer.ggml.padding_token_id"), 256);
  const std::string tmpl = f.get_string("tokenizer.chat_template");
  EXPECT_NE(tmpl.find("<|im_start|>"), std::string::npos);
  EXPECT_NE(tmpl.find("<|im_end|>"), std::string::npos);
  EXPECT_NE(tmpl.find("You are Qwen, created by Alibaba Cloud. You are a helpful assistant."), std::string::npos);
  EXPECT_NE(tmpl.find("add_generation_prompt"), std::string::npos);
}

TEST(Synth, TinyLlamaMetadata) {
  TinyFile t(tiny_llama_test_model());
  const GgufFile& f = *t.file;
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_int("llama.block_count"), 2);
  EXPECT_EQ(f.get_int("llama.embedding_length"), 64);
  EXPECT_FLOAT_EQ(float(f.get_float("llama.rope.freq_base")), 10000.0f);
  EXPECT_FLOAT_EQ(float(f.get_float("llama.attention.layer_norm_rms_epsilon")), 1e-5f);
  EXPECT_EQ(f.find("qwen2.block_count"), nullptr);
  ASSERT_NE(f.find_tensor("output.weight"), nullptr);
  EXPECT_EQ(f.find_tensor("output.weight")->dims, (std::vector<int64_t>{64, 272}));
  EXPECT_EQ(f.find_tensor("blk.1.attn_k.bias"), nullptr);
}

// Heads of their own width: q and the output projection n_head·head_dim wide, the KV projections
// n_head_kv·head_dim, and the width written as attention.key_length and value_length (and as the
// rope's dimension count). Without head_dim, neither key is written.
TEST(Synth, HeadDimSetsTheAttentionShapesAndKeys) {
  TinyFile t(tiny_nemo_test_model());
  const GgufFile& f = *t.file;
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_int("llama.embedding_length"), 256);
  EXPECT_EQ(f.get_int("llama.attention.head_count"), 4);
  EXPECT_EQ(f.get_int("llama.attention.head_count_kv"), 2);
  EXPECT_EQ(f.get_int("llama.attention.key_length"), 128);
  EXPECT_EQ(f.get_int("llama.attention.value_length"), 128);
  EXPECT_EQ(f.get_int("llama.rope.dimension_count"), 128);
  for (const char* l : {"blk.0.", "blk.1."}) {
    const std::string p = l;
    EXPECT_EQ(f.find_tensor(p + "attn_q.weight")->dims, (std::vector<int64_t>{256, 512}));
    EXPECT_EQ(f.find_tensor(p + "attn_k.weight")->dims, (std::vector<int64_t>{256, 256}));
    EXPECT_EQ(f.find_tensor(p + "attn_v.weight")->dims, (std::vector<int64_t>{256, 256}));
    EXPECT_EQ(f.find_tensor(p + "attn_output.weight")->dims, (std::vector<int64_t>{512, 256}));
  }

  SynthConfig biased = tiny_test_model();  // qwen2, with q/k/v biases
  biased.head_dim = 32;
  std::map<std::string, std::vector<int64_t>> dims;
  for (const SynthTensor& s : synth_tensors(biased)) dims[s.name] = s.dims;
  EXPECT_EQ(dims["blk.0.attn_q.bias"], std::vector<int64_t>{128});
  EXPECT_EQ(dims["blk.0.attn_k.bias"], std::vector<int64_t>{64});

  TinyFile plain(tiny_llama_test_model());
  EXPECT_EQ(plain.file->find("llama.attention.key_length"), nullptr);
  EXPECT_EQ(plain.file->find("llama.attention.value_length"), nullptr);
}

TEST(Synth, TinyLlama2HasLlama2sSentencePieceLayout) {
  TinyFile t(tiny_llama2_test_model());
  const GgufFile& f = *t.file;
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.find_tensor("token_embd.weight")->dims, (std::vector<int64_t>{64, 320}));
  EXPECT_EQ(f.find_tensor("output.weight")->dims, (std::vector<int64_t>{64, 320}));
  EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "llama");
  EXPECT_EQ(f.find("tokenizer.ggml.pre"), nullptr);
  EXPECT_EQ(f.find("tokenizer.ggml.merges"), nullptr);
  EXPECT_EQ(f.find("tokenizer.ggml.padding_token_id"), nullptr);
  EXPECT_EQ(f.get_int("tokenizer.ggml.unknown_token_id"), 0);
  EXPECT_EQ(f.get_int("tokenizer.ggml.bos_token_id"), 1);
  EXPECT_EQ(f.get_int("tokenizer.ggml.eos_token_id"), 2);
  EXPECT_TRUE(f.get_bool("tokenizer.ggml.add_bos_token", false));
  EXPECT_FALSE(f.get_bool("tokenizer.ggml.add_eos_token", true));
  EXPECT_TRUE(f.get_bool("tokenizer.ggml.add_space_prefix", false));

  // <unk> <s> </s>, 256 byte pieces, 40 normal pieces, then padding up to n_vocab = 320.
  const auto& tokens = f.get_string_array("tokenizer.ggml.tokens");
  const auto types = f.get_int_array("tokenizer.ggml.token_type");
  const auto scores = f.get_float_array("tokenizer.ggml.scores");
  ASSERT_EQ(tokens.size(), 320u);
  ASSERT_EQ(types.size(), 320u);
  ASSERT_EQ(scores.size(), 320u);
  EXPECT_EQ(tokens[0], "<unk>");
  EXPECT_EQ(tokens[1], "<s>");
  EXPECT_EQ(tokens[2], "</s>");
  EXPECT_EQ((std::vector<int64_t>(types.begin(), types.begin() + 3)), (std::vector<int64_t>{2, 3, 3}));
  for (int b = 0; b < 256; ++b) {
    char piece[7];
    std::snprintf(piece, sizeof(piece), "<0x%02X>", b);
    EXPECT_EQ(tokens[size_t(3 + b)], piece);
    EXPECT_EQ(types[size_t(3 + b)], 6) << piece;
    EXPECT_EQ(scores[size_t(3 + b)], 0.0) << piece;
  }
  const std::string space = "\xE2\x96\x81";  // U+2581
  EXPECT_EQ(tokens[259], space + "t");
  EXPECT_EQ(tokens[261], space + "the");
  EXPECT_EQ(tokens[278], space + "world");
  EXPECT_EQ(tokens[279], space);
  EXPECT_EQ(tokens[298], "/");
  std::map<std::string, size_t> piece_ids;
  for (size_t i = 259; i < 299; ++i) {
    EXPECT_EQ(types[i], 1) << tokens[i];
    EXPECT_EQ(scores[i], -double(i - 258)) << tokens[i];
    piece_ids.emplace(tokens[i], i);
  }
  EXPECT_EQ(piece_ids.size(), 40u);
  // As sentencepiece's trainer makes them, each merged piece (259..278) joins two pieces that are
  // merged pieces of higher score or single characters (279..298).
  for (size_t i = 259; i < 279; ++i) {
    const std::string& p = tokens[i];
    auto earlier = [&](const std::string& part) {
      auto it = piece_ids.find(part);
      return it != piece_ids.end() && (it->second < i || it->second >= 279);
    };
    bool joins = false;
    for (size_t cut = 1; cut < p.size(); ++cut) joins = joins || (earlier(p.substr(0, cut)) && earlier(p.substr(cut)));
    EXPECT_TRUE(joins) << p;
  }
  EXPECT_EQ(tokens[299], "[PAD299]");
  EXPECT_EQ(tokens[319], "[PAD319]");
  for (size_t i = 299; i < 320; ++i) EXPECT_EQ(types[i], 5) << i;

  const ChatFormat fmt = detect_chat_format(f, *Tokenizer::from_gguf(f), "");
  EXPECT_EQ(fmt.kind, ChatTemplate::Llama2);
  EXPECT_TRUE(fmt.default_system.empty());
  EXPECT_EQ(render_chat(fmt, {{"user", "hi"}}, true), "<s>[INST] hi [/INST]");
}

TEST(Synth, TinyLlama2TokenizerEncodesTheChatPromptAsLlama2Does) {
  TinyFile t(tiny_llama2_test_model());
  const std::unique_ptr<Tokenizer> tok = Tokenizer::from_gguf(*t.file);
  EXPECT_TRUE(tok->is_sentencepiece());
  EXPECT_TRUE(tok->add_bos());
  EXPECT_EQ(tok->unk_id(), 0);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  // "<s>" is cut out as BOS; the text after it becomes "▁[INST]▁hi▁[/INST]" and merges highest
  // score first: "IN" (-9) and "ST" (-10) into "INST" (-11), "▁[" (-12), "▁h" (-13) before "hi"
  // (-14), then "▁hi" (-15). Llama 2's own ids have the same shape: 1 518 25580 29962 7251 518
  // 29914 25580 29962.
  const std::vector<int32_t> chat = {1, 270, 269, 297, 273, 270, 298, 269, 297};
  EXPECT_EQ(tok->encode("<s>[INST] hi [/INST]"), chat);
  // "▁t" + "he" = "▁the", "▁w" + "or" + "ld" = "▁world"; "!" and "\n" have no piece and fall back
  // to their bytes <0x21> and <0x0A>.
  EXPECT_EQ(tok->encode("the world!\n"), (std::vector<int32_t>{261, 278, 36, 13}));
  EXPECT_EQ(tok->decode({261, 278, 36, 13}), "the world!\n");
}

float mean_of(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += x;
  return float(s / double(v.size()));
}

float std_of(const std::vector<float>& v) {
  const double m = mean_of(v);
  double s = 0;
  for (float x : v) s += (x - m) * (x - m);
  return float(std::sqrt(s / double(v.size())));
}

TEST(Synth, TinyModelWeightsAreScaledLikeATrainedModel) {
  const SynthConfig c = tiny_test_model();
  TinyFile t(c);
  for (const TensorInfo& ti : t.file->tensors()) {
    SCOPED_TRACE(ti.name);
    const std::vector<float> v = dequantize_tensor(ti);
    for (float x : v) ASSERT_TRUE(std::isfinite(x));
    if (ti.name.find("_norm.weight") != std::string::npos) {
      EXPECT_NEAR(mean_of(v), 1.0f, 0.05f);
      EXPECT_GT(std_of(v), 0.02f);
    } else if (ti.dims.size() == 2) {
      EXPECT_NEAR(mean_of(v), 0.0f, 0.005f);
      EXPECT_NEAR(std_of(v), c.weight_std, 0.25f * c.weight_std);
    } else {
      EXPECT_LT(std::fabs(mean_of(v)), 0.02f);
      EXPECT_GT(std_of(v), 0.005f);
    }
  }
  // The tied output projection spreads the logits of a normalised embedding row: many distinct values.
  const std::vector<float> e = dequantize_tensor(*t.file->find_tensor("token_embd.weight"));  // (n_vocab, n_embd)
  const int64_t n_embd = c.n_embd, n_vocab = c.n_vocab;
  std::vector<float> h(e.begin() + 5 * n_embd, e.begin() + 6 * n_embd);
  double ss = 0;
  for (float x : h) ss += double(x) * x;
  for (float& x : h) x = float(x / std::sqrt(ss / double(n_embd)));
  std::vector<float> logits(static_cast<size_t>(n_vocab));
  for (int64_t v = 0; v < n_vocab; ++v) {
    double dot = 0;
    for (int64_t j = 0; j < n_embd; ++j) dot += double(e[size_t(v * n_embd + j)]) * h[size_t(j)];
    logits[size_t(v)] = float(dot);
  }
  EXPECT_GT(std_of(logits), 0.05f);
  EXPECT_GT(std::set<float>(logits.begin(), logits.end()).size(), size_t(n_vocab) / 2);
}

TEST(Synth, SameSeedSameBytes) {
  SynthConfig c = tiny_test_model();
  ScratchDir dir;
  write_synth_model(c, dir.file("a.gguf"));
  write_synth_model(c, dir.file("b.gguf"));
  c.seed += 1;
  write_synth_model(c, dir.file("c.gguf"));
  const auto a = test::read_bytes(dir.file("a.gguf"));
  const auto b = test::read_bytes(dir.file("b.gguf"));
  const auto d = test::read_bytes(dir.file("c.gguf"));
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(test::fnv1a(a), test::fnv1a(b));
  EXPECT_EQ(a.size(), d.size());
  EXPECT_NE(test::fnv1a(a), test::fnv1a(d));
}

TEST(Synth, EmbedsAHuggingFaceTokenizer) {
  const std::string dir = test::shared_dir() + "/data/qwen2-tokenizer";
  TLLM_REQUIRE_SHARED_FILE(dir + "/vocab.json");
  SynthConfig c = tiny_test_model();
  c.tokenizer_dir = dir;
  c.n_vocab = 151936;
  TinyFile t(c);
  const GgufFile& f = *t.file;
  const auto& tokens = f.get_string_array("tokenizer.ggml.tokens");
  const auto types = f.get_int_array("tokenizer.ggml.token_type");
  ASSERT_EQ(tokens.size(), 151936u);
  EXPECT_EQ(f.find_tensor("token_embd.weight")->dims, (std::vector<int64_t>{64, 151936}));
  EXPECT_EQ(tokens[0], "!");
  EXPECT_EQ(tokens[220], "\xc4\xa0");
  EXPECT_EQ(tokens[9707], "Hello");
  EXPECT_EQ(tokens[1879], "\xc4\xa0world");          // "Ġworld"
  EXPECT_EQ(tokens[151642], "\xc3\xa2\xc2\xbd\xc4\xb9");  // the last id of vocab.json
  EXPECT_EQ(tokens[151643], "<|endoftext|>");
  EXPECT_EQ(tokens[151644], "<|im_start|>");
  EXPECT_EQ(tokens[151645], "<|im_end|>");
  EXPECT_EQ(tokens[151646], "[PAD151646]");
  EXPECT_EQ(tokens[151935], "[PAD151935]");
  EXPECT_EQ(types[100], 1);
  EXPECT_EQ(types[151642], 1);
  EXPECT_EQ(types[151645], 3);
  EXPECT_EQ(types[151646], 5);
  EXPECT_EQ(f.get_int("tokenizer.ggml.bos_token_id"), 151643);
  EXPECT_EQ(f.get_int("tokenizer.ggml.eos_token_id"), 151645);
  EXPECT_EQ(f.get_int("tokenizer.ggml.padding_token_id"), 151643);
  const auto& merges = f.get_string_array("tokenizer.ggml.merges");
  ASSERT_EQ(merges.size(), 151387u);
  EXPECT_EQ(merges[0], "\xc4\xa0 \xc4\xa0");  // "Ġ Ġ", the first line after "#version: 0.2"
  EXPECT_EQ(merges[2], "i n");

  // The byte-level fallback vocabulary agrees with Qwen2's on the first 256 ids.
  TinyFile plain(tiny_test_model());
  const auto& bytes = plain.file->get_string_array("tokenizer.ggml.tokens");
  for (size_t i = 0; i < 256; ++i) EXPECT_EQ(bytes[i], tokens[i]) << i;
}

}  // namespace
}  // namespace tllm
