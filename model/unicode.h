// Unicode support for the tokenizer: UTF-8 decoding that never fails, the character classes the
// pre-tokenizer regexes use (\p{L}, \p{N}, \s, ...), ASCII case folding for (?i:...) contractions,
// and NFC normalisation. The property data lives in unicode_tables.cpp, generated from the Unicode
// Character Database by scripts/gen_unicode_tables.py; no ICU or regex library is involved.
//
// Invalid UTF-8 is carried through every function here byte by byte: a byte that does not start a
// valid sequence decodes to the marker code point kInvalidByteBase + byte, which has no class
// bits, no decomposition and combining class 0, and encodes back to that same single byte.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tllm::unicode {

// Character class bits returned by flags(). The class bits follow the first letter of the general
// category (L, N, M, P, S, Z, C); unassigned code points have no class bit. A letter of category
// Lm or Lo carries neither kUpper nor kLower.
enum Flag : uint16_t {
  kLetter = 1 << 0,       // \p{L}
  kNumber = 1 << 1,       // \p{N}
  kMark = 1 << 2,         // \p{M}
  kPunctuation = 1 << 3,  // \p{P}
  kSymbol = 1 << 4,       // \p{S}
  kSeparator = 1 << 5,    // \p{Z}
  kOther = 1 << 6,        // \p{C} except unassigned (Cc, Cf, Co, Cs)
  kWhitespace = 1 << 7,   // \s: the White_Space property, as the reference regex engines define it
  kNfcCheck = 1 << 8,     // combining class != 0 or NFC_Quick_Check != Yes: text holding none is NFC
  kUpper = 1 << 9,        // \p{Lu} or \p{Lt} (with kLetter); the Tekken pattern tells cases apart
  kLower = 1 << 10,       // \p{Ll} (with kLetter)
};

// Code points at and above this value stand for one byte of invalid UTF-8 (see the file comment).
constexpr uint32_t kInvalidByteBase = 0x110000;

// Decodes the sequence at s[pos] (n = size of s) and advances pos past it. Overlong forms,
// surrogates, values above U+10FFFF and truncated sequences are invalid: the first byte alone is
// consumed and kInvalidByteBase + byte is returned.
uint32_t utf8_next(const char* s, size_t n, size_t& pos);
// Appends the UTF-8 form of cp (or the raw byte of an invalid-byte marker).
void utf8_append(std::string& out, uint32_t cp);
// Length in bytes of the sequence a lead byte announces (1..4), or 0 for a byte that cannot lead one.
int utf8_sequence_length(uint8_t lead);
// Decodes a whole string into code points (markers for invalid bytes).
std::vector<uint32_t> utf8_decode(std::string_view s);
std::string utf8_encode(const std::vector<uint32_t>& cps);

uint16_t flags(uint32_t cp);
inline bool is_letter(uint32_t cp) { return flags(cp) & kLetter; }
inline bool is_number(uint32_t cp) { return flags(cp) & kNumber; }
inline bool is_whitespace(uint32_t cp) { return flags(cp) & kWhitespace; }

// Simple case folding restricted to ASCII results: 'A'..'Z' -> 'a'..'z', U+017F (long s) -> 's',
// U+212A (Kelvin sign) -> 'k'; any other code point is returned unchanged. Enough to match the
// ASCII-only contractions of (?i:'s|'t|'re|'ve|'m|'ll|'d) the way a Unicode regex engine does.
uint32_t fold_to_ascii(uint32_t cp);

uint8_t combining_class(uint32_t cp);
// Full canonical decomposition (recursive, Hangul syllables included), appended to out.
void canonical_decompose(uint32_t cp, std::vector<uint32_t>& out);
// The primary composite of (first, second), or 0 when there is none (exclusions honoured).
uint32_t canonical_compose(uint32_t first, uint32_t second);

// NFC of a code point sequence / of UTF-8 text (invalid bytes pass through unchanged).
std::vector<uint32_t> nfc(const std::vector<uint32_t>& cps);
std::string nfc(std::string_view text);
// True when no code point of the text carries kNfcCheck, which proves the text is already NFC
// (a cheap test that lets nfc() return its input for almost all text).
bool is_nfc_quick(std::string_view text);

namespace detail {
// Tables of unicode_tables.cpp. Each is sorted by code point and its ranges are disjoint.
struct FlagRange {
  uint32_t first, last;
  uint16_t flags;
};
struct CccRange {
  uint32_t first, last;
  uint8_t ccc;
};
struct Decomposition {
  uint32_t cp, first, second;  // second == 0 for a singleton decomposition
};
struct Composition {
  uint32_t first, second, composite;  // sorted by (first, second)
};
struct AsciiFold {
  uint32_t cp, folded;
};
extern const FlagRange kFlagRanges[];
extern const size_t kFlagRangesCount;
extern const CccRange kCccRanges[];
extern const size_t kCccRangesCount;
extern const Decomposition kDecompositions[];
extern const size_t kDecompositionsCount;
extern const Composition kCompositions[];
extern const size_t kCompositionsCount;
extern const AsciiFold kAsciiFolds[];
extern const size_t kAsciiFoldsCount;
}  // namespace detail

}  // namespace tllm::unicode
