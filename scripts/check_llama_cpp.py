#!/usr/bin/env python3
"""Compares tiny-llm's tokens, logits and greedy output with llama.cpp's on the same GGUF files.

Usage (from the project root, after building; needs the PyPI packages `llama-cpp-python`, which
builds llama.cpp from source with cmake, CPU only, `gguf` and `numpy`, e.g. python3 -m venv
/tmp/venv-llamacpp && /tmp/venv-llamacpp/bin/pip install llama-cpp-python gguf numpy):
    /tmp/venv-llamacpp/bin/python scripts/check_llama_cpp.py [MODEL.gguf ...]
        [--tiny-llm ./build/tiny_llm] [--weights q4_k_m,q8_0] [--preset qwen2.5-0.5b]
        [--tokenizer-dir DIR] [--vocab-prefix N] [--synth-args ARGS] [--tiny-args ARGS] [--no-ref]
        [--n-gen 32] [--threads 2] [--no-extra-bufts] [--json]

MODEL defaults to synthetic models that `tiny_llm synth` writes into a temporary folder, one per
--weights type, with the shapes of --preset and the vocabulary of --tokenizer-dir (default
../shared/data/qwen2-tokenizer where it exists, the real Qwen2 one; pass '' for synth's own, as
the SentencePiece presets need): the default q4_k_m file has the shapes, tensor types and
vocabulary of Qwen2.5-0.5B-Instruct Q4_K_M. A preset with fewer tokens than that vocabulary
(llama3.2-1b: 128,256) takes its first ids with --vocab-prefix (128000 there); synth's own
byte-level vocabulary has no merges, an empty array that gguf-py 0.19 cannot read. For each model:

- tokens: `tiny_llm tokenize` against llama.cpp's `Llama.tokenize(text, add_bos=False,
  special=True)` on fixed texts (ASCII, Chinese, code, emoji, runs of whitespace, special tokens);
- logits: the same ids (llama.cpp's tokenization, BOS where the model asks, cut to the trained
  context) go to `tiny_llm logits --backend cpu` and to llama.cpp (`logits_all=True`, `eval`,
  `scores`); per prompt the script prints the largest |difference|, the RMS of llama.cpp's logits,
  the RMS of the difference over that, the mean and the lowest cosine similarity of the two logit
  rows of a position, the share of positions whose argmax agrees and the mean overlap of the two
  top-5 sets (row tiny-llm/llama);
- reference: unless --no-ref, gguf-py writes a copy of the file with every tensor dequantised to
  F32 (the same key/values, tensor names, shapes and order), and llama.cpp runs the same ids on it
  with an F32 KV cache and without flash attention. ggml's CPU type traits pair F32 weights with
  F32 activations (vec_dot_type F32), so every product is fp32 by fp32 with fp32 sums: the exact
  computation with the file's own weights, up to fp32 rounding and summation order. Rows
  tiny-llm/ref and llama.cpp/ref compare each engine on the file with it (the copy's tokenization
  of the texts above must equal the file's);
- greedy: llama.cpp decodes --n-gen tokens greedily (argmax of its own logits) after the ChatML
  "你好" prompt, stopping at an end-of-generation token (`llama_vocab_is_eog`: EOS, and EOT-like
  tokens such as <|endoftext|>); the prompt and those tokens go to `tiny_llm logits`, and the
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
  fp16: from float types and Q8_0 the file's values rounded to fp16, from other quantised types
  (Q6_K) those of the same W8 rounding. The CPU backend (backends/cpu/matmul.cpp) multiplies those
  weights, widened to fp32, with fp16 activations (the rmsnorm output, the attention output and
  SwiGLU's output are rounded to fp16) through OpenBLAS in fp32; the KV cache is fp16.
- llama.cpp's CPU backend computes on the GGUF blocks directly, but rounds the activations to the
  type its dot products pair with the weights' type: 8-bit blocks of 32 values (Q8_0) for Q5_0 and
  Q8_0, of 256 (Q8_K) for the K-quants, fp16 for F16; its KV cache is fp16 too.
The default Q4_K_M-shaped file holds Q5_0 and Q8_0 everywhere but ffn_down (Q4_K or Q6_K), so the
two engines use the same weights except ffn_down, and llama.cpp's 8-bit activations are the other
source of difference. In the q8_0 file (every matrix Q8_0) the weights are the same int8 codes and
scales in both engines (the output matrix aside: fp16(q·d) in tiny-llm), so what is left is the
engines' arithmetic. Random weights give flat logits (RMS 0.6 on the default preset) whose argmax
is often a near-tie, so top-1 agreement and greedy runs part at small margins; the cosine
similarity and the RMS difference are the figures to judge.

The pass rule. The distance between the two engines is the sum of two errors, tiny-llm's and
llama.cpp's, so a bound on it alone can fail tiny-llm for llama.cpp's rounding; with the
reference each engine's own error is measured. Measured on a 2-core x86-64 machine with
llama-cpp-python 0.3.36 (docs/correctness.md has the figures), tiny-llm's RMS difference from
the reference, over the logit RMS, was 0.04 to 0.05 times llama.cpp's on the q8_0 file, 0.31 to
0.36 times on the q4_k_m file and 0.69 to 0.87 times on SmolLM2-135M-Instruct Q4_1, a type that
tiny-llm rounds again to W8. A check fails when, for a prompt, tiny-llm's RMS difference from the
reference exceeds REF_RATIO_MAX = 1.5 times llama.cpp's (room for other types that tiny-llm
requantises, where its rounding and llama.cpp's 8-bit activations are of one size, while a wrong
operation moves logits by a good part of their RMS), or its mean cosine similarity to the
reference is below COSINE_MIN = 0.998 (an absolute bound in case both engines are far: the lowest
mean measured for either engine was 0.99922, llama.cpp on SmolLM2's chat prompt; 1 - 0.998 is
2.6 times that distance). With --no-ref the bound applies to tiny-llm against llama.cpp, as the
only figure there is; SmolLM2's chat prompt gave 0.99823 there, near the bound while tiny-llm was
the closer of the two to the reference.

Exit status 0 when every check passes; 1 on bad input (a missing file or program, a file
llama.cpp cannot load, llama_cpp, gguf or numpy not importable), with one line on stderr; 2 when
a check fails: a tokenization that differs, a reference as above that fails, or a `generate`
text that does not begin as predicted (tokens of type unused, such as the padding pieces of the
SentencePiece presets, write nothing in either engine).
"""

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time

