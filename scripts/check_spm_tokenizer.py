#!/usr/bin/env python3
"""Checks the engine's SentencePiece tokenizer against sentencepiece on a real tokenizer.model.

Usage (from the project root, after building; needs the PyPI packages `sentencepiece`, `protobuf`
and `gguf`, e.g. python3 -m venv /tmp/spm && /tmp/spm/bin/pip install sentencepiece protobuf gguf):
    /tmp/spm/bin/python scripts/check_spm_tokenizer.py TOKENIZER_MODEL [--tiny-llm ./build/tiny_llm]

The tokenizer.model is written as a vocabulary-only GGUF file the way llama.cpp's converter writes
one (tokens, scores, token types, special ids, add_space_prefix); every text is then encoded by
sentencepiece and by `tiny_llm tokenize --no-special`, and the ids compared. The texts: the cases of
tests/tokenizer/data/spm-bpe-vectors.json, the lines of the project's documentation, and random
strings drawn from the vocabulary's own characters and from a few scripts. Invalid UTF-8 is left
out (sentencepiece replaces it by U+FFFD; the engine keeps its bytes).

Exit status 0 when every text gives the same ids, 1 otherwise (the first differences are printed).
"""

import argparse
import glob
import json
import os
import random
import subprocess
import sys
import tempfile

import gguf
import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2 as model_pb2


def write_vocab_gguf(proto, path):
    w = gguf.GGUFWriter(path, "llama")
    w.add_tokenizer_model("llama")
    w.add_token_list([p.piece.encode("utf-8") for p in proto.pieces])
    w.add_token_scores([p.score for p in proto.pieces])
    w.add_token_types([p.type for p in proto.pieces])
    spec = proto.trainer_spec
    for key, value in (("unknown", spec.unk_id), ("bos", spec.bos_id), ("eos", spec.eos_id)):
        if value >= 0:
            w.add_uint32("tokenizer.ggml.%s_token_id" % key, value)
    w.add_add_space_prefix(bool(proto.normalizer_spec.add_dummy_prefix))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def texts_to_check(root, proto, rng):
    texts = []
    with open(os.path.join(root, "tests/tokenizer/data/spm-bpe-vectors.json"), encoding="utf-8") as f:
        texts += [c["text"] for c in json.load(f)["cases"]]
    for path in [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs/**/*.md"),
                                                                   recursive=True)):
        with open(path, encoding="utf-8") as f:
            texts += [ln.rstrip("\n") for ln in f if ln.strip()]
    chars = sorted({c for p in proto.pieces if p.type == 1 for c in p.piece.replace("\u2581", " ")})
    scripts = ["abcdefghijklmnopqrstuvwxyz ", "你好世界大语言模型推理 ", "Привет мир ", " \t\n0123456789"]
    for _ in range(500):
        pool = rng.choice([chars, chars] + scripts)
        texts.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 60))))
    return [t for t in texts if t]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", help="a SentencePiece tokenizer.model (BPE)")
    ap.add_argument("--tiny-llm", default="./build/tiny_llm")
    args = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

    proto = model_pb2.ModelProto()
    with open(args.model, "rb") as f:
        proto.ParseFromString(f.read())
    if proto.trainer_spec.model_type != model_pb2.TrainerSpec.BPE:
        sys.exit("%s: not a BPE model" % args.model)
    sp = spm.SentencePieceProcessor(model_file=args.model)
    texts = texts_to_check(root, proto, random.Random(7))

    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        vocab = os.path.join(tmp, "vocab.gguf")
        write_vocab_gguf(proto, vocab)
        text_file = os.path.join(tmp, "text")
        for text in texts:
            with open(text_file, "w", encoding="utf-8") as f:
                f.write(text)
            run = subprocess.run([args.tiny_llm, "tokenize", "-m", vocab, "--no-special", "--file", text_file],
                                 capture_output=True, text=True)
            if run.returncode != 0:
                sys.exit("tiny_llm tokenize failed: " + run.stderr.strip())
            got = [int(x) for x in run.stdout.split()]
            want = sp.encode(text)
            if got != want:
                failures.append((text, want, got))
    print("%s: %d pieces, %d texts, %d differ" % (os.path.basename(args.model), len(proto.pieces), len(texts),
                                                 len(failures)))
    for text, want, got in failures[:10]:
        print("  %r\n    sentencepiece %s\n    tiny_llm      %s" % (text, want, got))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
