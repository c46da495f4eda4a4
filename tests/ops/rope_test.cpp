// Conformance of rope (both pair layouts, several positions and theta, with and without the
// per-pair frequency factors of rope scaling) and of the fused qkv_rope_append, against the
// reference of rope followed by kv_append.
//
// Tolerance of a rotated pair of norm r: r · (1e-5 + 1e-6 · pos). The rotation itself costs a few
// fp32 ULP of r (1e-5 leaves room); the angle pos · theta^(-2j/head_dim) computed in fp32 and a
// GPU's fast sin/cos err by up to about 6e-7 · pos radians (a few ULP of the frequency times pos,
// and argument reduction that degrades with |angle|), and an angle error δ moves the pair by r·δ.
#include <cmath>

#include "ops/conformance.h"
#include "ops/reference.h"

namespace tllm::test {
namespace {

// Frequency factors of the shape Llama 3.1's rope scaling gives (factor 8, 8192 original context):
// 1 for the fast pairs, 8 for the slow ones, a smooth ramp between.
std::vector<float> llama3_factors(int head_dim) {
  const int half = head_dim / 2;
  std::vector<float> f(static_cast<size_t>(half));
  for (int j = 0; j < half; ++j) {
    const double t = double(j) / double(half - 1);
    f[size_t(j)] = t < 0.4 ? 1.0f : t > 0.8 ? 8.0f : float(1.0 + 7.0 * (t - 0.4) / 0.4);
  }
  return f;
}

// Tolerances for rows of n_heads heads laid out as in `x` (rows of row_stride values, heads at the
// start of each row), per the rule above; values outside the heads get 0.
std::vector<double> rope_tolerance(const std::vector<float>& x, int64_t row_stride, const std::vector<int32_t>& pos,
                                   int n_heads, int head_dim, RopeMode mode) {
  std::vector<double> tol(x.size(), 0.0);
  const int half_dim = head_dim / 2;
  for (size_t r = 0; r < pos.size(); ++r) {
    for (int h = 0; h < n_heads; ++h) {
      const size_t base = r * size_t(row_stride) + size_t(h) * size_t(head_dim);
      for (int j = 0; j < half_dim; ++j) {
        const size_t a = base + size_t(mode == RopeMode::Normal ? 2 * j : j);
        const size_t b = base + size_t(mode == RopeMode::Normal ? 2 * j + 1 : j + half_dim);
        tol[a] = tol[b] = std::hypot(double(x[a]), double(x[b])) * (1e-5 + 1e-6 * pos[r]);
      }
    }
  }
  return tol;
}

class RopeTest : public OpsTest {
 protected:
  void check(Rng& rng, int n_heads, int head_dim, const std::vector<int32_t>& pos, float theta, RopeMode mode,
             const std::vector<float>& factors = {}) {
    const std::vector<float> x = random_floats(rng, pos.size() * size_t(n_heads) * size_t(head_dim), -2.0f, 2.0f);
    Buffer xb = upload(x), pb = upload(pos), fb = factors.empty() ? Buffer() : upload(factors);
    RopeDesc d;
    d.x = xb.as<float>();
    d.pos = pb.as<int32_t>();
    d.m = int64_t(pos.size());
    d.n_heads = n_heads;
    d.head_dim = head_dim;
    d.theta = theta;
    d.freq_factors = factors.empty() ? nullptr : fb.as<float>();
    d.mode = mode;
    be().rope(d);
    const std::vector<double> want = ref::rope(x, pos, n_heads, head_dim, theta, mode, factors);
    EXPECT_TRUE(all_close(download<float>(xb), want,
                          rope_tolerance(x, int64_t(n_heads) * head_dim, pos, n_heads, head_dim, mode)))
        << (mode == RopeMode::Normal ? "normal" : "neox") << " n_heads=" << n_heads << " head_dim=" << head_dim
        << " theta=" << theta << " first pos=" << pos[0] << (factors.empty() ? "" : " with factors");
  }
};
TLLM_OPS_INSTANTIATE(RopeTest);

TEST_P(RopeTest, Normal) {
  Rng rng(801);
  check(rng, 9, 64, {0}, 10000.0f, RopeMode::Normal);  // position 0: the identity
  check(rng, 9, 64, {1}, 10000.0f, RopeMode::Normal);
  check(rng, 3, 64, {4095}, 100000.0f, RopeMode::Normal);
  check(rng, 16, 128, {0, 1, 2, 3, 100, 1000, 8191}, 500000.0f, RopeMode::Normal);
}

TEST_P(RopeTest, Neox) {
  Rng rng(802);
  check(rng, 14, 64, {0}, 1000000.0f, RopeMode::Neox);
  check(rng, 14, 64, {1}, 1000000.0f, RopeMode::Neox);
  check(rng, 2, 64, {4095}, 1000000.0f, RopeMode::Neox);
  check(rng, 7, 128, {5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21}, 10000.0f, RopeMode::Neox);
  check(rng, 1, 8, {32767}, 10000.0f, RopeMode::Neox);  // the largest Qwen2.5 position, a tiny head
}

TEST_P(RopeTest, FrequencyFactors) {
  Rng rng(803);
  check(rng, 32, 64, {0, 1, 4095, 100000}, 500000.0f, RopeMode::Normal, llama3_factors(64));  // Llama 3.2 1B
  check(rng, 24, 128, {7, 20000}, 500000.0f, RopeMode::Normal, llama3_factors(128));
  check(rng, 14, 64, {3, 30000}, 1000000.0f, RopeMode::Neox, std::vector<float>(32, 4.0f));  // linear, factor 4
}

// qkv_rope_append against rope on the q and k heads followed by kv_append of k and v.
class QkvRopeAppendTest : public OpsTest {
 protected:
  void check(Rng& rng, int n_head, int n_head_kv, int head_dim, int n_ctx, const std::vector<int32_t>& pos,
             float theta, RopeMode mode, const std::vector<float>& factors = {}) {
    const int64_t m = int64_t(pos.size());
    const int64_t q_dim = int64_t(n_head) * head_dim, kv_dim = int64_t(n_head_kv) * head_dim;
    const int64_t row = q_dim + 2 * kv_dim;
    const std::vector<float> qkv = random_floats(rng, size_t(m * row), -2.0f, 2.0f);
    std::vector<half_t> k_cache = random_halves(rng, size_t(n_ctx * kv_dim), -1.0f, 1.0f);
    std::vector<half_t> v_cache = random_halves(rng, size_t(n_ctx * kv_dim), -1.0f, 1.0f);
    Buffer qb = upload(qkv), pb = upload(pos), kc = upload(k_cache), vc = upload(v_cache);
    Buffer fb = factors.empty() ? Buffer() : upload(factors);
    QkvRopeAppendDesc d;
    d.qkv = qb.as<float>();
    d.pos = pb.as<int32_t>();
    d.k_cache = kc.as<half_t>();
    d.v_cache = vc.as<half_t>();
    d.m = m;
    d.n_head = n_head;
    d.n_head_kv = n_head_kv;
    d.head_dim = head_dim;
    d.n_ctx = n_ctx;
    d.theta = theta;
    d.freq_factors = factors.empty() ? nullptr : fb.as<float>();
    d.mode = mode;
    be().qkv_rope_append(d);

    // Reference: split the rows, rope q and k, append k and v.
    std::vector<float> q, k, v;
    for (int64_t r = 0; r < m; ++r) {
      const float* p = qkv.data() + r * row;
      q.insert(q.end(), p, p + q_dim);
      k.insert(k.end(), p + q_dim, p + q_dim + kv_dim);
      v.insert(v.end(), p + q_dim + kv_dim, p + row);
    }
    const std::vector<double> q_ref = ref::rope(q, pos, n_head, head_dim, theta, mode, factors);
    const std::vector<double> k_ref = ref::rope(k, pos, n_head_kv, head_dim, theta, mode, factors);
    // qkv after the op: q and k roped (q and k heads are adjacent, so one tolerance pass covers
    // both), v untouched (tolerance 0).
    std::vector<double> want(qkv.begin(), qkv.end());
    for (int64_t r = 0; r < m; ++r) {
      std::copy(q_ref.begin() + r * q_dim, q_ref.begin() + (r + 1) * q_dim, want.begin() + r * row);
      std::copy(k_ref.begin() + r * kv_dim, k_ref.begin() + (r + 1) * kv_dim, want.begin() + r * row + q_dim);
    }
    const std::vector<double> qkv_tol = rope_tolerance(qkv, row, pos, n_head + n_head_kv, head_dim, mode);
    EXPECT_TRUE(all_close(download<float>(qb), want, qkv_tol)) << "qkv rows";

    // k cache: written rows hold fp16(roped k), within the rope tolerance plus one fp16 ULP; the
    // other rows are unchanged (tolerance 0). v cache: fp16(v) exactly.
    std::vector<double> k_want(k_cache.size()), k_tol(k_cache.size(), 0.0);
    for (size_t i = 0; i < k_cache.size(); ++i) k_want[i] = half_to_float(k_cache[i]);
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t c = 0; c < kv_dim; ++c) {
        const int64_t h = c / head_dim, e = c % head_dim;
        const size_t dst = size_t((h * n_ctx + pos[size_t(r)]) * head_dim + e);
        k_want[dst] = k_ref[size_t(r * kv_dim + c)];
        k_tol[dst] = qkv_tol[size_t(r * row + q_dim + c)] + kHalfUlp * std::fabs(k_want[dst]) + kHalfSubnormal;
      }
    }
    EXPECT_TRUE(all_close(to_float(download<half_t>(kc)), k_want, k_tol)) << "k cache";
    std::vector<half_t> k_unused = k_cache;
    ref::kv_append(k, v, pos, n_head_kv, head_dim, n_ctx, k_unused, v_cache);
    EXPECT_TRUE(all_equal(download<half_t>(vc), v_cache)) << "v cache";
  }
};
TLLM_OPS_INSTANTIATE(QkvRopeAppendTest);

