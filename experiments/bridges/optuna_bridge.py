#!/usr/bin/python3
"""optuna_bridge.py - Optuna's samplers and pruners driving a nightshift daemon.

An ask/tell loop: Optuna proposes a point of the search space
(experiments/search/space.json, the file the reference agent reads), the
bridge writes it into a base spec the way the agent does, submits it over the
daemon's HTTP API, waits for the result by polling GET /v1/experiments/ID and
tells Optuna its val_bpb. A run that failed, diverged, ran out of memory or
timed out is told as FAIL; a spec the daemon refuses (invalid_spec,
does_not_fit, ...) too, with the refusal's code, and the loop goes on.

    /usr/bin/python3 experiments/bridges/optuna_bridge.py --url http://127.0.0.1:8080 \\
        --token-file state/token --base experiments/specs/baseline.json --trials 20

Needs Python's standard library and Optuna (Debian's python3-optuna, 3.1;
scripts/setup.sh --bench installs it). --check-space reads the space file and
prints the axes without Optuna or a daemon.

The space file (space.h says the same for the agent): {"axes": [axis, ...]},
an axis {"path": "model.depth", "type": "int"|"float"|"choice", "values":
[...]} or {"path": ..., "type": "int"|"float", "low": L, "high": H, "log":
true}, "also": [paths] copying the value to other paths, "why": a sentence
(read and ignored), "when": {"path": an EARLIER axis, and "not": [values],
"in": [values] or "above": x}. A listed axis is Optuna's categorical, a
range suggest_int / suggest_float (log when "log"); a float is kept to 4
significant digits, as the agent keeps it. The point is built define-by-run:
an axis whose condition is false (or whose condition's axis is itself
inactive) is not sampled and not part of the point, and the spec keeps the
base spec's value there. train.batch_size is never an axis: after the axes
are written, the micro-batch is derived, the largest power of two at most
the base spec's train.batch_size that divides train.total_batch_tokens /
model.seq_len (each read from the spec, else from
experiments/specs/default.json), so gradient accumulation divides evenly.

Pruning (--pruner median|sha): while a run trains, the bridge reads its
training losses from GET /v1/experiments/ID ("metrics": step, loss) and
reports, at every tenth of its budget (steps 10, 20, ... 100: percent of the
budget, so runs with different batch sizes compare at the same progress),
the mean loss over that tenth. When trial.should_prune() says so it POSTs
/v1/experiments/ID/cancel and tells the trial PRUNED. median is Optuna's
MedianPruner (5 startup trials, no pruning before 30% of the budget, like
the daemon's --prune median); sha its SuccessiveHalvingPruner with rungs at
11%, 33% and 99% of the budget (eta 3); threshold its ThresholdPruner, which
prunes a run whose loss is above --prune-above LOSS (no warmup).

--parallel N keeps N trials in flight (the daemon runs them on its slots).
--max-tokens T (a token budget only) stops asking once the tokens the
trials trained (a pruned run's by its last step) plus the budgets of the
trials in flight reach T, and waits for those in flight: a night of T / B
full runs, however many were pruned. SIGINT or SIGTERM stops asking and
cancels the trials in flight.
Every trial is one JSON line on --log (default: none) and one line for
people on stderr. Exit status: 0 done, 1 an error talking to the daemon
(not there, wrong token), 2 bad options, space file or base spec.
"""
import argparse
import copy
import json
import math
import os
import signal
import sys
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
DEFAULT_SPACE = os.path.join(ROOT, "experiments", "search", "space.json")
DEFAULT_BASE = os.path.join(ROOT, "experiments", "specs", "baseline.json")
DEFAULT_SPEC = os.path.join(ROOT, "experiments", "specs", "default.json")
NOT_AXES = ("name", "tags", "seed", "priority", "parent", "prune", "dataset",
            "time_budget_s", "token_budget", "eval_tokens")
