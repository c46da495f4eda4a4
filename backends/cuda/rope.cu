// Rotary position embedding, in place on fp32 heads, and the fused rope + KV append of decode and
// prefill.
//
//   rope_kernel      one block per row: the row's head_dim/2 angles pos · theta^(-2j/head_dim)
//                    (divided by the optional per-pair frequency factors of rope scaling) and their
//                    cosine and sine are computed once, in fp64 (as the CPU oracle does: an fp32
//                    angle at position 30000 would be off by ~1e-3 rad), into shared memory; then
//                    every thread turns (head, pair) items, the rotation in fp64 rounded to fp32.
//                    Normal pairs are (2j, 2j+1), Neox pairs (j, j + head_dim/2).
//   rope_qkv_append  the same on the q and k heads of a packed qkv row (they are adjacent), writing
//                    each rotated k pair to the k cache as fp16 too, and copying the row's v heads to
//                    the v cache: one kernel between the QKV projection and attention, where the
//                    matmul kernel cannot run it as its epilogue (matmul.cu: split rows, prompts
//                    longer than 64 tokens).
#include "backends/cuda/cuda_backend_impl.cuh"

namespace tllm::cuda {
namespace {

constexpr int kRopeThreads = 256;
constexpr int kMaxHalfDim = 128;  // head_dim <= 256

struct RopeArgs {
  float* x = nullptr;             // rows of row_stride floats; roped heads at the start of each row
  int64_t row_stride = 0;
  const int32_t* pos = nullptr;   // (m)
  int n_rot = 0;                  // heads turned per row
  int head_dim = 0;
  float theta = 0;
  const float* freq_factors = nullptr;  // (head_dim/2), or null
  bool neox = false;
  // Fused append: heads [n_head, n_head + n_head_kv) of the row are k, the next n_head_kv are v.
  __half* k_cache = nullptr;      // (n_head_kv, n_ctx, head_dim), or null: rope only
  __half* v_cache = nullptr;
  int n_head = 0, n_head_kv = 0, n_ctx = 0;
};

constexpr int kPreloaded = 2;  // (head, pair) items per thread read before the angles are ready

// One block per row (blockDim.x >= head_dim / 2).
__device__ __forceinline__ void rope_row(const RopeArgs& a) {
  __shared__ double cos_j[kMaxHalfDim], sin_j[kMaxHalfDim];
  const int half = a.head_dim / 2;
  const int items = a.n_rot * half;
  // The frequencies need no memory: computed while the previous kernel finishes.
  const int j0 = threadIdx.x;
  const double freq = j0 < half ? rope_frequency(j0, a.head_dim, a.theta, a.freq_factors) : 0.0;
  grid_dependency_wait();
  allow_dependent_launch();

  // The position and this thread's first pairs in one trip to memory.
  const int p = a.pos[blockIdx.x];
  float* row = a.x + int64_t(blockIdx.x) * a.row_stride;
  float x0[kPreloaded], x1[kPreloaded];
#pragma unroll
  for (int r = 0; r < kPreloaded; ++r) {
    const int i = threadIdx.x + r * blockDim.x;
    x0[r] = x1[r] = 0.f;
    if (i < items) {
      const int h = i / half, j = i % half;
      float* head = row + int64_t(h) * a.head_dim;
      x0[r] = head[a.neox ? j : 2 * j];
      x1[r] = head[a.neox ? j + half : 2 * j + 1];
    }
  }
  if (j0 < half) sincos(double(p) * freq, &sin_j[j0], &cos_j[j0]);
  __syncthreads();

  const bool append = a.k_cache != nullptr && p >= 0 && p < a.n_ctx;
  // Turns item i (head h, pair j) holding v0, v1; k heads also go to the cache.
  auto turn = [&](int i, double v0, double v1) {
    const int h = i / half, j = i % half;
    const int ia = a.neox ? j : 2 * j, ib = a.neox ? j + half : 2 * j + 1;
    float r0, r1;
    rope_turn(v0, v1, cos_j[j], sin_j[j], r0, r1);
    float* head = row + int64_t(h) * a.head_dim;
    head[ia] = r0;
    head[ib] = r1;
    if (append && h >= a.n_head) {
      __half* dst = a.k_cache + (int64_t(h - a.n_head) * a.n_ctx + p) * a.head_dim;
      dst[ia] = __float2half_rn(r0);
      dst[ib] = __float2half_rn(r1);
    }
  };
#pragma unroll
  for (int r = 0; r < kPreloaded; ++r) {
    const int i = threadIdx.x + r * blockDim.x;
    if (i < items) turn(i, x0[r], x1[r]);
  }
  for (int i = threadIdx.x + kPreloaded * blockDim.x; i < items; i += blockDim.x) {
    const int h = i / half, j = i % half;
    const float* head = row + int64_t(h) * a.head_dim;
    turn(i, head[a.neox ? j : 2 * j], head[a.neox ? j + half : 2 * j + 1]);
  }
  if (append) {
    const float* v = row + int64_t(a.n_head + a.n_head_kv) * a.head_dim;
    for (int i = threadIdx.x; i < a.n_head_kv * a.head_dim; i += blockDim.x) {
      const int h = i / a.head_dim, e = i % a.head_dim;
      a.v_cache[(int64_t(h) * a.n_ctx + p) * a.head_dim + e] = __float2half_rn(v[i]);
    }
  }
}

__global__ void __launch_bounds__(kRopeThreads) rope_kernel(const RopeArgs a) { rope_row(a); }

__global__ void __launch_bounds__(kRopeThreads) rope_qkv_append(const RopeArgs a) { rope_row(a); }

void check_rope(const char* op, int64_t m, int head_dim) {
  CUDA_REQUIRE(m >= 1 && m < (int64_t(1) << 31), op, "m must be positive");
  CUDA_REQUIRE(head_dim >= 2 && head_dim % 2 == 0 && head_dim <= 2 * kMaxHalfDim, op,
               "head_dim must be even and at most " + std::to_string(2 * kMaxHalfDim));
}

}  // namespace

void CudaBackend::rope(const RopeDesc& d) {
  check_rope("rope", d.m, d.head_dim);
  CUDA_REQUIRE(d.n_heads >= 1, "rope", "n_heads must be positive");
  CUDA_REQUIRE(d.x && d.pos, "rope", "a pointer is missing");
  RopeArgs a;
  a.x = d.x;
  a.row_stride = int64_t(d.n_heads) * d.head_dim;
  a.pos = d.pos;
  a.n_rot = d.n_heads;
  a.head_dim = d.head_dim;
  a.theta = d.theta;
  a.freq_factors = d.freq_factors;
  a.neox = d.mode == RopeMode::Neox;
  launch(rope_kernel, dim3(unsigned(d.m)), dim3(kRopeThreads), 0, a);
}

void CudaBackend::qkv_rope_append(const QkvRopeAppendDesc& d) {
  const char* op = "qkv_rope_append";
  check_rope(op, d.m, d.head_dim);
  CUDA_REQUIRE(d.n_head >= 1 && d.n_head_kv >= 1 && d.n_ctx >= 1, op, "n_head, n_head_kv and n_ctx must be positive");
  CUDA_REQUIRE(d.qkv && d.pos && d.k_cache && d.v_cache, op, "a pointer is missing");
  RopeArgs a;
  a.x = d.qkv;
  a.row_stride = (int64_t(d.n_head) + 2 * d.n_head_kv) * d.head_dim;
  a.pos = d.pos;
  a.n_rot = d.n_head + d.n_head_kv;
  a.head_dim = d.head_dim;
  a.theta = d.theta;
  a.freq_factors = d.freq_factors;
  a.neox = d.mode == RopeMode::Neox;
  a.k_cache = reinterpret_cast<__half*>(d.k_cache);
  a.v_cache = reinterpret_cast<__half*>(d.v_cache);
  a.n_head = d.n_head;
  a.n_head_kv = d.n_head_kv;
  a.n_ctx = d.n_ctx;
  launch(rope_qkv_append, dim3(unsigned(d.m)), dim3(kRopeThreads), 0, a);
}

}  // namespace tllm::cuda
