#!/usr/bin/env python3
"""Checks the engine's Tekken tokenizer (tokenizer.ggml.pre "tekken") against mistral-common.

Usage (from the project root, after building; needs the PyPI packages `mistral-common` and `gguf`,
e.g. python3 -m venv /tmp/tekken && /tmp/tekken/bin/pip install mistral-common gguf):
    /tmp/tekken/bin/python scripts/check_tekken_tokenizer.py [TEKKEN_JSON] [--tiny-llm ./build/tiny_llm]

TEKKEN_JSON defaults to each tekken_*.json that mistral-common ships in its package data. The file
is written as a vocabulary-only GGUF file the way llama.cpp's converter writes a Mistral-format
model (gguf-py's MistralVocab: the special tokens first as control tokens, then the byte-level
form of every tiktoken rank, the merges recovered from the ranks, pre "tekken"); every text is then
encoded by mistral-common (Tekkenizer.encode, no BOS/EOS) and by `tiny_llm tokenize`, and the ids
compared. The texts: the project's documentation and source lines, llama.cpp's tokenizer vectors
(../shared/data/tokenizer-vectors beside the project), and random strings of letters of both cases,
marks, digits, punctuation and whitespace from several scripts, and of any code point assigned in Unicode 14.

To keep to one run of tiny_llm, the texts are joined with the control token </s> between them and
encoded with special tokens parsed: each text then goes through the pre-tokenizer and BPE on its
own, as with --no-special. Texts holding the text of a special token run one by one with
--no-special.

Exit status 0 when every text gives the same ids, 1 otherwise (the first differences are printed).
"""

import argparse
import glob
import os
import random
import subprocess
import sys
import tempfile
import unicodedata
from pathlib import Path

import gguf
from gguf.vocab import MistralVocab
import mistral_common
from mistral_common.tokens.tokenizers.tekken import Tekkenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VECTORS_DIR = os.path.join(ROOT, "..", "shared", "data", "tokenizer-vectors")


def write_vocab_gguf(tekken_json, path):
    """The tokenizer part of llama.cpp's convert_hf_to_gguf.py for a Mistral-format Tekken model."""
    with tempfile.TemporaryDirectory() as d:
        os.symlink(os.path.abspath(tekken_json), os.path.join(d, "tekken.json"))
        vocab = MistralVocab(Path(d))
        tokens, types = [], []
        for text, _, toktype in vocab.all_tokens():
            tokens.append(text)
            types.append(toktype)
        merges = vocab.extract_vocab_merges_from_model()
        bos, eos, unk, pad = vocab.bos_id, vocab.eos_id, vocab.unk_id, vocab.pad_id
    w = gguf.GGUFWriter(path, "llama")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("tekken")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(bos)
    w.add_eos_token_id(eos)
    w.add_unk_token_id(unk)
    w.add_pad_token_id(pad)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return len(tokens), len(merges)


def read_lines(paths):
    out = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            out += [ln.rstrip("\n") for ln in f if ln.strip()]
    return out


def random_texts(rng, n):
    """Strings built to exercise the split: case changes, marks, digits, punctuation, newlines."""
    def chars(*ranges):
        return [chr(c) for a, b in ranges for c in range(a, b + 1)
                if unicodedata.category(chr(c)) != "Cn"]
    latin = chars((0x41, 0x5A), (0x61, 0x7A), (0xC0, 0x24F))
    greek_cyrillic = chars((0x370, 0x3FF), (0x400, 0x52F))
    other_cased = chars((0x10A0, 0x10FF), (0x1E00, 0x1FFF), (0x2C00, 0x2C7F), (0xA640, 0xA69F))
    modifier_title = chars((0x2B0, 0x2FF), (0x1C4, 0x1CC), (0x1F1, 0x1F3), (0x1D2C, 0x1D6A))
    marks = chars((0x300, 0x36F), (0x1AB0, 0x1ACE), (0x20D0, 0x20F0), (0x93A, 0x94F))
    cjk = chars((0x3040, 0x30FF), (0x4E00, 0x4E80), (0xAC00, 0xAC40))
    indic_arabic = chars((0x900, 0x97F), (0x600, 0x6FF), (0xE00, 0xE7F))
    digits = chars((0x30, 0x39), (0x660, 0x669), (0xB2, 0xB3), (0xBC, 0xBE), (0x2160, 0x2188))
    punct = list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~/////") + chars((0x2010, 0x2027), (0x3000, 0x3003))
    space = list("     \t\n\n\r\r\n") + ["\r\n", "\u00a0", "\u3000", "\u2028", "\u2009", "\x0b", "\x0c"]
    emoji = chars((0x1F600, 0x1F64F), (0x1F300, 0x1F320))
    pools = [latin, greek_cyrillic, other_cased, modifier_title, marks, cjk, indic_arabic, digits,
             punct, space, emoji]
    weights = [8, 4, 2, 2, 3, 2, 2, 3, 4, 5, 1]
    assigned = [chr(c) for c in range(0x20, 0x30000)
                if unicodedata.category(chr(c)) not in ("Cn", "Cs")]
    texts = []
    for k in range(n):
        length = rng.randint(1, 40)
        if k % 5 == 4:
            texts.append("".join(rng.choice(assigned) for _ in range(length)))
            continue
        mix = rng.sample(range(len(pools)), rng.randint(1, 4))
        w = [weights[m] for m in mix]
        texts.append("".join(rng.choice(pools[rng.choices(mix, w)[0]]) for _ in range(length)))
    return texts


