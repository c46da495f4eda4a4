#!/usr/bin/env python3
"""Compares tiny-llm's tokens, logits and greedy output with llama.cpp's on the same GGUF files.

Usage (from the project root, after building; needs the PyPI packages `llama-cpp-python`, which
builds llama.cpp from source with cmake, CPU only, and `numpy`, e.g.
python3 -m venv /tmp/venv-llamacpp && /tmp/venv-llamacpp/bin/pip install llama-cpp-python numpy):
    /tmp/venv-llamacpp/bin/python scripts/check_llama_cpp.py [MODEL.gguf ...]
        [--tiny-llm ./build/tiny_llm] [--weights q4_k_m,q8_0] [--preset qwen2.5-0.5b]
        [--tokenizer-dir DIR] [--no-f32] [--n-gen 32] [--threads 2] [--json]

MODEL defaults to synthetic models that `tiny_llm synth` writes into a temporary folder, one per
--weights type, with the shapes of --preset and the vocabulary of --tokenizer-dir (default
../shared/data/qwen2-tokenizer where it exists, the real Qwen2 one; pass '' for synth's own, as
the SentencePiece presets need): the default q4_k_m file has the shapes, tensor types and
vocabulary of Qwen2.5-0.5B-Instruct Q4_K_M. For each model:

- tokens: `tiny_llm tokenize` against llama.cpp's `Llama.tokenize(text, add_bos=False,
  special=True)` on fixed texts (ASCII, Chinese, code, emoji, runs of whitespace, special tokens);
- logits: the same ids (llama.cpp's tokenization, BOS where the model asks, cut to the trained
  context) go to `tiny_llm logits --backend cpu` and to llama.cpp (`logits_all=True`, `eval`,
  `scores`); per prompt the script prints the largest |difference|, the RMS of llama.cpp's logits,
  the RMS of the difference over that, the mean and the lowest cosine similarity of the two logit
  rows of a position, the share of positions whose argmax agrees and the mean overlap of the two
  top-5 sets. For the synthetic models (unless --no-f32) `synth --weights f32` writes the same
  weights unquantised, and the rows marked * compare llama.cpp on each file with llama.cpp on
  that f32 file: what rounding the weights to the file's type does within llama.cpp itself;
- greedy: llama.cpp decodes --n-gen tokens greedily (argmax of its own logits) after the ChatML
  "你好" prompt, stopping at EOS; the prompt and those tokens go to `tiny_llm logits`, and the
  first generated position where tiny-llm's argmax differs is where the two greedy runs part
  (before it they saw the same tokens). There both margins are printed: tiny-llm's logit of its
  own choice minus its logit of llama.cpp's, and llama.cpp's the other way round. `tiny_llm
  generate --backend cpu --temp 0` runs too; its text must begin with llama.cpp's detokenisation
  of the tokens both agree on, then tiny-llm's choice at the divergence.

Why the logits differ. The files are the same, the arithmetic is not:
- tiny-llm requantises every layer matrix to W8 (int8 codes, one fp16 scale per 32 values along a
  row, model/requant.cpp). A block of 32 integer codes times one fp16 scale (Q4_0, Q5_0, Q8_0,
  IQ4_NL) is taken over exactly; other types are rounded again, with an error of at most
  max|w|/254 per value of a group. The output projection (or the tied token embedding) becomes
  fp16. The CPU backend (backends/cpu/matmul.cpp) multiplies those weights, widened to fp32, with
  fp16 activations (the rmsnorm output, the attention output and SwiGLU's output are rounded to
  fp16) through OpenBLAS in fp32; the KV cache is fp16.
- llama.cpp's CPU backend computes on the GGUF blocks directly, but rounds the activations to the
  type its dot products pair with the weights' type: 8-bit blocks of 32 values (Q8_0) for Q5_0 and
  Q8_0, of 256 (Q8_K) for the K-quants, fp16 for F16; its KV cache is fp16 too.
The default Q4_K_M-shaped file holds Q5_0 and Q8_0 everywhere but ffn_down (Q4_K or Q6_K), so the
two engines use the same weights except ffn_down, and llama.cpp's 8-bit activations are the other
source of difference. In the q8_0 file (every matrix Q8_0) the weights are the same int8 codes and
scales in both engines (the output matrix aside: fp16(q·d) in tiny-llm), so what is left is the
engines' arithmetic. Random weights give flat logits (RMS 0.6 on the default preset) whose argmax
is often a near-tie, so top-1 agreement and greedy runs part at small margins; the cosine
similarity is the figure to judge.

COSINE_MIN. Measured on a 2-core x86-64 machine with llama-cpp-python 0.3.36, the mean cosine
similarity of tiny-llm's logits and llama.cpp's was 0.99942 to 0.99973 per prompt on the q4_k_m
and q8_0 files (docs/correctness.md has the figures), while llama.cpp on the q8_0 file against
llama.cpp on the f32 one gave 0.99899 to 0.99937: the engines differ by less than 8-bit weights
move llama.cpp itself. The bound, 0.998, allows twice that 8-bit difference (1 - cos = 2e-3) and
fails a difference as large as Q4_K_M's own (0.976 to 0.986 against f32).

Exit status 0 when every check passes; 1 on bad input (a missing file or program, a file
llama.cpp cannot load, llama_cpp or numpy not importable), with one line on stderr; 2 when a
check fails: a tokenization that differs, a mean cosine similarity below COSINE_MIN, or a
`generate` text that does not begin as predicted. On the SentencePiece presets (tiny-llama2) the
last one fails where the greedy run reaches a padding token of type unused: tiny-llm prints its
text ("[PAD313]"), llama.cpp prints nothing for it.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

try:
    import numpy as np
except ImportError as e:
    sys.exit(f"check_llama_cpp.py: cannot import numpy ({e}); run it with the venv's python")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_TOKENIZER_DIR = os.path.join(os.path.dirname(ROOT), "shared", "data", "qwen2-tokenizer")

# The lowest mean cosine similarity (over positions) of the two engines' logits that passes.
COSINE_MIN = 0.998

CHAT = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n你好<|im_end|>\n" \
       "<|im_start|>assistant\n"
ENGLISH = (
    "The history of computing is a story of abstractions stacked on one another. Early machines "
    "were programmed by rewiring panels; stored programs replaced the wires with numbers, and "
    "assemblers replaced the numbers with names. Compilers then let people describe what they "
    "wanted instead of how the hardware should do it, and operating systems hid the details of "
    "disks, memory and devices behind files and processes. Each layer made the one below it "
    "invisible to most users, and each new generation of engineers had to learn again where the "
    "costs were hidden."
)
TOKENIZE_TEXTS = [
    "Hello world",
    "你好",
    "你好，世界！今天天气怎么样？",
    "def f(x):\n    return x ** 2  # square\n",
    "emoji 😀👍🏽 and flags 🇫🇷",
    "  leading, trailing  \t tabs\n\n\nand newlines   ",
    "numbers 1234567 3.14159 -42",
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    "text<|endoftext|>after",
    "Ünïcödé àccents, Ελληνικά, русский, العربية",
    CHAT,
    ENGLISH,
]
LOGIT_PROMPTS = [("chat 你好", CHAT), ("english", ENGLISH)]


class InputError(Exception):
    """Bad input: reported on one line, exit status 1."""


def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if r.returncode != 0:
        raise InputError(f"{' '.join(cmd[:2])} failed ({r.returncode}): {r.stderr.decode(errors='replace').strip()}")
    return r.stdout


def tiny_tokenize(tiny_llm, model, text, tmp):
    path = os.path.join(tmp, "text.txt")
    with open(path, "wb") as f:
        f.write(text.encode())
    return [int(t) for t in run([tiny_llm, "tokenize", "-m", model, "--file", path]).split()]


def tiny_logits(tiny_llm, model, ids, n_vocab, tmp):
    ids_path = os.path.join(tmp, "ids.txt")
    out = os.path.join(tmp, "logits.f32")
    with open(ids_path, "w") as f:
        f.write(" ".join(map(str, ids)))
    run([tiny_llm, "logits", "--backend", "cpu", "-q", "-m", model, "--tokens-file", ids_path, "-o", out])
    return np.fromfile(out, dtype=np.float32).reshape(len(ids), n_vocab)


def llama_logits(llm, ids):
    llm.reset()
    llm.eval(ids)
    return np.array(llm.scores[: len(ids)], dtype=np.float32)


def compare_logits(a, b):
    """a: tiny-llm's (n_tokens, n_vocab), b: llama.cpp's; metrics over positions."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    d = a64 - b64
    cos = np.sum(a64 * b64, axis=1) / (np.linalg.norm(a64, axis=1) * np.linalg.norm(b64, axis=1))
    top5a = np.argsort(-a, axis=1)[:, :5]
    top5b = np.argsort(-b, axis=1)[:, :5]
    overlap = [len(set(x) & set(y)) / 5 for x, y in zip(top5a, top5b)]
    return {
        "positions": int(a.shape[0]),
        "max_abs_diff": float(np.max(np.abs(d))),
        "logit_rms": float(np.sqrt(np.mean(b64 ** 2))),
        "rel_rms_diff": float(np.sqrt(np.mean(d ** 2)) / np.sqrt(np.mean(b64 ** 2))),
        "cosine_mean": float(np.mean(cos)),
        "cosine_min": float(np.min(cos)),
        "top1_agree": float(np.mean(np.argmax(a, axis=1) == np.argmax(b, axis=1))),
        "top5_overlap": float(np.mean(overlap)),
    }


