// Inside the CUDA backend: the backend class, its weight matrix and its workspaces. Each op is
// defined in the .cu file named after it (matmul.cu, attention.cu, ...; the matmul's kernel
// families in matmul_m1.cu, matmul_prefill_small.cu and matmul_prefill.cu); cuda_backend.cu holds
// memory, device facts, step capture and the factory.
//
// Everything runs in order on one non-blocking stream the backend owns. Every kernel goes through
// CudaBackend::launch, which counts launches (for "kernels per decode step") and, on sm_90, marks
// them for programmatic dependent launch so that a kernel can start reading its weights while the
// one before it finishes (see grid_dependency_wait in cuda_common.cuh).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "backend/backend.h"
#include "backends/cuda/argmax.cuh"
#include "backends/cuda/cuda_common.cuh"
#include "backends/cuda/trace.cuh"

namespace tllm::cuda {

// Bytes held by one backend: its buffers, matrices and workspaces. Shared with the matrices, which
// may be destroyed after the backend.
struct MemoryCounter {
  std::atomic<size_t> allocated{0};
  std::atomic<size_t> peak{0};
  void add(size_t bytes);
  void sub(size_t bytes) { allocated.fetch_sub(bytes); }
};

// A weight matrix on the GPU, one copy, in the layout the matmul kernels read:
//   W8:  q (n, k) row-major, each int8 value stored with its top bit flipped (q + 128 as an
//        unsigned byte, the form the kernels widen from: see dot_i8x4), then scales
//        (n, k / kW8Group) fp16 row-major (at a 256-byte boundary). k is a multiple of 32, so
//        every row of q starts 32-byte aligned.
//   F16: (n, k_pad) fp16 row-major, rows padded with zeros to k_pad = k rounded up to 8, so that
//        every row starts 16-byte aligned and is read in whole 16-byte vectors. An F16 matrix that
//        comes with its int8 form (HostMatrix) is kept in that form instead, and the kernels that
//        read it rebuild each weight as fp16(q · scale): the fp16 values in half the bytes. Its q
//        and scales (q + 128 as in W8) are stored in tiles of kI8fTileRows rows × kI8fStep values,
//        the order in which the int8-form GEMV's warps read them: a tile's 16 pieces of 128 bytes
//        (one per row) follow each other, then the tile of the next 128 values of the same rows, and
//        after a block of rows' last tile the next block's first; the scales likewise, 4 a piece.
//        Rows are padded to a whole tile and k to a whole step, with zero values and scales.
//        Measured on an H200 against the row-major W8 layout, decode tok/s interleaved: 2,470.1–
//        2,473.6 against 2,448.5–2,450.3 after the chat prompt, 2,039.9–2,041.6 against 2,026.5–
//        2,029.0 after 4,096 tokens (the lm_head 39.4 against 41.3 µs in the chain).
class CudaMatrix final : public Matrix {
 public:
  CudaMatrix(const HostMatrix& h, cudaStream_t stream, std::shared_ptr<MemoryCounter> counter);
  ~CudaMatrix() override;

  const uint8_t* q() const { return static_cast<const uint8_t*>(mem_.get()); }  // q + 128
  const __half* scales() const { return reinterpret_cast<const __half*>(static_cast<const char*>(mem_.get()) + scales_offset_); }
  const __half* f16() const { return static_cast<const __half*>(mem_.get()); }
  int64_t k_pad() const { return k_pad_; }  // F16 row stride in values; k in the W8 layout
  // q and scales hold the weights: a W8 matrix, or an F16 one in its int8 form (f16_as_w8).
  bool w8_layout() const { return type() == WeightType::W8 || f16_as_w8(); }
  // Where the parts of such a matrix lie in its device memory (int8_form: an F16 one kept in its
  // int8 form): q values (W8 layout) and the scales' offset, or fp16 rows of k_pad values; bytes in all.
  struct Layout {
    size_t q_bytes = 0;
    size_t scales_offset = 0;
    int64_t k_pad = 0;
    size_t bytes = 0;
  };
  static Layout layout(WeightType type, int64_t n, int64_t k, bool int8_form);

