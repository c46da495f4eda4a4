// dequantize_row against blocks built byte by byte in the test. For each format the test packs
// chosen codes and scales following the ggml block layout and computes the expected values from the
// format's definition (value = d·scale·q - dmin·min, ...), plus literal spot values worked out by hand.
// Scales are exact fp16 values (0.5 = 0x3800, ...) so results compare exactly.
#include <gtest/gtest.h>

#include <cstring>

#include "model/quants.h"

namespace tllm {
namespace {

constexpr half_t kHalf1 = 0x3c00, kHalf05 = 0x3800, kHalf025 = 0x3400, kHalf0125 = 0x3000;
constexpr half_t kHalf2 = 0x4000, kHalfMinus1 = 0xbc00;

void put_half(std::vector<uint8_t>& b, size_t at, half_t h) {
  b[at] = uint8_t(h & 0xff);
  b[at + 1] = uint8_t(h >> 8);
}

std::vector<float> dequant(GgmlType t, const std::vector<uint8_t>& bytes, int64_t n) {
  std::vector<float> y(size_t(n), -12345.0f);
  dequantize_row(t, bytes.data(), y.data(), n);
  return y;
}

void expect_values(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i]) << "value " << i;
}

TEST(Dequant, F32F16BF16) {
  const float f[3] = {1.5f, -0.0f, 3e-7f};
  std::vector<uint8_t> fb(12);
  std::memcpy(fb.data(), f, 12);
  expect_values(dequant(GgmlType::F32, fb, 3), {1.5f, -0.0f, 3e-7f});

  // 1.0, -2.0, 0.5, 65504 (largest), 2^-24 (smallest subnormal)
  std::vector<uint8_t> hb(10);
  const half_t hs[5] = {0x3c00, 0xc000, 0x3800, 0x7bff, 0x0001};
  for (int i = 0; i < 5; ++i) put_half(hb, size_t(2 * i), hs[i]);
  expect_values(dequant(GgmlType::F16, hb, 5), {1.0f, -2.0f, 0.5f, 65504.0f, 5.9604644775390625e-8f});

  // bf16 is the top half of an fp32: 1.0, -3.0, 3.140625
  std::vector<uint8_t> bb(6);
  const half_t bs[3] = {0x3f80, 0xc040, 0x4049};
  for (int i = 0; i < 3; ++i) put_half(bb, size_t(2 * i), bs[i]);
  expect_values(dequant(GgmlType::BF16, bb, 3), {1.0f, -3.0f, 3.140625f});
}

// Two blocks of a format of 4-bit indices and one scale (d | qs[16], 18 bytes): d = d0 then d = -1.
// Byte j holds the index of value j (low nibble), (j·step + block) & 15, and of value j + 16 (high
// nibble), 15 - j. Sets want[v] = value(d, index of v) for the 64 values.
std::vector<uint8_t> two_nibble_blocks(half_t d0, int step, float (*value)(float d, int index),
                                       std::vector<float>& want) {
  std::vector<uint8_t> b(36, 0);
  want.assign(64, 0.0f);
  for (int blk = 0; blk < 2; ++blk) {
    const float d = blk == 0 ? half_to_float(d0) : -1.0f;
    put_half(b, size_t(18 * blk), blk == 0 ? d0 : kHalfMinus1);
    for (int j = 0; j < 16; ++j) {
      const int lo = (j * step + blk) & 15, hi = 15 - j;
      b[size_t(18 * blk + 2 + j)] = uint8_t(lo | hi << 4);
      want[size_t(32 * blk + j)] = value(d, lo);
      want[size_t(32 * blk + j + 16)] = value(d, hi);
    }
  }
  return b;
}

TEST(Dequant, Q4_0) {
  // d = 0.5 then d = -1; value = (index - 8)·d.
  std::vector<float> want;
  const auto b = two_nibble_blocks(kHalf05, 3, [](float d, int q) { return float(q - 8) * d; }, want);
  const auto y = dequant(GgmlType::Q4_0, b, 64);
  expect_values(y, want);
  // Byte 0 of block 0 is 0xf0: value 0 = (0 - 8)·0.5 = -4, value 16 = (15 - 8)·0.5 = 3.5.
  EXPECT_EQ(b[2], 0xf0);
  EXPECT_EQ(y[0], -4.0f);
  EXPECT_EQ(y[16], 3.5f);
}

