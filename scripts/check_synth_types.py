#!/usr/bin/env python3
"""Checks the weight types `tiny_llm synth --weights` writes against gguf-py.

Usage (from the project root, after building; needs the PyPI package `gguf`, e.g.
python3 -m venv /tmp/gguf && /tmp/gguf/bin/pip install gguf):
    /tmp/gguf/bin/python scripts/check_synth_types.py [--tiny-llm ./build/tiny_llm]
        [--preset tiny-nemo] [--types iq4_nl,iq4_xs,...]

For each type, the preset is written twice with the same seed: with --weights f32 (the weights
before quantisation: every tensor's values come from the same random streams whatever its type)
and with --weights TYPE. gguf-py reads the second file and dequantises every matrix with its own
dequantisers; the values must lie within the type's bound of the f32 weights (relative RMS error
over the tensor, below). Where gguf-py has a quantiser for the type, it quantises the f32 weights
too and the share of blocks that come out byte for byte the same is printed: TQ1_0 and TQ2_0 must
match exactly (the project writes ggml's reference blocks); the round-to-nearest types differ by
design where the project rounds a scale up to the next fp16 value so that no code clips.

The default preset, tiny-nemo (n_embd 256, heads of 128), has rows of whole 256-value super-blocks
everywhere, so every matrix holds the type asked for; a matrix of another type (a fallback) fails.

Exit status 0 when every check passes, 1 otherwise.
"""

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q

# Relative RMS error bounds of the dequantised weights against the f32 ones, for the synthetic
# weights (Gaussian-like, bounded at 3.46σ): fp16/bf16 rounding, then 8-, 6-, 5-, 4-, 3- and 2-bit
# codes with scales per block, then the codebook i-quants at 3.4 down to 1.6 bits a value (about
# 10% above what their quantisers give). The ternary types keep only the values beyond half of each
# 256-value block's max|x| (about 3σ), so nearly all become 0: an error close to the weights' own
# RMS.
BOUNDS = {
    "f16": 1e-3, "bf16": 5e-3, "q8_0": 0.01, "q6_k": 0.03, "q5_0": 0.06, "q5_1": 0.06, "q5_k": 0.06,
    "q4_0": 0.12, "q4_1": 0.12, "q4_k": 0.12, "iq4_nl": 0.08, "iq4_xs": 0.08, "q3_k": 0.25,
    "q2_k": 0.45, "iq3_s": 0.17, "iq3_xxs": 0.22, "iq2_s": 0.29, "iq2_xs": 0.34, "iq2_xxs": 0.40,
    "iq1_m": 0.48, "iq1_s": 0.53, "tq1_0": 0.85, "tq2_0": 0.85,
}
EXACT = {"tq1_0", "tq2_0"}  # gguf-py's quantiser must give the same bytes


def synth(tiny_llm, preset, weights, path):
    subprocess.run([tiny_llm, "synth", "--preset", preset, "--weights", weights, "-q", "-o", path], check=True)
    return {t.name: t for t in gguf.GGUFReader(path).tensors}


def values(t):
    return np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float64).reshape(-1)


def check_type(name, ref, tensors):
    want = Q[name.upper()]
    ok = True
    worst = 0.0
    same_blocks = total_blocks = 0
    for tname, t in tensors.items():
        if len(t.shape) != 2:
            continue
        if t.tensor_type != want:
            print(f"  {tname}: {t.tensor_type.name}, expected {want.name}")
            ok = False
            continue
        x = values(ref[tname])
        y = values(t)
        err = np.sqrt(np.mean((x - y) ** 2)) / np.sqrt(np.mean(x ** 2))
        worst = max(worst, err)
        if hasattr(gguf.quants, "quantize"):
            try:
                mine = np.asarray(t.data, dtype=np.uint8).reshape(-1)
                theirs = np.asarray(gguf.quants.quantize(
                    x.astype(np.float32).reshape(ref[tname].data.shape), want), dtype=np.uint8).reshape(-1)
            except NotImplementedError:
                continue
            block_bytes = gguf.GGML_QUANT_SIZES[want][1]
            a = mine.reshape(-1, block_bytes)
            b = theirs.reshape(-1, block_bytes)
            same_blocks += int(np.sum(np.all(a == b, axis=1)))
            total_blocks += a.shape[0]
    line = f"{name:7s} relative RMS error {worst:.4f} (bound {BOUNDS[name]})"
    if worst > BOUNDS[name]:
        ok = False
    if total_blocks:
        what = "values" if name in ("f16", "bf16") else "blocks"
        line += f"; gguf-py quantiser: {same_blocks}/{total_blocks} {what} identical"
        if name in EXACT and same_blocks != total_blocks:
            ok = False
    print(("ok   " if ok else "FAIL ") + line)
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tiny-llm", default="./build/tiny_llm")
    ap.add_argument("--preset", default="tiny-nemo")
    ap.add_argument("--types", default=",".join(BOUNDS))
    args = ap.parse_args()
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        ref = synth(args.tiny_llm, args.preset, "f32", os.path.join(tmp, "f32.gguf"))
        for name in args.types.split(","):
            tensors = synth(args.tiny_llm, args.preset, name, os.path.join(tmp, name + ".gguf"))
            ok = check_type(name, ref, tensors) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
