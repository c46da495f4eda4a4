// Shared pieces of the CUDA backend: the error-checking macros, move-only owners of device
// resources, and the device helpers every kernel file uses (programmatic dependent launch, warp
// reductions, vector loads).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>

#include "backend/backend.h"

namespace tllm::cuda {

// ---- errors --------------------------------------------------------------------------------------

// Throws BackendError "cuda backend: <statement> failed: <error> (<file>:<line>)".
[[noreturn]] void throw_cuda_error(cudaError_t err, const char* statement, const char* file, int line);

// Runs a CUDA runtime call and throws BackendError naming the statement, file and line on failure.
#define CUDA_CHECK(statement)                                                            \
  do {                                                                                   \
    const cudaError_t cuda_check_err_ = (statement);                                     \
    if (cuda_check_err_ != cudaSuccess)                                                  \
      ::tllm::cuda::throw_cuda_error(cuda_check_err_, #statement, __FILE__, __LINE__);   \
  } while (0)

// A descriptor check of an op: throws BackendError "cuda backend: <op>: <what>" when cond is false.
#define CUDA_REQUIRE(cond, op, what)                                                        \
  do {                                                                                      \
    if (!(cond)) throw ::tllm::BackendError(std::string("cuda backend: ") + (op) + ": " + (what)); \
  } while (0)

// ---- owners --------------------------------------------------------------------------------------

// Device memory from cudaMalloc, freed on destruction. Move-only.
class DeviceMemory {
 public:
  DeviceMemory() = default;
  // Throws BackendError naming the size and the device's free and total memory when it does not fit.
  explicit DeviceMemory(size_t bytes);
  DeviceMemory(DeviceMemory&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) {
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  DeviceMemory& operator=(DeviceMemory&& o) noexcept {
    DeviceMemory tmp(std::move(o));
    std::swap(ptr_, tmp.ptr_);
    std::swap(bytes_, tmp.bytes_);
    return *this;
  }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  ~DeviceMemory();

  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  template <class T>
  T* as() const { return static_cast<T*>(ptr_); }
  // Gives up ownership; the caller frees the pointer with cudaFree.
  void* release() {
    void* p = ptr_;
    ptr_ = nullptr;
    bytes_ = 0;
    return p;
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

struct StreamDeleter {
  void operator()(cudaStream_t s) const { cudaStreamDestroy(s); }
};
struct GraphDeleter {
  void operator()(cudaGraph_t g) const { cudaGraphDestroy(g); }
};
struct GraphExecDeleter {
  void operator()(cudaGraphExec_t g) const { cudaGraphExecDestroy(g); }
};
struct EventDeleter {
  void operator()(cudaEvent_t e) const { cudaEventDestroy(e); }
};
struct PinnedDeleter {
  void operator()(void* p) const { cudaFreeHost(p); }
};
using StreamOwner = std::unique_ptr<std::remove_pointer_t<cudaStream_t>, StreamDeleter>;
using EventOwner = std::unique_ptr<std::remove_pointer_t<cudaEvent_t>, EventDeleter>;
using PinnedMemory = std::unique_ptr<void, PinnedDeleter>;  // page-locked host memory (cudaHostAlloc)
using GraphOwner = std::unique_ptr<std::remove_pointer_t<cudaGraph_t>, GraphDeleter>;
using GraphExecOwner = std::unique_ptr<std::remove_pointer_t<cudaGraphExec_t>, GraphExecDeleter>;

// ---- host helpers --------------------------------------------------------------------------------

__host__ __device__ constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

__host__ __device__ inline bool aligned_to(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// ---- device helpers ------------------------------------------------------------------------------

// Programmatic dependent launch (sm_90): every kernel is launched allowed to overlap the tail of the
// kernel before it. It may read constant data (weights) before grid_dependency_wait(), and must
// call it before touching anything an earlier op wrote or reads. On older GPUs both are no-ops and
// the launches are plainly serialised.
__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the next kernel in the stream start launching its blocks (they wait in
// grid_dependency_wait() until this grid has finished and its writes are visible).
__device__ __forceinline__ void allow_dependent_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Block-wide, in every thread, after the block's writes that the last block reads: counts the block
// in *counter and says whether it is the total-th to arrive (the last block resets the counter for
// the next launch itself). One thread adds with a device-scope acquire-release atomic after the
// block's barrier: the release carries every write the barrier ordered before it, and the last
// block's acquire sees all of them, with no separate fences (measured on an H200 against a fence in
// every thread before the add and after it: decode 1,912 against 1,888 tok/s after 512 tokens of
// context, 1,832 against 1,811 after 4,096, where attention combines its splits this way).
__device__ __forceinline__ bool last_block_to_arrive(unsigned* counter, unsigned total) {
  __shared__ bool last;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned before;
    asm volatile("atom.add.acq_rel.gpu.u32 %0, [%1], 1;" : "=r"(before) : "l"(counter) : "memory");
    last = before == total - 1;
  }
  __syncthreads();
  return last;
}

template <class T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// `scratch` holds 32 values in shared memory; the call ends with the block synchronised, so that
// scratch may be reused, unless kOnce: a caller that sums into this scratch once saves the barrier.
template <class T, bool kOnce = false>
__device__ __forceinline__ T block_sum(T v, T* scratch) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  v = warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T total = 0;
  const int n_warps = blockDim.x >> 5;
  for (int w = 0; w < n_warps; ++w) total += scratch[w];  // same order in every thread
  if constexpr (!kOnce) __syncthreads();  // scratch may be reused after return
  return total;
}

// Rotary embedding as the CPU oracle computes it: pair j of a head turns by pos · frequency, the
// angle with its cosine and sine in fp64 (an fp32 angle at position 30000 would be off by ~1e-3 rad),
// the products unfused, each result rounded to fp32. factors: (head_dim/2) divisors of the pairs'
// frequencies (rope scaling), or null; model weights, so they may be read before a dependency wait.
__device__ __forceinline__ double rope_frequency(int j, int head_dim, float theta, const float* factors) {
  const double freq = pow(double(theta), -2.0 * j / head_dim);
  return factors ? freq / double(factors[j]) : freq;
}
__device__ __forceinline__ void rope_turn(double v0, double v1, double c, double s, float& r0, float& r1) {
  r0 = float(__dsub_rn(__dmul_rn(v0, c), __dmul_rn(v1, s)));
  r1 = float(__dadd_rn(__dmul_rn(v0, s), __dmul_rn(v1, c)));
}

// Σ q[i]·x[i] over the 4 int8 values of u into d, each stored as q + 128 (an unsigned byte: the
// signed byte with its top bit flipped, as CudaMatrix keeps W8 weights). Byte u is placed in the
// low mantissa bits of 2^23: the float 2^23 + u, exact; one subtract of 2^23 + 128 leaves q.
// Flipping the top bits once at upload saves each 4 weights a logic instruction here: on an H200,
// decode 2,349–2,350 against 2,334–2,336 tok/s (interleaved), 2,033 against 1,995 after 4,096
// tokens of context.
__device__ __forceinline__ float dot_i8x4(uint32_t u, float4 x, float d) {
  constexpr float kMagic = 8388736.0f;  // 2^23 + 128
  d = fmaf(__uint_as_float(__byte_perm(u, 0x4B000000u, 0x7650)) - kMagic, x.x, d);
  d = fmaf(__uint_as_float(__byte_perm(u, 0x4B000000u, 0x7651)) - kMagic, x.y, d);
  d = fmaf(__uint_as_float(__byte_perm(u, 0x4B000000u, 0x7652)) - kMagic, x.z, d);
  d = fmaf(__uint_as_float(__byte_perm(u, 0x4B000000u, 0x7653)) - kMagic, x.w, d);
  return d;
}

// Two weights fp16(q · s) of an F16 matrix in its int8 form (HostMatrix), as a half2: bytes 0 and 1
// (sel 0x4140) or 2 and 3 (sel 0x4342) of u, the int8 values as stored (q + 128). Each byte
// is placed in the low mantissa bits of the fp16 1024, which gives 1024 + (q + 128) exactly; one
// subtract of 1152 leaves q, and one fp16 multiply by s rounds the exact product once, as the
// conversion of the matrix to fp16 did.
__device__ __forceinline__ __half2 int8_pair_as_f16(uint32_t u, uint32_t sel, __half2 s) {
  const __half2 bias = __half2half2(__ushort_as_half(0x6480));  // 1152
  const uint32_t bits = __byte_perm(u, 0x64646464u, sel);
  __half2 h;
  memcpy(&h, &bits, 4);
  return __hmul2(__hsub2(h, bias), s);
}

// A GEMV's x in shared memory, as fp32, in units of 4 values: unit (c, j) holds x[c·V + 4j .. + 3] for
// weight vector c (V = 16 values for W8, 8 for F16). A lane reads the units of vectors 32 apart from
// its neighbours', so without care the 8 lanes of a quarter-warp would hit the same bank group;
// rotating a vector's units by (c / 2) (W8) or swapping them by (c / 4) (F16) spreads them over all 8.
template <bool kW8>
__device__ __forceinline__ int x_unit(int c, int j) {
  if constexpr (kW8) {
    return 4 * c + ((j + (c >> 1)) & 3);
  } else {
    return 2 * c + (j ^ ((c >> 2) & 1));
  }
}

// An rmsnorm's 1 / sqrt(ss / n + eps) as fp32, from the fp64 sum of squares ss of a row's n values
// and inv_n = 1 / n (fp64, worked out on the host). The oracle divides and takes the square root in
// fp64; the reciprocal square root (within 1 fp64 ulp) and the product with 1 / n land within a few
// fp64 ulps of its value, which rounds to the same fp32 number unless it lies that close to a
// rounding boundary (about one value in 2^28). Each of the two iterative fp64 operations it saves
// is a chain of dependent instructions in a kernel's path after its dependency wait, and their slow
// paths cost registers: on an H200, against the quotients, decode 2,164–2,165 against 2,112–2,113
// tok/s (interleaved, both built from one source path), the gate/up and QKV kernels 5.03 and 3.62
// against 5.34 and 3.84 µs in the step's chain, and the gate/up kernel no longer spills.
__device__ __forceinline__ float inverse_rms(double ss, double inv_n, float eps) {
  return float(rsqrt(fma(ss, inv_n, double(eps))));
}

// What storing v as fp16 makes of it.
__device__ __forceinline__ float round_half(float v) { return __half2float(__float2half_rn(v)); }

// 16-byte read-only load (weights).
__device__ __forceinline__ uint4 load_ro16(const void* p) { return __ldg(static_cast<const uint4*>(p)); }

__device__ __forceinline__ float2 half2_bits_to_float2(uint32_t bits) {
  __half2 h;
  memcpy(&h, &bits, 4);
  return __half22float2(h);
}

__device__ __forceinline__ uint32_t float2_to_half2_bits(float a, float b) {
  const __half2 h = __floats2half2_rn(a, b);
  uint32_t bits;
  memcpy(&bits, &h, 4);
  return bits;
}

// An rmsnorm's output as fp16 bits: x · inv · w for four values (inv: the row's 1 / rms), then for
// eight (one 16-byte vector).
__device__ __forceinline__ uint2 rms_scaled_half4(float4 x, float inv, float4 w) {
  return make_uint2(float2_to_half2_bits(x.x * inv * w.x, x.y * inv * w.y),
                    float2_to_half2_bits(x.z * inv * w.z, x.w * inv * w.w));
}

__device__ __forceinline__ uint4 rms_scaled_half8(float4 x0, float4 x1, float inv, float4 w0, float4 w1) {
  const uint2 lo = rms_scaled_half4(x0, inv, w0), hi = rms_scaled_half4(x1, inv, w1);
  return make_uint4(lo.x, lo.y, hi.x, hi.y);
}

// ---- asynchronous copies and tensor cores (sm_80 and later) --------------------------------------

// The shared-memory (shared::cta) address of p, as the PTX instructions below take it.
__device__ __forceinline__ uint32_t smem_address(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }

// 16-byte global -> shared copy that bypasses registers; src_bytes = 0 writes zeros and reads nothing.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_address(smem)), "l"(gmem), "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Four 8x8 fp16 matrices from shared memory; lane t gives the address of row t % 8 of matrix t / 8.
// Lane t receives, of each matrix, row t / 4, columns 2·(t % 4) and 2·(t % 4) + 1.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(smem))
               : "memory");
}
// As ldmatrix_x4, transposed: lane t receives rows 2·(t % 4) and 2·(t % 4) + 1 of column t / 4.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(smem))
               : "memory");
}

// d += a · b for one 16x8x16 tile: a (16x16, row-major fragments), b (16x8, column-major), fp32 d.
// Fragment layout (g = lane / 4, t = lane % 4):
//   a: {(g, 2t..2t+1), (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..)}   b: {(k 2t..2t+1, n g), (k 2t+8.., n g)}
//   d: {(g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1)}
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// ---- thread-block clusters (sm_90; no-ops before it, where no launcher forms clusters) ---------

// The address of shared location `a` (of this block) in the block of cluster rank `rank`.
__device__ __forceinline__ uint32_t cluster_address(uint32_t a, unsigned rank) {
  uint32_t r = a;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(rank));
#endif
  return r;
}

