// rope: rotary position embedding in place on the query heads of Qwen2.5-0.5B (n_head 14, head_dim 64,
// NeoX pairing, theta 1e6), for one decode row (M = 1) and a prefill chunk (M = 512). The model runs
// the fused qkv_rope_append instead (see kv_append_bench).
//
// Bytes per op: x read and written (2 · M · n_head · head_dim fp32) and the positions (M int32).
#include "bench/bench_common.h"

namespace tllm::bench {
namespace {

OpFactory rope_case(int m) {
  return [=](Workspace& ws) {
    const ModelShape& s = kModel;
    std::vector<int32_t> pos(static_cast<size_t>(m));
    for (int i = 0; i < m; ++i) pos[size_t(i)] = 100 + i;
    RopeDesc d;
    d.x = ws.f32(size_t(m) * s.q_dim());  // (m, n_head, head_dim)
    d.pos = ws.i32(pos);                  // (m)
    d.m = m;
    d.n_heads = s.n_head;
    d.head_dim = s.head_dim;
    d.theta = s.rope_theta;
    d.mode = s.rope_mode;
    OpCase c;
    c.op = Op::Rope;
    c.bytes = 2.0 * m * s.q_dim() * 4 + m * 4.0;
    Backend& b = ws.backend();
    c.issue = [&b, d](int64_t) { b.rope(d); };
    return c;
  };
}

void register_cases() {
  for (int m : {1, 512})
    register_op("rope", args({{"M", m}, {"heads", kModel.n_head}, {"head_dim", kModel.head_dim}}), rope_case(m));
}

}  // namespace
}  // namespace tllm::bench

int main(int argc, char** argv) { return tllm::bench::bench_main(argc, argv, tllm::bench::register_cases); }
