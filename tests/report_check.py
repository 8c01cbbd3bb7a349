#!/usr/bin/env python3
"""Recompute a night report from the database, independently, and compare.

    report_check.py DB REPORT.json [BASELINE_ID]

DB is a nightshift.db; REPORT.json what GET /v1/report (daemon/serve/report.c)
answered for one scope, whose dataset and budget it names. Every number of
the report is computed again here from the base tables (experiments, results,
test_results) with this script's own SQL and arithmetic -- never from the
configs or scopes summaries or the leaderboard view the daemon reads -- and
compared. Runs are placed in the scope by their spec's own fields; the one
thing taken from the daemon as it is, is which configuration a run belongs
to (experiments.config_hash, written by the spec parser). Prints each mismatch and exits 1 if there is any, 0 otherwise.
tests/test_report.c runs it (python3 from Debian, no other module).
"""
import json
import math
import sqlite3
import sys
from datetime import datetime, timezone

NOT_AXES = {"seed", "name", "tags", "priority", "parent", "prune"}
FAILURES = ["failed", "crashed", "timeout", "oom", "diverged", "interrupted"]
MAX_FAILURES = 100
TOL = 1e-9

problems = []


def bad(what, got, want):
    problems.append(f"{what}: report says {got!r}, recomputed {want!r}")


def close(a, b, tol=TOL):
    if a is None or b is None:
        return a is None and b is None
    return abs(a - b) <= tol * max(1.0, abs(a), abs(b))


