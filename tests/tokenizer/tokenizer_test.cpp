// Tokenizer behaviour on small hand-built vocabularies: the pre-tokenizer of each family (expected
// pieces taken from the reference implementation's regex split), BPE merge order, special tokens,
// invalid UTF-8, end-of-generation ids, and loading errors (vocabulary arrays and GGUF files).
#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "model/gguf.h"
#include "model/tokenizer.h"

namespace tllm {
namespace {

// GPT-2's byte-level form of one byte, written independently of the tokenizer's own table.
std::string byte_level(uint8_t b) {
  auto printable = [](int x) { return (x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE; };
  uint32_t cp = b;
  if (!printable(b)) {
    cp = 0x100;
    for (int x = 0; x < b; ++x) cp += printable(x) ? 0 : 1;
  }
  std::string s;
  if (cp < 0x80) {
    s.push_back(static_cast<char>(cp));
  } else {
    s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return s;
}

std::string byte_level(const std::string& raw) {
  std::string s;
  for (char c : raw) s += byte_level(static_cast<uint8_t>(c));
  return s;
}

// The 256 byte tokens (id = byte value), plus whatever a test adds.
struct Vocab {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  std::vector<std::string> merges;

  Vocab() {
    for (int b = 0; b < 256; ++b) add_raw(byte_level(static_cast<uint8_t>(b)), TokenType::Normal);
  }
  int32_t add_raw(const std::string& text, TokenType type) {
    tokens.push_back(text);
    types.push_back(static_cast<int32_t>(type));
    return static_cast<int32_t>(tokens.size() - 1);
  }
  // A normal token for raw bytes (stored in byte-level form).
  int32_t add(const std::string& raw) { return add_raw(byte_level(raw), TokenType::Normal); }
  void merge(const std::string& left, const std::string& right) {
    merges.push_back(byte_level(left) + " " + byte_level(right));
  }
  std::unique_ptr<Tokenizer> build(const std::string& pre, const SpecialTokenIds& ids = {}) const {
    return Tokenizer::from_vocab(tokens, types, merges, pre, ids);
  }
};

std::vector<int32_t> bytes_of(const std::string& raw) {
  std::vector<int32_t> ids;
  for (char c : raw) ids.push_back(static_cast<uint8_t>(c));
  return ids;
}

TEST(Tokenizer, ByteTokensAndDecode) {
  const auto tok = Vocab().build("gpt-2");
  EXPECT_EQ(tok->n_vocab(), 256);
  for (int b = 0; b < 256; ++b) {
    EXPECT_EQ(tok->byte_token(static_cast<uint8_t>(b)), b);
    EXPECT_EQ(tok->token_bytes(b), std::string(1, static_cast<char>(b)));
  }
  EXPECT_EQ(tok->token_text(' '), "\xC4\xA0");  // Ġ
  EXPECT_EQ(tok->find_token("\xC4\xA0"), ' ');
  EXPECT_EQ(tok->find_token("no such token"), -1);
  EXPECT_EQ(tok->encode("hi there"), bytes_of("hi there"));
  EXPECT_EQ(tok->decode(bytes_of("hi there")), "hi there");
}

// Tokens of type unused (padding, and the gaps of a vocabulary with missing ids) decode to nothing,
// as llama.cpp writes them; control tokens keep their text.
TEST(Tokenizer, UnusedTokensDecodeToNothing) {
  Vocab v;
  const int32_t pad = v.add_raw("[PAD300]", TokenType::Unused);
  const int32_t end = v.add_raw("<|end|>", TokenType::Control);
  const auto tok = v.build("gpt-2");
  EXPECT_EQ(tok->token_bytes(pad), "");
  EXPECT_EQ(tok->token_text(pad), "[PAD300]");
  EXPECT_EQ(tok->decode({'h', pad, 'i', end}), "hi<|end|>");
  EXPECT_EQ(tok->encode("[PAD300]"), bytes_of("[PAD300]"));
}

TEST(Tokenizer, MergesApplyByRank) {
  Vocab v;
  const int32_t ab = v.add("ab"), bc = v.add("bc"), abc = v.add("abc");
  {
    Vocab w = v;
    w.merge("b", "c");
    w.merge("a", "b");
    w.merge("a", "bc");
    EXPECT_EQ(w.build("gpt-2")->encode("abc"), std::vector<int32_t>({abc}));
  }
  {
    Vocab w = v;
    w.merge("a", "b");
    w.merge("b", "c");
    w.merge("a", "bc");
    EXPECT_EQ(w.build("gpt-2")->encode("abc"), std::vector<int32_t>({ab, 'c'}));
  }
  {
    Vocab w = v;
    w.merge("b", "c");
    w.merge("a", "b");
    EXPECT_EQ(w.build("gpt-2")->encode("abc"), std::vector<int32_t>({'a', bc}));
  }
}

TEST(Tokenizer, EqualPairsMergeLeftmostFirst) {
  Vocab v;
  const int32_t aa = v.add("aa"), aaaa = v.add("aaaa");
  v.merge("a", "a");
  v.merge("aa", "aa");
  const auto tok = v.build("gpt-2");
  EXPECT_EQ(tok->encode("aaa"), std::vector<int32_t>({aa, 'a'}));
  EXPECT_EQ(tok->encode("aaaaa"), std::vector<int32_t>({aaaa, 'a'}));
  EXPECT_EQ(tok->encode("aaaaaaa"), std::vector<int32_t>({aaaa, aa, 'a'}));
}

TEST(Tokenizer, MergesStayInsideAPiece) {
  Vocab v;
  const int32_t sp_a = v.add(" a");
  v.add("a ");
  v.merge("a", " ");
  v.merge(" ", "a");
  // "a a" is cut into "a", " a": the merge "a" + " " spans the cut and never applies.
  EXPECT_EQ(v.build("qwen2")->encode("a a"), std::vector<int32_t>({'a', sp_a}));
}

struct SplitCase {
  const char* pre;
  std::string text;
  std::vector<std::string> pieces;
};

// Expected pieces: the regex split of the reference implementation for each family.
const std::vector<SplitCase> kSplits = {
    {"qwen2", "Hello world", {"Hello", " world"}},
    {"qwen2", "I'M here, you'Re 'll 'S", {"I", "'M", " here", ",", " you", "'Re", " '", "ll", " '", "S"}},
    {"qwen2", "   Hello\n\n  x", {"  ", " Hello", "\n\n", " ", " x"}},
    {"qwen2", "1234567 abc", {"1", "2", "3", "4", "5", "6", "7", " abc"}},
    {"qwen2", "a\r\n\r\nb", {"a", "\r\n\r\n", "b"}},
    {"qwen2", "x  \t y!!!\n\nz", {"x", "  \t", " y", "!!!\n\n", "z"}},
    {"qwen2", "(hello) ...\n  \n", {"(hello", ")", " ...\n", "  \n"}},
    {"qwen2", "don'T stop'", {"don", "'T", " stop", "'"}},
    {"qwen2", "\xE3\x80\x80\xE4\xB8\xAD\xE6\x96\x87\xC2\xA0x", {"\xE3\x80\x80\xE4\xB8\xAD\xE6\x96\x87", "\xC2\xA0x"}},
    {"qwen2", "\tword 12ab", {"\tword", " ", "1", "2", "ab"}},
    {"qwen2", "it\xC5\xBF 'ſ", {"it\xC5\xBF", " '", "\xC5\xBF"}},
    {"qwen2", "we'\xC5\xBF", {"we", "'\xC5\xBF"}},  // (?i) folds long s onto s
    {"llama-bpe", "1234567 abc", {"123", "456", "7", " abc"}},
    {"llama-bpe", "I'M here, you'Re", {"I", "'M", " here", ",", " you", "'Re"}},
    {"llama-bpe", "\tword 12ab", {"\tword", " ", "12", "ab"}},
    {"llama-bpe", "x  \t y!!!\n\nz", {"x", "  \t", " y", "!!!\n\n", "z"}},
    {"gpt-2", "I'M here, you'Re 'll 'S", {"I", "'", "M", " here", ",", " you", "'", "Re", " '", "ll", " '", "S"}},
    {"gpt-2", "   Hello\n\n  x", {"  ", " Hello", "\n\n ", " x"}},
    {"gpt-2", "1234567 abc", {"1234567", " abc"}},
    {"gpt-2", "a\r\n\r\nb", {"a", "\r\n\r", "\n", "b"}},
    {"gpt-2", "x  \t y!!!\n\nz", {"x", "  \t", " y", "!!!", "\n", "\n", "z"}},
    {"gpt-2", "(hello) ...\n  \n", {"(", "hello", ")", " ...", "\n  \n"}},
    {"gpt-2", "\xE3\x80\x80\xE4\xB8\xAD\xE6\x96\x87\xC2\xA0x", {"\xE3\x80\x80", "\xE4\xB8\xAD\xE6\x96\x87", "\xC2\xA0", "x"}},
    {"default", "don't 12ab", {"don", "'t", " 12", "ab"}},
    {"smollm", "1234567 abc", {"1", "2", "3", "4", "5", "6", "7", " abc"}},
    {"smollm", "abc123 x1", {"abc", "1", "2", "3", " x", "1"}},
    {"smollm", "\tword 12ab", {"\t", "word", " ", "1", "2", "ab"}},
    {"smollm", "I'll", {"I", "'ll"}},
    // Tekken: generated with Python's `regex` module on the pattern of mistral-common's
    // tekken.json (case changes, digits one by one, punctuation with trailing "\r\n/", whitespace,
    // other scripts, titlecase (Lt) and modifier (Lm) letters, combining marks).
    {"tekken", "HelloWorld", {"Hello", "World"}},
    {"tekken", "ABCdef", {"ABCdef"}},
    {"tekken", "HTTPServer error", {"HTTPServer", " error"}},
    {"tekken", "iPhone McDonald's", {"i", "Phone", " Mc", "Donald", "'s"}},
    {"tekken", "abcDEF ghI", {"abc", "DEF", " gh", "I"}},
    {"tekken", "1234567 abc", {"1", "2", "3", "4", "5", "6", "7", " abc"}},
    {"tekken", "x2y 3.14", {"x", "2", "y", " ", "3", ".", "1", "4"}},
    {"tekken", "x!!!\r\n/y", {"x", "!!!\r\n/", "y"}},
    {"tekken", "a.../\n//b", {"a", ".../\n//", "b"}},
    {"tekken", " ?!\r\n\r\n", {" ?!\r\n\r\n"}},
    {"tekken", "path/to/file /usr/bin/", {"path", "/to", "/file", " /", "usr", "/bin", "/"}},
    {"tekken", "http://x.com/a?b=1", {"http", "://", "x", ".com", "/a", "?b", "=", "1"}},
    {"tekken", "   Hello\n\n  x", {"  ", " Hello", "\n\n", " ", " x"}},
    {"tekken", "x  \t y!!!\n\nz", {"x", "  \t", " y", "!!!\n\n", "z"}},
    {"tekken", "a\r\n\r\nb", {"a", "\r\n\r\n", "b"}},
    {"tekken", "\tword 12ab", {"\tword", " ", "1", "2", "ab"}},
    {"tekken", "a \n b", {"a", " \n", " b"}},
    {"tekken", "end   ", {"end", "   "}},
    {"tekken", "\xC2\xA0x", {"\xC2\xA0x"}},
    {"tekken", "I'M here, you'Re 'll", {"I", "'M", " here", ",", " you", "'Re", " '", "ll"}},
    {"tekken", "(hello) ...\n  \n", {"(hello", ")", " ...\n", "  \n"}},
    {"tekken", "\xD0\x9C\xD0\xB8\xD1\x80\xD0\x9C\xD0\x98\xD0\xA0 \xD0\xBC\xD0\xB8\xD1\x80",
     {"\xD0\x9C\xD0\xB8\xD1\x80", "\xD0\x9C\xD0\x98\xD0\xA0", " \xD0\xBC\xD0\xB8\xD1\x80"}},
    {"tekken", "\xCE\x91\xCE\xB8\xCE\xAE\xCE\xBD\xCE\xB1\xCE\x91\xCE\x98\xCE\x97\xCE\x9D\xCE\x91",
     {"\xCE\x91\xCE\xB8\xCE\xAE\xCE\xBD\xCE\xB1", "\xCE\x91\xCE\x98\xCE\x97\xCE\x9D\xCE\x91"}},
    {"tekken", "\xE4\xB8\xAD\xE6\x96\x87 \xE6\x97\xA5\xE6\x9C\xAC\xE3\x81\xAEText",
     {"\xE4\xB8\xAD\xE6\x96\x87", " \xE6\x97\xA5\xE6\x9C\xAC\xE3\x81\xAEText"}},
    {"tekken", "\xD9\x85\xD8\xB1\xD8\xAD\xD8\xA8\xD8\xA7 \xD8\xB9\xD8\xA7\xD9\x84\xD9\x85",
     {"\xD9\x85\xD8\xB1\xD8\xAD\xD8\xA8\xD8\xA7", " \xD8\xB9\xD8\xA7\xD9\x84\xD9\x85"}},
    {"tekken", " \xE0\xA4\xB9\xE0\xA4\xBF\xE0\xA4\xA8\xE0\xA5\x8D\xE0\xA4\xA6\xE0\xA5\x80",
     {" \xE0\xA4\xB9\xE0\xA4\xBF\xE0\xA4\xA8\xE0\xA5\x8D\xE0\xA4\xA6\xE0\xA5\x80"}},
    {"tekken", "\xC7\x85ungla \xC7\x84UNGLA", {"\xC7\x85ungla", " \xC7\x84UNGLA"}},
    {"tekken", "x\xCA\xB0\xCA\xB2Y \xCA\xB0" "A", {"x\xCA\xB0\xCA\xB2", "Y", " \xCA\xB0", "A"}},
    {"tekken", "e\xCC\x81x E\xCC\x81X Cafe\xCC\x81" "Bar",
     {"e\xCC\x81x", " E\xCC\x81", "X", " Cafe\xCC\x81", "Bar"}},
    {"tekken", " \xCC\x81" "a \xCC\x81\xCC\x81", {" \xCC\x81" "a", " \xCC\x81\xCC\x81"}},
    {"tekken", "x \xCC\x80", {"x", " \xCC\x80"}},
    {"tekken", ".\xCC\x81" "A", {".\xCC\x81", "A"}},
    {"tekken", "\xE3\x80\x80\xE4\xB8\xAD\xE6\x96\x87", {"\xE3\x80\x80\xE4\xB8\xAD\xE6\x96\x87"}},
    {"tekken", "\xF0\x9F\x98\x80Smile\xF0\x9F\x98\x80",
     {"\xF0\x9F\x98\x80Smile", "\xF0\x9F\x98\x80"}},
    {"tekken", "A\xC3\x9F\xE1\xBA\x9E\xC3\x9F" "B", {"A\xC3\x9F", "\xE1\xBA\x9E\xC3\x9F", "B"}},
};

TEST(Tokenizer, PreTokenizerFamilies) {
  for (const SplitCase& c : kSplits) {
    const auto tok = Vocab().build(c.pre);
    EXPECT_EQ(tok->pre_tokenize(c.text), c.pieces) << c.pre << ": '" << c.text << "'";
  }
}

TEST(Tokenizer, Qwen2NormalisesToNfc) {
  const auto tok = Vocab().build("qwen2");
  // e + combining acute is one letter é after NFC, so " é" stays one piece with "x".
  EXPECT_EQ(tok->pre_tokenize("x e\xCC\x81x"), std::vector<std::string>({"x", " \xC3\xA9x"}));
  EXPECT_EQ(tok->decode(tok->encode("e\xCC\x81")), "\xC3\xA9");
  // GPT-2 does not normalise: the accent is a mark, not a letter.
  const auto gpt2 = Vocab().build("gpt-2");
  EXPECT_EQ(gpt2->pre_tokenize("e\xCC\x81x"), std::vector<std::string>({"e", "\xCC\x81", "x"}));
  EXPECT_EQ(gpt2->decode(gpt2->encode("e\xCC\x81")), "e\xCC\x81");
}

// deepseek-r1-qwen is Qwen2's pre-tokenizer (NFC, the same split) with BOS prepended by default.
TEST(Tokenizer, DeepSeekR1QwenIsQwen2WithBos) {
  const auto tok = Vocab().build("deepseek-r1-qwen");
  EXPECT_EQ(tok->pre_tokenizer(), "deepseek-r1-qwen");
  for (const SplitCase& c : kSplits) {
    if (std::string(c.pre) == "qwen2") {
      EXPECT_EQ(tok->pre_tokenize(c.text), c.pieces) << "'" << c.text << "'";
    }
  }
  EXPECT_EQ(tok->pre_tokenize("x e\xCC\x81x"), std::vector<std::string>({"x", " \xC3\xA9x"}));
  EXPECT_EQ(tok->decode(tok->encode("e\xCC\x81")), "\xC3\xA9");
  EXPECT_TRUE(tok->add_bos());
  SpecialTokenIds ids;
  ids.add_bos = false;
  EXPECT_FALSE(Vocab().build("deepseek-r1-qwen", ids)->add_bos());
}

TEST(Tokenizer, SpecialTokensParsedOrNot) {
  Vocab v;
  const int32_t im_end = v.add_raw("<|im_end|>", TokenType::Control);
  const int32_t tool = v.add_raw("<tool>", TokenType::UserDefined);
  const int32_t tool_x = v.add_raw("<tool>x", TokenType::UserDefined);
  const auto tok = v.build("qwen2");

  EXPECT_EQ(tok->encode("a<|im_end|>b", true), std::vector<int32_t>({'a', im_end, 'b'}));
  EXPECT_EQ(tok->encode("a<|im_end|>b", false), bytes_of("a<|im_end|>b"));
  EXPECT_EQ(tok->encode("<|im_end|><|im_end|>", true), std::vector<int32_t>({im_end, im_end}));
  // Longest match at the leftmost position.
  EXPECT_EQ(tok->encode("<tool>xy", true), std::vector<int32_t>({tool_x, 'y'}));
  EXPECT_EQ(tok->encode("<tool>y", true), std::vector<int32_t>({tool, 'y'}));
  EXPECT_EQ(tok->encode("<<tool>", true), std::vector<int32_t>({'<', tool}));
  // A prefix of a special token is plain text.
  EXPECT_EQ(tok->encode("<|im_end|", true), bytes_of("<|im_end|"));
  // Special tokens decode to their text.
  EXPECT_EQ(tok->decode({'a', im_end, tool_x}), "a<|im_end|><tool>x");
}

TEST(Tokenizer, ControlTokensNeverComeFromPlainText) {
  Vocab v;
  const int32_t ctrl = v.add_raw("ab", TokenType::Control);
  v.merge("a", "b");  // would produce the control token; it is left out of the merges
  const auto tok = v.build("gpt-2");
  EXPECT_EQ(tok->encode("ab", false), std::vector<int32_t>({'a', 'b'}));
  EXPECT_EQ(tok->encode("ab", true), std::vector<int32_t>({ctrl}));
}

TEST(Tokenizer, Llama3EmitsWholePiecesThatAreTokens) {
  Vocab v;
  const int32_t abc = v.add("abc");  // reachable by no merge
  EXPECT_EQ(v.build("llama-bpe")->encode("abc"), std::vector<int32_t>({abc}));
  EXPECT_EQ(v.build("qwen2")->encode("abc"), bytes_of("abc"));
}

// falcon3 reads as llama.cpp reads it, as Llama 3's: the same split, whole pieces, BOS by default.
TEST(Tokenizer, Falcon3IsLlama3) {
  Vocab v;
  const int32_t abc = v.add("abc");
  const auto falcon3 = v.build("falcon3");
  EXPECT_EQ(falcon3->pre_tokenizer(), "falcon3");
  for (const SplitCase& c : kSplits) {
    if (std::string(c.pre) == "llama-bpe") {
      EXPECT_EQ(falcon3->pre_tokenize(c.text), c.pieces) << "'" << c.text << "'";
    }
  }
  EXPECT_EQ(falcon3->encode("abc"), std::vector<int32_t>({abc}));
  EXPECT_TRUE(falcon3->add_bos());
}

TEST(Tokenizer, TekkenEmitsWholePiecesThatAreTokens) {
  Vocab v;
  const int32_t abc = v.add("Abc");  // reachable by no merge, as tiktoken finds it in its ranks
  EXPECT_EQ(v.build("tekken")->encode("AbcAbc"), std::vector<int32_t>({abc, abc}));
  EXPECT_EQ(v.build("tekken")->encode("ABc"), bytes_of("ABc"));
}

TEST(Tokenizer, AddBosDefaultsAndOverride) {
  EXPECT_TRUE(Vocab().build("llama-bpe")->add_bos());
  EXPECT_TRUE(Vocab().build("tekken")->add_bos());
  EXPECT_FALSE(Vocab().build("qwen2")->add_bos());
  SpecialTokenIds ids;
  ids.add_bos = false;
  EXPECT_FALSE(Vocab().build("llama-bpe", ids)->add_bos());
  ids.add_bos = true;
  ids.bos = 7;
  const auto tok = Vocab().build("gpt-2", ids);
  EXPECT_TRUE(tok->add_bos());
  EXPECT_EQ(tok->bos_id(), 7);
}

TEST(Tokenizer, InvalidUtf8RoundTripsByteByByte) {
  Vocab v;
  v.add("ab");
  v.merge("a", "b");
  for (const char* pre : {"qwen2", "gpt-2", "smollm", "llama-bpe", "tekken"}) {
    const auto tok = v.build(pre);
    uint32_t state = 12345;
    for (int n = 0; n < 300; ++n) {
      std::string s;
      const int len = n % 23;
      for (int k = 0; k < len; ++k) {
        state = state * 1664525u + 1013904223u;
        // Mostly high bytes, so truncated and stray sequences are common; some ASCII between.
        const uint32_t r = state >> 24;
        s.push_back(static_cast<char>(r < 64 ? "ab '\n1"[r % 6] : 0x80 + (r % 128)));
      }
      const std::vector<int32_t> ids = tok->encode(s);
      std::string back = tok->decode(ids);
      if (std::string(pre) == "qwen2") {
        // NFC may change valid parts; compare against the normalised input there.
        EXPECT_EQ(back, tok->decode(tok->encode(back))) << pre;
      } else {
        EXPECT_EQ(back, s) << pre;
      }
    }
  }
}

TEST(Tokenizer, EndOfGeneration) {
  Vocab v;
  const int32_t start = v.add_raw("<|im_start|>", TokenType::Control);
  const int32_t end = v.add_raw("<|im_end|>", TokenType::Control);
  const int32_t eot_text = v.add_raw("<|endoftext|>", TokenType::Control);
  SpecialTokenIds ids;
  ids.eos = eot_text;
  const auto tok = v.build("qwen2", ids);
  EXPECT_EQ(tok->eot_id(), end);
  EXPECT_EQ(tok->eos_id(), eot_text);
  EXPECT_TRUE(tok->is_end_of_generation(end));
  EXPECT_TRUE(tok->is_end_of_generation(eot_text));
  EXPECT_FALSE(tok->is_end_of_generation(start));
  EXPECT_FALSE(tok->is_end_of_generation('a'));
  EXPECT_FALSE(tok->is_end_of_generation(-1));
}

// DeepSeek-R1 and its distills end a reply with <｜end▁of▁sentence｜> (their EOS); it ends
// generation by its text too, where a file names another EOS or none.
TEST(Tokenizer, EndOfGenerationDeepSeek) {
  Vocab v;
  const int32_t bos = v.add_raw("<｜begin▁of▁sentence｜>", TokenType::Control);
  const int32_t eos = v.add_raw("<｜end▁of▁sentence｜>", TokenType::Control);
  const int32_t user = v.add_raw("<｜User｜>", TokenType::UserDefined);
  const auto tok = v.build("deepseek-r1-qwen");
  EXPECT_TRUE(tok->is_end_of_generation(eos));
  EXPECT_FALSE(tok->is_end_of_generation(bos));
  EXPECT_FALSE(tok->is_end_of_generation(user));
}

// Llama 2, Mistral and Zephyr end a turn with the EOS token "</s>", which their chat formats also
// write as text into earlier turns: the text reads back as that token.
TEST(Tokenizer, EndOfGenerationEosText) {
  Vocab v;
  const int32_t bos = v.add_raw("<s>", TokenType::Control);
  const int32_t eos = v.add_raw("</s>", TokenType::Control);
  SpecialTokenIds ids;
  ids.bos = bos;
  ids.eos = eos;
  const auto tok = v.build("gpt-2", ids);
  EXPECT_EQ(tok->eot_id(), -1);
  EXPECT_TRUE(tok->is_end_of_generation(eos));
  EXPECT_FALSE(tok->is_end_of_generation(bos));
  const std::vector<int32_t> got = tok->encode("<s>a</s><s>a");
  EXPECT_EQ(got, std::vector<int32_t>({bos, 'a', eos, bos, 'a'}));
}

// The message of the TokenizerError that f() throws.
template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const TokenizerError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Tokenizer, VocabularyErrors) {
  const std::string unknown = error_of([] { Vocab().build("llama-spm"); });
  EXPECT_NE(unknown.find("'llama-spm'"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("qwen2"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("llama-bpe"), std::string::npos) << unknown;

  // A byte without a token (SmolLM2's vocabulary lacks a few control bytes) is dropped, as the
  // reference implementations do; a vocabulary missing most bytes is not byte-level BPE.
  Vocab no_space;
  no_space.tokens[' '] = "space";
  const auto dropped = no_space.build("gpt-2");
  EXPECT_EQ(dropped->byte_token(' '), -1);
  EXPECT_EQ(dropped->decode(dropped->encode("a b", false)), "ab");
  Vocab few_bytes;
  for (int b = 0; b < 200; ++b) few_bytes.tokens[size_t(b)] = "t" + std::to_string(b);
  const std::string missing = error_of([&] { few_bytes.build("gpt-2"); });
  EXPECT_NE(missing.find("not a byte-level BPE vocabulary"), std::string::npos) << missing;

  Vocab bad_merge;
  bad_merge.merges.push_back("ab");
  EXPECT_NE(error_of([&] { bad_merge.build("gpt-2"); }).find("merge 0"), std::string::npos);
  Vocab two_spaces;
  two_spaces.merges.push_back("a b c");
  EXPECT_NE(error_of([&] { two_spaces.build("gpt-2"); }).find("is not 'left right'"), std::string::npos);

  Vocab bad_types;
  bad_types.types.pop_back();
  EXPECT_NE(error_of([&] { bad_types.build("gpt-2"); }).find("token_type"), std::string::npos);

  SpecialTokenIds ids;
  ids.eos = 256;
  EXPECT_NE(error_of([&] { Vocab().build("gpt-2", ids); }).find("eos id 256"), std::string::npos);

  const auto tok = Vocab().build("gpt-2");
  EXPECT_NE(error_of([&] { tok->decode({1, 256}); }).find("token id 256"), std::string::npos);
  EXPECT_NE(error_of([&] { tok->token_bytes(-1); }).find("token id -1"), std::string::npos);
}

// A vocabulary-only GGUF file; `edit` adjusts the metadata before writing.
template <typename Edit>
std::string write_gguf(const std::string& name, Edit edit) {
  Vocab v;
  v.add("ab");
  v.merge("a", "b");
  GgufWriter w;
  w.set_string("general.architecture", "qwen2");
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", "qwen2");
  w.set_string_array("tokenizer.ggml.tokens", v.tokens);
  w.set_i32_array("tokenizer.ggml.token_type", v.types);
  w.set_string_array("tokenizer.ggml.merges", v.merges);
  edit(w);
  const std::string path = ::testing::TempDir() + "tokenizer_test_" + name + ".gguf";
  w.write(path, [](size_t, uint8_t*, size_t) {});
  return path;
}

std::string gguf_error(const std::string& path) {
  return error_of([&] { Tokenizer::from_gguf(*GgufFile::open(path)); });
}

TEST(Tokenizer, FromGguf) {
  const std::string path = write_gguf("ok", [](GgufWriter& w) {
    w.set_u32("tokenizer.ggml.bos_token_id", 10);
    w.set_u32("tokenizer.ggml.eos_token_id", 11);
    w.set_bool("tokenizer.ggml.add_bos_token", true);
  });
  const auto tok = Tokenizer::from_gguf(*GgufFile::open(path));
  EXPECT_EQ(tok->n_vocab(), 257);
  EXPECT_EQ(tok->pre_tokenizer(), "qwen2");
  EXPECT_EQ(tok->bos_id(), 10);
  EXPECT_EQ(tok->eos_id(), 11);
  EXPECT_TRUE(tok->add_bos());
  EXPECT_EQ(tok->encode("abc"), std::vector<int32_t>({256, 'c'}));
  std::remove(path.c_str());
}

TEST(Tokenizer, FromGgufErrorsNameFileAndKey) {
  struct Case {
    const char* name;
    std::function<void(GgufWriter&)> edit;
    std::vector<std::string> expect;  // substrings of the message besides the path
  };
  const std::vector<Case> cases = {
      {"model", [](GgufWriter& w) { w.set_string("tokenizer.ggml.model", "t5"); },
       {"tokenizer.ggml.model", "'t5'", "'gpt2'", "'llama'"}},
      {"scores", [](GgufWriter& w) { w.set_string("tokenizer.ggml.model", "llama"); },
       {"missing tokenizer.ggml.scores"}},
      {"score count", [](GgufWriter& w) {
         w.set_string("tokenizer.ggml.model", "llama");
         w.set_f32_array("tokenizer.ggml.scores", {0.0f, 1.0f});
       },
       {"tokenizer.ggml.scores has 2 entries for 257 tokens"}},
      {"pre", [](GgufWriter& w) { w.set_string("tokenizer.ggml.pre", "chatglm-bpe"); },
       {"tokenizer.ggml.pre", "'chatglm-bpe'", "supported", "qwen2", "smollm", "gpt-2", "llama-bpe"}},
      {"eos", [](GgufWriter& w) { w.set_u32("tokenizer.ggml.eos_token_id", 999); },
       {"tokenizer.ggml.eos_token_id", "999"}},
      {"types", [](GgufWriter& w) { w.set_i32_array("tokenizer.ggml.token_type", {1, 1}); },
       {"tokenizer.ggml.token_type"}},
  };
  for (const Case& c : cases) {
    const std::string path = write_gguf(c.name, c.edit);
    const std::string msg = gguf_error(path);
    EXPECT_EQ(msg.find(path), 0u) << msg;
    for (const std::string& s : c.expect) EXPECT_NE(msg.find(s), std::string::npos) << c.name << ": " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "one line: " << msg;
    std::remove(path.c_str());
  }

  // No tokenizer at all.
  GgufWriter w;
  w.set_string("general.architecture", "qwen2");
  const std::string bare = ::testing::TempDir() + "tokenizer_test_bare.gguf";
  w.write(bare, [](size_t, uint8_t*, size_t) {});
  const std::string msg = gguf_error(bare);
  EXPECT_EQ(msg.find(bare), 0u) << msg;
  EXPECT_NE(msg.find("tokenizer.ggml.model"), std::string::npos) << msg;
  std::remove(bare.c_str());
}

}  // namespace
}  // namespace tllm
