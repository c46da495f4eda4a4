// Conformance of matmul_m1 and matmul: W8 and F16 weights, bias, accumulate, edge shapes, exact
// integer cases, the fused rmsnorm prologue and SwiGLU epilogue, and the argmax epilogue. matmul
// is checked at short prompts (m = 2 .. 64, the benchmarked model's projections at 2, 30 and 64
// rows: on CUDA the weight-streaming kernel, k split over blocks for ffn_down) and at longer ones
// (m = 65 and up: the tiled kernel).
//
// Tolerance of the random cases: fp32 accumulation, fp32_sum_error(k) · (Σ|x·w| + |bias| + |y0|).
// The weights are exact in both places (int8 · fp16 scale fits in fp32) and x is fp16 in both, so
// summation order is the only difference from the fp64 reference. A wrong or missing term changes
// an output by about Σ|x·w| / k, several times that bound even at k = 4864.
#include <algorithm>
#include <cmath>
#include <functional>

#include "ops/conformance.h"
#include "ops/reference.h"

namespace tllm::test {
namespace {

struct MatmulInputs {
  HostWeights w;
  std::vector<half_t> x;   // (m, k)
  int64_t m = 1;
  std::vector<float> bias; // (n) or empty
  std::vector<float> y0;   // (m, n): the y an accumulating matmul adds to, or empty
};

MatmulInputs random_inputs(Rng& rng, WeightType type, int64_t m, int64_t n, int64_t k, bool bias,
                           bool accumulate) {
  MatmulInputs in;
  in.w = type == WeightType::W8 ? random_w8(rng, n, k) : random_f16(rng, n, k);
  in.x = random_halves(rng, size_t(m * k), -1.0f, 1.0f);
  in.m = m;
  if (bias) in.bias = random_floats(rng, size_t(n), -0.5f, 0.5f);
  if (accumulate) in.y0 = random_floats(rng, size_t(m * n), -2.0f, 2.0f);
  return in;
}

class MatmulTest : public OpsTest {
 protected:
  // y on the backend; matmul_m1 when `m1`, else matmul.
  std::vector<float> run(const MatmulInputs& in, bool m1) {
    const int64_t n = in.w.n;
    auto w = be().upload_matrix(in.w.view());
    Buffer x = upload(in.x);
    Buffer bias = in.bias.empty() ? Buffer() : upload(in.bias);
    Buffer y = in.y0.empty() ? alloc<float>(size_t(in.m * n)) : upload(in.y0);
    MatmulDesc d;
    d.w = w.get();
    d.x = x.as<half_t>();
    d.bias = in.bias.empty() ? nullptr : bias.as<float>();
    d.y = y.as<float>();
    d.m = in.m;
    d.accumulate = !in.y0.empty();
    if (m1) {
      be().matmul_m1(d);
    } else {
      be().matmul(d);
    }
    return download<float>(y);
  }

  // matmul_m1 with the argmax epilogue (m = 1, bias, no accumulation): y and the index.
  std::pair<std::vector<float>, int32_t> run_argmax(const MatmulInputs& in) {
    auto w = be().upload_matrix(in.w.view());
    Buffer x = upload(in.x), bias = upload(in.bias);
    Buffer y = alloc<float>(size_t(in.w.n));
    Buffer idx = upload(std::vector<int32_t>{-7});
    MatmulDesc d;
    d.w = w.get();
    d.x = x.as<half_t>();
    d.bias = bias.as<float>();
    d.y = y.as<float>();
    d.argmax = idx.as<int32_t>();
    be().matmul_m1(d);
    return {download<float>(y), download<int32_t>(idx)[0]};
  }

