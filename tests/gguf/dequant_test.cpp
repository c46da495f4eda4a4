// dequantize_row against blocks built byte by byte in the test. For each format the test packs
// chosen codes and scales following the ggml block layout and computes the expected values from the
// format's definition (value = d·scale·q - dmin·min, ...), plus literal spot values worked out by hand.
// Scales are exact fp16 values (0.5 = 0x3800, ...) so results compare exactly.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>

#include "model/iq_grids.h"
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

// ---- i-quants: 256-value super-blocks whose groups of 8 (IQ3: 4) values are codebook entries ----
// Each test fills two super-blocks (d = 0.5 then d = -1) with indices, signs and scales that vary by
// position, and computes each value from the format's definition; d and the scales are chosen so
// that every product is exact in fp32, whatever the order of multiplication.

void put_u16(uint8_t* p, uint32_t v) {
  p[0] = uint8_t(v & 0xff);
  p[1] = uint8_t(v >> 8);
}

void put_u32(uint8_t* p, uint32_t v) {
  for (int k = 0; k < 4; ++k) p[k] = uint8_t(v >> (8 * k));
}

// The 8 signs a 7-bit sign index stands for (IQ2_XXS, IQ2_XS, IQ3_XXS): -1 where bit j is set
// (j < 7); the eighth is -1 when the index has an odd number of set bits.
float index_sign(int index7, int j) {
  const int bit = j < 7 ? (index7 >> j) & 1 : __builtin_popcount(unsigned(index7)) & 1;
  return bit ? -1.0f : 1.0f;
}

float super_d(int blk) { return blk ? -1.0f : 0.5f; }
half_t super_d_half(int blk) { return blk ? kHalfMinus1 : kHalf05; }

// Two super-blocks of type `t` with d = super_d(blk) in its fp16 field: bytes 0..1, the last two
// bytes for TQ1_0 and TQ2_0 (IQ1_M, whose d is spread over its scales, leaves it to `fill`);
// fill(blk, p, want) writes the rest of block blk at p and its 256 expected values to want. Checks
// dequantize_row against them.
void check_super_blocks(GgmlType t, const std::function<void(int blk, uint8_t* p, float* want)>& fill) {
  int64_t bv = 0, bb = 0;
  ASSERT_TRUE(ggml_type_block(t, &bv, &bb));
  std::vector<uint8_t> b(size_t(2 * bb), 0);
  std::vector<float> want(512);
  const bool d_last = t == GgmlType::TQ1_0 || t == GgmlType::TQ2_0;
  for (int blk = 0; blk < 2; ++blk) {
    const size_t d_at = size_t(bb * blk + (d_last ? bb - 2 : 0));
    if (t != GgmlType::IQ1_M) put_half(b, d_at, super_d_half(blk));
    fill(blk, b.data() + bb * blk, want.data() + 256 * blk);
  }
  expect_values(dequant(t, b, 2 * bv), want);
}

TEST(Dequant, IQ2_XXS) {
  // d | 8 sub-blocks of 8 bytes: grid indices of groups 0..3, then a u32 with the 7-bit sign
  // index of group g in bits 7g.. and the scale s in bits 28..31; x = d·(0.5 + s)/4·grid·sign.
  check_super_blocks(GgmlType::IQ2_XXS, [](int blk, uint8_t* p, float* want) {
    for (int ib = 0; ib < 8; ++ib) {
      const int s = (5 * ib + 3 * blk) % 16;
      uint32_t aux = uint32_t(s) << 28;
      for (int g = 0; g < 4; ++g) {
        const int index = (37 * ib + 11 * g + 101 * blk) % 256, si = (13 * ib + 29 * g + blk) % 128;
        p[2 + 8 * ib + g] = uint8_t(index);
        aux |= uint32_t(si) << (7 * g);
        for (int j = 0; j < 8; ++j) {
          want[size_t(32 * ib + 8 * g + j)] = super_d(blk) * (0.5f + float(s)) / 4 *
                                                          float(iq::kIq2xxsGrid[index][j]) * index_sign(si, j);
        }
      }
      put_u32(p + 2 + 8 * ib + 4, aux);
    }
  });

  // Hand-worked, d = 1: sub-block 0 has index 1 in group 0 (grid {43, 8, 8, 8, 8, 8, 8, 8}) and 0
  // in group 1 (all 8); sign indices 3 (values 0 and 1 negative; two bits set, so value 7 positive)
  // and 1 (value 0 negative; one bit set, so value 7 negative too); s = 3: d·3.5/4 = 0.875.
  //   value 0 = -0.875·43 = -37.625, value 1 = -7, value 2 = 7, value 7 = 7, value 8 = -7,
  //   value 15 = -7; the u32 is 3 | 1 << 7 | 3 << 28 = 0x30000083.
  EXPECT_EQ(std::vector<int>(iq::kIq2xxsGrid[1], iq::kIq2xxsGrid[1] + 2), (std::vector<int>{43, 8}));
  std::vector<uint8_t> h(66, 0);
  put_half(h, 0, kHalf1);
  h[2] = 1;
  put_u32(h.data() + 6, 0x30000083u);
  const auto y = dequant(GgmlType::IQ2_XXS, h, 256);
  EXPECT_EQ(y[0], -37.625f);
  EXPECT_EQ(y[1], -7.0f);
  EXPECT_EQ(y[2], 7.0f);
  EXPECT_EQ(y[7], 7.0f);
  EXPECT_EQ(y[8], -7.0f);
  EXPECT_EQ(y[15], -7.0f);
}

