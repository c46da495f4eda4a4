// Synthetic models: GGUF files with the exact tensor shapes, tensor types and metadata of a real model
// (by default Qwen2.5-0.5B-Instruct Q4_K_M as llama.cpp writes it) and random but deterministic
// weights. They stand in for the real model in benchmarks and tests: same bytes to stream, same code
// paths, no download.
//
// Weights are drawn from a seeded PRNG (splitmix64; the same bytes on every platform), scaled like a
// trained model's (matrices std weight_std, norm weights near 1, small biases), and quantised with
// quantize_row so every block is valid. The forward pass of such a model gives finite, varied logits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/gguf.h"

namespace tllm {

// How the weight matrices are stored. Norm weights and biases are always F32.
enum class SynthMix : uint8_t {
  // llama.cpp's Q4_K_M: Q4_K matrices; Q6_K for attn_v and ffn_down in the layers that get more
  // bits (the first and last eighth of the layers and every third layer between) and for the
  // output projection (token_embd.weight when the embeddings are tied). A matrix whose row length
  // is not a multiple of 256 falls back to Q5_0 (for Q4_K) or Q8_0 (for Q6_K), as llama.cpp does.
  Q4_K_M,
  // Every matrix SynthConfig::weight_type, the output projection included (llama.cpp's quantiser
  // mostly gives it Q6_K; here it keeps the type asked for). A matrix whose row length is not a
  // multiple of the type's block size falls back as llama.cpp's quantiser does (synth_matrix_type).
  Uniform,
};

// The tokenizer written into the file.
enum class SynthVocab : uint8_t {
  // tokenizer.ggml.model "gpt2" as Qwen2 has it: byte-level tokens (or those of tokenizer_dir) and
  // ChatML control tokens.
  ByteLevel,
  // tokenizer.ggml.model "llama" as Llama 2 has it: scored SentencePiece pieces with byte fallback.
  SentencePiece,
};

struct SynthConfig {
  std::string arch = "qwen2";  // "qwen2" or "llama"
  std::string name = "Synthetic Qwen2.5 0.5B Instruct";
  int n_layer = 24;
  int n_embd = 896;
  int n_ff = 4864;
  int n_head = 14;
  int n_head_kv = 2;
  // Width of the attention heads, written as attention.key_length and value_length; 0: n_embd /
  // n_head, and neither key is written (as for Qwen2.5 and Llama).
  int head_dim = 0;
  int n_vocab = 151936;        // rows of token_embd.weight and length of the token list
  int n_ctx = 32768;           // <arch>.context_length
  float rope_theta = 1e6f;
  float rms_eps = 1e-6f;
  bool tied = true;            // no output.weight: the output projection reuses token_embd.weight
  bool qkv_bias = true;        // attn_q/k/v.bias tensors
  // (head_dim/2) divisors of the rope frequencies, written as rope_freqs.weight (F32) as llama.cpp
  // writes Llama 3.1's rope scaling; empty: no such tensor.
  std::vector<float> rope_freqs;
  // rope.scaling.type, written when not empty: "linear" or "yarn", with rope.scaling.factor
  // rope_factor (> 0) and, for yarn where rope_original_context > 0,
  // rope.scaling.original_context_length.
  std::string rope_scaling;
  float rope_factor = 1.0f;
  int rope_original_context = 0;
  float rope_attn_factor = 0.0f;  // rope.scaling.attn_factor, written when > 0
  SynthMix mix = SynthMix::Q4_K_M;
  GgmlType weight_type = GgmlType::Q8_0;  // mix Uniform: the matrices' type (can_quantize)
  uint64_t seed = 0x7116e11a5eedull;
  float weight_std = 0.02f;    // standard deviation of the matrix weights
  SynthVocab vocab = SynthVocab::ByteLevel;
  // Folder with a Hugging Face byte-level BPE tokenizer (vocab.json + merges.txt); ByteLevel only.
  // Empty: a byte-level vocabulary without merges (see write_synth_model).
  std::string tokenizer_dir;
  // tokenizer.ggml.pre of the byte-level vocabulary: how its text is split before the merges.
  std::string tokenizer_pre = "qwen2";

