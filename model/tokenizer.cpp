// Byte-level BPE: loading (GGUF, vocabulary arrays, Hugging Face files), the pre-tokenizer
// scanners, the merge loop and streaming detokenisation.
#include "model/tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <deque>
#include <fstream>
#include <functional>
#include <iterator>
#include <sstream>

#include <nlohmann/json.hpp>

#include "model/gguf.h"
#include "model/unicode.h"

namespace tllm {
namespace {

// ---- the GPT-2 byte-level mapping ----------------------------------------------------------------
// Every byte gets a printable code point: the printable Latin-1 bytes map to themselves, the other
// 68 (controls, space, DEL, NBSP, soft hyphen) to U+0100.. in byte order. Vocabulary text is written
// in these code points, so a token's raw bytes are recovered by mapping each code point back.
struct ByteMap {
  std::array<std::string, 256> to_utf8;  // byte -> its code point, UTF-8
  std::array<int16_t, 0x144> to_byte;    // code point -> byte, -1 if none
};

const ByteMap& byte_map() {
  static const ByteMap m = [] {
    ByteMap bm;
    bm.to_byte.fill(-1);
    uint32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      const uint32_t cp = printable ? static_cast<uint32_t>(b) : next++;
      unicode::utf8_append(bm.to_utf8[b], cp);
      bm.to_byte[cp] = static_cast<int16_t>(b);
    }
    return bm;
  }();
  return m;
}

// Raw bytes of a vocabulary string in byte-level form; a code point outside the mapping (possible
// only in a malformed vocabulary) is kept as its UTF-8.
void append_unmapped(std::string& out, const std::string& text) {
  const ByteMap& bm = byte_map();
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t start = pos;
    const uint32_t cp = unicode::utf8_next(text.data(), text.size(), pos);
    if (cp < bm.to_byte.size() && bm.to_byte[cp] >= 0) {
      out.push_back(static_cast<char>(bm.to_byte[cp]));
    } else {
      out.append(text, start, pos - start);
    }
  }
}

// ---- pre-tokenizers ----------------------------------------------------------------------------
// Each scanner splits code points [b, e) into pieces and appends the end index of each piece to
// `ends`. The scanners reproduce a leftmost-first backtracking regex match of the family's split
// pattern, alternative by alternative, with `e` acting as the end of the text.
constexpr uint16_t kL = unicode::kLetter;
constexpr uint16_t kN = unicode::kNumber;
constexpr uint16_t kS = unicode::kWhitespace;
constexpr uint16_t kM = unicode::kMark;

struct Text {
  const uint32_t* cp;  // code points (invalid bytes as markers, which carry no class)
  const uint16_t* fl;  // unicode::flags of each
  bool is(size_t i, uint16_t f) const { return (fl[i] & f) != 0; }
  bool other(size_t i) const { return (fl[i] & (kL | kN | kS)) == 0; }  // [^\s\p{L}\p{N}]
  bool crlf(size_t i) const { return cp[i] == '\r' || cp[i] == '\n'; }
};

// End of the run of code points from i on (below e) that satisfy pred.
template <typename Pred>
size_t run_end(size_t i, size_t e, Pred pred) {
  while (i < e && pred(i)) ++i;
  return i;
}

// The contractions 's 't 're 've 'm 'll 'd at i: their end, or i when none matches.
size_t match_contraction(const Text& t, size_t i, size_t e, bool ignore_case) {
  if (t.cp[i] != '\'' || i + 1 >= e) return i;
  auto at = [&](size_t k) { return ignore_case ? unicode::fold_to_ascii(t.cp[k]) : t.cp[k]; };
  const uint32_t c1 = at(i + 1);
  if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return i + 2;
  if (i + 2 < e) {
    const uint32_t c2 = at(i + 2);
    if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return i + 3;
  }
  return i;
}

// Whitespace handling shared by every pattern, at the start i of a whitespace run:
//   \s+(?!\S)  the run, less its last character when a non-space follows (that character then
//              prefixes the next piece), unless the run is a single character;
//   \s+        otherwise the whole run.
size_t match_whitespace_tail(size_t i, size_t run, size_t e) {
  if (run == e) return run;
  if (run - i >= 2) return run - 1;
  return run;
}

// \s*[\r\n]+|\s+(?!\S)|\s+ at the start i of a whitespace run (Qwen2, Llama 3, Tekken): up to the
// run's last newline when it has one, else as match_whitespace_tail.
size_t match_whitespace_newlines(const Text& t, size_t i, size_t e) {
  const size_t run = run_end(i + 1, e, [&](size_t x) { return t.is(x, kS); });
  for (size_t k = run; k > i; --k) {
    if (t.crlf(k - 1)) return k;
  }
  return match_whitespace_tail(i, run, e);
}

