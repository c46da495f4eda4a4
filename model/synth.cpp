// Synthetic model writer: declares the tensors and metadata of the configured model and generates
// every tensor's values in fixed-size chunks of rows, each chunk from its own PRNG stream (seeded by
// the config seed, the tensor index and the chunk index), so the bytes do not depend on how the work
// is scheduled.
#include "model/synth.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/quants.h"

namespace tllm {

namespace {

// llama.cpp token types.
constexpr int32_t kTokenNormal = 1;
constexpr int32_t kTokenUnknown = 2;
constexpr int32_t kTokenControl = 3;
constexpr int32_t kTokenUnused = 5;
constexpr int32_t kTokenByte = 6;

// llama.cpp's file type (general.file_type) of a model of mostly `t`; for the K-quants the _S mix,
// whose matrices are mostly that type.
uint32_t file_type_of(GgmlType t) {
  switch (t) {
    case GgmlType::F32: return 0;
    case GgmlType::F16: return 1;
    case GgmlType::Q4_0: return 2;
    case GgmlType::Q4_1: return 3;
    case GgmlType::Q8_0: return 7;
    case GgmlType::Q5_0: return 8;
    case GgmlType::Q5_1: return 9;
    case GgmlType::Q2_K: return 10;
    case GgmlType::Q3_K: return 11;   // Q3_K_S
    case GgmlType::Q4_K: return 14;   // Q4_K_S
    case GgmlType::Q5_K: return 16;   // Q5_K_S
    case GgmlType::Q6_K: return 18;
    case GgmlType::IQ2_XXS: return 19;
    case GgmlType::IQ2_XS: return 20;
    case GgmlType::IQ3_XXS: return 23;
    case GgmlType::IQ1_S: return 24;
    case GgmlType::IQ4_NL: return 25;
    case GgmlType::IQ3_S: return 26;
    case GgmlType::IQ2_S: return 28;
    case GgmlType::IQ4_XS: return 30;
    case GgmlType::IQ1_M: return 31;
    case GgmlType::BF16: return 32;
    case GgmlType::TQ1_0: return 36;
    case GgmlType::TQ2_0: return 37;
    default: return 0;
  }
}

uint32_t file_type(const SynthConfig& c) { return c.mix == SynthMix::Q4_K_M ? 15 : file_type_of(c.weight_type); }

// The types a uniform mix offers, in the order synth_weight_names lists them.
constexpr GgmlType kUniformTypes[] = {
    GgmlType::F32,    GgmlType::F16,     GgmlType::BF16,  GgmlType::Q4_0,   GgmlType::Q4_1,   GgmlType::Q5_0,
    GgmlType::Q5_1,   GgmlType::Q8_0,    GgmlType::Q2_K,  GgmlType::Q3_K,   GgmlType::Q4_K,   GgmlType::Q5_K,
    GgmlType::Q6_K,   GgmlType::IQ4_NL,  GgmlType::IQ4_XS, GgmlType::IQ3_S, GgmlType::IQ3_XXS, GgmlType::IQ2_S,
    GgmlType::IQ2_XS, GgmlType::IQ2_XXS, GgmlType::IQ1_M, GgmlType::IQ1_S,  GgmlType::TQ1_0,  GgmlType::TQ2_0,
};

std::string lower(std::string s) {
  for (char& ch : s) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

// splitmix64: a 64-bit counter passed through a bijective mixer; identical output everywhere.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Approximately standard normal: the sum of four uniform 16-bit draws (Irwin-Hall, bounded at
  // ±3.46), centred and scaled to unit variance.
  float normal() {
    const uint64_t r = next();
    const int32_t sum = int32_t(r & 0xffff) + int32_t(r >> 16 & 0xffff) + int32_t(r >> 32 & 0xffff) +
                        int32_t(r >> 48);
    constexpr float kInvStd = 1.0f / 37837.23f;  // 1 / sqrt(4 · (65536² - 1) / 12)
    return float(sum - 2 * 65535) * kInvStd;
  }

 private:
  uint64_t state_;
};

uint64_t stream_seed(uint64_t seed, size_t tensor, int64_t chunk) {
  Rng r(seed ^ (uint64_t(tensor) * 0xd1b54a32d192ed03ull) ^ (uint64_t(chunk) * 0x8cb92ba72f3d8dd7ull));
  return r.next();
}

[[noreturn]] void bad_config(const std::string& problem) {
  throw GgufError("synthetic model: " + problem);
}

void validate(const SynthConfig& c) {
  if (c.arch != "qwen2" && c.arch != "llama") bad_config("unknown arch '" + c.arch + "' (qwen2 or llama)");
  if (c.n_layer <= 0 || c.n_embd <= 0 || c.n_ff <= 0 || c.n_head <= 0 || c.n_head_kv <= 0 ||
      c.n_vocab <= 0 || c.n_ctx <= 0) {
    bad_config("n_layer, n_embd, n_ff, n_head, n_head_kv, n_vocab and n_ctx must be positive");
  }
  if (c.head_dim < 0) bad_config("head_dim must not be negative (0: n_embd / n_head)");
  if (c.head_dim == 0 && c.n_embd % c.n_head != 0) {
    bad_config("n_embd " + std::to_string(c.n_embd) + " is not a multiple of n_head " + std::to_string(c.n_head));
  }
  if (c.head_width() % 2 != 0) bad_config("head_dim " + std::to_string(c.head_width()) + " is odd");
  if (c.n_head % c.n_head_kv != 0) {
    bad_config("n_head " + std::to_string(c.n_head) + " is not a multiple of n_head_kv " +
               std::to_string(c.n_head_kv));
  }
  if (c.n_embd % 32 != 0 || c.n_ff % 32 != 0 || c.n_head * c.head_width() % 32 != 0) {
    bad_config("n_embd, n_ff and n_head·head_dim must be multiples of 32");
  }
  if (!c.rope_freqs.empty() && int(c.rope_freqs.size()) != c.head_width() / 2) {
    bad_config("rope_freqs has " + std::to_string(c.rope_freqs.size()) + " values, expected head_dim/2");
  }
  if (!c.rope_scaling.empty() && c.rope_scaling != "linear" && c.rope_scaling != "yarn") {
    bad_config("rope scaling '" + c.rope_scaling + "' (linear or yarn)");
  }
  if (!c.rope_scaling.empty() && !(c.rope_factor > 0.0f && c.rope_factor <= 1e6f)) {
    bad_config("rope factor " + std::to_string(c.rope_factor) + " is not in (0, 1e6]");
  }
  if (c.rope_original_context < 0 || (c.rope_original_context > 0 && c.rope_scaling != "yarn")) {
    bad_config("an original context (" + std::to_string(c.rope_original_context) + ") is for yarn rope scaling only");
  }
  if (!(c.rope_attn_factor >= 0.0f && c.rope_attn_factor <= 1e3f)) {
    bad_config("rope attn_factor " + std::to_string(c.rope_attn_factor) + " is not in [0, 1e3]");
  }
  if (c.mix == SynthMix::Uniform && !can_quantize(c.weight_type)) {
    bad_config(std::string("weight type ") + ggml_type_name(c.weight_type) + " cannot be written");
  }
  if (c.tokenizer_pre.empty()) bad_config("tokenizer_pre is empty");
  if (c.vocab == SynthVocab::SentencePiece && !c.tokenizer_dir.empty()) {
    bad_config("tokenizer_dir '" + c.tokenizer_dir +
               "' holds a byte-level tokenizer; the SentencePiece vocabulary takes none");
  }
}

// llama.cpp's choice of the layers that get more bits in the _M mixes.
bool use_more_bits(int layer, int n_layer) {
  return layer < n_layer / 8 || layer >= 7 * n_layer / 8 || (layer - n_layer / 8) % 3 == 2;
}

enum class Role { Matrix, MoreBitsMatrix, OutputMatrix };

GgmlType matrix_type(const SynthConfig& c, Role role, int64_t row_length) {
  if (c.mix == SynthMix::Uniform) return synth_matrix_type(c.weight_type, row_length);
  return synth_matrix_type(role == Role::Matrix ? GgmlType::Q4_K : GgmlType::Q6_K, row_length);
}

// ---- tokenizer ---------------------------------------------------------------------------------

struct Vocab {
  std::string model;                // tokenizer.ggml.model: "gpt2" or "llama"
  std::vector<std::string> tokens;  // (n_vocab)
  std::vector<int32_t> types;       // (n_vocab)
  std::vector<float> scores;        // (n_vocab) SentencePiece only
  std::vector<std::string> merges;  // byte-level only
  int32_t unk = -1, bos = -1, eos = -1, pad = -1;
  bool add_bos = false;
  const char* chat_template = "";
};

// Checks that the vocabulary fits n_vocab and fills the rest with "[PAD<id>]" tokens (type unused,
// score 0 where the vocabulary has scores).
void pad_vocab(Vocab& v, int n_vocab, const char* what) {
  if (int64_t(n_vocab) < int64_t(v.tokens.size())) {
    bad_config("n_vocab " + std::to_string(n_vocab) + " is smaller than the " + std::to_string(v.tokens.size()) +
               " tokens of the " + what);
  }
  for (int32_t id = int32_t(v.tokens.size()); id < n_vocab; ++id) {
    v.tokens.push_back("[PAD" + std::to_string(id) + "]");
    v.types.push_back(kTokenUnused);
    if (!v.scores.empty()) v.scores.push_back(0.0f);
  }
}

// GPT-2's byte-to-unicode mapping: printable bytes stand for themselves, the others are shifted to
// code points 256 and up. Listed in the order of the GPT-2 and Qwen2 vocabularies (printable
// ranges first).
std::vector<std::string> byte_level_tokens() {
  auto utf8 = [](uint32_t cp) {
    std::string s;
    if (cp < 0x80) {
      s += char(cp);
    } else {
      s += char(0xc0 | (cp >> 6));
      s += char(0x80 | (cp & 0x3f));
    }
    return s;
  };
  std::vector<bool> printable(256, false);
  for (uint32_t b = '!'; b <= '~'; ++b) printable[b] = true;
  for (uint32_t b = 0xa1; b <= 0xac; ++b) printable[b] = true;
  for (uint32_t b = 0xae; b <= 0xff; ++b) printable[b] = true;
  std::vector<std::string> tokens;
  for (uint32_t b = 0; b < 256; ++b) {
    if (printable[b]) tokens.push_back(utf8(b));
  }
  uint32_t shifted = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    if (!printable[b]) tokens.push_back(utf8(shifted++));
  }
  return tokens;
}

void read_hf_tokenizer(const std::string& dir, Vocab& v) {
  const std::string vocab_path = dir + "/vocab.json";
  std::ifstream vf(vocab_path);
  if (!vf) throw GgufError(vocab_path + ": cannot open");
  nlohmann::json j;
  try {
    vf >> j;
  } catch (const nlohmann::json::exception& e) {
    throw GgufError(vocab_path + ": not valid JSON (" + e.what() + ")");
  }
  if (!j.is_object() || j.empty()) throw GgufError(vocab_path + ": expected a non-empty object of token ids");
  std::vector<std::string> tokens(j.size());
  std::vector<bool> seen(j.size(), false);
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!it.value().is_number_integer()) throw GgufError(vocab_path + ": id of '" + it.key() + "' is not an integer");
    const int64_t id = it.value().get<int64_t>();
    if (id < 0 || id >= int64_t(tokens.size())) {
      throw GgufError(vocab_path + ": id " + std::to_string(id) + " of '" + it.key() +
                      "' is outside 0.." + std::to_string(tokens.size() - 1));
    }
    if (seen[size_t(id)]) throw GgufError(vocab_path + ": id " + std::to_string(id) + " appears twice");
    seen[size_t(id)] = true;
    tokens[size_t(id)] = it.key();
  }
  v.tokens = std::move(tokens);
  v.types.assign(v.tokens.size(), kTokenNormal);

  const std::string merges_path = dir + "/merges.txt";
  std::ifstream mf(merges_path);
  if (!mf) throw GgufError(merges_path + ": cannot open");
  std::string line;
  while (std::getline(mf, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line.rfind("#version", 0) == 0) continue;
    if (line.find(' ') == std::string::npos) {
      throw GgufError(merges_path + ": merge '" + line + "' is not two tokens separated by a space");
    }
    v.merges.push_back(line);
  }
}

