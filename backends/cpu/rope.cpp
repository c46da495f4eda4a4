// Rotary position embedding on the CPU, and the fused rope + KV append step.
//
// One parallel task per row: it computes cos and sin of the row's head_dim/2 angles once, in fp64
// (angle_j = pos · freq_j with freq_j = theta^(-2j/head_dim) / freq_factors[j], so a large position
// loses nothing to fp32 angle rounding), and turns every head of the row by them, rounding the
// rotated pair to fp32. The factors (rope scaling: Llama 3's rope_freqs, linear scaling) are
// optional.
#include <cmath>

#include "backends/cpu/cpu_backend_impl.h"

namespace tllm::cpu {

void rope_rows(float* x, int64_t row_stride, const int32_t* pos, int64_t m, int n_heads, int head_dim,
               float theta, const float* freq_factors, RopeMode mode) {
  TLLM_CPU_CHECK(head_dim % 2 == 0 && head_dim <= kMaxHeadDim);
  const int half_dim = head_dim / 2;
  // Per row: about 100 operations for each angle (pow, cos, sin) and 6 per rotated pair.
  parallel_for(m, int64_t(half_dim) * (100 + 6 * n_heads), [&](int64_t r) {
    double cos_j[kMaxHeadDim / 2], sin_j[kMaxHeadDim / 2];
    for (int j = 0; j < half_dim; ++j) {
      double freq = std::pow(double(theta), -2.0 * j / head_dim);
      if (freq_factors) freq /= double(freq_factors[j]);
      const double angle = double(pos[r]) * freq;
      cos_j[j] = std::cos(angle);
      sin_j[j] = std::sin(angle);
    }
    for (int h = 0; h < n_heads; ++h) {
      float* head = x + r * row_stride + int64_t(h) * head_dim;
      for (int j = 0; j < half_dim; ++j) {
        // Normal pairs (2j, 2j+1); Neox pairs (j, j + head_dim/2).
        float& a = mode == RopeMode::Normal ? head[2 * j] : head[j];
        float& b = mode == RopeMode::Normal ? head[2 * j + 1] : head[j + half_dim];
        const double a0 = a, b0 = b;
        a = float(a0 * cos_j[j] - b0 * sin_j[j]);
        b = float(a0 * sin_j[j] + b0 * cos_j[j]);
      }
    }
  });
}

void CpuBackend::rope(const RopeDesc& d) {
  TraceScope t(trace_, "rope");
  TLLM_CPU_CHECK(d.m >= 1 && d.n_heads >= 1 && d.x && d.pos);
  rope_rows(d.x, int64_t(d.n_heads) * d.head_dim, d.pos, d.m, d.n_heads, d.head_dim, d.theta, d.freq_factors,
            d.mode);
}

void CpuBackend::qkv_rope_append(const QkvRopeAppendDesc& d) {
  TraceScope t(trace_, "rope_qkv_append");
  TLLM_CPU_CHECK(d.m >= 1 && d.n_head >= 1 && d.n_head_kv >= 1 && d.n_ctx >= 1);
  TLLM_CPU_CHECK(d.qkv && d.pos && d.k_cache && d.v_cache);
  // Row layout: n_head q heads, n_head_kv k heads, n_head_kv v heads. The q and k heads are
  // adjacent, so one rope pass over n_head + n_head_kv heads turns both.
  const int64_t hd = d.head_dim;
  const int64_t row_stride = (int64_t(d.n_head) + 2 * d.n_head_kv) * hd;
  rope_rows(d.qkv, row_stride, d.pos, d.m, d.n_head + d.n_head_kv, d.head_dim, d.theta, d.freq_factors,
            d.mode);
  const float* k = d.qkv + d.n_head * hd;
  const float* v = k + d.n_head_kv * hd;
  kv_append_rows(k, v, row_stride, d.k_cache, d.v_cache, d.pos, d.m, d.n_head_kv, d.head_dim, d.n_ctx);
}

}  // namespace tllm::cpu