// GPT-2 (also "default", and the second stage of SmolLM):
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
void split_gpt2(const Text& t, size_t b, size_t e, std::vector<uint32_t>& ends) {
  size_t i = b;
  while (i < e) {
    size_t j = match_contraction(t, i, e, /*ignore_case=*/false);
    if (j == i) {
      // ` ?X+` for the classes letter, number, other: the optional space joins only when a
      // character of the class follows it.
      const size_t k = (t.cp[i] == ' ' && i + 1 < e) ? i + 1 : i;
      if (t.is(k, kL)) {
        j = run_end(k + 1, e, [&](size_t x) { return t.is(x, kL); });
      } else if (t.is(k, kN)) {
        j = run_end(k + 1, e, [&](size_t x) { return t.is(x, kN); });
      } else if (t.other(k)) {
        j = run_end(k + 1, e, [&](size_t x) { return t.other(x); });
      } else {
        // t.cp[i] is whitespace (a space followed by whitespace lands here too).
        const size_t run = run_end(i + 1, e, [&](size_t x) { return t.is(x, kS); });
        j = match_whitespace_tail(i, run, e);
      }
    }
    ends.push_back(static_cast<uint32_t>(j));
    i = j;
  }
}

// SmolLM / SmolLM2: every \p{N} is a piece of its own; the text between goes through GPT-2's
// pattern (Hugging Face: Digits(individual_digits) then ByteLevel).
void split_smollm(const Text& t, size_t b, size_t e, std::vector<uint32_t>& ends) {
  size_t i = b;
  while (i < e) {
    if (t.is(i, kN)) {
      ends.push_back(static_cast<uint32_t>(++i));
      continue;
    }
    const size_t j = run_end(i + 1, e, [&](size_t x) { return !t.is(x, kN); });
    split_gpt2(t, i, j, ends);
    i = j;
  }
}

// Qwen2 (max_digits 1) and Llama 3 (max_digits 3):
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,max_digits}
//   | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
void split_llama3(const Text& t, size_t b, size_t e, size_t max_digits,
                  std::vector<uint32_t>& ends) {
  auto letter = [&](size_t x) { return t.is(x, kL); };
  size_t i = b;
  while (i < e) {
    size_t j = match_contraction(t, i, e, /*ignore_case=*/true);
    if (j == i) {
      if (t.is(i, kL)) {
        j = run_end(i + 1, e, letter);
      } else if (!t.crlf(i) && !t.is(i, kN) && i + 1 < e && t.is(i + 1, kL)) {
        j = run_end(i + 2, e, letter);  // one leading non-letter, non-digit, non-newline
      } else if (t.is(i, kN)) {
        j = run_end(i + 1, std::min(e, i + max_digits), [&](size_t x) { return t.is(x, kN); });
      } else if (t.other(i) || (t.cp[i] == ' ' && i + 1 < e && t.other(i + 1))) {
        j = run_end(t.other(i) ? i + 1 : i + 2, e, [&](size_t x) { return t.other(x); });
        j = run_end(j, e, [&](size_t x) { return t.crlf(x); });
      } else {
        j = match_whitespace_newlines(t, i, e);
      }
    }
    ends.push_back(static_cast<uint32_t>(j));
    i = j;
  }
}

// Tekken (Mistral Nemo, Pixtral, Ministral, Mistral Small 3: the pattern of mistral-common's
// tekken.json), with U = [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] and W = [\p{Ll}\p{Lm}\p{Lo}\p{M}]:
//   [^\r\n\p{L}\p{N}]?U*W+|[^\r\n\p{L}\p{N}]?U+W*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+
//   |\s+(?!\S)|\s+
// A word ends where a lower-case letter is followed by an upper-case one ("HelloWorld" is "Hello",
// "World"; "ABCdef" stays whole); Lm, Lo and marks are in both U and W. Digits stand alone.
// The reference is mistral-common's tiktoken encoder. llama.cpp runs an ASCII stand-in for U and W
// (letters other than a-z, letters other than A-Z), which cuts other scripts differently: it keeps
// "МирМИР" whole where the reference gives "Мир", "МИР".
void split_tekken(const Text& t, size_t b, size_t e, std::vector<uint32_t>& ends) {
  auto upper = [&](size_t x) { return t.is(x, kM) || (t.is(x, kL) && !t.is(x, unicode::kLower)); };
  auto lower = [&](size_t x) { return t.is(x, kM) || (t.is(x, kL) && !t.is(x, unicode::kUpper)); };
  // U*W+ from s: U* takes its whole run, then gives back characters until a W follows. Returns
  // the end of the match, or s when there is none.
  auto upper_lower = [&](size_t s) {
    const size_t u = run_end(s, e, upper);
    for (size_t k = u + 1; k-- > s;) {
      if (k < e && lower(k)) return run_end(k + 1, e, lower);
    }
    return s;
  };
  // U+W* from s: its end, or s when there is none.
  auto upper_then_lower = [&](size_t s) {
    const size_t u = run_end(s, e, upper);
    return u == s ? s : run_end(u, e, lower);
  };
  size_t i = b;
  while (i < e) {
    // [^\r\n\p{L}\p{N}]? is tried with its character first, then without, for each alternative.
    const bool prefix = i + 1 < e && !t.crlf(i) && !t.is(i, kL) && !t.is(i, kN);
    auto word = [&](auto match) {
      const size_t m = prefix ? match(i + 1) : i + 1;
      return m > i + 1 ? m : match(i);
    };
    size_t j = word(upper_lower);
    if (j == i) j = word(upper_then_lower);
    if (j == i && t.is(i, kN)) j = i + 1;
    if (j == i && (t.other(i) || (t.cp[i] == ' ' && i + 1 < e && t.other(i + 1)))) {
      j = run_end(t.other(i) ? i + 1 : i + 2, e, [&](size_t x) { return t.other(x); });
      j = run_end(j, e, [&](size_t x) { return t.crlf(x) || t.cp[x] == '/'; });
    }
    if (j == i) j = match_whitespace_newlines(t, i, e);  // all that is left: whitespace
    ends.push_back(static_cast<uint32_t>(j));
    i = j;
  }
}

