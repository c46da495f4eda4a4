// KV append on the CPU: k and v rows converted to fp16 and written at their positions in the
// (n_head_kv, n_ctx, head_dim) caches, one parallel task per (row, kv head).
#include "backends/cpu/cpu_backend_impl.h"

namespace tllm::cpu {

void kv_append_rows(const float* k, const float* v, int64_t row_stride, half_t* k_cache,
                    half_t* v_cache, const int32_t* pos, int64_t m, int n_head_kv, int head_dim,
                    int n_ctx) {
  for (int64_t r = 0; r < m; ++r) TLLM_CPU_CHECK(pos[r] >= 0 && pos[r] < n_ctx);
  parallel_for(m * n_head_kv, 2 * head_dim, [&](int64_t t) {
    const int64_t r = t / n_head_kv, h = t % n_head_kv;
    const int64_t src = r * row_stride + h * head_dim;
    const int64_t dst = (h * n_ctx + pos[r]) * int64_t(head_dim);
    for (int i = 0; i < head_dim; ++i) {
      k_cache[dst + i] = float_to_half(k[src + i]);
      v_cache[dst + i] = float_to_half(v[src + i]);
    }
  });
}

void CpuBackend::kv_append(const KvAppendDesc& d) {
  TraceScope t(trace_, "kv_append");
  TLLM_CPU_CHECK(d.m >= 1 && d.n_head_kv >= 1 && d.head_dim >= 1 && d.n_ctx >= 1);
  TLLM_CPU_CHECK(d.k && d.v && d.k_cache && d.v_cache && d.pos);
  kv_append_rows(d.k, d.v, int64_t(d.n_head_kv) * d.head_dim, d.k_cache, d.v_cache, d.pos, d.m,
                 d.n_head_kv, d.head_dim, d.n_ctx);
}

}  // namespace tllm::cpu