TEST(Dequant, Q4_1) {
  // d = 0.25, m = -1: value = q·0.25 - 1.
  std::vector<uint8_t> b(20, 0);
  put_half(b, 0, kHalf025);
  put_half(b, 2, kHalfMinus1);
  std::vector<float> want(32);
  for (int j = 0; j < 16; ++j) {
    const int lo = j, hi = (j * 5) & 15;
    b[size_t(4 + j)] = uint8_t(lo | hi << 4);
    want[size_t(j)] = float(lo) * 0.25f - 1.0f;
    want[size_t(j + 16)] = float(hi) * 0.25f - 1.0f;
  }
  const auto y = dequant(GgmlType::Q4_1, b, 32);
  expect_values(y, want);
  EXPECT_EQ(y[15], 2.75f);  // 15·0.25 - 1
}

TEST(Dequant, Q5_0) {
  // d = 0.5. qh = bytes {0x01, 0x00, 0x01, 0x80} = 0x80010001: fifth bits of values 0, 16 and 31.
  std::vector<uint8_t> b(22, 0);
  put_half(b, 0, kHalf05);
  b[2] = 0x01;
  b[4] = 0x01;
  b[5] = 0x80;
  b[6 + 0] = 0x21;   // value 0: 1 | 16 = 17; value 16: 2 | 16 = 18
  b[6 + 15] = 0xf3;  // value 15: 3; value 31: 15 | 16 = 31
  const auto y = dequant(GgmlType::Q5_0, b, 32);
  EXPECT_EQ(y[0], (17 - 16) * 0.5f);
  EXPECT_EQ(y[16], (18 - 16) * 0.5f);
  EXPECT_EQ(y[15], (3 - 16) * 0.5f);
  EXPECT_EQ(y[31], (31 - 16) * 0.5f);
  EXPECT_EQ(y[1], -8.0f);  // code 0

  // Every code 0..31 once: value v has code (v * 13) mod 32.
  std::vector<uint8_t> c(22, 0);
  put_half(c, 0, kHalf025);
  std::vector<float> want(32);
  uint32_t qh = 0;
  for (int v = 0; v < 32; ++v) {
    const int q = (v * 13) % 32;
    c[size_t(6 + v % 16)] |= uint8_t((q & 15) << (v < 16 ? 0 : 4));
    qh |= uint32_t(q >> 4) << v;
    want[size_t(v)] = float(q - 16) * 0.25f;
  }
  for (int k = 0; k < 4; ++k) c[size_t(2 + k)] = uint8_t(qh >> (8 * k));
  expect_values(dequant(GgmlType::Q5_0, c, 32), want);
}

TEST(Dequant, Q5_1) {
  // d = 0.125, m = 2: value = q·0.125 + 2 for codes 0..31.
  std::vector<uint8_t> b(24, 0);
  put_half(b, 0, kHalf0125);
  put_half(b, 2, kHalf2);
  std::vector<float> want(32);
  uint32_t qh = 0;
  for (int v = 0; v < 32; ++v) {
    const int q = (v * 7 + 5) % 32;
    b[size_t(8 + v % 16)] |= uint8_t((q & 15) << (v < 16 ? 0 : 4));
    qh |= uint32_t(q >> 4) << v;
    want[size_t(v)] = float(q) * 0.125f + 2.0f;
  }
  for (int k = 0; k < 4; ++k) b[size_t(4 + k)] = uint8_t(qh >> (8 * k));
  const auto y = dequant(GgmlType::Q5_1, b, 32);
  expect_values(y, want);
  EXPECT_EQ(y[0], 2.625f);  // code 5
}

TEST(Dequant, Q8_0) {
  std::vector<uint8_t> b(34, 0);
  put_half(b, 0, kHalf025);
  std::vector<float> want(32);
  for (int j = 0; j < 32; ++j) {
    const int8_t q = int8_t(j * 8 - 128);  // -128 .. 120
    b[size_t(2 + j)] = uint8_t(q);
    want[size_t(j)] = float(q) * 0.25f;
  }
  const auto y = dequant(GgmlType::Q8_0, b, 32);
  expect_values(y, want);
  EXPECT_EQ(y[0], -32.0f);
}

// ggml's kvalues_iq4nl: the codes an IQ4_NL or IQ4_XS 4-bit index selects.
constexpr int kIq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

