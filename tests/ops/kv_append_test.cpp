// Conformance of kv_append: fp32 k and v rows written as fp16 at their positions in the
// (n_head_kv, n_ctx, head_dim) caches. fp32 -> fp16 is round-to-nearest-even everywhere, so the
// whole caches, written rows and untouched ones, must match bit for bit.
#include "ops/conformance.h"
#include "ops/reference.h"

namespace tllm::test {
namespace {

class KvAppendTest : public OpsTest {
 protected:
  void check(Rng& rng, int n_head_kv, int head_dim, int n_ctx, const std::vector<int32_t>& pos) {
    const int64_t m = int64_t(pos.size());
    const size_t row = size_t(n_head_kv) * size_t(head_dim);
    std::vector<float> k = random_floats(rng, size_t(m) * row, -3.0f, 3.0f);
    std::vector<float> v = random_floats(rng, size_t(m) * row, -3.0f, 3.0f);
    // Values on fp16's edges: subnormal, rounding down to the largest finite value, overflowing.
    const float edges[] = {1e-6f, -3e-8f, 65519.0f, 65520.0f, -1e6f, 0.0f};
    for (size_t i = 0; i < 6 && i < k.size(); ++i) k[i] = v[k.size() - 1 - i] = edges[i];
    // The caches start with other values everywhere, which rows not written must keep.
    std::vector<half_t> k_cache = random_halves(rng, size_t(n_ctx) * row, -1.0f, 1.0f);
    std::vector<half_t> v_cache = random_halves(rng, size_t(n_ctx) * row, -1.0f, 1.0f);
    Buffer kb = upload(k), vb = upload(v), pb = upload(pos), kc = upload(k_cache), vc = upload(v_cache);
    KvAppendDesc d;
    d.k = kb.as<float>();
    d.v = vb.as<float>();
    d.k_cache = kc.as<half_t>();
    d.v_cache = vc.as<half_t>();
    d.pos = pb.as<int32_t>();
    d.m = m;
    d.n_head_kv = n_head_kv;
    d.head_dim = head_dim;
    d.n_ctx = n_ctx;
    be().kv_append(d);
    ref::kv_append(k, v, pos, n_head_kv, head_dim, n_ctx, k_cache, v_cache);
    EXPECT_TRUE(all_equal(download<half_t>(kc), k_cache)) << "k cache, n_head_kv=" << n_head_kv << " head_dim=" << head_dim;
    EXPECT_TRUE(all_equal(download<half_t>(vc), v_cache)) << "v cache, n_head_kv=" << n_head_kv << " head_dim=" << head_dim;
  }
};
TLLM_OPS_INSTANTIATE(KvAppendTest);

TEST_P(KvAppendTest, OneRow) {
  Rng rng(701);
  check(rng, 2, 64, 128, {0});
  check(rng, 2, 64, 128, {127});  // the last cache row
  check(rng, 3, 64, 50, {17});
  check(rng, 1, 128, 33, {32});
}

TEST_P(KvAppendTest, ManyRows) {
  Rng rng(702);
  check(rng, 2, 64, 256, {3, 4, 5, 6, 7});                // a prefill chunk
  check(rng, 2, 128, 256, {9, 2, 30, 255});               // positions in any order
  check(rng, 7, 64, 64, std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16});
}

}  // namespace
}  // namespace tllm::test
