// Conformance of rmsnorm: out = fp16(x / sqrt(mean(x²) + eps) * weight), row by row.
//
// Tolerance: one fp16 ULP of the value plus 1e-5 relative (an fp32 sum of squares in any order and a
// GPU's approximate rsqrt move the fp32 result by ~1e-6 before rounding, which can then go to the
// neighbouring fp16 value), plus the fp16 subnormal spacing for outputs near zero.
#include "ops/conformance.h"
#include "ops/reference.h"

namespace tllm::test {
namespace {

class RmsNormTest : public OpsTest {
 protected:
  void check(const std::vector<float>& x, const std::vector<float>& weight, int64_t m, int64_t n, float eps) {
    Buffer xb = upload(x), wb = upload(weight);
    Buffer out = alloc<half_t>(size_t(m * n));
    RmsNormDesc d;
    d.x = xb.as<float>();
    d.weight = wb.as<float>();
    d.out = out.as<half_t>();
    d.m = m;
    d.n = n;
    d.eps = eps;
    be().rmsnorm(d);
    const std::vector<double> want = ref::rmsnorm(x, weight, m, n, eps);
    EXPECT_TRUE(all_close(to_float(download<half_t>(out)), want, bound(want, kHalfSubnormal, kHalfUlp + 1e-5)))
        << "m=" << m << " n=" << n << " eps=" << eps;
  }
};
TLLM_OPS_INSTANTIATE(RmsNormTest);

TEST_P(RmsNormTest, Random) {
  Rng rng(301);
  struct Case {
    int64_t m, n;
  };
  // Model widths (576, 896), n = 1, odd n, a long row, and several rows.
  for (Case c : {Case{1, 896}, Case{1, 576}, Case{1, 1}, Case{3, 999}, Case{1, 8192}, Case{17, 896}, Case{64, 33}}) {
    check(random_floats(rng, size_t(c.m * c.n), -2.0f, 2.0f), random_floats(rng, size_t(c.n), 0.5f, 1.5f),
          c.m, c.n, 1e-6f);
  }
}

TEST_P(RmsNormTest, Eps) {
  Rng rng(302);
  // Tiny inputs, where eps is most of the denominator: a backend that drops or misplaces eps fails.
  for (float eps : {1e-6f, 1e-5f, 1e-2f}) {
    check(random_floats(rng, 896, -1e-3f, 1e-3f), random_floats(rng, 896, 0.5f, 1.5f), 1, 896, eps);
  }
}

TEST_P(RmsNormTest, LargeAndMixedRows) {
  Rng rng(303);
  // Rows of very different scale in one call (each row normalised on its own), and a weight with
  // negative entries and values large enough that the output saturates fp16 precision, not range.
  const int64_t m = 4, n = 896;
  std::vector<float> x;
  for (float amp : {1e-2f, 1.0f, 100.0f, 3000.0f}) {
    const std::vector<float> row = random_floats(rng, n, -amp, amp);
    x.insert(x.end(), row.begin(), row.end());
  }
  check(x, random_floats(rng, n, -20.0f, 20.0f), m, n, 1e-6f);
}

}  // namespace
}  // namespace tllm::test