// Qwen2.5-Instruct's chat template (tests/tokenizer/data/qwen2.5): ChatML with Qwen's default
// system prompt, and tools, tool calls and tool messages.
const char* kChatMLTemplate = R"jinja({%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %})jinja";

Vocab byte_level_vocab(const SynthConfig& c) {
  Vocab v;
  v.model = "gpt2";
  if (c.tokenizer_dir.empty()) {
    v.tokens = byte_level_tokens();
    v.types.assign(v.tokens.size(), kTokenNormal);
  } else {
    read_hf_tokenizer(c.tokenizer_dir, v);
  }
  v.bos = v.pad = int32_t(v.tokens.size());  // <|endoftext|>
  v.eos = v.bos + 2;                          // <|im_end|>
  for (const char* special : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
    v.tokens.emplace_back(special);
    v.types.push_back(kTokenControl);
  }
  v.chat_template = kChatMLTemplate;
  pad_vocab(v, c.n_vocab, "vocabulary and its control tokens");
  return v;
}

// The normal pieces of the SentencePiece vocabulary, highest score first, as sentencepiece's BPE
// trainer orders them: merged pieces, each the concatenation of two pieces of the list (the order
// of their scores is the order the encoder merges them in), then the single characters. "▁"
// (U+2581) writes a space. Enough to merge the Llama 2 chat prompt "[INST] hi [/INST]" into the
// pieces Llama 2's own vocabulary gives it ("▁[", "INST", "]", "▁hi", "▁[", "/", "INST", "]") and
// to encode a few words; other characters fall back to byte pieces.
const char* const kSentencePiecePieces[] = {
    "\u2581t", "he", "\u2581the", "in", "\u2581a", "er", "on", "\u2581s", "IN", "ST",
    "INST", "\u2581[", "\u2581h", "hi", "\u2581hi", "\u2581w", "or", "ld", "\u2581wor", "\u2581world",
    "\u2581", "e", "t", "a", "h", "i", "n", "o", "r", "s",
    "l", "d", "w", "I", "N", "S", "T", "[", "]", "/",
};