TEST(Dequant, IQ4_NL) {
  // d = 0.25 then d = -1; value = d·kvalues_iq4nl[index] (step 7: every index once in each half).
  std::vector<float> want;
  const auto b = two_nibble_blocks(kHalf025, 7, [](float d, int q) { return d * float(kIq4nl[q]); }, want);
  const auto y = dequant(GgmlType::IQ4_NL, b, 64);
  expect_values(y, want);
  // Hand-worked: block 0, byte 0 = 0xf0: value 0 = 0.25·kvalues[0] = 0.25·(-127) = -31.75, value 16
  // = 0.25·kvalues[15] = 0.25·113 = 28.25. Block 1, byte 1 = 0xe8: value 33 = -1·kvalues[8] = -1,
  // value 49 = -1·kvalues[14] = -89.
  EXPECT_EQ(b[2], 0xf0);
  EXPECT_EQ(y[0], -31.75f);
  EXPECT_EQ(y[16], 28.25f);
  EXPECT_EQ(b[18 + 2 + 1], 0xe8);
  EXPECT_EQ(y[33], -1.0f);
  EXPECT_EQ(y[49], -89.0f);
}

// ---- K-quants: 256 values in 16 sub-blocks of 16 (Q2_K, Q3_K, Q6_K) or 8 of 32 (Q4_K, Q5_K) ------

TEST(Dequant, Q2_K) {
  // scales[16] | qs[64] | d | dmin. scales[i]: low nibble = scale, high nibble = min of sub-block i.
  // Value v = 128h + 32j + l is bits 2j..2j+1 of qs[32h + l].
  std::vector<uint8_t> b(84, 0);
  put_half(b, 80, kHalf05);
  put_half(b, 82, kHalf025);
  int sc[16], mn[16];
  for (int i = 0; i < 16; ++i) {
    sc[i] = (i * 7 + 3) & 15;
    mn[i] = (i * 5 + 1) & 15;
    b[size_t(i)] = uint8_t(sc[i] | mn[i] << 4);
  }
  std::vector<float> want(256);
  for (int v = 0; v < 256; ++v) {
    const int h = v / 128, j = (v % 128) / 32, l = v % 32;
    const int q = (v * 3 + v / 7) & 3;
    b[size_t(16 + 32 * h + l)] |= uint8_t(q << (2 * j));
    want[size_t(v)] = 0.5f * float(sc[v / 16]) * float(q) - 0.25f * float(mn[v / 16]);
  }
  expect_values(dequant(GgmlType::Q2_K, b, 256), want);

  // Hand-worked: sub-block 0 has scale 3, min 2; qs[0] = 0b10 -> value 0 = 0.5·3·2 - 0.25·2 = 2.5.
  // Sub-block 11 (values 176..191) has scale 1, min 5; value 180 is bits 2..3 of qs[52]:
  // 0b11 -> 0.5·1·3 - 0.25·5 = 0.25. Value 1 (qs[1] = 0) = -0.25·2 = -0.5.
  std::vector<uint8_t> s(84, 0);
  put_half(s, 80, kHalf05);
  put_half(s, 82, kHalf025);
  s[0] = 0x23;
  s[11] = 0x51;
  s[16 + 0] = 0x02;
  s[16 + 52] = 0x0c;
  const auto y = dequant(GgmlType::Q2_K, s, 256);
  EXPECT_EQ(y[0], 2.5f);
  EXPECT_EQ(y[180], 0.25f);
  EXPECT_EQ(y[1], -0.5f);
}

// Packs the 6-bit scales of a Q3_K block: low four bits of scale i in the low (i < 8) or high
// (i >= 8) nibble of byte i % 8, top two bits in bits 2·(i/4) of byte 8 + i % 4.
void pack_q3_k_scales(const int* s6, uint8_t* out) {
  std::memset(out, 0, 12);
  for (int i = 0; i < 16; ++i) {
    out[i % 8] |= uint8_t((s6[i] & 15) << (i < 8 ? 0 : 4));
    out[8 + i % 4] |= uint8_t((s6[i] >> 4) << (2 * (i / 4)));
  }
}

