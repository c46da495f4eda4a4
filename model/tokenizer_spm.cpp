// SentencePiece BPE (tokenizer.ggml.model "llama"): loading a vocabulary of scored pieces and
// encoding text as sentencepiece's BPE model does with the settings Llama 2 and Mistral ship
// (identity normalisation, a dummy prefix, byte fallback):
//   1. the text gets a leading space and every space becomes U+2581 ("▁");
//   2. each UTF-8 character is a symbol (an invalid byte is one on its own);
//   3. repeatedly, the adjacent pair whose concatenation is a mergeable piece of the highest score
//      merges (the leftmost pair on equal scores), until no pair forms a piece;
//   4. each symbol left becomes its piece; a symbol the vocabulary lacks becomes its bytes' <0xXX>
//      pieces, or the unknown piece where the vocabulary has no byte pieces.
// Special tokens are cut out of the text beforehand (Tokenizer::encode); each run of text between
// them gets its own dummy prefix, as llama.cpp does and as Hugging Face's legacy Llama tokenizer does.
#include <algorithm>

#include "model/tokenizer.h"
#include "model/unicode.h"

namespace tllm {
namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's written space

// The byte a piece "<0xXX>" stands for, -1 when the text is not of that form.
int parse_byte_piece(const std::string& p) {
  if (p.size() != 6 || p.compare(0, 3, "<0x") != 0 || p[5] != '>') return -1;
  unsigned v = 0;
  for (int k = 3; k < 5; ++k) {
    const char c = p[k];
    const int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
    if (d < 0) return -1;
    v = v * 16 + static_cast<unsigned>(d);
  }
  return static_cast<int>(v);
}

}  // namespace

void Tokenizer::build_spm(std::vector<std::string> pieces, std::vector<float> scores,
                          std::vector<int32_t> token_types, const SpecialTokenIds& special,
                          bool add_space_prefix) {
  if (scores.size() != pieces.size()) {
    throw TokenizerError("scores has " + std::to_string(scores.size()) + " entries for " +
                         std::to_string(pieces.size()) + " pieces");
  }
  spm_ = true;
  pre_name_.clear();
  add_space_prefix_ = add_space_prefix;
  // Ids a file leaves out are found by type and text: the unknown piece, <s> and </s>.
  SpecialTokenIds ids = special;
  auto find_typed = [&](const char* text, TokenType type) {
    for (size_t i = 0; i < pieces.size(); ++i) {
      const bool typed = i < token_types.size() ? token_types[i] == static_cast<int32_t>(type)
                                                : type == TokenType::Normal;
      if (typed && (text == nullptr || pieces[i] == text)) return static_cast<int32_t>(i);
    }
    return -1;
  };
  if (ids.unk < 0) ids.unk = find_typed(nullptr, TokenType::Unknown);
  if (ids.bos < 0) ids.bos = find_typed("<s>", TokenType::Control);
  if (ids.eos < 0) ids.eos = find_typed("</s>", TokenType::Control);
  build_common(std::move(pieces), std::move(token_types), ids);
  scores_ = std::move(scores);
  add_bos_ = special.add_bos.value_or(true);
  const size_t n = tokens_.size();

  bytes_off_.resize(n + 1);
  bytes_blob_.clear();
  byte_token_.fill(-1);
  spm_mergeable_.clear();
  spm_mergeable_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const std::string& p = tokens_[i];
    bytes_off_[i] = static_cast<uint32_t>(bytes_blob_.size());
    const TokenType t = types_[i];
    const int byte = t == TokenType::Byte ? parse_byte_piece(p) : -1;
    if (t == TokenType::Unused) {
      // Written as nothing, as llama.cpp does (padding pieces such as "[PAD313]").
    } else if (byte >= 0) {
      bytes_blob_.push_back(static_cast<char>(byte));
      if (byte_token_[byte] < 0) byte_token_[byte] = static_cast<int32_t>(i);
    } else if (t == TokenType::Control || t == TokenType::UserDefined || t == TokenType::Unknown) {
      bytes_blob_ += p;
    } else {
      for (size_t k = 0; k < p.size();) {
        if (p.compare(k, kSpace.size(), kSpace) == 0) {
          bytes_blob_.push_back(' ');
          k += kSpace.size();
        } else {
          bytes_blob_.push_back(p[k++]);
        }
      }
    }
    if ((t == TokenType::Normal || t == TokenType::UserDefined || t == TokenType::Unused) &&
        !p.empty()) {
      spm_mergeable_.emplace(std::string_view(p), static_cast<int32_t>(i));
    }
  }
  bytes_off_[n] = static_cast<uint32_t>(bytes_blob_.size());
  const bool all_bytes = std::none_of(byte_token_.begin(), byte_token_.end(), [](int32_t id) { return id < 0; });
  if (!all_bytes && unk_ < 0) {
    throw TokenizerError(
        "the vocabulary has neither all 256 <0xXX> byte pieces nor an unknown piece, so text outside "
        "its pieces cannot be encoded");
  }
}

