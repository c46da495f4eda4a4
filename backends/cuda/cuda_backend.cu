// The CUDA backend's memory, device facts, step capture (CUDA graphs) and factory. The ops live in
// the files named after them.
#include "backends/cuda/cuda_backend.h"

#include <nvtx3/nvToolsExt.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "backends/cuda/cuda_backend_impl.cuh"

namespace tllm {
namespace cuda {

// ---- errors and owners ---------------------------------------------------------------------------

void throw_cuda_error(cudaError_t err, const char* statement, const char* file, int line) {
  cudaGetLastError();  // clear a non-sticky error so that later calls do not report it again
  throw BackendError(std::string("cuda backend: ") + statement + " failed: " + cudaGetErrorString(err) + " (" +
                     file + ":" + std::to_string(line) + ")");
}

DeviceMemory::DeviceMemory(size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  const cudaError_t err = cudaMalloc(&ptr_, bytes);
  if (err != cudaSuccess) {
    cudaGetLastError();
    ptr_ = nullptr;
    size_t free = 0, total = 0;
    cudaMemGetInfo(&free, &total);
    throw BackendError("cuda backend: cannot allocate " + std::to_string(bytes) + " bytes (" + cudaGetErrorString(err) +
                       "; the device has " + std::to_string(free) + " of " + std::to_string(total) +
                       " bytes free)");
  }
}

DeviceMemory::~DeviceMemory() {
  if (ptr_) cudaFree(ptr_);
}

void MemoryCounter::add(size_t bytes) {
  const size_t now = allocated.fetch_add(bytes) + bytes;
  size_t seen = peak.load();
  while (now > seen && !peak.compare_exchange_weak(seen, now)) {
  }
}

// ---- matrices ------------------------------------------------------------------------------------

namespace {
// An F16 matrix whose int8 form came with it is kept in that form (HostMatrix).
bool keeps_int8_form(WeightType type, int64_t k, bool int8_form) {
  return type == WeightType::F16 && int8_form && k % kW8Group == 0;
}
bool keeps_int8_form(const HostMatrix& h) { return keeps_int8_form(h.type, h.k, h.q && h.scales); }

// Rows of the int8 form's tiles for n rows: n padded to a whole tile.
int64_t i8f_tiled_rows(int64_t n) { return (n + kI8fTileRows - 1) / kI8fTileRows * kI8fTileRows; }

// Copies h's int8 form into CudaMatrix's tiles, q and scales on the device (rows padded to whole
// tiles and k to whole steps with zeros), a few hundred blocks of rows at a time through host
// buffers: the host never holds a second copy of the matrix.
void upload_int8_tiles(const HostMatrix& h, void* q, void* scales, cudaStream_t stream) {
  constexpr int64_t kChunk = 256 * kI8fTileRows;  // rows a copy
  constexpr int kGroups = kI8fStep / kW8Group;     // scales a piece
  const int64_t steps = i8f_steps(h.k), rows = i8f_tiled_rows(h.n);
  std::vector<int8_t> tq;
  std::vector<half_t> ts;
  for (int64_t r0 = 0; r0 < rows; r0 += kChunk) {
    const int64_t pieces = std::min(kChunk, rows - r0) * steps, first = r0 * steps;  // pieces before the chunk
    tq.assign(size_t(pieces * kI8fStep), 0);
    ts.assign(size_t(pieces * kGroups), half_t(0));
    for (int64_t r = r0; r < std::min(r0 + kChunk, h.n); ++r) {
      for (int64_t s = 0; s < steps; ++s) {
        const int64_t at = i8f_piece(r, s, steps) - first, k0 = s * kI8fStep;
        const int64_t values = std::min<int64_t>(kI8fStep, h.k - k0);
        std::copy_n(h.q + r * h.k + k0, values, tq.begin() + at * kI8fStep);
        std::copy_n(h.scales + (r * h.k + k0) / kW8Group, values / kW8Group, ts.begin() + at * kGroups);
      }
    }
    CUDA_CHECK(cudaMemcpyAsync(static_cast<int8_t*>(q) + first * kI8fStep, tq.data(), tq.size(),
                               cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaMemcpyAsync(static_cast<half_t*>(scales) + first * kGroups, ts.data(), ts.size() * sizeof(half_t),
                               cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));  // before the buffers are filled again
  }
}

// q → q + 128 in place: flips the top bit of every byte (CudaMatrix's W8 layout).
__global__ void flip_top_bits(uint4* q, size_t vectors) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < vectors; i += size_t(gridDim.x) * blockDim.x) {
    const uint4 v = q[i];
    q[i] = make_uint4(v.x ^ 0x80808080u, v.y ^ 0x80808080u, v.z ^ 0x80808080u, v.w ^ 0x80808080u);
  }
}
}  // namespace

CudaMatrix::CudaMatrix(const HostMatrix& h, cudaStream_t stream, std::shared_ptr<MemoryCounter> counter)
    : Matrix(h.type, h.n, h.k, keeps_int8_form(h)), counter_(std::move(counter)) {
  const Layout lay = layout(h.type, h.n, h.k, f16_as_w8());
  scales_offset_ = lay.scales_offset;
  k_pad_ = lay.k_pad;
  mem_ = DeviceMemory(lay.bytes);
  if (w8_layout()) {
    const size_t values = lay.q_bytes;
    const size_t scale_bytes = lay.bytes - lay.scales_offset;
    void* scales = static_cast<char*>(mem_.get()) + scales_offset_;
    if (f16_as_w8()) {
      upload_int8_tiles(h, mem_.get(), scales, stream);
    } else {
      CUDA_CHECK(cudaMemcpyAsync(mem_.get(), h.q, values, cudaMemcpyHostToDevice, stream));
      CUDA_CHECK(cudaMemcpyAsync(scales, h.scales, scale_bytes, cudaMemcpyHostToDevice, stream));
    }
    const size_t vectors = values / 16;  // k is a multiple of 32, a tile 2 KB
    if (vectors > 0) {
      flip_top_bits<<<unsigned(std::min<size_t>((vectors + 255) / 256, 4096)), 256, 0, stream>>>(
          static_cast<uint4*>(mem_.get()), vectors);
      CUDA_CHECK(cudaGetLastError());
    }
  } else {
    const size_t n = size_t(h.n), k = size_t(h.k), row_bytes = size_t(k_pad_) * sizeof(half_t);
    if (size_t(k_pad_) != k) CUDA_CHECK(cudaMemsetAsync(mem_.get(), 0, mem_.bytes(), stream));
    CUDA_CHECK(cudaMemcpy2DAsync(mem_.get(), row_bytes, h.f16, k * sizeof(half_t), k * sizeof(half_t), n,
                                 cudaMemcpyHostToDevice, stream));
  }
  CUDA_CHECK(cudaStreamSynchronize(stream));
  counter_->add(mem_.bytes());
}

CudaMatrix::~CudaMatrix() { counter_->sub(mem_.bytes()); }

CudaMatrix::Layout CudaMatrix::layout(WeightType type, int64_t n, int64_t k, bool int8_form) {
  Layout l;
  if (type == WeightType::W8 || int8_form) {
    l.k_pad = k;
    // The int8 form in tiles: rows padded to a whole tile, k to a whole step.
    l.q_bytes = int8_form ? size_t(i8f_tiled_rows(n) * i8f_steps(k) * kI8fStep) : size_t(n) * size_t(k);
    l.scales_offset = (l.q_bytes + 255) / 256 * 256;
    l.bytes = l.scales_offset + l.q_bytes / kW8Group * sizeof(half_t);
  } else {
    l.k_pad = (k + 7) / 8 * 8;
    l.bytes = size_t(n) * size_t(l.k_pad) * sizeof(half_t);
  }
  return l;
}

const CudaMatrix& cuda_matrix(const Matrix* m, const char* op) {
  const auto* cm = dynamic_cast<const CudaMatrix*>(m);
  CUDA_REQUIRE(cm != nullptr, op, "the weight matrix is missing or was made by another backend");
  return *cm;
}

// ---- the backend ---------------------------------------------------------------------------------

CudaBackend::CudaBackend(int device) : device_(device) {
  CUDA_CHECK(cudaSetDevice(device));
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  sm_count_ = prop.multiProcessorCount;
  cc_major_ = prop.major;
  cc_minor_ = prop.minor;
  smem_optin_ = prop.sharedMemPerBlockOptin;
  pdl_ = cc_major_ >= 9;
  cudaStream_t s = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  stream_.reset(s);

  attn_partials_ = DeviceMemory(kAttnPartialFloats * sizeof(float));
  attn_counters_ = DeviceMemory(kAttnCounters * sizeof(uint32_t));
  // (value, index) pairs of the argmax blocks, then the arrival counter.
  argmax_partials_ = DeviceMemory(kArgmaxMaxBlocks * (sizeof(float) + sizeof(int32_t)) + sizeof(uint32_t));
  CUDA_CHECK(cudaMemsetAsync(attn_counters_.get(), 0, attn_counters_.bytes(), stream()));
  CUDA_CHECK(cudaMemsetAsync(argmax_partials_.get(), 0, argmax_partials_.bytes(), stream()));
  counter_->add(attn_partials_.bytes() + attn_counters_.bytes() + argmax_partials_.bytes());
  prepare_attention();
  CUDA_CHECK(cudaStreamSynchronize(stream()));
}

CudaBackend::~CudaBackend() {
  cudaStreamSynchronize(stream_.get());  // nothing may run on memory that is about to be freed
  steps_.clear();
}

DeviceInfo CudaBackend::device_info() const {
  DeviceInfo info;
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, device_) == cudaSuccess) info.name = prop.name;
  auto version = [](int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); };
  int driver = 0, runtime = 0;
  if (cudaDriverGetVersion(&driver) == cudaSuccess) {
    info.driver = version(driver);
    // The kernel module's own version where Linux shows it: the first dotted number after "Kernel
    // Module" in "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build ...".
    std::ifstream f("/proc/driver/nvidia/version");
    std::string line;
    if (f && std::getline(f, line)) {
      const size_t at = line.find("Kernel Module");
      if (at != std::string::npos) {
        std::istringstream rest(line.substr(at));
        std::string word;
        while (rest >> word) {
          if (std::isdigit(static_cast<unsigned char>(word[0])) && word.find('.') != std::string::npos) {
            info.driver += " (NVIDIA " + word + ")";
            break;
          }
        }
      }
    }
  }
  if (cudaRuntimeGetVersion(&runtime) == cudaSuccess) info.runtime = "CUDA runtime " + version(runtime);
  int mem_clock_khz = 0, bus_bits = 0;
  if (cudaDeviceGetAttribute(&mem_clock_khz, cudaDevAttrMemoryClockRate, device_) == cudaSuccess &&
      cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device_) == cudaSuccess) {
    // Double data rate: two transfers per clock over the whole bus.
    info.peak_bandwidth_gbs = 2.0 * double(mem_clock_khz) * 1e3 * double(bus_bits) / 8.0 / 1e9;
  }
  cudaGetLastError();
  info.multiprocessors = sm_count_;
  return info;
}