// ---- Hugging Face vocab.json -----------------------------------------------------------------
// A SAX reader for the flat {"token": id, ...} object: 150k entries without building a DOM.
class VocabReader : public nlohmann::json_sax<nlohmann::json> {
 public:
  std::vector<std::pair<std::string, int64_t>> entries;
  std::string error;

  bool key(string_t& k) override {
    key_ = std::move(k);
    return true;
  }
  bool number_unsigned(number_unsigned_t v) override { return add(static_cast<int64_t>(v)); }
  bool number_integer(number_integer_t v) override { return add(v); }
  bool start_object(std::size_t) override { return ++depth_ == 1 || fail("nested object"); }
  bool end_object() override {
    --depth_;
    return true;
  }
  bool null() override { return fail("null value"); }
  bool boolean(bool) override { return fail("boolean value"); }
  bool number_float(number_float_t, const string_t&) override { return fail("fractional id"); }
  bool string(string_t&) override { return fail("string value"); }
  bool binary(binary_t&) override { return fail("binary value"); }
  bool start_array(std::size_t) override { return fail("array"); }
  bool end_array() override { return true; }
  bool parse_error(std::size_t pos, const std::string&, const nlohmann::detail::exception&) override {
    return fail("JSON syntax error at byte " + std::to_string(pos));
  }

 private:
  bool add(int64_t id) {
    if (depth_ != 1) return fail("number outside the top-level object");
    entries.emplace_back(std::move(key_), id);
    return true;
  }
  bool fail(const std::string& what) {
    if (error.empty()) error = what;
    return false;
  }
  std::string key_;
  int depth_ = 0;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw TokenizerError(path + ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Code point offsets within a text are 32-bit.
void check_text_size(size_t bytes) {
  if (bytes >= UINT32_MAX) {
    throw TokenizerError("text of " + std::to_string(bytes) + " bytes is too long to tokenize");
  }
}

constexpr const char* kEndOfTurnTexts[] = {"<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>"};
// <｜end▁of▁sentence｜>: the EOS of DeepSeek-R1 and its distills, the end of each of their replies.
constexpr const char* kEndOfGenerationTexts[] = {"<|im_end|>",    "<|eot_id|>",      "<|eom_id|>",
                                                 "<|endoftext|>", "<|end_of_text|>", "<|end|>",
                                                 "<end_of_turn>", "<｜end▁of▁sentence｜>"};

struct PreName {
  const char* name;
  int kind;       // 0 gpt2, 1 smollm, 2 qwen2, 3 llama3, 4 tekken (Tokenizer::Pre order)
  bool add_bos;   // the default of add_bos(): whether the reference tokenizer prepends BOS
};
// "deepseek-r1-qwen" (DeepSeek-R1-Distill-Qwen-*) is the Qwen2 tokenizer: its tokenizer.json has
// Qwen2's NFC normalizer and split regex, and a post-processor that prepends BOS. "falcon3"
// (Falcon3) is read as llama.cpp reads it: Llama 3's split, whole pieces, BOS by default.
constexpr PreName kPreNames[] = {
    {"qwen2", 2, false},    {"smollm", 1, false}, {"gpt-2", 0, false},    {"default", 0, false},
    {"llama-bpe", 3, true}, {"llama3", 3, true},  {"llama-v3", 3, true},  {"falcon3", 3, true},
    {"deepseek-r1-qwen", 2, true}, {"tekken", 4, true},
};

const PreName* find_pre(const std::string& name) {
  for (const PreName& p : kPreNames) {
    if (name == p.name) return &p;
  }
  return nullptr;
}

}  // namespace

// ---- merge table -------------------------------------------------------------------------------
struct Tokenizer::MergeTable {
  struct Slot {
    uint64_t key = kEmpty;
    int32_t rank = 0;
    int32_t merged = 0;
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};

  explicit MergeTable(size_t n) {
    size_t cap = 16;
    shift = 60;
    while (cap < 2 * n) {
      cap *= 2;
      --shift;
    }
    slots.resize(cap);
    mask = cap - 1;
  }
  static uint64_t key_of(int32_t left, int32_t right) {
    return (uint64_t{static_cast<uint32_t>(left)} << 32) | static_cast<uint32_t>(right);
  }
  size_t home(uint64_t key) const { return (key * 0x9E3779B97F4A7C15ull) >> shift; }
  // Keeps the first (lowest-ranked) entry of a pair listed twice.
  void insert(int32_t left, int32_t right, int32_t rank, int32_t merged) {
    const uint64_t key = key_of(left, right);
    for (size_t i = home(key);; i = (i + 1) & mask) {
      if (slots[i].key == key) return;
      if (slots[i].key == kEmpty) {
        slots[i] = Slot{key, rank, merged};
        return;
      }
    }
  }
  const Slot* find(int32_t left, int32_t right) const {
    const uint64_t key = key_of(left, right);
    for (size_t i = home(key);; i = (i + 1) & mask) {
      if (slots[i].key == key) return &slots[i];
      if (slots[i].key == kEmpty) return nullptr;
    }
  }

