#!/usr/bin/python3
"""optuna_bridge.py - Optuna's samplers and pruners driving a nightshift daemon.

The command over nightshift_optuna (the library an Optuna user imports into
their own script; see its docstring and experiments/README.md). An ask/tell
loop: Optuna proposes a point of the search space (experiments/search/space.json,
read by experiments/search/space.py as the agent's benchmarks read it), the
bridge writes it into a base spec, submits it over the daemon's HTTP API,
waits for the result by polling GET /v1/experiments/ID and tells Optuna its
val_bpb. A run that failed, diverged, ran out of memory or timed out is told
as FAIL. A spec the daemon refuses (invalid_spec, does_not_fit, ...) trains
nothing and does not count as one of --trials: it is told PRUNED with no
report (TPE ranks it below every completed trial) and the user_attrs refused
(the code and message) and constraint [1.0] (the TPE sampler is built with
nightshift_optuna.constraints, so it knows the point is infeasible), and the
bridge asks again; --max-refusals in a
row (default 50) end the loop. Every trial carries its experiment_id, url
and status in user_attrs, so optuna-dashboard links a trial to its run.
At the end the bridge says the STUDY's best (every invocation's, with
--storage), not only this invocation's.

    /usr/bin/python3 experiments/bridges/optuna_bridge.py --url http://127.0.0.1:8080 \\
        --token-file state/token --base experiments/specs/baseline.json --trials 20 \\
        --storage sqlite:///night.db --study-name night

Needs Python's standard library and Optuna (Debian's python3-optuna, 3.1;
scripts/setup.sh --bench installs it). --check-space reads the space file and
prints the axes without Optuna or a daemon.

Pruning (--pruner median|sha|threshold): while a run trains, the bridge reads
its training losses and reports, at every tenth of its budget (steps 10, 20,
... 100: percent of the budget, so runs with different batch sizes compare
at the same progress), the mean loss over that tenth. When
trial.should_prune() says so it POSTs /v1/experiments/ID/cancel and tells
the trial PRUNED. median is Optuna's MedianPruner (5 startup trials, no
pruning before 30% of the budget, like the daemon's --prune median); sha its
SuccessiveHalvingPruner with rungs at 11%, 33% and 99% of the budget (eta
3); threshold its ThresholdPruner, which prunes a run whose loss is above
--prune-above LOSS (no warmup).

--parallel N keeps N trials in flight (the daemon runs them on its slots).
--max-tokens T (a token budget only) stops asking once the tokens the
trials trained (a pruned run's by its last step) plus the budgets of the
trials in flight reach T, and waits for those in flight. SIGINT or SIGTERM
stops asking and cancels the trials in flight.
Every trial is one JSON line on --log (default: none) and one line for
people on stderr. Exit status: 0 done, 1 an error talking to the daemon
(not there, wrong token), 2 bad options, space file or base spec.
"""
import argparse
import json
import math
import os
import signal
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import nightshift_optuna as ns  # noqa: E402

DEFAULT_SPACE = ns.SPACE
DEFAULT_BASE = ns.BASELINE
BridgeError = ns.BridgeError


# ------------------------------------------------------------------ the loop

def make_study(args):
    import optuna  # here, so --check-space needs no Optuna
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # constraints_func is "experimental" in Optuna 3.1; the warning says nothing to a user here
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    if args.sampler == "tpe":
        sampler = optuna.samplers.TPESampler(seed=args.seed, n_startup_trials=args.startup,
                                             constraints_func=ns.constraints)
    else:
        sampler = optuna.samplers.RandomSampler(seed=args.seed)
    if args.pruner == "median":
        pruner = optuna.pruners.MedianPruner(n_startup_trials=5, n_warmup_steps=30)
    elif args.pruner == "threshold":
        pruner = optuna.pruners.ThresholdPruner(upper=args.prune_above)
    elif args.pruner == "sha":
        pruner = optuna.pruners.SuccessiveHalvingPruner(min_resource=11, reduction_factor=3)
    else:
        pruner = optuna.pruners.NopPruner()
    return optuna, optuna.create_study(study_name=args.study_name, storage=args.storage,
                                       sampler=sampler, pruner=pruner, direction="minimize",
                                       load_if_exists=bool(args.storage))


def say(msg):
    print(f"optuna-bridge: {msg}", file=sys.stderr, flush=True)


