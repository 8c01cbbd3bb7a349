#!/usr/bin/python3
"""flood.py - ordinary clients of a daemon under a connection flood, on loopback.

Starts `BIN serve` on a fresh state directory, then at once:
  - wrk with FLOOD_CONNECTIONS (1000) keep-alive connections on /healthz;
  - FLOOD_SLOW (200) connections that send their headers a byte every
    second (slowloris), each opened again when the daemon closes it;
and, once both have run for 3 s, FLOOD_ORDINARY (50) ordinary requests at
once (a new connection each, GET /v1/status, 5 s timeout). Prints how many
ordinary requests succeeded and their latencies, wrk's figures, and exits 1
unless every ordinary request succeeded with the 99th percentile under
FLOOD_P99_MS (200). Everything is bounded: FLOOD_SECONDS (10) of wrk, the
slow senders stop with it, and the daemon is stopped at the end.

    tests/load/flood.py build/nightshift      (make flood)
"""
import os
import re
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time


def env_int(name, default):
    return int(os.environ.get(name, default))


def start_daemon(binary, state):
    proc = subprocess.Popen(
        [binary, "serve", "--dir", state, "--listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE, stderr=open(os.path.join(state, "..", "daemon.err"), "w"),
        text=True)
    line = proc.stdout.readline()
    m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
    if not m:
        proc.kill()
        sys.exit("flood: the daemon did not start: %r" % line)
    return proc, int(m.group(1))


def slow_sender(port, stop, counts):
    """One connection that sends a header byte a second; opened again when closed."""
    request = b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Slow: " + b"a" * 4000
    while not stop.is_set():
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=2)
        except OSError:
            counts["connect_failed"] += 1
            time.sleep(0.5)
            continue
        counts["opened"] += 1
        try:
            for b in request:
                if stop.wait(1.0):
                    break
                s.sendall(bytes([b]))
        except OSError:
            counts["closed_by_daemon"] += 1
        finally:
            s.close()


def ordinary(port, out, i):
    t0 = time.monotonic()
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.settimeout(5)
        s.sendall(b"GET /v1/status HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        s.close()
        ok = data.startswith(b"HTTP/1.1 200")
        out[i] = (ok, (time.monotonic() - t0) * 1e3, data[:60])
    except OSError as e:
        out[i] = (False, (time.monotonic() - t0) * 1e3, repr(e).encode())


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    binary = os.path.realpath(sys.argv[1])
    conns = env_int("FLOOD_CONNECTIONS", 1000)
    slow = env_int("FLOOD_SLOW", 200)
    n_ordinary = env_int("FLOOD_ORDINARY", 50)
    seconds = env_int("FLOOD_SECONDS", 10)
    p99_ms = env_int("FLOOD_P99_MS", 200)
    if not shutil.which("wrk"):
        sys.exit("flood: wrk is not installed (scripts/setup.sh)")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, 65536) if hard != resource.RLIM_INFINITY else 65536
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    if want < conns + slow + n_ordinary + 64:
        sys.exit("flood: %d file descriptors allowed, too few for %d connections" %
                 (want, conns + slow + n_ordinary))

    work = tempfile.mkdtemp(prefix="nightshift-flood.")
    state = os.path.join(work, "state")
    os.mkdir(state)
    daemon, port = start_daemon(binary, state)
    stop = threading.Event()
    threads = []
    try:
        wrk = subprocess.Popen(
            ["wrk", "-t2", "-c%d" % conns, "-d%ds" % seconds, "--timeout", "5s", "--latency",
             "http://127.0.0.1:%d/healthz" % port],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        counts = {"opened": 0, "closed_by_daemon": 0, "connect_failed": 0}
        for _ in range(slow):
            t = threading.Thread(target=slow_sender, args=(port, stop, counts), daemon=True)
            t.start()
            threads.append(t)
        time.sleep(min(3, seconds / 2))
        out = [None] * n_ordinary
        ts = [threading.Thread(target=ordinary, args=(port, out, i)) for i in range(n_ordinary)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(10)
        try:
            wrk_out, _ = wrk.communicate(timeout=seconds + 30)
        except subprocess.TimeoutExpired:
            wrk.kill()
            wrk_out, _ = wrk.communicate()
        stop.set()
        for t in threads:
            t.join(3)
    finally:
        stop.set()
        daemon.terminate()
        try:
            daemon.wait(20)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()

    done = [o for o in out if o]
    ok = [o for o in done if o[0]]
    lat = sorted(o[1] for o in done)
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))] if lat else float("inf")
    print("flood: wrk -c%d on /healthz for %d s, %d slow-header connections" %
          (conns, seconds, slow))
    for line in wrk_out.splitlines():
        if re.search(r"Latency |Requests/sec|requests in|Socket errors|Non-2xx| 99%| 50%", line):
            print("  wrk:" + line)
    print("  slow senders: %(opened)d connections opened, %(closed_by_daemon)d closed by the "
          "daemon, %(connect_failed)d connects failed" % counts)
    print("  ordinary: %d of %d succeeded; latency median %.1f ms, p99 %.1f ms, max %.1f ms" %
          (len(ok), n_ordinary, lat[len(lat) // 2] if lat else -1, p99, lat[-1] if lat else -1))
    for o in done:
        if not o[0]:
            print("  failed after %.0f ms: %s" % (o[1], o[2][:60]))
    shutil.rmtree(work, ignore_errors=True)
    return 0 if len(ok) == n_ordinary and p99 < p99_ms else 1


if __name__ == "__main__":
    sys.exit(main())