try:
    import gguf
    import numpy as np
except ImportError as e:
    sys.exit(f"check_llama_cpp.py: cannot import {e.name} ({e}); run it with the venv's python")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_TOKENIZER_DIR = os.path.join(os.path.dirname(ROOT), "shared", "data", "qwen2-tokenizer")

# The lowest mean cosine similarity (over positions) of tiny-llm's logits and the reference's (of
# llama.cpp's with --no-ref) that passes.
COSINE_MIN = 0.998
# The most tiny-llm's RMS distance to the reference may be, as a multiple of llama.cpp's.
REF_RATIO_MAX = 1.5

GGML_TYPE_F32 = 0  # ggml's type id, for llama.cpp's KV cache in the reference run

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


def tiny_logits(tiny_llm, model, ids, n_vocab, tmp, extra):
    ids_path = os.path.join(tmp, "ids.txt")
    out = os.path.join(tmp, "logits.f32")
    with open(ids_path, "w") as f:
        f.write(" ".join(map(str, ids)))
    run([tiny_llm, "logits", "--backend", "cpu", "-q", "-m", model, "--tokens-file", ids_path, "-o", out] + extra)
    return np.fromfile(out, dtype=np.float32).reshape(len(ids), n_vocab)


def llama_logits(llm, ids):
    llm.reset()
    llm.eval(ids)
    return np.array(llm.scores[: len(ids)], dtype=np.float32)


def compare_logits(a, b):
    """a, b: two engines' logits (n_tokens, n_vocab), b the one compared with; metrics over
    positions."""
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


def greedy(llama_cpp, llm, tiny_llm, model, prompt, n_gen, n_vocab, tmp, extra):
    ids = llm.tokenize(prompt.encode(), add_bos=True, special=True)
    llm.reset()
    llm.eval(ids)
    gen = []
    # Where generation ends: llama.cpp's end-of-generation tokens (EOS, and EOT-like tokens such as
    # <|endoftext|>), the set its own generate() stops at and tiny_llm generate should too.
    def is_eog(tok):
        return bool(llama_cpp.llama_vocab_is_eog(llm._model.vocab, tok))

    for _ in range(min(n_gen, context_limit(llm) - len(ids))):
        tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        gen.append(tok)
        if is_eog(tok):
            break
        llm.eval([tok])
    ref = np.array(llm.scores[len(ids) - 1: len(ids) - 1 + len(gen)], dtype=np.float32)
    # tiny-llm's logits on llama.cpp's sequence: row p predicts generated token p.
    mine = tiny_logits(tiny_llm, model, ids + gen, n_vocab, tmp, extra)[len(ids) - 1: -1]
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
                "-p", prompt] + extra)
    expect = llm.detokenize([t for t in agreed if not is_eog(t)])
    out["generate_text_matches"] = text.startswith(expect)
    if not out["generate_text_matches"]:
        at = next(i for i in range(len(expect)) if i >= len(text) or text[i] != expect[i])
        out["generate_text_differs"] = {"byte": at, "tiny_llm": text[at: at + 24].decode(errors="replace"),
                                        "llama_cpp": expect[at: at + 24].decode(errors="replace")}
    return out


