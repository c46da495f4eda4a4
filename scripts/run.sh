#!/usr/bin/env bash
# The main job on a fresh machine: install dependencies, build, fetch SmolLM2-135M-Instruct, answer a
# question with it, then benchmark the default model (the synthetic Qwen2.5-0.5B-Instruct Q4_K_M) on
# the default backend (cuda when a GPU is visible, cpu otherwise).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/install-deps.sh
bash scripts/build.sh
model=$(bash scripts/fetch-model.sh)
./build/tiny_llm generate -m "$model" --chat -p "What is the capital of France?" -n 64 --stats
./build/tiny_llm_bench --prompt "你好" --max-tokens 64 --warmup 1 --iters 3
