// matmul: the projections of one Qwen2.5-0.5B layer with the fusions the model uses, as the decode
// GEMV (matmul_m1, M = 1) and as the prefill GEMM (matmul, M = 64 and 512), plus the F16 lm_head GEMV.
//   qkv_proj     (qkv_dim, n_embd)  = (1152, 896)   rmsnorm prologue + bias
//   attn_out     (n_embd, q_dim)    = (896, 896)    accumulate into the residual
//   ffn_gate_up  (2·n_ff, n_embd)   = (9728, 896)   rmsnorm prologue + SwiGLU epilogue
//   ffn_down     (n_embd, n_ff)     = (896, 4864)   accumulate into the residual
//   lm_head      (n_vocab, n_embd)  = (151936, 896) F16, rmsnorm prologue (slow on the CPU backend)
//
// Bytes per op: the weights once (Matrix::stream_bytes: int8 + fp16 scales, or fp16; the CPU backend
// actually reads fp32 copies, 4x the W8 figure), the input rows (fp16 x, or fp32 norm_x plus the fp32
// norm weight), the fp32 bias, and the output (fp32 y, read and written when accumulating; fp16 for
// SwiGLU, half as many columns). The GEMMs also report FLOP/s (2·M·N·K). Each run takes the next of
// several copies of its weights (see bench_common.h), so the weights stream from memory.
#include "bench/bench_common.h"

namespace tllm::bench {
namespace {

struct Projection {
  const char* name;
  int n, k;
  bool norm, bias, swiglu, accumulate;
};

std::vector<Projection> projections() {
  const ModelShape& s = kModel;
  return {{"qkv_proj", s.qkv_dim(), s.n_embd, true, true, false, false},
          {"attn_out", s.n_embd, s.q_dim(), false, false, false, true},
          {"ffn_gate_up", 2 * s.n_ff, s.n_embd, true, false, true, false},
          {"ffn_down", s.n_embd, s.n_ff, false, false, false, true}};
}

std::string describe(const Projection& p) {
  std::string fused;
  if (p.norm) fused += "rmsnorm prologue";
  if (p.bias) fused += std::string(fused.empty() ? "" : ", ") + "bias";
  if (p.swiglu) fused += std::string(fused.empty() ? "" : ", ") + "SwiGLU epilogue";
  if (p.accumulate) fused += std::string(fused.empty() ? "" : ", ") + "accumulate";
  return std::string(p.name) + (fused.empty() ? "" : " (" + fused + ")");
}

// decode: matmul_m1 (m must be 1); otherwise matmul. int8_form: an F16 matrix with its int8 form.
OpFactory matmul_case(Projection p, WeightType type, int64_t m, bool decode, bool int8_form = false) {
  return [=](Workspace& ws) {
    const auto w = ws.matrices(type, p.n, p.k, 4096, int8_form);
    MatmulDesc d;
    d.m = m;
    if (p.norm) {
      d.norm_x = ws.f32(size_t(m * p.k));      // (m, k)
      d.norm_weight = ws.f32(size_t(p.k));     // (k)
      d.norm_eps = kModel.rms_eps;
    } else {
      d.x = ws.f16(size_t(m * p.k));           // (m, k)
    }
    if (p.bias) d.bias = ws.f32(size_t(p.n), 0.1f);  // (n)
    if (p.swiglu) {
      d.epilogue = MatmulEpilogue::SwiGLU;
      d.out16 = ws.f16(size_t(m * p.n / 2));   // (m, n / 2)
    } else {
      d.y = ws.f32(size_t(m * p.n));           // (m, n)
      d.accumulate = p.accumulate;
    }
    OpCase c;
    c.op = !decode ? Op::Matmul : type == WeightType::W8 ? Op::MatmulM1W8 : Op::MatmulM1F16;
    c.bytes = double(w[0]->stream_bytes()) + double(m) * p.k * (p.norm ? 4 : 2) + (p.norm ? p.k * 4.0 : 0) +
              (p.bias ? p.n * 4.0 : 0) + double(m) * (p.swiglu ? p.n / 2 * 2.0 : p.n * 4.0 * (p.accumulate ? 2 : 1));
    if (!decode) c.flops = 2.0 * double(m) * p.n * p.k;
    c.label = describe(p);
    Backend& b = ws.backend();
    c.issue = [&b, w, d, decode](int64_t i) mutable {
      d.w = w[size_t(i) % w.size()];
      decode ? b.matmul_m1(d) : b.matmul(d);
    };
    return c;
  };
}

void register_cases() {
  for (const Projection& p : projections())
    register_op("w8a16_matmul_m1", args({{"N", p.n}, {"K", p.k}}), matmul_case(p, WeightType::W8, 1, true));
  const Projection lm_head{"lm_head", kModel.n_vocab, kModel.n_embd, true, false, false, false};
  register_op("fp16_matmul_m1", args({{"N", lm_head.n}, {"K", lm_head.k}}), matmul_case(lm_head, WeightType::F16, 1, true));
  // The lm_head as the model keeps one converted from Q8_0 (on CUDA: fp16_matmul_m1_int8_form).
  register_op("fp16_matmul_m1_int8_form", args({{"N", lm_head.n}, {"K", lm_head.k}}),
              matmul_case(lm_head, WeightType::F16, 1, true, true));
  for (int m : {64, 512})
    for (const Projection& p : projections())
      register_op("w8a16_matmul", args({{"M", m}, {"N", p.n}, {"K", p.k}}), matmul_case(p, WeightType::W8, m, false));
}

}  // namespace
}  // namespace tllm::bench

int main(int argc, char** argv) { return tllm::bench::bench_main(argc, argv, tllm::bench::register_cases); }
