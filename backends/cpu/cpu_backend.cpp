// The CPU backend's memory, device facts and factory. The ops live in the files named after them.
#include "backends/cpu/cpu_backend.h"

#include <cblas.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <thread>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "backends/cpu/cpu_backend_impl.h"

namespace tllm {
namespace cpu {

// ---- parallel runtime ----------------------------------------------------------------------------

ParallelRuntime::ParallelRuntime() {
#if TLLM_WITH_KOKKOS
  // Initialised on first use, finalized at exit; a no-op when the program already runs Kokkos.
  static Kokkos::ScopeGuard guard;
#endif
}

const char* ParallelRuntime::description() {
#if TLLM_WITH_KOKKOS
  static const std::string text = "Kokkos " + std::to_string(KOKKOS_VERSION / 10000) + "." +
                                  std::to_string(KOKKOS_VERSION / 100 % 100) + "." +
                                  std::to_string(KOKKOS_VERSION % 100) + " (" +
                                  Kokkos::DefaultHostExecutionSpace::name() + ")";
  return text.c_str();
#elif defined(_OPENMP)
  static const std::string text = "OpenMP (" + std::to_string(omp_get_max_threads()) + " threads)";
  return text.c_str();
#else
  return "serial loops";
#endif
}

// ---- memory --------------------------------------------------------------------------------------

HostMemory::HostMemory(size_t bytes) : bytes_(bytes) {
  // aligned_alloc wants a multiple of the alignment; a zero-byte request still gets a real block.
  const size_t rounded = std::max<size_t>(64, (bytes + 63) / 64 * 64);
  void* p = std::aligned_alloc(64, rounded);
  if (!p) throw BackendError("cpu backend: cannot allocate " + std::to_string(bytes) + " bytes");
  std::memset(p, 0, rounded);
  ptr_.reset(p);
}

void HostMemory::Free::operator()(void* p) const { std::free(p); }

void MemoryCounter::add(size_t bytes) {
  const size_t now = allocated.fetch_add(bytes) + bytes;
  size_t peak_seen = peak.load();
  while (now > peak_seen && !peak.compare_exchange_weak(peak_seen, now)) {
  }
}

CpuMatrix::CpuMatrix(const HostMatrix& m, std::shared_ptr<MemoryCounter> counter)
    : Matrix(m.type, m.n, m.k),
      w32_(size_t(m.n) * size_t(m.k) * sizeof(float)),
      counter_(std::move(counter)) {
  float* w = static_cast<float*>(w32_.data());
  const int64_t k = m.k;
  if (m.type == WeightType::W8) {
    parallel_for(m.n, k, [&](int64_t r) {
      const int8_t* q = m.q + r * k;
      const half_t* s = m.scales + r * (k / kW8Group);
      float* out = w + r * k;
      for (int64_t g = 0; g < k / kW8Group; ++g) {
        const float scale = half_to_float(s[g]);
        for (int j = 0; j < kW8Group; ++j) out[g * kW8Group + j] = float(q[g * kW8Group + j]) * scale;
      }
    });
  } else {
    parallel_for(m.n, k, [&](int64_t r) { half_to_float_row(m.f16 + r * k, w + r * k, k); });
  }
  counter_->add(w32_.bytes());
}

CpuMatrix::~CpuMatrix() { counter_->sub(w32_.bytes()); }

const CpuMatrix& cpu_matrix(const Matrix* m) {
  const auto* cm = dynamic_cast<const CpuMatrix*>(m);
  TLLM_CPU_CHECK(cm != nullptr);
  return *cm;
}

// ---- the backend ---------------------------------------------------------------------------------

CpuBackend::CpuBackend() = default;

Buffer CpuBackend::alloc(size_t bytes) {
  HostMemory mem(bytes);
  counter_->add(bytes);
  return Buffer(this, mem.release(), bytes);  // free_raw returns it
}

void CpuBackend::free_raw(void* ptr, size_t bytes) {
  std::free(ptr);
  counter_->sub(bytes);
}

void CpuBackend::upload(void* dst, const void* src, size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}

// A copy to or from one of the host areas (staging, readback), which hold kStagingBytes.
static void check_host_area(const char* what, size_t bytes) {
  if (bytes > kStagingBytes) {
    throw BackendError(std::string(what) + ": " + std::to_string(bytes) + " bytes; the area holds " +
                       std::to_string(kStagingBytes));
  }
}

void CpuBackend::upload_staged(void* dst, size_t bytes) {
  check_host_area("upload_staged", bytes);
  upload(dst, staging_.data(), bytes);
}

void CpuBackend::queue_readback(const void* src, size_t bytes) {
  check_host_area("queue_readback", bytes);
  download(readback_.data(), src, bytes);
}

void CpuBackend::download(void* dst, const void* src, size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}

uint64_t CpuBackend::queue_download(const void* src, size_t bytes) {
  int slot = 0;
  const uint64_t t = tickets_.open(bytes, slot);
  std::memcpy(queued_[slot], src, bytes);
  return t;
}

void CpuBackend::collect_download(uint64_t ticket, void* dst) {
  size_t bytes = 0;
  const int slot = tickets_.close(ticket, bytes);
  std::memcpy(dst, queued_[slot], bytes);
}

std::unique_ptr<Matrix> CpuBackend::upload_matrix(const HostMatrix& m) {
  const std::string what = std::string("cpu backend: upload_matrix (") + weight_type_name(m.type) +
                           ", n=" + std::to_string(m.n) + ", k=" + std::to_string(m.k) + "): ";
  if (m.n <= 0 || m.k <= 0) throw BackendError(what + "n and k must be positive");
  if (m.type == WeightType::W8) {
    if (m.k % kW8Group != 0)
      throw BackendError(what + "k must be a multiple of " + std::to_string(kW8Group) + " for W8");
    if (!m.q || !m.scales) throw BackendError(what + "W8 needs q and scales");
  } else if (!m.f16) {
    throw BackendError(what + "F16 needs f16 data");
  }
  return std::make_unique<CpuMatrix>(m, counter_);
}

// Every matrix is kept as fp32 values (CpuMatrix), whatever it came as.
size_t CpuBackend::matrix_bytes(WeightType, int64_t n, int64_t k, bool) const {
  return size_t(n) * size_t(k) * sizeof(float);
}

MemoryInfo CpuBackend::memory_info() const {
  MemoryInfo info;
  info.allocated_bytes = counter_->allocated.load();
  info.peak_bytes = counter_->peak.load();
  // The "device" is host RAM: total, and in use as the kernel counts it (total - MemAvailable).
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) info.device_total = size_t(pages) * size_t(page);
  std::ifstream meminfo("/proc/meminfo");
  for (std::string line; std::getline(meminfo, line);) {
    if (line.rfind("MemAvailable:", 0) == 0) {
      const size_t available = std::strtoull(line.c_str() + 13, nullptr, 10) * 1024;  // "N kB"
      if (available <= info.device_total) info.device_used = info.device_total - available;
      break;
    }
  }
  return info;
}

DeviceInfo CpuBackend::device_info() const {
  DeviceInfo info;
  std::string model;
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) model = line.substr(line.find_first_not_of(" \t", colon + 1));
      break;
    }
  }
  if (model.empty()) model = "CPU";
  const unsigned threads = std::thread::hardware_concurrency();
  info.name = model + " (" + std::to_string(threads) + " threads)";
  std::string blas = openblas_get_config();
  if (blas.rfind("OpenBLAS", 0) != 0) blas = "OpenBLAS " + blas;
  info.runtime = blas + "; " + ParallelRuntime::description();
  info.multiprocessors = int(threads);
  return info;
}

}  // namespace cpu

std::unique_ptr<Backend> create_cpu_backend() { return std::make_unique<cpu::CpuBackend>(); }

}  // namespace tllm

namespace tllm::cpu {

void OpTrace::begin() {
  records_.clear();
  records_.reserve(1 << 16);
  on_ = true;
}

std::vector<TraceRecord> OpTrace::end() {
  on_ = false;
  return std::move(records_);
}

void OpTrace::add(const char* name, uint64_t start_ns, uint64_t end_ns) {
  TraceRecord r;
  r.name = name;
  r.start_ns = start_ns;
  r.end_ns = end_ns;
  records_.push_back(std::move(r));
}

uint64_t OpTrace::now_ns() {
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch())
                      .count());
}

}  // namespace tllm::cpu