def run(args):
    try:
        base = ns.nsspace.load_json(args.base)
    except OSError as e:
        raise BridgeError(f"base spec {args.base}: {e.strerror}", 2)
    except ValueError as e:
        raise BridgeError(f"base spec {args.base}: not JSON: {e}", 2)
    if not isinstance(base, dict):
        raise BridgeError(f"base spec {args.base}: not a JSON object", 2)
    if args.dataset:
        base["dataset"] = args.dataset
    if args.tokens:
        base.pop("time_budget_s", None)
        base["token_budget"] = args.tokens
    space = ns.load_space(args.space, base=base)
    defaults = space.defaults
    daemon = ns.Client(args.url, args.token)
    daemon.check()
    daemon.check_base(base)
    try:
        import optuna  # noqa: F401
    except ImportError:
        raise BridgeError("needs Optuna: apt-get install python3-optuna "
                          "(scripts/setup.sh --bench), and run with /usr/bin/python3", 2)
    optuna, study = make_study(args)
    TrialState = optuna.trial.TrialState
    log = open(args.log, "a", buffering=1) if args.log else None
    inflight = {}  # trial number -> its experiment ("eid") and state
    asked = 0
    spent = 0  # training tokens of the trials told so far
    stopping = []
    best = None
    refusals = 0  # refused specs in a row

    def on_signal(signum, frame):
        stopping.append(signum)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    def record(rec):
        nonlocal best, spent
        spent += rec.get("tokens") or 0
        if rec.get("val_bpb") is not None and (best is None or rec["val_bpb"] < best["val_bpb"]):
            best = rec
        if log:
            log.write(json.dumps(rec) + "\n")
        v = rec.get("val_bpb")
        say(f"trial {rec['trial']}: {rec['outcome']}"
            + (f" #{rec['id']}" if rec.get("id") else "")
            + (f" val_bpb {v:.4f}" if v is not None else "")
            + (f" ({rec['why']})" if rec.get("why") else "")
            + (f"; best {best['val_bpb']:.4f} (#{best['id']})" if best else ""))

    def finish(number, exp):
        f = inflight.pop(number)
        trial, status, eid = f["trial"], exp.get("status"), f["eid"]
        res = exp.get("result") or {}
        # A duplicate trained nothing: its run's tokens were counted with it.
        rec = {"trial": trial.number, "id": eid, "status": status, "params": f["point"],
               "duplicate": f["duplicate"],
               "tokens": 0 if f["duplicate"] else ns.tokens_used(exp, f["step_tokens"]),
               "val_bpb": None, "why": exp.get("reason")}
        ns.mark_ended(trial, exp)
        if ns.succeeded_value(exp) is not None:
            rec["val_bpb"] = res["val_bpb"]
            study.tell(trial, res["val_bpb"])
            rec["outcome"] = "duplicate" if f["duplicate"] else "succeeded"
        elif f.get("prune_why") or status == "pruned":
            study.tell(trial, state=TrialState.PRUNED)
            rec["outcome"] = "pruned"
            rec["why"] = f.get("prune_why") or rec["why"]
        elif f["cancelled"]:
            study.tell(trial, state=TrialState.FAIL)
            rec["outcome"] = "cancelled"
            rec["why"] = "the bridge was stopped"
        else:
            study.tell(trial, state=TrialState.FAIL)
            rec["outcome"] = status or "unknown"
        record(rec)

    try:
        while True:
            while not stopping and asked < args.trials and len(inflight) < args.parallel \
                    and refusals < args.max_refusals:
                committed = sum(f["budget"] for f in inflight.values() if not f["duplicate"])
                if args.max_tokens and spent + committed >= args.max_tokens:
                    break
                trial = study.ask()
                point = ns.suggest_point(trial, space)
                spec = space.apply(point, base)
                label = " ".join(f"{p.split('.')[-1]}={v}" for p, v in point.items())
                spec["name"] = f"optuna#{trial.number} {label}"[:120]
                spec["tags"] = ["optuna", args.sampler] + ([args.study_name] if args.study_name else [])
                eid, info = daemon.submit(spec)
                if eid is None:
                    # asked again: a refusal trains nothing and is not one of --trials
                    code, msg = info
                    refusals += 1
                    ns.mark_refused(trial, code, msg)
                    study.tell(trial, state=TrialState.PRUNED)
                    record({"trial": trial.number, "id": None, "status": "refused",
                            "outcome": "refused", "code": code, "why": f"{code}: {msg}",
                            "params": point, "tokens": 0, "val_bpb": None, "duplicate": False})
                    continue
                asked += 1
                refusals = 0
                ns.mark_submitted(trial, daemon, eid, info)
                kind, budget, step_tokens = ns.budget_of(spec, defaults, daemon)
                if args.max_tokens and kind != "tokens":
                    raise BridgeError("--max-tokens needs a token budget (--tokens N, or a base "
                                      "spec with token_budget)", 2)
                inflight[trial.number] = {"eid": eid, "trial": trial, "point": point,
                                          "duplicate": info, "kind": kind, "budget": budget,
                                          "step_tokens": step_tokens, "reported": set(),
                                          "cancelled": False}
                say(f"trial {trial.number}: submitted #{eid}"
                    + (" (a duplicate of a run already there)" if info else "") + f": {label}")
            if not inflight:
                break
            if stopping:
                for f in inflight.values():
                    if not f["cancelled"] and not f["duplicate"]:
                        daemon.cancel(f["eid"])
                        f["cancelled"] = True
            time.sleep(args.poll)
            seen = {}
            for number in list(inflight):
                f = inflight[number]
                eid = f["eid"]
                exp = seen[eid] if eid in seen else seen.setdefault(eid, daemon.experiment(eid))
                if exp.get("status") not in ("queued", "running"):
                    finish(number, exp)
                    continue
                if args.pruner == "none" or f["cancelled"] or f["duplicate"]:
                    continue
                for key, loss in ns.new_reports(exp, f["reported"], f["kind"], f["budget"],
                                             f["step_tokens"]):
                    f["trial"].report(loss, key)
                    if f["trial"].should_prune():
                        status, doc = daemon.cancel(eid)
                        f["cancelled"] = True
                        f["prune_why"] = (f"pruned by Optuna's {args.pruner} pruner at {key}% "
                                          f"of the budget (mean loss {loss:.4f}); cancel: HTTP {status}")
                        say(f"trial {f['trial'].number}: {f['prune_why']}")
                        break
    finally:
        if log:
            log.close()
    if stopping:
        say("stopped; the runs in flight were cancelled")
    if refusals >= args.max_refusals:
        say(f"stopped: the daemon refused {refusals} specs in a row")
    top = ns.best(study)
    if top:
        say(f"best of the study ({len(study.trials)} trials): trial {top['number']} "
            f"#{top['experiment_id']} val_bpb {top['value']:.4f}: {json.dumps(top['params'])}")
    else:
        say("no trial succeeded")
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(
        description="Optuna's ask/tell loop over nightshift's search space, driving a daemon "
        "over its HTTP API (see the file's docstring).")
    ap.add_argument("--url", default=os.environ.get("NIGHTSHIFT_URL", "http://127.0.0.1:%s" %
                                                    os.environ.get("NIGHTSHIFT_PORT", "8080")),
                    help="the daemon (default $NIGHTSHIFT_URL, else http://127.0.0.1:$NIGHTSHIFT_PORT or 8080)")
    ap.add_argument("--token", default=os.environ.get("NIGHTSHIFT_TOKEN"),
                    help="the daemon's API token (default $NIGHTSHIFT_TOKEN)")
    ap.add_argument("--token-file", help="the API token from a file")
    ap.add_argument("--space", default=DEFAULT_SPACE, help="the search space (default %(default)s)")
    ap.add_argument("--base", default=DEFAULT_BASE,
                    help="the spec the points are written into (default %(default)s)")
    ap.add_argument("--dataset", help="replace the base spec's dataset")
    ap.add_argument("--tokens", type=int, help="a token budget instead of the base spec's budget")
    ap.add_argument("--sampler", choices=("tpe", "random"), default="tpe")
    ap.add_argument("--startup", type=int, default=10,
                    help="tpe: random trials before the model is used (default Optuna's 10)")
    ap.add_argument("--pruner", choices=("none", "median", "sha", "threshold"), default="none")
    ap.add_argument("--prune-above", type=float, default=math.inf,
                    help="--pruner threshold: prune a run whose training loss is above this")
    ap.add_argument("--trials", type=int, default=20,
                    help="trials that reach the daemon (refused specs are asked again; "
                    "default %(default)s)")
    ap.add_argument("--max-refusals", type=int, default=50,
                    help="stop after this many refused specs in a row (default %(default)s)")
    ap.add_argument("--seed", type=int, default=None, help="the sampler's seed")
    ap.add_argument("--study-name", default=None, help="the study's name (a tag of every run)")
    ap.add_argument("--storage", default=None,
                    help="an Optuna storage URL (sqlite:///study.db) to keep the study across runs")
    ap.add_argument("--parallel", type=int, default=1, help="trials in flight at once (default 1)")
    ap.add_argument("--max-tokens", type=int, default=0,
                    help="stop asking once the trials' training tokens (in flight: their budget) "
                    "reach this")
    ap.add_argument("--poll", type=float, default=1.0, help="seconds between polls (default 1)")
    ap.add_argument("--log", help="append one JSON line per trial to this file")
    ap.add_argument("--check-space", action="store_true",
                    help="read the space file, print its axes as JSON and exit (no Optuna, no daemon)")
    args = ap.parse_args(argv)
    try:
        if args.check_space:
            sp = ns.load_space(args.space)
            print(json.dumps([{k: v for k, v in vars(ax).items() if v is not None}
                              for ax in sp.axes], indent=1))
            return 0
        if args.trials < 1 or args.parallel < 1 or args.poll <= 0 or args.max_refusals < 1:
            raise BridgeError("--trials, --parallel and --max-refusals must be at least 1, "
                              "--poll above 0", 2)
        if args.token_file:
            try:
                with open(args.token_file) as f:
                    args.token = f.read().strip()
            except OSError as e:
                raise BridgeError(f"--token-file {args.token_file}: {e.strerror}", 2)
        return run(args)
    except BridgeError as e:
        say(str(e))
        return e.code


if __name__ == "__main__":
    sys.exit(main())
