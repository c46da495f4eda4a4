#!/usr/bin/env bash
# The CPU test suites under AddressSanitizer + UndefinedBehaviorSanitizer (leak checking on, any UB
# report fatal): configures build-asan (CUDA off, bench/ skipped), builds the libraries, the
# programs and the test suites, and runs `ctest -L cpu`.
#
#   scripts/sanitize.sh            # BUILD_DIR=build-asan, JOBS=$(nproc)
#   BUILD_DIR=/tmp/asan JOBS=4 scripts/sanitize.sh [extra ctest arguments, e.g. -R hardening]
#
# Exits non-zero when a test fails, including one a sanitizer report ended.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build-asan}
jobs=${JOBS:-$(nproc)}
start=$(date +%s)

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTLLM_SANITIZE=ON -DTLLM_CUDA=OFF \
  -DBUILD_TESTS=ON -DBUILD_BENCHMARKS=OFF
# With BUILD_BENCHMARKS=OFF the default target is the libraries, the programs and the test suites.
cmake --build "$build" -j"$jobs"
built=$(date +%s)

export ASAN_OPTIONS="detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
status=0
(cd "$build" && ctest -L cpu --output-on-failure -j"$jobs" --timeout 900 "$@") || status=$?
end=$(date +%s)
echo "sanitize.sh: build $((built - start)) s, tests $((end - built)) s, total $((end - start)) s; ctest exit status $status"
exit "$status"
