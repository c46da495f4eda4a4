// Elementwise ops at decode size (one row) and prefill size (512 rows):
//   add       y += x over n_embd = 896 values per row (the residual add where it is not fused);
//   silu_mul  out = fp16(silu(gate) · up) over n_ff = 4864 values per row (SwiGLU where the gate/up
//             matmul does not fuse it).
//
// Bytes per op: add reads x and y and writes y (3 · N fp32); silu_mul reads gate and up (fp32) and
// writes out (fp16): N · (4 + 4 + 2).
#include "bench/bench_common.h"

namespace tllm::bench {
namespace {

OpFactory add_case(int64_t n) {
  return [=](Workspace& ws) {
    AddDesc d;
    d.y = ws.f32(size_t(n));  // (n)
    d.x = ws.f32(size_t(n));  // (n)
    d.n = n;
    OpCase c;
    c.op = Op::Add;
    c.bytes = 3.0 * n * 4;
    Backend& b = ws.backend();
    c.issue = [&b, d](int64_t) { b.add(d); };
    return c;
  };
}

OpFactory silu_mul_case(int64_t n) {
  return [=](Workspace& ws) {
    SiluMulDesc d;
    d.gate = ws.f32(size_t(n), 4.0f);  // (n)
    d.up = ws.f32(size_t(n));          // (n)
    d.out = ws.f16(size_t(n));         // (n)
    d.n = n;
    OpCase c;
    c.op = Op::SiluMul;
    c.bytes = double(n) * (4 + 4 + 2);
    Backend& b = ws.backend();
    c.issue = [&b, d](int64_t) { b.silu_mul(d); };
    return c;
  };
}

void register_cases() {
  for (int64_t rows : {1, 512}) {
    register_op("add", args({{"N", rows * kModel.n_embd}}), add_case(rows * kModel.n_embd));
    register_op("silu_mul", args({{"N", rows * kModel.n_ff}}), silu_mul_case(rows * kModel.n_ff));
  }
}

}  // namespace
}  // namespace tllm::bench

int main(int argc, char** argv) { return tllm::bench::bench_main(argc, argv, tllm::bench::register_cases); }