def greedy(llm, tiny_llm, model, prompt, n_gen, n_vocab, tmp):
    ids = llm.tokenize(prompt.encode(), add_bos=True, special=True)
    llm.reset()
    llm.eval(ids)
    gen = []
    eos = llm.token_eos()
    for _ in range(min(n_gen, context_limit(llm) - len(ids))):
        tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        gen.append(tok)
        if tok == eos:
            break
        llm.eval([tok])
    ref = np.array(llm.scores[len(ids) - 1: len(ids) - 1 + len(gen)], dtype=np.float32)
    # tiny-llm's logits on llama.cpp's sequence: row p predicts generated token p.
    mine = tiny_logits(tiny_llm, model, ids + gen, n_vocab, tmp)[len(ids) - 1: -1]
    mine_top = np.argmax(mine, axis=1)
    differ = np.nonzero(mine_top != np.array(gen))[0]
    first = int(differ[0]) if len(differ) else None
    out = {"generated": len(gen), "first_divergence": first}
    agreed = gen if first is None else gen[:first] + [int(mine_top[first])]
    if first is not None:
        t_tok, l_tok = int(mine_top[first]), gen[first]
        out["tiny_llm_margin"] = float(mine[first, t_tok] - mine[first, l_tok])
        out["llama_cpp_margin"] = float(ref[first, l_tok] - ref[first, t_tok])
    # tiny_llm generate must print the tokens both agree on, then tiny-llm's own choice.
    text = run([tiny_llm, "generate", "--backend", "cpu", "-q", "-m", model, "--temp", "0", "-n", str(n_gen),
                "-p", prompt])
    expect = llm.detokenize([t for t in agreed if t != eos])
    out["generate_text_matches"] = text.startswith(expect)
    if not out["generate_text_matches"]:
        at = next(i for i in range(len(expect)) if i >= len(text) or text[i] != expect[i])
        out["generate_text_differs"] = {"byte": at, "tiny_llm": text[at: at + 24].decode(errors="replace"),
                                        "llama_cpp": expect[at: at + 24].decode(errors="replace")}
    return out


