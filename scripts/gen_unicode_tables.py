#!/usr/bin/env python3
"""Generates model/unicode_tables.cpp from the Unicode Character Database.

Usage (from the project root):
    python3 scripts/gen_unicode_tables.py [UCD_DIR] > model/unicode_tables.cpp

UCD_DIR defaults to /usr/share/unicode (Debian package `unicode-data`). Files read:
  UnicodeData.txt               general category, canonical combining class, canonical decompositions
  PropList.txt                  White_Space (what `\\s` means in the reference pre-tokenizer regexes)
  DerivedNormalizationProps.txt Full_Composition_Exclusion, NFC_Quick_Check
  CaseFolding.txt               simple case folding (statuses C and S) onto ASCII letters
  ReadMe.txt                    the version, for the header comment

Tables written (all sorted by code point, ranges disjoint), declared in model/unicode.h:
  kFlagRanges    code point ranges sharing one set of Flag bits (category class, the letter cases
                 Lu/Lt and Ll, White_Space, NFC check)
  kCccRanges     ranges with a non-zero canonical combining class
  kDecompositions  canonical decomposition of one code point into one or two (Hangul excluded:
                   it is algorithmic)
  kCompositions  primary composites: (first, second) -> composite, sorted by (first, second)
  kAsciiFolds    non-ASCII code points whose simple case folding is an ASCII letter
"""

import os
import re
import sys

# Flag bits; keep in step with enum Flag in model/unicode.h.
LETTER, NUMBER, MARK, PUNCT, SYMBOL, SEPARATOR, OTHER, WHITESPACE, NFC_CHECK, UPPER, LOWER = (
    1 << i for i in range(11))
CASE_OF = {"Lu": UPPER, "Lt": UPPER, "Ll": LOWER}
CLASS_OF = {"L": LETTER, "N": NUMBER, "M": MARK, "P": PUNCT, "S": SYMBOL, "Z": SEPARATOR, "C": OTHER}
MAX_CP = 0x10FFFF


def parse_ranges(path, wanted):
    """Yields (first, last, field1, field2) for data lines `XXXX[..YYYY] ; field1 [; field2]` whose
    field1 (the property, or CaseFolding's status) is in wanted; field2 is None when absent."""
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            fields = [x.strip() for x in line.split(";")]
            if fields[1] not in wanted:
                continue
            span = fields[0].split("..")
            first = int(span[0], 16)
            last = int(span[-1], 16)
            yield first, last, fields[1], (fields[2] if len(fields) > 2 else None)


def read_unicode_data(path):
    """Returns {cp: (gc, ccc, decomposition_field)}, with First/Last ranges expanded."""
    out = {}
    pending_first = None
    with open(path, encoding="utf-8") as f:
        for line in f:
            fields = line.rstrip("\n").split(";")
            cp = int(fields[0], 16)
            name, gc, ccc, decomp = fields[1], fields[2], int(fields[3]), fields[5]
            if name.endswith(", First>"):
                pending_first = cp
                continue
            if name.endswith(", Last>"):
                for c in range(pending_first, cp + 1):
                    out[c] = (gc, ccc, "")
                pending_first = None
                continue
            out[cp] = (gc, ccc, decomp)
    return out


def ucd_version(ucd):
    try:
        with open(os.path.join(ucd, "ReadMe.txt"), encoding="utf-8") as f:
            m = re.search(r"Version (\d+\.\d+\.\d+)", f.read())
            return m.group(1) if m else "(version unknown)"
    except OSError:
        return "(version unknown)"


def runs(values):
    """Collapses a dense list (index = code point) into (first, last, value) runs with value != 0."""
    out = []
    start = 0
    for cp in range(1, len(values) + 1):
        if cp == len(values) or values[cp] != values[start]:
            if values[start]:
                out.append((start, cp - 1, values[start]))
            start = cp
    return out