TEST(Dequant, IQ2_XS) {
  // d | u16 qs[32] | scales[8]: group g (values 8g..8g+7) is qs[g] = grid index (9 bits) | sign
  // index << 9; scale k (4 bits, low then high nibble of scales[k / 2]) covers groups 2k, 2k + 1;
  // x = d·(0.5 + s)/4·grid·sign.
  check_super_blocks(GgmlType::IQ2_XS, [](int blk, uint8_t* p, float* want) {
    for (int g = 0; g < 32; ++g) {
      const int index = (97 * g + 300 * blk + 7) % 512, si = (41 * g + 5 * blk) % 128;
      const int s = (7 * (g / 2) + blk) % 16;
      put_u16(p + 2 + 2 * g, uint32_t(index | si << 9));
      if (g % 2 == 0) p[66 + g / 4] |= uint8_t(s << (4 * ((g / 2) % 2)));
      for (int j = 0; j < 8; ++j) {
        want[size_t(8 * g + j)] =
            super_d(blk) * (0.5f + float(s)) / 4 * float(iq::kIq2xsGrid[index][j]) * index_sign(si, j);
      }
    }
  });

  // Hand-worked, d = 1: qs[2] (group 2, scale 1 = high nibble of scales[0]) = 0 | 2 << 9 = 0x0400:
  // grid entry 0 (all 8), value 17 negative (bit 1), value 23 negative (one bit set);
  // scales[0] = 0xf0: s = 15, 15.5/4 = 3.875; value 16 = 3.875·8 = 31, value 17 = -31, value 23 = -31.
  std::vector<uint8_t> h(74, 0);
  put_half(h, 0, kHalf1);
  put_u16(h.data() + 2 + 4, 0x0400);
  h[66] = 0xf0;
  const auto y = dequant(GgmlType::IQ2_XS, h, 256);
  EXPECT_EQ(iq::kIq2xsGrid[0][0], 8);
  EXPECT_EQ(y[16], 31.0f);
  EXPECT_EQ(y[17], -31.0f);
  EXPECT_EQ(y[23], -31.0f);
  EXPECT_EQ(y[0], 0.125f * 8);  // s = 0: 0.5/4·8
}

TEST(Dequant, IQ2_S) {
  // d | qs[32] | signs[32] | qh[8] | scales[8]: group g's grid index is qs[g] | (bits 2(g%4).. of
  // qh[g / 4]) << 8, its signs the bits of signs[g]; scales as IQ2_XS.
  check_super_blocks(GgmlType::IQ2_S, [](int blk, uint8_t* p, float* want) {
    for (int g = 0; g < 32; ++g) {
      const int index = (229 * g + 512 * blk + 3) % 1024, signs = (73 * g + 17 * blk) % 256;
      const int s = (9 * (g / 2) + 2 * blk) % 16;
      p[2 + g] = uint8_t(index & 0xff);
      p[34 + g] = uint8_t(signs);
      p[66 + g / 4] |= uint8_t((index >> 8) << (2 * (g % 4)));
      if (g % 2 == 0) p[74 + g / 4] |= uint8_t(s << (4 * ((g / 2) % 2)));
      for (int j = 0; j < 8; ++j) {
        const float sign = (signs >> j) & 1 ? -1.0f : 1.0f;
        want[size_t(8 * g + j)] =
            super_d(blk) * (0.5f + float(s)) / 4 * float(iq::kIq2sGrid[index][j]) * sign;
      }
    }
  });
}

