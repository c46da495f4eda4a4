#!/usr/bin/env python3
"""Generates tests/tokenizer/data/spm-bpe-vectors.json: a small SentencePiece BPE vocabulary and the
ids sentencepiece itself gives for a set of texts, the reference the SentencePiece tokenizer
(model/tokenizer_spm.cpp) is tested against.

Usage (from the project root; needs the PyPI package `sentencepiece`, e.g. in a virtual
environment: python3 -m venv /tmp/spm && /tmp/spm/bin/pip install sentencepiece):
    /tmp/spm/bin/python scripts/gen_spm_vectors.py > tests/tokenizer/data/spm-bpe-vectors.json

The vocabulary is trained here, on the project's own documentation plus the multilingual lines
below, with the settings of the Llama 2 and Mistral tokenizers: BPE, identity normalisation, a
dummy prefix, spaces kept as they are, digits split, byte fallback, <unk> <s> </s> at ids 0-2.
Its 1,200 pieces are few enough that many characters (most of the CJK ones) fall back to bytes.

The texts are edge cases of spacing, lines of the corpus, and random strings drawn from the
corpus's characters; they exclude invalid UTF-8 (which sentencepiece replaces by U+FFFD where the
engine keeps the bytes) and special tokens (which sentencepiece does not parse).
"""

import glob
import json
import os
import random
import sys
import tempfile

import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2 as model_pb2

EXTRA_LINES = [
    "你好，世界！今天天气很好。我们一起去公园散步吧。",
    "大语言模型的推理引擎需要又快又准确。",
    "Привет, мир! Как дела? Это тест токенизатора.",
    "Γειά σου Κόσμε, καλημέρα σας.",
    "こんにちは世界、元気ですか。",
    "안녕하세요 세계",
    "مرحبا بالعالم",
    "The quick brown fox jumps over the lazy dog. 1234567890",
    "def main():\n    print('hello')\n    return 0\n",
    "Tabs\tand\tnewlines\nand  double  spaces   and    more.",
    "emoji: 🦙 🚀 ✨ 👍🏽 — dashes – and “quotes” … ellipses",
]

SPACING_CASES = [
    "", " ", "  ", "   ", "\t", "\n", "\n\n", "\t\n", " \n ",
    "Hello world", " Hello world", "Hello World", " Hello World!", "Hello, world!",
    "  leading spaces", "trailing spaces  ", "a  b   c    d", "x\ty\tz",
    "line one\nline two\n\nline four", "1234567890", "3.14159 + 2.71828 = 5.85987",
    "你好", "你好，世界", " 你好 ", "🦙.cpp", " this is 🦙.cpp", "Führer", "нещо на Български",
    "<s> is text here", "[INST] hi [/INST]", "▁ already escaped ▁▁", "\u00a0non-breaking\u00a0space",
    "e\u0301 combining", "\r\nwindows\r\n",
]


def corpus_lines(root):
    lines = []
    paths = [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs", "*.md")))
    for path in paths:
        with open(path, encoding="utf-8") as f:
            lines += [ln.rstrip("\n") for ln in f if ln.strip()]
    return lines + EXTRA_LINES


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    lines = corpus_lines(root)
    with tempfile.TemporaryDirectory() as tmp:
        corpus = os.path.join(tmp, "corpus.txt")
        with open(corpus, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        prefix = os.path.join(tmp, "spm")
        spm.SentencePieceTrainer.train(
            input=corpus, model_prefix=prefix, model_type="bpe", vocab_size=1200,
            normalization_rule_name="identity", add_dummy_prefix=True,
            remove_extra_whitespaces=False, split_digits=True, byte_fallback=True,
            allow_whitespace_only_pieces=True, character_coverage=0.995,
            unk_id=0, bos_id=1, eos_id=2, pad_id=-1, num_threads=1,
            minloglevel=2)
        sp = spm.SentencePieceProcessor(model_file=prefix + ".model")
        proto = model_pb2.ModelProto()
        with open(prefix + ".model", "rb") as f:
            proto.ParseFromString(f.read())

    rng = random.Random(20261206)
    chars = sorted(set("".join(lines)))
    texts = list(SPACING_CASES)
    texts += rng.sample(lines, 120)
    for _ in range(200):
        n = rng.randint(1, 40)
        pool = rng.choice([chars, "ab ", "the ", " \t\na", chars])
        texts.append("".join(rng.choice(pool) for _ in range(n)))
    cases = [{"text": t, "ids": sp.encode(t)} for t in texts]

    out = {
        "source": "scripts/gen_spm_vectors.py (sentencepiece %s)" % spm.__version__,
        "add_space_prefix": bool(proto.normalizer_spec.add_dummy_prefix),
        # (piece, score, type) with sentencepiece's type numbers, which GGUF's token_type keeps.
        "pieces": [[p.piece, p.score, p.type] for p in proto.pieces],
        "cases": cases,
    }
    # One piece or case a line, so that a change reads as a diff.
    dumps = lambda v: json.dumps(v, ensure_ascii=False)
    w = sys.stdout.write
    w("{\n")
    for key in ("source", "add_space_prefix"):
        w("%s: %s,\n" % (dumps(key), dumps(out[key])))
    for key in ("pieces", "cases"):
        w("%s: [\n" % dumps(key))
        w(",\n".join(dumps(v) for v in out[key]))
        w("\n]%s\n" % ("," if key == "pieces" else ""))
    w("}\n")


if __name__ == "__main__":
    main()
