// The CUDA backend: hand-written kernels, one stream, CUDA Graph decode.
// Plain C++ header: callers never see CUDA types.
#pragma once

#include <memory>

#include "backend/backend.h"

namespace tllm {

// Number of CUDA devices visible to this process (0 when there is no driver or no device).
int cuda_device_count();
std::unique_ptr<Backend> create_cuda_backend();

}  // namespace tllm