def vocab_prefix(tokenizer_dir, n, tmp):
    """Writes, into a folder under tmp, the first n ids of tokenizer_dir's vocab.json and the merges
    whose parts and result are all among them (a byte-level BPE vocabulary in its own right, as
    Qwen2's keeps each merge's result after its parts); returns the folder."""
    with open(os.path.join(tokenizer_dir, "vocab.json"), encoding="utf-8") as f:
        vocab = {t: i for t, i in json.load(f).items() if i < n}
    if len(vocab) < n:
        raise InputError(f"{tokenizer_dir}: --vocab-prefix {n} is more than its {len(vocab)} tokens")
    merges = []
    with open(os.path.join(tokenizer_dir, "merges.txt"), encoding="utf-8") as f:
        for line in f:
            parts = line.rstrip("\n").split(" ")
            if line.startswith("#") or (len(parts) == 2 and parts[0] in vocab and parts[1] in vocab
                                        and parts[0] + parts[1] in vocab):
                merges.append(line)
    out = os.path.join(tmp, f"vocab-{n}")
    os.makedirs(out)
    with open(os.path.join(out, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(out, "merges.txt"), "w", encoding="utf-8") as f:
        f.writelines(merges)
    return out


def synth_models(tiny_llm, preset, weights, tokenizer_dir, extra, tmp):
    paths = []
    for w in weights:
        path = os.path.join(tmp, f"{preset}-{w}.gguf")
        cmd = [tiny_llm, "synth", "-q", "--preset", preset, "--weights", w, "-o", path] + extra
        if tokenizer_dir:
            cmd += ["--tokenizer-dir", tokenizer_dir]
        run(cmd)
        paths.append(path)
    return paths


def without_extra_bufts(llama_cpp):
    """Has every model load with llama.cpp's extra buffer types off (use_extra_bufts = false): its
    weights then stay in the file's layout, with no AMX or runtime repacking. llama-cpp-python
    0.3.36's AMX matrix product crashed (SIGSEGV in ggml_backend_amx_mul_mat) on a CPU with
    AMX_INT8."""
    defaults = llama_cpp.llama_cpp.llama_model_default_params

    def params():
        p = defaults()
        p.use_extra_bufts = False
        return p

    llama_cpp.llama_cpp.llama_model_default_params = params


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


def dequantised_copy(model, path):
    """Writes MODEL with every tensor dequantised to F32 by gguf-py: the same key/values (the
    tokenizer's arrays and chat template included; general.file_type says ALL_F32), the same
    tensor names, shapes and order."""
    reader = gguf.GGUFReader(model)
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    writer = gguf.GGUFWriter(path, arch=arch, endianess=reader.endianess)
    for field in reader.fields.values():
        # GGUF.* are the reader's virtual fields; the writer adds the architecture itself.
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue
        if field.name == gguf.Keys.General.ALIGNMENT:
            writer.data_alignment = field.contents()
        if field.name == gguf.Keys.General.FILE_TYPE:
            writer.add_file_type(gguf.LlamaFileType.ALL_F32)
            continue
        sub_type = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), field.types[0], sub_type=sub_type)
    for t in reader.tensors:
        # t.shape is GGUF's order (ne0 first), numpy's the reverse; add_tensor reverses it back.
        w = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32)
        writer.add_tensor(t.name, w.reshape(tuple(int(n) for n in reversed(t.shape))))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def reference(llama_cpp, args, model, tmp, texts, prompts):
    """llama.cpp on the dequantised copy of MODEL with an f32 KV cache: its ids of TEXTS and of
    LOGIT_PROMPTS (to check that the copy tokenizes as MODEL does) and its logits of the ids in
    PROMPTS, {name: (n_tokens, n_vocab)}."""
    path = os.path.join(tmp, "dequantised-f32.gguf")
    try:
        dequantised_copy(model, path)
    except (ValueError, KeyError, NotImplementedError) as e:
        raise InputError(f"{model}: gguf-py cannot dequantise it ({type(e).__name__}: {e})")
    try:
        llm = llama_cpp.Llama(model_path=path, n_ctx=512, n_batch=512, n_threads=args.threads, logits_all=True,
                              type_k=GGML_TYPE_F32, type_v=GGML_TYPE_F32, flash_attn=False, verbose=False)
    except ValueError as e:
        raise InputError(f"{model}: llama.cpp cannot load its dequantised copy ({e})")
    ids = [llm.tokenize(t.encode(), add_bos=False, special=True) for t in texts]
    ids += [prompt_ids(llm, text) for _, text in LOGIT_PROMPTS]
    logits = {name: llama_logits(llm, p) for name, p in prompts.items()}
    llm.close()
    os.remove(path)
    return ids, logits