def emit(name, ctype, rows, fmt, width=100):
    """The array definition, as many rows to a line as fit in `width` columns."""
    lines = [f"const {ctype} {name}[] = {{"]
    line = ""
    for r in rows:
        item = fmt(r) + ","
        if line and 4 + len(line) + 1 + len(item) > width:
            lines.append("    " + line)
            line = ""
        line = item if not line else line + " " + item
    if line:
        lines.append("    " + line)
    lines.append("};")
    lines.append(f"const size_t {name}Count = sizeof({name}) / sizeof({name}[0]);")
    return "\n".join(lines)


def main():
    ucd = sys.argv[1] if len(sys.argv) > 1 else "/usr/share/unicode"
    data = read_unicode_data(os.path.join(ucd, "UnicodeData.txt"))

    flags = [0] * (MAX_CP + 1)
    ccc = [0] * (MAX_CP + 1)
    for cp, (gc, cc, _) in data.items():
        flags[cp] = CLASS_OF[gc[0]] | CASE_OF.get(gc, 0)
        ccc[cp] = cc
        if cc:
            flags[cp] |= NFC_CHECK
    for first, last, _, _ in parse_ranges(os.path.join(ucd, "PropList.txt"), {"White_Space"}):
        for cp in range(first, last + 1):
            flags[cp] |= WHITESPACE

    excluded = set()
    norm = os.path.join(ucd, "DerivedNormalizationProps.txt")
    for first, last, prop, value in parse_ranges(norm, {"Full_Composition_Exclusion", "NFC_QC"}):
        for cp in range(first, last + 1):
            if prop == "Full_Composition_Exclusion":
                excluded.add(cp)
            elif value in ("N", "M"):
                flags[cp] |= NFC_CHECK

    decomps = []
    comps = []
    for cp in sorted(data):
        d = data[cp][2]
        if not d or d.startswith("<"):
            continue  # none, or a compatibility mapping (NFKC only)
        parts = [int(x, 16) for x in d.split()]
        assert 1 <= len(parts) <= 2, f"U+{cp:04X}: canonical mapping of {len(parts)} code points"
        decomps.append((cp, parts[0], parts[1] if len(parts) == 2 else 0))
        if len(parts) == 2 and cp not in excluded:
            comps.append((parts[0], parts[1], cp))
    comps.sort()

    folds = []
    for first, _, _, target in parse_ranges(os.path.join(ucd, "CaseFolding.txt"), {"C", "S"}):
        t = int(target, 16)
        if first >= 0x80 and t < 0x80:
            folds.append((first, t))
    folds.sort()

    flag_rows = runs(flags)
    ccc_rows = runs(ccc)
    version = ucd_version(ucd)

    out = []
    out.append(f"""\
// Unicode {version} property tables for the tokenizer: category classes, letter cases, White_Space,
// canonical combining classes, canonical decomposition/composition (NFC) and ASCII case folds.
//
// GENERATED by scripts/gen_unicode_tables.py from the Unicode Character Database (Debian package
// unicode-data, /usr/share/unicode); do not edit by hand. Regenerate from the project root with:
//   python3 scripts/gen_unicode_tables.py /usr/share/unicode > model/unicode_tables.cpp
#include "model/unicode.h"

namespace tllm::unicode::detail {{
""")
    out.append(emit("kFlagRanges", "FlagRange", flag_rows,
                    lambda r: "{0x%X, 0x%X, 0x%X}" % r))
    out.append("")
    out.append(emit("kCccRanges", "CccRange", ccc_rows, lambda r: "{0x%X, 0x%X, %d}" % r))
    out.append("")
    out.append(emit("kDecompositions", "Decomposition", decomps,
                    lambda r: "{0x%X, 0x%X, 0x%X}" % r))
    out.append("")
    out.append(emit("kCompositions", "Composition", comps, lambda r: "{0x%X, 0x%X, 0x%X}" % r))
    out.append("")
    out.append(emit("kAsciiFolds", "AsciiFold", folds, lambda r: "{0x%X, 0x%X}" % r))
    out.append("")
    out.append("}  // namespace tllm::unicode::detail")
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