AXIS_KEYS = ("path", "type", "values", "low", "high", "log", "also", "why", "when")
WHEN_OPS = ("not", "in", "above")
DERIVED = "train.batch_size"
MAX_AXES, MAX_VALUES, MAX_ALSO = 32, 64, 4
MAX_SPACE_BYTES = 1 << 20
HTTP_TIMEOUT = 10
TERMINAL_OK = "succeeded"
BUCKETS = 10  # reports per run: one per tenth of its budget


class BridgeError(Exception):
    """An error for people; code is the exit status."""

    def __init__(self, message, code=1):
        super().__init__(message)
        self.code = code


# ------------------------------------------------------------------ the space

def get_path(tree, path):
    node = tree
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return None, False
        node = node[part]
    return node, True


def set_path(tree, path, value):
    parts = path.split(".")
    node = tree
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise BridgeError(f"base spec: {path}: {part} is not an object", 2)
    node[parts[-1]] = copy.deepcopy(value)


def round_sig(x, digits=4):
    if x == 0 or not math.isfinite(x):
        return x
    scale = 10 ** (digits - 1 - math.floor(math.log10(abs(x))))
    return round(x * scale) / scale


def load_json(path, what, limit=MAX_SPACE_BYTES):
    try:
        with open(path, "rb") as f:
            raw = f.read(limit + 1)
    except OSError as e:
        raise BridgeError(f"{what} {path}: {e.strerror}", 2)
    if len(raw) > limit:
        raise BridgeError(f"{what} {path}: larger than {limit} bytes", 2)
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise BridgeError(f"{what} {path}: not JSON: {e}", 2)


def parse_space(doc, what, defaults):
    """The axes of a space file as dicts; BridgeError(code 2) naming the axis."""
    def bad(msg):
        raise BridgeError(f"{what}: {msg}", 2)

    if not isinstance(doc, dict):
        bad("not a JSON object")
    axes = doc.get("axes")
    if not isinstance(axes, list) or not 1 <= len(axes) <= MAX_AXES:
        bad(f"axes: expected an array of 1 to {MAX_AXES} axes")
    out = []

    def check_path(p, where):
        if not isinstance(p, str) or not p:
            bad(f'{where}: expected a spec path like "model.depth"')
        if p.split(".")[0] in NOT_AXES:
            bad(f"{where}: {p} labels the run or sets its scope (dataset, budget, "
                "evaluation); it is not an axis to search")
        if p == DERIVED:
            bad(f"{where}: {DERIVED} is derived, never an axis (the largest power of two "
                "at most the base spec's that divides total_batch_tokens / seq_len): make "
                "train.total_batch_tokens the axis")
        v, found = get_path(defaults, p)
        if not found or isinstance(v, dict):
            bad(f"{where}: {p} is not a field of a spec")

    for i, ax in enumerate(axes):
        where = f"axes[{i}]"
        if not isinstance(ax, dict):
            bad(f"{where}: expected an object")
        for k in ax:
            if k not in AXIS_KEYS:
                bad(f'{where}: unknown key "{k}" ({", ".join(AXIS_KEYS)})')
        path = ax.get("path")
        check_path(path, f"{where}.path")
        if any(a["path"] == path for a in out):
            bad(f"{where}: {path} is already an axis")
        typ = ax.get("type")
        if typ not in ("int", "float", "choice"):
            bad(f'{where}.type: expected "int", "float" or "choice"')
        axis = {"path": path, "type": typ, "also": []}
        if "values" in ax:
            if "low" in ax or "high" in ax:
                bad(f'{where}: either "values" or "low"/"high", not both')
            vals = ax["values"]
            if not isinstance(vals, list) or not 1 <= len(vals) <= MAX_VALUES:
                bad(f"{where}.values: expected an array of 1 to {MAX_VALUES} values")
            for k, v in enumerate(vals):
                if typ == "choice":
                    ok = isinstance(v, (str, bool, int, float))
                else:
                    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                    ok = ok and (typ == "float" or float(v).is_integer())
                if not ok:
                    bad(f"{where}.values[{k}]: expected "
                        + {"int": "an integer", "float": "a number", "choice": "a string"}[typ])
                if typ == "int":
                    vals[k] = int(v)
                for j in range(k):
                    if vals[j] == vals[k] and type(vals[j]) is type(vals[k]):
                        bad(f"{where}.values[{k}]: repeats values[{j}]")
            axis["values"] = vals
        else:
            if typ == "choice":
                bad(f'{where}: a choice lists its "values"')
            lo, hi, lg = ax.get("low"), ax.get("high"), ax.get("log", False)
            num = (int, float)
            if not (isinstance(lo, num) and isinstance(hi, num)) or isinstance(lo, bool) \
                    or isinstance(hi, bool) or not (math.isfinite(lo) and math.isfinite(hi)):
                bad(f'{where}: expected "values", or numbers "low" and "high"')
            if not isinstance(lg, bool):
                bad(f"{where}.log: expected true or false")
            if not lo < hi:
                bad(f"{where}: low {lo} is not below high {hi}")
            if typ == "int" and not (float(lo).is_integer() and float(hi).is_integer()):
                bad(f"{where}: an int range has integer bounds, not {lo}..{hi}")
            if lg and lo <= 0:
                bad(f"{where}: a log range needs low > 0, not {lo}")
            axis.update(low=int(lo) if typ == "int" else float(lo),
                        high=int(hi) if typ == "int" else float(hi), log=lg)
        also = ax.get("also", [])
        if not isinstance(also, list) or len(also) > MAX_ALSO:
            bad(f"{where}.also: expected an array of at most {MAX_ALSO} paths")
        for k, p in enumerate(also):
            check_path(p, f"{where}.also[{k}]")
        axis["also"] = list(also)
        if "why" in ax and not isinstance(ax["why"], str):
            bad(f"{where}.why: expected a sentence (a string)")
        if "when" in ax:
            axis["when"] = parse_when(ax["when"], out, axes, i, path, f"{where}.when", bad)
        out.append(axis)
    return out


