// The CPU reference backend: the numerical oracle the other backends are tested against.
#pragma once

#include <memory>

#include "backend/backend.h"

namespace tllm {

std::unique_ptr<Backend> create_cpu_backend();

}  // namespace tllm