TEST_P(QkvRopeAppendTest, Decode) {
  Rng rng(811);
  check(rng, 14, 2, 64, 128, {0}, 1000000.0f, RopeMode::Neox);
  check(rng, 14, 2, 64, 128, {77}, 1000000.0f, RopeMode::Neox);
  check(rng, 9, 3, 64, 64, {63}, 100000.0f, RopeMode::Normal);
  check(rng, 3, 1, 128, 40, {5}, 10000.0f, RopeMode::Normal);
  check(rng, 7, 7, 64, 16, {15}, 10000.0f, RopeMode::Neox);
}

TEST_P(QkvRopeAppendTest, Prefill) {
  Rng rng(812);
  check(rng, 14, 2, 64, 64, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, 1000000.0f, RopeMode::Neox);
  check(rng, 9, 3, 64, 300, {200, 201, 202, 203, 204}, 100000.0f, RopeMode::Normal);
}

TEST_P(QkvRopeAppendTest, FrequencyFactors) {
  Rng rng(814);
  check(rng, 32, 8, 64, 300, {0, 1, 299}, 500000.0f, RopeMode::Normal, llama3_factors(64));
  check(rng, 14, 2, 64, 64, {40}, 1000000.0f, RopeMode::Neox, llama3_factors(64));
}

