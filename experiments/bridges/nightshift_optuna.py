"""nightshift_optuna - an Optuna study over a nightshift daemon, from your own script.

Your study, sampler, pruner and storage; the daemon trains each trial's spec:

    import optuna, nightshift_optuna as ns
    objective = ns.Objective("http://127.0.0.1:8080", token_file="state/token")
    study = optuna.create_study(
        study_name="night", storage="sqlite:///night.db", load_if_exists=True,
        direction="minimize",
        sampler=optuna.samplers.TPESampler(constraints_func=ns.constraints),
        pruner=optuna.pruners.MedianPruner(n_warmup_steps=30))
    study.optimize(objective, callbacks=[objective.stop_after(20)])
    print(ns.best(study))

(experiments/bridges on sys.path or PYTHONPATH; /usr/bin/python3 with
Debian's python3-optuna.) The space is experiments/search/space.json read by
experiments/search/space.py, the reader the agent's benchmarks use:
`suggest_spec(trial, space)` samples it define-by-run (an axis whose `when`
is false is not a parameter of the trial), writes the point into the base
spec with its `also` paths and derives the micro-batch.

Each trial's user_attrs: experiment_id, status and url (the run's page on
the dashboard); reason when the run did not succeed; refused (the daemon's
code and message) when the daemon refused the spec; duplicate_of when the
point had already run. A refused spec trains nothing and costs no run: the
trial is PRUNED with no report (Optuna's TPE ranks such a trial below every
completed one, so it steers away from the region; a +inf value would do the
same but Optuna 3.1's SQLite storage then answers it as best_trial) and the
constraint attr [1.0], so `constraints` tells a sampler built with
constraints_func that it is infeasible; `stop_after(n)` counts only trials
that reached a run. A run that failed, diverged or timed
out is FAIL; a pruned one (the study's pruner, from the training loss
reported at each tenth of the budget: steps 10, 20, ... 100) is cancelled on
the daemon and PRUNED. `best(study)` is the study's best feasible trial,
every invocation's, not only this one's.
"""
import copy
import importlib.util
import json
import math
import os
import sys
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))


def _load_space_module():
    """experiments/search/space.py under a name of its own (nightshift_space),
    so it neither needs experiments/search on sys.path nor takes the name
    `space` from a user's own module."""
    name = "nightshift_space"
    if name in sys.modules:
        return sys.modules[name]
    path = os.path.normpath(os.path.join(HERE, "..", "search", "space.py"))
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


nsspace = _load_space_module()

SPACE = nsspace.SPACE
BASELINE = nsspace.BASELINE
HTTP_TIMEOUT = 10
BUCKETS = 10  # reports per run: one per tenth of its budget


class BridgeError(Exception):
    """An error for people; code is the command's exit status."""

    def __init__(self, message, code=1):
        super().__init__(message)
        self.code = code


# ------------------------------------------------------------------ the space

def load_space(path=SPACE, base=None, base_path=BASELINE):
    """A space.Space from a space file; base (a spec dict) or base_path is the
    spec points are written into. BridgeError (code 2) naming the axis."""
    try:
        if base is None:
            base = nsspace.load_json(base_path)
        sp = nsspace.parse(nsspace.load_json(path), path, base=base)
    except nsspace.SpaceError as e:
        raise BridgeError(str(e), 2)
    except OSError as e:
        raise BridgeError(f"{path}: {e.strerror}", 2)
    except ValueError as e:
        raise BridgeError(f"{path}: not JSON: {e}", 2)
    # space.py does not check a condition's values against its axis' values;
    # a typo there would leave an axis silently never (or always) active.
    for i, ax in enumerate(sp.axes):
        w = ax.when or {}
        cond = sp.by_path.get(w.get("path"))
        for op in ("not", "in"):
            for k, v in enumerate(w.get(op, [])):
                if cond is not None and cond.listed and cond.index(v) < 0:
                    raise BridgeError(f"{path}: axes[{i}].when.{op}[{k}]: not a value of "
                                      f"{cond.path}", 2)
    return sp


def suggest_axis(trial, ax):
    """The trial's value for one axis (the Optuna parameter is named by its path)."""
    if ax.listed:
        return trial.suggest_categorical(ax.path, ax.values)
    if ax.type == "int":
        return trial.suggest_int(ax.path, ax.low, ax.high, log=ax.log)
    v = nsspace.round_sig(trial.suggest_float(ax.path, ax.low, ax.high, log=ax.log))
    return min(max(v, ax.low), ax.high)


def suggest_point(trial, space):
    """A point, define-by-run: each axis in the file's order, sampled only when
    its condition holds on what is sampled so far (the base spec's value for a
    condition on a path that is no axis); an axis whose condition's axis is
    inactive is inactive too, as space.Space.active has it."""
    point = {}

    def lookup(p):
        return point[p] if p in point else space.spec_value(space.base, p)

    for ax in space.axes:
        w = ax.when
        if w is not None and w["path"] in space.by_path and w["path"] not in point:
            continue
        if space.condition(ax, lookup):
            point[ax.path] = suggest_axis(trial, ax)
    return point


def suggest_spec(trial, space, base=None):
    """The spec of a trial: its point (suggest_point) written into base (the
    space's base spec when None) by space.apply. A new dict."""
    return space.apply(suggest_point(trial, space), base)


# ------------------------------------------------------------------ the daemon

def read_token(token=None, token_file=None):
    if token:
        return token
    if token_file:
        try:
            with open(token_file) as f:
                return f.read().strip()
        except OSError as e:
            raise BridgeError(f"token file {token_file}: {e.strerror}", 2)
    return os.environ.get("NIGHTSHIFT_TOKEN")


class Client:
    """The daemon's HTTP API, the calls a study needs."""

    def __init__(self, url, token=None):
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