def same_value(a, b):
    """Two JSON values equal as the C reader compares them (a number by value)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b)
    return type(a) is type(b) and a == b


def axis_holds(axis, v):
    """Is v one of a listed axis' values, or a number in a range axis' bounds?"""
    if "values" in axis:
        return any(same_value(x, v) for x in axis["values"])
    return isinstance(v, (int, float)) and not isinstance(v, bool) and \
        axis["low"] <= v <= axis["high"]


def parse_when(w, earlier, all_axes, i, path, where, bad):
    """An axis' condition: {"path": an earlier axis, and one of not / in / above}."""
    if not isinstance(w, dict):
        bad(f'{where}: expected {{"path": an earlier axis, and "not", "in" or "above"}}')
    p = w.get("path")
    if not isinstance(p, str) or not p:
        bad(f'{where}.path: expected a spec path like "model.depth"')
    on = next((j for j, a in enumerate(earlier) if a["path"] == p), None)
    if on is None:
        what = "not an axis of the file"
        for a in all_axes:
            if isinstance(a, dict) and a.get("path") == p:
                what = "this axis" if p == path else "a later axis"
        bad(f"{where}.path: {p} is {what}; a condition names an axis before this one")
    for k in w:
        if k != "path" and k not in WHEN_OPS:
            bad(f'{where}: unknown key "{k}" (path, not, in, above)')
    ops = [k for k in WHEN_OPS if k in w]
    if len(ops) != 1:
        bad(f'{where}: expected exactly one of "not", "in", "above"')
    op, arg, cond = ops[0], w[ops[0]], earlier[on]
    if op == "above":
        numeric = isinstance(arg, (int, float)) and not isinstance(arg, bool) and \
            math.isfinite(arg) and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                       for v in cond.get("values", []))
        if not numeric:
            bad(f"{where}.above: expected a number, on a numeric axis")
        return {"path": p, "above": arg}
    if not isinstance(arg, list) or not 1 <= len(arg) <= MAX_VALUES:
        bad(f"{where}.{op}: expected an array of 1 to {MAX_VALUES} values")
    for k, v in enumerate(arg):
        if not axis_holds(cond, v):
            bad(f"{where}.{op}[{k}]: not a value of {p}")
    return {"path": p, op: list(arg)}