def check_model(llama_cpp, args, model, tmp):
    t0 = time.time()
    llm = load_llama(llama_cpp, model, args.threads)
    n_vocab = llm.n_vocab()
    res = {"model": model, "tokens": {"equal": 0, "total": 0, "differ": []}, "logits": {}, "vs_ref": {}}
    prompts = {name: prompt_ids(llm, text) for name, text in LOGIT_PROMPTS}
    if not args.no_ref:
        ref_ids, ref_logits = reference(llama_cpp, args, model, tmp, TOKENIZE_TEXTS, prompts)
        own = [llm.tokenize(t.encode(), add_bos=False, special=True) for t in TOKENIZE_TEXTS]
        res["ref_tokens_equal"] = ref_ids == own + list(prompts.values())
    for text in TOKENIZE_TEXTS:
        mine = tiny_tokenize(args.tiny_llm, model, text, tmp)
        ref = llm.tokenize(text.encode(), add_bos=False, special=True)
        res["tokens"]["total"] += 1
        if mine == ref:
            res["tokens"]["equal"] += 1
        else:
            res["tokens"]["differ"].append({"text": text, "tiny_llm": mine, "llama_cpp": ref})
    for name, ids in prompts.items():
        ref = llama_logits(llm, ids)
        mine = tiny_logits(args.tiny_llm, model, ids, n_vocab, tmp, shlex.split(args.tiny_args))
        res["logits"][name] = compare_logits(mine, ref)
        if not args.no_ref:
            res["vs_ref"][name] = {"tiny_llm": compare_logits(mine, ref_logits[name]),
                                   "llama_cpp": compare_logits(ref, ref_logits[name])}
    res["greedy"] = greedy(llama_cpp, llm, args.tiny_llm, model, CHAT, args.n_gen, n_vocab, tmp,
                           shlex.split(args.tiny_args))
    res["seconds"] = round(time.time() - t0, 1)
    return res