# ------------------------------------------------------------- budget, reports

def budget_of(spec, defaults, client=None):
    """("tokens", N) or ("time", S) of a spec, and its tokens per step. A
    FLOPs budget is the token budget it buys (budget / the model's FLOPs per
    token, as the engine counts it), asked of the daemon's POST /v1/cost
    through client."""
    def value(p):
        v, found = nsspace.get_path(spec, p)
        return v if found else nsspace.get_path(defaults, p)[0]
    tokens = value("token_budget") or 0
    step = value("train.total_batch_tokens")
    flops = spec.get("flops_budget") or 0
    if flops and client is not None:
        status, doc = client.call("POST", "/v1/cost", spec)
        per_token = (doc or {}).get("flops_per_token") if isinstance(doc, dict) else None
        if status == 200 and per_token:
            return "tokens", float(flops) / float(per_token), step
    if flops:
        raise BridgeError("a spec with flops_budget needs the daemon's POST /v1/cost "
                          "to know the tokens it buys")
    if tokens:
        return "tokens", float(tokens), step
    return "time", float(value("time_budget_s")), step


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


def succeeded_value(exp):
    """A succeeded run's val_bpb, else None."""
    res = exp.get("result") or {}
    v = res.get("val_bpb")
    if exp.get("status") == "succeeded" and isinstance(v, (int, float)) and math.isfinite(v):
        return float(v)
    return None


# ------------------------------------------------------------ study helpers

def constraints(trial):
    """Optuna's constraints_func: [1.0] for a trial whose spec the daemon
    refused (infeasible), [0.0] otherwise."""
    return list(trial.user_attrs.get("constraint", [0.0]))


def mark_refused(trial, code, message):
    """Record a refusal on a trial (user_attrs refused and constraint)."""
    trial.set_user_attr("refused", f"{code}: {message}"[:1000])
    trial.set_user_attr("constraint", [1.0])


def mark_submitted(trial, client, eid, duplicate):
    trial.set_user_attr("experiment_id", eid)
    trial.set_user_attr("url", f"{client.url}/#/e/{eid}")
    trial.set_user_attr("constraint", [0.0])
    if duplicate:
        trial.set_user_attr("duplicate_of", eid)


def mark_ended(trial, exp):
    trial.set_user_attr("status", exp.get("status"))
    if exp.get("reason"):
        trial.set_user_attr("reason", str(exp["reason"])[:1000])


def best(study):
    """The study's best trial that ran (COMPLETE, finite value, not refused), over
    every trial in its storage, as a dict: number, value, experiment_id, url,
    params; None when no run succeeded."""
    import optuna
    top = None
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        if t.value is None or not math.isfinite(t.value) or "refused" in t.user_attrs:
            continue
        if top is None or t.value < top.value:
            top = t
    if top is None:
        return None
    return {"number": top.number, "value": top.value,
            "experiment_id": top.user_attrs.get("experiment_id"),
            "url": top.user_attrs.get("url"), "params": dict(top.params)}


# -------------------------------------------------------------- the objective

class Objective:
    """study.optimize's objective: one trial, one run on the daemon.

    url, token (or token_file, or $NIGHTSHIFT_TOKEN): the daemon. space: a
    space.Space (default experiments/search/space.json over base). base: the
    spec points are written into (default experiments/specs/baseline.json).
    poll: seconds between reads of the run. tags: added to each run's tags.
    Safe to call from study.optimize(n_jobs=N): each call is one trial."""

    def __init__(self, url, token=None, token_file=None, space=None, base=None, poll=1.0,
                 tags=("optuna",)):
        self.client = Client(url, read_token(token, token_file))
        self.base = copy.deepcopy(base) if base is not None else nsspace.load_json(BASELINE)
        self.space = space if space is not None else load_space(base=self.base)
        self.poll = poll
        self.tags = list(tags)

    def stop_after(self, n):
        """A callback for study.optimize that stops the study once n trials of
        this invocation reached a run (refused specs do not count)."""
        ran = []

        def callback(study, trial):
            if "refused" not in trial.user_attrs:
                ran.append(trial.number)
            if len(ran) >= n:
                study.stop()
        return callback

    def __call__(self, trial):
        import optuna
        spec = suggest_spec(trial, self.space, self.base)
        label = " ".join(f"{p.split('.')[-1]}={v}" for p, v in trial.params.items())
        spec["name"] = f"optuna#{trial.number} {label}"[:120]
        spec["tags"] = list(self.tags)
        eid, info = self.client.submit(spec)
        if eid is None:
            mark_refused(trial, *info)
            raise optuna.TrialPruned(f"refused: {info[0]}")
        mark_submitted(trial, self.client, eid, info)
        kind, budget, step_tokens = budget_of(spec, self.space.defaults, self.client)
        done = set()
        try:
            while True:
                exp = self.client.experiment(eid)
                if exp.get("status") not in ("queued", "running"):
                    break
                for key, loss in ([] if info else new_reports(exp, done, kind, budget, step_tokens)):
                    trial.report(loss, key)
                    if trial.should_prune():
                        status, _ = self.client.cancel(eid)
                        trial.set_user_attr("status", "cancelled")
                        trial.set_user_attr("reason", f"pruned at {key}% of the budget "
                                            f"(mean loss {loss:.4f}); cancel: HTTP {status}")
                        raise optuna.TrialPruned()
                time.sleep(self.poll)
        except (KeyboardInterrupt, SystemExit):
            if not info:
                self.client.cancel(eid)
            raise
        mark_ended(trial, exp)
        v = succeeded_value(exp)
        if v is not None:
            return v
        if exp.get("status") == "pruned":
            raise optuna.TrialPruned()
        return float("nan")  # Optuna records a NaN as FAIL (the sampler skips it)
