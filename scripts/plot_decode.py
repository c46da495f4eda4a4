#!/usr/bin/env python3
"""Draws decode tok/s against context length, one line with CUDA graphs and one without, from the
JSON lines scripts/context-sweep.sh writes (tiny_llm_bench --json). Writes an SVG by hand, so it
needs nothing beyond the standard library.

Usage: plot_decode.py SWEEP.jsonl OUT.svg
"""
import json
import math
import sys


def load(path):
    series = {}
    meta = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            r = json.loads(line)
            ctx = r["prompt_tokens"]
            key = "CUDA graphs" if r.get("graphs") else "no graphs"
            series.setdefault(key, []).append((ctx, r["decode_tok_s"]["median"]))
            meta = {"device": r["device"]["name"], "commit": r["commit"][:12], "backend": r["backend"]}
    for v in series.values():
        v.sort()
    return series, meta


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    series, meta = load(sys.argv[1])
    if not series:
        sys.exit("plot_decode.py: no results in " + sys.argv[1])
    W, H, L, R, T, B = 760, 440, 80, 170, 50, 60
    xs = [c for s in series.values() for c, _ in s]
    ymax = max(v for s in series.values() for _, v in s) * 1.1
    x0, x1 = math.log2(min(xs)), math.log2(max(xs))
    if x1 == x0:
        x1 = x0 + 1

    def px(c):
        return L + (math.log2(c) - x0) / (x1 - x0) * (W - L - R)

    def py(v):
        return H - B - v / ymax * (H - T - B)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{W / 2}" y="22" text-anchor="middle" font-size="15">Decode speed vs context — '
           f'{meta["device"]} ({meta["backend"]}, commit {meta["commit"]})</text>']
    for i in range(6):
        v = ymax * i / 5
        y = py(v)
        out.append(f'<line x1="{L}" y1="{y:.1f}" x2="{W - R}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{L - 8}" y="{y + 4:.1f}" text-anchor="end">{v:.0f}</text>')
    for c in sorted(set(xs)):
        x = px(c)
        out.append(f'<line x1="{x:.1f}" y1="{T}" x2="{x:.1f}" y2="{H - B}" stroke="#eee"/>')
        out.append(f'<text x="{x:.1f}" y="{H - B + 18}" text-anchor="middle">{c}</text>')
    out.append(f'<text x="{(L + W - R) / 2}" y="{H - 15}" text-anchor="middle">context length (tokens before decoding)</text>')
    out.append(f'<text x="18" y="{H / 2}" text-anchor="middle" transform="rotate(-90 18 {H / 2})">decode tok/s (median)</text>')
    colours = {"CUDA graphs": "#1f77b4", "no graphs": "#d62728"}
    for n, (name, pts) in enumerate(sorted(series.items())):
        col = colours.get(name, "#2ca02c")
        path = " ".join(f"{'M' if i == 0 else 'L'}{px(c):.1f},{py(v):.1f}" for i, (c, v) in enumerate(pts))
        out.append(f'<path d="{path}" fill="none" stroke="{col}" stroke-width="2"/>')
        for c, v in pts:
            out.append(f'<circle cx="{px(c):.1f}" cy="{py(v):.1f}" r="3" fill="{col}"/>')
        ly = T + 20 + 20 * n
        out.append(f'<line x1="{W - R + 15}" y1="{ly}" x2="{W - R + 40}" y2="{ly}" stroke="{col}" stroke-width="2"/>')
        out.append(f'<text x="{W - R + 46}" y="{ly + 4}">{name}</text>')
    out.append("</svg>")
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