// Llama-2-7b-chat-hf's chat template: the system message inside <<SYS>> at the start of the first
// user turn, each user turn as "<s>[INST] text [/INST]", each reply as " text </s>".
const char* kLlama2Template =
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = "
    "messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}"
    "{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + "
    "'\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}"
    "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}"
    "{% endfor %}";

Vocab sentencepiece_vocab(const SynthConfig& c) {
  Vocab v;
  v.model = "llama";
  v.tokens = {"<unk>", "<s>", "</s>"};
  v.types = {kTokenUnknown, kTokenControl, kTokenControl};
  v.scores = {0.0f, 0.0f, 0.0f};
  v.unk = 0;
  v.bos = 1;
  v.eos = 2;
  v.add_bos = true;
  for (int b = 0; b < 256; ++b) {
    char piece[7];
    std::snprintf(piece, sizeof(piece), "<0x%02X>", b);
    v.tokens.emplace_back(piece);
    v.types.push_back(kTokenByte);
    v.scores.push_back(0.0f);
  }
  float score = 0.0f;
  for (const char* piece : kSentencePiecePieces) {
    v.tokens.emplace_back(piece);
    v.types.push_back(kTokenNormal);
    v.scores.push_back(score -= 1.0f);
  }
  v.chat_template = kLlama2Template;
  pad_vocab(v, c.n_vocab, "SentencePiece vocabulary");
  return v;
}