def when_holds(when, value, found):
    """Does an axis' condition hold on its axis' value (found: it has one)?"""
    if not found:
        return False
    if "above" in when:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and \
            value > when["above"]
    listed = any(same_value(v, value) for v in when.get("in", when.get("not", [])))
    return listed if "in" in when else not listed


def active(axes, i, lookup):
    """Is axes[i] active, its condition read through lookup(path) -> (value, found)
    (the condition's axis itself active)?"""
    when = axes[i].get("when")
    if when is None:
        return True
    j = next(k for k, a in enumerate(axes) if a["path"] == when["path"])
    return active(axes, j, lookup) and when_holds(when, *lookup(when["path"]))


def micro_batch(batch_size, total, seq_len):
    """The largest power of two at most batch_size dividing total / seq_len
    (batch_size when total is not a whole number of rows)."""
    if batch_size < 1 or seq_len < 1 or total < seq_len or total % seq_len:
        return batch_size
    rows, b = total // seq_len, 1
    while b * 2 <= batch_size:
        b *= 2
    while rows % b:
        b //= 2
    return b


def load_space(path, defaults_path=DEFAULT_SPEC):
    defaults = load_json(defaults_path, "default spec")
    return parse_space(load_json(path, "search space"), path, defaults), defaults


def suggest(trial, axis):
    """The trial's value for one axis (the Optuna parameter is named by its path)."""
    p = axis["path"]
    if "values" in axis:
        return trial.suggest_categorical(p, axis["values"])
    if axis["type"] == "int":
        return trial.suggest_int(p, axis["low"], axis["high"], log=axis["log"])
    v = round_sig(trial.suggest_float(p, axis["low"], axis["high"], log=axis["log"]))
    return min(max(v, axis["low"]), axis["high"])


def sample_point(trial, axes):
    """A point, define-by-run: each axis in the file's order, sampled only when
    its condition holds on what is sampled so far (an inactive axis is not a
    parameter of the trial, and not part of the point)."""
    point = {}
    for i, ax in enumerate(axes):
        if active(axes, i, lambda p: (point.get(p), p in point)):
            point[ax["path"]] = suggest(trial, ax)
    return point


def build_spec(base, defaults, axes, point):
    """base with point ({path: value}) written in, in the file's order and only
    where the axis is active (its condition read from what is written so far),
    its also paths, then the derived micro-batch."""
    spec = copy.deepcopy(base)

    def value(tree, p):
        v, found = get_path(tree, p)
        return (v, True) if found else get_path(defaults, p)

    for i, ax in enumerate(axes):
        if ax["path"] not in point or not active(axes, i, lambda p: value(spec, p)):
            continue
        for p in [ax["path"]] + ax["also"]:
            set_path(spec, p, point[ax["path"]])

    b = value(base, DERIVED)[0]
    t, T = value(spec, "train.total_batch_tokens")[0], value(spec, "model.seq_len")[0]
    if all(isinstance(x, int) and not isinstance(x, bool) for x in (b, t, T)):
        m = micro_batch(b, t, T)
        if m != b or get_path(spec, DERIVED)[1]:
            set_path(spec, DERIVED, m)
    return spec


def budget_of(spec, defaults):
    """("tokens", N) or ("time", S) of a spec, and its tokens per step."""
    def value(p):
        v, found = get_path(spec, p)
        return v if found else get_path(defaults, p)[0]
    tokens = value("token_budget") or 0
    step = value("train.total_batch_tokens")
    if tokens:
        return "tokens", float(tokens), step
    return "time", float(value("time_budget_s")), step


# ------------------------------------------------------------------ the daemon

