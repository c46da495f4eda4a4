// embedding: rows of the F16 token embedding table (n_vocab, n_embd) = (151936, 896) gathered as fp32,
// for one decode token (M = 1) and a prefill chunk (M = 512). Each run reads the next M of 65536
// random token ids, so the rows come from all over the 272 MB table rather than from the cache.
//
// Bytes per op: M table rows read (M · n_embd fp16; the CPU backend reads fp32 copies, twice that),
// M ids read (int32) and M rows written (M · n_embd fp32).
#include "bench/bench_common.h"

namespace tllm::bench {
namespace {

constexpr int64_t kIds = 65536;

OpFactory embedding_case(int64_t m) {
  return [=](Workspace& ws) {
    const ModelShape& s = kModel;
    const Matrix* table = ws.matrices(WeightType::F16, s.n_vocab, s.n_embd, 1)[0];  // (n_vocab, n_embd)
    const int32_t* ids = ws.random_i32(size_t(kIds), s.n_vocab);                 // (kIds)
    EmbeddingDesc d;
    d.table = table;
    d.out = ws.f32(size_t(m) * s.n_embd);  // (m, n_embd)
    d.m = m;
    OpCase c;
    c.op = Op::Embedding;
    c.bytes = double(m) * (s.n_embd * (2.0 + 4.0) + 4);
    Backend& b = ws.backend();
    c.issue = [&b, d, ids, m](int64_t i) mutable {
      d.ids = ids + (i * m) % (kIds - m + 1);
      b.embedding(d);
    };
    return c;
  };
}

void register_cases() {
  for (int64_t m : {1, 512})
    register_op("embedding", args({{"M", m}, {"n_vocab", kModel.n_vocab}, {"n_embd", kModel.n_embd}}), embedding_case(m));
}

}  // namespace
}  // namespace tllm::bench

int main(int argc, char** argv) { return tllm::bench::bench_main(argc, argv, tllm::bench::register_cases); }