  // Runs the case and compares it with the reference under the accumulation tolerance.
  void check(const MatmulInputs& in, bool m1) {
    const int64_t n = in.w.n, k = in.w.k;
    std::vector<double> mag;
    std::vector<double> want = ref::matmul(ref::dequantize(in.w.view()), n, k, to_float(in.x), in.m,
                                           in.bias.empty() ? nullptr : &in.bias, &mag);
    std::vector<double> tol(want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      double scale = mag[i];
      if (!in.bias.empty()) scale += std::fabs(in.bias[i % size_t(n)]);
      if (!in.y0.empty()) {
        want[i] += in.y0[i];
        scale += std::fabs(in.y0[i]);
      }
      tol[i] = fp32_sum_error(k) * scale;
    }
    EXPECT_TRUE(all_close(run(in, m1), want, tol))
        << weight_type_name(in.w.type) << " m=" << in.m << " n=" << n << " k=" << k;
  }
};
TLLM_OPS_INSTANTIATE(MatmulTest);

struct Shape {
  int64_t n, k;
};

// Decode shapes of the benchmarked model (n_embd 896, n_ff 4864), those of Llama-3.2-1B (n_embd
// 2048, n_ff 8192; on CUDA ffn_down takes two rows a warp, and with an odd n one) and edges: n = 1,
// odd n, k = one W8 group, k a multiple of 32 but not of 128 or 256, k an odd number of 64-value
// sets (960), k = 64.
const Shape kW8Shapes[] = {{896, 896}, {1152, 896}, {896, 4864}, {3072, 2048}, {2048, 2048}, {2048, 8192},
                           {2047, 8192}, {1, 32}, {7, 160}, {33, 800}, {255, 288}, {40, 960}, {9, 64}};

TEST_P(MatmulTest, W8M1Random) {
  Rng rng(101);
  for (const Shape& s : kW8Shapes) check(random_inputs(rng, WeightType::W8, 1, s.n, s.k, false, false), true);
}

TEST_P(MatmulTest, F16M1Random) {
  Rng rng(102);
  // As W8, plus k that is no multiple of 32 (F16 has no groups), and a vocabulary-sized n.
  const Shape shapes[] = {{896, 896}, {1, 32}, {5, 33}, {3, 72}, {129, 200}, {151936, 64}};
  for (const Shape& s : shapes) check(random_inputs(rng, WeightType::F16, 1, s.n, s.k, false, false), true);
}

TEST_P(MatmulTest, MatmulRandom) {
  Rng rng(103);
  for (WeightType type : {WeightType::W8, WeightType::F16}) {
    for (int64_t m : {1, 2, 3, 17, 64, 65, 130}) {
      check(random_inputs(rng, type, m, 136, 224, false, false), false);
      check(random_inputs(rng, type, m, 7, 32, false, false), false);
    }
  }
  check(random_inputs(rng, WeightType::W8, 33, 896, 896, false, false), false);
  // Few output tiles for 100 rows: the tiled kernel splits k.
  check(random_inputs(rng, WeightType::W8, 100, 896, 896, false, false), false);
  check(random_inputs(rng, WeightType::F16, 100, 896, 896, true, true), false);
  // Split k with an odd n (no 4-value stores), splits of unequal length (25 k tiles in 5), a bias
  // and accumulation; F16 in 8 splits of a part-filled last k tile.
  check(random_inputs(rng, WeightType::W8, 100, 899, 800, true, true), false);
  check(random_inputs(rng, WeightType::F16, 70, 130, 1000, true, false), false);
}

// Longer prompts whose few output tiles make the CUDA tiled kernel split k (the benchmarked model's
// projections at 128 and 256 rows, and at 512 with k = 896; with a bias and accumulating): the
// result is right and the same to the bit in every run, whatever order the splits finish in (a sum
// in arrival order varies in its last bits from run to run).
TEST_P(MatmulTest, SplitKIsDeterministic) {
  Rng rng(108);
  const Shape shapes[] = {{1152, 896}, {896, 896}, {896, 4864}};
  for (int64_t m : {128, 256, 512}) {
    for (const Shape& sh : shapes) {
      if (m == 512 && sh.k != 896) continue;  // the reference's time
      const MatmulInputs in = random_inputs(rng, WeightType::W8, m, sh.n, sh.k, sh.n == 1152, sh.n == 896);
      check(in, false);
      const std::vector<float> first = run(in, false);
      for (int i = 0; i < 4; ++i) {
        EXPECT_EQ(run(in, false), first) << "m=" << m << " n=" << sh.n << " k=" << sh.k << ", run " << i + 2;
      }
    }
  }
}

// Short prompts: the benchmarked model's projections at 2, 30 and 64 rows (qkv_proj with its bias,
// attn_out and ffn_down accumulating into the residual; ffn_down's k = 4864 is split over blocks
// on CUDA), then edges: odd n, k of one W8 group, a single output column, k no multiple of 8 (F16),
// and split k with a bias and a last block of output columns only partly filled.
TEST_P(MatmulTest, ShortPrompt) {
  Rng rng(107);
  for (WeightType type : {WeightType::W8, WeightType::F16}) {
    for (int64_t m : {2, 30, 64}) {
      check(random_inputs(rng, type, m, 1152, 896, true, false), false);
      check(random_inputs(rng, type, m, 896, 896, false, true), false);
      check(random_inputs(rng, type, m, 896, 4864, false, true), false);
    }
    check(random_inputs(rng, type, 3, 33, 32, true, false), false);
    check(random_inputs(rng, type, 3, 1, 64, false, true), false);
    check(random_inputs(rng, type, 9, 17, 96, true, true), false);
    check(random_inputs(rng, type, 40, 255, 288, true, false), false);
    check(random_inputs(rng, type, 30, 200, 4864, true, true), false);  // split k, a part-filled row block
  }
  check(random_inputs(rng, WeightType::F16, 3, 7, 33, true, false), false);
  check(random_inputs(rng, WeightType::F16, 30, 9, 200, false, true), false);
}

TEST_P(MatmulTest, Bias) {
  Rng rng(104);
  for (WeightType type : {WeightType::W8, WeightType::F16}) {
    check(random_inputs(rng, type, 1, 1152, 896, true, false), true);
    check(random_inputs(rng, type, 1, 31, 96, true, false), false);
    check(random_inputs(rng, type, 17, 31, 96, true, false), false);
  }
}

TEST_P(MatmulTest, Accumulate) {
  Rng rng(105);
  for (WeightType type : {WeightType::W8, WeightType::F16}) {
    for (bool bias : {false, true}) {
      check(random_inputs(rng, type, 1, 896, 4864, bias, true), true);
      check(random_inputs(rng, type, 1, 2048, 8192, bias, true), false);
      check(random_inputs(rng, type, 1, 13, 64, bias, true), false);
      check(random_inputs(rng, type, 17, 13, 64, bias, true), false);
    }
  }
}

// Small integer weights (W8 scale 1, or F16) and activations, integer bias and y0: every partial sum
// is an integer below 2^24, so the result is exact in fp32 whatever the order and must match bit
// for bit.
TEST_P(MatmulTest, IntegerExact) {
  Rng rng(106);
  for (WeightType type : {WeightType::W8, WeightType::F16}) {
    for (int64_t m : {1, 3, 17, 30, 64, 65}) {
      for (bool m1 : {true, false}) {
        if (m1 && m != 1) continue;
        const int64_t n = 37, k = type == WeightType::W8 ? 4128 : 4100;
        MatmulInputs in;
        in.w = type == WeightType::W8 ? integer_w8(rng, n, k, 8) : integer_f16(rng, n, k, 8);
        in.m = m;
        for (int64_t i = 0; i < m * k; ++i) in.x.push_back(float_to_half(float(rng.between(-8, 8))));
        for (int64_t j = 0; j < n; ++j) in.bias.push_back(float(rng.between(-100, 100)));
        for (int64_t i = 0; i < m * n; ++i) in.y0.push_back(float(rng.between(-1000, 1000)));
        std::vector<double> exact = ref::matmul(ref::dequantize(in.w.view()), n, k, to_float(in.x), m,
                                                &in.bias);
        for (size_t i = 0; i < exact.size(); ++i) exact[i] += in.y0[i];
        EXPECT_TRUE(all_equal(run(in, m1), to_float(exact)))
            << weight_type_name(type) << " m=" << m << (m1 ? " matmul_m1" : " matmul");
      }
    }
  }
}

// The argmax epilogue of matmul_m1: y exactly as without it, and *argmax the index of the largest
// y (the first on ties) exactly, as the argmax op defines it on the backend's own y. A second run
// copies the winning row to an earlier index, so that two rows tie for the maximum.
TEST_P(MatmulTest, ArgmaxEpilogue) {
  Rng rng(131);
  const Shape shapes[] = {{1, 32}, {7, 64}, {5000, 896}, {40000, 64}};
  for (WeightType type : {WeightType::W8, WeightType::F16}) {
    for (const Shape& sh : shapes) {
      MatmulInputs in = random_inputs(rng, type, 1, sh.n, sh.k, true, false);
      for (int tie = 0; tie < 2; ++tie) {
        const auto [got, got_idx] = run_argmax(in);
        const std::string what = std::string(weight_type_name(type)) + " n=" + std::to_string(sh.n) +
                                 " k=" + std::to_string(sh.k) + (tie ? " (tied rows)" : "");
        EXPECT_TRUE(all_equal(got, run(in, true))) << what << ": y";
        EXPECT_EQ(got_idx, ref::argmax(got)) << what;
        if (tie == 1 || sh.n < 2) break;
        // Row `best` copied to an earlier row, with its bias: both give the same y.
        const int64_t best = ref::argmax(got), earlier = best / 2;
        if (best == 0) break;
        auto copy_row = [&](auto& rows, int64_t len) {
          std::copy(rows.begin() + best * len, rows.begin() + (best + 1) * len, rows.begin() + earlier * len);
        };
        if (type == WeightType::W8) {
          copy_row(in.w.q, sh.k);
          copy_row(in.w.scales, sh.k / kW8Group);
        } else {
          copy_row(in.w.f16, sh.k);
        }
        in.bias[size_t(earlier)] = in.bias[size_t(best)];
      }
    }
  }
}

// An F16 matrix that comes with its int8 form (HostMatrix), which a backend may keep instead of the
// fp16 values (CUDA does: Matrix::f16_as_w8), is the same matrix as its fp16 values. With a one-hot
// x, y is one column of it (one product with 1.0), so every weight the backend rebuilds must be its
// fp16 value bit for bit, for normal fp16 products and for subnormal ones (scales down to 1e-7, of
// which many are subnormal themselves). Random x matches the reference as the F16 cases do, at one
// row and at several; the argmax epilogue picks the first maximum of the backend's own y.
TEST_P(MatmulTest, F16Int8Form) {
  Rng rng(133);
  const std::pair<float, float> scale_ranges[] = {{0.0005f, 0.002f}, {1e-7f, 1e-6f}};
  for (const auto& [lo, hi] : scale_ranges) {
    const int64_t n = 300, k = 96;
    const HostWeights w = random_f16_int8_form(rng, n, k, lo, hi);
    auto wm = be().upload_matrix(w.view());
    const size_t w8_bytes = size_t(n * k) + size_t(n * k / kW8Group) * sizeof(half_t);
    EXPECT_EQ(wm->stream_bytes(), wm->f16_as_w8() ? w8_bytes : size_t(n * k) * sizeof(half_t));
    Buffer y = alloc<float>(size_t(n));
    for (int64_t j : {0, 1, 15, 16, 31, 32, 95}) {
      std::vector<half_t> x(size_t(k), half_t(0));
      x[size_t(j)] = float_to_half(1.0f);
      Buffer xb = upload(x);
      MatmulDesc d;
      d.w = wm.get();
      d.x = xb.as<half_t>();
      d.y = y.as<float>();
      be().matmul_m1(d);
      std::vector<float> want(static_cast<size_t>(n));
      for (int64_t r = 0; r < n; ++r) want[size_t(r)] = half_to_float(w.f16[size_t(r * k + j)]);
      EXPECT_TRUE(all_equal(download<float>(y), want)) << "column " << j << ", scales " << lo << ".." << hi;
    }
  }
  // Rows that are not whole blocks of 16, k that is not whole steps of 128 (CUDA's kernel), more
  // row blocks than a GPU holds warps (70,000 rows: several per warp), and an x past 48 KB of
  // shared memory (CUDA stages it as padded fp16: 2.25 bytes a value).
  for (const Shape& sh : {Shape{5000, 896}, Shape{7, 32}, Shape{33, 800}, Shape{70000, 64}, Shape{40, 24608}}) {
    MatmulInputs in = random_inputs(rng, WeightType::F16, 1, sh.n, sh.k, true, false);
    in.w = random_f16_int8_form(rng, sh.n, sh.k);
    check(in, true);
    for (int64_t m : {3, 30}) {
      in.m = m;
      in.x = random_halves(rng, size_t(m * sh.k), -1.0f, 1.0f);
      in.y0 = random_floats(rng, size_t(m * sh.n), -2.0f, 2.0f);
      check(in, false);
    }
    in.m = 1;
    in.x = random_halves(rng, size_t(sh.k), -1.0f, 1.0f);
    in.y0.clear();
    const auto [y, idx] = run_argmax(in);
    EXPECT_EQ(idx, ref::argmax(y)) << "argmax n=" << sh.n;
  }
}

// ---- fused forms ---------------------------------------------------------------------------------

class MatmulFusedTest : public MatmulTest {
 protected:
  struct Fused {
    HostWeights w;
    int64_t m = 1;
    std::vector<float> norm_x;       // (m, k) or empty: x given directly
    std::vector<float> norm_weight;  // (k)
    std::vector<half_t> x;           // (m, k) when norm_x is empty
    bool swiglu = false;
  };
  static constexpr float kEps = 1e-6f;

