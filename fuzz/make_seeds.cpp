// Writes the GGUF seed corpus of gguf_fuzz into a folder (fuzz/corpus/gguf holds its output):
//   model_qwen2.gguf   a complete qwen2 model (1 layer, n_embd 32, byte-level vocabulary, Q8_0,
//                      Qwen2.5's chat template)
//   model_llama.gguf   the llama variant (untied output.weight, no q/k/v biases)
//   model_iq4_xs.gguf  model_qwen2 with n_ff 256 and IQ4_XS weights: ffn_down (rows of 256) IQ4_XS,
//                      the other matrices (rows of 32) IQ4_NL, llama.cpp's fallback
//   model_tq1_0.gguf   the same shapes in TQ1_0 (ffn_down) and Q4_0 (the fallback), llama layout
//   model_tq2_0.gguf   the same in TQ2_0 and Q4_0, qwen2 layout
//   types.gguf         one tensor of every ggml type quantize_row writes, one block row each
//   values.gguf        a metadata value of every GGUF type, nested arrays, GGUF version 2,
//                      general.alignment 64
// Usage: make_seeds OUT_DIR. The files are deterministic (fixed seeds).
#include <cstdio>
#include <string>
#include <vector>

#include "model/gguf.h"
#include "model/quants.h"
#include "model/synth.h"

namespace {

using namespace tllm;

SynthConfig small_model(const std::string& arch, const std::string& weights = "q8_0") {
  SynthConfig c = arch == "llama" ? tiny_llama_test_model() : tiny_test_model();
  c.n_layer = 1;
  c.n_embd = 32;
  c.n_ff = 32;
  c.n_head = 2;
  c.n_head_kv = 1;
  c.n_vocab = 260;  // 256 byte tokens, 3 control tokens, one padding token
  c.n_ctx = 64;
  set_synth_weights(c, weights);
  if (weights != "q8_0") c.n_ff = 256;  // one matrix with rows of a whole 256-value super-block
  c.name = "seed";
  return c;
}

void write_types(const std::string& path) {
  const GgmlType types[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q4_0, GgmlType::Q4_1,
                            GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q2_K, GgmlType::Q3_K,
                            GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS,
                            GgmlType::IQ3_S, GgmlType::IQ3_XXS, GgmlType::IQ2_S, GgmlType::IQ2_XS,
                            GgmlType::IQ2_XXS, GgmlType::IQ1_M, GgmlType::IQ1_S, GgmlType::TQ1_0, GgmlType::TQ2_0};
  GgufWriter w;
  w.set_string("general.architecture", "qwen2");
  std::vector<GgmlType> declared;
  for (GgmlType t : types) {
    int64_t bv = 0, bb = 0;
    ggml_type_block(t, &bv, &bb);
    w.add_tensor(std::string("t.") + ggml_type_name(t), t, {bv == 1 ? 8 : bv});
    declared.push_back(t);
  }
  w.write(path, [&](size_t index, uint8_t* dst, size_t) {
    int64_t bv = 0, bb = 0;
    ggml_type_block(declared[index], &bv, &bb);
    const int64_t n = bv == 1 ? 8 : bv;
    std::vector<float> src(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) src[size_t(i)] = float(i % 7) - 3.0f + 0.25f * float(i % 3);
    quantize_row(declared[index], src.data(), dst, n);
  });
}

void write_values(const std::string& path) {
  GgufWriter w;
  w.set_version(2);
  w.set_u32("general.alignment", 64);
  w.set_string("general.architecture", "llama");
  w.set_bool("b", true);
  w.set_i32("i32", -5);
  w.set_u64("u64", 1ull << 40);
  w.set_f32("f32", 0.5f);
  w.set_string("s", "text \xe4\xbd\xa0\n");
  w.set_string_array("sa", {"a", "b c", ""});
  w.set_i32_array("ia", {1, -2, 3});
  w.set_f32_array("fa", {0.25f, -1.0f});
  GgufValue scalar;
  scalar.type = GgufType::I8;
  scalar.i = -3;
  w.set_value("i8", scalar);
  scalar.type = GgufType::U16;
  scalar.i = 7;
  scalar.u = 7;
  w.set_value("u16", scalar);
  scalar.type = GgufType::F64;
  scalar.f = 1e-300;
  w.set_value("f64", scalar);
  GgufValue inner;
  inner.type = GgufType::ARRAY;
  inner.elem_type = GgufType::U8;
  for (int i = 0; i < 3; ++i) {
    GgufValue e;
    e.type = GgufType::U8;
    e.i = i;
    e.u = uint64_t(i);
    inner.arr.push_back(e);
  }
  GgufValue outer;
  outer.type = GgufType::ARRAY;
  outer.elem_type = GgufType::ARRAY;
  outer.arr = {inner, inner};
  w.set_value("nested", outer);
  w.add_tensor("x", GgmlType::F32, {4, 2});
  w.write(path, {});
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_seeds OUT_DIR\n");
    return 1;
  }
  const std::string dir = argv[1];
  try {
    write_synth_model(small_model("qwen2"), dir + "/model_qwen2.gguf");
    write_synth_model(small_model("llama"), dir + "/model_llama.gguf");
    write_synth_model(small_model("qwen2", "iq4_xs"), dir + "/model_iq4_xs.gguf");
    write_synth_model(small_model("llama", "tq1_0"), dir + "/model_tq1_0.gguf");
    write_synth_model(small_model("qwen2", "tq2_0"), dir + "/model_tq2_0.gguf");
    write_types(dir + "/types.gguf");
    write_values(dir + "/values.gguf");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_seeds: %s\n", e.what());
    return 1;
  }
  return 0;
}
