// Embedding lookup on the CPU: copies rows of the matrix's fp32 copy (the exact dequantised W8 or
// widened F16 values), one parallel task per id.
#include "backends/cpu/cpu_backend_impl.h"

namespace tllm::cpu {

void CpuBackend::embedding(const EmbeddingDesc& d) {
  TraceScope t(trace_, "embedding");
  const CpuMatrix& table = cpu_matrix(d.table);
  TLLM_CPU_CHECK(d.m >= 0 && (d.m == 0 || ((d.ids || d.host_ids) && d.out)));
  TLLM_CPU_CHECK(d.ids || d.m <= kEmbeddingHostIds);
  const int32_t* ids = d.ids ? d.ids : d.host_ids;  // one memory on this backend
  const int64_t n_embd = table.k();
  // Ids are checked before the parallel loop: an exception must not leave a parallel region.
  for (int64_t i = 0; i < d.m; ++i) TLLM_CPU_CHECK(ids[i] >= 0 && ids[i] < table.n());
  parallel_for(d.m, n_embd, [&](int64_t i) {
    std::memcpy(d.out + i * n_embd, table.w32() + int64_t(ids[i]) * n_embd, size_t(n_embd) * sizeof(float));
  });
  if (d.positions) {
    for (int64_t i = 0; i < d.m; ++i) d.positions[i] = d.pos0 + int32_t(i);
  }
}

}  // namespace tllm::cpu