Buffer CudaBackend::alloc(size_t bytes) {
  if (bytes == 0) return Buffer(this, nullptr, 0);
  DeviceMemory mem(bytes);
  CUDA_CHECK(cudaMemsetAsync(mem.get(), 0, bytes, stream()));
  counter_->add(bytes);
  return Buffer(this, mem.release(), bytes);  // free_raw returns it
}

void CudaBackend::free_raw(void* ptr, size_t bytes) {
  cudaFree(ptr);  // waits for the device; never throws (called from destructors)
  counter_->sub(bytes);
}

void CudaBackend::upload(void* dst, const void* src, size_t bytes) {
  if (bytes) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream()));
}

void CudaBackend::download(void* dst, const void* src, size_t bytes) {
  if (bytes) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream()));
  CUDA_CHECK(cudaStreamSynchronize(stream()));
}

uint64_t CudaBackend::queue_download(const void* src, size_t bytes) {
  if (!queued_) {  // first use: the pinned slots and their events
    void* p = nullptr;
    CUDA_CHECK(cudaHostAlloc(&p, kQueuedDownloads * kQueuedDownloadBytes, cudaHostAllocDefault));
    queued_.reset(p);
    for (EventOwner& e : queued_done_) {
      cudaEvent_t ev = nullptr;
      CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
      e.reset(ev);
    }
  }
  int slot = 0;
  const uint64_t t = tickets_.open(bytes, slot);
  unsigned char* host = static_cast<unsigned char*>(queued_.get()) + size_t(slot) * kQueuedDownloadBytes;
  CUDA_CHECK(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, stream()));
  CUDA_CHECK(cudaEventRecord(queued_done_[slot].get(), stream()));
  return t;
}

