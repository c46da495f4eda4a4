// Matmul on the CPU: y = x · Wᵀ (+ bias), through OpenBLAS on the fp32 copy of the weights.
//
// The fp16 activations are widened to fp32 first (exactly), then m = 1 goes through cblas_sgemv and
// m > 1 through cblas_sgemm; `accumulate` is beta = 1. The fused forms of MatmulDesc run as the plain
// op sequence: rmsnorm into an fp16 workspace before, silu(gate) * up, qkv_rope_append or argmax
// after.
#include <cblas.h>

#include "backends/cpu/cpu_backend_impl.h"

namespace tllm::cpu {

void CpuBackend::matmul_m1(const MatmulDesc& d) {
  TLLM_CPU_CHECK(d.m == 1);
  TraceScope t(trace_, d.w && d.w->type() == WeightType::F16 ? "fp16_matmul_m1" : "w8a16_matmul_m1");
  matmul_impl(d);
}

void CpuBackend::matmul(const MatmulDesc& d) {
  TraceScope t(trace_, "matmul_prefill");
  matmul_impl(d);
}

void CpuBackend::matmul_impl(const MatmulDesc& d) {
  const CpuMatrix& w = cpu_matrix(d.w);
  const int64_t m = d.m, n = w.n(), k = w.k();
  const bool swiglu = d.epilogue == MatmulEpilogue::SwiGLU;
  TLLM_CPU_CHECK(m >= 1);
  TLLM_CPU_CHECK(d.norm_x ? d.norm_weight != nullptr : d.x != nullptr);
  TLLM_CPU_CHECK(swiglu ? (d.out16 != nullptr && n % 2 == 0 && !d.accumulate) : d.y != nullptr);
  const bool rope = d.epilogue == MatmulEpilogue::QkvRopeAppend;
  TLLM_CPU_CHECK(!rope || (!d.accumulate && n == (int64_t(d.rope.n_head) + 2 * d.rope.n_head_kv) * d.rope.head_dim));

  // x: (m, k) fp16, from the descriptor or from the rmsnorm prologue.
  const half_t* x16 = d.x;
  if (d.norm_x) {
    half_t* normed = x16_.get(size_t(m * k));
    rmsnorm_rows(d.norm_x, d.norm_weight, normed, m, k, d.norm_eps);
    x16 = normed;
  }
  float* x32 = x32_.get(size_t(m * k));  // (m, k)
  parallel_for(m, k, [&](int64_t r) { half_to_float_row(x16 + r * k, x32 + r * k, k); });

  // y: (m, n) fp32, the caller's or (SwiGLU) the workspace holding [gate | up] per row.
  float* y = swiglu ? y32_.get(size_t(m * n)) : d.y;
  const float beta = d.accumulate ? 1.0f : 0.0f;
  if (m == 1) {
    cblas_sgemv(CblasRowMajor, CblasNoTrans, int(n), int(k), 1.0f, w.w32(), int(k), x32, 1, beta, y, 1);
  } else {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(m), int(n), int(k), 1.0f, x32, int(k),
                w.w32(), int(k), beta, y, int(n));
  }
  if (d.bias) {
    parallel_for(m, n, [&](int64_t r) {
      float* row = y + r * n;
      for (int64_t j = 0; j < n; ++j) row[j] += d.bias[j];
    });
  }

  TLLM_CPU_CHECK(!d.argmax || (m == 1 && d.epilogue == MatmulEpilogue::None));
  TLLM_CPU_CHECK(!d.argmax_advance || d.argmax);
  if (d.argmax) {
    ArgmaxDesc a;
    a.x = d.y;
    a.out = d.argmax;
    a.n = n;
    a.advance = d.argmax_advance;
    argmax(a);
  }
  if (rope) {
    QkvRopeAppendDesc r = d.rope;
    r.qkv = d.y;
    r.m = m;
    qkv_rope_append(r);
  }
  if (swiglu) {  // out16: (m, n / 2) = fp16(silu(gate) * up)
    const int64_t n_ff = n / 2;
    parallel_for(m, 16 * n_ff, [&](int64_t r) {  // exp ~ 16 ops
      const float* gate = y + r * n;
      silu_mul_row(gate, gate + n_ff, d.out16 + r * n_ff, n_ff);
    });
  }
}

}  // namespace tllm::cpu