// The QkvRopeAppend epilogue of matmul against the same backend's plain matmul followed by
// qkv_rope_append, exactly: a fused form computes every row with the same arithmetic. With the
// rmsnorm prologue and a bias (the model's QKV projection), for matmul_m1 and matmul, W8 and F16;
// k = 8192 splits rows over several warps, which the CUDA backend runs unfused.
class MatmulRopeEpilogueTest : public OpsTest {
 protected:
  static std::vector<int32_t> positions(int32_t first, int n) {
    std::vector<int32_t> p(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) p[size_t(i)] = first + i;
    return p;
  }

  struct Run {
    std::vector<float> y;
    std::vector<half_t> k_cache, v_cache;
  };

  Run run(const HostWeights& hw, const std::vector<float>& norm_x, const std::vector<float>& norm_w,
          const std::vector<float>& bias, const std::vector<int32_t>& pos, const QkvRopeAppendDesc& shape,
          bool fused, int64_t advance_n = 0) {
    const int64_t m = int64_t(pos.size()), n = hw.n;
    const size_t cache = size_t(shape.n_ctx) * size_t(shape.n_head_kv) * size_t(shape.head_dim);
    auto w = be().upload_matrix(hw.view());
    // advance_n > 0 (m = 1): the position is one less, and an argmax over advance_n values, issued
    // just before the matmul, advances it (ArgmaxDesc::advance), as a decode step's argmax does.
    Buffer xb = upload(norm_x), wb = upload(norm_w), bb = upload(bias);
    Buffer pb = advance_n > 0 ? upload(std::vector<int32_t>{pos[0] - 1, 0}) : upload(pos);
    Buffer ab, ob;
    if (advance_n > 0) {
      ab = upload(std::vector<float>(size_t(advance_n), 1.0f));
      ob = alloc<int32_t>(1);
    }
    Buffer yb = alloc<float>(size_t(m * n));
    Buffer kc = upload(std::vector<half_t>(cache, 0)), vc = upload(std::vector<half_t>(cache, 0));
    MatmulDesc d;
    d.w = w.get();
    d.norm_x = xb.as<float>();
    d.norm_weight = wb.as<float>();
    d.bias = bb.as<float>();
    d.y = yb.as<float>();
    d.m = m;
    QkvRopeAppendDesc r = shape;
    r.pos = pb.as<int32_t>();
    r.k_cache = kc.as<half_t>();
    r.v_cache = vc.as<half_t>();
    if (fused) {
      d.epilogue = MatmulEpilogue::QkvRopeAppend;
      d.rope = r;
    }
    if (advance_n > 0) {
      ArgmaxDesc ad;
      ad.x = ab.as<float>();
      ad.out = ob.as<int32_t>();
      ad.n = advance_n;
      ad.advance = pb.as<int32_t>();
      be().argmax(ad);
    }
    if (m == 1) {
      be().matmul_m1(d);
    } else {
      be().matmul(d);
    }
    if (!fused) {
      r.qkv = yb.as<float>();
      r.m = m;
      be().qkv_rope_append(r);
    }
    return {download<float>(yb), download<half_t>(kc), download<half_t>(vc)};
  }

