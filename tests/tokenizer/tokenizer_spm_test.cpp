// The SentencePiece BPE tokenizer: conformance with sentencepiece on the vectors of
// tests/tokenizer/data/spm-bpe-vectors.json (a vocabulary sentencepiece trained with the Llama 2
// settings, and the ids sentencepiece gives for 354 texts; scripts/gen_spm_vectors.py), merge order
// and fallbacks on hand-made vocabularies, special tokens, decoding, and loading from GGUF.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/gguf.h"
#include "model/tokenizer.h"

namespace tllm {
namespace {

const std::string kVectors = std::string(TLLM_SOURCE_DIR) + "/tests/tokenizer/data/spm-bpe-vectors.json";
constexpr const char* kSp = "\xE2\x96\x81";  // U+2581

struct SpmVocab {
  std::vector<std::string> pieces;
  std::vector<float> scores;
  std::vector<int32_t> types;
};

struct Vectors {
  SpmVocab vocab;
  bool add_space_prefix = true;
  std::vector<std::pair<std::string, std::vector<int32_t>>> cases;
};

const Vectors& vectors() {
  static const Vectors v = [] {
    std::ifstream in(kVectors, std::ios::binary);
    EXPECT_TRUE(in.good()) << kVectors;
    std::stringstream ss;
    ss << in.rdbuf();
    const nlohmann::json j = nlohmann::json::parse(ss.str());
    Vectors out;
    out.add_space_prefix = j.at("add_space_prefix").get<bool>();
    for (const auto& p : j.at("pieces")) {
      out.vocab.pieces.push_back(p.at(0).get<std::string>());
      out.vocab.scores.push_back(p.at(1).get<float>());
      out.vocab.types.push_back(p.at(2).get<int32_t>());
    }
    for (const auto& c : j.at("cases")) {
      out.cases.emplace_back(c.at("text").get<std::string>(), c.at("ids").get<std::vector<int32_t>>());
    }
    return out;
  }();
  return v;
}

std::unique_ptr<Tokenizer> vectors_tokenizer(bool add_space_prefix = true) {
  const Vectors& v = vectors();
  return Tokenizer::from_spm_vocab(v.vocab.pieces, v.vocab.scores, v.vocab.types, {}, add_space_prefix);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const TokenizerError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(SpmTokenizer, MatchesSentencePieceOnTheVectors) {
  const Vectors& v = vectors();
  ASSERT_EQ(v.vocab.pieces.size(), 1200u);
  ASSERT_EQ(v.cases.size(), 354u);
  ASSERT_TRUE(v.add_space_prefix);
  const auto tok = vectors_tokenizer();
  int wrong = 0;
  for (const auto& [text, ids] : v.cases) {
    const std::vector<int32_t> got = tok->encode(text, /*parse_special=*/false);
    EXPECT_EQ(got, ids) << "text: '" << text << "'";
    wrong += got != ids;
  }
  EXPECT_EQ(wrong, 0);
}

TEST(SpmTokenizer, DecodeUndoesEncode) {
  const auto tok = vectors_tokenizer();
  for (const auto& [text, ids] : vectors().cases) {
    if (text.find(kSp) != std::string::npos) continue;  // a written U+2581 decodes as a space
    EXPECT_EQ(tok->decode(ids), text);
  }
}

TEST(SpmTokenizer, Properties) {
  const auto tok = vectors_tokenizer();
  EXPECT_TRUE(tok->is_sentencepiece());
  EXPECT_STREQ(tok->model_name(), "llama");
  EXPECT_EQ(tok->pre_tokenizer(), "");
  // The ids a vocabulary without the keys gets, found by type and text.
  EXPECT_EQ(tok->unk_id(), 0);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_TRUE(tok->add_bos());
  EXPECT_TRUE(tok->is_end_of_generation(2));
  EXPECT_FALSE(tok->is_end_of_generation(1));
  EXPECT_EQ(tok->byte_token('\n'), tok->find_token("<0x0A>"));
  EXPECT_EQ(tok->token_bytes(tok->find_token("<0x0A>")), "\n");
  EXPECT_EQ(tok->pre_tokenize("a b"), std::vector<std::string>({" a b"}));
}

// Special tokens are cut out; each run of text after one gets its own dummy prefix.
TEST(SpmTokenizer, SpecialTokensAndTheDummyPrefix) {
  const auto tok = vectors_tokenizer();
  auto plain = [&](const std::string& s) { return tok->encode(s, false); };
  std::vector<int32_t> expect = {1};
  for (int32_t id : plain("[INST] hi [/INST]")) expect.push_back(id);
  expect.push_back(2);
  for (int32_t id : plain("next")) expect.push_back(id);
  EXPECT_EQ(tok->encode("<s>[INST] hi [/INST]</s>next"), expect);
  // Without parsing, the markers are text.
  EXPECT_EQ(tok->encode("<s>x", false), plain("<s>x"));
  EXPECT_EQ(tok->encode("<s></s>"), std::vector<int32_t>({1, 2}));
  // Without the dummy prefix, no leading U+2581.
  const auto bare = vectors_tokenizer(false);
  const std::vector<int32_t> ids = bare->encode("the", false);
  ASSERT_FALSE(ids.empty());
  EXPECT_NE(bare->token_text(ids[0]).rfind(kSp, 0), 0u) << bare->token_text(ids[0]);
  EXPECT_EQ(bare->decode(bare->encode(" the", false)), " the");
}

TEST(SpmTokenizer, DecodeDropsOnlyTheFirstPrefixSpace) {
  const auto tok = vectors_tokenizer();
  const std::vector<int32_t> hi = tok->encode("hi", false);
  ASSERT_FALSE(hi.empty());
  EXPECT_EQ(tok->token_bytes(hi[0]).front(), ' ');
  EXPECT_EQ(tok->decode(hi), "hi");
  std::vector<int32_t> two = hi;
  two.insert(two.end(), hi.begin(), hi.end());
  EXPECT_EQ(tok->decode(two), "hi hi");
  std::vector<int32_t> with_bos = {1};
  with_bos.insert(with_bos.end(), hi.begin(), hi.end());
  EXPECT_EQ(tok->decode(with_bos), "<s> hi");
}

TEST(SpmTokenizer, StreamDecoderJoinsByteFallback) {
  const auto tok = vectors_tokenizer();
  // A CJK character outside the small vocabulary falls back to its three UTF-8 bytes.
  const std::vector<int32_t> ids = tok->encode("鼎", false);
  ASSERT_EQ(ids.size(), 4u);  // "▁" and three bytes
  StreamDecoder sd(*tok);
  EXPECT_EQ(sd.push(ids[0]), " ");
  EXPECT_EQ(sd.push(ids[1]), "");
  EXPECT_EQ(sd.push(ids[2]), "");
  EXPECT_EQ(sd.push(ids[3]), "鼎");
  EXPECT_EQ(sd.flush(), "");
}

// Invalid UTF-8 keeps its bytes: each invalid byte is a symbol of its own and falls back to <0xXX>.
TEST(SpmTokenizer, InvalidUtf8KeepsItsBytes) {
  const auto tok = vectors_tokenizer();
  const std::string text = "a\xFF\xE4z";
  const std::vector<int32_t> ids = tok->encode(text, false);
  EXPECT_EQ(tok->decode(ids), text);
  int bytes = 0;
  for (int32_t id : ids) bytes += tok->token_type(id) == TokenType::Byte;
  EXPECT_EQ(bytes, 2);
}

// A hand-made vocabulary: "<unk>" "<s>" "</s>" and scored pieces, no byte pieces.
std::unique_ptr<Tokenizer> small(const std::vector<std::pair<std::string, float>>& pieces,
                                 const std::vector<int32_t>& piece_types = {}) {
  std::vector<std::string> p = {"<unk>", "<s>", "</s>"};
  std::vector<float> s = {0, 0, 0};
  std::vector<int32_t> t = {2, 3, 3};
  for (size_t i = 0; i < pieces.size(); ++i) {
    p.push_back(pieces[i].first);
    s.push_back(pieces[i].second);
    t.push_back(i < piece_types.size() ? piece_types[i] : 1);
  }
  return Tokenizer::from_spm_vocab(p, s, t);
}

TEST(SpmTokenizer, HighestScoreMergesFirst) {
  // ids: 3 ▁, 4 a, 5 b, 6 c, 7 ab, 8 bc, 9 ▁a
  const std::string sp = kSp;
  auto tok = small({{sp, -1}, {"a", -2}, {"b", -3}, {"c", -4}, {"ab", -5}, {"bc", -0.5f}, {sp + "a", -0.1f}});
  // "▁abc": ▁a (-0.1) first, then bc (-0.5); ▁a+bc is no piece.
  EXPECT_EQ(tok->encode("abc", false), std::vector<int32_t>({9, 8}));
  // Equal scores: the leftmost pair merges first.
  tok = small({{sp, -1}, {"a", -2}, {"b", -3}, {"c", -4}, {"ab", -0.5f}, {"bc", -0.5f}});
  EXPECT_EQ(tok->encode("abc", false), std::vector<int32_t>({3, 7, 6}));
}

TEST(SpmTokenizer, UnknownWithoutBytePieces) {
  const std::string sp = kSp;
  const auto tok = small({{sp, -1}, {"a", -2}, {"b", -3}, {"ab", -0.1f}});
  // "▁ab▁c": c has no piece and there are no byte pieces: one <unk> for the character.
  EXPECT_EQ(tok->encode("ab c", false), std::vector<int32_t>({3, 6, 3, 0}));
  EXPECT_EQ(tok->encode("ab 鼎", false), std::vector<int32_t>({3, 6, 3, 0}));
  EXPECT_EQ(tok->byte_token('a'), -1);
}

TEST(SpmTokenizer, UnusedPiecesMergeButAreSplitAgain) {
  const std::string sp = kSp;
  // "ab" (id 6) is Unused: it still merges, then is written as the pieces it came from.
  const auto tok = small({{sp, -1}, {"a", -2}, {"b", -3}, {"ab", -0.1f}, {"abc", -0.2f}, {"c", -4}},
                         {1, 1, 1, 5, 1, 1});
  EXPECT_EQ(tok->encode("ab", false), std::vector<int32_t>({3, 4, 5}));
  EXPECT_EQ(tok->encode("abc", false), std::vector<int32_t>({3, 7}));
}

// llama.cpp writes an unused piece (a vocabulary's padding, "[PAD313]") as nothing; so does decode.
TEST(SpmTokenizer, UnusedPiecesDecodeToNothing) {
  const std::string sp = kSp;
  // ids: 3 ▁, 4 a, 5 [PAD9] (Unused), 6 ▁a
  const auto tok = small({{sp, -1}, {"a", -2}, {"[PAD9]", -9}, {sp + "a", -0.5f}}, {1, 1, 5, 1});
  EXPECT_EQ(tok->token_bytes(5), "");
  EXPECT_EQ(tok->token_text(5), "[PAD9]");
  EXPECT_EQ(tok->decode({6, 5, 6}), "a a");
  // The dummy prefix's space is dropped from a first token only, as llama.cpp's lstrip does.
  EXPECT_EQ(tok->decode({5, 6}), " a");
  EXPECT_EQ(tok->token_bytes(4), "a");
}

TEST(SpmTokenizer, RefusesWhatCannotEncode) {
  EXPECT_NE(error_of([] { Tokenizer::from_spm_vocab({"a", "b"}, {0.0f}, {}); }).find("scores has 1 entries for 2"),
            std::string::npos);
  const std::string msg = error_of([] { Tokenizer::from_spm_vocab({"a", "b"}, {0.0f, 0.0f}, {}); });
  EXPECT_NE(msg.find("neither all 256 <0xXX> byte pieces nor an unknown piece"), std::string::npos) << msg;
}

std::string write_spm_gguf(const std::string& name, const std::function<void(GgufWriter&)>& edit) {
  const Vectors& v = vectors();
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_string("tokenizer.ggml.model", "llama");
  w.set_string_array("tokenizer.ggml.tokens", v.vocab.pieces);
  w.set_f32_array("tokenizer.ggml.scores", v.vocab.scores);
  w.set_i32_array("tokenizer.ggml.token_type", v.vocab.types);
  edit(w);
  const std::string path = ::testing::TempDir() + "tokenizer_spm_test_" + name + ".gguf";
  w.write(path, [](size_t, uint8_t*, size_t) {});
  return path;
}

TEST(SpmTokenizer, FromGguf) {
  std::string path = write_spm_gguf("ids", [](GgufWriter& w) {
    w.set_u32("tokenizer.ggml.unknown_token_id", 0);
    w.set_u32("tokenizer.ggml.bos_token_id", 1);
    w.set_u32("tokenizer.ggml.eos_token_id", 2);
    w.set_bool("tokenizer.ggml.add_bos_token", false);
  });
  auto tok = Tokenizer::from_gguf(*GgufFile::open(path));
  EXPECT_TRUE(tok->is_sentencepiece());
  EXPECT_FALSE(tok->add_bos());
  EXPECT_EQ(tok->eos_id(), 2);
  for (const auto& [text, ids] : vectors().cases) EXPECT_EQ(tok->encode(text, false), ids) << text;
  std::remove(path.c_str());

  path = write_spm_gguf("no-prefix", [](GgufWriter& w) { w.set_bool("tokenizer.ggml.add_space_prefix", false); });
  tok = Tokenizer::from_gguf(*GgufFile::open(path));
  EXPECT_TRUE(tok->add_bos());  // the SentencePiece default
  EXPECT_EQ(tok->encode("the", false), vectors_tokenizer(false)->encode("the", false));
  EXPECT_NE(tok->encode("the", false), vectors_tokenizer(true)->encode("the", false));
  std::remove(path.c_str());
}

}  // namespace
}  // namespace tllm
