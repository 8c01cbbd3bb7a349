#!/usr/bin/python3
"""hog_night.py - `make bench-hog-night`: a short agent night with CPU hogs
started during one run, to show what the agent does with a slowed run.

    /usr/bin/python3 tests/bench/hog_night.py --bin build/nightshift
        [--runs N] [--budget S] [--hog-run K] [--hogs H] [--seed N] [--noise-floor BPB]
        [--corpus DIR] [--out DIR] [--keep]

One daemon (one slot, one thread) and the reference agent (`--strategy tpe
--max-proposals N`) run a night of time-budget runs on make bench-search's
corpus and baseline. When the K-th run of the night starts training, H busy
loops start on the worker's CPU and stop when that run ends. The workers
(through the daemon's --worker-cmd) and the hogs are pinned to one CPU and,
where the system allows it, scheduled round-robin at one real-time priority
(as tests/test_share.c does), so that the rest of the machine's load does
not reach the runs: their only neighbour on that CPU is the hog. The daemon
and the agent run on the other CPUs. Then it prints, and writes
to OUT/hog-night.md: each run's val_bpb, slowdown, what the slowdown cost
and where its quiet reference came from, and every line of the agent's log
that adopts, re-runs or declines to adopt.

A slowed time-budget run trains fewer tokens, so its val_bpb is worse than
its configuration's. With the hogs on a candidate (the default K = 2, the
night's first proposal after the baseline) that still beats the best, or on
the best (K = 1, the baseline) that a later candidate beats, the margin can
be one the slowdown alone explains; the agent then re-runs the candidate
rather than adopting it, and its log says so ("not adopting #N: ... within
the ... val_bpb their runs' slowdowns explain"). A night of up to 32 runs
with one baseline seed adopts only at its end (experiments/README.md), so
--noise-floor gives the agent the noise to adopt by during the night. At the
end the hogged run's spec runs again without hogs, so that the estimated
cost can be set against what the slowdown really cost.
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import search  # noqa: E402  (its daemon, API client and corpus)

NIGHT_LIMIT_S = 3600


def realtime_allowed():
    """Whether this user may schedule at real-time priority (chrt -r 1)."""
    return subprocess.run(["chrt", "-r", "1", "true"], capture_output=True).returncode == 0


def pinned(cpu, rt):
    """The command prefix that runs a program on cpu (round-robin at real-time
    priority 1 when rt)."""
    return ["taskset", "-c", str(cpu)] + (["chrt", "-r", "1"] if rt else [])


def start_hogs(n, cpu, rt):
    """n busy loops on cpu."""
    code = "import signal\nsignal.alarm(3600)\nwhile True: pass\n"
    return [subprocess.Popen(pinned(cpu, rt) + [sys.executable, "-c", code]) for _ in range(n)]


def stop_hogs(hogs):
    for p in hogs:
        p.send_signal(signal.SIGKILL)
        p.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=os.path.join(search.ROOT, "build", "nightshift"))
    ap.add_argument("--runs", type=int, default=10, help="the night's proposals (default 10)")
    ap.add_argument("--budget", type=float, default=30, help="each run's seconds (default 30)")
    ap.add_argument("--hog-run", type=int, default=2,
                    help="the night's run (1 = the baseline) the hogs slow (default 2)")
    ap.add_argument("--hogs", type=int, default=2, help="busy loops (default 2)")
    ap.add_argument("--seed", type=int, default=1, help="the agent's seed")
    ap.add_argument("--noise-floor", type=float, default=0.02,
                    help="the agent's --noise-floor (default 0.02; 0 = measure it): the seed "
                         "noise known from earlier nights, so that it adopts during the night")
    ap.add_argument("--corpus", default=os.path.join(search.ROOT, "state", "corpus"))
    ap.add_argument("--out", default=os.path.join(search.ROOT, "build", "bench-hog-night"))
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args()
    args.slots, args.threads, args.asha_eta, args.asha_rungs = 1, 1, 3, 3
    os.makedirs(args.out, exist_ok=True)
    cpu, rt = max(os.sched_getaffinity(0)), realtime_allowed()
    search.log(f"runs and hogs pinned to CPU {cpu}" +
               (", real-time round-robin" if rt else
                " (no real-time scheduling: the machine's load reaches the runs)"))
    work = tempfile.mkdtemp(prefix="hog-night.")
    daemon = agent = None
    hogs = []
    try:
        corpus, _ = search.prep_corpus(args, work)
        worker = " ".join(pinned(cpu, rt) + [os.path.abspath(args.bin), "train"])
        daemon = search.Daemon(args, work, "daemon", "off", ["--worker-cmd", worker])
        search.prep_dataset(args, daemon, corpus, "hog")
        with open(search.BASELINE) as f:
            base = json.load(f)
        base.update(dataset="hog", time_budget_s=args.budget)
        base.setdefault("resources", {})["threads"] = 1
        base_path = os.path.join(work, "base.json")
        with open(base_path, "w") as f:
            json.dump(base, f)
        state = os.path.join(work, "agent.json")
        alog_path = os.path.join(args.out, "agent.log")
        alog = open(alog_path, "w")
        agent = subprocess.Popen(
            [args.bin, "agent", "--listen", f"127.0.0.1:{daemon.agent_port}", "--secret-file",
             daemon.secret_file, "--baseline", base_path, "--space", search.SPACE, "--state",
             state, "--seed", str(args.seed), "--strategy", "tpe", "--max-proposals",
             str(args.runs)] + (["--noise-floor", str(args.noise_floor)]
                                 if args.noise_floor > 0 else []),
            stdout=alog, stderr=subprocess.STDOUT, start_new_session=True)
        time.sleep(0.3)
        # The agent's first move on a fresh daemon: its baseline.
        daemon.api.call("POST", "/v1/experiments",
                        dict(base, name="baseline", tags=["baseline", "agent"], prune=False))
        t0, hogged_id, done_polls, last_note = time.time(), None, 0, 0.0
        while time.time() - t0 < NIGHT_LIMIT_S:
            exps = daemon.api.experiments("hog")
            started = sorted((e for e in exps if e["status"] not in ("queued",)),
                             key=lambda e: e["id"])
            if hogged_id is None and len(started) >= args.hog_run:
                e = started[args.hog_run - 1]
                # from its second step on: past its start-up and its shape's bench
                prog = daemon.api.get(f"/v1/experiments/{e['id']}?metrics=0").get("progress")
                if e["status"] == "running" and (prog or {}).get("step", 0) >= 2:
                    hogged_id = e["id"]
                    hogs = start_hogs(args.hogs, cpu, rt)
                    search.log(f"run #{hogged_id}: {args.hogs} hogs started at step "
                               f"{prog['step']}")
            if hogs and hogged_id is not None:
                e = next(x for x in exps if x["id"] == hogged_id)
                if e["status"] not in ("queued", "running"):
                    stop_hogs(hogs)
                    hogs = []
                    search.log(f"run #{hogged_id}: ended {e['status']}, hogs stopped")
            active = any(e["status"] in ("queued", "running") for e in exps)
            done = not active and search.agent_proposals(state) >= args.runs
            done_polls = done_polls + 1 if done else 0
            if done_polls >= 2 or agent.poll() is not None:
                break
            n_done = sum(e["status"] not in ("queued", "running") for e in exps)
            if time.time() - last_note >= 30:
                last_note = time.time()
                search.log(f"{n_done} runs done, {search.agent_proposals(state)} of {args.runs} "
                           "proposals made")
            time.sleep(0.5)
        search.stop_proc(agent)
        alog.close()
        stop_hogs(hogs)
        exps = [daemon.api.get(f"/v1/experiments/{e['id']}")
                for e in daemon.api.experiments("hog")]
        check = rerun_unslowed(daemon, hogged_id) if hogged_id else None
        report(args, exps, hogged_id, alog_path, cpu, rt, check)
    finally:
        stop_hogs(hogs)
        search.stop_proc(agent)
        if daemon:
            daemon.stop()
        if args.keep:
            search.log(f"work directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def rerun_unslowed(daemon, hogged_id):
    """The hogged run's spec, same seed, again without hogs: what its slowdown
    really cost, beside the estimate (a re-run of a time budget is not
    bit-identical; the difference holds the seed-free run-to-run noise too)."""
    api = daemon.api
    spec = api.get(f"/v1/experiments/{hogged_id}")["spec"]
    spec = dict(spec, name=f"#{hogged_id} again, no hogs", tags=["check"], prune=False)
    status, doc = api.call("POST", "/v1/experiments?force=1", spec)
    if status not in (200, 201):
        search.log(f"the check run was refused: HTTP {status}: {doc}")
        return None
    new_id = doc["id"]
    search.log(f"run #{new_id}: #{hogged_id}'s spec again without hogs")
    t0 = time.time()
    while time.time() - t0 < 900:
        e = api.get(f"/v1/experiments/{new_id}?metrics=0")
        if e["status"] not in ("queued", "running"):
            return e
        time.sleep(1)
    return None


def report(args, exps, hogged_id, alog_path, cpu, rt, check):
    rows = ["| run | name | status | val_bpb | tok/s | quiet tok/s (from) | slowdown | cost |",
            "|---|---|---|---|---|---|---|---|"]
    for e in exps:
        r = e.get("result") or {}

        def f(k, fmt):
            v = r.get(k)
            return fmt % v if isinstance(v, (int, float)) else "-"
        mark = " (hogged)" if e["id"] == hogged_id else ""
        rows.append(f"| #{e['id']}{mark} | {e.get('name') or ''} | {e['status']} | "
                    f"{f('val_bpb', '%.4f')} | {f('tokens_per_second', '%.0f')} | "
                    f"{f('quiet_tokens_per_second', '%.0f')} ({r.get('quiet_source') or '-'}) | "
                    f"{f('slowdown', '%.2f')} | {f('slowdown_cost_bpb', '%.4f')} |")
    with open(alog_path) as f:
        lines = [ln.rstrip() for ln in f
                 if any(w in ln for w in ("keeping #", "not adopting", "promising #",
                                          "re-running", "discarding #", "the plan"))]
    declined = [ln for ln in lines if "not adopting" in ln or "not discarding" in ln]
    doc = [f"# A night with a hog during run #{hogged_id}", "",
           f"{args.runs} proposals of `--strategy tpe`, {args.budget:g} s runs, one slot of one "
           f"thread, {args.hogs} busy loops during run #{hogged_id}; the runs and the hogs pinned "
           f"to CPU {cpu}" + (" at real-time round-robin priority" if rt else
                              " (no real-time priority)") + ", the daemon and agent elsewhere.",
           "",
           *rows, "", "The agent's decisions:", "", "```", *lines, "```", "",
           (f"{len(declined)} verdict(s) held back for a re-run: a margin the slowdown explains."
            if declined else "No verdict was held back: no margin fell within a slowdown's "
            "cost.")]
    hogged = next((e for e in exps if e["id"] == hogged_id), None)
    if check and hogged and (check.get("result") or {}).get("val_bpb") and \
            (hogged.get("result") or {}).get("val_bpb"):
        hr, cr = hogged["result"], check["result"]
        doc += ["", f"The check: #{hogged_id}'s spec (same seed) again without hogs, run "
                f"#{check['id']}: val_bpb {cr['val_bpb']:.4f} at {cr['tokens_per_second']:.0f} "
                f"tok/s (slowdown {cr.get('slowdown') or 0:.2f}), against {hr['val_bpb']:.4f} "
                f"hogged: the slowdown cost {hr['val_bpb'] - cr['val_bpb']:.4f} val_bpb, "
                f"estimated {hr.get('slowdown_cost_bpb') or 0:.4f} from the hogged run's loss "
                "curve."]
    text = "\n".join(doc) + "\n"
    with open(os.path.join(args.out, "hog-night.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
