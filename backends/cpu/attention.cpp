// Causal self-attention on the CPU, prefill (m query rows) and decode (one row against *n_kv).
//
// One parallel task takes a group of up to kHeadsPerTask query heads that read the same KV head
// (grouped-query attention) for one query row, and walks the cache rows once, in order: each fp16 k
// and v row is widened once and used by every head of the group, and both caches are read
// front to back (rows of one KV head are contiguous in the (n_head_kv, n_ctx, head_dim) layout).
// Softmax is the one-pass form in fp32: a running maximum m, the running sum of exp(s - m) and the
// running weighted sum of v, both rescaled by exp(m_old - m_new) when the maximum grows; the result
// equals max-subtracted softmax up to fp32 rounding and needs no per-row score buffer.
#include <algorithm>
#include <cmath>
#include <limits>

#include "backends/cpu/cpu_backend_impl.h"

namespace tllm::cpu {

namespace {

constexpr int kHeadsPerTask = 8;

// Sum of a[i] * b[i] in eight interleaved fp32 partial sums (vectorises without reassociation flags).
inline float dot(const float* a, const float* b, int n) {
  float part[8] = {};
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l) part[l] += a[i + l] * b[i + l];
  }
  float s = ((part[0] + part[4]) + (part[1] + part[5])) + ((part[2] + part[6]) + (part[3] + part[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// Query heads h0 .. h0+n_heads-1 of one row, all reading KV head kv_head, against cache rows
// 0 .. n_kv-1. q: the row's (n_head, head_dim) values; out: the row's (n_head, head_dim) output.
void attend(const float* q, half_t* out, int h0, int n_heads, int kv_head, const half_t* k_cache,
            const half_t* v_cache, int n_ctx, int head_dim, int n_kv, float scale) {
  alignas(64) float k_row[kMaxHeadDim], v_row[kMaxHeadDim];
  alignas(64) float acc[kHeadsPerTask][kMaxHeadDim];
  float run_max[kHeadsPerTask], run_sum[kHeadsPerTask];
  for (int t = 0; t < n_heads; ++t) {
    run_max[t] = -std::numeric_limits<float>::infinity();
    run_sum[t] = 0.0f;
    std::fill(acc[t], acc[t] + head_dim, 0.0f);
  }
  const int64_t base = int64_t(kv_head) * n_ctx * head_dim;
  for (int j = 0; j < n_kv; ++j) {
    half_to_float_row(k_cache + base + int64_t(j) * head_dim, k_row, head_dim);
    half_to_float_row(v_cache + base + int64_t(j) * head_dim, v_row, head_dim);
    for (int t = 0; t < n_heads; ++t) {
      const float s = dot(q + int64_t(h0 + t) * head_dim, k_row, head_dim) * scale;
      float* a = acc[t];
      if (s > run_max[t]) {
        const float c = std::exp(run_max[t] - s);  // 0 on the first row
        run_sum[t] *= c;
        for (int i = 0; i < head_dim; ++i) a[i] *= c;
        run_max[t] = s;
      }
      const float p = std::exp(s - run_max[t]);
      run_sum[t] += p;
      for (int i = 0; i < head_dim; ++i) a[i] += p * v_row[i];
    }
  }
  for (int t = 0; t < n_heads; ++t) {
    const float inv = 1.0f / run_sum[t];
    half_t* o = out + int64_t(h0 + t) * head_dim;
    for (int i = 0; i < head_dim; ++i) o[i] = float_to_half(acc[t][i] * inv);
  }
}

void check_heads(int n_head, int n_head_kv, int head_dim, int n_ctx) {
  TLLM_CPU_CHECK(n_head >= 1 && n_head_kv >= 1 && n_head % n_head_kv == 0);
  TLLM_CPU_CHECK(head_dim >= 1 && head_dim <= kMaxHeadDim && n_ctx >= 1);
}

}  // namespace

int CpuBackend::max_head_dim() const { return kMaxHeadDim; }

void CpuBackend::attention_prefill(const AttentionPrefillDesc& d) {
  TraceScope t(trace_, "attention_prefill");
  check_heads(d.n_head, d.n_head_kv, d.head_dim, d.n_ctx);
  const int pos0 = d.pos ? *d.pos : d.pos0;
  TLLM_CPU_CHECK(d.m >= 1 && pos0 >= 0 && pos0 + d.m <= d.n_ctx);
  TLLM_CPU_CHECK(d.q && d.k_cache && d.v_cache && d.out);
  const int group = d.n_head / d.n_head_kv;  // query heads per KV head
  const int chunks = (group + kHeadsPerTask - 1) / kHeadsPerTask;
  const int64_t q_stride = d.q_row_stride ? d.q_row_stride : int64_t(d.n_head) * d.head_dim;
  const int64_t tasks_per_row = int64_t(d.n_head_kv) * chunks;
  // Cost of one task: a mean row reads about pos0 + m/2 cache rows for up to kHeadsPerTask heads.
  const int64_t task_cost = (int64_t(pos0) + d.m / 2 + 1) * d.head_dim * (2 * kHeadsPerTask + 2);
  parallel_for(d.m * tasks_per_row, task_cost, [&](int64_t task) {
    // Rows in the order 0, m-1, 1, m-2, ...: row i reads pos0+i+1 cache rows, so this order gives
    // contiguous blocks of tasks (how a static schedule splits them) about equal work.
    const int64_t p = task / tasks_per_row;
    const int64_t i = p % 2 == 0 ? p / 2 : d.m - 1 - p / 2;
    const int kv_head = int(task % tasks_per_row) / chunks;
    const int h0 = kv_head * group + int(task % tasks_per_row) % chunks * kHeadsPerTask;
    const int n_heads = std::min(kHeadsPerTask, (kv_head + 1) * group - h0);
    attend(d.q + i * q_stride, d.out + i * d.n_head * d.head_dim, h0, n_heads, kv_head, d.k_cache,
           d.v_cache, d.n_ctx, d.head_dim, pos0 + int(i) + 1, d.scale);
  });
}

void CpuBackend::attention_decode(const AttentionDecodeDesc& d) {
  TraceScope t(trace_, "attention_decode");
  check_heads(d.n_head, d.n_head_kv, d.head_dim, d.n_ctx);
  TLLM_CPU_CHECK(d.q && d.k_cache && d.v_cache && d.out && d.n_kv);
  const int n_kv = *d.n_kv;
  TLLM_CPU_CHECK(n_kv >= 1 && n_kv <= d.n_ctx);
  const int group = d.n_head / d.n_head_kv;
  const int chunks = (group + kHeadsPerTask - 1) / kHeadsPerTask;
  const int64_t task_cost = int64_t(n_kv) * d.head_dim * (2 * std::min(group, kHeadsPerTask) + 2);
  parallel_for(int64_t(d.n_head_kv) * chunks, task_cost, [&](int64_t task) {
    const int kv_head = int(task) / chunks;
    const int h0 = kv_head * group + int(task) % chunks * kHeadsPerTask;
    const int n_heads = std::min(kHeadsPerTask, (kv_head + 1) * group - h0);
    attend(d.q, d.out, h0, n_heads, kv_head, d.k_cache, d.v_cache, d.n_ctx, d.head_dim, n_kv, d.scale);
  });
  if (!d.wo) return;
  // The fused output projection, as the op sequence.
  TLLM_CPU_CHECK(d.y && d.wo->type() == WeightType::W8 && d.wo->k() == int64_t(d.n_head) * d.head_dim);
  matmul_impl(output_projection(d));
}

}  // namespace tllm::cpu