def synth_models(tiny_llm, preset, weights, tokenizer_dir, tmp, prefix=""):
    paths = []
    for w in weights:
        path = os.path.join(tmp, f"{prefix}{preset}-{w}.gguf")
        cmd = [tiny_llm, "synth", "-q", "--preset", preset, "--weights", w, "-o", path]
        if tokenizer_dir:
            cmd += ["--tokenizer-dir", tokenizer_dir]
        run(cmd)
        paths.append(path)
    return paths


def load_llama(llama_cpp, model, threads):
    try:
        return llama_cpp.Llama(model_path=model, n_ctx=512, n_batch=512, n_threads=threads, logits_all=True,
                               verbose=False)
    except ValueError as e:
        raise InputError(f"{model}: llama.cpp cannot load it ({e})")


def context_limit(llm):
    """The most tokens both engines take: llama.cpp's n_ctx, and the model's trained context, which
    tiny-llm does not exceed."""
    arch = llm.metadata.get("general.architecture", "")
    return min(llm.n_ctx(), int(llm.metadata.get(f"{arch}.context_length", llm.n_ctx())))


def prompt_ids(llm, text):
    """llama.cpp's ids of a prompt, BOS first where the model asks for one, cut to context_limit."""
    return llm.tokenize(text.encode(), add_bos=True, special=True)[: context_limit(llm)]