  std::vector<Slot> slots;
  size_t mask = 0;
  int shift = 60;
};

// ---- per-call state of encode() -----------------------------------------------------------------
struct Tokenizer::Workspace {
  std::deque<std::string> normalized;  // NFC copies of text segments (stable addresses for `cache`)
  std::vector<uint32_t> cps;           // code points of the current segment
  std::vector<uint16_t> fl;            // their flags
  std::vector<uint32_t> offs;          // byte offset of each code point, plus the end
  std::vector<uint32_t> ends;          // piece ends from the pre-tokenizer
  // BPE over one piece: symbol ids and a doubly linked list (-1 ends it; a merged-away symbol
  // has id -1), and the candidate merges as a min-heap on (rank, position).
  std::vector<int32_t> sym, prev, next;
  struct Candidate {
    int32_t rank, pos, left, right, merged;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::vector<Candidate> heap;
  std::string mapped;
  // Pieces already encoded in this call: piece bytes -> (offset, count) in cache_ids.
  std::unordered_map<std::string_view, std::pair<uint32_t, uint32_t>> cache;
  std::vector<int32_t> cache_ids;
};

Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;

std::vector<std::string> Tokenizer::pre_tokenizer_names() {
  std::vector<std::string> names;
  for (const PreName& p : kPreNames) names.push_back(p.name);
  return names;
}

std::string Tokenizer::supported_pre_tokenizers() {
  std::string s;
  for (const std::string& name : pre_tokenizer_names()) s += (s.empty() ? "" : ", ") + name;
  return s;
}

void Tokenizer::build_common(std::vector<std::string> tokens, std::vector<int32_t> token_types,
                             const SpecialTokenIds& special) {
  const size_t n = tokens.size();
  if (n == 0) throw TokenizerError("empty vocabulary");
  if (n > 0x7FFFFFFF) throw TokenizerError("vocabulary too large");
  if (token_types.empty()) token_types.assign(n, static_cast<int32_t>(TokenType::Normal));
  if (token_types.size() != n) {
    throw TokenizerError("token_type has " + std::to_string(token_types.size()) + " entries for " +
                         std::to_string(n) + " tokens");
  }
  tokens_ = std::move(tokens);
  types_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const int32_t t = token_types[i];
    types_[i] = (t >= 0 && t <= 6) ? static_cast<TokenType>(t) : TokenType::Undefined;
  }

  text_to_id_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (!tokens_[i].empty()) text_to_id_.emplace(tokens_[i], static_cast<int32_t>(i));
  }

  for (auto& v : special_by_first_byte_) v.clear();
  has_special_ = false;
  for (size_t i = 0; i < n; ++i) {
    if ((types_[i] == TokenType::Control || types_[i] == TokenType::UserDefined) &&
        !tokens_[i].empty()) {
      special_by_first_byte_[static_cast<uint8_t>(tokens_[i][0])].push_back(static_cast<int32_t>(i));
      has_special_ = true;
    }
  }
  for (auto& v : special_by_first_byte_) {
    std::stable_sort(v.begin(), v.end(), [&](int32_t a, int32_t b) {
      return tokens_[a].size() > tokens_[b].size();
    });
  }

  auto checked = [&](int32_t id, const char* what) {
    if (id < -1 || id >= static_cast<int32_t>(n)) {
      throw TokenizerError(std::string(what) + " id " + std::to_string(id) +
                           " is outside the vocabulary (n_vocab " + std::to_string(n) + ")");
    }
    return id;
  };
  unk_ = checked(special.unk, "unk");
  bos_ = checked(special.bos, "bos");
  eos_ = checked(special.eos, "eos");
  eot_ = checked(special.eot, "eot");
  eom_ = checked(special.eom, "eom");
  pad_ = checked(special.pad, "pad");
  auto special_text = [&](const char* text) {
    auto it = text_to_id_.find(text);
    if (it == text_to_id_.end()) return -1;
    const TokenType t = types_[it->second];
    return (t == TokenType::Control || t == TokenType::UserDefined) ? it->second : -1;
  };
  for (const char* text : kEndOfTurnTexts) {
    if (eot_ < 0) eot_ = special_text(text);
  }
  end_of_generation_.clear();
  for (int32_t id : {eos_, eot_, eom_}) {
    if (id >= 0) end_of_generation_.push_back(id);
  }
  for (const char* text : kEndOfGenerationTexts) {
    const int32_t id = special_text(text);
    if (id >= 0) end_of_generation_.push_back(id);
  }
  std::sort(end_of_generation_.begin(), end_of_generation_.end());
  end_of_generation_.erase(std::unique(end_of_generation_.begin(), end_of_generation_.end()),
                           end_of_generation_.end());
}