TEST(Dequant, Q3_K) {
  // hmask[32] | qs[64] | scales[12] | d. Value v = 128h + 32j + l: low two bits in bits 2j of
  // qs[32h + l], third bit in bit 4h + j of hmask[l]; q = low2 - (third bit ? 0 : 4);
  // value = d·(scale6 - 32)·q.
  std::vector<uint8_t> b(110, 0);
  put_half(b, 108, kHalf05);
  int s6[16];
  for (int i = 0; i < 16; ++i) s6[i] = (i * 23 + 5) % 64;
  pack_q3_k_scales(s6, b.data() + 96);
  std::vector<float> want(256);
  for (int v = 0; v < 256; ++v) {
    const int h = v / 128, j = (v % 128) / 32, l = v % 32;
    const int q = (v * 5 + 1) % 8 - 4;  // -4..3
    const int low2 = q >= 0 ? q : q + 4;
    const int third = q >= 0 ? 1 : 0;
    b[size_t(32 + 32 * h + l)] |= uint8_t(low2 << (2 * j));
    b[size_t(l)] |= uint8_t(third << (4 * h + j));
    want[size_t(v)] = 0.5f * float(s6[v / 16] - 32) * float(q);
  }
  expect_values(dequant(GgmlType::Q3_K, b, 256), want);

  // Hand-worked: scale 0 = low 4 (byte 0) | high 2 (byte 8 bits 0..1) = 36 -> 4; scale 13 = low
  // 10 (byte 5 high nibble) | high 1 (byte 9 bits 6..7) = 26 -> -6; all other scales are 0 -> -32.
  // Value 0: qs[0] bits 0..1 = 3, hmask[0] bit 0 set -> q = 3 -> 0.5·4·3 = 6.
  // Value 1: nothing set -> q = -4 -> 0.5·4·(-4) = -8.
  // Value 210 (h 1, j 2, l 18): qs[50] bits 4..5 = 2, hmask[18] bit 6 set -> q = 2 -> 0.5·(-6)·2 = -6.
  // Value 211: q = -4 -> 12. Value 16 (sub-block 1, scale -32): q = -4 -> 64.
  std::vector<uint8_t> s(110, 0);
  put_half(s, 108, kHalf05);
  s[96 + 0] = 0x04;
  s[96 + 8] = 0x02;
  s[96 + 5] = 0xa0;
  s[96 + 9] = 0x40;
  s[32 + 0] = 0x03;
  s[0] = 0x01;
  s[32 + 50] = 0x20;
  s[18] = 0x40;
  const auto y = dequant(GgmlType::Q3_K, s, 256);
  EXPECT_EQ(y[0], 6.0f);
  EXPECT_EQ(y[1], -8.0f);
  EXPECT_EQ(y[210], -6.0f);
  EXPECT_EQ(y[211], 12.0f);
  EXPECT_EQ(y[16], 64.0f);
}

// Packs the 6-bit scales and mins of a Q4_K/Q5_K block: for i < 4, byte i = scale and byte i + 4 =
// min (low six bits); for i >= 4, byte i + 4 = scale low nibble | min low nibble << 4, and the top
// two bits go to bits 6..7 of byte i - 4 (scale) and byte i (min).
void pack_k4_scales(const int* sc, const int* mn, uint8_t* out) {
  std::memset(out, 0, 12);
  for (int i = 0; i < 4; ++i) {
    out[i] = uint8_t(sc[i]);
    out[i + 4] = uint8_t(mn[i]);
  }
  for (int i = 4; i < 8; ++i) {
    out[i + 4] = uint8_t((sc[i] & 15) | (mn[i] & 15) << 4);
    out[i - 4] |= uint8_t((sc[i] >> 4) << 6);
    out[i] |= uint8_t((mn[i] >> 4) << 6);
  }
}

// The hand-worked Q4_K/Q5_K block of the tests below, `bytes` long, with its quants left to the
// caller (qs at `qs`): d = 1, dmin = 0.5; sub-block 0: scale 5 (byte 0), min 3 (byte 4); sub-block
// 5: scale = 1 (byte 9 low nibble) | 1 << 4 (byte 1 bits 6..7) = 17, min = 2 (byte 9 high nibble) |
// 2 << 4 (byte 5 bits 6..7) = 34; every other scale and min 0. Values 0 and 163 (sub-blocks 0 and
// 5) get quant 7 and 11 in their low four bits.
std::vector<uint8_t> hand_worked_k4_block(size_t bytes, size_t qs) {
  std::vector<uint8_t> s(bytes, 0);
  put_half(s, 0, kHalf1);
  put_half(s, 2, kHalf05);
  s[4 + 0] = 5;
  s[4 + 4] = 3;
  s[4 + 9] = 0x21;
  s[4 + 1] = 0x40;
  s[4 + 5] = 0x80;
  s[qs + 0] = 0x07;   // value 0: low nibble of qs[0]
  s[qs + 67] = 0xb0;  // value 163 (g 2, u 1, l 3): high nibble of qs[67]
  return s;
}