void CudaBackend::host_areas() {
  if (staging_) return;
  void* p = nullptr;
  CUDA_CHECK(cudaHostAlloc(&p, kStagingBytes, cudaHostAllocDefault));
  staging_.reset(p);
  CUDA_CHECK(cudaHostAlloc(&p, kStagingBytes, cudaHostAllocDefault));
  readback_.reset(p);
  cudaEvent_t ev = nullptr;
  CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  areas_done_.reset(ev);
}

void CudaBackend::wait_host_areas() {
  if (!areas_pending_) return;
  CUDA_CHECK(cudaEventSynchronize(areas_done_.get()));
  areas_pending_ = false;
}

void* CudaBackend::staging() {
  host_areas();
  wait_host_areas();
  return staging_.get();
}

const void* CudaBackend::readback() {
  host_areas();
  wait_host_areas();
  return readback_.get();
}

void CudaBackend::host_area_copy(const char* what, void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  CUDA_REQUIRE(bytes <= kStagingBytes, what,
               std::to_string(bytes) + " bytes; the area holds " + std::to_string(kStagingBytes));
  if (!bytes) return;
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, stream()));
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(stream(), &status));
  if (status != cudaStreamCaptureStatusNone) {
    area_copy_in_capture_ = true;  // run_step records areas_done_ behind each replay
    return;
  }
  area_copy_queued();
}