def f32_logits(llama_cpp, args, model):
    """llama.cpp's logits of LOGIT_PROMPTS on an f32 file: {name: (n_tokens, n_vocab)}."""
    llm = load_llama(llama_cpp, model, args.threads)
    return {name: llama_logits(llm, prompt_ids(llm, text)) for name, text in LOGIT_PROMPTS}


def check_model(llama_cpp, args, model, tmp, f32=None):
    t0 = time.time()
    llm = load_llama(llama_cpp, model, args.threads)
    n_vocab = llm.n_vocab()
    res = {"model": model, "tokens": {"equal": 0, "total": 0, "differ": []}, "logits": {}}
    for text in TOKENIZE_TEXTS:
        mine = tiny_tokenize(args.tiny_llm, model, text, tmp)
        ref = llm.tokenize(text.encode(), add_bos=False, special=True)
        res["tokens"]["total"] += 1
        if mine == ref:
            res["tokens"]["equal"] += 1
        else:
            res["tokens"]["differ"].append({"text": text, "tiny_llm": mine, "llama_cpp": ref})
    for name, text in LOGIT_PROMPTS:
        ids = prompt_ids(llm, text)
        ref = llama_logits(llm, ids)
        res["logits"][name] = compare_logits(tiny_logits(args.tiny_llm, model, ids, n_vocab, tmp), ref)
        if f32:
            res.setdefault("llama_cpp_vs_f32", {})[name] = compare_logits(ref, f32[name])
    res["greedy"] = greedy(llm, args.tiny_llm, model, CHAT, args.n_gen, n_vocab, tmp)
    res["seconds"] = round(time.time() - t0, 1)
    return res


def failures(res):
    out = []
    if res["tokens"]["equal"] != res["tokens"]["total"]:
        out.append(f"{res['tokens']['total'] - res['tokens']['equal']} tokenizations differ")
    for name, m in res["logits"].items():
        if m["cosine_mean"] < COSINE_MIN:
            out.append(f"{name}: mean cosine similarity {m['cosine_mean']:.5f} < {COSINE_MIN}")
    if not res["greedy"]["generate_text_matches"]:
        out.append("tiny_llm generate does not print the predicted greedy text")
    return out


