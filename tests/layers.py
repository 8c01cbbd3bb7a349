#!/usr/bin/python3
"""layers.py - cycles the layer rule forbids, found in the sources (make check-layers).

  /usr/bin/python3 tests/layers.py [ROOT]

Two graphs over engine/, daemon/ and experiments/agent/ (tests are not in
them), each checked for cycles (strongly connected components of more than
one node, Tarjan's algorithm):

  folders  an edge from a file's folder to the folder of every header it
           includes ("daemon/exec/sched.h": daemon/exec); daemon/main.c,
           which assembles the binary from every program, is left out
  files    an edge from one .c file to another when it calls a function the
           other defines (a global definition: a line at column 0 that is
           not static and names a function with a body; a call: the name
           followed by "(", comments and strings removed first)

Exit 0 with a one-line summary, or 1 listing every cycle."""
import os
import re
import sys

ROOT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
TREES = ["engine", "daemon", "experiments/agent"]
SKIP = {"daemon/main.c"}


def sources(exts):
    for tree in TREES:
        for d, _, names in os.walk(os.path.join(ROOT, tree)):
            for n in sorted(names):
                rel = os.path.relpath(os.path.join(d, n), ROOT)
                if n.endswith(exts) and rel not in SKIP and "/web/" not in rel:
                    yield rel


def strip(text):
    """The text without comments, string and character literals."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    text = re.sub(r'"(\\.|[^"\\\n])*"', '""', text)
    return re.sub(r"'(\\.|[^'\\\n])*'", "''", text)


def cycles(graph):
    """The strongly connected components of more than one node."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):  # iterative Tarjan: the daemon's graphs are small, but be safe
        work = [(v, iter(sorted(graph.get(v, ()))))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        while work:
            node, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    break
                if w in on:
                    low[node] = min(low[node], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == node:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def folder_graph():
    g = {}
    inc = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
    for f in sources((".c", ".h")):
        src = os.path.dirname(f)
        for h in inc.findall(open(os.path.join(ROOT, f), encoding="utf-8").read()):
            dst = os.path.dirname(h)
            if dst and dst != src:
                g.setdefault(src, set()).add(dst)
    return g


DEF = re.compile(r"^(?!static\b|typedef\b|extern\b|struct\b|enum\b|union\b|return\b)"
                 r"[A-Za-z_][\w \t\*]*?\b([A-Za-z_]\w*)\s*\([^;{]*\)\s*(?:__attribute__\(\(.*\)\)\s*)?\{",
                 re.M)
CALL = re.compile(r"\b([A-Za-z_]\w*)\s*\(")


def file_graph():
    texts = {f: strip(open(os.path.join(ROOT, f), encoding="utf-8").read()) for f in sources((".c",))}
    owner = {}
    for f, t in texts.items():
        for name in DEF.findall(t):
            owner.setdefault(name, f)
    g = {}
    for f, t in texts.items():
        for name in set(CALL.findall(t)):
            o = owner.get(name)
            if o and o != f:
                g.setdefault(f, set()).add(o)
    return g, len(owner)


def main():
    bad = 0
    fg = folder_graph()
    for c in cycles(fg):
        print("layers: an include cycle between folders: " + " <-> ".join(c), file=sys.stderr)
        bad = 1
    cg, n_defs = file_graph()
    for c in cycles(cg):
        print("layers: a call cycle between files: " + " <-> ".join(c), file=sys.stderr)
        bad = 1
    if not bad:
        print("layers: no cycle between %d folders (%d include edges) nor between %d files "
              "(%d call edges, %d functions)"
              % (len(set(fg) | {d for s in fg.values() for d in s}),
                 sum(len(s) for s in fg.values()), len(set(cg) | {d for s in cg.values() for d in s}),
                 sum(len(s) for s in cg.values()), n_defs))
    return bad


if __name__ == "__main__":
    sys.exit(main())
