// Fuzz target: the tokenizer on arbitrary bytes, with a small byte-level vocabulary (the 256 byte
// tokens, a few dozen merged tokens with their merges, control and user-defined tokens) built by
// Tokenizer::from_vocab once for each pre-tokenizer of kPreNames, and a small SentencePiece
// vocabulary (<unk> <s> </s>, the 256 <0xXX> pieces, scored pieces, control and user-defined
// pieces) built by Tokenizer::from_spm_vocab.
//
// Input layout: byte 0 picks the tokenizer (low 3 bits: the 7 pre-tokenizer names, then
// SentencePiece) and the mode (bit 3: parse special tokens; bit 4: also decode the input as raw
// token ids); the rest is the text. Properties checked (a violation aborts, which the fuzzer
// reports):
//   - every id encode() returns is inside the vocabulary;
//   - decode(encode(text)) == text for every pre-tokenizer but qwen2, == NFC(text) for qwen2 when
//     special tokens are not parsed (the documented round trip, invalid UTF-8 included); for
//     SentencePiece, when special tokens are not parsed, == text with U+2581 written as a space;
//   - the pieces of pre_tokenize(text) concatenate to the text (NFC(text) for qwen2; for
//     SentencePiece the one piece is the text after the dummy prefix's space);
//   - StreamDecoder: the pushed pieces plus flush() concatenate to decode(ids) (SentencePiece: less
//     the dummy prefix's space that decode drops);
//   - decode() of arbitrary 16-bit ids either succeeds (all in range) or throws TokenizerError.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "model/tokenizer.h"
#include "model/unicode.h"

