// KV cache writes of Qwen2.5-0.5B (n_head 14, n_head_kv 2, head_dim 64) into a cache of n_ctx = 4096
// rows, for one decode row (M = 1) and a prefill chunk (M = 512); each run writes the next M positions.
//   kv_append        k and v rows (fp32) converted to fp16 and stored at their positions;
//   qkv_rope_append  the fused step the model runs after the QKV projection: rope on the q and k heads
//                    of packed qkv rows (in place), then k and v stored in the cache.
//
// Bytes per op: kv_append reads k and v (2 · M · n_head_kv · head_dim fp32) and writes them (fp16);
// qkv_rope_append reads the qkv rows (M · qkv_dim fp32), writes the rotated q and k back
// (M · (n_head + n_head_kv) · head_dim fp32) and writes k and v to the cache (fp16). Both read M
// int32 positions.
#include "bench/bench_common.h"

namespace tllm::bench {
namespace {

constexpr int kCtx = 4096;

std::vector<int32_t> positions() {
  std::vector<int32_t> pos(kCtx);
  for (int i = 0; i < kCtx; ++i) pos[size_t(i)] = i;
  return pos;
}

// Positions i·M .. i·M + M - 1 (wrapping within the cache) for run i.
const int32_t* run_positions(const int32_t* pos, int64_t i, int64_t m) { return pos + (i * m) % (kCtx - m + 1); }

OpFactory kv_append_case(int64_t m) {
  return [=](Workspace& ws) {
    const ModelShape& s = kModel;
    const size_t cache = size_t(s.n_head_kv) * kCtx * s.head_dim;  // (n_head_kv, n_ctx, head_dim)
    const int32_t* pos = ws.i32(positions());
    KvAppendDesc d;
    d.k = ws.f32(size_t(m) * s.kv_dim());  // (m, n_head_kv, head_dim)
    d.v = ws.f32(size_t(m) * s.kv_dim());  // (m, n_head_kv, head_dim)
    d.k_cache = ws.f16(cache);
    d.v_cache = ws.f16(cache);
    d.m = m;
    d.n_head_kv = s.n_head_kv;
    d.head_dim = s.head_dim;
    d.n_ctx = kCtx;
    OpCase c;
    c.op = Op::KvAppend;
    c.bytes = 2.0 * m * s.kv_dim() * (4 + 2) + m * 4.0;
    Backend& b = ws.backend();
    c.issue = [&b, d, pos, m](int64_t i) mutable {
      d.pos = run_positions(pos, i, m);
      b.kv_append(d);
    };
    return c;
  };
}

OpFactory qkv_rope_append_case(int64_t m) {
  return [=](Workspace& ws) {
    const ModelShape& s = kModel;
    const size_t cache = size_t(s.n_head_kv) * kCtx * s.head_dim;  // (n_head_kv, n_ctx, head_dim)
    const int32_t* pos = ws.i32(positions());
    QkvRopeAppendDesc d;
    d.qkv = ws.f32(size_t(m) * s.qkv_dim());  // (m, qkv_dim)
    d.k_cache = ws.f16(cache);
    d.v_cache = ws.f16(cache);
    d.m = m;
    d.n_head = s.n_head;
    d.n_head_kv = s.n_head_kv;
    d.head_dim = s.head_dim;
    d.n_ctx = kCtx;
    d.theta = s.rope_theta;
    d.mode = s.rope_mode;
    OpCase c;
    c.op = Op::QkvRopeAppend;
    c.bytes = double(m) * (s.qkv_dim() * 4.0 + (s.q_dim() + s.kv_dim()) * 4.0 + 2.0 * s.kv_dim() * 2 + 4);
    Backend& b = ws.backend();
    c.issue = [&b, d, pos, m](int64_t i) mutable {
      d.pos = run_positions(pos, i, m);
      b.qkv_rope_append(d);
    };
    return c;
  };
}

void register_cases() {
  for (int64_t m : {1, 512}) {
    register_op("kv_append", args({{"M", m}, {"kv_dim", kModel.kv_dim()}}), kv_append_case(m));
    register_op("qkv_rope_append", args({{"M", m}, {"qkv_dim", kModel.qkv_dim()}}), qkv_rope_append_case(m));
  }
}

}  // namespace
}  // namespace tllm::bench

int main(int argc, char** argv) { return tllm::bench::bench_main(argc, argv, tllm::bench::register_cases); }