  // head_dim, or n_embd / n_head where it is 0.
  int head_width() const { return head_dim ? head_dim : n_embd / n_head; }
};

// One tensor of the model as it will be declared in the file.
struct SynthTensor {
  std::string name;
  GgmlType type = GgmlType::F32;
  std::vector<int64_t> dims;  // GGUF order: dims[0] = row length
};

// The type of a matrix of rows of `row_length` values that is asked to be `t`: `t` where the row
// is whole blocks of it; otherwise llama.cpp's fallback: TQ1_0, TQ2_0 -> Q4_0; Q2_K, Q3_K, IQ4_XS
// and the i-quants IQ1_S … IQ3_S -> IQ4_NL; Q4_K -> Q5_0; Q5_K -> Q5_1; Q6_K -> Q8_0; F16 for the other types and where the
// fallback does not fit either. (The 896-wide rows of Qwen2.5-0.5B thus hold IQ4_NL for IQ4_XS.)
GgmlType synth_matrix_type(GgmlType t, int64_t row_length);

// The names of the weight storage `tiny_llm synth --weights` offers: "q4_k_m" (SynthMix::Q4_K_M),
// then "f32", "f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_k" .. "q6_k", "iq4_nl",
// "iq4_xs", "iq3_s", "iq3_xxs", "iq2_s", "iq2_xs", "iq2_xxs", "iq1_m", "iq1_s", "tq1_0", "tq2_0"
// (SynthMix::Uniform of that type).
const std::vector<std::string>& synth_weight_names();
// Sets c.mix and c.weight_type for one of synth_weight_names(); throws GgufError naming the valid
// names for any other.
void set_synth_weights(SynthConfig& c, const std::string& name);

// Qwen2.5-0.5B-Instruct Q4_K_M: 24 layers, n_embd 896, n_ff 4864, 14 heads / 2 KV heads
// (head_dim 64), n_vocab 151936, tied embeddings, q/k/v biases; 290 tensors, about 400 MB.
SynthConfig qwen25_05b_q4km();
// Llama-3.2-1B-Instruct Q4_K_M: arch llama, 16 layers, n_embd 2048, n_ff 8192, 32 heads / 8 KV
// heads (head_dim 64), n_vocab 128256, tied embeddings, no biases, rope_theta 500000 with Llama
// 3.2's rope scaling (factor 32, original context 8192); 147 tensors, about 0.8 GB. Its vocabulary
// is byte-level like the Qwen model's, not Llama 3's.
SynthConfig llama32_1b_q4km();
// Falcon3-1B-Instruct Q4_K_M: arch llama, 18 layers, n_embd 2048, n_ff 8192, 8 heads / 4 KV heads
// of head_dim 256 (attention.key_length; q is n_embd wide), n_vocab 131072, an untied output.weight,
// no biases, rope_theta 1000042 without scaling, rms_eps 1e-6, n_ctx 8192; 165 tensors, about
// 1.0 GB. Its vocabulary is byte-level like the Qwen model's, not Falcon3's.
SynthConfig falcon3_1b_q4km();
// A qwen2 model small enough for unit tests with the same tensor-type mix as the benchmark model:
// 2 layers (layer 0 plain, layer 1 "more bits"), n_embd 64, n_ff 256, 4 heads / 2 KV heads
// (head_dim 16), byte-level vocabulary of 272 tokens, n_ctx 256.
SynthConfig tiny_test_model();
// The llama variant of tiny_test_model: arch "llama", untied output.weight, no q/k/v biases,
// rope_theta 10000, rms_eps 1e-5.
SynthConfig tiny_llama_test_model();
// tiny_llama_test_model with Llama 3.1's rope scaling: rope_theta 500000 and rope_freqs.weight
// computed as Llama 3.1's converter does (factor 8, low/high frequency factors 1 and 4), with an
// original context of 64 instead of 8192 so that the scaling changes short prompts, and weights 5
// times as large as tiny_llama_test_model's so that attention depends on where the heads turn.
SynthConfig tiny_llama3_test_model();
// tiny_llama_test_model with heads as wide as Mistral-Nemo's (head_dim 128 from
// attention.key_length, not n_embd / n_head): n_embd 256, 4 heads / 2 KV heads, so that q and the
// attention output hold n_head·head_dim = 512 values, twice n_embd; n_ctx 2048.
SynthConfig tiny_nemo_test_model();
// c named `name`, with n_head heads over n_head_kv KV heads, head_dim wide (attention.key_length).
SynthConfig with_heads(SynthConfig c, const std::string& name, int n_head, int n_head_kv, int head_dim);
// tiny_nemo_test_model with heads of 256, the widest a model may have (Falcon3's width): 2 heads
// over 1 KV head, so that q and the attention output hold 512 values.
SynthConfig tiny_wide_heads_test_model();
// tiny_llama_test_model with Llama 2's tokenizer layout: the SentencePiece vocabulary and the
// Llama 2 chat template (see write_synth_model), n_vocab 320 to hold its 299 pieces.
SynthConfig tiny_llama2_test_model();

// The tensors the config declares, in file order: token_embd.weight, then per layer blk.N.
// attn_norm, attn_q (+bias), attn_k (+bias), attn_v (+bias), attn_output, ffn_norm, ffn_gate,
// ffn_up, ffn_down, then output_norm.weight, when untied output.weight, and rope_freqs.weight when
// the config has rope_freqs. Throws GgufError when
// the config is inconsistent (head counts and width, block sizes, vocabulary size).
std::vector<SynthTensor> synth_tensors(const SynthConfig& c);

// Writes the model to `path`; progress(done_bytes, total_bytes) as tensor data is written.
// Metadata: general.*, the <arch>.* hyperparameters, and the tokenizer of c.vocab.
// ByteLevel: a gpt2-style tokenizer (pre "qwen2"):
//   - with tokenizer_dir: the ids of vocab.json and the merges of merges.txt;
//   - without: the 256 byte-level tokens (GPT-2's byte-to-unicode mapping, in the order of the
//     GPT-2/Qwen2 vocabularies, so single-byte ids agree with Qwen2's) and no merges.
//   Then the control tokens <|endoftext|>, <|im_start|>, <|im_end|> (ids 151643..151645 for Qwen2;
//   256..258 for the byte-level vocabulary), then "[PAD<id>]" tokens (type unused) up to n_vocab.
//   bos = padding = <|endoftext|>, eos = <|im_end|>, add_bos_token false, a ChatML chat template
//   with Qwen's default system prompt.
// SentencePiece: tokenizer.ggml.model "llama" laid out as llama.cpp converts Llama 2's: <unk> 0
//   (type unknown), <s> 1 and </s> 2 (control), the byte pieces <0x00>..<0xFF> 3..258 (type byte),
//   then 40 normal pieces with scores -1, -2, ...: merged pieces such as "▁the", "▁[", "INST" and
//   "▁hi" (U+2581 "▁" writes a space), so that a Llama 2 chat prompt merges as Llama 2's does,
//   then the single characters they are made of. Then "[PAD<id>]" pieces (type unused) up to
//   n_vocab. Every piece has a score in tokenizer.ggml.scores (0 for the special and byte pieces);
//   no pre-tokenizer and no merges. unknown 0, bos 1, eos 2, add_bos_token true, add_eos_token
//   false, add_space_prefix true, and the Llama 2 chat template (no default system prompt).
// Throws GgufError on an inconsistent config (a tokenizer_dir with the SentencePiece vocabulary
// included), an unreadable tokenizer_dir or an I/O failure.
void write_synth_model(const SynthConfig& c, const std::string& path,
                       const std::function<void(size_t done, size_t total)>& progress = {});

}  // namespace tllm
