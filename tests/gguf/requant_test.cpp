// Requantisation of GGUF tensors to the backend weight types (W8 with fp16 group scales, FP16), and
// whole-tensor dequantisation.
//
// W8 bound, per value w of a group with m = max|w|: the stored scale s = fp16(m / 127) and
// q = clamp(round(w / s), -127, 127), so |w - q·s| <= s/2, plus up to m·2^-11 where rounding m/127 to
// fp16 made s smaller than m/127 and the largest values clip at ±127. Blocks of integer codes times
// one fp16 scale (Q4_0, Q5_0, Q8_0, IQ4_NL) are taken over exactly instead: error 0.
#include <gtest/gtest.h>

#include <cmath>

#include "model/quants.h"

namespace tllm {
namespace {

constexpr half_t kHalf05 = 0x3800;

// A tensor whose bytes the test owns.
struct OwnedTensor {
  std::vector<uint8_t> bytes;
  TensorInfo info;
};

// A tensor of `bytes` as they are.
OwnedTensor raw_tensor(const std::string& name, GgmlType type, std::vector<int64_t> dims, std::vector<uint8_t> bytes) {
  OwnedTensor t;
  t.bytes = std::move(bytes);
  t.info.name = name;
  t.info.type = type;
  t.info.dims = std::move(dims);
  t.info.data = t.bytes.data();
  t.info.bytes = t.bytes.size();
  return t;
}

// A tensor of `values` quantised to `type`.
OwnedTensor make_tensor(const std::string& name, GgmlType type, std::vector<int64_t> dims,
                        const std::vector<float>& values) {
  int64_t bv = 0, bb = 0;
  EXPECT_TRUE(ggml_type_block(type, &bv, &bb));
  std::vector<uint8_t> bytes(values.size() / size_t(bv) * size_t(bb));
  quantize_row(type, values.data(), bytes.data(), int64_t(values.size()));
  return raw_tensor(name, type, std::move(dims), std::move(bytes));
}

std::vector<float> noise(size_t n, uint32_t seed, float scale) {
  std::vector<float> x(n);
  uint32_t s = seed;
  for (auto& v : x) {
    s = s * 1664525u + 1013904223u;
    v = scale * (float(s >> 8) / float(1 << 24) - 0.5f);
  }
  return x;
}

// `n_blocks` blocks of `block_bytes` random bytes, each block's first two bytes (its fp16 d in Q4_0,
// Q5_0, Q8_0, IQ4_NL and IQ4_XS) replaced by a random fp16 of either sign and magnitude in
// [2^-12, 2^-6), as trained weights have.
std::vector<uint8_t> random_blocks(size_t n_blocks, size_t block_bytes, uint32_t seed) {
  std::vector<uint8_t> b(n_blocks * block_bytes);
  uint32_t s = seed;
  auto next = [&] { return s = s * 1664525u + 1013904223u; };
  for (uint8_t& v : b) v = uint8_t(next() >> 24);
  for (size_t i = 0; i < n_blocks; ++i) {
    const float mag = std::ldexp(1.0f + float(next() >> 8) / float(1 << 24), -12 + int(next() >> 29));
    const half_t d = float_to_half((next() >> 31) ? -mag : mag);
    b[i * block_bytes] = uint8_t(d & 0xff);
    b[i * block_bytes + 1] = uint8_t(d >> 8);
  }
  return b;
}

// sqrt(Σ (w - q·s)² / Σ w²) of a W8 matrix against the fp32 values it was made from.
double w8_relative_rms_error(const HostWeights& w, const std::vector<float>& ref) {
  double err = 0, sum = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double e = double(ref[i]) - double(w.q[i]) * double(half_to_float(w.scales[i / kW8Group]));
    err += e * e;
    sum += double(ref[i]) * double(ref[i]);
  }
  return std::sqrt(err / sum);
}

// Checks the W8 definition and error bound against the fp32 values the tensor holds.
void expect_w8_matches(const HostWeights& w, const std::vector<float>& ref) {
  ASSERT_EQ(w.type, WeightType::W8);
  ASSERT_EQ(w.q.size(), size_t(w.n * w.k));
  ASSERT_EQ(w.scales.size(), size_t(w.n * w.k / kW8Group));
  ASSERT_EQ(ref.size(), w.q.size());
  for (int64_t r = 0; r < w.n; ++r) {
    for (int64_t g = 0; g < w.k / kW8Group; ++g) {
      const size_t base = size_t(r * w.k + g * kW8Group);
      float m = 0;
      for (int j = 0; j < kW8Group; ++j) m = std::max(m, std::fabs(ref[base + size_t(j)]));
      const half_t sh = w.scales[size_t(r * (w.k / kW8Group) + g)];
      ASSERT_EQ(sh, float_to_half(m / 127.0f)) << "row " << r << " group " << g;
      const float s = half_to_float(sh);
      for (int j = 0; j < kW8Group; ++j) {
        const int q = w.q[base + size_t(j)];
        ASSERT_GE(q, -127);
        ASSERT_LE(q, 127);
        const float err = std::fabs(ref[base + size_t(j)] - float(q) * s);
        ASSERT_LE(err, s / 2 + m / 2048.0f + 1e-9f) << "row " << r << " value " << g * kW8Group + j;
      }
    }
  }
}

TEST(RequantW8, ExactOnAnIntegerGrid) {
  // k = 64, n = 2. Row 0: group 0 holds integers up to ±127 (scale 1), group 1 is all zero (scale 0).
  // Row 1: multiples of 0.5 up to 63.5 (scale 0.5).
  std::vector<float> v(128, 0.0f);
  for (int j = 0; j < 32; ++j) {
    v[size_t(j)] = float((j * 17) % 255 - 127);
    v[size_t(64 + j)] = 0.5f * float((j * 29) % 255 - 127);
    v[size_t(96 + j)] = 0.5f * float(127 - j);
  }
  v[0] = 127.0f;
  v[64] = -63.5f;
  v[96] = 63.5f;
  const OwnedTensor t = make_tensor("blk.0.attn_q.weight", GgmlType::F32, {64, 2}, v);
  const HostWeights w = requantize_w8(t.info);
  EXPECT_EQ(w.n, 2);
  EXPECT_EQ(w.k, 64);
  ASSERT_EQ(w.scales.size(), 4u);
  EXPECT_EQ(half_to_float(w.scales[0]), 1.0f);
  EXPECT_EQ(w.scales[1], 0);
  EXPECT_EQ(half_to_float(w.scales[2]), 0.5f);
  EXPECT_EQ(half_to_float(w.scales[3]), 0.5f);
  for (int j = 0; j < 32; ++j) {
    EXPECT_EQ(w.q[size_t(j)], int8_t(v[size_t(j)]));
    EXPECT_EQ(w.q[size_t(32 + j)], 0);
    EXPECT_EQ(w.q[size_t(64 + j)], int8_t(v[size_t(64 + j)] * 2));
    EXPECT_EQ(w.q[size_t(96 + j)], int8_t(v[size_t(96 + j)] * 2));
  }
  expect_w8_matches(w, v);
}

TEST(RequantW8, ErrorBoundAgainstFp32) {
  // The formats whose values are not integer codes times one scale per 32, n = 300 rows (enough to
  // be split across threads). IQ4_XS (no quantiser here) from random blocks: its sub-blocks of 32
  // have the scale d·(ls - 32), which fp16 does not hold in general.
  const int64_t k = 256, n = 300;
  std::vector<OwnedTensor> tensors;
  for (GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::Q4_1, GgmlType::Q5_1, GgmlType::Q4_K, GgmlType::Q6_K}) {
    tensors.push_back(make_tensor("w", type, {k, n}, noise(size_t(k * n), 7, 0.08f)));
  }
  tensors.push_back(raw_tensor("w", GgmlType::IQ4_XS, {k, n}, random_blocks(size_t(n), 136, 8)));
  for (const OwnedTensor& t : tensors) {
    SCOPED_TRACE(ggml_type_name(t.info.type));
    const std::vector<float> ref = dequantize_tensor(t.info);  // what the file holds, in fp32
    const HostWeights w = requantize_w8(t.info);
    EXPECT_EQ(w.n, n);
    EXPECT_EQ(w.k, k);
    expect_w8_matches(w, ref);
  }
}

