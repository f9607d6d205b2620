#!/usr/bin/env python3
"""check-calls.py LIBMAIZE_A: the library's source files call each other
in floors, with no circle.

Each object in the static library is one source file.  File A calls file B
when A's undefined symbols include one that B defines (functions and data:
a table of another file's objects counts too).  The check fails on any set
of files that reach each other that way (a strongly connected component),
naming the files and the symbols that tie them; otherwise it prints the
floors, from the ground up."""
import collections
import os
import shutil
import subprocess
import sys
import tempfile


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    if not shutil.which("nm") or not shutil.which("ar"):
        print("nm or ar not found: skipped")
        return 77
    lib = os.path.abspath(sys.argv[1])
    defs, undef = {}, collections.defaultdict(set)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["ar", "x", lib], cwd=tmp, check=True)
        for o in sorted(os.listdir(tmp)):
            f = o[:-2] if o.endswith(".o") else o
            out = subprocess.run(["nm", os.path.join(tmp, o)], capture_output=True, text=True, check=True).stdout
            undef[f]  # every file is a node, even one that calls nothing
            for line in out.splitlines():
                p = line.split()
                if len(p) == 3 and p[1] in "TDBRG":
                    defs[p[2]] = f
                elif len(p) == 2 and p[0] == "U":
                    undef[f].add(p[1])
    calls = collections.defaultdict(lambda: collections.defaultdict(set))
    for f, names in undef.items():
        for n in names:
            if n in defs and defs[n] != f:
                calls[f][defs[n]].add(n)
    # Tarjan's strongly connected components, iteratively.
    index, low, on, stack, sccs, counter = {}, {}, set(), [], [], [0]
    for root in sorted(undef):
        if root in index:
            continue
        work = [(root, iter(sorted(calls[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(calls[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                scc = []
                while True:
                    x = stack.pop()
                    on.discard(x)
                    scc.append(x)
                    if x == v:
                        break
                sccs.append(sorted(scc))
    bad = [s for s in sccs if len(s) > 1]
    for s in bad:
        print(f"call circle of {len(s)} files: {', '.join(s)}")
        for a in s:
            for b in s:
                if calls[a].get(b):
                    print(f"  {a} -> {b}: {' '.join(sorted(calls[a][b]))}")
    if bad:
        return 1
    floor = {}
    for s in sccs:  # Tarjan yields callees before their callers
        v = s[0]
        floor[v] = 1 + max([floor[w] for w in calls[v]] + [0])
    by = collections.defaultdict(list)
    for v, k in floor.items():
        by[k].append(v)
    for k in sorted(by):
        print(f"floor {k}: {' '.join(sorted(by[k]))}")
    print(f"ok: {len(floor)} files, no call circle")
    return 0


if __name__ == "__main__":
    sys.exit(main())