TEST(Dequant, Q4_K) {
  // d | dmin | scales[12] | qs[128]. Value v = 64g + 32u + l is the low (u = 0) or high (u = 1)
  // nibble of qs[32g + l]; value = d·scale·q - dmin·min of sub-block v / 32.
  std::vector<uint8_t> b(2 * 144, 0);
  std::vector<float> want(512);
  for (int blk = 0; blk < 2; ++blk) {
    uint8_t* p = b.data() + 144 * blk;
    const float d = blk ? 0.125f : 0.5f, dmin = blk ? 1.0f : 0.25f;
    put_half(b, size_t(144 * blk), blk ? kHalf0125 : kHalf05);
    put_half(b, size_t(144 * blk + 2), blk ? kHalf1 : kHalf025);
    int sc[8], mn[8];
    for (int i = 0; i < 8; ++i) {
      sc[i] = (i * 19 + 7 + blk) % 64;
      mn[i] = (i * 29 + 3) % 64;
    }
    pack_k4_scales(sc, mn, p + 4);
    for (int v = 0; v < 256; ++v) {
      const int g = v / 64, u = (v % 64) / 32, l = v % 32;
      const int q = (v * 11 + blk) & 15;
      p[16 + 32 * g + l] |= uint8_t(q << (4 * u));
      want[size_t(256 * blk + v)] = d * float(sc[v / 32]) * float(q) - dmin * float(mn[v / 32]);
    }
  }
  expect_values(dequant(GgmlType::Q4_K, b, 512), want);

  // Hand-worked (hand_worked_k4_block): value 0 = 7 -> 5·7 - 0.5·3 = 33.5; value 163 = 11 ->
  // 17·11 - 0.5·34 = 170; value 3 (q 0) = -1.5; value 40 (sub-block 1: scale 0, min 0) = 0.
  const auto y = dequant(GgmlType::Q4_K, hand_worked_k4_block(144, 16), 256);
  EXPECT_EQ(y[0], 33.5f);
  EXPECT_EQ(y[163], 170.0f);
  EXPECT_EQ(y[3], -1.5f);
  EXPECT_EQ(y[40], 0.0f);
}

TEST(Dequant, Q5_K) {
  // d | dmin | scales[12] | qh[32] | qs[128]: as Q4_K, with the fifth bit of value v = 64g + 32u + l
  // in bit 2g + u (= v / 32) of qh[l].
  std::vector<uint8_t> b(176, 0);
  put_half(b, 0, kHalf025);
  put_half(b, 2, kHalf05);
  int sc[8], mn[8];
  for (int i = 0; i < 8; ++i) {
    sc[i] = (i * 13 + 40) % 64;
    mn[i] = (i * 37 + 9) % 64;
  }
  pack_k4_scales(sc, mn, b.data() + 4);
  std::vector<float> want(256);
  for (int v = 0; v < 256; ++v) {
    const int g = v / 64, u = (v % 64) / 32, l = v % 32;
    const int q = (v * 19 + 3) % 32;
    b[size_t(48 + 32 * g + l)] |= uint8_t((q & 15) << (4 * u));
    b[size_t(16 + l)] |= uint8_t((q >> 4) << (v / 32));
    want[size_t(v)] = 0.25f * float(sc[v / 32]) * float(q) - 0.5f * float(mn[v / 32]);
  }
  expect_values(dequant(GgmlType::Q5_K, b, 256), want);

  // Hand-worked (hand_worked_k4_block, qs at 48): value 0 = 7 | 16 (qh[0] bit 0) = 23
  // -> 5·23 - 1.5 = 113.5; value 163 = 11 | 16 (qh[3] bit 5) = 27 -> 17·27 - 17 = 442;
  // value 3 = 0 (qh[3] bit 0 clear) -> -1.5.
  std::vector<uint8_t> s = hand_worked_k4_block(176, 48);
  s[16 + 0] = 0x01;
  s[16 + 3] = 0x20;
  const auto y = dequant(GgmlType::Q5_K, s, 256);
  EXPECT_EQ(y[0], 113.5f);
  EXPECT_EQ(y[163], 442.0f);
  EXPECT_EQ(y[3], -1.5f);
}

