#!/usr/bin/env bash
# The whole test suite on a fresh machine: dependencies, build, the real test model, ctest.
# GPU tests (label `cuda`) skip where no GPU is visible. With CI=true, tests that need the model or
# ../shared test data fail instead of skipping.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/install-deps.sh
bash scripts/build.sh
bash scripts/fetch-model.sh >/dev/null
cd build
ctest --output-on-failure -j"$(nproc)" --timeout 900
cd "$root"
# The CPU suites again under AddressSanitizer + UndefinedBehaviorSanitizer.
bash scripts/sanitize.sh