// A 32-value block of integer codes times one fp16 scale d is one W8 group (kW8Group = 32), taken
// over exactly: q = the code and scale = d, both negated where d < 0 (so that scales stay >= 0),
// and the W8 matrix holds the file's values to the bit: relative RMS error 0. Q4_0 and Q5_0 from
// the quantiser here (its d is negative where a block's largest value is positive); Q8_0 and
// IQ4_NL from random blocks with d of either sign (Q8_0's codes within ±127, as ggml writes them).
// The rounding rule alone would leave a relative RMS error of 0.38% (Q4_0), 0.38% (Q5_0), 0.31%
// (Q8_0) and 0.13% (IQ4_NL: only its blocks without the code -127) on these tensors.
TEST(RequantW8, ExactFromBlocksOfCodes) {
  const int64_t k = 256, n = 300;
  std::vector<OwnedTensor> tensors;
  for (GgmlType type : {GgmlType::Q4_0, GgmlType::Q5_0}) {
    tensors.push_back(make_tensor("w", type, {k, n}, noise(size_t(k * n), 16, 0.08f)));
  }
  std::vector<uint8_t> q8 = random_blocks(size_t(n * k / 32), 34, 18);
  for (size_t i = 0; i < q8.size(); ++i) {
    if (i % 34 >= 2 && q8[i] == 0x80) q8[i] = 0x81;  // code -128 to -127
  }
  tensors.push_back(raw_tensor("w", GgmlType::Q8_0, {k, n}, std::move(q8)));
  tensors.push_back(raw_tensor("w", GgmlType::IQ4_NL, {k, n}, random_blocks(size_t(n * k / 32), 18, 17)));
  for (const OwnedTensor& t : tensors) {
    SCOPED_TRACE(ggml_type_name(t.info.type));
    const std::vector<float> ref = dequantize_tensor(t.info);
    const HostWeights w = requantize_w8(t.info);
    ASSERT_EQ(w.q.size(), ref.size());
    EXPECT_EQ(w8_relative_rms_error(w, ref), 0.0);
    int64_t bv = 0, bb = 0;
    ggml_type_block(t.info.type, &bv, &bb);
    bool negative_d = false;
    for (size_t g = 0; g < w.scales.size(); ++g) {
      const half_t d = half_t(t.bytes[g * size_t(bb)] | t.bytes[g * size_t(bb) + 1] << 8);
      negative_d = negative_d || (d & 0x8000);
      ASSERT_EQ(w.scales[g], half_t(d & 0x7fff)) << "group " << g;  // |d|
      for (int j = 0; j < kW8Group; ++j) {
        const size_t i = g * kW8Group + size_t(j);
        ASSERT_EQ(float(w.q[i]) * half_to_float(w.scales[g]), ref[i]) << "value " << i;
      }
    }
    EXPECT_TRUE(negative_d) << "no block with a negative d: the sign case is not covered";
  }
}

