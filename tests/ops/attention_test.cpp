// Conformance of attention_prefill (causal, pos0 = 0 and > 0, pos0 from backend memory, q inside
// wider rows) and attention_decode (n_kv read from backend memory, with and without the output
// projection fused in), over grouped-query head layouts. The decode cases walk n_kv across the
// split boundaries of the CUDA kernels (one split up to two chunks, 512 rows at head_dim 64 and 256
// rows at 128, then splits of whole half chunks, or of whole chunks past 16 half chunks, at most 64
// splits), through one descriptor so that a combine which leaves its arrival counter set fails the
// next call, and cover the generic kernel (other head_dims, q and caches without 16-byte alignment).
//
// Tolerance of an output of query head h in row i: kHalfUlp·|want| + kHalfSubnormal (fp16 output
// rounding) + (2^-11 + 2·e_w)·max|v|, where
//   - 2^-11·max|v| bounds a kernel that rounds the softmax weights to fp16 for the P·V product
//     (each weight off by at most 2^-11 of itself; the weights sum to one);
//   - e_w = fp32_sum_error(head_dim)·max_j scale·Σ|q·k_j| + 1e-6 is the relative error of one weight
//     from fp32 scores (a score error δ scales exp by e^δ ≈ 1 + δ) and an approximate exp;
//     normalising by the sum doubles it.
// Cache rows the op must not read hold v = 1000 ("poison"), which moves any output that reads one
// far outside the tolerance.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>

#include "ops/conformance.h"
#include "ops/reference.h"

namespace tllm::test {
namespace {

struct Heads {
  int n_head, n_head_kv, head_dim;
};

// Qwen2.5-0.5B (14/2), SmolLM2 (9/3), no grouping with an odd count (7/7), one KV head (3/1),
// groups of 8 and 20 query heads, head_dim 64 and 128, and head_dim 80 (padded to 128 in prefill;
// the generic decode kernel).
const Heads kHeads[] = {{14, 2, 64}, {9, 3, 64}, {7, 7, 64}, {3, 1, 128}, {16, 2, 128}, {40, 2, 64}, {4, 2, 80}};

constexpr float kPoison = 1000.0f;

struct Caches {
  std::vector<half_t> k, v;  // (n_head_kv, n_ctx, head_dim)
};

class AttentionTest : public OpsTest {
 protected:
  // Random rows 0 .. n_valid-1, poison after.
  static Caches make_caches(Rng& rng, const Heads& hd, int n_ctx, int n_valid) {
    const size_t size = size_t(hd.n_head_kv) * size_t(n_ctx) * size_t(hd.head_dim);
    Caches c{random_halves(rng, size, -1.0f, 1.0f), random_halves(rng, size, -1.0f, 1.0f)};
    for (int g = 0; g < hd.n_head_kv; ++g) {
      for (int j = n_valid; j < n_ctx; ++j) {
        for (int e = 0; e < hd.head_dim; ++e) c.v[(size_t(g) * n_ctx + j) * hd.head_dim + e] = float_to_half(kPoison);
      }
    }
    return c;
  }

  // The tolerance described at the top of the file, for m rows whose row i reads pos0 + i + 1 rows.
  static std::vector<double> tolerance(const std::vector<double>& want, const std::vector<double>& score_mag,
                                       const Caches& c, const Heads& hd, int n_ctx, int64_t m, int pos0) {
    std::vector<double> tol(want.size());
    const int group = hd.n_head / hd.n_head_kv;
    for (int64_t i = 0; i < m; ++i) {
      for (int h = 0; h < hd.n_head; ++h) {
        const int g = h / group;
        double max_v = 0;
        for (int j = 0; j <= pos0 + i; ++j) {
          for (int e = 0; e < hd.head_dim; ++e)
            max_v = std::max(max_v, std::fabs(double(half_to_float(c.v[(size_t(g) * n_ctx + j) * hd.head_dim + e]))));
        }
        const double e_w = fp32_sum_error(hd.head_dim) * score_mag[size_t(i * hd.n_head + h)] + 1e-6;
        for (int e = 0; e < hd.head_dim; ++e) {
          const size_t o = (size_t(i) * hd.n_head + h) * hd.head_dim + e;
          tol[o] = kHalfUlp * std::fabs(want[o]) + kHalfSubnormal + (1.0 / 2048 + 2 * e_w) * max_v;
        }
      }
    }
    return tol;
  }