 private:
  DeviceMemory mem_;
  size_t scales_offset_ = 0;
  int64_t k_pad_ = 0;
  std::shared_ptr<MemoryCounter> counter_;
};

// The int8 form's tiles (see CudaMatrix): rows and values per tile, and the piece of row `row` in
// step `step` (values 128·step ..) of a matrix of `steps` steps a row: its 128 values are at
// q + 128 · piece, their 4 group scales at scales + 4 · piece.
constexpr int kI8fTileRows = 16;
constexpr int kI8fStep = 128;
__host__ __device__ constexpr int64_t i8f_steps(int64_t k) { return (k + kI8fStep - 1) / kI8fStep; }
__host__ __device__ constexpr int64_t i8f_piece(int64_t row, int64_t step, int64_t steps) {
  return ((row / kI8fTileRows) * steps + step) * kI8fTileRows + row % kI8fTileRows;
}

// The CudaMatrix behind a Matrix; throws BackendError when another backend made it.
const CudaMatrix& cuda_matrix(const Matrix* m, const char* op);

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device);
  ~CudaBackend() override;

  std::string name() const override { return "cuda"; }
  DeviceInfo device_info() const override;
  bool supports(Op) const override { return true; }
  int max_head_dim() const override;  // attention.cu
  double measure_read_bandwidth(size_t bytes, int passes) override;

  Buffer alloc(size_t bytes) override;
  void upload(void* dst, const void* src, size_t bytes) override;
  void download(void* dst, const void* src, size_t bytes) override;
  uint64_t queue_download(const void* src, size_t bytes) override;
  void collect_download(uint64_t ticket, void* dst) override;
  void* staging() override;
  void upload_staged(void* dst, size_t bytes) override;
  void queue_readback(const void* src, size_t bytes) override;
  const void* readback() override;
  std::unique_ptr<Matrix> upload_matrix(const HostMatrix& m) override;
  size_t matrix_bytes(WeightType type, int64_t n, int64_t k, bool int8_form) const override;
  void synchronize() override;
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

  void run_step(int key, int steps, const std::function<void()>& body) override;
  void reset_steps() override;
  void set_step_capture(bool on) override { capture_on_ = on; }

  void range_push(const char* name) override;
  void range_pop() override;

  // Kernels the last run_step issued (or, replaying a recorded step, issued when it was recorded).
  int kernels_per_step() const override { return launches_per_step_; }

  bool trace_begin() override { return trace_.begin(); }
  std::vector<TraceRecord> trace_end() override { return trace_.end(); }

  // Launches `kernel` on the backend's stream (see the top of this file).
  template <class... KernelArgs, class... Args>
  void launch(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem, Args&&... args) {
    launch_clusters(kernel, grid, block, smem, 1, std::forward<Args>(args)...);
  }
  // The same with the grid's blocks in thread-block clusters of cluster_x blocks along x (1: none).
  template <class... KernelArgs, class... Args>
  void launch_clusters(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem, unsigned cluster_x,
                       Args&&... args) {
    cudaLaunchAttribute attrs[kLaunchAttrs];
    const cudaLaunchConfig_t cfg = launch_config(grid, block, smem, cluster_x, attrs);
    CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
    ++launches_;
    last_launch_ = LastLaunch::Other;
  }
  // Clusters of cluster_x blocks of `kernel` that the GPU runs at once (0: it cannot run them).
  int active_clusters(const void* kernel, dim3 grid, dim3 block, size_t smem, unsigned cluster_x);

  cudaStream_t stream() const { return stream_.get(); }
  int multiprocessors() const { return sm_count_; }

 protected:
  void free_raw(void* ptr, size_t bytes) override;

 private:
  // Makes `ws` hold at least `bytes` (contents not kept), counted in memory_info. Refuses
  // (BackendError) to grow while the stream is being captured: the decode path allocates nothing.
  // Growing forgets the recorded steps, which may point into the old buffer (a short prompt's
  // recording and the split-k partials of a longer one).
  void grow_workspace(DeviceMemory& ws, size_t bytes, const char* what);
  // Blocks of `kernel` (blockDim threads, smem dynamic bytes) that fit on one multiprocessor at once.
  int resident_blocks(const void* kernel, int threads, size_t smem);
  // The launch configuration of launch_clusters, its attributes written to `attrs` (which must
  // outlive the configuration).
  static constexpr int kLaunchAttrs = 2;  // programmatic dependent launch, cluster dimension
  cudaLaunchConfig_t launch_config(dim3 grid, dim3 block, size_t smem, unsigned cluster_x,
                                   cudaLaunchAttribute (&attrs)[kLaunchAttrs]) const;

  // The kernel launched last, where a launch plan depends on it: what the blocks of the kernel
  // before leave room for decides which form of a GEMV requests its weights earliest (matmul_m1's
  // SwiGLU GEMV after the fused attention and output projection, matmul_m1_kernel). Every launch
  // sets Other; the fused attention sets its own after launching.
  enum class LastLaunch { Other, AttentionWithProjection };
  LastLaunch last_launch_ = LastLaunch::Other;

  // Op pieces shared between files.
  void rmsnorm_rows(const float* x, const float* weight, __half* out, int64_t m, int64_t n, float eps);
  // False (nothing launched) when the epilogue cannot be fused for this shape.
  bool matmul_m1_kernel(const MatmulDesc& d, const CudaMatrix& w);
  void rope_epilogue(const MatmulDesc& d);  // MatmulEpilogue::QkvRopeAppend as its own kernel
  void matmul_prefill_kernel(const MatmulDesc& d, const CudaMatrix& w, const __half* x);
  // Short prompts: false (nothing launched) past 64 rows of x or when the shape does not fit the path.
  bool matmul_small_kernel(const MatmulDesc& d, const CudaMatrix& w);
  size_t small_smem_cap() const;             // staged x of matmul_prefill_small, bytes
  size_t small_smem_limit() const;           // all of its dynamic shared memory, bytes
  void prepare_matmul(const CudaMatrix& w);   // kernel attributes for the matrix's k (matmul.cu)
  void prepare_matmul_m1(const CudaMatrix& w);  // the GEMVs' (matmul_m1.cu)
  void prepare_matmul_small();                  // matmul_prefill_small's, once (matmul_prefill_small.cu)
  void prepare_attention();                   // kernel attributes for every head_dim (attention.cu)
  ArgmaxWorkspace argmax_workspace();         // candidates of up to kArgmaxMaxBlocks blocks (argmax.cu)

  int device_ = 0;
  int sm_count_ = 0;
  int cc_major_ = 0, cc_minor_ = 0;
  size_t smem_optin_ = 0;  // largest dynamic shared memory a block may ask for
  bool pdl_ = false;       // programmatic dependent launch (sm_90 and later)
  StreamOwner stream_;
  std::shared_ptr<MemoryCounter> counter_ = std::make_shared<MemoryCounter>();
  // Occupancy answers by (kernel, dynamic shared memory, threads per block, grid.x, cluster_x):
  // resident_blocks (grid.x and cluster_x 0) and active_clusters.
  using OccupancyKey = std::tuple<const void*, size_t, unsigned, unsigned, unsigned>;
  std::map<OccupancyKey, int> resident_cache_;
  std::map<OccupancyKey, int> cluster_cache_;

  // Attention decode: per-split partial results (m, l, unnormalised o) and the arrival counters
  // of the last-block combine. Fixed size (at most 32 splits per head fit for up to 126 heads of
  // head_dim 256), allocated at creation so that the first decode step can be captured.
  DeviceMemory attn_partials_;  // floats
  DeviceMemory attn_counters_;  // (kAttnCounters) uint32, zero between calls
  // Argmax: per-block (value, index) candidates and an arrival counter.
  DeviceMemory argmax_partials_;
  // Queued downloads: one pinned host slot and one event per outstanding ticket.
  DownloadTickets tickets_;
  PinnedMemory queued_;  // (kQueuedDownloads, kQueuedDownloadBytes)
  EventOwner queued_done_[kQueuedDownloads];
  // Backend::staging and Backend::readback: pinned, so that copies from and to them can be recorded
  // in a step. areas_done_ is recorded behind each such copy (behind each replay of a step that
  // holds one); staging() and readback() wait for it when it is pending.
  PinnedMemory staging_, readback_;
  EventOwner areas_done_;
  bool areas_pending_ = false;  // areas_done_ has been recorded since the host last waited for it
  void host_areas();            // allocates the two areas and areas_done_ on first use
  void host_area_copy(const char* what, void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
  void area_copy_queued();      // records areas_done_ behind the copy (or replay) just queued
  void wait_host_areas();       // waits for areas_done_ when it is pending
  // Prefill matmul with the rmsnorm prologue: the normalised fp16 rows, (m, k). Grown on demand.
  DeviceMemory norm_x16_;
  DeviceMemory swiglu_y_;  // matmul_m1's SwiGLU product when the epilogue runs as its own kernel
  // Short-prompt matmul split over k: (kSmallCounters) uint32 arrival counters, zero between
  // launches, then the blocks' partial sums. Grown on demand (prefill only).
  DeviceMemory small_partials_;
  bool small_prepared_ = false;  // matmul_prefill_small may use small_smem_cap() bytes

  // Step capture (run_step).
  struct Step {
    GraphExecOwner exec;
    int launches = 0;
    bool host_areas = false;  // holds a copy from the staging area or to the readback area
  };
  bool area_copy_in_capture_ = false;  // upload_staged or queue_readback while recording a step
  std::unordered_map<int, Step> steps_;
  bool capture_on_ = true;
  bool capture_failed_ = false;  // warned once; steps run directly from then on
  int64_t launches_ = 0;
  int launches_per_step_ = 0;
  CuptiTrace trace_;
};

// Sizes of the fixed workspaces.
constexpr size_t kAttnPartialFloats = size_t(1) << 20;  // 4 MiB
constexpr int kAttnCounters = 4096;
constexpr int kArgmaxMaxBlocks = 1024;

}  // namespace tllm::cuda