TEST(Dequant, IQ3_XXS) {
  // d | qs[64] | u32 scales_signs[8]: sub-block ib (values 32ib..32ib+31) takes 8 grid indices (4
  // values each) from qs[8ib..]; scales_signs[ib] holds the sign index of group g (8 values) in bits
  // 7g.. and the scale s in bits 28..31; x = d·(0.5 + s)/2·grid·sign.
  check_super_blocks(GgmlType::IQ3_XXS, [](int blk, uint8_t* p, float* want) {
    for (int ib = 0; ib < 8; ++ib) {
      const int s = (11 * ib + 4 * blk) % 16;
      uint32_t aux = uint32_t(s) << 28;
      for (int g = 0; g < 4; ++g) aux |= uint32_t((19 * ib + 53 * g + 3 * blk) % 128) << (7 * g);
      put_u32(p + 66 + 4 * ib, aux);
      for (int k = 0; k < 8; ++k) {
        const int index = (83 * ib + 31 * k + 128 * blk) % 256;
        p[2 + 8 * ib + k] = uint8_t(index);
        const int si = int(aux >> (7 * (k / 2))) & 127;
        for (int j = 0; j < 4; ++j) {
          want[size_t(32 * ib + 4 * k + j)] = super_d(blk) * (0.5f + float(s)) / 2 *
                                                          float(iq::kIq3xxsGrid[index][j]) *
                                                          index_sign(si, 4 * (k % 2) + j);
        }
      }
    }
  });

  // Hand-worked, d = 1, s = 1 (1.5/2 = 0.75): qs[1] = 1 (grid {20, 4, 4, 4}, values 4..7) and sign
  // index 64 for group 0 (value 6 negative; one bit set, so value 7 negative): value 4 = 0.75·20 =
  // 15, value 6 = -3, value 7 = -3, value 0 = 0.75·4 = 3 (grid entry 0 is all 4).
  std::vector<uint8_t> h(98, 0);
  put_half(h, 0, kHalf1);
  h[3] = 1;
  put_u32(h.data() + 66, 64u | 1u << 28);
  const auto y = dequant(GgmlType::IQ3_XXS, h, 256);
  EXPECT_EQ(iq::kIq3xxsGrid[1][0], 20);
  EXPECT_EQ(y[4], 15.0f);
  EXPECT_EQ(y[6], -3.0f);
  EXPECT_EQ(y[7], -3.0f);
  EXPECT_EQ(y[0], 3.0f);
}

TEST(Dequant, IQ3_S) {
  // d | qs[64] | qh[8] | signs[32] | scales[4]: values 4k..4k+3 are grid entry qs[k] | (bit k % 8
  // of qh[k / 8]) << 8; value v is negative when bit v % 8 of signs[v / 8] is set; sub-block ib (32
  // values) has the scale s in nibble ib % 2 of scales[ib / 2]; x = d·(1 + 2s)·grid·sign.
  check_super_blocks(GgmlType::IQ3_S, [](int blk, uint8_t* p, float* want) {
    for (int ib = 0; ib < 8; ++ib) p[106 + ib / 2] |= uint8_t(((3 * ib + 5 * blk) % 16) << (4 * (ib % 2)));
    for (int v = 0; v < 32; ++v) p[74 + v] = uint8_t((59 * v + 7 * blk) % 256);
    for (int k = 0; k < 64; ++k) {
      const int index = (157 * k + 256 * blk + 1) % 512;
      p[2 + k] = uint8_t(index & 0xff);
      p[66 + k / 8] |= uint8_t((index >> 8) << (k % 8));
      const int ib = k / 8, s = (3 * ib + 5 * blk) % 16;
      for (int j = 0; j < 4; ++j) {
        const int v = 4 * k + j;
        const float sign = (p[74 + v / 8] >> (v % 8)) & 1 ? -1.0f : 1.0f;
        want[size_t(v)] = super_d(blk) * float(1 + 2 * s) * float(iq::kIq3sGrid[index][j]) * sign;
      }
    }
  });
}