Vocab build_vocab(const SynthConfig& c) {
  return c.vocab == SynthVocab::SentencePiece ? sentencepiece_vocab(c) : byte_level_vocab(c);
}

// ---- weights -----------------------------------------------------------------------------------

bool ends_with(const std::string& s, const char* suffix) {
  const size_t n = std::char_traits<char>::length(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

// Fills dst with the tensor's values, quantised to its type, a chunk of rows at a time.
void generate_tensor(const SynthConfig& c, size_t index, const SynthTensor& t, uint8_t* dst) {
  if (t.name == "rope_freqs.weight") {
    std::memcpy(dst, c.rope_freqs.data(), c.rope_freqs.size() * sizeof(float));
    return;
  }
  float mean = 0, stddev = c.weight_std;
  if (ends_with(t.name, "_norm.weight")) {
    mean = 1.0f;
    stddev = 0.05f;
  } else if (ends_with(t.name, ".bias")) {
    stddev = 0.02f;
  }
  int64_t bv = 0, bb = 0;
  ggml_type_block(t.type, &bv, &bb);
  const int64_t k = t.dims[0];
  int64_t rows = 1;
  for (size_t d = 1; d < t.dims.size(); ++d) rows *= t.dims[d];
  const size_t row_bytes = size_t(k / bv * bb);
  const int64_t chunk_rows = std::max<int64_t>(1, (int64_t(1) << 16) / k);
  const int64_t n_chunks = (rows + chunk_rows - 1) / chunk_rows;

  parallel_for(n_chunks, [&](int64_t ch) {
    const int64_t r0 = ch * chunk_rows;
    const int64_t nr = std::min(chunk_rows, rows - r0);
    std::vector<float> values(static_cast<size_t>(nr * k));  // (nr, k)
    Rng rng(stream_seed(c.seed, index, ch));
    for (float& v : values) v = mean + stddev * rng.normal();
    quantize_row(t.type, values.data(), dst + size_t(r0) * row_bytes, nr * k);
  });
}

}  // namespace

GgmlType synth_matrix_type(GgmlType t, int64_t row_length) {
  int64_t bv = 0;
  if (ggml_type_block(t, &bv, nullptr) && row_length % bv == 0) return t;
  GgmlType fallback = GgmlType::F16;
  switch (t) {
    case GgmlType::TQ1_0: case GgmlType::TQ2_0: fallback = GgmlType::Q4_0; break;
    case GgmlType::Q2_K: case GgmlType::Q3_K: case GgmlType::IQ4_XS: case GgmlType::IQ3_S:
    case GgmlType::IQ3_XXS: case GgmlType::IQ2_S: case GgmlType::IQ2_XS: case GgmlType::IQ2_XXS:
    case GgmlType::IQ1_M: case GgmlType::IQ1_S:
      fallback = GgmlType::IQ4_NL;
      break;
    case GgmlType::Q4_K: fallback = GgmlType::Q5_0; break;
    case GgmlType::Q5_K: fallback = GgmlType::Q5_1; break;
    case GgmlType::Q6_K: fallback = GgmlType::Q8_0; break;
    default: break;
  }
  ggml_type_block(fallback, &bv, nullptr);
  return row_length % bv == 0 ? fallback : GgmlType::F16;
}

const std::vector<std::string>& synth_weight_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v = {"q4_k_m"};
    for (GgmlType t : kUniformTypes) v.push_back(lower(ggml_type_name(t)));
    return v;
  }();
  return names;
}

