// Conformance of embedding: out[i] = row ids[i] of the table as fp32. Dequantisation is exact
// (int8 · fp16 scale and fp16 -> fp32 are exact in fp32), so rows must match bit for bit.
#include "ops/conformance.h"
#include "ops/reference.h"

namespace tllm::test {
namespace {

class EmbeddingTest : public OpsTest {
 protected:
  void check(const HostWeights& table, const std::vector<int32_t>& ids) {
    auto t = be().upload_matrix(table.view());
    Buffer idb = upload(ids);
    Buffer out = alloc<float>(ids.size() * size_t(table.k));
    EmbeddingDesc d;
    d.table = t.get();
    d.ids = idb.as<int32_t>();
    d.out = out.as<float>();
    d.m = int64_t(ids.size());
    be().embedding(d);
    const std::vector<float> w = ref::dequantize(table.view());
    std::vector<float> want;
    for (int32_t id : ids) want.insert(want.end(), w.begin() + id * table.k, w.begin() + (id + 1) * table.k);
    EXPECT_TRUE(all_equal(download<float>(out), want))
        << weight_type_name(table.type) << " n_vocab=" << table.n << " n_embd=" << table.k << " m=" << ids.size();
  }
};
TLLM_OPS_INSTANTIATE(EmbeddingTest);

TEST_P(EmbeddingTest, W8) {
  Rng rng(601);
  const HostWeights table = random_w8(rng, 1000, 896, 0.001f, 0.05f);
  check(table, {0});
  check(table, {999});
  check(table, {3, 999, 0, 3, 500, 17, 17});  // repeats, first and last rows
  check(random_w8(rng, 7, 32), {6, 0, 1});    // one W8 group per row
}

// Up to kEmbeddingHostIds ids from host memory, taken when the op is queued (the host's copy is
// overwritten right after), with the rows' positions written for the ops after it.
TEST_P(EmbeddingTest, HostIdsAndPositions) {
  Rng rng(603);
  const HostWeights table = random_w8(rng, 300, 64, 0.001f, 0.05f);
  auto t = be().upload_matrix(table.view());
  const std::vector<float> w = ref::dequantize(table.view());
  for (const int m : {1, 30, int(kEmbeddingHostIds)}) {
    std::vector<int32_t> ids(static_cast<size_t>(m));
    for (int i = 0; i < m; ++i) ids[size_t(i)] = int32_t((i * 37 + 11) % 300);
    const std::vector<int32_t> host = ids;
    Buffer out = alloc<float>(size_t(m) * size_t(table.k));
    Buffer pos = upload(std::vector<int32_t>(size_t(m) + 1, -7));
    EmbeddingDesc d;
    d.table = t.get();
    d.host_ids = ids.data();
    d.out = out.as<float>();
    d.m = m;
    d.positions = pos.as<int32_t>();
    d.pos0 = 1000 + m;
    be().embedding(d);
    std::fill(ids.begin(), ids.end(), 0);
    std::vector<float> want;
    std::vector<int32_t> want_pos(size_t(m) + 1, -7);  // the value past m stays
    for (int i = 0; i < m; ++i) {
      const int32_t id = host[size_t(i)];
      want.insert(want.end(), w.begin() + id * table.k, w.begin() + (id + 1) * table.k);
      want_pos[size_t(i)] = 1000 + m + i;
    }
    EXPECT_TRUE(all_equal(download<float>(out), want)) << "m=" << m;
    EXPECT_EQ(download<int32_t>(pos), want_pos) << "m=" << m;
  }
  std::vector<int32_t> too_many(size_t(kEmbeddingHostIds) + 1, 1);
  Buffer out = alloc<float>(too_many.size() * size_t(table.k));
  EmbeddingDesc d;
  d.table = t.get();
  d.host_ids = too_many.data();
  d.out = out.as<float>();
  d.m = int64_t(too_many.size());
  EXPECT_THROW(be().embedding(d), BackendError);
}

TEST_P(EmbeddingTest, F16) {
  Rng rng(602);
  const HostWeights table = random_f16(rng, 1000, 576, 2.0f);
  check(table, {0});
  check(table, {999, 1, 1, 998, 0});
  check(random_f16(rng, 5, 3, 1.0f), {4, 2});  // a row narrower than any vector width
}

// An F16 table with its int8 form (HostMatrix; kept in that form on CUDA): the rows are the fp16
// values bit for bit, normal and subnormal ones, and a row wider than one batch of reads.
TEST_P(EmbeddingTest, F16Int8Form) {
  Rng rng(605);
  check(random_f16_int8_form(rng, 1000, 896), {0, 999, 17, 17, 500});
  check(random_f16_int8_form(rng, 40, 64, 1e-7f, 1e-6f), {39, 0, 7});
  check(random_f16_int8_form(rng, 3, 8224), {2, 0, 1});
}

// Rows wider than one batch of the CUDA kernel's reads (4,096 W8 or 2,048 F16 values), one ending
// in a part-filled vector, with output rows that are not 16-byte aligned.
TEST_P(EmbeddingTest, WideRows) {
  Rng rng(604);
  check(random_w8(rng, 3, 8224, 0.001f, 0.05f), {2, 0, 2});
  check(random_f16(rng, 4, 4098, 1.0f), {3, 1, 0});
}

}  // namespace
}  // namespace tllm::test
