// CUPTI activity tracing (see trace.cuh).
#include <cuda_runtime.h>
#include <cupti.h>
#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>

#include "backends/cuda/trace.cuh"

namespace tllm::cuda {
namespace {

constexpr size_t kBufferBytes = 8 << 20;
constexpr size_t kAlign = 8;

// CUPTI calls these from its own threads; the records land here until end() collects them.
std::mutex g_mutex;
std::vector<TraceRecord> g_records;
bool g_callbacks_registered = false;

// "void tllm::cuda::w8a16_matmul_m1_kernel<4>(...)" -> "w8a16_matmul_m1_kernel<4>".
std::string kernel_name(const char* mangled) {
  if (!mangled) return "?";
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> d(abi::__cxa_demangle(mangled, nullptr, nullptr, &status), std::free);
  std::string s = status == 0 && d ? d.get() : mangled;
  for (size_t at; (at = s.find("(anonymous namespace)::")) != std::string::npos;) s.erase(at, 23);
  if (const size_t paren = s.find('('); paren != std::string::npos) s.resize(paren);
  if (s.rfind("void ", 0) == 0) s.erase(0, 5);
  // Drop namespaces, keeping template arguments intact.
  size_t cut = 0, depth = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '<') ++depth;
    if (s[i] == '>' && depth) --depth;
    if (depth == 0 && s.compare(i, 2, "::") == 0) cut = i + 2;
  }
  return s.substr(cut);
}

const char* copy_name(uint8_t kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "memcpy HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "memcpy DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "memcpy DtoD";
    default: return "memcpy";
  }
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(kAlign, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  std::vector<TraceRecord> got;
  CUpti_Activity* rec = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    TraceRecord r;
    if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || rec->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
      r.kind = TraceRecord::Kind::Kernel;
      r.name = kernel_name(k->name);
      r.start_ns = k->start;
      r.end_ns = k->end;
      r.grid[0] = k->gridX, r.grid[1] = k->gridY, r.grid[2] = k->gridZ;
      r.block[0] = k->blockX, r.block[1] = k->blockY, r.block[2] = k->blockZ;
      r.from_graph = k->graphId != 0;
    } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
      r.kind = TraceRecord::Kind::Memcpy;
      r.name = copy_name(m->copyKind);
      r.start_ns = m->start;
      r.end_ns = m->end;
      r.bytes = m->bytes;
      r.from_graph = m->graphId != 0;
    } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(rec);
      r.kind = TraceRecord::Kind::Memset;
      r.name = "memset";
      r.start_ns = m->start;
      r.end_ns = m->end;
      r.bytes = m->bytes;
      r.from_graph = m->graphId != 0;
    } else {
      continue;
    }
    got.push_back(std::move(r));
  }
  std::free(buffer);
  std::lock_guard<std::mutex> lock(g_mutex);
  g_records.insert(g_records.end(), std::make_move_iterator(got.begin()), std::make_move_iterator(got.end()));
}

constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                         CUPTI_ACTIVITY_KIND_MEMSET};

}  // namespace

CuptiTrace::~CuptiTrace() {
  if (active_) end();
}

bool CuptiTrace::begin() {
  if (active_) end();
  if (!g_callbacks_registered) {
    if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS) return false;
    g_callbacks_registered = true;
  }
  cudaDeviceSynchronize();
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_records.clear();
  }
  for (CUpti_ActivityKind k : kKinds) {
    if (cuptiActivityEnable(k) != CUPTI_SUCCESS) {
      for (CUpti_ActivityKind j : kKinds) cuptiActivityDisable(j);
      return false;
    }
  }
  active_ = true;
  return true;
}

std::vector<TraceRecord> CuptiTrace::end() {
  if (!active_) return {};
  cudaDeviceSynchronize();
  for (CUpti_ActivityKind k : kKinds) cuptiActivityDisable(k);
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  active_ = false;
  std::vector<TraceRecord> out;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    out.swap(g_records);
  }
  std::sort(out.begin(), out.end(), [](const TraceRecord& a, const TraceRecord& b) { return a.start_ns < b.start_ns; });
  return out;
}

}  // namespace tllm::cuda