class Daemon:
    def __init__(self, url, token):
        self.url = url.rstrip("/")
        self.token = token

    def call(self, method, path, body=None):
        """(status, parsed JSON or None). Raises BridgeError when nobody answers."""
        data = None
        headers = {"Accept": "application/json"}
        if method == "POST":
            # The daemon answers 415 to a POST of any other type.
            headers["Content-Type"] = "application/json"
            data = json.dumps(body if body is not None else {}).encode()
            if self.token:
                headers["Authorization"] = f"Bearer {self.token}"
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=HTTP_TIMEOUT) as r:
                status, raw = r.status, r.read()
        except urllib.error.HTTPError as e:
            status, raw = e.code, e.read()
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise BridgeError(f"no nightshift daemon at {self.url} ({reason}); start one "
                              "with `nightshift serve` or give --url")
        try:
            doc = json.loads(raw) if raw else None
        except ValueError:
            doc = None
        return status, doc

    def check(self):
        status, doc = self.call("GET", "/healthz")
        if status != 200 or not isinstance(doc, dict) or not doc.get("ok"):
            raise BridgeError(f"{self.url} does not answer like a nightshift daemon "
                              f"(GET /healthz: HTTP {status})")

    def check_base(self, base):
        """The token and the base spec, before anything is asked: POST /v1/cost
        (a POST, so it needs the token; it validates the spec and changes
        nothing)."""
        status, doc = self.call("POST", "/v1/cost", base)
        err = (doc or {}).get("error", {}) if isinstance(doc, dict) else {}
        if status == 401:
            raise BridgeError(f"the daemon refused the token: {err.get('message', '')} (give "
                              "--token, --token-file or NIGHTSHIFT_TOKEN)")
        if status == 400:
            raise BridgeError(f"the daemon refuses the base spec: {err.get('code')}: "
                              f"{err.get('message', '')}", 2)
        if status != 200:
            raise BridgeError(f"POST /v1/cost: HTTP {status} {err.get('code', '')}: "
                              f"{err.get('message', '')}")

    def submit(self, spec):
        """(experiment id, duplicate) or (None, (code, message)) when refused."""
        status, doc = self.call("POST", "/v1/experiments", spec)
        if status in (200, 201) and isinstance(doc, dict) and "id" in doc:
            return doc["id"], bool(doc.get("duplicate"))
        err = (doc or {}).get("error", {}) if isinstance(doc, dict) else {}
        code, msg = err.get("code", f"http_{status}"), err.get("message", "")
        if status == 401:
            raise BridgeError(f"the daemon refused the token: {msg} (give --token, "
                              "--token-file or NIGHTSHIFT_TOKEN)")
        if status == 415:
            raise BridgeError(f"the daemon refused the request's type: {msg}")
        return None, (code, msg)

    def experiment(self, eid):
        status, doc = self.call("GET", f"/v1/experiments/{eid}")
        if status != 200 or not isinstance(doc, dict):
            raise BridgeError(f"GET /v1/experiments/{eid}: HTTP {status}")
        return doc

    def cancel(self, eid):
        """HTTP 200, or 409 when the run ended first; anything else is an error
        (a cancel that silently fails would leave every pruned run training)."""
        status, doc = self.call("POST", f"/v1/experiments/{eid}/cancel")
        if status not in (200, 409):
            err = (doc or {}).get("error", {}) if isinstance(doc, dict) else {}
            raise BridgeError(f"POST /v1/experiments/{eid}/cancel: HTTP {status} "
                              f"{err.get('code', '')}: {err.get('message', '')}")
        return status, doc


def tokens_used(exp, step_tokens):
    """Training tokens an experiment consumed (its result's, else its last step's)."""
    res = exp.get("result") or {}
    if res.get("total_tokens"):
        return int(res["total_tokens"])
    steps = [m.get("step", 0) for m in exp.get("metrics") or []]
    prog = exp.get("progress") or {}
    last = max(steps + [prog.get("step") or 0])
    return int(last * (step_tokens or 0))


def progress_of(m, kind, budget, step_tokens):
    if kind == "tokens":
        return m.get("step", 0) * step_tokens / budget
    return (m.get("time_s") or 0) / budget


