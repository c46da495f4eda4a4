// Conformance of argmax: the index of the largest value, the first one on ties. The result is an
// index, so it must match exactly.
#include "ops/conformance.h"
#include "ops/reference.h"

namespace tllm::test {
namespace {

class ArgmaxTest : public OpsTest {
 protected:
  int32_t run(const std::vector<float>& x) {
    Buffer xb = upload(x);
    Buffer out = upload(std::vector<int32_t>{-1});
    ArgmaxDesc d;
    d.x = xb.as<float>();
    d.out = out.as<int32_t>();
    d.n = int64_t(x.size());
    be().argmax(d);
    return download<int32_t>(out)[0];
  }
};
TLLM_OPS_INSTANTIATE(ArgmaxTest);

TEST_P(ArgmaxTest, Random) {
  Rng rng(501);
  for (int64_t n : {1, 2, 31, 1000, 49152, 151936}) {
    const std::vector<float> x = random_floats(rng, size_t(n), -30.0f, 30.0f);
    EXPECT_EQ(run(x), ref::argmax(x)) << "n=" << n;
  }
}

TEST_P(ArgmaxTest, MaxAtEdges) {
  Rng rng(502);
  const int64_t n = 151936;
  for (int64_t at : {int64_t(0), n - 1, int64_t(1023), int64_t(1024), n / 2}) {
    std::vector<float> x = random_floats(rng, size_t(n), -30.0f, 30.0f);
    x[size_t(at)] = 31.0f;
    EXPECT_EQ(run(x), at) << "max at " << at;
  }
}

TEST_P(ArgmaxTest, TiesPickFirst) {
  Rng rng(503);
  const int64_t n = 151936;
  // Equal maxima far apart (different blocks of a parallel reduction) and adjacent.
  const std::pair<int64_t, int64_t> pairs[] = {{5, 150000}, {150000, 150001}, {0, n - 1}, {77777, 1000}};
  for (auto [a, b] : pairs) {
    std::vector<float> x = random_floats(rng, size_t(n), -30.0f, 30.0f);
    x[size_t(a)] = 40.0f;
    x[size_t(b)] = 40.0f;
    EXPECT_EQ(run(x), std::min(a, b)) << "ties at " << a << " and " << b;
  }
  EXPECT_EQ(run(std::vector<float>(size_t(n), -2.5f)), 0) << "all equal";
}

TEST_P(ArgmaxTest, AllNegativeAndInfinite) {
  Rng rng(504);
  std::vector<float> x = random_floats(rng, 5000, -1e30f, -1e20f);
  EXPECT_EQ(run(x), ref::argmax(x));
  x[4321] = INFINITY;
  x[17] = -INFINITY;
  EXPECT_EQ(run(x), 4321);
}

// With `advance`, the op also adds one to the two counters (a decode step's position and KV length)
// once per call, after the index is written, whether the op runs alone or as the lm_head matmul's
// epilogue; without it, nothing else changes.
TEST_P(ArgmaxTest, AdvancesStepCounters) {
  Rng rng(505);
  const int64_t n = 151936;
  std::vector<float> x = random_floats(rng, size_t(n), -30.0f, 30.0f);
  x[size_t(99999)] = 31.0f;
  Buffer xb = upload(x);
  Buffer out = upload(std::vector<int32_t>{-1});
  Buffer counters = upload(std::vector<int32_t>{41, 42, 7});
  ArgmaxDesc d;
  d.x = xb.as<float>();
  d.out = out.as<int32_t>();
  d.n = n;
  d.advance = counters.as<int32_t>();
  for (int i = 0; i < 3; ++i) be().argmax(d);
  EXPECT_EQ(download<int32_t>(out)[0], 99999);
  EXPECT_EQ(download<int32_t>(counters), (std::vector<int32_t>{44, 45, 7}));

  // The same through the argmax epilogue of a matmul (an F16 lm_head of 151936 rows).
  const int64_t k = 64;
  const HostWeights w = random_f16(rng, n, k, 0.5f);
  auto wm = be().upload_matrix(w.view());
  Buffer xh = upload(random_halves(rng, size_t(k), -1.0f, 1.0f));
  Buffer y = alloc<float>(size_t(n));
  MatmulDesc m;
  m.w = wm.get();
  m.x = xh.as<half_t>();
  m.y = y.as<float>();
  m.argmax = out.as<int32_t>();
  m.argmax_advance = counters.as<int32_t>();
  be().matmul_m1(m);
  be().matmul_m1(m);
  EXPECT_EQ(download<int32_t>(out)[0], ref::argmax(download<float>(y)));
  EXPECT_EQ(download<int32_t>(counters), (std::vector<int32_t>{46, 47, 7}));
  m.argmax_advance = nullptr;
  be().matmul_m1(m);
  EXPECT_EQ(download<int32_t>(counters), (std::vector<int32_t>{46, 47, 7}));
}

}  // namespace
}  // namespace tllm::test