  // Prefill of m rows at pos0 .. pos0+m-1. With `packed`, each q row sits at the start of a qkv row
  // (q_row_stride = (n_head + 2·n_head_kv)·head_dim) whose other values are poison. With
  // `pos_in_memory`, pos0 reaches the op only through `pos` (backend memory) and the descriptor's
  // pos0 holds another position, as when a recorded prefill replays at a new position.
  void check_prefill(Rng& rng, const Heads& hd, int n_ctx, int64_t m, int pos0, float q_amp, bool packed,
                     bool pos_in_memory = false) {
    const int64_t q_dim = int64_t(hd.n_head) * hd.head_dim;
    const int64_t stride = packed ? q_dim + 2 * int64_t(hd.n_head_kv) * hd.head_dim : q_dim;
    std::vector<float> q(size_t(m * stride), kPoison);
    for (int64_t i = 0; i < m; ++i) {
      const std::vector<float> row = random_floats(rng, size_t(q_dim), -q_amp, q_amp);
      std::copy(row.begin(), row.end(), q.begin() + i * stride);
    }
    const Caches c = make_caches(rng, hd, n_ctx, pos0 + int(m));
    const float scale = 1.0f / std::sqrt(float(hd.head_dim));
    Buffer qb = upload(q), kc = upload(c.k), vc = upload(c.v);
    Buffer out = alloc<half_t>(size_t(m * q_dim));
    AttentionPrefillDesc d;
    d.q = qb.as<float>();
    d.k_cache = kc.as<half_t>();
    d.v_cache = vc.as<half_t>();
    d.out = out.as<half_t>();
    d.m = m;
    d.q_row_stride = packed ? stride : 0;
    d.pos0 = pos0;
    Buffer pos = upload(std::vector<int32_t>{pos0});
    if (pos_in_memory) {
      d.pos0 = pos0 == 0 ? n_ctx - int(m) : 0;
      d.pos = pos.as<int32_t>();
    }
    d.n_head = hd.n_head;
    d.n_head_kv = hd.n_head_kv;
    d.head_dim = hd.head_dim;
    d.n_ctx = n_ctx;
    d.scale = scale;
    be().attention_prefill(d);
    std::vector<double> score_mag;
    const std::vector<double> want = ref::attention(q, stride, c.k, c.v, m, pos0, hd.n_head, hd.n_head_kv,
                                                    hd.head_dim, n_ctx, scale, &score_mag);
    EXPECT_TRUE(all_close(to_float(download<half_t>(out)), want, tolerance(want, score_mag, c, hd, n_ctx, m, pos0)))
        << "prefill " << hd.n_head << "/" << hd.n_head_kv << " head_dim=" << hd.head_dim << " m=" << m
        << " pos0=" << pos0 << (packed ? " packed q" : "") << (pos_in_memory ? " pos0 from memory" : "");
  }

  // A decode descriptor over caches k and v with the n_kv scalar at n_kv.
  static AttentionDecodeDesc decode_desc(const Heads& hd, int n_ctx, const float* q, const half_t* k,
                                         const half_t* v, half_t* out, const int32_t* n_kv) {
    AttentionDecodeDesc d;
    d.q = q;
    d.k_cache = k;
    d.v_cache = v;
    d.out = out;
    d.n_kv = n_kv;
    d.n_head = hd.n_head;
    d.n_head_kv = hd.n_head_kv;
    d.head_dim = hd.head_dim;
    d.n_ctx = n_ctx;
    d.scale = 1.0f / std::sqrt(float(hd.head_dim));
    return d;
  }

  // The decode output in `out` against the oracle for q and the host caches c at n_kv rows.
  static void expect_decode(const std::vector<float>& q, const Caches& c, const Heads& hd, int n_ctx, int n_kv,
                            const std::vector<half_t>& out, const std::string& what) {
    std::vector<double> score_mag;
    const std::vector<double> want =
        ref::attention(q, int64_t(hd.n_head) * hd.head_dim, c.k, c.v, 1, n_kv - 1, hd.n_head, hd.n_head_kv,
                       hd.head_dim, n_ctx, 1.0f / std::sqrt(float(hd.head_dim)), &score_mag);
    EXPECT_TRUE(all_close(to_float(out), want, tolerance(want, score_mag, c, hd, n_ctx, 1, n_kv - 1)))
        << what << " " << hd.n_head << "/" << hd.n_head_kv << " head_dim=" << hd.head_dim << " n_kv=" << n_kv
        << " n_ctx=" << n_ctx;
  }