void CudaBackend::upload_staged(void* dst, size_t bytes) {
  CUDA_REQUIRE(staging_ != nullptr, "upload_staged", "staging() has not been called");
  host_area_copy("upload_staged", dst, staging_.get(), bytes, cudaMemcpyHostToDevice);
}

void CudaBackend::queue_readback(const void* src, size_t bytes) {
  host_areas();
  host_area_copy("queue_readback", readback_.get(), src, bytes, cudaMemcpyDeviceToHost);
}

void CudaBackend::area_copy_queued() {
  CUDA_CHECK(cudaEventRecord(areas_done_.get(), stream()));
  areas_pending_ = true;
}

void CudaBackend::collect_download(uint64_t ticket, void* dst) {
  size_t bytes = 0;
  const int slot = tickets_.close(ticket, bytes);
  CUDA_CHECK(cudaEventSynchronize(queued_done_[slot].get()));
  std::memcpy(dst, static_cast<unsigned char*>(queued_.get()) + size_t(slot) * kQueuedDownloadBytes, bytes);
}

size_t CudaBackend::matrix_bytes(WeightType type, int64_t n, int64_t k, bool int8_form) const {
  return CudaMatrix::layout(type, n, k, keeps_int8_form(type, k, int8_form)).bytes;
}

std::unique_ptr<Matrix> CudaBackend::upload_matrix(const HostMatrix& m) {
  const std::string what = std::string("upload_matrix (") + weight_type_name(m.type) + ", n=" + std::to_string(m.n) +
                           ", k=" + std::to_string(m.k) + ")";
  CUDA_REQUIRE(m.n > 0 && m.k > 0, what, "n and k must be positive");
  CUDA_REQUIRE(m.n < (int64_t(1) << 31) && m.k < (int64_t(1) << 24), what, "n or k is too large");
  if (m.type == WeightType::W8) {
    CUDA_REQUIRE(m.k % kW8Group == 0, what, "k must be a multiple of " + std::to_string(kW8Group) + " for W8");
    CUDA_REQUIRE(m.q && m.scales, what, "W8 needs q and scales");
  } else {
    CUDA_REQUIRE(m.f16 != nullptr, what, "F16 needs f16 data");
  }
  auto w = std::make_unique<CudaMatrix>(m, stream(), counter_);
  prepare_matmul(*w);
  return w;
}

void CudaBackend::synchronize() { CUDA_CHECK(cudaStreamSynchronize(stream())); }

MemoryInfo CudaBackend::memory_info() const {
  MemoryInfo info;
  info.allocated_bytes = counter_->allocated.load();
  info.peak_bytes = counter_->peak.load();
  size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) == cudaSuccess) {
    info.device_total = total;
    info.device_used = total - free;
  } else {
    cudaGetLastError();
  }
  return info;
}

void CudaBackend::grow_workspace(DeviceMemory& ws, size_t bytes, const char* what) {
  if (ws.bytes() >= bytes) return;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(stream(), &status));
  CUDA_REQUIRE(status == cudaStreamCaptureStatusNone, what,
               "its workspace would have to grow to " + std::to_string(bytes) +
                   " bytes while a step is being captured; run the op once before capturing");
  // Recorded steps may hold the old buffer's address: forget them (each records again on its next
  // call) before the buffer is freed.
  if (!steps_.empty()) reset_steps();
  counter_->sub(ws.bytes());
  ws = DeviceMemory();  // cudaFree waits for the kernels that still use it
  ws = DeviceMemory(bytes);
  counter_->add(bytes);
}

int CudaBackend::resident_blocks(const void* kernel, int threads, size_t smem) {
  const OccupancyKey key{kernel, smem, unsigned(threads), 0u, 0u};
  auto it = resident_cache_.find(key);
  if (it != resident_cache_.end()) return it->second;
  int blocks = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, smem));
  if (blocks < 1) blocks = 1;
  resident_cache_.emplace(key, blocks);
  return blocks;
}