void set_synth_weights(SynthConfig& c, const std::string& name) {
  if (name == "q4_k_m") {
    c.mix = SynthMix::Q4_K_M;
    return;
  }
  for (GgmlType t : kUniformTypes) {
    if (name == lower(ggml_type_name(t))) {
      c.mix = SynthMix::Uniform;
      c.weight_type = t;
      return;
    }
  }
  std::string valid;
  for (const std::string& n : synth_weight_names()) valid += (valid.empty() ? "" : ", ") + n;
  bad_config("unknown weight type '" + name + "' (" + valid + ")");
}

SynthConfig qwen25_05b_q4km() { return SynthConfig{}; }

SynthConfig tiny_test_model() {
  SynthConfig c;
  c.name = "Synthetic tiny qwen2";
  c.n_layer = 2;
  c.n_embd = 64;
  c.n_ff = 256;
  c.n_head = 4;
  c.n_head_kv = 2;
  c.n_vocab = 272;
  c.n_ctx = 256;
  return c;
}

SynthConfig tiny_llama_test_model() {
  SynthConfig c = tiny_test_model();
  c.arch = "llama";
  c.name = "Synthetic tiny llama";
  c.tied = false;
  c.qkv_bias = false;
  c.rope_theta = 10000.0f;
  c.rms_eps = 1e-5f;
  return c;
}