  // The output projection fused into a decode call (AttentionDecodeDesc::wo): random W8 weights of
  // n_out rows, a new random y before each call, and the caller's promise max_n_kv.
  struct Projection {
    int64_t n_out = 0;
    int max_n_kv = 0;
  };
  struct ProjectionState {
    HostWeights w;
    std::unique_ptr<Matrix> dev;
    Buffer y;
    std::vector<float> y0;
  };

  ProjectionState start_projection(Rng& rng, const Projection& p, int64_t q_dim, AttentionDecodeDesc& d) {
    ProjectionState s;
    s.w = random_w8(rng, p.n_out, q_dim);
    s.dev = be().upload_matrix(s.w.view());
    s.y = alloc<float>(size_t(p.n_out));
    d.wo = s.dev.get();
    d.y = s.y.as<float>();
    d.max_n_kv = p.max_n_kv;
    return s;
  }

  void new_y(Rng& rng, ProjectionState& s) {
    s.y0 = random_floats(rng, size_t(s.w.n), -2.0f, 2.0f);
    be().upload(s.y.data(), s.y0.data(), s.y0.size() * sizeof(float));
  }

  // y against y0 + out · woᵀ for the op's own fp16 output (checked against the attention oracle
  // apart): the tolerance of an fp32 sum, as in the matmul tests.
  void expect_projection(const ProjectionState& s, const std::vector<half_t>& out, const std::string& what) {
    const int64_t n = s.w.n, k = s.w.k;
    std::vector<double> mag;
    std::vector<double> want = ref::matmul(ref::dequantize(s.w.view()), n, k, to_float(out), 1, nullptr, &mag);
    std::vector<double> tol(want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      want[i] += s.y0[i];
      tol[i] = fp32_sum_error(k) * (mag[i] + std::fabs(s.y0[i]));
    }
    EXPECT_TRUE(all_close(download<float>(s.y), want, tol)) << what << ": the fused projection, n_out=" << n;
  }

  // Decode against each n_kv in turn, with one descriptor: only the n_kv value in backend memory
  // changes between calls. Rows from max(n_kv_list) on are poison. `misalign` elements before q and
  // each cache in their buffers (1: q 4-byte and the caches 2-byte aligned only).
  void check_decode(Rng& rng, const Heads& hd, int n_ctx, const std::vector<int>& n_kv_list, float q_amp,
                    int misalign = 0, const Projection* proj = nullptr) {
    const int64_t q_dim = int64_t(hd.n_head) * hd.head_dim;
    const Caches c = make_caches(rng, hd, n_ctx, *std::max_element(n_kv_list.begin(), n_kv_list.end()));
    std::vector<half_t> k_host(size_t(misalign), 0), v_host(size_t(misalign), 0);
    k_host.insert(k_host.end(), c.k.begin(), c.k.end());
    v_host.insert(v_host.end(), c.v.begin(), c.v.end());
    Buffer kc = upload(k_host), vc = upload(v_host);
    Buffer qb = alloc<float>(size_t(q_dim + misalign)), out = alloc<half_t>(size_t(q_dim)), n_kv_b = alloc<int32_t>(1);
    AttentionDecodeDesc d = decode_desc(hd, n_ctx, qb.as<float>() + misalign, kc.as<half_t>() + misalign,
                                        vc.as<half_t>() + misalign, out.as<half_t>(), n_kv_b.as<int32_t>());
    ProjectionState ps;
    if (proj) ps = start_projection(rng, *proj, q_dim, d);
    for (int n_kv : n_kv_list) {
      const std::vector<float> q = random_floats(rng, size_t(q_dim), -q_amp, q_amp);
      const int32_t n_kv_host = n_kv;
      be().upload(qb.as<float>() + misalign, q.data(), q.size() * sizeof(float));
      be().upload(n_kv_b.data(), &n_kv_host, sizeof(int32_t));
      if (proj) new_y(rng, ps);
      be().attention_decode(d);
      const std::vector<half_t> got = download<half_t>(out);
      expect_decode(q, c, hd, n_ctx, n_kv, got, "decode");
      if (proj) expect_projection(ps, got, "decode n_kv=" + std::to_string(n_kv));
    }
  }