// A block of codes that W8 cannot hold as it is goes by the rounding rule: a Q8_0 code -128 with
// d > 0, or with d < 0 (negated, 128). A d of zero (either sign) gives scale 0 and q 0, as an
// all-zero group does. Q8_0 {32, 4}, one block a row:
//   row 0: d = 0.25, codes j - 16 but code 0 = -128: values -32 and (j - 16)·0.25; the rule gives
//          scale fp16(32 / 127)
//   row 1: d = -0.5, codes as row 0: values 64 and (16 - j)·0.5; scale fp16(64 / 127)
//   row 2: d = -0.5, codes 6j - 100 (-100..86): exact, scale 0.5 and q = 100 - 6j (the rule would
//          give scale fp16(50 / 127))
//   row 3: d = -0, codes j - 16: scale 0, q 0
TEST(RequantW8, BlocksOfCodesThatW8CannotHoldAsTheyAre) {
  const half_t d[4] = {0x3400, 0xb800, 0xb800, 0x8000};
  std::vector<uint8_t> bytes(4 * 34);
  for (int r = 0; r < 4; ++r) {
    bytes[size_t(34 * r)] = uint8_t(d[r] & 0xff);
    bytes[size_t(34 * r + 1)] = uint8_t(d[r] >> 8);
    for (int j = 0; j < 32; ++j) {
      const int code = r == 2 ? 6 * j - 100 : r < 2 && j == 0 ? -128 : j - 16;
      bytes[size_t(34 * r + 2 + j)] = uint8_t(int8_t(code));
    }
  }
  const OwnedTensor t = raw_tensor("w", GgmlType::Q8_0, {32, 4}, bytes);
  const std::vector<float> ref = dequantize_tensor(t.info);
  EXPECT_EQ(ref[0], -32.0f);
  EXPECT_EQ(ref[32], 64.0f);
  const HostWeights w = requantize_w8(t.info);
  EXPECT_EQ(w.scales[0], float_to_half(32.0f / 127.0f));
  EXPECT_EQ(w.scales[1], float_to_half(64.0f / 127.0f));
  EXPECT_EQ(w.scales[2], kHalf05);
  EXPECT_EQ(w.scales[3], 0);
  for (int j = 0; j < 32; ++j) {
    for (int r = 0; r < 2; ++r) {
      const float s = half_to_float(w.scales[size_t(r)]), m = r ? 64.0f : 32.0f;
      EXPECT_LE(std::fabs(ref[size_t(32 * r + j)] - float(w.q[size_t(32 * r + j)]) * s), s / 2 + m / 2048.0f);
    }
    EXPECT_EQ(w.q[size_t(64 + j)], 100 - 6 * j);
    EXPECT_EQ(w.q[size_t(96 + j)], 0);
  }
}

