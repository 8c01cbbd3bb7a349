#!/usr/bin/python3
"""report_load.py - /healthz while a page fires report and export GETs in a loop.

Fills a fresh state directory with LOAD_ROWS (100,000) finished experiments
(sqlite3, one transaction, the columns tests/test_guard.c's fill_experiments
writes), starts `BIN serve` on it, and for LOAD_SECONDS (30) runs
LOAD_PAGES (4) loops that each GET /v1/report, /report, /v1/report?format=md
and /v1/export?format=csv one after the other (each from another start), as a page without Fetch
Metadata would (an old browser: nothing refuses them, only the lanes bound
them; a new browser's cross-site ones get 403 at once), while /healthz is
asked every 10 ms. Prints the probes' median, p99 and max, what the loops
got (200s, 503s), and the daemon's resident memory before, at its peak and
after. Exits 1 unless p99 < LOAD_P99_MS (50) and max < LOAD_MAX_MS (200).
Loopback only; every request has a timeout; the daemon is stopped at the end.

    tests/load/report_load.py build/nightshift      (make report-load)
"""
import os
import re
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time


def env_int(name, default):
    return int(os.environ.get(name, default))


def start_daemon(binary, state, errlog):
    proc = subprocess.Popen([binary, "serve", "--dir", state, "--listen", "127.0.0.1:0"],
                            stdout=subprocess.PIPE, stderr=errlog, text=True)
    line = proc.stdout.readline()
    m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
    if not m:
        proc.kill()
        sys.exit("report_load: the daemon did not start: %r" % line)
    return proc, int(m.group(1))


def stop_daemon(proc):
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def fill(db_path, rows):
    db = sqlite3.connect(db_path)
    db.execute("BEGIN")
    for i in range(1, rows + 1):
        ok = i % 10 != 0
        when = "2026-11-%02dT%02d:%02d:%02d.000Z" % (1 + i // 86400 % 28, i // 3600 % 24,
                                                    i // 60 % 60, i % 60)
        spec = ('{"dataset":"tiny","time_budget_s":300,"seed":%d,"model":{"depth":%d,'
                '"n_embd":%d,"n_head":4,"n_kv_head":2,"mlp":"relu2","window_pattern":"SSSL",'
                '"ve_layers":"alternate","seq_len":256}}' % (i, 1 + i % 8, 64 * (1 + i % 4)))
        db.execute("INSERT INTO experiments (id, name, spec, dataset, budget_kind, budget, seed,"
                   " source, status, config_hash, started, finished) VALUES (?, ?, ?, 'tiny',"
                   " 'time', 300, ?, 'api', ?, ?, ?, ?)",
                   (i, "variant %d: wider mlp, lr x%d" % (i, 1 + i % 7), spec, i,
                    "succeeded" if ok else "failed", "c%d" % (i % 1000), when, when))
        if ok:
            db.execute("INSERT INTO results (experiment_id, val_bpb, params_total, mfu_percent,"
                       " tokens_per_second, num_steps, training_seconds, peak_rss_mb) VALUES"
                       " (?, ?, 1234567, 12.5, 20000, 900, 300, 380)",
                       (i, 1.0 + (i % 997) / 1000.0))
    db.execute("COMMIT")
    db.close()


def get(port, path, timeout):
    """One GET on a new connection: (status, seconds); status 0 on failure."""
    t0 = time.monotonic()
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        s.settimeout(timeout)
        s.sendall(("GET %s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n" %
                   path).encode())
        head = b""
        while True:
            chunk = s.recv(1 << 16)
            if not chunk:
                break
            if len(head) < 16:
                head += chunk[:16]
        s.close()
        m = re.match(rb"HTTP/1\.1 (\d+)", head)
        return (int(m.group(1)) if m else 0), time.monotonic() - t0
    except OSError:
        return 0, time.monotonic() - t0


def rss_kb(pid, key):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    binary = os.path.realpath(sys.argv[1])
    rows = env_int("LOAD_ROWS", 100000)
    seconds = env_int("LOAD_SECONDS", 30)
    pages = env_int("LOAD_PAGES", 4)
    work = tempfile.mkdtemp(prefix="nightshift-report-load.")
    state = os.path.join(work, "state")
    os.mkdir(state)
    errlog = open(os.path.join(work, "daemon.err"), "w")
    daemon, port = start_daemon(binary, state, errlog)  # creates the schema
    stop_daemon(daemon)
    t0 = time.monotonic()
    fill(os.path.join(state, "nightshift.db"), rows)
    print("report_load: %d experiments filled in %.1f s" % (rows, time.monotonic() - t0))
    daemon, port = start_daemon(binary, state, errlog)
    stop = threading.Event()
    got = {}
    lock = threading.Lock()

    def page(k):
        paths = ["/v1/report", "/report", "/v1/report?format=md", "/v1/export?format=csv"]
        paths = paths[k % 4:] + paths[:k % 4]  # each page starts elsewhere in the list
        while not stop.is_set():
            for p in paths:
                status, _ = get(port, p, 120)
                with lock:
                    key = (p.split("?")[0] + (" md" if "md" in p else ""), status)
                    got[key] = got.get(key, 0) + 1
                if stop.is_set():
                    break

    try:
        rss_before = rss_kb(daemon.pid, "VmRSS")
        lat = []
        for _ in range(100):  # the idle daemon first
            s, dt = get(port, "/healthz", 5)
            time.sleep(0.01)
        threads = [threading.Thread(target=page, args=(k,)) for k in range(pages)]
        for t in threads:
            t.start()
        end = time.monotonic() + seconds
        failed = 0
        while time.monotonic() < end:
            s, dt = get(port, "/healthz", 5)
            failed += s != 200
            lat.append(dt * 1e3)
            time.sleep(0.01)
        stop.set()
        for t in threads:
            t.join(300)
        rss_peak = rss_kb(daemon.pid, "VmHWM")
        time.sleep(2)
        rss_after = rss_kb(daemon.pid, "VmRSS")
    finally:
        stop.set()
        stop_daemon(daemon)
        errlog.close()
        shutil.rmtree(work, ignore_errors=True)
    lat.sort()
    p50, p99, worst = lat[len(lat) // 2], lat[int(len(lat) * 0.99)], lat[-1]
    print("report_load: %d pages looping over report, page, markdown and csv export for %d s" %
          (pages, seconds))
    print("  /healthz: %d probes, %d failed; median %.1f ms, p99 %.1f ms, max %.1f ms" %
          (len(lat), failed, p50, p99, worst))
    print("  the pages got: " + ", ".join("%s %d: %d" % (k[0], k[1], v)
                                          for k, v in sorted(got.items())))
    print("  daemon RSS: %.0f MB before, %.0f MB peak, %.0f MB after" %
          (rss_before / 1024, rss_peak / 1024, rss_after / 1024))
    ok = failed == 0 and p99 < env_int("LOAD_P99_MS", 50) and worst < env_int("LOAD_MAX_MS", 200)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