TEST(Dequant, Q6_K) {
  // ql[128] | qh[64] | int8 scales[16] | d. Value v = 128h + 32k + l: low four bits in
  // ql[64h + 32(k % 2) + l] (low nibble for k < 2, high for k >= 2), top two bits in bits 2k of
  // qh[32h + l]; value = d·scale[v / 16]·(q6 - 32).
  std::vector<uint8_t> b(210, 0);
  put_half(b, 208, kHalf025);
  int8_t sc[16];
  for (int i = 0; i < 16; ++i) {
    sc[i] = int8_t((i * 37) % 256 - 128);
    b[size_t(192 + i)] = uint8_t(sc[i]);
  }
  std::vector<float> want(256);
  for (int v = 0; v < 256; ++v) {
    const int h = v / 128, k = (v % 128) / 32, l = v % 32;
    const int q6 = (v * 29 + 11) % 64;
    b[size_t(64 * h + 32 * (k % 2) + l)] |= uint8_t((q6 & 15) << (k < 2 ? 0 : 4));
    b[size_t(128 + 32 * h + l)] |= uint8_t((q6 >> 4) << (2 * k));
    want[size_t(v)] = 0.25f * float(sc[v / 16]) * float(q6 - 32);
  }
  expect_values(dequant(GgmlType::Q6_K, b, 256), want);

  // Hand-worked: d = 0.25, scale 0 = 4, scale 13 = -2. Value 0: ql[0] low nibble 5, qh[0] bits
  // 0..1 = 2 -> q6 = 37 -> 0.25·4·5 = 5. Value 1: q6 = 0 -> 0.25·4·(-32) = -32.
  // Value 210 (h 1, k 2, l 18): ql[82] high nibble 12, qh[50] bits 4..5 = 3 -> q6 = 60 ->
  // 0.25·(-2)·28 = -14.
  std::vector<uint8_t> s(210, 0);
  put_half(s, 208, kHalf025);
  s[192 + 0] = 4;
  s[192 + 13] = uint8_t(int8_t(-2));
  s[0] = 0x05;
  s[128 + 0] = 0x02;
  s[82] = 0xc0;
  s[128 + 50] = 0x30;
  const auto y = dequant(GgmlType::Q6_K, s, 256);
  EXPECT_EQ(y[0], 5.0f);
  EXPECT_EQ(y[1], -32.0f);
  EXPECT_EQ(y[210], -14.0f);
}

// Packs the 6-bit scales of an IQ4_XS block (bytes 2..7 of `block`): the low four bits of scale i
// go to the low (even i) or high (odd i) nibble of scales_l[i / 2] (byte 4 + i / 2), the top two to
// bits 2i..2i+1 of the little-endian u16 scales_h (bytes 2..3).
void pack_iq4_xs_scales(const int* ls, uint8_t* block) {
  uint32_t h = 0;
  std::memset(block + 4, 0, 4);
  for (int i = 0; i < 8; ++i) {
    block[4 + i / 2] |= uint8_t((ls[i] & 15) << (4 * (i % 2)));
    h |= uint32_t(ls[i] >> 4) << (2 * i);
  }
  block[2] = uint8_t(h & 0xff);
  block[3] = uint8_t(h >> 8);
}