namespace {

using tllm::TokenType;

// GPT-2's byte-to-unicode form of one byte (printable Latin-1 maps to itself, the rest to U+0100+).
std::string byte_level(uint8_t b) {
  auto printable = [](int x) { return (x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE; };
  uint32_t cp = b;
  if (!printable(b)) {
    cp = 0x100;
    for (int x = 0; x < b; ++x) cp += printable(x) ? 0 : 1;
  }
  std::string s;
  tllm::unicode::utf8_append(s, cp);
  return s;
}

std::string byte_level(const std::string& raw) {
  std::string s;
  for (char c : raw) s += byte_level(static_cast<uint8_t>(c));
  return s;
}

// The aliases llama-v3 and deepseek-r1-qwen share llama3's and qwen2's scanners and are left out.
const char* const kPreNames[] = {"qwen2",     "smollm", "gpt-2", "default",
                                 "llama-bpe", "llama3", "tekken"};
constexpr int kNumPre = sizeof(kPreNames) / sizeof(kPreNames[0]);
constexpr int kNumTokenizers = kNumPre + 1;  // the last is SentencePiece
constexpr const char* kSp = "\xE2\x96\x81";  // U+2581

// A SentencePiece vocabulary: ids 0-2 <unk> <s> </s>, the byte pieces, pieces scored as
// sentencepiece scores them (-rank), then special and unused pieces.
std::unique_ptr<tllm::Tokenizer> spm_tokenizer() {
  std::vector<std::string> p = {"<unk>", "<s>", "</s>"};
  std::vector<float> s = {0, 0, 0};
  std::vector<int32_t> t = {2, 3, 3};
  char hex[8];
  for (int b = 0; b < 256; ++b) {
    std::snprintf(hex, sizeof hex, "<0x%02X>", b);
    p.push_back(hex);
    s.push_back(0);
    t.push_back(6);
  }
  const std::string sp = kSp;
  const std::string pieces[] = {sp, sp + "t", "he", sp + "the", "in", "er", sp + "a", "on", sp + sp,
                                sp + sp + sp + sp, "ing", "1", "2", "12", "\n", "H", "e", "l", "o", "ll",
                                "He", "llo", "Hello", sp + "Hello", "\xe4\xbd\xa0", "\xe5\xa5\xbd",
                                "\xe4\xbd\xa0\xe5\xa5\xbd", "t", "h", "a", "n", "i", "r", "g"};
  float score = -1;
  for (const std::string& piece : pieces) {
    p.push_back(piece);
    s.push_back(score);
    t.push_back(1);
    score -= 1;
  }
  for (const char* special : {"[INST]", "[/INST]", "<tool"}) {
    p.push_back(special);
    s.push_back(0);
    t.push_back(special[0] == '<' ? 4 : 3);
  }
  p.push_back("th");  // unused: merges, then splits again
  s.push_back(-0.5f);
  t.push_back(5);
  return tllm::Tokenizer::from_spm_vocab(p, s, t);
}

struct Vocab {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  std::vector<std::string> merges;

  Vocab() {
    for (int b = 0; b < 256; ++b) add_raw(byte_level(static_cast<uint8_t>(b)), TokenType::Normal);
    // Merged tokens, each built from two existing ones (the merge order is the rank).
    const char* pairs[][2] = {
        {" ", "t"},   {"h", "e"},    {" t", "he"}, {"i", "n"},   {"e", "r"},   {" ", "a"},
        {"o", "n"},   {" ", "w"},    {"r", "e"},   {" a", "n"},  {"in", "g"},  {"1", "2"},
        {"12", "3"},  {"\n", "\n"},  {" ", " "},   {"  ", "  "}, {"'", "s"},   {"H", "e"},
        {"He", "l"},  {"Hel", "l"},  {"Hell", "o"}, {",", " "},  {"\xe4", "\xbd"}, {"\xe4\xbd", "\xa0"},
        {"\xe5", "\xa5"}, {"\xe5\xa5", "\xbd"}, {"\xcc", "\x81"}, {"e", "\xcc\x81"}, {" ", "1"},
    };
    for (const auto& p : pairs) {
      const std::string joined = std::string(p[0]) + p[1];
      merges.push_back(byte_level(p[0]) + " " + byte_level(p[1]));
      add_raw(byte_level(joined), TokenType::Normal);
    }
    add_raw("<|endoftext|>", TokenType::Control);
    add_raw("<|im_start|>", TokenType::Control);
    add_raw("<|im_end|>", TokenType::Control);
    add_raw("<|begin_of_text|>", TokenType::Control);
    add_raw("<|eot_id|>", TokenType::Control);
    add_raw("<tool_call>", TokenType::UserDefined);
    add_raw("<tool", TokenType::UserDefined);  // a prefix of another special token
    add_raw("[PAD0]", TokenType::Unused);
    add_raw("", TokenType::Unused);
  }
  void add_raw(const std::string& text, TokenType type) {
    tokens.push_back(text);
    types.push_back(static_cast<int32_t>(type));
  }
  int32_t id_of(const std::string& text) const {
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (tokens[i] == text) return static_cast<int32_t>(i);
    }
    std::abort();
  }
};

struct Tokenizers {
  std::unique_ptr<tllm::Tokenizer> tok[kNumTokenizers];
  Tokenizers() {
    tok[kNumPre] = spm_tokenizer();
    const Vocab v;
    for (int i = 0; i < kNumPre; ++i) {
      tllm::SpecialTokenIds ids;
      ids.bos = v.id_of("<|begin_of_text|>");
      ids.eos = v.id_of("<|endoftext|>");
      ids.eot = -1;  // found by text
      ids.pad = ids.eos;
      tok[i] = tllm::Tokenizer::from_vocab(v.tokens, v.types, v.merges, kPreNames[i], ids);
    }
  }
};

// What decode(ids) gives, from what a StreamDecoder gave for the same ids: SentencePiece's decode
// drops the dummy prefix's space where the first token is a normal piece that opens with one.
std::string as_decoded(const tllm::Tokenizer& tok, const std::vector<int32_t>& ids, std::string streamed) {
  if (tok.is_sentencepiece() && !ids.empty() && tok.token_type(ids[0]) == TokenType::Normal &&
      !streamed.empty() && streamed[0] == ' ') {
    streamed.erase(0, 1);
  }
  return streamed;
}

[[noreturn]] void fail(const char* what, const char* pre, const std::string& text) {
  std::fprintf(stderr, "%s (pre-tokenizer %s, %zu input bytes)\n", what, pre, text.size());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Tokenizers all;
  if (size == 0) return 0;
  const int which = (data[0] & 7) % kNumTokenizers;
  const bool parse_special = (data[0] & 8) != 0;
  const bool raw_ids = (data[0] & 16) != 0;
  const char* pre = which < kNumPre ? kPreNames[which] : "(SentencePiece)";
  const tllm::Tokenizer& tok = *all.tok[which];
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  const bool nfc = tok.pre_tokenizer() == "qwen2";
  const bool spm = tok.is_sentencepiece();

  const std::vector<int32_t> ids = tok.encode(text, parse_special);
  for (int32_t id : ids) {
    if (id < 0 || id >= tok.n_vocab()) fail("encode returned an id outside the vocabulary", pre, text);
  }
  const std::string decoded = tok.decode(ids);
  if (spm) {
    std::string spaced = text;
    for (size_t k = spaced.find(kSp); k != std::string::npos; k = spaced.find(kSp, k + 1)) {
      spaced.replace(k, 3, " ");
    }
    if (!parse_special && decoded != spaced) fail("decode(encode(text)) != text, U+2581 as spaces", pre, text);
  } else if (!nfc && decoded != text) {
    fail("decode(encode(text)) != text", pre, text);
  }
  if (nfc && !parse_special && decoded != tllm::unicode::nfc(text)) {
    fail("decode(encode(text)) != NFC(text)", pre, text);
  }

  std::string joined;
  for (const std::string& piece : tok.pre_tokenize(text)) {
    if (piece.empty()) fail("pre_tokenize returned an empty piece", pre, text);
    joined += piece;
  }
  const std::string covered = spm ? (text.empty() ? "" : " " + text) : nfc ? tllm::unicode::nfc(text) : text;
  if (joined != covered) fail("pre_tokenize pieces do not cover the text", pre, text);

  tllm::StreamDecoder stream(tok);
  std::string streamed;
  for (int32_t id : ids) streamed += stream.push(id);
  streamed += stream.flush();
  if (as_decoded(tok, ids, streamed) != decoded) fail("StreamDecoder output != decode(ids)", pre, text);

  if (raw_ids) {
    std::vector<int32_t> arbitrary;
    bool in_range = true;
    for (size_t i = 1; i + 1 < size; i += 2) {
      const int32_t id = int32_t(data[i]) | (int32_t(data[i + 1]) << 8);
      in_range = in_range && id < tok.n_vocab();
      arbitrary.push_back(id);
    }
    try {
      const std::string s = tok.decode(arbitrary);
      if (!in_range) fail("decode accepted an id outside the vocabulary", pre, text);
      tllm::StreamDecoder sd(tok);
      std::string out;
      for (int32_t id : arbitrary) out += sd.push(id);
      out += sd.flush();
      if (as_decoded(tok, arbitrary, out) != s) fail("StreamDecoder output != decode(ids) for arbitrary ids", pre, text);
    } catch (const tllm::TokenizerError&) {
      if (in_range) fail("decode rejected ids inside the vocabulary", pre, text);
    }
  }
  return 0;
}
