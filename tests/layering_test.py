#!/usr/bin/env python3
"""layering_test.py - libnnt's files call each other in one direction only: from the symbols each
object file of libnnt defines and uses (nm), the graph "file A calls a function defined in file B"
must have no cycle. A cycle is printed with the symbols that close it.

usage: layering_test.py OBJECT_DIR SOURCE_DIR   (the build's CMakeFiles/nnt.dir and the checkout);
object files whose source no longer exists (left in a build folder by a rename) are skipped."""
import collections
import os
import subprocess
import sys


def symbols(obj_dir, src_dir):
    defined, used = {}, collections.defaultdict(set)
    for root, _, names in os.walk(obj_dir):
        for n in names:
            if not n.endswith(".o"):
                continue
            path = os.path.join(root, n)
            src = os.path.relpath(path, obj_dir)[: -len(".o")]
            if not os.path.exists(os.path.join(src_dir, src)):
                continue
            out = subprocess.run(["nm", path], capture_output=True, text=True, check=True).stdout
            for line in out.splitlines():
                p = line.split()
                if len(p) == 3 and p[1] in "TDBR":
                    defined[p[2]] = src
                elif len(p) == 2 and p[0] == "U":
                    used[src].add(p[1])
    return defined, used


def main():
    defined, used = symbols(sys.argv[1], sys.argv[2])
    if len(used) < 10:
        print(f"layering: only {len(used)} object files under {sys.argv[1]}; is it libnnt's object folder?")
        return 1
    calls = collections.defaultdict(dict)  # file -> {callee file: a symbol}
    for f, syms in used.items():
        for s in sorted(syms):
            g = defined.get(s)
            if g and g != f:
                calls[f].setdefault(g, s)
    # Tarjan's strongly connected components
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in calls.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(set(used) | set(defined.values())):
        if v not in index:
            visit(v)
    for comp in found:
        print("layering: these files call each other in a circle:")
        for f in comp:
            for g, s in sorted(calls[f].items()):
                if g in comp:
                    print(f"  {f} -> {g} ({s})")
    print(f"layering: {len(used)} files, {sum(len(c) for c in calls.values())} file-to-file calls, {len(found)} circles")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