TEST(Dequant, IQ1_S) {
  // d | qs[32] | u16 qh[8]: sub-block ib's qh has the high index bits of group g in bits 3g..3g+2,
  // the scale s in bits 12..14 and the shift's sign in bit 15; group g is grid entry qs[4ib + g] |
  // high << 8; x = d·(2s + 1)·(grid ± 0.125) with grid values -1, 0, 1.
  check_super_blocks(GgmlType::IQ1_S, [](int blk, uint8_t* p, float* want) {
    for (int ib = 0; ib < 8; ++ib) {
      const int s = (3 * ib + blk) % 8, negative = (ib + blk) % 2;
      uint32_t qh = uint32_t(s) << 12 | uint32_t(negative) << 15;
      for (int g = 0; g < 4; ++g) {
        const int index = (331 * ib + 517 * g + 1024 * blk + 9) % 2048;
        p[2 + 4 * ib + g] = uint8_t(index & 0xff);
        qh |= uint32_t(index >> 8) << (3 * g);
        for (int j = 0; j < 8; ++j) {
          const float delta = negative ? -0.125f : 0.125f;
          want[size_t(32 * ib + 8 * g + j)] =
              super_d(blk) * float(2 * s + 1) * (float(iq::kIq1sGrid[index][j]) + delta);
        }
      }
      put_u16(p + 34 + 2 * ib, qh);
    }
  });

  // Hand-worked, d = 1: sub-block 0 with qh = 0x8000 | 2 << 12 (s = 2: 5, shift -0.125) and grid
  // entry 1 in group 0 ({1, -1, -1, ...}): value 0 = 5·0.875 = 4.375, value 1 = 5·(-1.125) = -5.625.
  std::vector<uint8_t> h(50, 0);
  put_half(h, 0, kHalf1);
  h[2] = 1;
  put_u16(h.data() + 34, 0xa000);
  const auto y = dequant(GgmlType::IQ1_S, h, 256);
  EXPECT_EQ(iq::kIq1sGrid[1][0], 1);
  EXPECT_EQ(iq::kIq1sGrid[1][1], -1);
  EXPECT_EQ(y[0], 4.375f);
  EXPECT_EQ(y[1], -5.625f);
}

TEST(Dequant, IQ1_M) {
  // qs[32] | qh[16] | u16 scales[4]: group e (8 values) takes nibble e % 2 of qh[e / 2]: its low
  // three bits are the grid index's high bits (entry qs[e] | bits << 8), bit 3 the shift's sign;
  // scale t (3 bits, one per 16 values) is bits 3(t%4).. of scales[t / 4]; the fp16 d is the top
  // nibbles of scales[0..3], lowest first; x = d·(2s + 1)·(grid ± 0.125).
  check_super_blocks(GgmlType::IQ1_M, [](int blk, uint8_t* p, float* want) {
    const half_t dh = super_d_half(blk);
    uint32_t sc[4];
    for (int i = 0; i < 4; ++i) sc[i] = uint32_t((dh >> (4 * i)) & 15) << 12;
    for (int t = 0; t < 16; ++t) sc[t / 4] |= uint32_t((5 * t + 3 * blk) % 8) << (3 * (t % 4));
    for (int i = 0; i < 4; ++i) put_u16(p + 48 + 2 * i, sc[i]);
    for (int e = 0; e < 32; ++e) {
      const int index = (613 * e + 1024 * blk + 77) % 2048, negative = (e / 3 + blk) % 2;
      const int t = e / 2, s = (5 * t + 3 * blk) % 8;
      p[e] = uint8_t(index & 0xff);
      p[32 + e / 2] |= uint8_t(((index >> 8) | negative << 3) << (4 * (e % 2)));
      for (int j = 0; j < 8; ++j) {
        const float delta = negative ? -0.125f : 0.125f;
        want[size_t(8 * e + j)] =
            super_d(blk) * float(2 * s + 1) * (float(iq::kIq1sGrid[index][j]) + delta);
      }
    }
  });

  // Hand-worked: d = 2 (fp16 0x4000: top nibble 4 in scales[3], the others 0), scale 0 = 1 (3), group 0
  // grid entry 0 (all -1), shift +0.125: value 0 = 2·3·(-0.875) = -5.25.
  std::vector<uint8_t> h(56, 0);
  put_u16(h.data() + 48, 0x0001);
  put_u16(h.data() + 54, 0x4000);
  const auto y = dequant(GgmlType::IQ1_M, h, 256);
  EXPECT_EQ(y[0], -5.25f);
}

