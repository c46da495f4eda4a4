// rmsnorm: out = fp16(x / sqrt(mean(x²) + eps) · weight) over rows of n_embd = 896, for one decode row
// (M = 1) and a prefill chunk (M = 512). The model fuses this into the matmuls that follow it (see
// matmul_bench); the standalone op is what backends without that fusion run.
//
// Bytes per op: x read (M · n_embd fp32), weight read (n_embd fp32), out written (M · n_embd fp16).
#include "bench/bench_common.h"

namespace tllm::bench {
namespace {

OpFactory rmsnorm_case(int m) {
  return [=](Workspace& ws) {
    const int n = kModel.n_embd;
    RmsNormDesc d;
    d.x = ws.f32(size_t(m) * n);       // (m, n_embd)
    d.weight = ws.f32(size_t(n));      // (n_embd)
    d.out = ws.f16(size_t(m) * n);     // (m, n_embd)
    d.m = m;
    d.n = n;
    d.eps = kModel.rms_eps;
    OpCase c;
    c.op = Op::RmsNorm;
    c.bytes = double(m) * n * (4 + 2) + n * 4.0;
    Backend& b = ws.backend();
    c.issue = [&b, d](int64_t) { b.rmsnorm(d); };
    return c;
  };
}

void register_cases() {
  for (int m : {1, 512}) register_op("rmsnorm", args({{"M", m}, {"N", kModel.n_embd}}), rmsnorm_case(m));
}

}  // namespace
}  // namespace tllm::bench

int main(int argc, char** argv) { return tllm::bench::bench_main(argc, argv, tllm::bench::register_cases); }