TEST(Dequant, IQ4_XS) {
  // d | scales_h | scales_l[4] | qs[128]. Sub-block i (values 32i..32i+31) has the 6-bit scale ls_i
  // and its indices in qs[16i..16i+15] as an IQ4_NL block (byte j: value j low nibble, value j + 16
  // high); value = d·(ls_i - 32)·kvalues_iq4nl[index]. Two super-blocks: d = 0.5 then d = -1.
  std::vector<uint8_t> b(2 * 136, 0);
  std::vector<float> want(512);
  for (int blk = 0; blk < 2; ++blk) {
    uint8_t* p = b.data() + 136 * blk;
    const float d = blk ? -1.0f : 0.5f;
    put_half(b, size_t(136 * blk), blk ? kHalfMinus1 : kHalf05);
    int ls[8];
    for (int i = 0; i < 8; ++i) ls[i] = (i * 23 + 5 + 7 * blk) % 64;  // above and below 32
    pack_iq4_xs_scales(ls, p);
    for (int v = 0; v < 256; ++v) {
      const int i = v / 32, r = v % 32;
      const int index = (v * 5 + 3 + blk) & 15;
      p[8 + 16 * i + r % 16] |= uint8_t(index << (r < 16 ? 0 : 4));
      want[size_t(256 * blk + v)] = d * float(ls[i] - 32) * float(kIq4nl[index]);
    }
  }
  expect_values(dequant(GgmlType::IQ4_XS, b, 512), want);

  // Hand-worked, d = 0.5 (bytes 0..1 = 0x3800):
  //   sub-block 0: ls = 0xa (scales_l[0] low nibble) | 2 << 4 (scales_h bits 0..1) = 42 -> 0.5·10 = 5
  //   sub-block 3: ls = 0xd (scales_l[1] high nibble) | 1 << 4 (scales_h bits 6..7) = 29 -> 0.5·(-3)
  //                = -1.5 (ls < 32: a negative multiplier)
  //   sub-block 7: ls = 0xf (scales_l[3] high nibble) | 3 << 4 (scales_h bits 14..15) = 63 -> 15.5
  //   the others: ls = 0 -> 0.5·(-32) = -16
  // so scales_h = 0x0002 | 0x0040 | 0xc000 = 0xc042 (bytes 0x42, 0xc0), scales_l = {0x0a, 0xd0, 0, 0xf0}.
  //   qs[0] = 0x0f:   value 0 = 5·kvalues[15] = 5·113 = 565; value 16 = 5·kvalues[0] = 5·(-127) = -635
  //   qs[53] = 0xc8:  value 101 (sub-block 3, j 5) = -1.5·kvalues[8] = -1.5·1 = -1.5;
  //                   value 117 = -1.5·kvalues[12] = -1.5·53 = -79.5
  //   qs[127] = 0x90: value 239 = 15.5·kvalues[0] = 15.5·(-127) = -1968.5;
  //                   value 255 = 15.5·kvalues[9] = 15.5·13 = 201.5
  //   qs[24] = 0:     value 40 (sub-block 1, j 8) = -16·(-127) = 2032
  std::vector<uint8_t> s(136, 0);
  put_half(s, 0, kHalf05);
  s[2] = 0x42;
  s[3] = 0xc0;
  s[4] = 0x0a;
  s[5] = 0xd0;
  s[7] = 0xf0;
  s[8 + 0] = 0x0f;
  s[8 + 53] = 0xc8;
  s[8 + 127] = 0x90;
  const auto y = dequant(GgmlType::IQ4_XS, s, 256);
  EXPECT_EQ(y[0], 565.0f);
  EXPECT_EQ(y[16], -635.0f);
  EXPECT_EQ(y[101], -1.5f);
  EXPECT_EQ(y[117], -79.5f);
  EXPECT_EQ(y[239], -1968.5f);
  EXPECT_EQ(y[255], 201.5f);
  EXPECT_EQ(y[40], 2032.0f);
}

TEST(Dequant, RejectsUnsupportedTypesAndPartialBlocks) {
  std::vector<uint8_t> b(1024, 0);
  std::vector<float> y(256);
  EXPECT_THROW(dequantize_row(GgmlType::Q8_K, b.data(), y.data(), 256), GgufError);
  EXPECT_THROW(dequantize_row(GgmlType::Q8_1, b.data(), y.data(), 32), GgufError);
  EXPECT_THROW(dequantize_row(static_cast<GgmlType>(16), b.data(), y.data(), 256), GgufError);
  EXPECT_THROW(dequantize_row(GgmlType::Q4_0, b.data(), y.data(), 33), GgufError);
  EXPECT_THROW(dequantize_row(GgmlType::Q6_K, b.data(), y.data(), 128), GgufError);
  EXPECT_THROW(dequantize_row(GgmlType::IQ4_XS, b.data(), y.data(), 32), GgufError);
  EXPECT_FALSE(can_dequantize(GgmlType::Q8_K));
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0,
                     GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K,
                     GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS}) {
    EXPECT_TRUE(can_dequantize(t)) << ggml_type_name(t);
  }
}

}  // namespace
}  // namespace tllm