def print_table(results):
    for res in results:
        tk = res["tokens"]
        print(f"{res['model']}  ({res['seconds']} s)")
        print(f"  tokens: {tk['equal']}/{tk['total']} texts give the same ids")
        for d in tk["differ"]:
            print(f"    {d['text']!r}: tiny-llm {d['tiny_llm']} llama.cpp {d['llama_cpp']}")
        print(f"  {'prompt':10s} {'positions':>9s} {'max|diff|':>9s} {'logit RMS':>9s} {'RMS diff':>9s} "
              f"{'cos mean':>9s} {'cos min':>9s} {'top-1':>6s} {'top-5':>6s}")
        rows = [(name, m) for name, m in res["logits"].items()]
        rows += [(f"{name} *", m) for name, m in res.get("llama_cpp_vs_f32", {}).items()]
        for name, m in rows:
            print(f"  {name:10s} {m['positions']:9d} {m['max_abs_diff']:9.4f} {m['logit_rms']:9.4f} "
                  f"{m['rel_rms_diff']:9.2e} {m['cosine_mean']:9.6f} {m['cosine_min']:9.6f} "
                  f"{m['top1_agree']:6.1%} {m['top5_overlap']:6.1%}")
        if "llama_cpp_vs_f32" in res:
            print("  * llama.cpp on this file against llama.cpp on the f32 file of the same weights")
        g = res["greedy"]
        if g["first_divergence"] is None:
            line = f"all {g['generated']} tokens agree"
        else:
            line = (f"first divergence at generated token {g['first_divergence']} of {g['generated']}; "
                    f"margin there: tiny-llm {g['tiny_llm_margin']:.4f}, llama.cpp {g['llama_cpp_margin']:.4f}")
        print(f"  greedy: {line}; generate text {'as predicted' if g['generate_text_matches'] else 'DIFFERS'}")
        if "generate_text_differs" in g:
            d = g["generate_text_differs"]
            print(f"    from byte {d['byte']}: tiny-llm {d['tiny_llm']!r}, llama.cpp {d['llama_cpp']!r}")
        for f in failures(res):
            print(f"  FAIL {f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("models", nargs="*", help="GGUF files (default: synthetic models, see --weights)")
    ap.add_argument("--tiny-llm", default="./build/tiny_llm")
    ap.add_argument("--weights", default="q4_k_m,q8_0", help="synth --weights of the synthetic models")
    ap.add_argument("--preset", default="qwen2.5-0.5b", help="synth --preset of the synthetic models")
    ap.add_argument("--tokenizer-dir", default=DEFAULT_TOKENIZER_DIR if os.path.isdir(DEFAULT_TOKENIZER_DIR) else "",
                    help="synth --tokenizer-dir ('' for synth's own vocabulary)")
    ap.add_argument("--n-gen", type=int, default=32, help="greedy tokens to compare")
    ap.add_argument("--threads", type=int, default=2, help="llama.cpp threads")
    ap.add_argument("--no-f32", action="store_true",
                    help="skip llama.cpp's run on the f32 file that the synthetic models are compared with")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    args = ap.parse_args()
    try:
        if not os.access(args.tiny_llm, os.X_OK):
            raise InputError(f"{args.tiny_llm}: no such program (build it, or pass --tiny-llm)")
        for m in args.models:
            if not os.path.isfile(m):
                raise InputError(f"{m}: no such file")
        if args.tokenizer_dir and not os.path.isdir(args.tokenizer_dir):
            raise InputError(f"{args.tokenizer_dir}: no such folder")
        try:
            import llama_cpp
        except ImportError as e:
            raise InputError(f"cannot import llama_cpp ({e}); pip install llama-cpp-python")
        with tempfile.TemporaryDirectory() as tmp:
            models = args.models
            f32 = None
            if not models:
                weights = args.weights.split(",")
                models = synth_models(args.tiny_llm, args.preset, weights, args.tokenizer_dir, tmp)
                if not args.no_f32:
                    path = synth_models(args.tiny_llm, args.preset, ["f32"], args.tokenizer_dir, tmp, "ref-")[0]
                    f32 = f32_logits(llama_cpp, args, path)
                    os.remove(path)
            results = [check_model(llama_cpp, args, m, tmp, f32) for m in models]
    except InputError as e:
        print(f"check_llama_cpp.py: {e}", file=sys.stderr)
        return 1
    if args.json:
        out = {"llama_cpp_python": llama_cpp.__version__, "cosine_min": COSINE_MIN, "results": results}
        print(json.dumps(out, ensure_ascii=False, indent=1))
    else:
        print(f"llama-cpp-python {llama_cpp.__version__}; pass: mean cosine similarity >= {COSINE_MIN}")
        print_table(results)
    return 2 if any(failures(r) for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
