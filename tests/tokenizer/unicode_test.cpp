// UTF-8 decoding, character classes, case folding and NFC (model/unicode.h).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "model/unicode.h"

namespace tllm::unicode {
namespace {

std::vector<uint32_t> cps(std::initializer_list<uint32_t> v) { return std::vector<uint32_t>(v); }

TEST(Utf8, DecodesValidSequences) {
  const std::string s = "a\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x81";  // a é 中 😁
  EXPECT_EQ(utf8_decode(s), cps({'a', 0xE9, 0x4E2D, 0x1F601}));
  EXPECT_EQ(utf8_encode(utf8_decode(s)), s);
}

TEST(Utf8, InvalidBytesBecomeMarkersAndRoundTrip) {
  struct Case {
    std::string bytes;
    std::vector<uint32_t> want;
  };
  const uint32_t m = kInvalidByteBase;
  const std::vector<Case> cases = {
      {"\x80", {m + 0x80}},                                  // stray continuation byte
      {"\xC0\xAF", {m + 0xC0, m + 0xAF}},                    // overlong '/'
      {"\xE0\x80\xAF", {m + 0xE0, m + 0x80, m + 0xAF}},      // overlong 3-byte form
      {"\xED\xA0\x80", {m + 0xED, m + 0xA0, m + 0x80}},      // surrogate U+D800
      {"\xF4\x90\x80\x80", {m + 0xF4, m + 0x90, m + 0x80, m + 0x80}},  // above U+10FFFF
      {"\xE4\xB8", {m + 0xE4, m + 0xB8}},                    // truncated at the end
      {"\xE4" "a", {m + 0xE4, 'a'}},                         // truncated by a new character
      {"\xFF\xFE", {m + 0xFF, m + 0xFE}},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(utf8_decode(c.bytes), c.want);
    EXPECT_EQ(utf8_encode(utf8_decode(c.bytes)), c.bytes);
  }
}

TEST(Utf8, SequenceLength) {
  EXPECT_EQ(utf8_sequence_length('a'), 1);
  EXPECT_EQ(utf8_sequence_length(0xC3), 2);
  EXPECT_EQ(utf8_sequence_length(0xE4), 3);
  EXPECT_EQ(utf8_sequence_length(0xF0), 4);
  EXPECT_EQ(utf8_sequence_length(0x80), 0);
  EXPECT_EQ(utf8_sequence_length(0xC1), 0);
  EXPECT_EQ(utf8_sequence_length(0xF5), 0);
}

TEST(UnicodeFlags, Classes) {
  EXPECT_TRUE(flags('a') & kLetter);
  EXPECT_TRUE(flags(0x4E2D) & kLetter);    // 中
  EXPECT_TRUE(flags(0xAC00) & kLetter);    // 가 (inside a First/Last range of UnicodeData)
  EXPECT_TRUE(flags(0x20000) & kLetter);   // CJK extension B, above the BMP
  EXPECT_TRUE(flags('7') & kNumber);
  EXPECT_TRUE(flags(0xBD) & kNumber);      // ½ (No)
  EXPECT_TRUE(flags(0x216B) & kNumber);    // Ⅻ (Nl)
  EXPECT_TRUE(flags(0x0663) & kNumber);    // Arabic-Indic three (Nd)
  EXPECT_TRUE(flags(0x0301) & kMark);
  EXPECT_TRUE(flags('!') & kPunctuation);
  EXPECT_TRUE(flags('$') & kSymbol);
  EXPECT_TRUE(flags(0x1F601) & kSymbol);   // 😁
  EXPECT_TRUE(flags(0xE000) & kOther);     // private use
  EXPECT_EQ(flags(0x0378), 0);             // unassigned
  EXPECT_EQ(flags(kInvalidByteBase + 0xFF), 0);
  EXPECT_FALSE(flags(0x0301) & kLetter);   // marks are not letters: [^\s\p{L}\p{N}] holds them
}

// The letter cases the Tekken pattern tells apart: \p{Lu} and \p{Lt} against \p{Ll}; \p{Lm},
// \p{Lo}, marks and non-letters carry neither bit.
TEST(UnicodeFlags, LetterCases) {
  for (uint32_t cp : {0x41u, 0xC0u, 0x391u, 0x41Fu, 0x1E9Eu, 0x1C5u, 0x1F88u, 0x10400u}) {
    EXPECT_EQ(flags(cp) & (kLetter | kUpper | kLower), kLetter | kUpper) << std::hex << cp;
  }
  for (uint32_t cp : {0x61u, 0xDFu, 0x3B1u, 0x43Fu, 0x1D41Au, 0x10428u}) {
    EXPECT_EQ(flags(cp) & (kLetter | kUpper | kLower), kLetter | kLower) << std::hex << cp;
  }
  for (uint32_t cp : {0x2B0u, 0x4E2Du, 0x5D0u, 0xAC00u, 0x301u, 0x31u, 0x20u, 0x2160u}) {
    EXPECT_EQ(flags(cp) & (kUpper | kLower), 0) << std::hex << cp;
  }
}

TEST(UnicodeFlags, WhitespaceIsTheWhiteSpaceProperty) {
  for (uint32_t cp : {0x09u, 0x0Au, 0x0Bu, 0x0Cu, 0x0Du, 0x20u, 0x85u, 0xA0u, 0x1680u, 0x2000u,
                      0x200Au, 0x2028u, 0x2029u, 0x202Fu, 0x205Fu, 0x3000u}) {
    EXPECT_TRUE(is_whitespace(cp)) << std::hex << cp;
  }
  for (uint32_t cp : {0x1Cu, 0x1Fu, 0x180Eu, 0x200Bu, 0xFEFFu, 0x61u}) {
    EXPECT_FALSE(is_whitespace(cp)) << std::hex << cp;
  }
}

TEST(UnicodeFold, AsciiTargets) {
  EXPECT_EQ(fold_to_ascii('S'), uint32_t('s'));
  EXPECT_EQ(fold_to_ascii('s'), uint32_t('s'));
  EXPECT_EQ(fold_to_ascii(0x17F), uint32_t('s'));   // ſ
  EXPECT_EQ(fold_to_ascii(0x212A), uint32_t('k'));  // Kelvin sign
  EXPECT_EQ(fold_to_ascii(0xC9), 0xC9u);            // É folds to é, not to ASCII
  EXPECT_EQ(fold_to_ascii('\''), uint32_t('\''));
}

TEST(Nfc, Composes) {
  EXPECT_EQ(nfc(cps({'e', 0x301})), cps({0xE9}));
  EXPECT_EQ(nfc(std::string("e\xCC\x81")), "\xC3\xA9");
  // Two marks onto one base: ử from u + horn + hook above.
  EXPECT_EQ(nfc(cps({'u', 0x31B, 0x309})), cps({0x1EED}));
  // A decomposed character that is already NFC stays; a precomposed one is kept.
  EXPECT_EQ(nfc(cps({0xE9, 'x'})), cps({0xE9, 'x'}));
}

TEST(Nfc, ReordersMarksByCombiningClass) {
  // dot below (220) sorts before dot above (230); the dot below then composes with 'a'.
  EXPECT_EQ(nfc(cps({'a', 0x307, 0x323})), cps({0x1EA1, 0x307}));
  EXPECT_EQ(nfc(cps({'A', 0x323, 0x30A})), cps({0x1EA0, 0x30A}));
  EXPECT_EQ(nfc(cps({0x1E9B, 0x323})), cps({0x1E9B, 0x323}));
}

TEST(Nfc, BlockedAndUnblockedComposition) {
  // A mark of a lower class in between does not block: 'a' + acute composes across the sheva.
  EXPECT_EQ(nfc(cps({'a', 0x5B0, 0x301})), cps({0xE1, 0x5B0}));
  // A mark of the same class in between blocks.
  EXPECT_EQ(nfc(cps({'a', 0x346, 0x301})), cps({'a', 0x346, 0x301}));
}

TEST(Nfc, Hangul) {
  EXPECT_EQ(nfc(cps({0x1100, 0x1161})), cps({0xAC00}));          // L V -> LV
  EXPECT_EQ(nfc(cps({0x1100, 0x1161, 0x11A8})), cps({0xAC01}));  // L V T -> LVT
  EXPECT_EQ(nfc(cps({0xAC00, 0x11A8})), cps({0xAC01}));          // LV T -> LVT
  EXPECT_EQ(nfc(cps({0xAC01, 0x11A8})), cps({0xAC01, 0x11A8}));  // LVT takes no second T
  std::vector<uint32_t> d;
  canonical_decompose(0xAC01, d);
  EXPECT_EQ(d, cps({0x1100, 0x1161, 0x11A8}));
}

TEST(Nfc, CompositionExclusions) {
  // U+0958 (Devanagari qa) is excluded from composition: NFC keeps it decomposed.
  EXPECT_EQ(nfc(cps({0x958})), cps({0x915, 0x93C}));
  EXPECT_EQ(nfc(cps({0x915, 0x93C})), cps({0x915, 0x93C}));
  // Singletons: the Ohm sign becomes Greek capital omega.
  EXPECT_EQ(nfc(cps({0x2126})), cps({0x3A9}));
  // Non-starter decompositions: U+0344 becomes diaeresis + acute.
  EXPECT_EQ(nfc(cps({0x344})), cps({0x308, 0x301}));
  EXPECT_EQ(canonical_compose(0x915, 0x93C), 0u);
  EXPECT_EQ(canonical_compose('e', 0x301), 0xE9u);
}

TEST(Nfc, InvalidBytesPassThrough) {
  const std::string s = "e\xFF\xCC\x81 \xE4";
  // The invalid byte is a starter of its own: the accent composes with nothing before it.
  EXPECT_EQ(nfc(s), s);
  EXPECT_EQ(nfc(std::string("\xFF" "e\xCC\x81")), "\xFF\xC3\xA9");
}

TEST(Nfc, QuickCheck) {
  EXPECT_TRUE(is_nfc_quick("plain ASCII"));
  EXPECT_TRUE(is_nfc_quick("\xC3\xA9\xE4\xB8\xAD"));  // é 中
  EXPECT_FALSE(is_nfc_quick("e\xCC\x81"));            // combining acute
  EXPECT_FALSE(is_nfc_quick("\xE2\x84\xA6"));          // Ohm sign (NFC_QC=No)
}

}  // namespace
}  // namespace tllm::unicode