  void check(Rng& rng, WeightType type, int n_head, int n_head_kv, int head_dim, int64_t k,
             const std::vector<int32_t>& pos, RopeMode mode, int64_t advance_n = 0,
             const std::vector<float>& factors = {}) {
    Buffer fb = factors.empty() ? Buffer() : upload(factors);
    QkvRopeAppendDesc shape;
    shape.n_head = n_head;
    shape.n_head_kv = n_head_kv;
    shape.head_dim = head_dim;
    shape.n_ctx = 64;
    shape.theta = 1000000.0f;
    shape.freq_factors = factors.empty() ? nullptr : fb.as<float>();
    shape.mode = mode;
    const int64_t n = (int64_t(n_head) + 2 * n_head_kv) * head_dim, m = int64_t(pos.size());
    const HostWeights w = type == WeightType::W8 ? random_w8(rng, n, k) : random_f16(rng, n, k);
    const std::vector<float> x = random_floats(rng, size_t(m * k), -3.0f, 3.0f);
    const std::vector<float> nw = random_floats(rng, size_t(k), 0.5f, 1.5f);
    const std::vector<float> bias = random_floats(rng, size_t(n), -1.0f, 1.0f);
    const Run want = run(w, x, nw, bias, pos, shape, false);
    const Run got = run(w, x, nw, bias, pos, shape, true, advance_n);
    const std::string what = std::string(weight_type_name(type)) + " heads " + std::to_string(n_head) + "+" +
                             std::to_string(n_head_kv) + " head_dim " + std::to_string(head_dim) + " k " +
                             std::to_string(k) + " m " + std::to_string(m) +
                             (advance_n > 0 ? " position advanced by an argmax" : "") +
                             (factors.empty() ? "" : " with frequency factors");
    EXPECT_TRUE(all_equal(got.y, want.y)) << what << ": qkv rows";
    EXPECT_TRUE(all_equal(got.k_cache, want.k_cache)) << what << ": k cache";
    EXPECT_TRUE(all_equal(got.v_cache, want.v_cache)) << what << ": v cache";
  }
};
TLLM_OPS_INSTANTIATE(MatmulRopeEpilogueTest);

