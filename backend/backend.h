// The compute interface every backend implements.
//
// A backend owns memory (buffers and weight matrices) and runs ops on it, in order, on one queue.
// Each op takes a plain descriptor: shapes and pointers into the backend's own memory, never model
// types. The model layer (model/) and the apps (apps/) only ever talk to this header; the backend is
// picked at run time by name (`create_backend("cpu")`, `create_backend("cuda")`).
//
// Data types are fixed per role so that every backend computes the same function:
//   - the residual stream, matmul outputs, q/k/v before the cache and logits are fp32;
//   - matmul inputs (the "A16" of W8A16: normalised activations, attention output, SiLU(gate)*up)
//     and the KV cache are fp16;
//   - weights are W8 (int8, symmetric, one fp16 scale per kW8Group values along K) or FP16.
//
// Ops are asynchronous with respect to the host: `download` and `synchronize` wait. Nothing in an op
// allocates memory; every buffer an op touches was allocated before, so a decode step can be captured
// and replayed (`run_step`). Values that change from one step to the next (token id, position, KV
// length) are read by the ops from backend memory, never passed as arguments.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/half.h"

namespace tllm {

// W8 weights carry one fp16 scale per group of kW8Group consecutive values along K: the block size
// of the GGUF formats the weights come from (Q4_0..Q8_0 and IQ4_NL blocks and the sub-blocks of the
// K-quants and IQ4_XS divide it), so requantisation never mixes two source blocks into one group.
constexpr int kW8Group = 32;
// Queued downloads (Backend::queue_download): outstanding at once, and bytes each.
constexpr int kQueuedDownloads = 8;
constexpr size_t kQueuedDownloadBytes = 64;
constexpr size_t kStagingBytes = 4096;  // Backend::staging and Backend::readback

enum class WeightType : uint8_t {
  W8,   // int8 q (N, K) + fp16 scales (N, K / kW8Group); w[n][k] = q[n][k] * scale[n][k / kW8Group]
  F16,  // fp16 (N, K)
};

const char* weight_type_name(WeightType t);

// A weight matrix as it lies in host memory, row-major (N, K): row n holds the K inputs of output n.
//
// An F16 matrix may also carry q and scales (k a multiple of kW8Group): its int8 form, which the
// caller guarantees gives every fp16 value as f16[n][k] = fp16(q[n][k] · scale[n][k / kW8Group]),
// the exact product rounded once to fp16 (as an F16 matrix converted from Q8_0 blocks is). A
// backend may then keep that form instead of the fp16 values and rebuild each weight when it reads
// it: the same matrix in about half the bytes (Matrix::f16_as_w8).
struct HostMatrix {
  WeightType type = WeightType::F16;
  int64_t n = 0;                     // output features
  int64_t k = 0;                     // input features; a multiple of kW8Group for W8
  const int8_t* q = nullptr;         // W8, or F16's int8 form: (n, k)
  const half_t* scales = nullptr;    // W8, or F16's int8 form: (n, k / kW8Group)
  const half_t* f16 = nullptr;       // F16: (n, k)
};

// A weight matrix in host memory in one of the weight types, owning its storage (what model loading
// and the tests build before handing a view to Backend::upload_matrix).
struct HostWeights {
  WeightType type = WeightType::W8;
  int64_t n = 0;                 // rows (output features)
  int64_t k = 0;                 // row length (input features)
  std::vector<int8_t> q;         // W8, or F16's int8 form (see HostMatrix): (n, k)
  std::vector<half_t> scales;    // W8, or F16's int8 form: (n, k / kW8Group)
  std::vector<half_t> f16;       // F16: (n, k)
  HostMatrix view() const;       // borrowed view
  // Appends the rows of `b` (same type and k) below these: [this; b]. Throws BackendError otherwise.
  void append_rows(const HostWeights& b);
  // Turns a W8 matrix into the F16 one its int8 form gives: f16 = fp16(q · scale), q and scales
  // kept (HostMatrix). Throws BackendError for an F16 matrix without an int8 form.
  void widen_to_f16();
};

// A weight matrix stored in a backend, in whatever layout that backend computes fastest with.
// Created by Backend::upload_matrix; only the backend that made it may use it.
class Matrix {
 public:
  virtual ~Matrix() = default;
  WeightType type() const { return type_; }
  int64_t n() const { return n_; }
  int64_t k() const { return k_; }
  // An F16 matrix kept in its int8 form (HostMatrix): the values stay the fp16 ones.
  bool f16_as_w8() const { return f16_as_w8_; }
  // Bytes one full read of the weights moves (what a GEMV streams): int8 + scales (W8, or F16 kept
  // in its int8 form), or fp16.
  size_t stream_bytes() const;

