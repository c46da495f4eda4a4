// Synthetic models with every weight type `tiny_llm synth --weights` offers: each file reopens with
// the tensor types asked for (the row-length fallbacks where a row is not whole blocks) and runs on
// the CPU backend with finite, varied logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "model/model.h"
#include "model/quants.h"
#include "model/synth.h"

namespace tllm {
namespace {

namespace fs = std::filesystem;

// tiny_test_model with every row length a multiple of 256 (n_embd 256, n_ff 512, 4 heads of 64),
// so that the super-block types (K-quants, IQ4_XS, the i-quants, TQ1_0, TQ2_0) hold every matrix;
// one layer.
SynthConfig wide_rows_model() {
  SynthConfig c = tiny_test_model();
  c.name = "Synthetic tiny qwen2 with rows of whole super-blocks";
  c.n_layer = 1;
  c.n_embd = 256;
  c.n_ff = 512;
  return c;
}

std::string model_path(const std::string& name) {
  const fs::path dir = fs::path(TLLM_BINARY_DIR) / "tests";
  fs::create_directories(dir);
  return (dir / ("synth-types-" + name + ".gguf")).string();
}

bool is_matrix(const TensorInfo& t) { return t.dims.size() == 2; }

// Prefills a few tokens on the CPU backend and checks the last row of logits.
void expect_finite_varied_logits(const GgufFile& f) {
  std::unique_ptr<Backend> backend = create_backend("cpu");
  LoadOptions o;
  o.n_ctx = 64;
  o.max_batch = 16;
  std::unique_ptr<Model> model = Model::load(f, *backend, o);
  const std::vector<int32_t> toks = {104, 101, 108, 108, 111, 32, 119, 111};  // "hello wo"
  model->prefill(toks.data(), int(toks.size()), 0);
  std::vector<float> lg(size_t(model->config().n_vocab));
  model->download_logits(lg.data());
  for (float v : lg) ASSERT_TRUE(std::isfinite(v));
  const auto [lo, hi] = std::minmax_element(lg.begin(), lg.end());
  EXPECT_GT(*hi - *lo, 1e-3f) << "all logits equal: the model computes nothing";
}

class SynthTypesTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SynthTypesTest, EveryMatrixHasTheTypeAndTheModelRuns) {
  SynthConfig c = wide_rows_model();
  set_synth_weights(c, GetParam());
  ASSERT_EQ(c.mix, SynthMix::Uniform);
  const std::string path = model_path(GetParam());
  write_synth_model(c, path);
  const std::unique_ptr<GgufFile> f = GgufFile::open(path);
  int matrices = 0;
  for (const TensorInfo& t : f->tensors()) {
    EXPECT_EQ(t.type, is_matrix(t) ? c.weight_type : GgmlType::F32) << t.name << " is " << ggml_type_name(t.type);
    matrices += is_matrix(t);
  }
  EXPECT_EQ(matrices, 8);  // token_embd (tied) and 7 per layer
  expect_finite_varied_logits(*f);
}

// Rows of 64 values (n_embd of tiny_test_model) are not whole 256-value super-blocks: those
// matrices take llama.cpp's fallback, while ffn_down (rows of n_ff = 256) keeps the type.
TEST_P(SynthTypesTest, RowsThatAreNotWholeBlocksFallBack) {
  SynthConfig c = tiny_test_model();
  set_synth_weights(c, GetParam());
  const std::string path = model_path(GetParam() + "-narrow");
  write_synth_model(c, path);
  const std::unique_ptr<GgufFile> f = GgufFile::open(path);
  for (const TensorInfo& t : f->tensors()) {
    if (!is_matrix(t)) continue;
    const GgmlType want = synth_matrix_type(c.weight_type, t.dims[0]);
    EXPECT_EQ(t.type, want) << t.name << " is " << ggml_type_name(t.type);
    if (t.name.find("ffn_down") != std::string::npos) {
      EXPECT_EQ(t.type, c.weight_type) << t.name;
    }
  }
  expect_finite_varied_logits(*f);
}

INSTANTIATE_TEST_SUITE_P(Weights, SynthTypesTest,
                         ::testing::Values("f32", "f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_k",
                                           "q3_k", "q4_k", "q5_k", "q6_k", "iq4_nl", "iq4_xs", "iq3_s",
                                           "iq3_xxs", "iq2_s", "iq2_xs", "iq2_xxs", "iq1_m", "iq1_s", "tq1_0",
                                           "tq2_0"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

TEST(SynthTypes, TheFallbacksAreLlamaCpps) {
  const std::pair<GgmlType, GgmlType> fallbacks[] = {
      {GgmlType::TQ1_0, GgmlType::Q4_0},   {GgmlType::TQ2_0, GgmlType::Q4_0}, {GgmlType::Q2_K, GgmlType::IQ4_NL},
      {GgmlType::Q3_K, GgmlType::IQ4_NL},  {GgmlType::IQ4_XS, GgmlType::IQ4_NL}, {GgmlType::Q4_K, GgmlType::Q5_0},
      {GgmlType::Q5_K, GgmlType::Q5_1},    {GgmlType::Q6_K, GgmlType::Q8_0},   {GgmlType::IQ3_S, GgmlType::IQ4_NL},
      {GgmlType::IQ3_XXS, GgmlType::IQ4_NL}, {GgmlType::IQ2_S, GgmlType::IQ4_NL}, {GgmlType::IQ2_XS, GgmlType::IQ4_NL},
      {GgmlType::IQ2_XXS, GgmlType::IQ4_NL}, {GgmlType::IQ1_M, GgmlType::IQ4_NL}, {GgmlType::IQ1_S, GgmlType::IQ4_NL},
  };
  for (const auto& [asked, fallback] : fallbacks) {
    EXPECT_EQ(synth_matrix_type(asked, 512), asked) << ggml_type_name(asked);
    // Qwen2.5-0.5B's rows of 896.
    EXPECT_EQ(synth_matrix_type(asked, 896), fallback) << ggml_type_name(asked);
  }
  EXPECT_EQ(synth_matrix_type(GgmlType::Q4_K, 48), GgmlType::F16);  // not even whole Q5_0 blocks
  EXPECT_EQ(synth_matrix_type(GgmlType::IQ4_NL, 96), GgmlType::IQ4_NL);
  EXPECT_EQ(synth_matrix_type(GgmlType::BF16, 40), GgmlType::BF16);
}

TEST(SynthTypes, EveryOfferedNameIsWritable) {
  for (const std::string& name : synth_weight_names()) {
    SynthConfig c = tiny_test_model();
    set_synth_weights(c, name);
    if (name == "q4_k_m") {
      EXPECT_EQ(c.mix, SynthMix::Q4_K_M);
    } else {
      EXPECT_EQ(c.mix, SynthMix::Uniform) << name;
      EXPECT_TRUE(can_quantize(c.weight_type)) << name;
      EXPECT_NO_THROW(synth_tensors(c)) << name;
    }
  }
  SynthConfig c = tiny_test_model();
  try {
    set_synth_weights(c, "q8_1");
    ADD_FAILURE() << "q8_1 accepted";
  } catch (const GgufError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown weight type 'q8_1'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("iq2_xxs"), std::string::npos) << e.what();
  }
  c.mix = SynthMix::Uniform;
  c.weight_type = GgmlType::Q8_1;  // a type llama.cpp writes only for intermediate results
  EXPECT_THROW(synth_tensors(c), GgufError);
}

}  // namespace
}  // namespace tllm
