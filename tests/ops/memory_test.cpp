// Conformance of the backend's memory and identity: zeroed allocations, upload/download round trips
// at offsets, staged uploads (also inside a recorded step), memory_info accounting, matrix upload
// errors, supported ops, creation errors, the read-bandwidth measurement.
#include <cmath>
#include <cstring>

#include "ops/conformance.h"

namespace tllm::test {
namespace {

class MemoryTest : public OpsTest {};
TLLM_OPS_INSTANTIATE(MemoryTest);

TEST_P(MemoryTest, AllocIsZeroed) {
  // A freed block filled with a pattern, then blocks of the same size: none may show the pattern.
  const size_t bytes = size_t(3) << 20;
  {
    Buffer dirty = alloc<uint8_t>(bytes);
    be().upload(dirty.data(), std::vector<uint8_t>(bytes, 0xab).data(), bytes);
    be().synchronize();
  }
  for (size_t size : {bytes, bytes - 1, size_t(1), size_t(4096)}) {
    Buffer b = alloc<uint8_t>(size);
    ASSERT_TRUE(b) << size << " bytes";
    EXPECT_EQ(b.bytes(), size);
    EXPECT_TRUE(all_equal(download<uint8_t>(b), std::vector<uint8_t>(size, 0))) << size << " bytes";
  }
}

// measure_read_bandwidth reads a buffer it allocates and frees: a finite, positive rate, below the
// device's nominal bandwidth where it states one (above it, the reads came from a cache or were
// dropped), nothing left allocated, and bad arguments refused. 256 MiB: four times an H200's L2.
TEST_P(MemoryTest, MeasuresReadBandwidth) {
  const size_t allocated = be().memory_info().allocated_bytes;
  const double gbs = be().measure_read_bandwidth(size_t(256) << 20, 3);
  EXPECT_TRUE(std::isfinite(gbs));
  EXPECT_GT(gbs, 0.0);
  const double nominal = be().device_info().peak_bandwidth_gbs;
  if (nominal > 0) {
    EXPECT_LT(gbs, nominal) << "nominal " << nominal << " GB/s";
  }
  EXPECT_EQ(be().memory_info().allocated_bytes, allocated);
  EXPECT_THROW(be().measure_read_bandwidth(4095, 1), BackendError);
  EXPECT_THROW(be().measure_read_bandwidth(size_t(1) << 20, 0), BackendError);
}

TEST_P(MemoryTest, UploadDownloadRoundTrip) {
  Rng rng(1001);
  const size_t n = 100003;  // odd: partial vectors at the end
  const std::vector<float> host = random_floats(rng, n, -1e6f, 1e6f);
  Buffer b = upload(host);
  EXPECT_TRUE(all_equal(download<float>(b), host));
  // Into the middle of a buffer, and back from an odd byte offset.
  const std::vector<float> part = random_floats(rng, 777, -1.0f, 1.0f);
  be().upload(b.as<float>() + 1001, part.data(), part.size() * sizeof(float));
  std::vector<float> want = host;
  std::copy(part.begin(), part.end(), want.begin() + 1001);
  EXPECT_TRUE(all_equal(download<float>(b), want));
  std::vector<uint8_t> bytes(4099);
  be().download(bytes.data(), b.as<uint8_t>() + 3, bytes.size());
  EXPECT_EQ(std::memcmp(bytes.data(), reinterpret_cast<const uint8_t*>(want.data()) + 3, bytes.size()), 0);
}

// Queued downloads see the value at their place in the queue (each slot is overwritten by a later
// upload before the download is collected), are collected in any order, and refuse bad tickets,
// sizes and too many outstanding copies.
TEST_P(MemoryTest, QueuedDownloads) {
  Buffer b = alloc<int32_t>(16);
  std::vector<uint64_t> tickets;
  for (int32_t i = 0; i < kQueuedDownloads; ++i) {
    const int32_t v[2] = {100 + i, -i};
    be().upload(b.data(), v, sizeof v);
    tickets.push_back(be().queue_download(b.data(), sizeof v));
  }
  EXPECT_THROW(be().queue_download(b.data(), 4), BackendError);  // all slots outstanding
  for (int i : {3, 0, 7, 1, 2, 6, 4, 5}) {
    int32_t got[2] = {0, 0};
    be().collect_download(tickets[size_t(i)], got);
    EXPECT_EQ(got[0], 100 + i);
    EXPECT_EQ(got[1], -i);
  }
  int32_t sink[16];
  EXPECT_THROW(be().collect_download(tickets[0], sink), BackendError);  // collected already
  EXPECT_THROW(be().collect_download(0, sink), BackendError);
  EXPECT_THROW(be().queue_download(b.data(), 0), BackendError);
  EXPECT_THROW(be().queue_download(b.data(), kQueuedDownloadBytes + 1), BackendError);
  const uint64_t t = be().queue_download(b.data(), kQueuedDownloadBytes);
  std::vector<int32_t> got(16, 1);
  be().collect_download(t, got.data());
  EXPECT_EQ(got[0], 100 + kQueuedDownloads - 1);
}

// upload_staged copies the staging area's first bytes; inside a recorded step (run_step) the copy
// reads the area again at each replay, so a replay uploads what the host wrote there since.
TEST_P(MemoryTest, StagedUploads) {
  Buffer b = alloc<int32_t>(64);
  const auto stage = [&](int32_t base) {
    int32_t* s = static_cast<int32_t*>(be().staging());
    for (int i = 0; i < 16; ++i) s[i] = base + i;
  };
  const auto expect = [&](int32_t base, int n) {
    const std::vector<int32_t> got = download<int32_t>(b);
    for (int i = 0; i < n; ++i) ASSERT_EQ(got[size_t(i)], base + i) << "value " << i;
    for (size_t i = size_t(n); i < got.size(); ++i) ASSERT_EQ(got[i], 0) << "value " << i << " (past the copy)";
  };
  stage(100);
  be().upload_staged(b.data(), 8 * sizeof(int32_t));
  expect(100, 8);

  be().reset_steps();
  for (int32_t base : {200, 300, 400}) {  // the first records, the others replay
    stage(base);
    be().run_step(7, 0, [&] { be().upload_staged(b.data(), 16 * sizeof(int32_t)); });
    expect(base, 16);
  }
  be().reset_steps();
  EXPECT_THROW(be().upload_staged(b.data(), kStagingBytes + 1), BackendError);
}

// queue_readback copies device bytes into the readback area, and readback() waits for them; inside
// a recorded step the copy repeats at each replay, so a replay brings back what the device holds
// then. Together with the staging area: a replay that takes new inputs and returns new results.
TEST_P(MemoryTest, Readbacks) {
  Buffer b = alloc<int32_t>(64);
  const auto fill = [&](int32_t base) {
    std::vector<int32_t> v(64);
    for (int i = 0; i < 64; ++i) v[size_t(i)] = base + i;
    be().upload(b.data(), v.data(), v.size() * sizeof(int32_t));
  };
  const auto expect = [&](int32_t base, int n) {
    const int32_t* got = static_cast<const int32_t*>(be().readback());
    for (int i = 0; i < n; ++i) ASSERT_EQ(got[i], base + i) << "value " << i;
  };
  fill(100);
  be().queue_readback(b.as<int32_t>() + 4, 8 * sizeof(int32_t));
  expect(104, 8);

  be().reset_steps();
  for (int32_t base : {200, 300, 400}) {  // the first records, the others replay
    fill(base);
    be().run_step(8, 0, [&] { be().queue_readback(b.as<int32_t>() + 2, 16 * sizeof(int32_t)); });
    expect(base + 2, 16);
  }
  // Staged ids in, a result out: the step copies the staged value into the buffer, then back.
  be().reset_steps();
  for (int32_t v : {7, 8, 9}) {
    *static_cast<int32_t*>(be().staging()) = v;
    be().run_step(9, 0, [&] {
      be().upload_staged(b.data(), sizeof(int32_t));
      be().queue_readback(b.data(), sizeof(int32_t));
    });
    expect(v, 1);
  }
  be().reset_steps();
  EXPECT_THROW(be().queue_readback(b.data(), kStagingBytes + 1), BackendError);
}

TEST_P(MemoryTest, MemoryInfoAccounting) {
  const MemoryInfo before = be().memory_info();
  EXPECT_GE(before.peak_bytes, before.allocated_bytes);
  const size_t bytes = size_t(5) << 20;
  {
    Buffer a = alloc<uint8_t>(bytes);
    Buffer b = alloc<uint8_t>(bytes);
    const MemoryInfo with = be().memory_info();
    EXPECT_GE(with.allocated_bytes, before.allocated_bytes + 2 * bytes);
    EXPECT_GE(with.peak_bytes, with.allocated_bytes);
    // A matrix holds at least the bytes a full read of it streams.
    Rng rng(1002);
    const HostWeights w = random_w8(rng, 64, 256);
    size_t stream = 0;
    {
      auto m = be().upload_matrix(w.view());
      stream = m->stream_bytes();
      EXPECT_EQ(stream, size_t(64 * 256 + 64 * 256 / kW8Group * 2));
      EXPECT_GE(be().memory_info().allocated_bytes, with.allocated_bytes + stream);
    }
    EXPECT_EQ(be().memory_info().allocated_bytes, with.allocated_bytes);
  }
  const MemoryInfo after = be().memory_info();
  EXPECT_EQ(after.allocated_bytes, before.allocated_bytes);
  EXPECT_GE(after.peak_bytes, before.allocated_bytes + 2 * bytes);
}

TEST_P(MemoryTest, MovedBufferFreesOnce) {
  const size_t base = be().memory_info().allocated_bytes;
  Buffer a = alloc<float>(1000);
  Buffer b = std::move(a);
  EXPECT_FALSE(a);  // moving leaves the source empty
  EXPECT_TRUE(b);
  Buffer c;
  c = std::move(b);
  EXPECT_GE(be().memory_info().allocated_bytes, base + 1000 * sizeof(float));
  c = Buffer();
  EXPECT_EQ(be().memory_info().allocated_bytes, base);
}

TEST_P(MemoryTest, MatrixShapeAndErrors) {
  Rng rng(1003);
  const HostWeights w8 = random_w8(rng, 3, 64);
  auto m = be().upload_matrix(w8.view());
  EXPECT_EQ(m->type(), WeightType::W8);
  EXPECT_EQ(m->n(), 3);
  EXPECT_EQ(m->k(), 64);
  // W8 needs k to be a multiple of the group size; a user-reachable error, so BackendError.
  HostWeights bad = random_w8(rng, 3, 64);
  HostMatrix view = bad.view();
  view.k = 48;
  EXPECT_THROW(be().upload_matrix(view), BackendError);
  HostMatrix empty;
  EXPECT_THROW(be().upload_matrix(empty), BackendError);
}

TEST_P(MemoryTest, IdentityAndSupportedOps) {
  EXPECT_EQ(be().name(), GetParam());
  const DeviceInfo info = be().device_info();
  EXPECT_FALSE(info.name.empty());
  EXPECT_FALSE(info.runtime.empty());
  // Every op of the interface must be implemented by every backend; only step capture is optional.
  for (Op op : {Op::MatmulM1W8, Op::MatmulM1F16, Op::Matmul, Op::RmsNorm, Op::Rope, Op::KvAppend,
                Op::QkvRopeAppend, Op::AttentionPrefill, Op::AttentionDecode, Op::Add, Op::SiluMul,
                Op::Embedding, Op::Argmax}) {
    EXPECT_TRUE(be().supports(op)) << op_name(op);
  }
}

TEST_P(MemoryTest, UnknownBackendName) {
  try {
    create_backend("no-such-backend");
    FAIL() << "create_backend accepted an unknown name";
  } catch (const BackendError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("no-such-backend"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << "a one-line message: " << what;
  }
}

}  // namespace
}  // namespace tllm::test
