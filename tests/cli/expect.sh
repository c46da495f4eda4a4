#!/usr/bin/env bash
# Runs a command and checks how it ends: expect.sh EXIT_CODE PATTERN -- COMMAND...
# Passes when the command exits with EXIT_CODE, no signal, within the time limit, and its combined
# output matches the extended regex PATTERN. For an expected failure (EXIT_CODE 1) the error must be
# one line on stderr. A command whose model file is missing is skipped (exit 77) unless CI=true.
set -u
want=$1
pattern=$2
shift 3
for arg in "$@"; do
  case "$arg" in
    *.gguf)
      if [[ "$arg" == */models/* && ! -e "$arg" ]]; then
        if [ "${CI:-}" = "true" ]; then
          echo "FAIL: model $arg is missing (run scripts/fetch-model.sh)"
          exit 1
        fi
        echo "SKIP: model $arg is missing (run scripts/fetch-model.sh)"
        exit 77
      fi
      ;;
  esac
done
out=$(mktemp)
err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT
timeout 600 "$@" >"$out" 2>"$err" </dev/null
rc=$?
cat "$out" "$err"
if [ "$rc" -ne "$want" ]; then
  echo "FAIL: exit code $rc, expected $want"
  exit 1
fi
if ! cat "$out" "$err" | grep -Eq -- "$pattern"; then
  echo "FAIL: output does not match /$pattern/"
  exit 1
fi
if [ "$want" -eq 1 ]; then
  lines=$(grep -c . "$err")
  if [ "$lines" -ne 1 ]; then
    echo "FAIL: expected a one-line error on stderr, got $lines lines"
    exit 1
  fi
fi
echo "PASS"