void Tokenizer::build(std::vector<std::string> tokens, std::vector<int32_t> token_types,
                      const std::vector<std::string>& merges, const std::string& pre,
                      const SpecialTokenIds& special) {
  const PreName* pn = find_pre(pre);
  if (!pn) {
    throw TokenizerError("unknown pre-tokenizer '" + pre + "' (supported: " +
                         supported_pre_tokenizers() + ")");
  }
  pre_name_ = pre;
  pre_ = static_cast<Pre>(pn->kind);
  ignore_merges_ = pre_ == Pre::Llama3 || pre_ == Pre::Tekken;
  build_common(std::move(tokens), std::move(token_types), special);
  add_bos_ = special.add_bos.value_or(pn->add_bos);
  const size_t n = tokens_.size();

  // Raw bytes of every token: special tokens stand for their own text, unused ones for nothing.
  bytes_off_.resize(n + 1);
  bytes_blob_.clear();
  for (size_t i = 0; i < n; ++i) {
    bytes_off_[i] = static_cast<uint32_t>(bytes_blob_.size());
    if (types_[i] == TokenType::Unused) continue;
    if (types_[i] == TokenType::Control || types_[i] == TokenType::UserDefined) {
      bytes_blob_ += tokens_[i];
    } else {
      append_unmapped(bytes_blob_, tokens_[i]);
    }
  }
  bytes_off_[n] = static_cast<uint32_t>(bytes_blob_.size());

  // Some real vocabularies (SmolLM2's) lack tokens for a few control bytes. Such a byte cannot be
  // represented and is dropped from the encoding, as the reference implementations do; a vocabulary
  // missing most bytes is not byte-level BPE at all.
  const ByteMap& bm = byte_map();
  int missing = 0;
  for (int b = 0; b < 256; ++b) {
    auto it = text_to_id_.find(bm.to_utf8[b]);
    byte_token_[b] = it == text_to_id_.end() ? -1 : it->second;
    missing += it == text_to_id_.end();
  }
  if (missing > 128) {
    throw TokenizerError("vocabulary has tokens for only " + std::to_string(256 - missing) +
                         " of the 256 bytes; not a byte-level BPE vocabulary");
  }

  // Merges "left right" in rank order. A merge naming text outside the vocabulary can never apply
  // to a sequence of token ids, and one producing a special token must not: both are left out.
  merges_ = std::make_unique<MergeTable>(merges.size());
  std::string joined;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string& m = merges[rank];
    const size_t sp = m.find(' ', 1);
    if (sp == std::string::npos || sp + 1 >= m.size() || m.find(' ', sp + 1) != std::string::npos) {
      throw TokenizerError("merge " + std::to_string(rank) + " ('" + m + "') is not 'left right'");
    }
    auto left = text_to_id_.find(m.substr(0, sp));
    auto right = text_to_id_.find(m.substr(sp + 1));
    if (left == text_to_id_.end() || right == text_to_id_.end()) continue;
    joined.assign(m, 0, sp);
    joined.append(m, sp + 1, std::string::npos);
    auto merged = text_to_id_.find(joined);
    if (merged == text_to_id_.end()) continue;
    const TokenType mt = types_[merged->second];
    if (mt == TokenType::Control || mt == TokenType::UserDefined) continue;
    merges_->insert(left->second, right->second, static_cast<int32_t>(rank), merged->second);
  }
}

std::unique_ptr<Tokenizer> Tokenizer::from_vocab(std::vector<std::string> tokens,
                                                 std::vector<int32_t> token_types,
                                                 std::vector<std::string> merges,
                                                 const std::string& pre,
                                                 const SpecialTokenIds& special) {
  std::unique_ptr<Tokenizer> tok(new Tokenizer());
  tok->build(std::move(tokens), std::move(token_types), merges, pre, special);
  return tok;
}