  // The backend's y (m, n), or out16 (m, n/2) widened to float for SwiGLU. `before` runs just
  // before the matmul, on the same stream.
  std::vector<float> run_fused(const Fused& f, bool m1, const std::function<void()>& before = {}) {
    const int64_t n = f.w.n, k = f.w.k;
    auto w = be().upload_matrix(f.w.view());
    Buffer norm_x = f.norm_x.empty() ? Buffer() : upload(f.norm_x);
    Buffer norm_w = f.norm_x.empty() ? Buffer() : upload(f.norm_weight);
    // The x buffer the prologue must ignore holds garbage, so reading it shows.
    Buffer x = f.norm_x.empty() ? upload(f.x) : upload(std::vector<half_t>(size_t(f.m * k), 0x7bff));
    Buffer y = alloc<float>(size_t(f.m * n));
    Buffer out16 = alloc<half_t>(size_t(f.m * n / 2));
    MatmulDesc d;
    d.w = w.get();
    d.x = x.as<half_t>();
    d.y = y.as<float>();
    d.m = f.m;
    if (!f.norm_x.empty()) {
      d.norm_x = norm_x.as<float>();
      d.norm_weight = norm_w.as<float>();
      d.norm_eps = kEps;
    }
    if (f.swiglu) {
      d.epilogue = MatmulEpilogue::SwiGLU;
      d.out16 = out16.as<half_t>();
    }
    if (before) before();
    if (m1) {
      be().matmul_m1(d);
    } else {
      be().matmul(d);
    }
    return f.swiglu ? to_float(download<half_t>(out16)) : download<float>(y);
  }