TEST(RequantW8, RoundsHalfwayAwayFromZero) {
  // Group max 127·0.25 gives scale 0.25; 0.125 and -0.375 lie halfway between codes.
  std::vector<float> v(32, 0.0f);
  v[0] = 127 * 0.25f;
  v[1] = 0.125f;
  v[2] = -0.375f;
  const OwnedTensor t = make_tensor("w", GgmlType::F32, {32, 1}, v);
  const HostWeights w = requantize_w8(t.info);
  EXPECT_EQ(half_to_float(w.scales[0]), 0.25f);
  EXPECT_EQ(w.q[0], 127);
  EXPECT_EQ(w.q[1], 1);
  EXPECT_EQ(w.q[2], -2);
}

TEST(RequantW8, RejectsWhatItCannotRepresent) {
  auto expect_error = [](const TensorInfo& t, const std::string& needle) {
    try {
      requantize_w8(t);
      ADD_FAILURE() << "no error for " << t.name;
    } catch (const GgufError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("tensor '" + t.name + "'"), std::string::npos) << msg;
      EXPECT_NE(msg.find(needle), std::string::npos) << msg;
    }
  };
  const OwnedTensor flat = make_tensor("norm", GgmlType::F32, {64}, std::vector<float>(64, 1.0f));
  expect_error(flat.info, "needs a 2-D tensor, it has 1 dimensions");
  const OwnedTensor odd = make_tensor("odd", GgmlType::F32, {48, 2}, std::vector<float>(96, 1.0f));
  expect_error(odd.info, "row length 48 is not a multiple of the W8 group size 32");
  std::vector<float> big(64, 0.0f);
  big[5] = INFINITY;
  const OwnedTensor inf = make_tensor("inf", GgmlType::F32, {32, 2}, big);
  expect_error(inf.info, "row 0 holds values that are not finite or too large");
  std::vector<float> nan(64, 0.5f);
  nan[40] = NAN;
  const OwnedTensor with_nan = make_tensor("nan", GgmlType::F32, {32, 2}, nan);
  expect_error(with_nan.info, "row 1 holds values that are not finite");
  std::vector<float> huge(64, 0.0f);
  huge[3] = 1e10f;  // 1e10 / 127 overflows an fp16 scale
  const OwnedTensor with_huge = make_tensor("huge", GgmlType::F32, {32, 2}, huge);
  expect_error(with_huge.info, "too large for an fp16 scale");
  OwnedTensor q8k;
  q8k.bytes.resize(292);
  q8k.info.name = "q8k";
  q8k.info.type = GgmlType::Q8_K;
  q8k.info.dims = {256, 1};
  q8k.info.data = q8k.bytes.data();
  q8k.info.bytes = q8k.bytes.size();
  expect_error(q8k.info, "type Q8_K cannot be dequantised");
  OwnedTensor short_data = make_tensor("short", GgmlType::Q8_0, {64, 2}, std::vector<float>(128, 1.0f));
  short_data.info.bytes -= 1;
  expect_error(short_data.info, "data missing or shorter than its shape");
}

