"""corpus.py - the search benchmark's text: about 1 MB of a corpus, read the
same way by make bench-search (tests/bench/search.py) and by the landscapes
(landscape.py), so that a landscape is recorded on the text the benchmark
trains on."""

import os

CORPUS_BYTES = 1_000_000


def bench_text(src, limit=CORPUS_BYTES):
    """About `limit` bytes of text from src. A directory of .txt documents
    (the Brown corpus) gives every fifth document from the first on (all
    fifteen genres), then from the second, in order, whole documents up to
    the limit, each followed by a blank line; a file gives its first `limit`
    bytes cut at a line break."""
    if os.path.isdir(src):
        docs = sorted(f for f in os.listdir(src) if f.endswith(".txt"))
        parts, n = [], 0
        for f in docs[::5] + docs[1::5]:
            with open(os.path.join(src, f), encoding="utf-8") as fh:
                t = fh.read().strip() + "\n\n"
            b = len(t.encode())
            if n + b > limit:
                break
            parts.append(t)
            n += b
        return "".join(parts)
    with open(src, "rb") as fh:
        raw = fh.read(limit)
    cut = raw.rfind(b"\n")
    return raw[:cut + 1 if cut > 0 else len(raw)].decode("utf-8", errors="ignore")
