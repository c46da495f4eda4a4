// Conformance of the elementwise ops: add (y += x) and silu_mul (out = fp16(silu(gate) * up)).
#include <cmath>

#include "ops/conformance.h"
#include "ops/reference.h"

namespace tllm::test {
namespace {

class ElementwiseTest : public OpsTest {};
TLLM_OPS_INSTANTIATE(ElementwiseTest);

// fp32 addition is correctly rounded everywhere, so y += x matches the host sum bit for bit.
TEST_P(ElementwiseTest, AddExact) {
  Rng rng(401);
  for (int64_t n : {1, 7, 896, 4864, 100003}) {
    const std::vector<float> y0 = random_floats(rng, size_t(n), -100.0f, 100.0f);
    const std::vector<float> x = random_floats(rng, size_t(n), -1.0f, 1.0f);
    Buffer yb = upload(y0), xb = upload(x);
    AddDesc d;
    d.y = yb.as<float>();
    d.x = xb.as<float>();
    d.n = n;
    be().add(d);
    std::vector<float> want(static_cast<size_t>(n));
    for (size_t i = 0; i < want.size(); ++i) want[i] = y0[i] + x[i];
    EXPECT_TRUE(all_equal(download<float>(yb), want)) << "n=" << n;
  }
}

// Tolerance: one fp16 ULP of the output (the fp32 result may sit on either side of a rounding
// midpoint) plus 1e-5 relative for the fp32 silu (a GPU's approximate exp and division are within a
// few fp32 ULP), plus the fp16 subnormal spacing for outputs near zero.
TEST_P(ElementwiseTest, SiluMul) {
  Rng rng(402);
  for (int64_t n : {1, 7, 896, 4864, 100003}) {
    std::vector<float> gate = random_floats(rng, size_t(n), -8.0f, 8.0f);
    const std::vector<float> up = random_floats(rng, size_t(n), -4.0f, 4.0f);
    // Saturating gates: silu(-100) underflows to (-)0, silu(100) = 100, silu(0) = 0.
    const float edges[] = {-100.0f, 100.0f, 0.0f, -20.0f, 20.0f};
    for (size_t i = 0; i < gate.size() && i < 5; ++i) gate[i * (gate.size() / 5)] = edges[i];
    Buffer gb = upload(gate), ub = upload(up);
    Buffer out = alloc<half_t>(size_t(n));
    SiluMulDesc d;
    d.gate = gb.as<float>();
    d.up = ub.as<float>();
    d.out = out.as<half_t>();
    d.n = n;
    be().silu_mul(d);
    const std::vector<double> want =
        ref::silu_mul(std::vector<double>(gate.begin(), gate.end()), std::vector<double>(up.begin(), up.end()));
    EXPECT_TRUE(all_close(to_float(download<half_t>(out)), want, bound(want, kHalfSubnormal, kHalfUlp + 1e-5)))
        << "n=" << n;
  }
}

}  // namespace
}  // namespace tllm::test