std::unique_ptr<Tokenizer> Tokenizer::from_spm_vocab(std::vector<std::string> pieces,
                                                     std::vector<float> scores,
                                                     std::vector<int32_t> token_types,
                                                     const SpecialTokenIds& special,
                                                     bool add_space_prefix) {
  std::unique_ptr<Tokenizer> tok(new Tokenizer());
  tok->build_spm(std::move(pieces), std::move(scores), std::move(token_types), special,
                 add_space_prefix);
  return tok;
}

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const GgufFile& f) {
  const std::string& path = f.path();
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  std::vector<std::string> merges;
  std::vector<float> scores;
  std::string pre;
  SpecialTokenIds special;
  bool spm = false;
  bool add_space_prefix = true;
  try {
    if (!f.find("tokenizer.ggml.model")) {
      throw TokenizerError(path + ": missing tokenizer.ggml.model (the file holds no tokenizer)");
    }
    const std::string model = f.get_string("tokenizer.ggml.model");
    if (model != "gpt2" && model != "llama") {
      throw TokenizerError(path + ": tokenizer.ggml.model is '" + model +
                           "'; supported: 'gpt2' (byte-level BPE) and 'llama' (SentencePiece BPE)");
    }
    spm = model == "llama";
    if (!spm) {
      pre = f.get_string("tokenizer.ggml.pre", "default");
      if (!find_pre(pre)) {
        throw TokenizerError(path + ": tokenizer.ggml.pre '" + pre +
                             "' is not supported (supported: " + supported_pre_tokenizers() + ")");
      }
    }
    for (const char* key : {"tokenizer.ggml.tokens", spm ? "tokenizer.ggml.scores" : "tokenizer.ggml.merges"}) {
      if (!f.find(key)) throw TokenizerError(path + ": missing " + key);
    }
    tokens = f.get_string_array("tokenizer.ggml.tokens");
    if (spm) {
      const std::vector<double> s = f.get_float_array("tokenizer.ggml.scores");
      if (s.size() != tokens.size()) {
        throw TokenizerError(path + ": tokenizer.ggml.scores has " + std::to_string(s.size()) +
                             " entries for " + std::to_string(tokens.size()) + " tokens");
      }
      scores.assign(s.begin(), s.end());
      add_space_prefix = f.get_bool("tokenizer.ggml.add_space_prefix", true);
    } else {
      merges = f.get_string_array("tokenizer.ggml.merges");
    }
    if (f.find("tokenizer.ggml.token_type")) {
      const std::vector<int64_t> t = f.get_int_array("tokenizer.ggml.token_type");
      if (t.size() != tokens.size()) {
        throw TokenizerError(path + ": tokenizer.ggml.token_type has " + std::to_string(t.size()) +
                             " entries for " + std::to_string(tokens.size()) + " tokens");
      }
      types.assign(t.begin(), t.end());
    }
    const int64_t n = static_cast<int64_t>(tokens.size());
    auto id_of = [&](const std::string& key) -> int32_t {
      const int64_t id = f.get_int(key, -1);
      if (id < -1 || id >= n) {
        throw TokenizerError(path + ": " + key + " = " + std::to_string(id) +
                             " is outside the vocabulary (n_vocab " + std::to_string(n) + ")");
      }
      return static_cast<int32_t>(id);
    };
    special.unk = id_of("tokenizer.ggml.unknown_token_id");
    special.bos = id_of("tokenizer.ggml.bos_token_id");
    special.eos = id_of("tokenizer.ggml.eos_token_id");
    special.eot = id_of("tokenizer.ggml.eot_token_id");
    special.eom = id_of("tokenizer.ggml.eom_token_id");
    special.pad = id_of("tokenizer.ggml.padding_token_id");
    if (f.find("tokenizer.ggml.add_bos_token")) {
      special.add_bos = f.get_bool("tokenizer.ggml.add_bos_token", false);
    }
  } catch (const GgufError& e) {
    throw TokenizerError(e.what());
  }
  try {
    if (spm) {
      return from_spm_vocab(std::move(tokens), std::move(scores), std::move(types), special,
                            add_space_prefix);
    }
    return from_vocab(std::move(tokens), std::move(types), std::move(merges), pre, special);
  } catch (const TokenizerError& e) {
    throw TokenizerError(path + ": tokenizer: " + e.what());
  }
}

std::unique_ptr<Tokenizer> Tokenizer::from_hf_folder(const std::string& dir, const std::string& pre,
                                                     const std::vector<AddedToken>& added,
                                                     const SpecialTokenIds& special) {
  const std::string vocab_path = dir + "/vocab.json";
  const std::string merges_path = dir + "/merges.txt";

  VocabReader reader;
  const std::string json = read_file(vocab_path);
  if (!nlohmann::json::sax_parse(json, &reader) || !reader.error.empty()) {
    throw TokenizerError(vocab_path + ": not a {\"token\": id} object (" +
                         (reader.error.empty() ? std::string("parse error") : reader.error) + ")");
  }
  int64_t max_id = -1;
  for (const auto& [text, id] : reader.entries) max_id = std::max(max_id, id);
  for (const AddedToken& a : added) max_id = std::max<int64_t>(max_id, a.id);
  if (max_id < 0 || max_id >= 0x7FFFFFFF) throw TokenizerError(vocab_path + ": no usable ids");

  // Ids without a token (gaps) become empty Unused entries.
  std::vector<std::string> tokens(static_cast<size_t>(max_id) + 1);
  std::vector<int32_t> types(tokens.size(), static_cast<int32_t>(TokenType::Unused));
  for (auto& [text, id] : reader.entries) {
    if (id < 0) throw TokenizerError(vocab_path + ": negative id for '" + text + "'");
    if (!tokens[id].empty()) {
      throw TokenizerError(vocab_path + ": id " + std::to_string(id) + " is used twice");
    }
    tokens[id] = std::move(text);
    types[id] = static_cast<int32_t>(TokenType::Normal);
  }
  for (const AddedToken& a : added) {
    if (a.id < 0) throw TokenizerError("added token '" + a.text + "' has a negative id");
    tokens[a.id] = a.text;
    types[a.id] = static_cast<int32_t>(a.type);
  }

  std::vector<std::string> merges;
  {
    std::ifstream in(merges_path, std::ios::binary);
    if (!in) throw TokenizerError(merges_path + ": cannot open");
    std::string line;
    bool first = true;
    while (std::getline(in, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (first && line.rfind("#version", 0) == 0) {
        first = false;
        continue;
      }
      first = false;
      if (!line.empty()) merges.push_back(std::move(line));
    }
  }
  try {
    return from_vocab(std::move(tokens), std::move(types), std::move(merges), pre, special);
  } catch (const TokenizerError& e) {
    throw TokenizerError(dir + ": tokenizer: " + e.what());
  }
}

// ---- encoding ----------------------------------------------------------------------------------

std::vector<int32_t> Tokenizer::encode(const std::string& text, bool parse_special) const {
  check_text_size(text.size());
  Workspace ws;
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 8);
  const std::string_view all(text);
  if (!parse_special || !has_special_) {
    encode_text(all, ws, out);
    return out;
  }
  // Leftmost-longest match of the special tokens; the text between them is ordinary text.
  size_t segment = 0;
  size_t p = 0;
  while (p < all.size()) {
    int32_t match = -1;
    for (int32_t id : special_by_first_byte_[static_cast<uint8_t>(all[p])]) {
      if (all.compare(p, tokens_[id].size(), tokens_[id]) == 0) {
        match = id;
        break;
      }
    }
    if (match < 0) {
      ++p;
      continue;
    }
    if (p > segment) encode_text(all.substr(segment, p - segment), ws, out);
    out.push_back(match);
    p += tokens_[match].size();
    segment = p;
  }
  if (segment < all.size()) encode_text(all.substr(segment), ws, out);
  return out;
}