std::string Tokenizer::spm_escape(std::string_view text) const {
  std::string s;
  s.reserve(text.size() + text.size() / 4 + kSpace.size());
  if (add_space_prefix_) s += kSpace;
  for (char c : text) {
    if (c == ' ') {
      s += kSpace;
    } else {
      s.push_back(c);
    }
  }
  return s;
}

void Tokenizer::spm_encode_text(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  const std::string s = spm_escape(text);

  // Symbols: a doubly linked list over byte ranges of s; a symbol merged into its left neighbour
  // has length 0.
  struct Symbol {
    uint32_t off, len;
    int32_t prev, next;
  };
  std::vector<Symbol> sym;
  for (size_t pos = 0; pos < s.size();) {
    const size_t start = pos;
    unicode::utf8_next(s.data(), s.size(), pos);
    const auto k = static_cast<int32_t>(sym.size());
    sym.push_back(Symbol{static_cast<uint32_t>(start), static_cast<uint32_t>(pos - start), k - 1, k + 1});
  }
  sym.back().next = -1;
  auto text_of = [&](int32_t k) { return std::string_view(s).substr(sym[k].off, sym[k].len); };

  struct Pair {
    float score;
    int32_t left, right;
    uint32_t len;
  };
  // A max-heap: higher score first, then the leftmost pair.
  const auto lower = [](const Pair& a, const Pair& b) {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  };
  std::vector<Pair> heap;
  auto try_pair = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const std::string_view joined = std::string_view(s).substr(sym[left].off, sym[left].len + sym[right].len);
    auto it = spm_mergeable_.find(joined);
    if (it == spm_mergeable_.end()) return;
    heap.push_back(Pair{scores_[it->second], left, right, static_cast<uint32_t>(joined.size())});
    std::push_heap(heap.begin(), heap.end(), lower);
  };
  for (int32_t k = 1; k < static_cast<int32_t>(sym.size()); ++k) try_pair(k - 1, k);

  SpmSplits splits;
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), lower);
    const Pair p = heap.back();
    heap.pop_back();
    Symbol& l = sym[p.left];
    Symbol& r = sym[p.right];
    // Stale when either side has merged with something else since the pair was pushed.
    if (l.len == 0 || r.len == 0 || l.len + r.len != p.len) continue;
    splits.emplace(std::string_view(s).substr(l.off, p.len), std::make_pair(text_of(p.left), text_of(p.right)));
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = p.left;
    try_pair(l.prev, p.left);
    try_pair(p.left, l.next);
  }
  for (int32_t k = 0; k >= 0; k = sym[k].next) spm_resegment(text_of(k), splits, out);
}

void Tokenizer::spm_resegment(std::string_view symbol, const SpmSplits& splits,
                              std::vector<int32_t>& out) const {
  if (auto it = spm_mergeable_.find(symbol); it != spm_mergeable_.end() && types_[it->second] != TokenType::Unused) {
    out.push_back(it->second);
    return;
  }
  if (auto it = splits.find(symbol); it != splits.end()) {
    spm_resegment(it->second.first, splits, out);
    spm_resegment(it->second.second, splits, out);
    return;
  }
  const bool bytes = std::all_of(symbol.begin(), symbol.end(),
                                 [&](char c) { return byte_token_[static_cast<uint8_t>(c)] >= 0; });
  if (bytes) {
    for (char c : symbol) out.push_back(byte_token_[static_cast<uint8_t>(c)]);
  } else if (unk_ >= 0) {
    out.push_back(unk_);
  }
}

}  // namespace tllm
