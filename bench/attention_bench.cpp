// attention: grouped-query attention of Qwen2.5-0.5B (n_head 14, n_head_kv 2, head_dim 64) over the
// fp16 KV cache.
//   attention_decode   one query row against n_kv = 128, 1024, 4096 cache rows. The cache is sized to
//                      n_kv and cycled through copies that add up to at least 128 MB (see
//                      bench_common.h), so each run streams K and V from memory as a decode step
//                      does (every layer has its own cache).
//   w8a16_matmul_m1_attention_decode  the same at n_kv = 128 with the output projection fused in
//                      (896 x 896 W8, weights cycled like the caches).
//   attention_prefill  T = 128, 512 causal query rows at positions 0 .. T-1 (q packed in qkv rows, as
//                      the model passes it). Compute-bound; its inputs are not cycled.
//
// Bytes per op: K and V rows read once (2 · n_head_kv · rows · head_dim fp16), q read (fp32) and the
// output written (fp16). Prefill also reports FLOP/s: QKᵀ and PV over the causal triangle,
// 4 · n_head · head_dim · T(T+1)/2.
#include "bench/bench_common.h"

namespace tllm::bench {
namespace {

// With `projection`, the output projection fused in (AttentionDecodeDesc::wo, y += out · woᵀ), as a
// decode step of up to 256 cache rows runs it; the weights cycle with the caches.
OpFactory decode_case(int n_kv, bool projection = false) {
  return [=](Workspace& ws) {
    const ModelShape& s = kModel;
    const size_t cache = size_t(s.n_head_kv) * n_kv * s.head_dim;  // (n_head_kv, n_ctx = n_kv, head_dim)
    const size_t copies = ws.flush_copies(2 * cache * sizeof(half_t));
    const half_t* k = ws.f16_copies(cache, copies);  // (copies, n_head_kv, n_kv, head_dim)
    const half_t* v = ws.f16_copies(cache, copies);
    AttentionDecodeDesc d;
    d.q = ws.f32(size_t(s.qkv_dim()));   // (n_head, head_dim) at the start of a qkv row
    d.out = ws.f16(size_t(s.q_dim()));   // (n_head, head_dim)
    d.n_kv = ws.i32({n_kv});
    d.n_head = s.n_head;
    d.n_head_kv = s.n_head_kv;
    d.head_dim = s.head_dim;
    d.n_ctx = n_kv;
    d.scale = 1.0f / std::sqrt(float(s.head_dim));
    std::vector<const Matrix*> wo;
    if (projection) {
      wo = ws.matrices(WeightType::W8, s.n_embd, s.q_dim());
      d.y = ws.f32(size_t(s.n_embd));
      d.max_n_kv = n_kv;
    }
    OpCase c;
    c.op = Op::AttentionDecode;
    c.bytes = 2.0 * cache * sizeof(half_t) + s.q_dim() * 4.0 + s.q_dim() * 2.0;
    if (projection) c.bytes += double(wo[0]->stream_bytes()) + 2.0 * s.n_embd * sizeof(float);
    Backend& b = ws.backend();
    c.issue = [&b, d, k, v, cache, copies, wo](int64_t i) mutable {
      d.k_cache = k + size_t(i) % copies * cache;
      d.v_cache = v + size_t(i) % copies * cache;
      if (!wo.empty()) d.wo = wo[size_t(i) % wo.size()];
      b.attention_decode(d);
    };
    return c;
  };
}

OpFactory prefill_case(int t) {
  return [=](Workspace& ws) {
    const ModelShape& s = kModel;
    const size_t cache = size_t(s.n_head_kv) * t * s.head_dim;  // (n_head_kv, n_ctx = T, head_dim)
    AttentionPrefillDesc d;
    d.q = ws.f32(size_t(t) * s.qkv_dim());  // (T, qkv_dim): q heads first
    d.q_row_stride = s.qkv_dim();
    d.k_cache = ws.f16(cache);
    d.v_cache = ws.f16(cache);
    d.out = ws.f16(size_t(t) * s.q_dim());  // (T, n_head, head_dim)
    d.m = t;
    d.pos0 = 0;
    d.n_head = s.n_head;
    d.n_head_kv = s.n_head_kv;
    d.head_dim = s.head_dim;
    d.n_ctx = t;
    d.scale = 1.0f / std::sqrt(float(s.head_dim));
    OpCase c;
    c.op = Op::AttentionPrefill;
    c.bytes = 2.0 * cache * sizeof(half_t) + double(t) * s.q_dim() * (4.0 + 2.0);
    c.flops = 4.0 * s.n_head * s.head_dim * (double(t) * (t + 1) / 2);
    Backend& b = ws.backend();
    c.issue = [&b, d](int64_t) { b.attention_prefill(d); };
    return c;
  };
}

void register_cases() {
  for (int n_kv : {128, 1024, 4096}) register_op("attention_decode", args({{"n_kv", n_kv}}), decode_case(n_kv));
  register_op("w8a16_matmul_m1_attention_decode", args({{"n_kv", 128}}), decode_case(128, true));
  for (int t : {128, 512}) register_op("attention_prefill", args({{"T", t}}), prefill_case(t));
}

}  // namespace
}  // namespace tllm::bench

int main(int argc, char** argv) { return tllm::bench::bench_main(argc, argv, tllm::bench::register_cases); }