TEST_P(MatmulRopeEpilogueTest, SameAsOpSequence) {
  Rng rng(813);
  for (WeightType type : {WeightType::W8, WeightType::F16}) {
    check(rng, type, 14, 2, 64, 896, {37}, RopeMode::Neox);  // the benchmarked model's QKV projection
    check(rng, type, 9, 3, 64, 96, {63}, RopeMode::Normal);
    check(rng, type, 3, 1, 128, 160, {5}, RopeMode::Neox);
    check(rng, type, 5, 1, 6, 64, {0}, RopeMode::Neox);    // 21 pairs: a partly filled last block
    check(rng, type, 4, 2, 64, 8192, {9}, RopeMode::Neox);  // long rows: unfused on CUDA
    // matmul (m > 1), with k short enough that no backend splits it (split-K adds its partial sums
    // in a run-dependent order, which two runs could not compare exactly).
    check(rng, type, 14, 2, 64, 96, {10, 11, 12, 13, 14}, RopeMode::Neox);
    // Prompts of the short-prompt path (m <= 64), which CUDA fuses where each rotation pair falls
    // into one block: the model's prefill (m = 30, k = 896); normal pairs up to the cache's last
    // row; head_dim 128 at 40 and 64 rows; head_dim 6 (Neox, unfused).
    check(rng, type, 14, 2, 64, 896, positions(3, 30), RopeMode::Neox);
    check(rng, type, 9, 3, 64, 96, positions(55, 9), RopeMode::Normal);
    check(rng, type, 3, 1, 128, 160, positions(1, 40), RopeMode::Neox);
    check(rng, type, 2, 1, 128, 64, positions(0, 64), RopeMode::Neox);
    check(rng, type, 5, 1, 6, 64, positions(7, 3), RopeMode::Neox);
  }
}

// The position advanced by the op just before the projection, as a decode step's argmax advances
// it for the next step: a decode kernel that starts before that op ends (programmatic dependent
// launch) must read the position only after its dependency wait.
TEST_P(MatmulRopeEpilogueTest, PositionAdvancedByThePreviousOp) {
  Rng rng(815);
  for (int32_t p : {1, 37, 63}) check(rng, WeightType::W8, 14, 2, 64, 896, {p}, RopeMode::Neox, int64_t(1) << 22);
  check(rng, WeightType::F16, 9, 3, 64, 96, {20}, RopeMode::Normal, int64_t(1) << 22);
}

// The fused forms read the rope scaling's frequency factors as the op sequence does: the decode
// projection (m = 1), the short-prompt path (m <= 64) and the long-row path that runs unfused.
TEST_P(MatmulRopeEpilogueTest, FrequencyFactors) {
  Rng rng(816);
  for (WeightType type : {WeightType::W8, WeightType::F16}) {
    check(rng, type, 14, 2, 64, 896, {37}, RopeMode::Neox, 0, llama3_factors(64));
    check(rng, type, 9, 3, 64, 96, {63}, RopeMode::Normal, 0, llama3_factors(64));
    check(rng, type, 3, 1, 128, 160, positions(1, 40), RopeMode::Normal, 0, llama3_factors(128));
    check(rng, type, 14, 2, 64, 896, positions(3, 30), RopeMode::Neox, 0, llama3_factors(64));
    check(rng, type, 4, 2, 64, 8192, {9}, RopeMode::Neox, 0, llama3_factors(64));
  }
}

}  // namespace
}  // namespace tllm::test