// ---- ternary formats: 256-value super-blocks of values -d, 0, d (TQ2_0 also 2d) ----------------

// A TQ1_0 byte holding the trits t[0..4] (the first most significant): ceil(N·256/243) for the
// base-3 number N = t0 t1 t2 t3 t4, as ggml's quantiser writes it.
uint8_t tq1_byte(const int* t) {
  int n = 0;
  for (int i = 0; i < 5; ++i) n = 3 * n + t[i];
  return uint8_t((n * 256 + 242) / 243);
}

TEST(Dequant, TQ1_0) {
  // qs[48] | qh[4] | d: qs[0..31] hold values 0..159 (trit n of qs[m] is value 32n + m), qs[32..47]
  // values 160..239 (value 160 + 16n + m), qh[0..3] values 240..255 (value 240 + 4n + m, four trits
  // and a fifth of 0); x = (trit - 1)·d.
  check_super_blocks(GgmlType::TQ1_0, [](int blk, uint8_t* p, float* want) {
    auto trit_of = [blk](int v) { return (7 * v + v / 5 + blk) % 3; };
    const int runs[3][3] = {{0, 32, 5}, {32, 16, 5}, {48, 4, 4}};  // first byte, bytes, trits
    int first = 0;
    for (const auto& run : runs) {
      for (int m = 0; m < run[1]; ++m) {
        int t[5] = {0, 0, 0, 0, 0};
        for (int n = 0; n < run[2]; ++n) {
          const int v = first + run[1] * n + m;
          t[n] = trit_of(v);
          want[v] = float(t[n] - 1) * super_d(blk);
        }
        p[run[0] + m] = tq1_byte(t);
      }
      first += run[1] * run[2];
    }
  });

  // Every five-trit byte and every four-trit qh byte gives back its trits (d = 1 at bytes 52..53).
  for (int code = 0; code < 243; ++code) {
    int t[5];
    for (int i = 4, c = code; i >= 0; --i, c /= 3) t[i] = c % 3;
    std::vector<uint8_t> h(54, 0);
    put_half(h, 52, kHalf1);
    h[5] = tq1_byte(t);   // values 5, 37, 69, 101, 133
    h[40] = tq1_byte(t);  // values 168, 184, 200, 216, 232
    const int t4[5] = {t[0], t[1], t[2], t[3], 0};
    h[50] = tq1_byte(t4);  // values 242, 246, 250, 254
    const auto y = dequant(GgmlType::TQ1_0, h, 256);
    for (int n = 0; n < 5; ++n) {
      SCOPED_TRACE("code " + std::to_string(code) + " trit " + std::to_string(n));
      ASSERT_EQ(y[size_t(5 + 32 * n)], float(t[n] - 1));
      ASSERT_EQ(y[size_t(168 + 16 * n)], float(t[n] - 1));
      if (n < 4) {
        ASSERT_EQ(y[size_t(242 + 4 * n)], float(t[n] - 1));
      }
    }
    ASSERT_EQ(y[0], -1.0f);  // byte 0: five trits 0
  }

  // Hand-worked, d = 0.5: qs[0] = 148 = ceil(140·256/243), 140 = 1·81 + 2·27 + 0·9 + 1·3 + 2
  // (trits 1 2 0 1 2): values 0, 32, 64, 96, 128 = 0, 0.5, -0.5, 0, 0.5. qh[3] = 184 =
  // ceil(174·256/243), 174 = (2·27 + 0·9 + 1·3 + 1)·3 (trits 2 0 1 1): values 243, 247, 251, 255
  // = 0.5, -0.5, 0, 0. Byte 255 (trits 2 2 2 2 2) at qs[47]: values 175, 191, ..., 239 = 0.5.
  std::vector<uint8_t> h(54, 0);
  h[0] = 148;
  h[51] = 184;
  h[47] = 255;
  put_half(h, 52, kHalf05);
  const auto y = dequant(GgmlType::TQ1_0, h, 256);
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[32], 0.5f);
  EXPECT_EQ(y[64], -0.5f);
  EXPECT_EQ(y[96], 0.0f);
  EXPECT_EQ(y[128], 0.5f);
  EXPECT_EQ(y[243], 0.5f);
  EXPECT_EQ(y[247], -0.5f);
  EXPECT_EQ(y[251], 0.0f);
  EXPECT_EQ(y[255], 0.0f);
  EXPECT_EQ(y[175], 0.5f);
  EXPECT_EQ(y[239], 0.5f);
  EXPECT_EQ(y[1], -0.5f);  // byte 0
}