def texts_to_check(root, rng):
    texts = []
    docs = [os.path.join(root, "README.md")] + sorted(
        glob.glob(os.path.join(root, "docs/**/*.md"), recursive=True))
    texts += read_lines(docs)
    sources = sorted(glob.glob(os.path.join(root, "model/*.cpp")) + glob.glob(os.path.join(root, "model/*.h")))
    texts += [t for t in read_lines(sources) if not t.startswith("    {0x")]  # not the Unicode tables
    for inp in sorted(glob.glob(os.path.join(VECTORS_DIR, "*.inp"))):
        with open(inp, encoding="utf-8") as f:
            texts += f.read().split("\n__ggml_vocab_test__\n")
    texts += random_texts(rng, 4000)
    return [t for t in texts if t]


def run_tiny_llm(tiny_llm, vocab, text, no_special):
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", newline="", delete=False) as f:
        f.write(text)
        name = f.name
    try:
        cmd = [tiny_llm, "tokenize", "-m", vocab, "--file", name] + (["--no-special"] if no_special else [])
        run = subprocess.run(cmd, capture_output=True, text=True)
    finally:
        os.unlink(name)
    if run.returncode != 0:
        sys.exit("tiny_llm tokenize failed: " + run.stderr.strip())
    return [int(x) for x in run.stdout.split()]


def check(tekken_json, texts, tiny_llm):
    tok = Tekkenizer.from_file(tekken_json)
    specials = [tok.id_to_piece(i) for i in range(tok.num_special_tokens)]
    eos = tok.eos_id
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        vocab = os.path.join(tmp, "vocab.gguf")
        n_tokens, n_merges = write_vocab_gguf(tekken_json, vocab)
        batch = [t for t in texts if not any(s in t for s in specials)]
        alone = [t for t in texts if any(s in t for s in specials)]
        got_all = run_tiny_llm(tiny_llm, vocab, specials[eos].join(batch), no_special=False)
        got = [[]]
        for i in got_all:
            if i == eos:
                got.append([])
            else:
                got[-1].append(i)
        if len(got) != len(batch):
            sys.exit("tiny_llm gave %d texts' ids for %d texts" % (len(got), len(batch)))
        for text, ids in zip(batch, got):
            want = tok.encode(text, bos=False, eos=False)
            if ids != want:
                failures.append((text, want, ids))
        for text in alone:
            want = tok.encode(text, bos=False, eos=False)
            ids = run_tiny_llm(tiny_llm, vocab, text, no_special=True)
            if ids != want:
                failures.append((text, want, ids))
    n_chars = sum(len(t) for t in texts)
    n_ids = sum(len(tok.encode(t, bos=False, eos=False)) for t in texts)
    print("%s: %d tokens, %d merges; %d texts (%d alone), %d characters, %d ids; %d differ" % (
        os.path.basename(tekken_json), n_tokens, n_merges, len(texts), len(alone), n_chars, n_ids,
        len(failures)))
    for text, want, ids in failures[:10]:
        print("  %r\n    mistral-common %s\n    tiny_llm       %s" % (text, want, ids))
    return not failures


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("tekken_json", nargs="*", help="a mistral-common tekken.json")
    ap.add_argument("--tiny-llm", default="./build/tiny_llm")
    args = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    files = args.tekken_json or sorted(
        glob.glob(os.path.join(os.path.dirname(mistral_common.__file__), "data", "tekken_*.json")))
    if not files:
        sys.exit("no tekken.json given and none found in mistral-common's package data")
    texts = texts_to_check(root, random.Random(7))
    ok = True
    for path in files:
        ok = check(path, texts, args.tiny_llm) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