def new_reports(exp, done, kind, budget, step_tokens):
    """[(bucket, mean loss)] for the tenths of the budget a run has passed and
    were not reported yet (done: the buckets reported)."""
    ms = [m for m in exp.get("metrics") or [] if isinstance(m.get("loss"), (int, float))]
    if not ms or not budget:
        return []
    top = max(progress_of(m, kind, budget, step_tokens) for m in ms)
    out = []
    for b in range(1, BUCKETS + 1):
        key = b * (100 // BUCKETS)
        if key in done or top + 1e-9 < b / BUCKETS:
            continue
        lo, hi = (b - 1) / BUCKETS, b / BUCKETS
        w = [m["loss"] for m in ms if lo < progress_of(m, kind, budget, step_tokens) <= hi + 1e-9]
        if w and all(math.isfinite(x) for x in w):
            out.append((key, sum(w) / len(w)))
        done.add(key)
    return out


# ------------------------------------------------------------------ the loop

def make_study(args):
    import optuna  # here, so --check-space needs no Optuna
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if args.sampler == "tpe":
        sampler = optuna.samplers.TPESampler(seed=args.seed, n_startup_trials=args.startup)
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
    axes, defaults = load_space(args.space, args.defaults)
    base = load_json(args.base, "base spec")
    if not isinstance(base, dict):
        raise BridgeError(f"base spec {args.base}: not a JSON object", 2)
    if args.dataset:
        base["dataset"] = args.dataset
    if args.tokens:
        base.pop("time_budget_s", None)
        base["token_budget"] = args.tokens
    daemon = Daemon(args.url, args.token)
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
               "tokens": 0 if f["duplicate"] else tokens_used(exp, f["step_tokens"]),
               "val_bpb": None, "why": exp.get("reason")}
        if status == TERMINAL_OK and isinstance(res.get("val_bpb"), (int, float)) \
                and math.isfinite(res["val_bpb"]):
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
            while not stopping and asked < args.trials and len(inflight) < args.parallel:
                committed = sum(f["budget"] for f in inflight.values() if not f["duplicate"])
                if args.max_tokens and spent + committed >= args.max_tokens:
                    break
                trial = study.ask()
                asked += 1
                point = sample_point(trial, axes)
                spec = build_spec(base, defaults, axes, point)
                label = " ".join(f"{p.split('.')[-1]}={v}" for p, v in point.items())
                spec["name"] = f"optuna#{trial.number} {label}"[:120]
                spec["tags"] = ["optuna", args.sampler] + ([args.study_name] if args.study_name else [])
                eid, info = daemon.submit(spec)
                if eid is None:
                    code, msg = info
                    study.tell(trial, state=TrialState.FAIL)
                    record({"trial": trial.number, "id": None, "status": "refused",
                            "outcome": "refused", "code": code, "why": f"{code}: {msg}",
                            "params": point, "tokens": 0, "val_bpb": None, "duplicate": False})
                    continue
                kind, budget, step_tokens = budget_of(spec, defaults)
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
                for key, loss in new_reports(exp, f["reported"], f["kind"], f["budget"],
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
    if best:
        say(f"best: #{best['id']} val_bpb {best['val_bpb']:.4f}: {json.dumps(best['params'])}")
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
    ap.add_argument("--defaults", default=DEFAULT_SPEC, help=argparse.SUPPRESS)
    ap.add_argument("--dataset", help="replace the base spec's dataset")
    ap.add_argument("--tokens", type=int, help="a token budget instead of the base spec's budget")
    ap.add_argument("--sampler", choices=("tpe", "random"), default="tpe")
    ap.add_argument("--startup", type=int, default=10,
                    help="tpe: random trials before the model is used (default Optuna's 10)")
    ap.add_argument("--pruner", choices=("none", "median", "sha", "threshold"), default="none")
    ap.add_argument("--prune-above", type=float, default=math.inf,
                    help="--pruner threshold: prune a run whose training loss is above this")
    ap.add_argument("--trials", type=int, default=20, help="trials to ask (default %(default)s)")
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
            axes, _ = load_space(args.space, args.defaults)
            print(json.dumps(axes, indent=1))
            return 0
        if args.trials < 1 or args.parallel < 1 or args.poll <= 0:
            raise BridgeError("--trials and --parallel must be at least 1, --poll above 0", 2)
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