TEST(ConvertF16, RoundsEachValueToHalf) {
  const int64_t k = 256, n = 70;
  const OwnedTensor t = make_tensor("output.weight", GgmlType::Q6_K, {k, n}, noise(size_t(k * n), 9, 0.1f));
  const std::vector<float> ref = dequantize_tensor(t.info);
  const HostWeights w = convert_f16(t.info);
  EXPECT_EQ(w.type, WeightType::F16);
  EXPECT_EQ(w.n, n);
  EXPECT_EQ(w.k, k);
  ASSERT_EQ(w.f16.size(), ref.size());
  for (size_t i = 0; i < ref.size(); ++i) ASSERT_EQ(w.f16[i], float_to_half(ref[i])) << i;
  EXPECT_TRUE(w.q.empty());
}

// From Q8_0 the FP16 matrix also carries the blocks' int8 values and scales (HostMatrix's int8
// form): each fp16 value is fp16(q · scale), and the view hands both forms on. Appending rows keeps
// the form only where both parts have it.
TEST(ConvertF16, Q8_0CarriesItsInt8Form) {
  const int64_t k = 96, n = 70;
  const OwnedTensor t = make_tensor("token_embd.weight", GgmlType::Q8_0, {k, n}, noise(size_t(k * n), 14, 0.1f));
  const HostWeights w = convert_f16(t.info);
  const std::vector<float> ref = dequantize_tensor(t.info);
  ASSERT_EQ(w.q.size(), size_t(n * k));
  ASSERT_EQ(w.scales.size(), size_t(n * k / kW8Group));
  for (size_t i = 0; i < ref.size(); ++i) {
    ASSERT_EQ(w.f16[i], float_to_half(ref[i])) << i;
    ASSERT_EQ(w.f16[i], float_to_half(float(w.q[i]) * half_to_float(w.scales[i / kW8Group]))) << i;
  }
  const HostMatrix m = w.view();
  EXPECT_EQ(m.f16, w.f16.data());
  EXPECT_EQ(m.q, w.q.data());
  EXPECT_EQ(m.scales, w.scales.data());

  HostWeights both = w;
  both.append_rows(w);
  EXPECT_EQ(both.q.size(), size_t(2 * n * k));
  EXPECT_EQ(both.scales.size(), size_t(2 * n * k / kW8Group));
  HostWeights mixed = w;
  mixed.append_rows(convert_f16(make_tensor("w", GgmlType::F32, {k, 2}, noise(size_t(2 * k), 15, 0.1f)).info));
  EXPECT_EQ(mixed.n, n + 2);
  EXPECT_EQ(mixed.f16.size(), size_t((n + 2) * k));
  EXPECT_TRUE(mixed.q.empty());
  EXPECT_TRUE(mixed.scales.empty());
  EXPECT_EQ(mixed.view().q, nullptr);
}

