#!/usr/bin/python3
"""mem_edge.py - the memory estimate at its edge: for each spec, the smallest
resources.memory_mb the daemon accepts (POST /v1/cost, which counts the
engine's address-space floor) against the smallest limit under which the
run really trains (nightshift exec-limited --memory-mb N -- nightshift train,
a few steps of a token budget), both by bisection to 1 MiB.

    tests/bench/mem_edge.py BIN STATE_DIR DATASET [SPEC.json ...]

STATE_DIR holds the prepared DATASET; the specs default to
experiments/specs/*.json (run with one thread, the dataset set to DATASET).
Prints one line per spec: accepted-from, runs-from, and the margin
(accepted - runs: negative means a spec accepted at its minimum ends oom).
"""
import glob
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import urllib.request


def start_daemon(binary, state):
    proc = subprocess.Popen([binary, "serve", "--dir", state, "--listen", "127.0.0.1:0",
                             "--slots", "1", "--threads-per-slot", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    m = re.search(r"127\.0\.0\.1:(\d+)", proc.stdout.readline())
    if not m:
        proc.kill()
        sys.exit("mem_edge: the daemon did not start")
    return proc, "http://127.0.0.1:%s" % m.group(1)


def fits(url, spec, mb):
    s = json.loads(json.dumps(spec))
    s.setdefault("resources", {})["memory_mb"] = mb
    req = urllib.request.Request(url + "/v1/cost", data=json.dumps(s).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return bool(json.load(r).get("fits"))
    except urllib.error.HTTPError as e:
        body = json.load(e)
        return body.get("fits", False) if isinstance(body, dict) else False


def runs(binary, state, spec, mb, work):
    path = os.path.join(work, "spec.json")
    with open(path, "w") as f:
        json.dump(spec, f)
    p = subprocess.run([binary, "exec-limited", "--memory-mb", str(mb), "--", binary, "train",
                        "--dir", state, path], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=600)
    return p.returncode == 0


def bisect(lo, hi, ok):
    """The smallest n in (lo, hi] with ok(n), given not ok(lo) and ok(hi)."""
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    binary, state, dataset = os.path.realpath(sys.argv[1]), sys.argv[2], sys.argv[3]
    specs = sys.argv[4:] or sorted(glob.glob("experiments/specs/*.json"))
    work = tempfile.mkdtemp(prefix="nightshift-mem-edge.")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # stop the daemon on the way out
    daemon, url = start_daemon(binary, state)
    try:
        for path in specs:
            with open(path) as f:
                spec = json.load(f)
            spec["dataset"] = dataset
            spec["time_budget_s"] = 0
            spec["token_budget"] = 4 * spec.get("train", {}).get("total_batch_tokens", 65536)
            spec["eval_tokens"] = 4096
            spec.setdefault("resources", {})["threads"] = 1
            spec["resources"].pop("memory_mb", None)
            accepted = bisect(1, 1 << 16, lambda mb: fits(url, spec, mb))
            trains = bisect(1, max(accepted * 2, 4096),
                            lambda mb: runs(binary, state, spec, mb, work))
            print("%-24s accepted from %5d MiB, trains from %5d MiB, margin %+5d MiB (%+.1f%%)" %
                  (os.path.basename(path), accepted, trains, accepted - trains,
                   100.0 * (accepted - trains) / trains), flush=True)
    finally:
        daemon.terminate()
        daemon.wait(20)


if __name__ == "__main__":
    main()
