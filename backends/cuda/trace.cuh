// Kernel and copy tracing through CUPTI's activity API, for the built-in profiler.
//
// Activity records need no hardware-counter permission (they work where ncu reports
// ERR_NVGPUCTRPERM) and include kernels replayed from CUDA graphs. CUPTI delivers records through
// process-wide callbacks, so the collector behind them is process-wide too; one CuptiTrace may be
// active at a time.
#pragma once

#include <vector>

#include "backend/backend.h"

namespace tllm::cuda {

class CuptiTrace {
 public:
  CuptiTrace() = default;
  ~CuptiTrace();
  CuptiTrace(const CuptiTrace&) = delete;
  CuptiTrace& operator=(const CuptiTrace&) = delete;

  // Starts collecting kernel, memcpy and memset activity. False when CUPTI refuses.
  bool begin();
  // Waits for the device, stops collecting and returns the records sorted by start time.
  std::vector<TraceRecord> end();

 private:
  bool active_ = false;
};

}  // namespace tllm::cuda
