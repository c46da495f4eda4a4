#!/usr/bin/env bash
# Builds a libFuzzer target with clang (ASan + UBSan) and runs it for a while.
#
#   scripts/fuzz.sh TARGET [SECONDS] [libFuzzer options...]
#     TARGET   gguf_fuzz, tokenizer_fuzz or chat_fuzz
#     SECONDS  total fuzzing time (default 600)
#
# The build folder is build-fuzz (BUILD_DIR overrides). The run works in
# BUILD_DIR/fuzz/run-TARGET: corpus/ starts from the seeds in fuzz/corpus/<gguf|tokenizer|chat> and keeps
# what the fuzzer adds (the committed seeds are never written to); a crashing input is saved there as
# crash-<sha1> and the script exits non-zero. The run uses one job (-jobs=1), whose output is
# fuzz-0.log; the script prints its last stats line at the end.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
target=${1:?usage: scripts/fuzz.sh gguf_fuzz|tokenizer_fuzz|chat_fuzz [SECONDS] [libFuzzer options...]}
seconds=${2:-600}
shift $(( $# >= 2 ? 2 : 1 ))
build=${BUILD_DIR:-$root/build-fuzz}

case "$target" in
  gguf_fuzz) seeds=gguf; max_len=32768 ;;
  tokenizer_fuzz) seeds=tokenizer; max_len=4096 ;;
  chat_fuzz) seeds=chat; max_len=4096 ;;
  *) echo "fuzz.sh: unknown target '$target' (gguf_fuzz, tokenizer_fuzz or chat_fuzz)" >&2; exit 1 ;;
esac

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
  -DCMAKE_CXX_COMPILER=clang++ -DBUILD_FUZZERS=ON -DTLLM_CUDA=OFF -DBUILD_TESTS=OFF -DBUILD_BENCHMARKS=OFF >/dev/null
cmake --build "$build" --target "$target" -j"${JOBS:-2}"

run="$build/fuzz/run-$target"
mkdir -p "$run/corpus"
cp -n "$root/fuzz/corpus/$seeds/"* "$run/corpus/" 2>/dev/null || true
cd "$run"
rm -f fuzz-0.log
status=0
"$build/fuzz/$target" corpus -jobs=1 -workers=1 -max_total_time="$seconds" -max_len="$max_len" -timeout=10 \
  -rss_limit_mb=2048 -print_final_stats=1 -dict="$root/fuzz/${seeds}.dict" "$@" || status=$?
if ! grep -a -q -E '^#[0-9]+[[:space:]]+DONE' fuzz-0.log 2>/dev/null; then
  echo "fuzz.sh: the run did not finish; the end of $run/fuzz-0.log:" >&2
  tail -n 40 fuzz-0.log >&2 || true
  status=1
fi
echo "fuzz.sh: $target, $seconds s, final stats:"
grep -a -E '^#[0-9]+' fuzz-0.log | tail -n 1 || true
grep -a -E '^(stat::|Done )' fuzz-0.log || true
if compgen -G "crash-*" >/dev/null || compgen -G "leak-*" >/dev/null || compgen -G "timeout-*" >/dev/null ||
   compgen -G "oom-*" >/dev/null; then
  echo "fuzz.sh: findings in $run:" >&2
  ls "$run" | grep -E '^(crash|leak|timeout|oom)-' >&2
  exit 1
fi
exit "$status"
