#!/usr/bin/env bash
# One pass on a GPU machine: build, the CUDA test suite, compute-sanitizer, and the benchmarks, with
# every log and figure written into OUT_DIR (default: reports/gpu-<date>). Built for the GPU that is
# present only (CMAKE_CUDA_ARCHITECTURES=native), without Kokkos if it is absent.
# Usage: scripts/gpu-check.sh [OUT_DIR] [steps...]
#   steps: build test sanitize bench sweep experiments (default: all)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=${1:-reports/gpu-$(date +%Y%m%d-%H%M%S)}
shift || true
steps=${*:-build test sanitize bench sweep experiments}
mkdir -p "$out"
export PATH="/usr/local/cuda/bin:$PATH"
build=build-gpu
has() { [[ " $steps " == *" $1 "* ]]; }
log() { echo "== $*" | tee -a "$out/summary.txt"; }

{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv
  nvcc --version | tail -2
  echo "commit ${TLLM_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}"
} > "$out/environment.txt" 2>&1

if has build; then
  log "build"
  cmake -S . -B $build -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTS=ON -DCMAKE_CUDA_ARCHITECTURES=native \
    > "$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
  # Keep going past a failing target so the rest can still be tested; the log names what failed.
  cmake --build $build -j"$(nproc)" -- -k 0 >> "$out/build.log" 2>&1 || grep -E "FAILED|error" "$out/build.log" | head -20 | tee -a "$out/summary.txt"
fi
bench=$build/tiny_llm_bench
# The synthetic Qwen2.5-0.5B-Instruct Q4_K_M; with QWEN_TOKENIZER_DIR (a folder holding the Hugging
# Face vocab.json + merges.txt) it carries the real Qwen2 vocabulary, so prompts tokenize as they would
# with the real model.
model=$root/.cache/qwen2.5-0.5b-synth${QWEN_TOKENIZER_DIR:+-tok}.gguf
if [ ! -s "$model" ]; then
  mkdir -p .cache
  $build/tiny_llm synth -q -o "$model" ${QWEN_TOKENIZER_DIR:+--tokenizer-dir "$QWEN_TOKENIZER_DIR"}
fi

if has test; then
  log "ctest -L cuda"
  (cd $build && ctest -L cuda --output-on-failure --timeout 300) > "$out/ctest.log" 2>&1
  grep -E "tests passed|tests failed|Failed|Skipped|\*\*\*" "$out/ctest.log" | tee -a "$out/summary.txt"
  $build/tests/ops_test --gtest_filter='*/cuda' > "$out/ops-cuda.log" 2>&1; tail -3 "$out/ops-cuda.log" | tee -a "$out/summary.txt"
  $build/tests/model_test --gtest_filter='*cuda*' > "$out/model-cuda.log" 2>&1; tail -3 "$out/model-cuda.log" | tee -a "$out/summary.txt"
fi
if has bench; then
  log "tiny_llm_bench"
  $bench "$model" --prompt "你好" --max-tokens 128 --warmup 2 --iters 7 -q | tee "$out/bench-graphs.txt" | tee -a "$out/summary.txt"
  $bench "$model" --prompt "你好" --max-tokens 128 --warmup 2 --iters 7 -q --json > "$out/bench-graphs.json"
  $bench "$model" --prompt "你好" --max-tokens 128 --warmup 2 --iters 7 -q --no-graphs | tee "$out/bench-nographs.txt" | grep -E "decode|TTFT|TPOT" | tee -a "$out/summary.txt"
  $bench "$model" --prompt "你好" --context 4096 --ctx 4352 --max-tokens 128 --warmup 1 --iters 5 -q | tee "$out/bench-ctx4096.txt" | grep -E "decode|TPOT|memory" | tee -a "$out/summary.txt"
  $bench "$model" --prompt "你好" --context 512 --raw --max-tokens 1 --warmup 2 --iters 7 -q | tee "$out/bench-prefill512.txt" | grep -E "prefill|TTFT" | tee -a "$out/summary.txt"
  $bench "$model" --ctx 4096 --soak-tokens 20000 -q | tee "$out/soak.txt" | tee -a "$out/summary.txt"
  $build/tiny_llm_kernel_bench --csv > "$out/kernel-bench.csv" 2>&1; cat "$out/kernel-bench.csv" >> "$out/summary.txt"
  $bench "$model" --prompt "你好" --max-tokens 64 --warmup 1 --iters 3 -q --profile --trace-out "$out/profile-trace.json" \
    > "$out/profile.txt" 2>&1; cat "$out/profile.txt" >> "$out/summary.txt"
fi
if has sweep; then
  log "context sweep"
  TINY_LLM_BENCH=$bench bash scripts/context-sweep.sh "$out" "$model" > "$out/sweep.log" 2>&1; tail -2 "$out/sweep.log"
fi
if has experiments; then
  log "bench/experiments"
  $build/persistent_layers_experiment | tee "$out/persistent-layers.txt" | tee -a "$out/summary.txt"
  $build/persistent_decode_experiment | tee "$out/persistent-decode.txt" | tee -a "$out/summary.txt"
  $build/launch_latency_experiment | tee "$out/launch-latency.txt" | tee -a "$out/summary.txt"
fi
if has sanitize; then
  for tool in memcheck racecheck; do
    log "compute-sanitizer $tool on the CUDA op suite"
    timeout "${SANITIZER_TIMEOUT:-300}" compute-sanitizer --tool $tool --error-exitcode 3 $build/tests/ops_test --gtest_filter='*/cuda' \
      > "$out/sanitizer-$tool.log" 2>&1
    echo "exit $?" | tee -a "$out/summary.txt"
    tail -2 "$out/sanitizer-$tool.log" | tee -a "$out/summary.txt"
  done
fi
log "done"