def failures(res):
    out = []
    if res["tokens"]["equal"] != res["tokens"]["total"]:
        out.append(f"{res['tokens']['total'] - res['tokens']['equal']} tokenizations differ")
    if not res.get("ref_tokens_equal", True):
        out.append("the dequantised copy tokenizes differently in llama.cpp")
    for name, m in res["logits"].items():
        ref = res["vs_ref"].get(name)
        if ref is None:
            if m["cosine_mean"] < COSINE_MIN:
                out.append(f"{name}: mean cosine similarity {m['cosine_mean']:.5f} < {COSINE_MIN}")
            continue
        t, l = ref["tiny_llm"], ref["llama_cpp"]
        if t["cosine_mean"] < COSINE_MIN:
            out.append(f"{name}: mean cosine similarity to the reference {t['cosine_mean']:.5f} < {COSINE_MIN}")
        if t["rel_rms_diff"] > REF_RATIO_MAX * l["rel_rms_diff"]:
            out.append(f"{name}: RMS distance to the reference {t['rel_rms_diff']:.2e} > {REF_RATIO_MAX} x "
                       f"llama.cpp's {l['rel_rms_diff']:.2e}")
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
        if "ref_tokens_equal" in res and not res["ref_tokens_equal"]:
            print("  the dequantised copy tokenizes differently in llama.cpp")
        print(f"  {'prompt':10s} {'pair':16s} {'positions':>9s} {'max|diff|':>9s} {'logit RMS':>9s} {'RMS diff':>9s} "
              f"{'cos mean':>9s} {'cos min':>9s} {'top-1':>6s} {'top-5':>6s}")
        rows = []
        for name, m in res["logits"].items():
            rows.append((name, "tiny-llm/llama", m))
            if name in res["vs_ref"]:
                rows.append((name, "tiny-llm/ref", res["vs_ref"][name]["tiny_llm"]))
                rows.append((name, "llama.cpp/ref", res["vs_ref"][name]["llama_cpp"]))
        for name, pair, m in rows:
            print(f"  {name:10s} {pair:16s} {m['positions']:9d} {m['max_abs_diff']:9.4f} {m['logit_rms']:9.4f} "
                  f"{m['rel_rms_diff']:9.2e} {m['cosine_mean']:9.6f} {m['cosine_min']:9.6f} "
                  f"{m['top1_agree']:6.1%} {m['top5_overlap']:6.1%}")
        if res["vs_ref"]:
            print("  ref: llama.cpp on a dequantised f32 copy of this file, f32 KV cache; logit RMS is the"
                  " second's")
            for name, ref in res["vs_ref"].items():
                t, l = ref["tiny_llm"]["rel_rms_diff"], ref["llama_cpp"]["rel_rms_diff"]
                print(f"  {name}: tiny-llm's RMS distance to ref is {t / l:.3f} x llama.cpp's"
                      f" (fails above {REF_RATIO_MAX})")
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
    ap.add_argument("--vocab-prefix", type=int, default=0, metavar="N",
                    help="synthesise with the first N ids of --tokenizer-dir's vocabulary and the merges among "
                         "them (for a preset with fewer tokens: llama3.2-1b with 128000)")
    ap.add_argument("--synth-args", default="", metavar="ARGS",
                    help="more arguments for tiny_llm synth, e.g. '--rope-scaling yarn --rope-scale 4'")
    ap.add_argument("--tiny-args", default="", metavar="ARGS",
                    help="more arguments for tiny_llm logits and generate, e.g. '--rope-scaling linear "
                         "--rope-scale 1.1' (a control: a check that must then fail)")
    ap.add_argument("--n-gen", type=int, default=32, help="greedy tokens to compare")
    ap.add_argument("--threads", type=int, default=2, help="llama.cpp threads")
    ap.add_argument("--no-ref", action="store_true",
                    help="skip the reference: llama.cpp on a dequantised f32 copy of each model")
    ap.add_argument("--no-extra-bufts", action="store_true",
                    help="load without llama.cpp's extra buffer types (AMX, repacked weights), whose AMX "
                         "kernels crash on some CPUs")
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
        if args.no_extra_bufts:
            without_extra_bufts(llama_cpp)
        with tempfile.TemporaryDirectory() as tmp:
            models = args.models
            if not models:
                weights = args.weights.split(",")
                tokenizer_dir = args.tokenizer_dir
                if args.vocab_prefix > 0:
                    if not tokenizer_dir:
                        raise InputError("--vocab-prefix needs a --tokenizer-dir")
                    tokenizer_dir = vocab_prefix(tokenizer_dir, args.vocab_prefix, tmp)
                models = synth_models(args.tiny_llm, args.preset, weights, tokenizer_dir,
                                      shlex.split(args.synth_args), tmp)
            results = [check_model(llama_cpp, args, m, tmp) for m in models]
    except InputError as e:
        print(f"check_llama_cpp.py: {e}", file=sys.stderr)
        return 1
    if args.json:
        out = {"llama_cpp_python": llama_cpp.__version__, "cosine_min": COSINE_MIN, "ref_ratio_max": REF_RATIO_MAX,
               "synth_args": args.synth_args, "tiny_args": args.tiny_args, "no_extra_bufts": args.no_extra_bufts,
               "results": results}
        print(json.dumps(out, ensure_ascii=False, indent=1))
    else:
        if args.no_ref:
            rule = f"mean cosine similarity to llama.cpp >= {COSINE_MIN}"
        else:
            rule = (f"mean cosine similarity to ref >= {COSINE_MIN}, RMS diff to ref <= {REF_RATIO_MAX} x "
                    "llama.cpp's")
        print(f"llama-cpp-python {llama_cpp.__version__}; pass: {rule}")
        if args.tiny_args:
            print(f"tiny_llm logits and generate ran with: {args.tiny_args}")
        print_table(results)
    return 2 if any(failures(r) for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
