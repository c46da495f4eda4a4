// Inside the CPU backend: the backend class, its weight matrix, host memory owners and the row
// kernels that the ops and their fused forms share. Each op is defined in the file named after it
// (matmul.cpp, attention.cpp, ...); cpu_backend.cpp holds memory, device facts and the factory.
//
// Every op runs to completion before it returns, so synchronize() has nothing to wait for and
// upload/download are plain copies.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backends/cpu/parallel.h"

namespace tllm::cpu {

// Internal consistency check on a descriptor: throws BackendError naming the statement, file and line.
#define TLLM_CPU_CHECK(cond)                                                                  \
  do {                                                                                        \
    if (!(cond))                                                                              \
      throw ::tllm::BackendError(std::string("cpu backend: check failed: ") + #cond + " (" + \
                                 __FILE__ + ":" + std::to_string(__LINE__) + ")");            \
  } while (0)

// Host memory aligned to 64 bytes (a cache line, and an AVX-512 vector) and zeroed. Move-only.
class HostMemory {
 public:
  HostMemory() = default;
  // Throws BackendError when the allocation fails.
  explicit HostMemory(size_t bytes);
  void* data() const { return ptr_.get(); }
  size_t bytes() const { return bytes_; }
  // Gives up ownership; the caller frees the pointer with std::free.
  void* release() {
    bytes_ = 0;
    return ptr_.release();
  }

 private:
  struct Free {
    void operator()(void* p) const;
  };
  std::unique_ptr<void, Free> ptr_;
  size_t bytes_ = 0;
};

// A scratch array the backend owns. get(count) returns room for at least `count` values, reallocating
// only when `count` exceeds every earlier request, so a decode loop (same shapes every step) allocates
// on its first step at most. The contents do not survive a reallocation.
template <class T>
class Scratch {
 public:
  T* get(size_t count) {
    if (count > capacity_) {
      mem_ = HostMemory(count * sizeof(T));
      capacity_ = count;
    }
    return static_cast<T*>(mem_.data());
  }

 private:
  HostMemory mem_;
  size_t capacity_ = 0;
};

// Bytes held by one backend: its buffers and matrices. Shared with the matrices, which may be
// destroyed after the backend.
struct MemoryCounter {
  std::atomic<size_t> allocated{0};
  std::atomic<size_t> peak{0};
  void add(size_t bytes);
  void sub(size_t bytes) { allocated.fetch_sub(bytes); }
};

// A weight matrix on the CPU: the dequantised weights as fp32, row-major (n, k), w = q * scale for
// W8. The int8 × fp16 product is exact in fp32 (8 + 11 significant bits), so this is the same
// function the W8 kernels of other backends compute; it is also what the embedding op reads rows from.
class CpuMatrix : public Matrix {
 public:
  CpuMatrix(const HostMatrix& m, std::shared_ptr<MemoryCounter> counter);
  ~CpuMatrix() override;
  const float* w32() const { return static_cast<const float*>(w32_.data()); }  // (n, k)

 private:
  HostMemory w32_;
  std::shared_ptr<MemoryCounter> counter_;
};

// While tracing is on, each op records its name and host start/end time: the CPU's counterpart of
// the CUDA backend's CUPTI trace, so the built-in profiler reads the same records on both backends.
class OpTrace {
 public:
  void begin();
  std::vector<TraceRecord> end();
  bool on() const { return on_; }
  void add(const char* name, uint64_t start_ns, uint64_t end_ns);
  static uint64_t now_ns();

 private:
  bool on_ = false;
  std::vector<TraceRecord> records_;
};

// Times one op into an OpTrace (no-op when tracing is off).
class TraceScope {
 public:
  TraceScope(OpTrace& t, const char* name) : t_(t), name_(name), start_(t.on() ? OpTrace::now_ns() : 0) {}
  ~TraceScope() {
    if (t_.on()) t_.add(name_, start_, OpTrace::now_ns());
  }
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;

 private:
  OpTrace& t_;
  const char* name_;
  uint64_t start_;
};

class CpuBackend final : public Backend {
 public:
  CpuBackend();

  std::string name() const override { return "cpu"; }
  DeviceInfo device_info() const override;
  bool supports(Op op) const override { return op != Op::StepCapture; }
  int max_head_dim() const override;  // attention.cpp
  double measure_read_bandwidth(size_t bytes, int passes) override;

  Buffer alloc(size_t bytes) override;
  void upload(void* dst, const void* src, size_t bytes) override;
  void download(void* dst, const void* src, size_t bytes) override;
  uint64_t queue_download(const void* src, size_t bytes) override;
  void collect_download(uint64_t ticket, void* dst) override;
  void* staging() override { return staging_.data(); }
  void upload_staged(void* dst, size_t bytes) override;
  void queue_readback(const void* src, size_t bytes) override;
  const void* readback() override { return readback_.data(); }
  std::unique_ptr<Matrix> upload_matrix(const HostMatrix& m) override;
  size_t matrix_bytes(WeightType type, int64_t n, int64_t k, bool int8_form) const override;
  void synchronize() override {}
  MemoryInfo memory_info() const override;

