// Conformance against the reference tokenizers: the Qwen2 and GPT-2 test vectors of
// ../shared/data/tokenizer-vectors (46 inputs each, ids from the reference implementations), with
// the real Qwen2 vocabulary (Hugging Face vocab.json + merges.txt) and the GPT-2 vocabulary read
// from a vocabulary-only GGUF file. Also streaming detokenisation on the real vocabulary.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "model/gguf.h"
#include "model/tokenizer.h"
#include "model/unicode.h"

namespace tllm {
namespace {

const std::string kShared = TLLM_SHARED_DIR;
const std::string kVectors = kShared + "/data/tokenizer-vectors";
const std::string kQwen2Dir = kShared + "/data/qwen2-tokenizer";

bool file_exists(const std::string& path) { return std::ifstream(path).good(); }

bool in_ci() {
  const char* ci = std::getenv("CI");
  return ci && std::string(ci) == "true";
}

// Skips the test when a data file is missing, except under CI=true where missing data is a failure.
#define REQUIRE_DATA(path)                                                              \
  do {                                                                                  \
    if (!file_exists(path)) {                                                           \
      if (in_ci()) FAIL() << "test data missing: " << (path);                          \
      GTEST_SKIP() << "test data missing: " << (path) << " (../shared beside the tree)"; \
    }                                                                                   \
  } while (0)

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Vector {
  std::string text;
  std::vector<int32_t> ids;
};

// <name>.inp holds the inputs, each followed by a line "__ggml_vocab_test__"; <name>.out one line
// of space-separated ids per input.
std::vector<Vector> read_vectors(const std::string& base) {
  const std::string inp = slurp(base + ".inp");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<Vector> v;
  for (size_t pos = 0;;) {
    const size_t next = inp.find(sep, pos);
    if (next == std::string::npos) break;
    v.push_back({inp.substr(pos, next - pos), {}});
    pos = next + sep.size();
  }
  std::ifstream out(base + ".out");
  std::string line;
  size_t i = 0;
  while (std::getline(out, line)) {
    if (i >= v.size()) {
      ADD_FAILURE() << base << ".out has more lines than inputs";
      break;
    }
    std::istringstream ss(line);
    int32_t id;
    while (ss >> id) v[i].ids.push_back(id);
    ++i;
  }
  EXPECT_EQ(i, v.size()) << base << ": inputs and outputs differ in number";
  return v;
}

std::string ids_str(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += (s.empty() ? "" : " ") + std::to_string(id);
  return s;
}

const Tokenizer& qwen2() {
  static const std::unique_ptr<Tokenizer> tok = Tokenizer::from_hf_folder(
      kQwen2Dir, "qwen2",
      {{"<|endoftext|>", 151643, TokenType::Control},
       {"<|im_start|>", 151644, TokenType::Control},
       {"<|im_end|>", 151645, TokenType::Control}});
  return *tok;
}

// Loading speed is measured by bench/tokenizer_bench.cpp, not asserted here.
TEST(TokenizerVectors, Qwen2LoadsFromHuggingFaceFiles) {
  REQUIRE_DATA(kQwen2Dir + "/vocab.json");
  auto tok = Tokenizer::from_hf_folder(kQwen2Dir, "qwen2", {{"<|endoftext|>", 151643, TokenType::Control}});
  EXPECT_EQ(tok->n_vocab(), 151644);
  EXPECT_EQ(tok->find_token("<|endoftext|>"), 151643);
}

TEST(TokenizerVectors, Qwen2) {
  REQUIRE_DATA(kQwen2Dir + "/vocab.json");
  REQUIRE_DATA(kVectors + "/ggml-vocab-qwen2.gguf.inp");
  const Tokenizer& tok = qwen2();
  EXPECT_EQ(tok.n_vocab(), 151646);
  EXPECT_EQ(tok.pre_tokenizer(), "qwen2");
  const std::vector<Vector> vectors = read_vectors(kVectors + "/ggml-vocab-qwen2.gguf");
  ASSERT_EQ(vectors.size(), 46u);
  for (size_t i = 0; i < vectors.size(); ++i) {
    const Vector& v = vectors[i];
    const std::vector<int32_t> got = tok.encode(v.text, /*parse_special=*/false);
    EXPECT_EQ(ids_str(got), ids_str(v.ids)) << "vector " << i << ": '" << v.text << "'";
    EXPECT_EQ(tok.decode(got), unicode::nfc(v.text)) << "vector " << i;
  }
}

// DeepSeek-R1-Distill-Qwen-* ship Qwen2's vocabulary and merges with their own special tokens,
// and a tokenizer.json with Qwen2's NFC normalizer and split regex: the Qwen2 vectors give the
// same ids under tokenizer.ggml.pre "deepseek-r1-qwen", which also prepends BOS by default.
TEST(TokenizerVectors, DeepSeekR1QwenIsQwen2) {
  REQUIRE_DATA(kQwen2Dir + "/vocab.json");
  REQUIRE_DATA(kVectors + "/ggml-vocab-qwen2.gguf.inp");
  const std::unique_ptr<Tokenizer> tok = Tokenizer::from_hf_folder(
      kQwen2Dir, "deepseek-r1-qwen",
      {{"<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>", 151643, TokenType::Control},
       {"<\xEF\xBD\x9CUser\xEF\xBD\x9C>", 151644, TokenType::UserDefined},
       {"<\xEF\xBD\x9C" "Assistant\xEF\xBD\x9C>", 151645, TokenType::UserDefined},
       {"<\xEF\xBD\x9C" "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>", 151646, TokenType::Control}});
  EXPECT_TRUE(tok->add_bos());
  const std::vector<Vector> vectors = read_vectors(kVectors + "/ggml-vocab-qwen2.gguf");
  ASSERT_EQ(vectors.size(), 46u);
  for (size_t i = 0; i < vectors.size(); ++i) {
    const Vector& v = vectors[i];
    EXPECT_EQ(ids_str(tok->encode(v.text, /*parse_special=*/false)), ids_str(v.ids)) << "vector " << i;
  }
  // A chat prompt, as the reference tokenizer encodes it.
  EXPECT_EQ(ids_str(tok->encode("<\xEF\xBD\x9C" "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>"
                                "<\xEF\xBD\x9CUser\xEF\xBD\x9C>Hello, world!<\xEF\xBD\x9C" "Assistant\xEF\xBD\x9C>")),
            "151646 151644 9707 11 1879 0 151645");
}

TEST(TokenizerVectors, Gpt2FromGguf) {
  const std::string gguf = kVectors + "/ggml-vocab-gpt-2.gguf";
  REQUIRE_DATA(gguf);
  std::unique_ptr<GgufFile> f = GgufFile::open(gguf);
  std::unique_ptr<Tokenizer> tok = Tokenizer::from_gguf(*f);
  EXPECT_EQ(tok->n_vocab(), 50257);
  EXPECT_EQ(tok->pre_tokenizer(), "gpt-2");
  EXPECT_EQ(tok->bos_id(), 50256);
  EXPECT_EQ(tok->eos_id(), 50256);
  EXPECT_FALSE(tok->add_bos());
  EXPECT_TRUE(tok->is_end_of_generation(50256));
  EXPECT_FALSE(tok->is_end_of_generation(13));
  EXPECT_EQ(tok->find_token("<|endoftext|>"), 50256);
  const std::vector<Vector> vectors = read_vectors(gguf);
  ASSERT_EQ(vectors.size(), 46u);
  for (size_t i = 0; i < vectors.size(); ++i) {
    const Vector& v = vectors[i];
    const std::vector<int32_t> got = tok->encode(v.text, /*parse_special=*/false);
    EXPECT_EQ(ids_str(got), ids_str(v.ids)) << "vector " << i << ": '" << v.text << "'";
    EXPECT_EQ(tok->decode(got), v.text) << "vector " << i;
  }
}

TEST(TokenizerVectors, Qwen2SpecialTokens) {
  REQUIRE_DATA(kQwen2Dir + "/vocab.json");
  const Tokenizer& tok = qwen2();
  const std::string text = "<|im_start|>user\nHi<|im_end|>";
  EXPECT_EQ(ids_str(tok.encode(text, true)), "151644 872 198 13048 151645");
  const std::vector<int32_t> plain = tok.encode(text, false);
  for (int32_t id : plain) EXPECT_LT(id, 151643) << "a control token came out of plain text";
  EXPECT_EQ(tok.decode(plain), text);
  EXPECT_EQ(tok.decode(tok.encode(text, true)), text);
  EXPECT_EQ(tok.eot_id(), 151645);
  EXPECT_TRUE(tok.is_end_of_generation(151645));
  EXPECT_TRUE(tok.is_end_of_generation(151643));
  EXPECT_FALSE(tok.is_end_of_generation(151644));
}

TEST(TokenizerVectors, Qwen2Nfc) {
  REQUIRE_DATA(kQwen2Dir + "/vocab.json");
  const Tokenizer& tok = qwen2();
  // "Cửa Việt" with every accent decomposed encodes as the precomposed text does.
  const std::string decomposed = "Cu\xCC\x9B\xCC\x89" "a Vie\xCC\xA3\xCC\x82t";
  EXPECT_EQ(ids_str(tok.encode(decomposed)), "34 90063 128324");
  EXPECT_EQ(tok.decode(tok.encode(decomposed)), "C\xE1\xBB\xAD" "a Vi\xE1\xBB\x87t");
}

TEST(TokenizerVectors, Qwen2InvalidUtf8RoundTrips) {
  REQUIRE_DATA(kQwen2Dir + "/vocab.json");
  const Tokenizer& tok = qwen2();
  const std::vector<std::string> inputs = {
      std::string("abc\xFF" "def"), std::string("\xE4\xBD"), std::string("\xC0\xAF hi \xED\xA0\x80"),
      std::string("\x80\x80\x80 x\xF4\x90\x80\x80y"), std::string("\xF0\x9F\x98 \xE6\x88\x91"),
      std::string("a\0b", 3)};
  for (const std::string& s : inputs) {
    const std::vector<int32_t> ids = tok.encode(s);
    EXPECT_EQ(tok.decode(ids), s) << "input of " << s.size() << " bytes";
  }
  // An invalid byte stands alone: its byte token.
  const std::vector<int32_t> ids = tok.encode(std::string("\xFF"));
  ASSERT_EQ(ids.size(), 1u);
  EXPECT_EQ(ids[0], tok.byte_token(0xFF));
}

TEST(TokenizerVectors, StreamDecoderHoldsSplitCharacter) {
  REQUIRE_DATA(kQwen2Dir + "/vocab.json");
  const Tokenizer& tok = qwen2();
  // "我" is E6 88 91: fed as byte tokens, it is printed once, whole, with the last byte.
  StreamDecoder dec(tok);
  EXPECT_EQ(dec.push(tok.find_token("Hello")), "Hello");
  EXPECT_EQ(dec.push(tok.byte_token(0xE6)), "");
  EXPECT_EQ(dec.push(tok.byte_token(0x88)), "");
  EXPECT_EQ(dec.push(tok.byte_token(0x91)), "\xE6\x88\x91");
  // A 4-byte emoji split 2 + 2, followed by text in the same token as its last bytes.
  const std::string emoji = "\xF0\x9F\x98\x81";
  EXPECT_EQ(dec.push(tok.byte_token(0xF0)), "");
  EXPECT_EQ(dec.push(tok.byte_token(0x9F)), "");
  EXPECT_EQ(dec.push(tok.byte_token(0x98)), "");
  EXPECT_EQ(dec.push(tok.byte_token(0x81)), emoji);
  // An incomplete character at the end comes out of flush().
  EXPECT_EQ(dec.push(tok.byte_token(0xE4)), "");
  EXPECT_EQ(dec.flush(), "\xE4");
  EXPECT_EQ(dec.flush(), "");
  // A byte that can never complete a character is not held back.
  EXPECT_EQ(dec.push(tok.byte_token(0xFF)), "\xFF");
  EXPECT_EQ(dec.push(tok.byte_token(0xE4)), "");
  EXPECT_EQ(dec.push(tok.byte_token(0x41)), "\xE4" "A");
}

TEST(TokenizerVectors, StreamDecoderConcatenationEqualsDecode) {
  REQUIRE_DATA(kQwen2Dir + "/vocab.json");
  const Tokenizer& tok = qwen2();
  const std::string text = "Hello, y'all! 我想在apple工作1314151天～ 😶‍🌫️ Führer ½";
  const std::vector<int32_t> ids = tok.encode(text);
  StreamDecoder dec(tok);
  std::string streamed;
  for (int32_t id : ids) {
    const std::string piece = dec.push(id);
    // Every piece handed out is valid UTF-8 on its own.
    EXPECT_EQ(unicode::utf8_encode(unicode::utf8_decode(piece)), piece);
    for (uint32_t cp : unicode::utf8_decode(piece)) EXPECT_LT(cp, unicode::kInvalidByteBase);
    streamed += piece;
  }
  streamed += dec.flush();
  EXPECT_EQ(streamed, text);
}

}  // namespace
}  // namespace tllm