 protected:
  Matrix(WeightType type, int64_t n, int64_t k, bool f16_as_w8 = false)
      : type_(type), n_(n), k_(k), f16_as_w8_(f16_as_w8) {}

 private:
  WeightType type_;
  int64_t n_, k_;
  bool f16_as_w8_;
};

class Backend;

// A block of backend memory. Move-only; returns itself to its backend when destroyed.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Backend* owner, void* ptr, size_t bytes) : owner_(owner), ptr_(ptr), bytes_(bytes) {}
  Buffer(Buffer&& o) noexcept { swap(o); }
  Buffer& operator=(Buffer&& o) noexcept {
    Buffer tmp(std::move(o));
    swap(tmp);
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer();

  void* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  template <class T>
  T* as() const { return static_cast<T*>(ptr_); }
  explicit operator bool() const { return ptr_ != nullptr; }

 private:
  void swap(Buffer& o) noexcept {
    std::swap(owner_, o.owner_);
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
  }
  Backend* owner_ = nullptr;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// ---- op descriptors ------------------------------------------------------------------------------
// Pointers are backend memory (Buffer::data() plus an offset). Shapes are in the comments, outermost
// dimension first.

// out = fp16(x / sqrt(mean(x²) + eps) * weight), row by row.
struct RmsNormDesc {
  const float* x = nullptr;       // (m, n)
  const float* weight = nullptr;  // (n)
  half_t* out = nullptr;          // (m, n)
  int64_t m = 1;
  int64_t n = 0;
  float eps = 1e-6f;
};

enum class RopeMode : uint8_t {
  Normal,  // rotates pairs (2i, 2i+1): llama
  Neox,    // rotates pairs (i, i + head_dim/2): qwen2, GPT-NeoX
};

// Rotary position embedding, in place: pair j of a head at position p turns by
// p · theta^(-2j/head_dim) / freq_factors[j] (no division without factors).
struct RopeDesc {
  float* x = nullptr;             // (m, n_heads, head_dim)
  const int32_t* pos = nullptr;   // (m) position of each row
  int64_t m = 1;
  int n_heads = 0;
  int head_dim = 0;               // even
  float theta = 10000.0f;
  const float* freq_factors = nullptr;  // (head_dim/2) each > 0 (rope scaling), or null
  RopeMode mode = RopeMode::Normal;
};

// Writes rows of k and v into the cache at the given positions (converted to fp16).
struct KvAppendDesc {
  const float* k = nullptr;       // (m, n_head_kv, head_dim)
  const float* v = nullptr;       // (m, n_head_kv, head_dim)
  half_t* k_cache = nullptr;      // (n_head_kv, n_ctx, head_dim)
  half_t* v_cache = nullptr;      // (n_head_kv, n_ctx, head_dim)
  const int32_t* pos = nullptr;   // (m) cache row of each input row; each < n_ctx
  int64_t m = 1;
  int n_head_kv = 0;
  int head_dim = 0;
  int n_ctx = 0;
};

// Fused decode/prefill step between the QKV projection and attention: rope on the q and k heads of
// packed qkv rows (in place), then k and v written to the cache at their positions.
struct QkvRopeAppendDesc {
  float* qkv = nullptr;           // (m, (n_head + 2·n_head_kv) · head_dim): q heads, k heads, v heads
  const int32_t* pos = nullptr;   // (m)
  half_t* k_cache = nullptr;      // (n_head_kv, n_ctx, head_dim)
  half_t* v_cache = nullptr;      // (n_head_kv, n_ctx, head_dim)
  int64_t m = 1;
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;
  int n_ctx = 0;
  float theta = 10000.0f;
  const float* freq_factors = nullptr;  // (head_dim/2) each > 0 (rope scaling), or null
  RopeMode mode = RopeMode::Normal;
};

enum class MatmulEpilogue : uint8_t {
  None,    // y = x·Wᵀ + bias (or y += with accumulate)
  SwiGLU,  // W is (2·n_ff, k) = [gate; up]: out16 = fp16(silu(x·gateᵀ) * (x·upᵀ)), (m, n_ff); y unused
  QkvRopeAppend,  // y as None (the packed qkv rows), then qkv_rope_append on y with `rope`
};

// y = x · Wᵀ (+ bias), or y += x · Wᵀ (+ bias) with `accumulate` (a residual add fused in).
// Optional fusions, which every backend implements (the CPU one as the plain op sequence):
//   - an rmsnorm prologue: when norm_x is set, x = fp16(rmsnorm(norm_x) * norm_weight) is computed
//     from the fp32 rows of norm_x and the x field is ignored;
//   - an epilogue (see MatmulEpilogue): SwiGLU, or rope + KV append on the QKV projection.
// w, bias and norm_weight are parameters: no op of the same sequence writes them, so a backend may
// read them while the op just before is still running (the CUDA backend's decode GEMVs request
// them before their dependency wait).
struct MatmulDesc {
  const Matrix* w = nullptr;    // (n, k)
  const half_t* x = nullptr;    // (m, k)
  const float* bias = nullptr;  // (n) or null
  float* y = nullptr;           // (m, n)
  int64_t m = 1;                // rows of x; matmul_m1 requires 1
  bool accumulate = false;
  const float* norm_x = nullptr;       // (m, k) fp32, or null: no rmsnorm prologue
  const float* norm_weight = nullptr;  // (k)
  float norm_eps = 1e-6f;
  MatmulEpilogue epilogue = MatmulEpilogue::None;
  half_t* out16 = nullptr;             // SwiGLU: (m, n / 2)
  QkvRopeAppendDesc rope;              // QkvRopeAppend: all but qkv and m (y and m are used)
  int32_t* argmax = nullptr;           // (scalar) or null: also *argmax = the argmax op on y; m = 1, no epilogue
  int32_t* argmax_advance = nullptr;   // with argmax, or null: as ArgmaxDesc::advance
};

// Causal self-attention of m query rows at positions pos0 .. pos0+m-1 against cache rows
// 0 .. pos0+i (the rows of this chunk already appended). Query head h reads KV head
// h / (n_head / n_head_kv) (grouped-query attention).
struct AttentionPrefillDesc {
  const float* q = nullptr;         // (m, q_row_stride): row i starts with its n_head·head_dim q values
  const half_t* k_cache = nullptr;  // (n_head_kv, n_ctx, head_dim)
  const half_t* v_cache = nullptr;  // (n_head_kv, n_ctx, head_dim)
  half_t* out = nullptr;            // (m, n_head, head_dim)
  int64_t m = 1;
  int64_t q_row_stride = 0;         // floats between q rows; 0 means n_head·head_dim
  int32_t pos0 = 0;                 // what the call checks: pos0 + m <= n_ctx
  // When set, the op reads row 0's position from pos[0] in backend memory instead of taking pos0, so
  // that a recorded prefill (run_step) serves any position; the caller keeps it inside the cache.
  const int32_t* pos = nullptr;
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;
  int n_ctx = 0;
  float scale = 1.0f;               // usually 1/sqrt(head_dim)
};

// One query row against the first *n_kv cache rows. n_kv is read from backend memory so that a
// captured decode step stays valid as the context grows; it must stay <= n_ctx.
struct AttentionDecodeDesc {
  const float* q = nullptr;         // (n_head, head_dim), rope applied
  const half_t* k_cache = nullptr;  // (n_head_kv, n_ctx, head_dim)
  const half_t* v_cache = nullptr;  // (n_head_kv, n_ctx, head_dim)
  half_t* out = nullptr;            // (n_head, head_dim)
  const int32_t* n_kv = nullptr;    // scalar, 1 <= *n_kv <= n_ctx
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;
  int n_ctx = 0;
  float scale = 1.0f;
  // Only the newest row (*n_kv - 1) of the caches comes from the op just before; *n_kv and the
  // older rows were written before it. A backend may then read them while that op finishes (a
  // decode step: the QKV projection appends the newest row).
  bool only_newest_row_fresh = false;
  // Optional: the output projection fused in. With `wo` (W8, (n_out, n_head·head_dim)) the op also
  // does y += out · woᵀ, as matmul_m1 with `accumulate` on the fp16 `out` (which is still written).
  const Matrix* wo = nullptr;
  float* y = nullptr;               // (n_out), with wo
  // The largest *n_kv the caller expects over the calls and replays of this op (0: n_ctx). Only a
  // hint for the form: results are right for any *n_kv, but a backend may fuse more where the rows
  // are few, and then run slower past the bound.
  int max_n_kv = 0;
};

// The output projection of a decode attention with `wo`, as its own op: y += out · woᵀ.
MatmulDesc output_projection(const AttentionDecodeDesc& d);

// y += x (residual add).
struct AddDesc {
  float* y = nullptr;        // (n)
  const float* x = nullptr;  // (n)
  int64_t n = 0;
};

// out = fp16(silu(gate) * up), silu(g) = g / (1 + exp(-g)).
struct SiluMulDesc {
  const float* gate = nullptr;  // (n)
  const float* up = nullptr;    // (n)
  half_t* out = nullptr;        // (n)
  int64_t n = 0;
};

// out[i] = table row ids[i], as fp32. Ids must be < table->n(). The ids are read from backend
// memory (ids) or, for at most kEmbeddingHostIds rows, taken from host memory when the op is
// queued (host_ids): they travel with the op, so a prompt's first op needs no upload before it.
// With `positions`, the op also writes positions[i] = pos0 + i, the rows' positions for the ops
// that follow (rope, attention).
constexpr int64_t kEmbeddingHostIds = 64;
struct EmbeddingDesc {
  const Matrix* table = nullptr;       // (n_vocab, n_embd)
  const int32_t* ids = nullptr;        // (m) in backend memory; null when host_ids is given
  const int32_t* host_ids = nullptr;   // (m <= kEmbeddingHostIds) in host memory, or null
  float* out = nullptr;                // (m, n_embd)
  int64_t m = 1;
  int32_t* positions = nullptr;        // (m) or null
  int32_t pos0 = 0;
};

// *out = the index of the largest x (the first one on ties): greedy sampling without a download.
// With `advance`, once *out is written, advance[0] and advance[1] each grow by one: a decode step's
// position and KV length, ready for the next step without an upload.
struct ArgmaxDesc {
  const float* x = nullptr;       // (n)
  int32_t* out = nullptr;         // scalar
  int64_t n = 0;
  int32_t* advance = nullptr;     // (2) or null
};

enum class Op : uint8_t {
  MatmulM1W8,
  MatmulM1F16,
  Matmul,
  RmsNorm,
  Rope,
  KvAppend,
  QkvRopeAppend,
  AttentionPrefill,
  AttentionDecode,
  Add,
  SiluMul,
  Embedding,
  Argmax,
  StepCapture,  // run_step records once and replays (CUDA graphs)
};

const char* op_name(Op op);

struct MemoryInfo {
  size_t allocated_bytes = 0;   // held by this backend now (buffers + matrices)
  size_t peak_bytes = 0;        // most it ever held at once
  size_t device_total = 0;      // the device's memory, 0 where not meaningful
  size_t device_used = 0;       // in use on the device as the driver reports it (all processes)
};

// Facts about the device that a report must record.
struct DeviceInfo {
  std::string name;            // "NVIDIA H200", "x86_64 (2 threads)"
  std::string driver;          // driver version, or empty
  std::string runtime;         // CUDA runtime version, BLAS build, ...
  double peak_bandwidth_gbs = 0;  // nominal memory bandwidth in GB/s (0 when unknown)
  int multiprocessors = 0;
};

// One piece of device work seen by the tracer: a kernel (also one replayed from a graph), a copy or
// a memset. Times are nanoseconds on one clock, comparable within a trace.
struct TraceRecord {
  enum class Kind : uint8_t { Kernel, Memcpy, Memset };
  Kind kind = Kind::Kernel;
  std::string name;           // kernel function name, or "memcpy HtoD" / "memcpy DtoH" / "memcpy DtoD" / "memset"
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
  int grid[3] = {0, 0, 0};    // kernels only
  int block[3] = {0, 0, 0};
  uint64_t bytes = 0;         // copies and memsets
  bool from_graph = false;    // launched by a graph replay
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string name() const = 0;
  virtual DeviceInfo device_info() const = 0;
  virtual bool supports(Op op) const = 0;
  // The widest attention head (head_dim) that every attention op takes, prefill and decode: a
  // model with wider heads cannot run here, and Model::load refuses it.
  virtual int max_head_dim() const = 0;
  // The read bandwidth the device reaches, measured: `passes` timed reads of a `bytes` buffer (after
  // one untimed pass), in GB/s of the fastest. The buffer is allocated for the call, freed before it
  // returns and not counted in memory_info; make it several times the last-level cache, so that the
  // reads come from memory. DeviceInfo::peak_bandwidth_gbs is the nominal figure, which no kernel
  // reaches. Throws BackendError when bytes < 4096, passes < 1 or the buffer does not fit.
  virtual double measure_read_bandwidth(size_t bytes, int passes) = 0;

  // ---- memory ----
  // Allocates `bytes` of backend memory (zeroed). Throws BackendError when it does not fit.
  virtual Buffer alloc(size_t bytes) = 0;
  // Copies host → backend memory at dst (which lies inside a buffer), ordered after earlier ops.
  virtual void upload(void* dst, const void* src, size_t bytes) = 0;
  // Copies backend → host memory; waits for earlier ops to finish first.
  virtual void download(void* dst, const void* src, size_t bytes) = 0;
  // A small download that does not wait: the copy of `bytes` (at most kQueuedDownloadBytes) at src
  // is queued behind the ops queued so far and a ticket returned at once; collect_download(ticket,
  // dst) waits for that copy and writes the bytes to dst. Up to kQueuedDownloads tickets may be
  // outstanding; each is collected once. Throws BackendError on a bad size or ticket.
  virtual uint64_t queue_download(const void* src, size_t bytes) = 0;
  virtual void collect_download(uint64_t ticket, void* dst) = 0;
  // A host area of kStagingBytes for uploads that a recorded step repeats with new contents: the
  // caller writes into staging() and queues upload_staged(dst, bytes), a copy of its first bytes to
  // dst. Recorded in a step (run_step), that copy reads the area again each time the step replays,
  // so the host changes what it uploads by writing the area before the replay. staging() first
  // waits for the copies already queued from it.
  virtual void* staging() = 0;
  virtual void upload_staged(void* dst, size_t bytes) = 0;
  // The way back: a host area of kStagingBytes for small results. queue_readback(src, bytes) queues
  // a copy of the bytes at src into it, which a recorded step repeats at each replay; readback()
  // waits for the copies queued into it (replays included) and returns it. With staging(), a
  // recorded step takes its inputs and returns its results with no copy queued around its replay.
  virtual void queue_readback(const void* src, size_t bytes) = 0;
  virtual const void* readback() = 0;
  virtual std::unique_ptr<Matrix> upload_matrix(const HostMatrix& m) = 0;
  // The bytes upload_matrix allocates (and memory_info counts) for an (n, k) matrix of this type,
  // in this backend's layout; int8_form: an F16 matrix that comes with its int8 form (HostMatrix).
  // What Model::footprint sums before a model is loaded.
  virtual size_t matrix_bytes(WeightType type, int64_t n, int64_t k, bool int8_form) const = 0;
  virtual void synchronize() = 0;
  virtual MemoryInfo memory_info() const = 0;

  // ---- ops ----
  virtual void matmul_m1(const MatmulDesc& d) = 0;  // decode GEMV, W8 or F16 weights
  virtual void matmul(const MatmulDesc& d) = 0;     // any m (prefill)
  virtual void rmsnorm(const RmsNormDesc& d) = 0;
  virtual void rope(const RopeDesc& d) = 0;
  virtual void kv_append(const KvAppendDesc& d) = 0;
  virtual void qkv_rope_append(const QkvRopeAppendDesc& d) = 0;
  virtual void attention_prefill(const AttentionPrefillDesc& d) = 0;
  virtual void attention_decode(const AttentionDecodeDesc& d) = 0;
  virtual void add(const AddDesc& d) = 0;
  virtual void silu_mul(const SiluMulDesc& d) = 0;
  virtual void embedding(const EmbeddingDesc& d) = 0;
  virtual void argmax(const ArgmaxDesc& d) = 0;

  // ---- whole steps ----
  // Runs `body`, which issues the ops of `steps` consecutive decode steps (0: a unit of another
  // kind, such as a short prompt's prefill). A backend that supports Op::StepCapture records the ops
  // the first time it sees `key` and replays the recording on later calls with the same key without
  // running `body` again, so everything a step varies must come through backend memory. The CPU
  // backend simply runs `body`. A backend that fails to record warns once and runs `body` directly
  // from then on.
  virtual void run_step(int key, int steps, const std::function<void()>& body) {
    (void)key;
    (void)steps;
    body();
  }
  // Forgets recorded steps (their buffers are about to change).
  virtual void reset_steps() {}
  // Turns step capture on or off (on by default where supported).
  virtual void set_step_capture(bool on) { (void)on; }

  // Device activity tracing for the built-in profiler (CUPTI on CUDA: no hardware counters needed,
  // graph-launched kernels included). trace_begin returns false where tracing is unavailable;
  // trace_end waits for the device and returns what ran since trace_begin, ordered by start time.
  virtual bool trace_begin() { return false; }
  virtual std::vector<TraceRecord> trace_end() { return {}; }
  // Kernel launches per decode step of the last run_step with steps > 0 (0 when steps are not
  // recorded).
  virtual int kernels_per_step() const { return 0; }

  // Named ranges for external profilers (NVTX on CUDA); no-ops elsewhere.
  virtual void range_push(const char* name) { (void)name; }
  virtual void range_pop() {}

 protected:
  friend class Buffer;
  virtual void free_raw(void* ptr, size_t bytes) = 0;
};

// Errors at the boundary a user reaches (backend creation, allocation). Carries a one-line message.
class BackendError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Names of the backends compiled into this build, e.g. {"cpu", "cuda"}.
std::vector<std::string> backend_names();
// Creates a backend by name. Throws BackendError with a one-line reason (unknown name, not built,
// no device visible).
std::unique_ptr<Backend> create_backend(const std::string& name);

// The ticket bookkeeping of Backend::queue_download, shared by the backends: ticket t uses slot
// t % kQueuedDownloads, which must have been collected before it is reused.
class DownloadTickets {
 public:
  // A new ticket for `bytes` and its slot; throws BackendError when bytes is 0 or too large or the
  // slot is still outstanding.
  uint64_t open(size_t bytes, int& slot);
  // The slot and size of an outstanding ticket, which is then closed; throws BackendError otherwise.
  int close(uint64_t ticket, size_t& bytes);

 private:
  uint64_t next_ = 1;
  uint64_t open_[kQueuedDownloads] = {};  // ticket held by each slot, 0 when free
  size_t bytes_[kQueuedDownloads] = {};
};
// True when `name` was built in and can be created on this machine (a GPU is visible for "cuda").
bool backend_available(const std::string& name);

// RAII helper for Backend::range_push/range_pop.
class ScopedRange {
 public:
  ScopedRange(Backend& b, const char* name) : b_(b) { b_.range_push(name); }
  ~ScopedRange() { b_.range_pop(); }
  ScopedRange(const ScopedRange&) = delete;
  ScopedRange& operator=(const ScopedRange&) = delete;

 private:
  Backend& b_;
};

}  // namespace tllm