  void matmul_m1(const MatmulDesc& d) override;
  void matmul(const MatmulDesc& d) override;
  void rmsnorm(const RmsNormDesc& d) override;
  void rope(const RopeDesc& d) override;
  void kv_append(const KvAppendDesc& d) override;
  void qkv_rope_append(const QkvRopeAppendDesc& d) override;
  void attention_prefill(const AttentionPrefillDesc& d) override;
  void attention_decode(const AttentionDecodeDesc& d) override;
  void add(const AddDesc& d) override;
  void silu_mul(const SiluMulDesc& d) override;
  void embedding(const EmbeddingDesc& d) override;
  void argmax(const ArgmaxDesc& d) override;
  bool trace_begin() override {
    trace_.begin();
    return true;
  }
  std::vector<TraceRecord> trace_end() override { return trace_.end(); }

 protected:
  void free_raw(void* ptr, size_t bytes) override;

 private:
  void matmul_impl(const MatmulDesc& d);

  std::vector<unsigned char> staging_ = std::vector<unsigned char>(kStagingBytes);
  std::vector<unsigned char> readback_ = std::vector<unsigned char>(kStagingBytes);

  ParallelRuntime runtime_;
  OpTrace trace_;
  std::shared_ptr<MemoryCounter> counter_ = std::make_shared<MemoryCounter>();
  // Matmul workspaces, grown to the largest shape seen (see Scratch).
  Scratch<float> x32_;   // (m, k): the fp16 activations as fp32, what OpenBLAS reads
  Scratch<half_t> x16_;  // (m, k): the rmsnorm prologue's fp16 output
  Scratch<float> y32_;   // (m, n): the SwiGLU epilogue's gate and up projections
  // Queued downloads: ops run when called, so the bytes are copied at once into their slot.
  DownloadTickets tickets_;
  unsigned char queued_[kQueuedDownloads][kQueuedDownloadBytes] = {};
};

// The CpuMatrix behind a Matrix; throws when the matrix was made by another backend.
const CpuMatrix& cpu_matrix(const Matrix* m);

// ---- row kernels shared by the ops and their fused forms -----------------------------------------

// Largest head_dim the attention and rope kernels take (they keep one head's values on the stack).
constexpr int kMaxHeadDim = 256;

// out = fp16(x / sqrt(mean(x²) + eps) * weight) for m rows of n values (sum of squares in fp64).
void rmsnorm_rows(const float* x, const float* weight, half_t* out, int64_t m, int64_t n, float eps);

// Rope in place on m rows of n_heads heads; row r starts at x + r * row_stride. freq_factors:
// (head_dim/2) divisors of the pairs' frequencies, or null.
void rope_rows(float* x, int64_t row_stride, const int32_t* pos, int64_t m, int n_heads, int head_dim,
               float theta, const float* freq_factors, RopeMode mode);

// Writes m rows of n_head_kv heads of k and v into the caches at rows pos[r]; input row r starts at
// k + r * row_stride (and v + r * row_stride).
void kv_append_rows(const float* k, const float* v, int64_t row_stride, half_t* k_cache,
                    half_t* v_cache, const int32_t* pos, int64_t m, int n_head_kv, int head_dim,
                    int n_ctx);

// fp16 bits -> fp32, exact for every input (zero, subnormal, normal, inf, NaN), without branches so
// that loops over it vectorise.
inline float half_to_float_branchless(half_t h) {
  const uint32_t em = uint32_t(h & 0x7fffu) << 13;  // exponent and mantissa at their fp32 places
  const uint32_t exp = em & 0x0f800000u;
  const uint32_t normal = em + (112u << 23);        // rebias the exponent from 15 to 127
  const uint32_t infnan = em + (224u << 23);        // exponent 31 -> 255
  float sub;                                        // 0 or subnormal: (2^-14 + mant·2^-24) - 2^-14
  const uint32_t sub_bits = em + (113u << 23);
  const uint32_t magic_bits = 113u << 23;
  float magic;
  std::memcpy(&sub, &sub_bits, 4);
  std::memcpy(&magic, &magic_bits, 4);
  sub -= magic;
  uint32_t sub_u;
  std::memcpy(&sub_u, &sub, 4);
  // Select with masks rather than branches or ?: so that the loop vectoriser keeps it.
  const uint32_t is_sub = 0u - uint32_t(exp == 0);
  const uint32_t is_infnan = 0u - uint32_t(exp == 0x0f800000u);
  const uint32_t bits = (sub_u & is_sub) | (infnan & is_infnan) | (normal & ~(is_sub | is_infnan)) |
                        uint32_t(h & 0x8000u) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// out = fp16(silu(gate) * up), silu(g) = g / (1 + exp(-g)), in fp32.
void silu_mul_row(const float* gate, const float* up, half_t* out, int64_t n);

inline void half_to_float_row(const half_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = half_to_float_branchless(src[i]);
}

}  // namespace tllm::cpu
