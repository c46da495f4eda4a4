// UTF-8, character classes and NFC over the generated tables of unicode_tables.cpp.
#include "model/unicode.h"

#include <algorithm>
#include <utility>

namespace tllm::unicode {
namespace {

// Hangul syllable arithmetic (Unicode chapter 3.12).
constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28;
constexpr uint32_t kNCount = kVCount * kTCount;  // 588
constexpr uint32_t kSCount = kLCount * kNCount;  // 11172

// Flags of every BMP code point, expanded once from the range table so the hot path of the
// pre-tokenizer (Latin, CJK) is one array load; code points above the BMP use a binary search.
const std::vector<uint16_t>& bmp_flags() {
  static const std::vector<uint16_t> table = [] {
    std::vector<uint16_t> t(0x10000, 0);
    for (size_t i = 0; i < detail::kFlagRangesCount; ++i) {
      const detail::FlagRange& r = detail::kFlagRanges[i];
      if (r.first > 0xFFFF) break;
      const uint32_t last = std::min<uint32_t>(r.last, 0xFFFF);
      std::fill(t.begin() + r.first, t.begin() + last + 1, r.flags);
    }
    return t;
  }();
  return table;
}

// Binary search in a table of {first, last, ...} ranges; nullptr when cp is in none.
template <typename Range>
const Range* find_range(const Range* table, size_t count, uint32_t cp) {
  const Range* end = table + count;
  const Range* it = std::upper_bound(table, end, cp,
                                     [](uint32_t c, const Range& r) { return c < r.first; });
  if (it == table) return nullptr;
  --it;
  return cp <= it->last ? it : nullptr;
}

const detail::Decomposition* find_decomposition(uint32_t cp) {
  const detail::Decomposition* begin = detail::kDecompositions;
  const detail::Decomposition* end = begin + detail::kDecompositionsCount;
  const detail::Decomposition* it = std::lower_bound(
      begin, end, cp, [](const detail::Decomposition& d, uint32_t c) { return d.cp < c; });
  return (it != end && it->cp == cp) ? it : nullptr;
}

bool is_continuation(uint8_t b) { return (b & 0xC0) == 0x80; }

}  // namespace

int utf8_sequence_length(uint8_t lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;  // a continuation byte, an overlong lead (C0, C1) or beyond U+10FFFF (F5..FF)
}

uint32_t utf8_next(const char* s, size_t n, size_t& pos) {
  const auto* u = reinterpret_cast<const uint8_t*>(s);
  const uint8_t b0 = u[pos];
  if (b0 < 0x80) {
    ++pos;
    return b0;
  }
  const int len = utf8_sequence_length(b0);
  bool ok = len > 0 && n - pos >= static_cast<size_t>(len);
  if (ok) {
    for (int k = 1; k < len; ++k) ok = ok && is_continuation(u[pos + k]);
  }
  if (ok && len >= 3) {
    // The second byte's range excludes overlong forms (E0, F0), surrogates (ED) and > U+10FFFF (F4).
    const uint8_t b1 = u[pos + 1];
    if (b0 == 0xE0) ok = b1 >= 0xA0;
    if (b0 == 0xED) ok = b1 <= 0x9F;
    if (b0 == 0xF0) ok = b1 >= 0x90;
    if (b0 == 0xF4) ok = b1 <= 0x8F;
  }
  if (!ok) {
    ++pos;
    return kInvalidByteBase + b0;
  }
  uint32_t cp;
  if (len == 2) {
    cp = ((b0 & 0x1Fu) << 6) | (u[pos + 1] & 0x3Fu);
  } else if (len == 3) {
    cp = ((b0 & 0x0Fu) << 12) | ((u[pos + 1] & 0x3Fu) << 6) | (u[pos + 2] & 0x3Fu);
  } else {
    cp = ((b0 & 0x07u) << 18) | ((u[pos + 1] & 0x3Fu) << 12) | ((u[pos + 2] & 0x3Fu) << 6) |
         (u[pos + 3] & 0x3Fu);
  }
  pos += len;
  return cp;
}

void utf8_append(std::string& out, uint32_t cp) {
  if (cp >= kInvalidByteBase) {
    out.push_back(static_cast<char>(cp - kInvalidByteBase));
  } else if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::vector<uint32_t> utf8_decode(std::string_view s) {
  std::vector<uint32_t> cps;
  cps.reserve(s.size());
  size_t pos = 0;
  while (pos < s.size()) cps.push_back(utf8_next(s.data(), s.size(), pos));
  return cps;
}

std::string utf8_encode(const std::vector<uint32_t>& cps) {
  std::string out;
  out.reserve(cps.size());
  for (uint32_t cp : cps) utf8_append(out, cp);
  return out;
}

uint16_t flags(uint32_t cp) {
  if (cp < 0x10000) return bmp_flags()[cp];
  const detail::FlagRange* r = find_range(detail::kFlagRanges, detail::kFlagRangesCount, cp);
  return r ? r->flags : 0;
}

uint32_t fold_to_ascii(uint32_t cp) {
  if (cp < 0x80) return (cp >= 'A' && cp <= 'Z') ? cp + ('a' - 'A') : cp;
  for (size_t i = 0; i < detail::kAsciiFoldsCount; ++i) {
    if (detail::kAsciiFolds[i].cp == cp) return detail::kAsciiFolds[i].folded;
  }
  return cp;
}

uint8_t combining_class(uint32_t cp) {
  if (cp < 0x300) return 0;  // the first non-zero class is U+0300
  const detail::CccRange* r = find_range(detail::kCccRanges, detail::kCccRangesCount, cp);
  return r ? r->ccc : 0;
}

void canonical_decompose(uint32_t cp, std::vector<uint32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const uint32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  const detail::Decomposition* d = cp < 0xC0 ? nullptr : find_decomposition(cp);
  if (!d) {
    out.push_back(cp);
    return;
  }
  canonical_decompose(d->first, out);
  if (d->second) canonical_decompose(d->second, out);
}

uint32_t canonical_compose(uint32_t first, uint32_t second) {
  if (first >= kLBase && first < kLBase + kLCount && second >= kVBase && second < kVBase + kVCount) {
    return kSBase + ((first - kLBase) * kVCount + (second - kVBase)) * kTCount;
  }
  if (first >= kSBase && first < kSBase + kSCount && (first - kSBase) % kTCount == 0 &&
      second > kTBase && second < kTBase + kTCount) {
    return first + (second - kTBase);
  }
  const detail::Composition* begin = detail::kCompositions;
  const detail::Composition* end = begin + detail::kCompositionsCount;
  const auto key = std::make_pair(first, second);
  const detail::Composition* it = std::lower_bound(
      begin, end, key, [](const detail::Composition& c, const std::pair<uint32_t, uint32_t>& k) {
        return std::make_pair(c.first, c.second) < k;
      });
  return (it != end && it->first == first && it->second == second) ? it->composite : 0;
}

std::vector<uint32_t> nfc(const std::vector<uint32_t>& cps) {
  // 1. Full canonical decomposition.
  std::vector<uint32_t> d;
  d.reserve(cps.size() + cps.size() / 2);
  for (uint32_t cp : cps) canonical_decompose(cp, d);
  std::vector<uint8_t> cc(d.size());
  for (size_t i = 0; i < d.size(); ++i) cc[i] = combining_class(d[i]);

  // 2. Canonical ordering: a stable sort of each run of non-starters by combining class.
  for (size_t i = 1; i < d.size(); ++i) {
    if (cc[i] == 0) continue;
    for (size_t j = i; j > 0 && cc[j - 1] > cc[j]; --j) {
      std::swap(d[j - 1], d[j]);
      std::swap(cc[j - 1], cc[j]);
    }
  }

  // 3. Canonical composition: each character joins the last starter unless a character between
  // them blocks it (has class 0 or a class >= its own).
  std::vector<uint32_t> out;
  out.reserve(d.size());
  size_t starter = SIZE_MAX;  // index in out of the last starter
  uint8_t last_cc = 0;        // class of the last character appended after that starter
  for (size_t i = 0; i < d.size(); ++i) {
    const uint32_t c = d[i];
    const uint8_t ccc = cc[i];
    if (starter != SIZE_MAX) {
      const bool adjacent = out.size() - 1 == starter;
      if (adjacent || (last_cc != 0 && last_cc < ccc)) {
        const uint32_t composite = canonical_compose(out[starter], c);
        if (composite) {
          out[starter] = composite;
          continue;
        }
      }
    }
    if (ccc == 0) starter = out.size();
    last_cc = ccc;
    out.push_back(c);
  }
  return out;
}

bool is_nfc_quick(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    if (static_cast<uint8_t>(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    if (flags(utf8_next(text.data(), text.size(), pos)) & kNfcCheck) return false;
  }
  return true;
}

std::string nfc(std::string_view text) {
  if (is_nfc_quick(text)) return std::string(text);
  return utf8_encode(nfc(utf8_decode(text)));
}

}  // namespace tllm::unicode
