// Backend registry, Buffer ownership and the small shared helpers of the interface.
#include "backend/backend.h"

#include "backends/cpu/cpu_backend.h"
#if TLLM_WITH_CUDA
#include "backends/cuda/cuda_backend.h"
#endif

namespace tllm {

Buffer::~Buffer() {
  if (ptr_ && owner_) owner_->free_raw(ptr_, bytes_);
}

HostMatrix HostWeights::view() const {
  HostMatrix m;
  m.type = type;
  m.n = n;
  m.k = k;
  if (type == WeightType::F16) m.f16 = f16.data();
  if (type == WeightType::W8 || !q.empty()) {
    m.q = q.data();
    m.scales = scales.data();
  }
  return m;
}

void HostWeights::append_rows(const HostWeights& b) {
  if (b.type != type || b.k != k) {
    throw BackendError("append_rows: a (" + std::string(weight_type_name(type)) + ", k " + std::to_string(k) +
                       ") matrix cannot take rows of a (" + weight_type_name(b.type) + ", k " + std::to_string(b.k) +
                       ") one");
  }
  // F16's int8 form is optional: the result keeps it only where both parts have it.
  const bool int8_form = type == WeightType::W8 || ((n == 0 || !q.empty()) && !b.q.empty());
  n += b.n;
  f16.insert(f16.end(), b.f16.begin(), b.f16.end());
  if (int8_form) {
    q.insert(q.end(), b.q.begin(), b.q.end());
    scales.insert(scales.end(), b.scales.begin(), b.scales.end());
  } else {
    q.clear();
    scales.clear();
  }
}

void HostWeights::widen_to_f16() {
  const size_t nk = size_t(n) * size_t(k);
  if (q.size() != nk || scales.size() != nk / kW8Group) {
    throw BackendError("widen_to_f16: the matrix has no int8 form (q and scales for " + std::to_string(n) + " x " +
                       std::to_string(k) + ")");
  }
  type = WeightType::F16;
  f16.resize(nk);
  for (size_t i = 0; i < nk; ++i) f16[i] = float_to_half(float(q[i]) * half_to_float(scales[i / kW8Group]));
}

size_t Matrix::stream_bytes() const {
  const size_t nk = size_t(n_) * size_t(k_);
  if (type_ == WeightType::W8 || f16_as_w8_) return nk + nk / kW8Group * sizeof(half_t);
  return nk * sizeof(half_t);
}

const char* weight_type_name(WeightType t) {
  switch (t) {
    case WeightType::W8: return "w8";
    case WeightType::F16: return "f16";
  }
  return "?";
}

MatmulDesc output_projection(const AttentionDecodeDesc& d) {
  MatmulDesc o;
  o.w = d.wo;
  o.x = d.out;
  o.y = d.y;
  o.accumulate = true;
  return o;
}

const char* op_name(Op op) {
  switch (op) {
    case Op::MatmulM1W8: return "matmul_m1_w8";
    case Op::MatmulM1F16: return "matmul_m1_f16";
    case Op::Matmul: return "matmul";
    case Op::RmsNorm: return "rmsnorm";
    case Op::Rope: return "rope";
    case Op::KvAppend: return "kv_append";
    case Op::QkvRopeAppend: return "qkv_rope_append";
    case Op::AttentionPrefill: return "attention_prefill";
    case Op::AttentionDecode: return "attention_decode";
    case Op::Add: return "add";
    case Op::SiluMul: return "silu_mul";
    case Op::Embedding: return "embedding";
    case Op::Argmax: return "argmax";
    case Op::StepCapture: return "step_capture";
  }
  return "?";
}

std::vector<std::string> backend_names() {
#if TLLM_WITH_CUDA
  return {"cpu", "cuda"};
#else
  return {"cpu"};
#endif
}

bool backend_available(const std::string& name) {
  if (name == "cpu") return true;
#if TLLM_WITH_CUDA
  if (name == "cuda") return cuda_device_count() > 0;
#endif
  return false;
}

std::unique_ptr<Backend> create_backend(const std::string& name) {
  if (name == "cpu") return create_cpu_backend();
  if (name == "cuda") {
#if TLLM_WITH_CUDA
    if (cuda_device_count() <= 0) throw BackendError("backend 'cuda': no CUDA device is visible");
    return create_cuda_backend();
#else
    throw BackendError("backend 'cuda': this build has no CUDA support (nvcc was not found at configure time)");
#endif
  }
  throw BackendError("unknown backend '" + name + "' (expected cpu or cuda)");
}

uint64_t DownloadTickets::open(size_t bytes, int& slot) {
  if (bytes == 0 || bytes > kQueuedDownloadBytes) {
    throw BackendError("queue_download: " + std::to_string(bytes) + " bytes (expected 1.." +
                       std::to_string(kQueuedDownloadBytes) + ")");
  }
  const uint64_t t = next_;
  slot = int(t % kQueuedDownloads);
  if (open_[slot] != 0) {
    throw BackendError("queue_download: more than " + std::to_string(kQueuedDownloads) + " downloads outstanding");
  }
  ++next_;
  open_[slot] = t;
  bytes_[slot] = bytes;
  return t;
}

int DownloadTickets::close(uint64_t ticket, size_t& bytes) {
  const int slot = int(ticket % kQueuedDownloads);
  if (ticket == 0 || open_[slot] != ticket) {
    throw BackendError("collect_download: ticket " + std::to_string(ticket) + " is not outstanding");
  }
  open_[slot] = 0;
  bytes = bytes_[slot];
  return slot;
}

}  // namespace tllm
