// argmax: the index of the largest of n_vocab = 151936 fp32 logits (greedy sampling on the device).
//
// Bytes per op: the logits read once (n_vocab fp32) and one int32 written.
#include "bench/bench_common.h"

namespace tllm::bench {
namespace {

OpFactory argmax_case(int64_t n) {
  return [=](Workspace& ws) {
    ArgmaxDesc d;
    d.x = ws.f32(size_t(n), 10.0f);  // (n_vocab)
    d.out = ws.i32({0});             // scalar
    d.n = n;
    OpCase c;
    c.op = Op::Argmax;
    c.bytes = double(n) * 4 + 4;
    Backend& b = ws.backend();
    c.issue = [&b, d](int64_t) { b.argmax(d); };
    return c;
  };
}

void register_cases() { register_op("argmax", args({{"N", kModel.n_vocab}}), argmax_case(kModel.n_vocab)); }

}  // namespace
}  // namespace tllm::bench

int main(int argc, char** argv) { return tllm::bench::bench_main(argc, argv, tllm::bench::register_cases); }
