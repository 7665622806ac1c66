#!/usr/bin/env python3
"""core_names_no_family.py - libnnt's core knows no model family: outside comments, no file of
core/ names one - neither a family plugin's name (the folders of families/, e.g. kimi_linear) nor a
word of one ("kimi"), nor an architecture a family plugin serves (its ARCHS table, e.g.
KimiLinearForCausalLM). Everything a family needs from the core reaches it through the routine
table; everything the core needs from a family comes from its descriptor. Comments may cite a
release as the source of a format.

usage: core_names_no_family.py SOURCE_DIR"""
import os
import re
import sys


def strip_comments(text):
    """C source without its comments (string literals kept: a name inside one counts)."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
            out.append(" ")
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text[i] in "\"'":
            q, j = text[i], i + 1
            while j < n and text[j] != q:
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def family_words(src):
    words = set()
    fam_root = os.path.join(src, "families")
    for name in sorted(os.listdir(fam_root)):
        folder = os.path.join(fam_root, name)
        if name == "common" or not os.path.isdir(folder):
            continue
        words.add(name.lower())
        words.add(name.split("_")[0].lower())
        for f in os.listdir(folder):
            if f.endswith(".c"):
                text = open(os.path.join(folder, f), encoding="utf-8").read()
                for table in re.findall(r"ARCHS\[\]\s*=\s*\{([^}]*)\}", text):
                    words.update(a.lower() for a in re.findall(r'"([^"]+)"', table))
    # the out-of-tree example family's architectures too
    example = os.path.join(src, "examples", "third_party_family")
    for f in sorted(os.listdir(example)) if os.path.isdir(example) else []:
        if f.endswith(".c"):
            text = open(os.path.join(example, f), encoding="utf-8").read()
            for table in re.findall(r"ARCHS\[\]\s*=\s*\{([^}]*)\}", text):
                words.update(a.lower() for a in re.findall(r'"([^"]+)"', table))
    return words


def main():
    src = sys.argv[1]
    words = family_words(src)
    if len(words) < 8:
        print(f"core_names_no_family: only {sorted(words)} found under {src}/families; is it the checkout?")
        return 1
    pattern = re.compile("|".join(re.escape(w) for w in sorted(words, key=len, reverse=True)), re.IGNORECASE)
    found, files = [], 0
    for root, _, names in os.walk(os.path.join(src, "core")):
        for n in sorted(names):
            if not n.endswith((".c", ".h")):
                continue
            files += 1
            path = os.path.join(root, n)
            code = strip_comments(open(path, encoding="utf-8").read())
            for lineno, line in enumerate(code.split("\n"), 1):
                for m in pattern.finditer(line):
                    found.append(f"{os.path.relpath(path, src)}:{lineno}: '{m.group(0)}' in: {line.strip()[:100]}")
    for f in found:
        print("core_names_no_family:", f)
    print(f"core_names_no_family: {files} files of core/ read, {len(words)} family words looked for, {len(found)} found")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