  // Reference of the unfused sequence: rmsnorm -> fp16 -> matmul [-> silu(gate) * up -> fp16].
  void check_fused(const Fused& f, bool m1, const std::function<void()>& before = {}) {
    const int64_t n = f.w.n, k = f.w.k;
    const std::vector<float> w = ref::dequantize(f.w.view());
    std::vector<float> x = to_float(f.x);
    // With the prologue, the backend's fp32 rmsnorm (within 1e-5, as in rmsnorm_test) may round an
    // x to the neighbouring fp16 value where the exact one lies near a midpoint; such an x moves
    // output j by its slack times |w[j][c]|.
    std::vector<float> x_slack(size_t(f.m * k), 0.0f);
    if (!f.norm_x.empty()) {
      const std::vector<double> x_exact = ref::rmsnorm(f.norm_x, f.norm_weight, f.m, k, kEps);
      x = round_half(x_exact);
      x_slack = to_float(half_rounding_slack(x_exact, 1e-5));
    }
    std::vector<float> w_abs(w.size());
    for (size_t i = 0; i < w.size(); ++i) w_abs[i] = std::fabs(w[i]);
    const std::vector<double> y_slack = ref::matmul(w_abs, n, k, x_slack, f.m, nullptr);
    std::vector<double> mag;
    const std::vector<double> y = ref::matmul(w, n, k, x, f.m, nullptr, &mag);
    // Error of one projection: fp32 accumulation plus the prologue's rounding slack.
    std::vector<double> y_tol(y.size());
    for (size_t i = 0; i < y.size(); ++i) y_tol[i] = fp32_sum_error(k) * mag[i] + y_slack[i];
    const std::vector<float> got = run_fused(f, m1, before);
    if (!f.swiglu) {
      EXPECT_TRUE(all_close(got, y, y_tol)) << "rmsnorm prologue m=" << f.m << " n=" << n << " k=" << k;
      return;
    }
    const int64_t n_ff = n / 2;
    std::vector<double> want(size_t(f.m * n_ff)), tol(want.size());
    for (int64_t r = 0; r < f.m; ++r) {
      for (int64_t j = 0; j < n_ff; ++j) {
        const size_t gi = size_t(r * n + j), ui = gi + size_t(n_ff), o = size_t(r * n_ff + j);
        const double g = y[gi], u = y[ui];
        want[o] = ref::silu(g) * u;
        // fp16 output rounding (one ULP, plus 1e-6 for a GPU's approximate exp) and the projection
        // errors carried through: |d silu/dg| <= 1.1, so 1.1·|u|·tol(g) + |silu(g)|·tol(u).
        tol[o] = (kHalfUlp + 1e-6) * std::fabs(want[o]) + kHalfSubnormal +
                 1.1 * std::fabs(u) * y_tol[gi] + std::fabs(ref::silu(g)) * y_tol[ui];
      }
    }
    EXPECT_TRUE(all_close(got, want, tol)) << (f.norm_x.empty() ? "" : "rmsnorm prologue + ")
                                           << "SwiGLU m=" << f.m << " n_ff=" << n_ff << " k=" << k;
  }