SynthConfig tiny_nemo_test_model() {
  SynthConfig c = tiny_llama_test_model();
  c.name = "Synthetic tiny llama with Mistral-Nemo's head width";
  c.n_embd = 256;
  c.head_dim = 128;
  c.n_ctx = 2048;  // room for the longer contexts of the CUDA decode forms (tests/model)
  return c;
}

SynthConfig with_heads(SynthConfig c, const std::string& name, int n_head, int n_head_kv, int head_dim) {
  c.name = name;
  c.n_head = n_head;
  c.n_head_kv = n_head_kv;
  c.head_dim = head_dim;
  return c;
}

SynthConfig tiny_wide_heads_test_model() {
  SynthConfig c = with_heads(tiny_nemo_test_model(), "Synthetic tiny llama with heads of 256", 2, 1, 256);
  c.weight_std = 0.1f;  // attention scores of a few units, so that how q and k turn shows in the logits
  return c;
}

SynthConfig tiny_llama2_test_model() {
  SynthConfig c = tiny_llama_test_model();
  c.name = "Synthetic tiny llama 2";
  c.vocab = SynthVocab::SentencePiece;
  c.n_vocab = 320;  // 3 special + 256 byte + 40 normal pieces, then padding
  return c;
}

namespace {

// Llama 3.1's rope scaling as its converter writes rope_freqs.weight: pair j keeps its frequency
// where its wavelength is under original/high positions, is slowed `factor` times where it is over
// original/low, and is interpolated between (a smooth ramp).
std::vector<float> llama3_rope_freqs(int head_dim, float theta, double factor, double low, double high,
                                     double original) {
  const double pi = 3.14159265358979323846;
  std::vector<float> freqs;
  for (int j = 0; j < head_dim / 2; ++j) {
    const double wavelength = 2 * pi / std::pow(double(theta), -2.0 * j / head_dim);
    double f = 1;
    if (wavelength > original / low) {
      f = factor;
    } else if (wavelength >= original / high) {
      const double smooth = (original / wavelength - low) / (high - low);
      f = 1 / ((1 - smooth) / factor + smooth);
    }
    freqs.push_back(float(f));
  }
  return freqs;
}

}  // namespace

