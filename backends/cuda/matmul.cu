// Matmul: y = x · Wᵀ (+ bias), or y += with `accumulate`, with MatmulDesc's fusions (rmsnorm
// prologue; SwiGLU, rope + KV append and argmax epilogues). W is (n, k); x is (m, k) fp16; y is
// (m, n) fp32. This file checks the descriptor and picks the kernels by m; each family's file says
// how its kernels are shaped and why:
//   matmul_m1.cu             m = 1 (decode): the GEMVs, w8a16_matmul_m1* and fp16_matmul_m1*
//   matmul_prefill_small.cu  2 <= m <= 64: matmul_prefill_small*, weights requested before the
//                            wait as in decode
//   matmul_prefill.cu        m > 64: matmul_prefill, 64x64 output tiles
// What a kernel cannot fuse for the shape runs as a kernel of its own: the SwiGLU step after the
// plain product (silu_mul), the rope epilogue (qkv_rope_append), the argmax, and matmul_prefill's
// rmsnorm prologue. An F16 matrix kept in its int8 form (the lm_head) takes a prompt's rows through
// the GEMV one at a time.
#include "backends/cuda/matmul_common.cuh"

namespace tllm::cuda {
namespace {

void check_matmul(const MatmulDesc& d, const CudaMatrix& w, const char* op) {
  CUDA_REQUIRE(d.m >= 1, op, "m must be at least 1");
  CUDA_REQUIRE(d.norm_x ? d.norm_weight != nullptr : d.x != nullptr, op,
               "x (or norm_x with norm_weight) is missing");
  if (d.epilogue == MatmulEpilogue::SwiGLU) {
    CUDA_REQUIRE(d.out16 != nullptr, op, "the SwiGLU epilogue needs out16");
    CUDA_REQUIRE(w.n() % 2 == 0, op, "the SwiGLU epilogue needs an even n (gate and up rows)");
    CUDA_REQUIRE(!d.accumulate, op, "the SwiGLU epilogue cannot accumulate");
  } else {
    CUDA_REQUIRE(d.y != nullptr, op, "y is missing");
  }
  CUDA_REQUIRE(!d.argmax || (d.m == 1 && d.epilogue == MatmulEpilogue::None), op,
               "the argmax epilogue needs m = 1 and no other epilogue");
  CUDA_REQUIRE(!d.argmax_advance || d.argmax, op, "argmax_advance needs the argmax epilogue");
  if (d.epilogue == MatmulEpilogue::QkvRopeAppend) {
    const QkvRopeAppendDesc& r = d.rope;
    CUDA_REQUIRE(!d.accumulate, op, "the rope epilogue cannot accumulate");
    CUDA_REQUIRE(r.head_dim >= 2 && r.head_dim % 2 == 0 && r.n_head >= 1 && r.n_head_kv >= 1 &&
                     w.n() == (int64_t(r.n_head) + 2 * r.n_head_kv) * r.head_dim,
                 op, "the rope epilogue needs n = (n_head + 2·n_head_kv) · head_dim with an even head_dim");
  }
}

}  // namespace

void CudaBackend::prepare_matmul(const CudaMatrix& w) {
  prepare_matmul_small();
  prepare_matmul_m1(w);
}

void CudaBackend::matmul_m1(const MatmulDesc& d) {
  const CudaMatrix& w = cuda_matrix(d.w, "matmul_m1");
  check_matmul(d, w, "matmul_m1");
  CUDA_REQUIRE(d.m == 1, "matmul_m1", "m must be 1 (use matmul)");
  if (matmul_m1_kernel(d, w)) return;
  // The epilogue as its own kernel after the plain product.
  MatmulDesc plain = d;
  plain.epilogue = MatmulEpilogue::None;
  plain.argmax = nullptr;
  plain.argmax_advance = nullptr;
  if (d.epilogue == MatmulEpilogue::SwiGLU) {
    // [gate | up] into a workspace, then silu(gate) · up (an F16 matrix in its int8 form).
    grow_workspace(swiglu_y_, size_t(w.n()) * sizeof(float), "matmul_m1 (SwiGLU)");
    plain.y = swiglu_y_.as<float>();
    matmul_m1_kernel(plain, w);
    SiluMulDesc s;
    s.gate = plain.y;
    s.up = plain.y + w.n() / 2;
    s.out = d.out16;
    s.n = w.n() / 2;
    silu_mul(s);
    return;
  }
  matmul_m1_kernel(plain, w);
  if (d.epilogue == MatmulEpilogue::QkvRopeAppend) rope_epilogue(d);
  if (d.argmax) {
    ArgmaxDesc a;
    a.x = d.y;
    a.out = d.argmax;
    a.n = w.n();
    a.advance = d.argmax_advance;
    argmax(a);
  }
}

// The rope epilogue as its own kernel, on the y a matmul wrote.
void CudaBackend::rope_epilogue(const MatmulDesc& d) {
  QkvRopeAppendDesc r = d.rope;
  r.qkv = d.y;
  r.m = d.m;
  qkv_rope_append(r);
}

void CudaBackend::matmul(const MatmulDesc& d) {
  const CudaMatrix& w = cuda_matrix(d.w, "matmul");
  check_matmul(d, w, "matmul");
  CUDA_REQUIRE(d.m < (int64_t(1) << 22), "matmul", "m is too large");
  if (d.m == 1) {
    matmul_m1(d);
    return;
  }
  if (w.f16_as_w8()) {
    // The prefill kernels read fp16 or W8 weights, not this form (the lm_head's, which sees one
    // row at a time): its rows go through the GEMV one by one.
    const int64_t k = w.k(), n = w.n();
    for (int64_t i = 0; i < d.m; ++i) {
      MatmulDesc r = d;
      r.m = 1;
      if (d.x) r.x = d.x + i * k;
      if (d.norm_x) r.norm_x = d.norm_x + i * k;
      if (d.y) r.y = d.y + i * n;
      if (d.out16) r.out16 = d.out16 + i * (n / 2);
      if (d.rope.pos) r.rope.pos = d.rope.pos + i;
      matmul_m1(r);
    }
    return;
  }
  if (matmul_small_kernel(d, w)) return;
  const __half* x = reinterpret_cast<const __half*>(d.x);
  if (d.norm_x) {
    // The prologue as its own kernel: its rows are shared by every column tile of the matmul.
    grow_workspace(norm_x16_, size_t(d.m) * size_t(w.k()) * sizeof(__half), "matmul (rmsnorm prologue)");
    rmsnorm_rows(d.norm_x, d.norm_weight, norm_x16_.as<__half>(), d.m, w.k(), d.norm_eps);
    x = norm_x16_.as<__half>();
  }
  matmul_prefill_kernel(d, w, x);
  if (d.epilogue == MatmulEpilogue::QkvRopeAppend) rope_epilogue(d);
}

}  // namespace tllm::cuda
