#!/usr/bin/env bash
# Configures and builds tiny-llm (Release, tests on) into build/ — the same commands the profiling
# guide uses. Extra arguments go to the configure step, e.g. -DTLLM_CUDA=OFF.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTS=ON "$@"
cmake --build build -j"$(nproc)"