SynthConfig tiny_llama3_test_model() {
  SynthConfig c = tiny_llama_test_model();
  c.name = "Synthetic tiny llama 3";
  c.rope_theta = 500000.0f;
  c.weight_std = 0.1f;  // attention scores of a few units, so that how q and k turn shows in the logits
  // Llama 3.1 has factor 8 and original = 8192; 64 here puts the ramp where a test's positions turn.
  c.rope_freqs = llama3_rope_freqs(c.head_width(), c.rope_theta, 8, 1, 4, 64);
  return c;
}

SynthConfig llama32_1b_q4km() {
  SynthConfig c;
  c.arch = "llama";
  c.name = "Synthetic Llama 3.2 1B Instruct";
  c.n_layer = 16;
  c.n_embd = 2048;
  c.n_ff = 8192;
  c.n_head = 32;
  c.n_head_kv = 8;
  c.n_vocab = 128256;
  c.n_ctx = 131072;
  c.rope_theta = 500000.0f;
  c.rms_eps = 1e-5f;
  c.qkv_bias = false;
  c.rope_freqs = llama3_rope_freqs(c.head_width(), c.rope_theta, 32, 1, 4, 8192);
  return c;
}

SynthConfig falcon3_1b_q4km() {
  SynthConfig c = with_heads(llama32_1b_q4km(), "Synthetic Falcon3 1B Instruct", 8, 4, 256);
  c.n_layer = 18;
  c.n_vocab = 131072;
  c.n_ctx = 8192;
  c.rope_theta = 1000042.0f;
  c.rms_eps = 1e-6f;
  c.tied = false;
  c.rope_freqs.clear();
  return c;
}

std::vector<SynthTensor> synth_tensors(const SynthConfig& c) {
  validate(c);
  const int64_t n_embd = c.n_embd, n_ff = c.n_ff, n_vocab = c.n_vocab;
  const int64_t head_dim = c.head_width();
  const int64_t q_dim = c.n_head * head_dim, kv_dim = c.n_head_kv * head_dim;
  std::vector<SynthTensor> ts;
  auto add = [&](const std::string& name, GgmlType type, std::vector<int64_t> dims) {
    ts.push_back({name, type, std::move(dims)});
  };
  auto matrix = [&](const std::string& name, Role role, int64_t k, int64_t n) {
    add(name, matrix_type(c, role, k), {k, n});
  };
  // With tied embeddings token_embd.weight is also the output projection and is typed as one.
  matrix("token_embd.weight", c.tied ? Role::OutputMatrix : Role::Matrix, n_embd, n_vocab);  // (n_vocab, n_embd)
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    const Role more = use_more_bits(l, c.n_layer) ? Role::MoreBitsMatrix : Role::Matrix;
    add(p + "attn_norm.weight", GgmlType::F32, {n_embd});
    matrix(p + "attn_q.weight", Role::Matrix, n_embd, q_dim);        // (n_head·head_dim, n_embd)
    if (c.qkv_bias) add(p + "attn_q.bias", GgmlType::F32, {q_dim});
    matrix(p + "attn_k.weight", Role::Matrix, n_embd, kv_dim);                 // (n_head_kv·head_dim, n_embd)
    if (c.qkv_bias) add(p + "attn_k.bias", GgmlType::F32, {kv_dim});
    matrix(p + "attn_v.weight", more, n_embd, kv_dim);                         // (n_head_kv·head_dim, n_embd)
    if (c.qkv_bias) add(p + "attn_v.bias", GgmlType::F32, {kv_dim});
    matrix(p + "attn_output.weight", Role::Matrix, q_dim, n_embd);   // (n_embd, n_head·head_dim)
    add(p + "ffn_norm.weight", GgmlType::F32, {n_embd});
    matrix(p + "ffn_gate.weight", Role::Matrix, n_embd, n_ff);                 // (n_ff, n_embd)
    matrix(p + "ffn_up.weight", Role::Matrix, n_embd, n_ff);                   // (n_ff, n_embd)
    matrix(p + "ffn_down.weight", more, n_ff, n_embd);                         // (n_embd, n_ff)
  }
  add("output_norm.weight", GgmlType::F32, {n_embd});
  if (!c.tied) matrix("output.weight", Role::OutputMatrix, n_embd, n_vocab);   // (n_vocab, n_embd)
  if (!c.rope_freqs.empty()) add("rope_freqs.weight", GgmlType::F32, {int64_t(c.rope_freqs.size())});  // (head_dim/2)
  return ts;
}