  // int8_form: an F16 matrix with its int8 form (see MatmulTest.F16Int8Form).
  Fused make(Rng& rng, WeightType type, int64_t m, int64_t n, int64_t k, bool norm, bool swiglu,
             bool int8_form = false) {
    Fused f;
    f.w = type == WeightType::W8 ? random_w8(rng, n, k)
          : int8_form            ? random_f16_int8_form(rng, n, k)
                                 : random_f16(rng, n, k);
    f.m = m;
    if (norm) {
      f.norm_x = random_floats(rng, size_t(m * k), -3.0f, 3.0f);
      f.norm_weight = random_floats(rng, size_t(k), 0.5f, 1.5f);
    } else {
      f.x = random_halves(rng, size_t(m * k), -1.0f, 1.0f);
    }
    f.swiglu = swiglu;
    return f;
  }
};
TLLM_OPS_INSTANTIATE(MatmulFusedTest);

TEST_P(MatmulFusedTest, RmsNormPrologue) {
  Rng rng(201);
  for (WeightType type : {WeightType::W8, WeightType::F16}) {
    check_fused(make(rng, type, 1, 1152, 896, true, false), true);
    check_fused(make(rng, type, 1, 9, 96, true, false), false);
    check_fused(make(rng, type, 17, 9, 96, true, false), false);
  }
}

// The fusions on an F16 matrix in its int8 form (the lm_head's prologue, and on CUDA the others as
// kernels of their own after the product), at one row and at several.
TEST_P(MatmulFusedTest, F16Int8Form) {
  Rng rng(205);
  check_fused(make(rng, WeightType::F16, 1, 5000, 896, true, false, true), true);
  check_fused(make(rng, WeightType::F16, 3, 9, 96, true, false, true), false);
  check_fused(make(rng, WeightType::F16, 1, 2 * 33, 160, true, true, true), true);
  check_fused(make(rng, WeightType::F16, 5, 2 * 33, 160, false, true, true), false);
}

TEST_P(MatmulFusedTest, SwiGlu) {
  Rng rng(202);
  for (WeightType type : {WeightType::W8, WeightType::F16}) {
    check_fused(make(rng, type, 1, 2 * 4864, 896, false, true), true);
    check_fused(make(rng, type, 1, 2 * 7, 64, false, true), false);
    check_fused(make(rng, type, 17, 2 * 7, 64, false, true), false);
  }
}

// ffn_gate_up of the benchmarked model and at Llama-3.2-1B's width (1,001 pairs: a last block of
// pairs part past the end), then one set of 64 values.
TEST_P(MatmulFusedTest, RmsNormPrologueSwiGlu) {
  Rng rng(203);
  for (WeightType type : {WeightType::W8, WeightType::F16}) {
    check_fused(make(rng, type, 1, 2 * 4864, 896, true, true), true);
    check_fused(make(rng, type, 1, 2 * 1001, 2048, true, true), true);
    check_fused(make(rng, type, 1, 2 * 13, 64, true, true), true);
    check_fused(make(rng, type, 5, 2 * 33, 160, true, true), false);
    check_fused(make(rng, type, 65, 2 * 33, 160, true, true), false);
  }
}

// ffn_gate_up as a decode step runs it: right after a decode attention with the output projection
// fused in (the benchmarked model's 14/2 heads of 64 at 200 of at most 256 rows), where the CUDA
// backend takes the GEMV two SwiGLU pairs a warp (w8a16_matmul_m1_rmsnorm_swiglu_x2, 16 pairs a
// block). The model's 4,864 pairs, then 4,863 and 4,100, which leave a last block's second pairs
// (and at 4,100 half its warps) past the end. Where the backend traces kernels and the fused
// attention ran, the two-pairs form must have followed it.
TEST_P(MatmulFusedTest, RmsNormPrologueSwiGluAfterAttention) {
  Rng rng(206);
  constexpr int kHeads = 14, kHeadsKv = 2, kHeadDim = 64, kCtx = 256, kRows = 200, kEmbd = kHeads * kHeadDim;
  Buffer q = upload(random_floats(rng, size_t(kEmbd), -1.0f, 1.0f));
  Buffer kc = upload(random_halves(rng, size_t(kHeadsKv) * kCtx * kHeadDim, -1.0f, 1.0f));
  Buffer vc = upload(random_halves(rng, size_t(kHeadsKv) * kCtx * kHeadDim, -1.0f, 1.0f));
  Buffer out = alloc<half_t>(size_t(kEmbd)), y = alloc<float>(size_t(kEmbd));
  Buffer n_kv = upload(std::vector<int32_t>{kRows});
  auto wo = be().upload_matrix(random_w8(rng, kEmbd, kEmbd).view());
  AttentionDecodeDesc a;
  a.q = q.as<float>();
  a.k_cache = kc.as<half_t>();
  a.v_cache = vc.as<half_t>();
  a.out = out.as<half_t>();
  a.n_kv = n_kv.as<int32_t>();
  a.n_head = kHeads;
  a.n_head_kv = kHeadsKv;
  a.head_dim = kHeadDim;
  a.n_ctx = kCtx;
  a.scale = 0.125f;
  a.wo = wo.get();
  a.y = y.as<float>();
  a.max_n_kv = kCtx;
  const auto attention = [&] { be().attention_decode(a); };
  for (int64_t n_ff : {4864, 4863, 4100}) {
    const bool traced = n_ff == 4864 && be().trace_begin();
    check_fused(make(rng, WeightType::W8, 1, 2 * n_ff, kEmbd, true, true), true, attention);
    if (!traced) continue;
    bool fused_attention = false, two_pairs = false;
    for (const TraceRecord& r : be().trace_end()) {
      if (r.name.find("w8a16_matmul_m1_attention_decode") != std::string::npos) fused_attention = true;
      if (r.name.find("w8a16_matmul_m1_rmsnorm_swiglu_x2") != std::string::npos) two_pairs = fused_attention;
    }
    EXPECT_EQ(two_pairs, fused_attention) << "the SwiGLU GEMV after the fused attention";
  }
}

// Short prompts with the fusions: the benchmarked model's qkv_proj (rmsnorm prologue) at 2, 12, 30
// and 64 rows and its ffn_gate_up (prologue and SwiGLU) at 12 and 30 rows, W8 also at 2 and 64 rows and
// without the prologue, F16 at 40 rows (at 33 to 64 rows CUDA splits SwiGLU's k over blocks); then
// odd n_ff with k of one W8 group, and k no multiple of 8 (F16).
TEST_P(MatmulFusedTest, ShortPrompt) {
  Rng rng(204);
  for (WeightType type : {WeightType::W8, WeightType::F16}) {
    for (int64_t m : {2, 12, 30, 64}) check_fused(make(rng, type, m, 1152, 896, true, false), false);
    for (int64_t m : {12, 30}) check_fused(make(rng, type, m, 2 * 4864, 896, true, true), false);
    check_fused(make(rng, type, 3, 2 * 33, 32, true, true), false);
    check_fused(make(rng, type, 3, 2 * 33, 32, false, true), false);
    check_fused(make(rng, type, 20, 9, 96, true, false), false);
  }
  check_fused(make(rng, WeightType::W8, 2, 2 * 4864, 896, true, true), false);
  check_fused(make(rng, WeightType::W8, 64, 2 * 4864, 896, true, true), false);
  check_fused(make(rng, WeightType::W8, 17, 2 * 4864, 896, false, true), false);
  check_fused(make(rng, WeightType::F16, 40, 2 * 24, 896, true, true), false);
  check_fused(make(rng, WeightType::F16, 7, 2 * 5, 33, true, true), false);
  check_fused(make(rng, WeightType::F16, 7, 11, 33, true, false), false);
}

}  // namespace
}  // namespace tllm::test