// The cluster barrier: every thread of every block arrives (release), then waits (acquire).
__device__ __forceinline__ void cluster_arrive() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release;" ::: "memory");
#endif
}

__device__ __forceinline__ void cluster_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.wait.acquire;" ::: "memory");
#endif
}

// A load from shared memory of a block of the cluster (an address from cluster_address).
__device__ __forceinline__ float4 ld_cluster_f4(uint32_t a) {
  float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(a) : "memory");
#endif
  return v;
}

// A store into shared memory of a block of the cluster (an address from cluster_address).
__device__ __forceinline__ void st_cluster_u4(uint32_t a, uint4 v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("st.shared::cluster.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(a), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
#endif
}

// Stores into another block's shared memory that count their bytes on its mbarrier `bar`.
__device__ __forceinline__ void push_f4(uint32_t dst, float4 v, uint32_t bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [%0], {%1, %2, %3, %4}, [%5];"
               ::"r"(dst), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w), "r"(bar) : "memory");
#endif
}

__device__ __forceinline__ void push_f2(uint32_t dst, float x, float y, uint32_t bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32 [%0], {%1, %2}, [%3];"
               ::"r"(dst), "f"(x), "f"(y), "r"(bar) : "memory");
#endif
}

// An mbarrier of this block expecting `count` arrivals, its initialisation visible to the cluster.
__device__ __forceinline__ void mbarrier_init_cluster(uint32_t bar, unsigned count) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n\tfence.mbarrier_init.release.cluster;"
               ::"r"(bar), "r"(count) : "memory");
#endif
}

// Arrives on the mbarrier, which then also waits for `bytes` of stores (push_f4, push_f2).
__device__ __forceinline__ void mbarrier_arrive_expect(uint32_t bar, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
#endif
}

// Waits until the mbarrier's phase of the given parity has completed.
__device__ __forceinline__ void mbarrier_wait(uint32_t bar, unsigned parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "{\n\t.reg .pred done;\n"
      "wait_%=:\n\t"
      "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], %1;\n\t"
      "@!done bra wait_%=;\n}" ::"r"(bar), "r"(parity) : "memory");
#endif
}

}  // namespace tllm::cuda