std::string_view Tokenizer::split_text(std::string_view text, Workspace& ws) const {
  if (pre_ == Pre::Qwen2 && !unicode::is_nfc_quick(text)) {
    ws.normalized.push_back(unicode::nfc(text));
    text = ws.normalized.back();
  }
  ws.cps.clear();
  ws.fl.clear();
  ws.offs.clear();
  size_t pos = 0;
  while (pos < text.size()) {
    ws.offs.push_back(static_cast<uint32_t>(pos));
    const uint32_t cp = unicode::utf8_next(text.data(), text.size(), pos);
    ws.cps.push_back(cp);
    ws.fl.push_back(unicode::flags(cp));
  }
  ws.offs.push_back(static_cast<uint32_t>(text.size()));

  const Text t{ws.cps.data(), ws.fl.data()};
  const size_t n = ws.cps.size();
  ws.ends.clear();
  switch (pre_) {
    case Pre::Gpt2: split_gpt2(t, 0, n, ws.ends); break;
    case Pre::SmolLM: split_smollm(t, 0, n, ws.ends); break;
    case Pre::Qwen2: split_llama3(t, 0, n, 1, ws.ends); break;
    case Pre::Llama3: split_llama3(t, 0, n, 3, ws.ends); break;
    case Pre::Tekken: split_tekken(t, 0, n, ws.ends); break;
  }
  return text;
}

void Tokenizer::encode_text(std::string_view text, Workspace& ws, std::vector<int32_t>& out) const {
  if (spm_) {
    spm_encode_text(text, out);
    return;
  }
  text = split_text(text, ws);
  size_t begin = 0;
  for (uint32_t end : ws.ends) {
    const uint32_t b = ws.offs[begin];
    bpe_piece(text.substr(b, ws.offs[end] - b), ws, out);
    begin = end;
  }
}

std::vector<std::string> Tokenizer::pre_tokenize(const std::string& text) const {
  check_text_size(text.size());
  if (spm_) {
    if (text.empty()) return {};
    return {add_space_prefix_ ? " " + text : text};
  }
  Workspace ws;
  const std::string_view norm = split_text(text, ws);
  std::vector<std::string> pieces;
  size_t begin = 0;
  for (uint32_t end : ws.ends) {
    pieces.emplace_back(norm.substr(ws.offs[begin], ws.offs[end] - ws.offs[begin]));
    begin = end;
  }
  return pieces;
}