def t_two_sided(t, df):
    """P(|T| >= |t|) for Student's t with a whole number df of degrees of
    freedom, by the closed form (Abramowitz and Stegun 26.7.3-4): with
    theta = atan(|t| / sqrt(df)), P(|T| < |t|) is
    2/pi (theta + sin cos (1 + 2/3 cos^2 + 2*4/(3*5) cos^4 + ... cos^(df-3)))
    for odd df and sin (1 + 1/2 cos^2 + 1*3/(2*4) cos^4 + ... cos^(df-2)) for even."""
    th = math.atan(abs(t) / math.sqrt(df))
    c2 = math.cos(th) ** 2
    series, term = 1.0, 1.0
    if df % 2:
        for k in range(1, (df - 1) // 2):
            term *= 2 * k / (2 * k + 1) * c2
            series += term
        inside = 2 / math.pi * (th + (math.sin(th) * math.cos(th) * series if df > 1 else 0))
    else:
        for k in range(1, df // 2):
            term *= (2 * k - 1) / (2 * k) * c2
            series += term
        inside = math.sin(th) * series
    return 1 - inside


def expect(what, got, want, tol=TOL):
    if isinstance(want, float) or isinstance(got, float):
        if not close(got, want, tol):
            bad(what, got, want)
    elif got != want:
        bad(what, got, want)


def seconds(iso):
    if iso is None:
        return None
    return datetime.strptime(iso, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc).timestamp()


def mean(v):
    return sum(v) / len(v)


def sd(v):
    if len(v) < 2:
        return None
    m = mean(v)
    return math.sqrt(sum((x - m) ** 2 for x in v) / (len(v) - 1))


def leaves(spec, prefix="", top=True):
    out = {}
    for k, v in spec.items():
        if top and k in NOT_AXES:
            continue
        path = f"{prefix}.{k}" if prefix else k
        if isinstance(v, dict):
            out.update(leaves(v, path, False))
        else:
            out[path] = v
    return out


def is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def text(v):
    return json.dumps(v, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


ABSENT = object()


def cmp_values(a, b):
    if a is ABSENT or b is ABSENT:
        return (a is not ABSENT) - (b is not ABSENT)
    if is_number(a) and is_number(b):
        return (a > b) - (a < b)
    ta = text(a) if not is_number(a) else repr(a)
    tb = text(b) if not is_number(b) else repr(b)
    return (ta > tb) - (ta < tb)


def json_of(v):
    return None if v is ABSENT else v


def main():
    db_path, report_path = sys.argv[1], sys.argv[2]
    baseline_id = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    with open(report_path) as f:
        rep = json.load(f)
    db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    db.row_factory = sqlite3.Row
    ds, kind, budget, evaluation = rep["dataset"], rep["budget_kind"], rep["budget"], rep["eval_tokens"]

    # The scope, decided from each spec's own fields.
    runs = []
    for r in db.execute(
        "SELECT e.id, e.name, e.status, e.reason, e.seed, e.spec, e.config_hash, e.started, e.finished,"
        " e.eval_tokens,"
        " r.val_bpb, t.experiment_id AS has_test, t.test_bpb, t.reason AS test_reason"
        " FROM experiments e LEFT JOIN results r ON r.experiment_id = e.id"
        " LEFT JOIN test_results t ON t.experiment_id = e.id ORDER BY e.id"
    ):
        spec = json.loads(r["spec"])
        tok = spec.get("token_budget") or 0
        r_kind, r_budget = ("tokens", float(tok)) if tok > 0 else ("time", float(spec["time_budget_s"]))
        # The evaluation is the column spec.c wrote (a cap that covers the whole
        # validation split is 0, which needs the dataset's size to decide).
        if (spec.get("dataset", "default") != ds or r_kind != kind or r_budget != budget
                or r["eval_tokens"] != evaluation):
            continue
        d = dict(r)
        d["spec"] = spec
        # The configuration: the store's config_hash column, which the spec parser
        # writes (equivalent spellings of one model are one configuration).
        d["config"] = r["config_hash"]
        runs.append(d)

    # Runs by status.
    expect("runs.total", rep["runs"]["total"], len(runs))
    by = {}
    for r in runs:
        by[r["status"]] = by.get(r["status"], 0) + 1
    expect("runs.by_status", rep["runs"]["by_status"], by)

    # Time.
    started = [r for r in runs if r["started"]]
    finished = [r for r in runs if r["finished"]]
    t = rep["time"]
    first = min(started, key=lambda r: seconds(r["started"])) if started else None
    last = max(finished, key=lambda r: seconds(r["finished"])) if finished else None
    expect("time.first_started", t["first_started"], first["started"] if first else None)
    expect("time.last_finished", t["last_finished"], last["finished"] if last else None)
    t0 = seconds(first["started"]) if first else None
    if first and last:
        expect("time.hours", t["hours"], (seconds(last["finished"]) - t0) / 3600, 1e-7)
    run_h = sum(seconds(r["finished"]) - seconds(r["started"]) for r in runs if r["started"] and r["finished"]) / 3600
    expect("time.run_hours", t["run_hours"], run_h, 1e-7)

    # Configurations: the succeeded runs grouped by spec without seed etc.
    groups = {}
    for r in runs:
        if r["status"] == "succeeded" and r["val_bpb"] is not None:
            groups.setdefault(r["config"], []).append(r)
    expect("configurations", rep["configurations"], len(groups))
    configs = {}
    for key, rs in groups.items():
        v = [r["val_bpb"] for r in rs]
        configs[key] = {"id": min(r["id"] for r in rs), "n": len(v), "mean": mean(v), "sd": sd(v),
                        "runs": rs, "leaves": leaves(min(rs, key=lambda r: r["id"])["spec"])}

    # The noise: pooled within-configuration sd over configurations with repeats.
    rep_groups = [c for c in configs.values() if c["n"] >= 2]
    df = sum(c["n"] - 1 for c in rep_groups)
    ss = sum(sum((r["val_bpb"] - c["mean"]) ** 2 for r in c["runs"]) for c in rep_groups)
    noise = math.sqrt(ss / df) if df else None
    expect("noise.sd", rep["noise"]["sd"], noise, 1e-7)
    expect("noise.configurations", rep["noise"]["configurations"], len(rep_groups))
    expect("noise.runs", rep["noise"]["runs"], sum(c["n"] for c in rep_groups))

    # Best and baseline, each with its test figure.
    def test_of(c):
        vals = [r["test_bpb"] for r in c["runs"] if r["test_bpb"] is not None]
        reasons = [r["test_reason"] for r in c["runs"] if r["test_reason"] is not None]
        return {"test_bpb": mean(vals) if vals else None, "test_bpb_sd": sd(vals), "test_n": len(vals),
                "runs": len(c["runs"]), "has_reason": not vals,
                "measured_any": any(r["has_test"] is not None for r in c["runs"]), "reasons": reasons}

    def check_config(what, got, c):
        if c is None:
            expect(what, got, None)
            return
        if got is None:
            bad(what, None, c["id"])
            return
        expect(f"{what}.id", got["id"], c["id"])
        expect(f"{what}.n_seeds", got["n_seeds"], c["n"])
        expect(f"{what}.mean_val_bpb", got["mean_val_bpb"], c["mean"])
        expect(f"{what}.val_bpb_sd", got["val_bpb_sd"], c["sd"], 1e-7)
        want, have = test_of(c), got["test"]
        expect(f"{what}.test.test_bpb", have["test_bpb"], want["test_bpb"])
        expect(f"{what}.test.test_bpb_sd", have["test_bpb_sd"], want["test_bpb_sd"], 1e-7)
        expect(f"{what}.test.test_n", have["test_n"], want["test_n"])
        expect(f"{what}.test.runs", have["runs"], want["runs"])
        if want["has_reason"] != (have["test_reason"] is not None):
            bad(f"{what}.test.test_reason", have["test_reason"], "a reason" if want["has_reason"] else None)
        if want["reasons"] and want["has_reason"] and have["test_reason"] not in want["reasons"]:
            bad(f"{what}.test.test_reason", have["test_reason"], want["reasons"])
        if want["has_reason"] and not want["measured_any"] and "not measured" not in have["test_reason"]:
            bad(f"{what}.test.test_reason", have["test_reason"], "not measured ...")

    ranked = sorted(configs.values(), key=lambda c: (c["mean"], c["id"]))
    best = ranked[0] if ranked else None
    check_config("best", rep["best"], best)
    base = None
    if baseline_id:
        hit = [r for r in runs if r["id"] == baseline_id]
        base = configs.get(hit[0]["config"]) if hit else None
    else:
        ok = [r for r in runs if r["status"] == "succeeded"]
        base = configs.get(ok[0]["config"]) if ok else None
    check_config("baseline", rep["baseline"], base)

    v = rep["versus_baseline"]
    if best and base:
        delta = best["mean"] - base["mean"]
        se = noise * math.sqrt(1 / best["n"] + 1 / base["n"]) if noise else None
        expect("versus.delta", v["delta"], delta)
        expect("versus.noise_sd", v["noise_sd"], noise, 1e-7)
        expect("versus.se", v["se"], se, 1e-7)
        same = best is base
        expect("versus.z", v["z"], 0.0 if same else (delta / se if se else None), 1e-7)
        expect("versus.in_noise_sds", v["in_noise_sds"], 0.0 if same else (delta / noise if noise else None), 1e-7)
        # z is a Student's t on the noise's degrees of freedom (the closed form
        # for whole df below, not the report's incomplete beta function)
        expect("versus.noise_df", v["noise_df"], df if noise else None)
        expect("versus.p_two_sided", v["p_two_sided"],
               t_two_sided(delta / se, df) if se and not same else None, 1e-9)
        if noise:
            expect("two-sided tail at versus.t_at_5_percent", t_two_sided(v["t_at_5_percent"], df),
                   0.05, 1e-9)
        else:
            expect("versus.t_at_5_percent", v["t_at_5_percent"], None)
        paths = sorted(set(best["leaves"]) | set(base["leaves"]))
        want = [{"axis": p, "from": base["leaves"].get(p), "to": best["leaves"].get(p)}
                for p in paths if base["leaves"].get(p, ABSENT) != best["leaves"].get(p, ABSENT)]
        expect("versus.changes", v["changes"], want)
    else:
        expect("versus_baseline", v, None)

    # The anytime curve: every run that started and finished, in finish order.
    done = sorted([r for r in runs if r["started"] and r["finished"]], key=lambda r: (r["finished"], r["id"]))
    expect("anytime length", len(rep["anytime"]), len(done))
    spent, best_so_far = 0.0, None
    for i, (r, p) in enumerate(zip(done, rep["anytime"])):
        spent += seconds(r["finished"]) - seconds(r["started"])
        val = r["val_bpb"] if r["status"] == "succeeded" else None
        if val is not None and (best_so_far is None or val < best_so_far):
            best_so_far = val
        expect(f"anytime[{i}].id", p["id"], r["id"])
        expect(f"anytime[{i}].status", p["status"], r["status"])
        expect(f"anytime[{i}].elapsed_h", p["elapsed_h"], (seconds(r["finished"]) - t0) / 3600, 1e-7)
        expect(f"anytime[{i}].spent_h", p["spent_h"], spent / 3600, 1e-7)
        expect(f"anytime[{i}].val_bpb", p["val_bpb"], val)
        expect(f"anytime[{i}].best", p["best"], best_so_far)

    # Axes: every pair of configurations that differ in exactly one leaf.
    pairs = {}
    cl = list(configs.values())
    for i in range(len(cl)):
        for j in range(i + 1, len(cl)):
            a, b = cl[i]["leaves"], cl[j]["leaves"]
            diff = [p for p in set(a) | set(b) if a.get(p, ABSENT) != b.get(p, ABSENT)]
            if len(diff) != 1:
                continue
            p = diff[0]
            lo, hi = cl[i], cl[j]
            if cmp_values(lo["leaves"].get(p, ABSENT), hi["leaves"].get(p, ABSENT)) > 0:
                lo, hi = hi, lo
            pairs.setdefault(p, []).append((lo, hi, hi["mean"] - lo["mean"]))

    def effect(ps):
        d = [x[2] for x in ps]
        m = mean(d)
        if len(d) >= 2:
            return m, sd(d) / math.sqrt(len(d)), "pairs"
        if noise:
            return m, noise * math.sqrt(1 / ps[0][0]["n"] + 1 / ps[0][1]["n"]), "noise"
        return m, None, None

    got_axes = {a["axis"]: a for a in rep["axes"]}
    expect("axes", sorted(got_axes), sorted(pairs))
    expect("axes order", [a["axis"] for a in rep["axes"]], sorted(pairs))
    for p, ps in pairs.items():
        a = got_axes.get(p)
        if not a:
            continue
        numbers = all(is_number(lo["leaves"].get(p)) and is_number(hi["leaves"].get(p)) for lo, hi, _ in ps)
        expect(f"axes[{p}].kind", a["kind"], "number" if numbers else "category")
        expect(f"axes[{p}].pairs", a["pairs"], len(ps))
        m, se, frm = effect(ps)
        if numbers:
            expect(f"axes[{p}].mean", a["mean"], m)
            expect(f"axes[{p}].se", a["se"], se, 1e-7)
            expect(f"axes[{p}].se_from", a["se_from"], frm)
        else:
            expect(f"axes[{p}].mean", a["mean"], None)
        moves = {}
        for lo, hi, dlt in ps:
            key = (text(json_of(lo["leaves"].get(p, ABSENT))), text(json_of(hi["leaves"].get(p, ABSENT))))
            moves.setdefault(key, []).append((lo, hi, dlt))
        got_moves = {(text(mv["from"]), text(mv["to"])): mv for mv in a["moves"]}
        expect(f"axes[{p}].moves", sorted(got_moves), sorted(moves))
        for key, mps in moves.items():
            mv = got_moves.get(key)
            if not mv:
                continue
            m, se, frm = effect(mps)
            expect(f"axes[{p}] {key} pairs", mv["pairs"], len(mps))
            expect(f"axes[{p}] {key} mean", mv["mean"], m)
            expect(f"axes[{p}] {key} se", mv["se"], se, 1e-7)
            expect(f"axes[{p}] {key} se_from", mv["se_from"], frm)

    # Failures, and the runs pruned.
    for key, statuses in (("failures", FAILURES), ("pruned", ["pruned"])):
        picked = [r for r in runs if r["status"] in statuses]
        expect(f"{key}_total", rep[f"{key}_total"], len(picked))
        want = [{"id": r["id"], "name": r["name"], "status": r["status"], "reason": r["reason"]}
                for r in picked[:MAX_FAILURES]]
        expect(key, rep[key], want)

    for p in problems:
        print(p)
    print(f"report_check: {len(runs)} runs, {len(configs)} configurations, "
          f"{sum(len(v) for v in pairs.values())} one-axis pairs, {len(problems)} mismatches")
    sys.exit(1 if problems else 0)


main()