void write_synth_model(const SynthConfig& c, const std::string& path,
                       const std::function<void(size_t, size_t)>& progress) {
  const std::vector<SynthTensor> tensors = synth_tensors(c);
  const Vocab vocab = build_vocab(c);
  const std::string a = c.arch + ".";

  GgufWriter w;
  w.set_string("general.architecture", c.arch);
  w.set_string("general.name", c.name);
  w.set_u32("general.file_type", file_type(c));
  w.set_u32("general.quantization_version", 2);
  w.set_u32(a + "context_length", uint32_t(c.n_ctx));
  w.set_u32(a + "embedding_length", uint32_t(c.n_embd));
  w.set_u32(a + "feed_forward_length", uint32_t(c.n_ff));
  w.set_u32(a + "block_count", uint32_t(c.n_layer));
  w.set_u32(a + "attention.head_count", uint32_t(c.n_head));
  w.set_u32(a + "attention.head_count_kv", uint32_t(c.n_head_kv));
  if (c.head_dim) {
    w.set_u32(a + "attention.key_length", uint32_t(c.head_dim));
    w.set_u32(a + "attention.value_length", uint32_t(c.head_dim));
  }
  w.set_u32(a + "rope.dimension_count", uint32_t(c.head_width()));
  w.set_f32(a + "rope.freq_base", c.rope_theta);
  if (!c.rope_scaling.empty()) {
    w.set_string(a + "rope.scaling.type", c.rope_scaling);
    w.set_f32(a + "rope.scaling.factor", c.rope_factor);
    if (c.rope_original_context > 0) {
      w.set_u32(a + "rope.scaling.original_context_length", uint32_t(c.rope_original_context));
    }
  }
  if (c.rope_attn_factor > 0.0f) w.set_f32(a + "rope.scaling.attn_factor", c.rope_attn_factor);
  w.set_f32(a + "attention.layer_norm_rms_epsilon", c.rms_eps);
  const bool spm = !vocab.scores.empty();
  w.set_string("tokenizer.ggml.model", vocab.model);
  if (!spm) w.set_string("tokenizer.ggml.pre", c.tokenizer_pre);
  w.set_string_array("tokenizer.ggml.tokens", vocab.tokens);
  if (spm) w.set_f32_array("tokenizer.ggml.scores", vocab.scores);
  w.set_i32_array("tokenizer.ggml.token_type", vocab.types);
  if (!spm) w.set_string_array("tokenizer.ggml.merges", vocab.merges);
  if (vocab.unk >= 0) w.set_u32("tokenizer.ggml.unknown_token_id", uint32_t(vocab.unk));
  w.set_u32("tokenizer.ggml.bos_token_id", uint32_t(vocab.bos));
  w.set_u32("tokenizer.ggml.eos_token_id", uint32_t(vocab.eos));
  if (vocab.pad >= 0) w.set_u32("tokenizer.ggml.padding_token_id", uint32_t(vocab.pad));
  w.set_bool("tokenizer.ggml.add_bos_token", vocab.add_bos);
  if (spm) {
    w.set_bool("tokenizer.ggml.add_eos_token", false);
    w.set_bool("tokenizer.ggml.add_space_prefix", true);
  }
  w.set_string("tokenizer.chat_template", vocab.chat_template);
  for (const SynthTensor& t : tensors) w.add_tensor(t.name, t.type, t.dims);

  w.write(
      path, [&](size_t i, uint8_t* dst, size_t) { generate_tensor(c, i, tensors[i], dst); }, progress);
}

}  // namespace tllm
