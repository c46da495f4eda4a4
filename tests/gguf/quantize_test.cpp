// quantize_row -> dequantize_row round trips, each against the error bound its quantiser guarantees
// (derived from the input values, not read back from the blocks), plus edge blocks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "model/quants.h"

namespace tllm {
namespace {

// fp16 scales are rounded up to the next representable value: at most 2^-10 relative.
constexpr float kScaleSlack = 1.0f + 1.0f / 1024.0f;

// Deterministic test values: a mix of small noise, outliers and sign changes.
std::vector<float> test_values(int64_t n, uint32_t seed, float scale) {
  std::vector<float> x(static_cast<size_t>(n));
  uint32_t s = seed;
  for (auto& v : x) {
    s = s * 1664525u + 1013904223u;
    const float u = float(s >> 8) / float(1 << 24) - 0.5f;  // [-0.5, 0.5)
    v = scale * u * (((s >> 4) & 31) == 0 ? 8.0f : 1.0f);
  }
  return x;
}

std::vector<float> round_trip(GgmlType t, const std::vector<float>& x) {
  int64_t bv = 0, bb = 0;
  EXPECT_TRUE(ggml_type_block(t, &bv, &bb));
  const int64_t n = int64_t(x.size());
  std::vector<uint8_t> q(size_t(n / bv * bb), 0xAA);
  quantize_row(t, x.data(), q.data(), n);
  std::vector<float> y(x.size());
  dequantize_row(t, q.data(), y.data(), n);
  return y;
}

float amax(const float* x, int n) {
  float m = 0;
  for (int i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}

// Checks |x - y| <= bound(block) for every value, block by block.
template <class Bound>
void expect_within(const std::vector<float>& x, const std::vector<float>& y, int block, Bound bound) {
  for (size_t b = 0; b < x.size() / size_t(block); ++b) {
    const float* xb = x.data() + b * size_t(block);
    const float lim = bound(xb) * 1.0001f + 1e-7f;  // fp32 rounding in dequantisation
    for (int i = 0; i < block; ++i) {
      ASSERT_LE(std::fabs(xb[i] - y[b * size_t(block) + size_t(i)]), lim)
          << "block " << b << " value " << i << ": x = " << xb[i];
    }
  }
}

float rms(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += double(x) * x;
  return float(std::sqrt(s / double(v.size())));
}

float rms_error(const std::vector<float>& x, const std::vector<float>& y) {
  std::vector<float> d(x.size());
  for (size_t i = 0; i < x.size(); ++i) d[i] = x[i] - y[i];
  return rms(d);
}

TEST(Quantize, FloatTypes) {
  const auto x = test_values(512, 1, 100.0f);
  EXPECT_EQ(round_trip(GgmlType::F32, x), x);
  const auto h = round_trip(GgmlType::F16, x);
  const auto b = round_trip(GgmlType::BF16, x);
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(h[i], round_to_half(x[i]));
    EXPECT_LE(std::fabs(h[i] - x[i]), std::fabs(x[i]) / 2048.0f + 3e-8f);  // 11-bit significand (or subnormal)
    EXPECT_LE(std::fabs(b[i] - x[i]), std::fabs(x[i]) / 256.0f);    // 8-bit significand
  }
  // bf16 rounds to nearest even: 1 + 2^-8 is halfway between 1 and 1 + 2^-7 and goes to 1.
  EXPECT_EQ(round_trip(GgmlType::BF16, std::vector<float>{1.0f + 1.0f / 256.0f})[0], 1.0f);
  EXPECT_EQ(round_trip(GgmlType::BF16, std::vector<float>{1.0f + 3.0f / 256.0f})[0], 1.0f + 4.0f / 256.0f);
}

TEST(Quantize, Q8_0) {
  // d = max|x| / 127 (rounded up to fp16): error <= d / 2.
  const auto x = test_values(4096, 2, 1.0f);
  const auto y = round_trip(GgmlType::Q8_0, x);
  expect_within(x, y, 32, [](const float* b) { return amax(b, 32) / 127.0f * kScaleSlack / 2; });
  EXPECT_LT(rms_error(x, y), 0.01f * rms(x));
}

TEST(Quantize, Q4_0AndQ5_0) {
  // d = -(largest magnitude) / 8 (Q4_0) or / 16 (Q5_0); values of the other sign may clip at the top
  // code, so the bound is |d| rather than |d| / 2.
  const auto x = test_values(4096, 3, 1.0f);
  const auto y4 = round_trip(GgmlType::Q4_0, x);
  expect_within(x, y4, 32, [](const float* b) { return amax(b, 32) / 8.0f * kScaleSlack; });
  // Half a step of 2·max|x|/16 per block, where one value in 32 is an 8x outlier: about 0.15.
  EXPECT_LT(rms_error(x, y4), 0.2f * rms(x));
  const auto y5 = round_trip(GgmlType::Q5_0, x);
  expect_within(x, y5, 32, [](const float* b) { return amax(b, 32) / 16.0f * kScaleSlack; });
  EXPECT_LT(rms_error(x, y5), 0.1f * rms(x));
  EXPECT_LT(rms_error(x, y5), rms_error(x, y4));
}

TEST(Quantize, Q4_1AndQ5_1) {
  // x = q·d + m with m = fp16(min), d = range / 15 (or 31): error <= d / 2 + |min - m|.
  const auto x = test_values(4096, 4, 3.0f);
  auto bound = [](int levels) {
    return [levels](const float* b) {
      const float lo = *std::min_element(b, b + 32), hi = *std::max_element(b, b + 32);
      const float m_err = std::fabs(lo) / 2048.0f;
      return (hi - lo + m_err) / float(levels) * kScaleSlack / 2 + m_err;
    };
  };
  expect_within(x, round_trip(GgmlType::Q4_1, x), 32, bound(15));
  expect_within(x, round_trip(GgmlType::Q5_1, x), 32, bound(31));
  // A block of positive values away from zero keeps its offset.
  std::vector<float> shifted(32);
  for (int i = 0; i < 32; ++i) shifted[size_t(i)] = 10.0f + 0.1f * float(i);
  expect_within(shifted, round_trip(GgmlType::Q4_1, shifted), 32, bound(15));
}

// The K-quants with mins (Q2_K, Q4_K, Q5_K), per sub-block of `sub` values: step >= (hi - min(0,
// lo)) / levels, rounded up to a multiple of d = max step / scale_max; min = -min(0, lo) rounded to
// a multiple of dmin = max min / scale_max. Error <= (step + d) / 2 + dmin / 2.
void expect_k_affine_bound(const std::vector<float>& x, const std::vector<float>& y, int sub, float levels,
                           float scale_max) {
  for (size_t blk = 0; blk < x.size() / 256; ++blk) {
    const float* xb = x.data() + blk * 256;
    std::vector<float> steps(size_t(256 / sub));
    float max_step = 0, max_min = 0;
    for (int i = 0; i < 256 / sub; ++i) {
      const float lo = std::min(0.0f, *std::min_element(xb + sub * i, xb + sub * i + sub));
      const float hi = *std::max_element(xb + sub * i, xb + sub * i + sub);
      steps[size_t(i)] = (hi - lo) / levels;
      max_step = std::max(max_step, steps[size_t(i)]);
      max_min = std::max(max_min, -lo);
    }
    const float d = max_step / scale_max * kScaleSlack, dmin = max_min / scale_max * kScaleSlack;
    for (int v = 0; v < 256; ++v) {
      const float lim = (steps[size_t(v / sub)] + d) / 2 + dmin / 2 + 1e-6f;
      ASSERT_LE(std::fabs(xb[v] - y[blk * 256 + size_t(v)]), lim) << "block " << blk << " value " << v;
    }
  }
}

// The symmetric K-quants (Q3_K, Q6_K), per sub-block of 16 values: step >= max|x| / levels, rounded
// up to a multiple of d = max step / scale_max so that no value clips: error <= (step + d) / 2.
void expect_k_symmetric_bound(const std::vector<float>& x, const std::vector<float>& y, float levels,
                              float scale_max) {
  for (size_t blk = 0; blk < x.size() / 256; ++blk) {
    const float* xb = x.data() + blk * 256;
    float steps[16], max_step = 0;
    for (int i = 0; i < 16; ++i) {
      steps[i] = amax(xb + 16 * i, 16) / levels;
      max_step = std::max(max_step, steps[i]);
    }
    const float d = max_step / scale_max * kScaleSlack;
    for (int v = 0; v < 256; ++v) {
      ASSERT_LE(std::fabs(xb[v] - y[blk * 256 + size_t(v)]), (steps[v / 16] + d) / 2 + 1e-7f)
          << "block " << blk << " value " << v;
    }
  }
}

TEST(Quantize, Q4_KAndQ5_K) {
  // 32-value sub-blocks, 6-bit scales and mins; codes 0..15 (Q4_K) or 0..31 (Q5_K).
  const auto x = test_values(256 * 16, 5, 0.05f);
  const auto y4 = round_trip(GgmlType::Q4_K, x);
  expect_k_affine_bound(x, y4, 32, 15.0f, 63.0f);
  EXPECT_LT(rms_error(x, y4), 0.12f * rms(x));
  const auto y5 = round_trip(GgmlType::Q5_K, x);
  expect_k_affine_bound(x, y5, 32, 31.0f, 63.0f);
  EXPECT_LT(rms_error(x, y5), 0.06f * rms(x));
  EXPECT_LT(rms_error(x, y5), rms_error(x, y4));
}

TEST(Quantize, Q2_K) {
  // 16-value sub-blocks, 4-bit scales and mins, codes 0..3.
  const auto x = test_values(256 * 16, 10, 0.05f);
  const auto y = round_trip(GgmlType::Q2_K, x);
  expect_k_affine_bound(x, y, 16, 3.0f, 15.0f);
}

TEST(Quantize, Q3_KAndQ6_K) {
  // 16-value sub-blocks; Q3_K: 6-bit scales (0..31 used) and codes -3..3 of -4..3; Q6_K: int8
  // scales and codes -31..31 of -32..31.
  const auto x = test_values(256 * 16, 6, 0.05f);
  const auto y3 = round_trip(GgmlType::Q3_K, x);
  expect_k_symmetric_bound(x, y3, 3.0f, 31.0f);
  EXPECT_LT(rms_error(x, y3), rms_error(x, round_trip(GgmlType::Q2_K, x)));
  const auto y6 = round_trip(GgmlType::Q6_K, x);
  expect_k_symmetric_bound(x, y6, 31.0f, 127.0f);
  EXPECT_LT(rms_error(x, y6), 0.03f * rms(x));
}

// IQ4_NL's table; a 4-bit index selects one of these codes.
constexpr int kIq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// The table indices of the 32 values packed in a 16-byte qs: byte j holds value j (low nibble) and
// value j + 16 (high nibble).
void iq4_indices(const uint8_t* qs, int* idx) {
  for (int j = 0; j < 16; ++j) {
    idx[j] = qs[j] & 0x0f;
    idx[j + 16] = qs[j] >> 4;
  }
}

// Checks that each of 32 values has the code nearest to x / s in the table, s the stored scale. The
// quantiser picks codes with its scale before fp16 rounding (as ggml does), which differs from s by
// up to 2^-11 relative: the chosen code may then be farther than the nearest by at most
// (|code| + |nearest|)·|s|·2^-11 <= 254·|s|/2048. Counts the values whose code is not exactly the
// nearest for s into *inexact.
void expect_nearest_codes(const float* x, const int* idx, float s, int* inexact) {
  const float slack = 254.0f * std::fabs(s) / 2048.0f * 1.001f + 1e-9f;
  for (int j = 0; j < 32; ++j) {
    const float err = std::fabs(x[j] - float(kIq4nl[idx[j]]) * s);
    float best = err;
    for (int t = 0; t < 16; ++t) best = std::min(best, std::fabs(x[j] - float(kIq4nl[t]) * s));
    ASSERT_LE(err, best + slack) << "value " << j << ": x = " << x[j] << ", code " << kIq4nl[idx[j]]
                                 << ", scale " << s;
    *inexact += err > best;
  }
}

// Gaussian-like rows (the sum of four uniform draws), the distribution of the synthetic weights.
std::vector<float> gaussian_values(int64_t n, uint32_t seed) {
  std::vector<float> x(static_cast<size_t>(n));
  uint32_t s = seed;
  for (auto& v : x) {
    float sum = 0;
    for (int k = 0; k < 4; ++k) {
      s = s * 1664525u + 1013904223u;
      sum += float(s >> 8) / float(1 << 24) - 0.5f;
    }
    v = 0.02f * sum * 1.7320508f;  // unit variance times the weight scale of a trained model
  }
  return x;
}

TEST(Quantize, IQ4_NLCodesAreTheNearestForTheScale) {
  const auto x = test_values(32 * 512, 12, 1.0f);
  std::vector<uint8_t> q(size_t(x.size() / 32 * 18));
  quantize_row(GgmlType::IQ4_NL, x.data(), q.data(), int64_t(x.size()));
  int inexact = 0;
  for (size_t b = 0; b < x.size() / 32; ++b) {
    int codes[32], idx[32];
    half_t dh = 0;
    ASSERT_TRUE(block_codes(GgmlType::IQ4_NL, q.data() + 18 * b, codes, &dh));
    iq4_indices(q.data() + 18 * b + 2, idx);
    expect_nearest_codes(x.data() + 32 * b, idx, half_to_float(dh), &inexact);
  }
  EXPECT_LT(inexact, int(x.size()) / 1000) << "codes nearest for the unrounded scale only, too often";
  std::printf("IQ4_NL: %d of %zu codes nearest only for the unrounded scale\n", inexact, x.size());
}

TEST(Quantize, IQ4_XSCodesAreTheNearestForTheSubBlockScale) {
  const auto x = test_values(256 * 64, 13, 1.0f);
  std::vector<uint8_t> q(size_t(x.size() / 256 * 136));
  quantize_row(GgmlType::IQ4_XS, x.data(), q.data(), int64_t(x.size()));
  int inexact = 0;
  for (size_t b = 0; b < x.size() / 256; ++b) {
    const uint8_t* blk = q.data() + 136 * b;
    const float d = half_to_float(half_t(blk[0] | blk[1] << 8));
    const int scales_h = blk[2] | blk[3] << 8;
    int min_ls = 63;
    for (int i = 0; i < 8; ++i) {
      const int ls = ((blk[4 + i / 2] >> (4 * (i % 2))) & 0x0f) | ((scales_h >> (2 * i)) & 3) << 4;
      min_ls = std::min(min_ls, ls);
      int idx[32];
      iq4_indices(blk + 8 + 16 * i, idx);
      expect_nearest_codes(x.data() + 256 * b + 32 * i, idx, d * float(ls - 32), &inexact);
    }
    // The sub-block scale of largest magnitude is stored as ls = 0, i.e. -32·d.
    EXPECT_EQ(min_ls, 0) << "block " << b;
  }
  EXPECT_LT(inexact, int(x.size()) / 1000) << "codes nearest for the unrounded scale only, too often";
  std::printf("IQ4_XS: %d of %zu codes nearest only for the unrounded scale\n", inexact, x.size());
}

TEST(Quantize, IQ4RoundTripErrors) {
  // Bound: a 32-value group of Gaussian values has max|x| of about 2.1σ; 16 evenly spaced levels
  // over ±max|x| would give a step of 0.28σ and an RMS error of step/√12 = 0.08σ. The table is
  // denser near zero, where most values lie, and the scale search minimises the x²-weighted error,
  // so IQ4_NL must do better than that uniform grid: RMS error < 0.08σ, and less than Q4_0's (the
  // uniform 4-bit format with one scale per 32 values) on the same rows. IQ4_XS, whose sub-block
  // scales are 6-bit multiples of one fp16 d per 256 values, may lose a little to that rounding:
  // within 5% of IQ4_NL.
  const auto x = gaussian_values(256 * 256, 14);
  const auto y_nl = round_trip(GgmlType::IQ4_NL, x);
  const auto y_xs = round_trip(GgmlType::IQ4_XS, x);
  const float sigma = rms(x);
  const float e_nl = rms_error(x, y_nl), e_xs = rms_error(x, y_xs);
  const float e_q4 = rms_error(x, round_trip(GgmlType::Q4_0, x));
  std::printf("RMS error / sigma: IQ4_NL %.4f, IQ4_XS %.4f, Q4_0 %.4f\n", e_nl / sigma, e_xs / sigma, e_q4 / sigma);
  EXPECT_LT(e_nl, 0.08f * sigma);
  EXPECT_LT(e_nl, e_q4);
  EXPECT_LT(e_xs, 1.05f * e_nl);
  // Per value: no error beyond half the widest gap of the table (24 codes, between 89 and 113) at
  // the group's scale, or what clipping at the table's end leaves; both are within 15% of the
  // group's max|x| (a scale search candidate maps max|x| onto 113·|d| or 127·|d| within 7 codes).
  expect_within(x, y_nl, 32, [](const float* b) { return 0.15f * amax(b, 32); });
  expect_within(x, y_xs, 32, [](const float* b) { return 0.15f * amax(b, 32); });
}

TEST(Quantize, TQ1_0AndTQ2_0) {
  // Ternary: every value becomes -A, 0 or A with A = fp16(max|x|) per 256-value block, the nearest
  // of them to x / max|x|: error <= max|x| / 2 (plus A's fp16 rounding).
  const auto x = test_values(256 * 8, 8, 0.1f);
  for (GgmlType t : {GgmlType::TQ1_0, GgmlType::TQ2_0}) {
    SCOPED_TRACE(ggml_type_name(t));
    expect_within(x, round_trip(t, x), 256,
                  [](const float* b) { return amax(b, 256) / 2 * kScaleSlack; });
    // Values that are already -a, 0 or a (a exact in fp16, one a per block) come back exactly.
    std::vector<float> ternary(256 * 4);
    for (size_t i = 0; i < ternary.size(); ++i) {
      const float a = 0.375f * float(1 + i / 256);
      ternary[i] = a * float(int((7 * i + i / 13) % 3) - 1);
    }
    EXPECT_EQ(round_trip(t, ternary), ternary);
  }
}

// The codebook formats (i-quants), with the byte of each one's first sub-block scale and the bits
// that hold it, set to the top scale: IQ2_XXS / IQ3_XXS the top nibble of the first sub-block's u32,
// IQ2_XS / IQ2_S / IQ3_S the low nibble of the first scale byte, IQ1_S bits 12..14 of the first
// qh, IQ1_M bits 0..2 of the first scale u16.
struct CodebookType {
  GgmlType type;
  int scale_byte;
  uint8_t top_scale;
};
constexpr CodebookType kCodebookTypes[] = {
    {GgmlType::IQ2_XXS, 9, 0xf0},  {GgmlType::IQ2_XS, 66, 0x0f}, {GgmlType::IQ2_S, 74, 0x0f},
    {GgmlType::IQ3_XXS, 69, 0xf0}, {GgmlType::IQ3_S, 106, 0x0f}, {GgmlType::IQ1_S, 35, 0x70},
    {GgmlType::IQ1_M, 48, 0x07},
};

// Random blocks of a codebook type: every code, sign and scale random, d a normal fp16 value near
// 1/100, and the first sub-block at the top scale (so that the largest sub-block scale fixes d).
std::vector<uint8_t> random_codebook_blocks(const CodebookType& ct, int n_blocks, uint32_t seed) {
  int64_t bb = 0;
  ggml_type_block(ct.type, nullptr, &bb);
  std::vector<uint8_t> q(size_t(n_blocks * bb));
  uint32_t s = seed;
  for (uint8_t& v : q) {
    s = s * 1664525u + 1013904223u;
    v = uint8_t(s >> 24);
  }
  for (int b = 0; b < n_blocks; ++b) {
    uint8_t* blk = q.data() + b * bb;
    const unsigned d = 0x2000u | (unsigned(b) * 37u & 0x3ffu);  // 2^-7 times 1 + mantissa/1024
    blk[ct.scale_byte] |= ct.top_scale;
    if (ct.type == GgmlType::IQ1_M) {  // d sits in the top nibbles of the four scale u16s
      for (int i = 0; i < 4; ++i) blk[49 + 2 * i] = uint8_t((blk[49 + 2 * i] & 0x0f) | ((d >> (4 * i)) & 15) << 4);
    } else {
      blk[0] = uint8_t(d & 0xff);
      blk[1] = uint8_t(d >> 8);
    }
  }
  return q;
}

TEST(Quantize, CodebookTypesGiveBackTheirOwnBlocksExactly) {
  // Values that a block of the type represents exactly come back exactly: the codes of the right
  // unit are the codebook entries themselves, the least-squares unit is the block's, and d is the
  // top sub-block's unit over its scale factor.
  for (const CodebookType& ct : kCodebookTypes) {
    SCOPED_TRACE(ggml_type_name(ct.type));
    const int n_blocks = 64;
    const auto q = random_codebook_blocks(ct, n_blocks, 21);
    std::vector<float> x(size_t(n_blocks) * 256);
    dequantize_row(ct.type, q.data(), x.data(), int64_t(x.size()));
    EXPECT_EQ(round_trip(ct.type, x), x);
  }
}

TEST(Quantize, CodebookTypesRoundTripErrors) {
  // Relative RMS error on Gaussian rows, each bound about 10% above what the quantiser gives. The
  // formats in order of bits per value (3.44, 3.06, 2.5, 2.31, 2.06, 1.75, 1.56) must lose in that
  // order; IQ3_S, at Q3_K's size, must beat Q3_K (uniform codes, one scale per 16 values).
  const auto x = gaussian_values(256 * 512, 15);
  const float sigma = rms(x);
  const std::pair<GgmlType, float> bounds[] = {
      {GgmlType::IQ3_S, 0.16f},  {GgmlType::IQ3_XXS, 0.21f}, {GgmlType::IQ2_S, 0.28f}, {GgmlType::IQ2_XS, 0.34f},
      {GgmlType::IQ2_XXS, 0.39f}, {GgmlType::IQ1_M, 0.47f},  {GgmlType::IQ1_S, 0.53f},
  };
  float previous = 0;
  for (const auto& [t, bound] : bounds) {
    const float e = rms_error(x, round_trip(t, x)) / sigma;
    std::printf("RMS error / sigma: %s %.4f\n", ggml_type_name(t), e);
    EXPECT_LT(e, bound) << ggml_type_name(t);
    EXPECT_GT(e, previous) << ggml_type_name(t) << " has more bits than the type before it";
    previous = e;
  }
  EXPECT_LT(rms_error(x, round_trip(GgmlType::IQ3_S, x)), rms_error(x, round_trip(GgmlType::Q3_K, x)));
}

TEST(Quantize, CodebookTypesEdgeBlocks) {
  for (const CodebookType& ct : kCodebookTypes) {
    SCOPED_TRACE(ggml_type_name(ct.type));
    // All zeros: d = 0, so every code gives zero.
    const std::vector<float> zeros(256, 0.0f);
    EXPECT_EQ(round_trip(ct.type, zeros), zeros);
    // A constant block: one codebook level (or, for IQ1, 1 + 1/8) times a unit, up to the unit's
    // rounding to a scale step of d.
    const std::vector<float> ones(256, 0.75f);
    for (float v : round_trip(ct.type, ones)) EXPECT_NEAR(v, 0.75f, 0.75f / 16.0f);
    // Negative values keep their sign: every value is -0.75 or +0.75 (an even number of each per
    // 8 values, as the formats with implied signs need).
    std::vector<float> signs(256);
    for (size_t i = 0; i < signs.size(); ++i) signs[i] = (i * 7 + i / 8) % 4 < 2 ? -0.75f : 0.75f;
    const auto y = round_trip(ct.type, signs);
    for (size_t i = 0; i < signs.size(); ++i) EXPECT_NEAR(y[i], signs[i], 0.75f / 4.0f) << "value " << i;
  }
}

TEST(Quantize, EdgeBlocks) {
  const std::vector<GgmlType> types = {GgmlType::Q4_0, GgmlType::Q4_1,  GgmlType::Q5_0,   GgmlType::Q5_1,
                                       GgmlType::Q8_0, GgmlType::Q2_K,  GgmlType::Q3_K,   GgmlType::Q4_K,
                                       GgmlType::Q5_K, GgmlType::Q6_K,  GgmlType::IQ4_NL, GgmlType::IQ4_XS,
                                       GgmlType::TQ1_0, GgmlType::TQ2_0};
  for (GgmlType t : types) {
    SCOPED_TRACE(ggml_type_name(t));
    // All zeros stay exactly zero.
    const std::vector<float> zeros(256, 0.0f);
    EXPECT_EQ(round_trip(t, zeros), zeros);
    // A constant block: exact for the affine formats, within one step for the others.
    const std::vector<float> ones(256, 0.75f);
    for (float v : round_trip(t, ones)) EXPECT_NEAR(v, 0.75f, 0.75f / 7.0f);
    // One outlier among zeros: the outlier survives, zeros stay near zero.
    std::vector<float> spike(256, 0.0f);
    spike[37] = -3.0f;
    const auto y = round_trip(t, spike);
    EXPECT_NEAR(y[37], -3.0f, 3.0f / 7.0f);
    EXPECT_NEAR(y[36], 0.0f, 3.0f / 7.0f);
  }
}

TEST(Quantize, RejectsWhatItCannotWrite) {
  std::vector<float> x(256, 1.0f);
  std::vector<uint8_t> q(1024);
  EXPECT_THROW(quantize_row(GgmlType::Q8_1, x.data(), q.data(), 32), GgufError);
  EXPECT_THROW(quantize_row(GgmlType::Q8_K, x.data(), q.data(), 256), GgufError);
  EXPECT_FALSE(can_quantize(GgmlType::Q8_1));
  EXPECT_TRUE(can_quantize(GgmlType::IQ4_XS));
  EXPECT_TRUE(can_quantize(GgmlType::IQ3_S));
  EXPECT_THROW(quantize_row(GgmlType::IQ2_XXS, x.data(), q.data(), 128), GgufError);
  EXPECT_THROW(quantize_row(GgmlType::IQ1_M, x.data(), q.data(), 255), GgufError);
  EXPECT_THROW(quantize_row(GgmlType::IQ4_XS, x.data(), q.data(), 32), GgufError);
  EXPECT_THROW(quantize_row(GgmlType::Q4_K, x.data(), q.data(), 128), GgufError);
  EXPECT_THROW(quantize_row(GgmlType::Q8_0, x.data(), q.data(), 31), GgufError);
  EXPECT_THROW(quantize_row(GgmlType::TQ1_0, x.data(), q.data(), 128), GgufError);
  EXPECT_THROW(quantize_row(GgmlType::TQ2_0, x.data(), q.data(), 255), GgufError);
}

}  // namespace
}  // namespace tllm