void Tokenizer::bpe_piece(std::string_view piece, Workspace& ws, std::vector<int32_t>& out) const {
  const size_t n = piece.size();
  if (n == 1) {
    if (byte_token_[static_cast<uint8_t>(piece[0])] >= 0) out.push_back(byte_token_[static_cast<uint8_t>(piece[0])]);
    return;
  }
  if (auto hit = ws.cache.find(piece); hit != ws.cache.end()) {
    const auto [off, count] = hit->second;
    out.insert(out.end(), ws.cache_ids.begin() + off, ws.cache_ids.begin() + off + count);
    return;
  }
  const size_t start = out.size();
  bool whole = false;
  if (ignore_merges_) {
    const ByteMap& bm = byte_map();
    ws.mapped.clear();
    for (char c : piece) ws.mapped += bm.to_utf8[static_cast<uint8_t>(c)];
    auto it = text_to_id_.find(ws.mapped);
    if (it != text_to_id_.end() && types_[it->second] == TokenType::Normal) {
      out.push_back(it->second);
      whole = true;
    }
  }
  if (!whole) {
    auto& sym = ws.sym;
    auto& prev = ws.prev;
    auto& next = ws.next;
    auto& heap = ws.heap;
    sym.resize(n);
    prev.resize(n);
    next.resize(n);
    for (size_t k = 0; k < n; ++k) {
      sym[k] = byte_token_[static_cast<uint8_t>(piece[k])];
      prev[k] = static_cast<int32_t>(k) - 1;
      next[k] = k + 1 < n ? static_cast<int32_t>(k + 1) : -1;
    }
    using Candidate = Workspace::Candidate;
    const auto cmp = std::greater<Candidate>();
    heap.clear();
    auto candidate = [&](int32_t left) -> bool {
      if (left < 0 || next[left] < 0) return false;
      const int32_t right = next[left];
      if (sym[left] < 0 || sym[right] < 0) return false;  // a byte without a token never merges
      const MergeTable::Slot* s = merges_->find(sym[left], sym[right]);
      if (!s) return false;
      heap.push_back(Candidate{s->rank, left, sym[left], sym[right], s->merged});
      return true;
    };
    for (size_t k = 0; k + 1 < n; ++k) candidate(static_cast<int32_t>(k));
    std::make_heap(heap.begin(), heap.end(), cmp);
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end(), cmp);
      const Candidate c = heap.back();
      heap.pop_back();
      const int32_t right = next[c.pos];
      // Stale when either side has merged with something else since the candidate was pushed.
      if (sym[c.pos] != c.left || right < 0 || sym[right] != c.right) continue;
      sym[c.pos] = c.merged;
      sym[right] = -1;
      next[c.pos] = next[right];
      if (next[right] >= 0) prev[next[right]] = c.pos;
      if (candidate(prev[c.pos])) std::push_heap(heap.begin(), heap.end(), cmp);
      if (candidate(c.pos)) std::push_heap(heap.begin(), heap.end(), cmp);
    }
    for (int32_t k = 0; k >= 0; k = next[k]) {
      if (sym[k] >= 0) out.push_back(sym[k]);
    }
  }
  ws.cache.emplace(piece, std::make_pair(static_cast<uint32_t>(ws.cache_ids.size()),
                                         static_cast<uint32_t>(out.size() - start)));
  ws.cache_ids.insert(ws.cache_ids.end(), out.begin() + start, out.end());
}

// ---- decoding and lookups ----------------------------------------------------------------------

void Tokenizer::check_id(int32_t id) const {
  if (id < 0 || id >= n_vocab()) {
    throw TokenizerError("token id " + std::to_string(id) + " is outside the vocabulary (n_vocab " +
                         std::to_string(n_vocab()) + ")");
  }
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids) {
    check_id(id);
    out.append(bytes_blob_, bytes_off_[id], bytes_off_[id + 1] - bytes_off_[id]);
  }
  if (spm_ && add_space_prefix_ && !ids.empty() && types_[ids[0]] == TokenType::Normal &&
      !out.empty() && out[0] == ' ') {
    out.erase(0, 1);
  }
  return out;
}

std::string Tokenizer::token_bytes(int32_t id) const {
  check_id(id);
  return bytes_blob_.substr(bytes_off_[id], bytes_off_[id + 1] - bytes_off_[id]);
}

const std::string& Tokenizer::token_text(int32_t id) const {
  check_id(id);
  return tokens_[id];
}

TokenType Tokenizer::token_type(int32_t id) const {
  check_id(id);
  return types_[id];
}

bool Tokenizer::is_end_of_generation(int32_t id) const {
  return std::binary_search(end_of_generation_.begin(), end_of_generation_.end(), id);
}

int32_t Tokenizer::find_token(const std::string& text) const {
  auto it = text_to_id_.find(text);
  return it == text_to_id_.end() ? -1 : it->second;
}

// ---- streaming ---------------------------------------------------------------------------------

namespace {
// Length of the prefix of s that may be printed now: all of it, unless s ends with the first bytes
// of a valid UTF-8 sequence that more bytes could complete.
size_t printable_prefix(const std::string& s) {
  const size_t n = s.size();
  for (size_t k = 1; k <= 3 && k <= n; ++k) {
    const auto b = static_cast<uint8_t>(s[n - k]);
    if ((b & 0xC0) == 0x80) continue;  // a continuation byte: look further back for the lead
    const int len = unicode::utf8_sequence_length(b);
    if (len <= static_cast<int>(k)) return n;  // complete, or not a lead byte at all
    if (k >= 2) {
      // The second byte's range rules out overlong forms, surrogates and > U+10FFFF.
      const auto b1 = static_cast<uint8_t>(s[n - k + 1]);
      const bool ok = (b != 0xE0 || b1 >= 0xA0) && (b != 0xED || b1 <= 0x9F) &&
                      (b != 0xF0 || b1 >= 0x90) && (b != 0xF4 || b1 <= 0x8F);
      if (!ok) return n;
    }
    return n - k;
  }
  return n;
}
}  // namespace

std::string StreamDecoder::push(int32_t id) {
  pending_ += tok_.token_bytes(id);
  const size_t cut = printable_prefix(pending_);
  std::string out = pending_.substr(0, cut);
  pending_.erase(0, cut);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out;
  out.swap(pending_);
  return out;
}

}  // namespace tllm