// The lm_head's conversion: float types give fp16 values alone; Q8_0 the blocks as the int8 form
// (convert_f16's result); other quantised types the W8 requantisation, widened to fp16(q · scale),
// so that every value stays within the W8 rounding bound of the file's value; blocks of codes
// (Q4_0) exactly.
TEST(ConvertLmHead, QuantisedTypesCarryAnInt8Form) {
  const int64_t k = 512, n = 40;
  const std::vector<float> v = noise(size_t(k * n), 21, 0.1f);
  const OwnedTensor f32 = make_tensor("output.weight", GgmlType::F32, {k, n}, v);
  const HostWeights wf = convert_lm_head(f32.info);
  EXPECT_EQ(wf.type, WeightType::F16);
  EXPECT_TRUE(wf.q.empty());
  EXPECT_EQ(wf.f16, convert_f16(f32.info).f16);

  const OwnedTensor q8 = make_tensor("output.weight", GgmlType::Q8_0, {k, n}, v);
  const HostWeights w8 = convert_lm_head(q8.info), f8 = convert_f16(q8.info);
  EXPECT_EQ(w8.f16, f8.f16);
  EXPECT_EQ(w8.q, f8.q);
  EXPECT_EQ(w8.scales, f8.scales);

  for (GgmlType type : {GgmlType::Q6_K, GgmlType::Q4_K, GgmlType::Q4_0}) {
    SCOPED_TRACE(ggml_type_name(type));
    const OwnedTensor t = make_tensor("output.weight", type, {k, n}, v);
    const HostWeights w = convert_lm_head(t.info), r = requantize_w8(t.info);
    const std::vector<float> ref = dequantize_tensor(t.info);
    EXPECT_EQ(w.type, WeightType::F16);
    EXPECT_EQ(w.q, r.q);
    EXPECT_EQ(w.scales, r.scales);
    ASSERT_EQ(w.f16.size(), ref.size());
    for (size_t i = 0; i < ref.size(); ++i) {
      const float scale = half_to_float(w.scales[i / kW8Group]), value = half_to_float(w.f16[i]);
      ASSERT_EQ(w.f16[i], float_to_half(float(w.q[i]) * scale)) << i;
      if (type == GgmlType::Q4_0) {
        ASSERT_EQ(value, half_to_float(float_to_half(ref[i]))) << i;  // as numbers: -0 == +0
      } else {
        ASSERT_LE(std::fabs(value - ref[i]), scale / 2 + 127 * scale * 0x1p-10f) << i;
      }
    }
  }
}

TEST(DequantizeTensor, AnyShapeAndType) {
  const std::vector<float> v = noise(2 * 3 * 64, 11, 2.0f);
  const OwnedTensor t3 = make_tensor("t", GgmlType::F16, {64, 3, 2}, v);
  const std::vector<float> y = dequantize_tensor(t3.info);
  ASSERT_EQ(y.size(), v.size());
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(y[i], round_to_half(v[i]));

  const OwnedTensor bias = make_tensor("bias", GgmlType::F32, {5}, {1, 2, 3, 4, 5});
  EXPECT_EQ(dequantize_tensor(bias.info), (std::vector<float>{1, 2, 3, 4, 5}));

  const OwnedTensor q = make_tensor("q", GgmlType::Q5_0, {64}, noise(64, 12, 1.0f));
  std::vector<float> row(64);
  dequantize_row(GgmlType::Q5_0, q.bytes.data(), row.data(), 64);
  EXPECT_EQ(dequantize_tensor(q.info), row);
}

TEST(HostWeightsView, PointsAtTheOwnedStorage) {
  const OwnedTensor t = make_tensor("w", GgmlType::F32, {64, 3}, noise(192, 13, 1.0f));
  const HostWeights w8 = requantize_w8(t.info);
  const HostMatrix m8 = w8.view();
  EXPECT_EQ(m8.type, WeightType::W8);
  EXPECT_EQ(m8.n, 3);
  EXPECT_EQ(m8.k, 64);
  EXPECT_EQ(m8.q, w8.q.data());
  EXPECT_EQ(m8.scales, w8.scales.data());
  EXPECT_EQ(m8.f16, nullptr);
  const HostWeights f16 = convert_f16(t.info);
  const HostMatrix mf = f16.view();
  EXPECT_EQ(mf.type, WeightType::F16);
  EXPECT_EQ(mf.f16, f16.f16.data());
  EXPECT_EQ(mf.q, nullptr);
  EXPECT_EQ(mf.n, 3);
  EXPECT_EQ(mf.k, 64);
}

}  // namespace
}  // namespace tllm