cudaLaunchConfig_t CudaBackend::launch_config(dim3 grid, dim3 block, size_t smem, unsigned cluster_x,
                                              cudaLaunchAttribute (&attrs)[kLaunchAttrs]) const {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream_.get();
  unsigned n = 0;
  if (pdl_) {
    attrs[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[n++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (cluster_x > 1) {
    attrs[n].id = cudaLaunchAttributeClusterDimension;
    attrs[n].val.clusterDim.x = cluster_x;
    attrs[n].val.clusterDim.y = 1;
    attrs[n++].val.clusterDim.z = 1;
  }
  cfg.attrs = attrs;
  cfg.numAttrs = n;
  return cfg;
}

int CudaBackend::active_clusters(const void* kernel, dim3 grid, dim3 block, size_t smem, unsigned cluster_x) {
  const OccupancyKey key{kernel, smem, block.x * block.y * block.z, grid.x, cluster_x};
  auto it = cluster_cache_.find(key);
  if (it != cluster_cache_.end()) return it->second;
  cudaLaunchAttribute attrs[kLaunchAttrs];
  const cudaLaunchConfig_t cfg = launch_config(grid, block, smem, cluster_x, attrs);
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg) != cudaSuccess) clusters = 0;
  (void)cudaGetLastError();  // a refused size is an answer, not an error
  cluster_cache_.emplace(key, clusters);
  return clusters;
}

// ---- steps ---------------------------------------------------------------------------------------

void CudaBackend::run_step(int key, int steps, const std::function<void()>& body) {
  const int64_t before = launches_;
  // Kernels per decode step, from a unit of `steps` decode steps that launched `launches`.
  const auto count = [&](int64_t launches) {
    if (steps > 0) launches_per_step_ = int(launches / steps);
  };
  if (!capture_on_ || capture_failed_) {
    body();
    count(launches_ - before);
    return;
  }
  if (auto it = steps_.find(key); it != steps_.end()) {
    CUDA_CHECK(cudaGraphLaunch(it->second.exec.get(), stream()));
    count(it->second.launches);
    if (it->second.host_areas) area_copy_queued();
    return;
  }

  // Record body() into a graph. Nothing runs while recording: on success the graph is launched, on
  // failure body() runs directly.
  std::string failure;
  GraphExecOwner exec;
  GraphOwner graph;
  area_copy_in_capture_ = false;
  const cudaError_t begin = cudaStreamBeginCapture(stream(), cudaStreamCaptureModeThreadLocal);
  if (begin != cudaSuccess) {
    failure = std::string("cudaStreamBeginCapture: ") + cudaGetErrorString(begin);
  } else {
    try {
      body();
    } catch (const std::exception& e) {
      failure = e.what();
    }
    cudaGraph_t graph_raw = nullptr;
    const cudaError_t end = cudaStreamEndCapture(stream(), &graph_raw);
    graph.reset(graph_raw);
    if (failure.empty() && end != cudaSuccess) failure = std::string("cudaStreamEndCapture: ") + cudaGetErrorString(end);
  }
  if (failure.empty()) {
    cudaGraphExec_t exec_raw = nullptr;
    const cudaError_t inst = cudaGraphInstantiate(&exec_raw, graph.get(), 0);
    if (inst == cudaSuccess) {
      exec.reset(exec_raw);
    } else {
      failure = std::string("cudaGraphInstantiate: ") + cudaGetErrorString(inst);
    }
  }
  cudaGetLastError();
  const int launches = int(launches_ - before);

  if (!exec) {
    // A real error in body() shows again here and propagates; otherwise recording was the problem.
    const int64_t direct = launches_;
    body();
    count(launches_ - direct);
    std::fprintf(stderr, "tiny-llm: CUDA graph capture failed (%s); running steps without graphs\n",
                 failure.c_str());
    capture_failed_ = true;
    return;
  }
  CUDA_CHECK(cudaGraphLaunch(exec.get(), stream()));
  steps_.emplace(key, Step{std::move(exec), launches, area_copy_in_capture_});
  count(launches);
  if (area_copy_in_capture_) area_copy_queued();
}

void CudaBackend::reset_steps() {
  CUDA_CHECK(cudaStreamSynchronize(stream()));
  steps_.clear();
}

void CudaBackend::range_push(const char* name) { nvtxRangePushA(name); }

void CudaBackend::range_pop() { nvtxRangePop(); }

}  // namespace cuda

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

std::unique_ptr<Backend> create_cuda_backend() { return std::make_unique<cuda::CudaBackend>(0); }

}  // namespace tllm