TEST(Dequant, TQ2_0) {
  // qs[64] | d: value 128h + 32l + m is bits 2l..2l+1 of qs[32h + m]; x = (q - 1)·d (q = 3: 2d).
  check_super_blocks(GgmlType::TQ2_0, [](int blk, uint8_t* p, float* want) {
    for (int v = 0; v < 256; ++v) {
      const int q = (5 * v + v / 7 + blk) % 4, h = v / 128, l = (v / 32) % 4, m = v % 32;
      p[32 * h + m] |= uint8_t(q << (2 * l));
      want[v] = float(q - 1) * super_d(blk);
    }
  });

  // Hand-worked, d = 0.5: qs[0] = 0xe4 (q = 0, 1, 2, 3 from the low bits): values 0, 32, 64, 96 =
  // -0.5, 0, 0.5, 1; qs[33] = 0x01: value 129 = 0, value 161 = -0.5.
  std::vector<uint8_t> h(66, 0);
  h[0] = 0xe4;
  h[33] = 0x01;
  put_half(h, 64, kHalf05);
  const auto y = dequant(GgmlType::TQ2_0, h, 256);
  EXPECT_EQ(y[0], -0.5f);
  EXPECT_EQ(y[32], 0.0f);
  EXPECT_EQ(y[64], 0.5f);
  EXPECT_EQ(y[96], 1.0f);
  EXPECT_EQ(y[129], 0.0f);
  EXPECT_EQ(y[161], -0.5f);
}

TEST(Dequant, RejectsUnsupportedTypesAndPartialBlocks) {
  std::vector<uint8_t> b(1024, 0);
  std::vector<float> y(256);
  EXPECT_THROW(dequantize_row(GgmlType::Q8_K, b.data(), y.data(), 256), GgufError);
  EXPECT_THROW(dequantize_row(GgmlType::Q8_1, b.data(), y.data(), 32), GgufError);
  // Type ids that stay unreadable: 4 (Q4_2, removed from ggml), 27 (I64), 36 (none, past TQ2_0).
  for (uint32_t id : {4u, 27u, 36u}) {
    const GgmlType t = static_cast<GgmlType>(id);
    EXPECT_FALSE(can_dequantize(t)) << id;
    EXPECT_THROW(dequantize_row(t, b.data(), y.data(), 256), GgufError) << id;
  }
  EXPECT_THROW(dequantize_row(GgmlType::Q4_0, b.data(), y.data(), 33), GgufError);
  EXPECT_THROW(dequantize_row(GgmlType::Q6_K, b.data(), y.data(), 128), GgufError);
  EXPECT_THROW(dequantize_row(GgmlType::IQ4_XS, b.data(), y.data(), 32), GgufError);
  EXPECT_FALSE(can_dequantize(GgmlType::Q8_K));
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0,
                     GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K,
                     GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS}) {
    EXPECT_TRUE(can_dequantize(t)) << ggml_type_name(t);
  }
  // The i-quants and the ternary types: 256-value super-blocks, so half a block is rejected.
  for (GgmlType t : {GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ2_S, GgmlType::IQ3_XXS,
                     GgmlType::IQ3_S, GgmlType::IQ1_S, GgmlType::IQ1_M, GgmlType::TQ1_0,
                     GgmlType::TQ2_0}) {
    EXPECT_TRUE(can_dequantize(t)) << ggml_type_name(t);
    EXPECT_THROW(dequantize_row(t, b.data(), y.data(), 128), GgufError) << ggml_type_name(t);
    EXPECT_THROW(dequantize_row(t, b.data(), y.data(), 257), GgufError) << ggml_type_name(t);
  }
}

}  // namespace
}  // namespace tllm
