// Argmax on the CPU: one serial pass (n is at most n_vocab, a fraction of a millisecond), strict
// comparison so that the first of equal maxima wins.
#include "backends/cpu/cpu_backend_impl.h"

namespace tllm::cpu {

void CpuBackend::argmax(const ArgmaxDesc& d) {
  TraceScope t(trace_, "argmax");
  TLLM_CPU_CHECK(d.n >= 1 && d.x && d.out);
  int64_t best = 0;
  for (int64_t i = 1; i < d.n; ++i) {
    if (d.x[i] > d.x[best]) best = i;
  }
  *d.out = int32_t(best);
  if (d.advance) {
    ++d.advance[0];
    ++d.advance[1];
  }
}

}  // namespace tllm::cpu
