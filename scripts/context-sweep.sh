#!/usr/bin/env bash
# Decode speed against context length, with and without CUDA graphs: runs tiny_llm_bench --json at
# each context length and writes one JSON object per line, then draws the chart.
# Usage: scripts/context-sweep.sh OUT_DIR [MODEL] [extra tiny_llm_bench options...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:?usage: context-sweep.sh OUT_DIR [MODEL] [options]}
shift
model=()
if [ $# -gt 0 ] && [[ "$1" != -* ]]; then model=("$1"); shift; fi
bench="${TINY_LLM_BENCH:-$root/build/tiny_llm_bench}"
mkdir -p "$out"
: > "$out/context-sweep.jsonl"
for ctx in 128 256 512 1024 2048 4096 8192; do
  for graphs in on off; do
    flag=()
    [ "$graphs" = off ] && flag=(--no-graphs)
    "$bench" "${model[@]}" --context "$ctx" --ctx $((ctx + 256)) --max-tokens 128 --warmup 1 --iters ${SWEEP_ITERS:-5} \
      --json -q "${flag[@]}" "$@" | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)))' \
      >> "$out/context-sweep.jsonl"
    echo "context $ctx graphs $graphs done" >&2
  done
done
python3 "$root/scripts/plot_decode.py" "$out/context-sweep.jsonl" "$out/decode-vs-context.svg"