  // A decode step's order: the newest row (n_kv - 1) appended by the op just before attention
  // (kv_append here) and only_newest_row_fresh set, so that a backend may read n_kv and the older
  // rows early but must take that row after the append. The row holds poison until then.
  void check_decode_appended(Rng& rng, const Heads& hd, int n_ctx, const std::vector<int>& n_kv_list,
                             const Projection* proj = nullptr) {
    const int64_t q_dim = int64_t(hd.n_head) * hd.head_dim, kv_dim = int64_t(hd.n_head_kv) * hd.head_dim;
    const Caches c = make_caches(rng, hd, n_ctx, n_ctx);
    Buffer kc = upload(c.k), vc = upload(c.v);
    Buffer qb = alloc<float>(size_t(q_dim)), out = alloc<half_t>(size_t(q_dim)), n_kv_b = alloc<int32_t>(1);
    Buffer pos_b = alloc<int32_t>(1), k_row_b = alloc<float>(size_t(kv_dim)), v_row_b = alloc<float>(size_t(kv_dim));
    AttentionDecodeDesc d =
        decode_desc(hd, n_ctx, qb.as<float>(), kc.as<half_t>(), vc.as<half_t>(), out.as<half_t>(), n_kv_b.as<int32_t>());
    d.only_newest_row_fresh = true;
    ProjectionState ps;
    if (proj) ps = start_projection(rng, *proj, q_dim, d);
    KvAppendDesc a;
    a.k = k_row_b.as<float>();
    a.v = v_row_b.as<float>();
    a.k_cache = kc.as<half_t>();
    a.v_cache = vc.as<half_t>();
    a.pos = pos_b.as<int32_t>();
    a.n_head_kv = hd.n_head_kv;
    a.head_dim = hd.head_dim;
    a.n_ctx = n_ctx;
    const std::vector<half_t> poison(size_t(hd.head_dim), float_to_half(kPoison));
    for (int n_kv : n_kv_list) {
      const int32_t row = n_kv - 1;
      std::vector<float> k_row(static_cast<size_t>(kv_dim)), v_row(static_cast<size_t>(kv_dim));
      for (int g = 0; g < hd.n_head_kv; ++g) {
        const size_t at = (size_t(g) * n_ctx + size_t(row)) * size_t(hd.head_dim);
        for (int e = 0; e < hd.head_dim; ++e) {
          k_row[size_t(g) * size_t(hd.head_dim) + size_t(e)] = half_to_float(c.k[at + size_t(e)]);
          v_row[size_t(g) * size_t(hd.head_dim) + size_t(e)] = half_to_float(c.v[at + size_t(e)]);
        }
        be().upload(kc.as<half_t>() + at, poison.data(), poison.size() * sizeof(half_t));
        be().upload(vc.as<half_t>() + at, poison.data(), poison.size() * sizeof(half_t));
      }
      const std::vector<float> q = random_floats(rng, size_t(q_dim), -2.0f, 2.0f);
      be().upload(qb.data(), q.data(), q.size() * sizeof(float));
      be().upload(n_kv_b.data(), &n_kv, sizeof(int32_t));
      be().upload(pos_b.data(), &row, sizeof(int32_t));
      be().upload(k_row_b.data(), k_row.data(), k_row.size() * sizeof(float));
      be().upload(v_row_b.data(), v_row.data(), v_row.size() * sizeof(float));
      if (proj) new_y(rng, ps);
      be().kv_append(a);
      be().attention_decode(d);
      const std::vector<half_t> got = download<half_t>(out);
      expect_decode(q, c, hd, n_ctx, n_kv, got, "decode after kv_append");
      if (proj) expect_projection(ps, got, "decode after kv_append n_kv=" + std::to_string(n_kv));
    }
  }
};
TLLM_OPS_INSTANTIATE(AttentionTest);

// The newest row in a split's first chunk and past it, in one split (of one or two chunks) and in
// several.
TEST_P(AttentionTest, DecodeNewestRowFromThePreviousOp) {
  Rng rng(911);
  for (const Heads& hd : kHeads)
    check_decode_appended(rng, hd, 4096, {1, 2, 17, 128, 255, 256, 257, 300, 511, 512, 513, 1000, 2049, 4096, 31});
}

TEST_P(AttentionTest, PrefillFromStart) {
  Rng rng(901);
  for (const Heads& hd : kHeads) {
    check_prefill(rng, hd, 256, 1, 0, 2.0f, false);
    check_prefill(rng, hd, 256, 17, 0, 2.0f, false);
    check_prefill(rng, hd, 256, 30, 0, 2.0f, false);  // the benchmark's chat prompt: rows past m in a block
  }
}

TEST_P(AttentionTest, PrefillAfterCachedRows) {
  Rng rng(902);
  for (const Heads& hd : kHeads) {
    check_prefill(rng, hd, 256, 5, 11, 2.0f, false);
    check_prefill(rng, hd, 256, 64, 100, 2.0f, false);
    check_prefill(rng, hd, 256, 100, 37, 2.0f, false);  // two row blocks, tiles across the prompt's start
  }
  check_prefill(rng, kHeads[0], 256, 16, 240, 2.0f, false);  // the chunk ends at the last cache row
}

TEST_P(AttentionTest, PrefillPositionFromMemory) {
  Rng rng(910);
  for (const Heads& hd : kHeads) {
    check_prefill(rng, hd, 256, 30, 41, 2.0f, true, true);  // the descriptor says 0
    check_prefill(rng, hd, 256, 7, 0, 2.0f, false, true);   // the descriptor says 249
  }
}

TEST_P(AttentionTest, PrefillQRowStride) {
  Rng rng(903);
  for (const Heads& hd : kHeads) check_prefill(rng, hd, 128, 9, 3, 2.0f, true);
}

TEST_P(AttentionTest, Decode) {
  Rng rng(904);
  for (const Heads& hd : kHeads) {
    check_decode(rng, hd, 4096, {4096, 1, 17}, 2.0f);
    check_decode(rng, hd, 300, {1, 17, 255}, 2.0f);
  }
}

// n_kv around the one-split limit and multiples of the split unit, for the benchmarked layout (14/2,
// head_dim 64), a group of 3 and head_dim 128, with returns to short contexts in between.
TEST_P(AttentionTest, DecodeSplitBoundaries) {
  Rng rng(906);
  check_decode(rng, kHeads[0], 4096,
               {1, 63, 64, 65, 255, 256, 257, 511, 512, 513, 1000, 2048, 2049, 4096, 257, 17, 4095}, 2.0f);
  check_decode(rng, kHeads[1], 3000, {256, 257, 3000, 1, 700}, 2.0f);
  for (const Heads& hd : {kHeads[3], kHeads[4]})
    check_decode(rng, hd, 1100, {1, 127, 128, 129, 255, 256, 257, 1000, 1024, 1025, 256, 1100}, 2.0f);
}

// Contexts short enough that the CUDA backend's splits of a KV head form one thread-block cluster
// (n_ctx rows of K and V at most 576 KB per KV head): half-chunk and whole-chunk splits, several
// head tiles (40/2), head_dim 128, and the newest row appended by the op before.
TEST_P(AttentionTest, DecodeSplitsInOneCluster) {
  Rng rng(909);
  check_decode(rng, kHeads[0], 2304, {513, 1000, 2048, 2049, 2304, 17, 700}, 2.0f);
  check_decode(rng, kHeads[5], 2000, {600, 2000, 1}, 2.0f);
  check_decode(rng, kHeads[4], 1152, {300, 600, 1152}, 2.0f);
  check_decode_appended(rng, kHeads[0], 2304, {513, 2049, 2304});
}

// More than 64 chunks of rows: each split spans more than one chunk, whatever the multiprocessor count.
TEST_P(AttentionTest, DecodeLongContext) {
  Rng rng(907);
  check_decode(rng, kHeads[0], 16448, {16385, 16448, 300}, 2.0f);
}

// Contexts past one cluster whose rows may take more splits than one batch of the CUDA backend's
// combine holds (16), where 2 or 4 threads share each (head, 4 dims) of it: 14/2 heads of up to 4,352
// and 8,192 rows (17 and 32 splits on an H200, two threads), 8,448 (33: batches), 9/3 of 11,264 (44:
// four threads), the head tiles of 40/2 (8 and 4 heads, 22 splits), and at each, fewer rows (one
// batch or one split). Large scores, and the newest row appended by the op before, as after the
// benchmark's 4,096 tokens of context.
TEST_P(AttentionTest, DecodeManySplits) {
  Rng rng(913);
  check_decode(rng, kHeads[0], 4352, {4097, 4352, 4224, 2049, 300, 17}, 2.0f);
  check_decode(rng, kHeads[0], 8192, {8192, 6000, 4097}, 2.0f);
  check_decode(rng, kHeads[0], 8448, {8193, 8448, 4097}, 2.0f);
  check_decode(rng, kHeads[1], 11264, {11264, 9000, 5000, 4200, 1000}, 2.0f);
  check_decode(rng, kHeads[5], 5632, {5632, 4500, 700}, 2.0f);
  check_decode(rng, kHeads[0], 4352, {4097, 4224}, 100.0f);
  check_decode_appended(rng, kHeads[0], 4352, {4097, 4098, 4224});
}

// Layouts the CUDA backend leaves to its generic kernel: head_dims other than 64 and 128 (down to 2
// and up to 256, one not a multiple of 4), and q and caches that are not 16-byte aligned.
TEST_P(AttentionTest, DecodeOtherLayouts) {
  Rng rng(908);
  for (const Heads& hd : {Heads{6, 2, 40}, Heads{4, 1, 256}, Heads{2, 2, 2}, Heads{10, 2, 96}, Heads{3, 1, 18}})
    check_decode(rng, hd, 300, {1, 64, 65, 300, 17}, 2.0f);
  for (const Heads& hd : {kHeads[0], kHeads[3]}) check_decode(rng, hd, 600, {1, 65, 600, 200}, 2.0f, 1);
}

// The output projection fused in (y += out · woᵀ). On CUDA one kernel runs both where the heads fit
// at most two groups of up to 8 query heads (14/2, 3/1, 16/2) and the caller's bound max_n_kv leaves
// each block at most one chunk of rows (256 at head_dim 64, 128 at 128) with the rows split over up
// to 8 blocks a cluster: one split up to one chunk, 2 or 4 splits of 14/2 up to 1,024 rows (4
// splits of 3/1 and of 16/2 at 512, head_dim 128). Past the bound that kernel takes the further chunks in turn (still
// right, only slower). Every other case (a bound of 2,048 or 0 = n_ctx past that, 9/3, 7/7, 40/2,
// head_dim 80, unaligned q) runs attention and then matmul_m1. Splits left without rows (n_kv below
// 16 rows a split), output counts that are not a multiple of the kernel's 8 rows per block
// (100, 8), more outputs than the n_head·head_dim inputs (2,560 of 2,048, fused; Mistral-Nemo's
// 5,120 of its 32/8 heads of 128, 4,096, apart) and the newest row appended by the op before.
// Where CUDA traces kernels, a split form is checked to run as one kernel.
TEST_P(AttentionTest, DecodeWithOutputProjection) {
  Rng rng(912);
  const Projection short_896{896, 256}, short_100{100, 128}, short_8{8, 128}, any_896{896, 0};
  const Projection split_2{896, 512}, split_4{896, 1024}, long_896{896, 2048}, split_hd128{100, 512};
  const Projection wide_hd128{2560, 128}, wide_split_hd128{2560, 512}, nemo{5120, 1024};
  check_decode(rng, kHeads[0], 4096, {1, 17, 255, 256, 200, 257, 511, 512, 700, 31}, 2.0f, 0, &short_896);
  check_decode(rng, kHeads[0], 4096, {513, 4096, 17}, 2.0f, 0, &any_896);
  check_decode(rng, kHeads[0], 4096, {1, 15, 16, 17, 33, 300, 512, 513, 1000}, 2.0f, 0, &split_2);
  check_decode(rng, kHeads[0], 4096, {1, 7, 47, 129, 700, 1024, 1025, 2000}, 2.0f, 0, &split_4);
  check_decode(rng, kHeads[0], 4096, {1, 1000, 2048}, 2.0f, 0, &long_896);
  check_decode(rng, kHeads[0], 256, {1, 158, 256}, 2.0f, 0, &any_896);  // n_ctx itself is one chunk
  check_decode(rng, kHeads[0], 600, {1, 65, 250}, 2.0f, 1, &short_896);  // unaligned: not fused
  check_decode(rng, kHeads[3], 1024, {1, 128, 129, 256}, 2.0f, 0, &short_100);
  check_decode(rng, kHeads[3], 1024, {1, 100, 512, 700}, 2.0f, 0, &split_hd128);  // 1 group, 4 splits
  check_decode(rng, kHeads[4], 300, {1, 127, 128, 255}, 2.0f, 0, &short_8);
  check_decode(rng, kHeads[4], 1024, {1, 33, 400, 512}, 2.0f, 0, &split_hd128);   // 2 groups, 4 splits
  check_decode(rng, kHeads[4], 1024, {1, 100, 128}, 2.0f, 0, &wide_hd128);
  check_decode(rng, kHeads[4], 1024, {1, 129, 512}, 2.0f, 0, &wide_split_hd128);
  check_decode(rng, Heads{32, 8, 128}, 1024, {1, 300, 1024}, 2.0f, 0, &nemo);
  for (const Heads& hd : {kHeads[1], kHeads[2], kHeads[5], kHeads[6]})
    check_decode(rng, hd, 700, {1, 300, 700}, 2.0f, 0, &any_896);
  check_decode(rng, kHeads[0], 4096, {1, 250}, 100.0f, 0, &short_896);  // large scores
  check_decode(rng, kHeads[0], 4096, {1, 900}, 100.0f, 0, &split_4);
  check_decode_appended(rng, kHeads[0], 4096, {1, 2, 17, 128, 255, 256, 257, 300, 512}, &short_896);
  check_decode_appended(rng, kHeads[0], 4096, {513, 2049}, &any_896);
  check_decode_appended(rng, kHeads[0], 4096, {1, 2, 255, 256, 257, 700, 1023, 1024, 1100}, &split_4);
  check_decode_appended(rng, kHeads[0], 4096, {1, 16, 17, 511, 512}, &split_2);
  check_decode_appended(rng, kHeads[4], 1024, {1, 128, 129, 200}, &short_100);

  if (be().name() != "cuda" || !be().trace_begin()) return;
  check_decode(rng, kHeads[0], 4096, {300, 1024}, 2.0f, 0, &split_4);
  int fused = 0, other = 0;
  for (const TraceRecord& r : be().trace_end()) {
    if (r.name.find("w8a16_matmul_m1_attention_decode") != std::string::npos) {
      ++fused;
    } else if (r.name.find("attention_decode") != std::string::npos || r.name.find("matmul") != std::string::npos) {
      ++other;
    }
  }
  EXPECT_EQ(fused, 2) << "attention with the output projection in one kernel, rows split 4 ways";
  EXPECT_EQ(other, 0);
}

// Scores in the hundreds: exp overflows fp32 unless the maximum is subtracted first.
// Heads as wide as the backend's max_head_dim(), which Model::load holds models to: prefill and
// decode agree with the oracle there, and prefill refuses heads two wider.
TEST_P(AttentionTest, HeadsAsWideAsTheBackendTakes) {
  Rng rng(912);
  const int widest = be().max_head_dim();
  ASSERT_GE(widest, 128);
  const Heads hd{4, 2, widest};
  check_prefill(rng, hd, 128, 17, 30, 2.0f, false);
  check_decode(rng, hd, 512, {1, 17, 500}, 2.0f);
  EXPECT_THROW(check_prefill(rng, Heads{4, 2, widest + 2}, 128, 17, 0, 2.0f, false), BackendError);
}

// Prefill of heads wider than 128, which the CUDA backend leaves to its generic kernel: 256, 192 and
// 130 (not a multiple of 8), from the start, after cached rows, over more than one block of rows,
// with the position from memory, a q row stride, and large scores.
TEST_P(AttentionTest, PrefillWideHeads) {
  Rng rng(914);
  for (const Heads& hd : {Heads{4, 1, 256}, Heads{6, 2, 192}, Heads{3, 3, 130}}) {
    check_prefill(rng, hd, 128, 1, 0, 2.0f, false);
    check_prefill(rng, hd, 128, 30, 0, 2.0f, false);
    check_prefill(rng, hd, 128, 9, 50, 2.0f, false);
    check_prefill(rng, hd, 128, 70, 58, 2.0f, true);
    check_prefill(rng, hd, 128, 7, 0, 2.0f, false, true);
    check_prefill(rng, hd, 128, 17, 30, 100.0f, false);
  }
}

TEST_P(AttentionTest, LargeScores) {
  Rng rng(905);
  for (const Heads& hd : {kHeads[0], kHeads[3]}) {
    check_decode(rng, hd, 512, {1, 17, 500}, 100.0f);
    check_prefill(rng, hd, 128, 17, 30, 100.0f, false);
  }
}

}  // namespace
}  // namespace tllm::test
