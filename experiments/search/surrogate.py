#!/usr/bin/python3
"""surrogate.py - a surrogate of a recorded landscape (landscape.py): any spec
of the space answered with a mean val_bpb plus noise drawn as the measured
seed noise, or as a failure.

    /usr/bin/python3 experiments/search/surrogate.py --landscape FILE.jsonl
        [--space FILE] [--check] [--out FILE.json]

The model is a random forest (sklearn's RandomForestRegressor) on the mean
val_bpb of each point over its succeeded seeds. Why a forest and not a
Gaussian process: the space is mostly listed values and choices with
conditional axes (an inactive axis is one constant coordinate), where a
stationary kernel is a poor prior and one length scale per one-hot column
is many hyperparameters for ~150 points; trees split on categories and on
the inactive marker as on any value, need no scaling or kernel choice, and
their predictions stay inside the range of what was measured (no
extrapolation to a fictitious optimum past the edge of the data, which
would reward a search for leaving the recorded region). HPOBench's and Syne
Tune's tabular/surrogate benchmarks use forests for the same reasons. The
price: a forest is piecewise constant, so the surrogate's landscape has
plateaus; the held-out check below measures what that costs in ranking.

Noise: a run answers mean + N(0, sd^2), sd pooled over the landscape's
pairs of seeds (sd^2 = mean over pairs of (a - b)^2 / 2), from the better
half of the points by default (the region a search ends in; the noise of
poor configurations is larger and would exaggerate it there).

Failures: a random forest classifier on the same features gives each point
the probability that a run fails (diverged, failed, out of memory,
timeout); a run fails when a uniform draw falls below it. With fewer than
two failed runs in the landscape nothing fails. A spec the engine refuses
(space.refusal) is refused before it reaches the surrogate.

--check: the held-out check. The points are split 80/20 (seeded); the
forest fitted on 80% ranks the other 20% against their measured means
(Spearman), and counts how many of the real top 10 of the held-out points it
puts in its own top 10; the same over all points out of fold (5-fold), and
beside it the ceiling the noise allows (the Spearman of seed 1 against seed 2
of every point: a measurement ranks itself no better than that).
"""
import argparse
import hashlib
import json
import math
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import space as spacemod  # noqa: E402

FAILED = ("failed", "diverged", "oom", "timeout", "crashed")


def read_landscape(paths):
    """{key: {"spec", "point", "runs": [(seed, status, val_bpb)]}} from JSONL files
    (refused draws and headers skipped)."""
    pts = {}
    for path in paths:
        with open(path) as f:
            for line in f:
                if not line.strip():
                    continue
                r = json.loads(line)
                if r.get("status") == "refused" or "spec" not in r:
                    continue
                p = pts.setdefault(r["key"], {"spec": r["spec"], "point": r["point"],
                                              "kind": r.get("kind"), "runs": []})
                p["runs"].append((r["seed"], r["status"], r.get("val_bpb")))
    return pts


def point_mean(p):
    vals = [v for _, st, v in p["runs"] if st == "succeeded" and v is not None]
    return sum(vals) / len(vals) if vals else None


def seed_pairs(pts):
    """[(a, b)] of points with two succeeded seeds (the first two by seed)."""
    out = []
    for p in pts.values():
        vals = sorted((s, v) for s, st, v in p["runs"] if st == "succeeded" and v is not None)
        if len(vals) >= 2:
            out.append((vals[0][1], vals[1][1]))
    return out


def pooled_sd(pairs):
    if not pairs:
        return float("nan")
    return math.sqrt(sum((a - b) ** 2 / 2 for a, b in pairs) / len(pairs))


def unit_hash(*parts):
    """A uniform [0, 1) from the parts (the same parts give the same number:
    a replay's noise is a function of its seed, the configuration and the run's seed)."""
    h = hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(h[:8], "big") / 2 ** 64


def normal_hash(*parts):
    u1 = max(unit_hash(*parts, "u1"), 1e-300)
    u2 = unit_hash(*parts, "u2")
    return math.sqrt(-2 * math.log(u1)) * math.cos(2 * math.pi * u2)


class Surrogate:
    """mean(spec), fail_prob(spec) and run(spec, *noise_key) -> (status, val_bpb).
    Subclasses provide _predict(features) and _fail(features) on lists of rows."""

    def __init__(self, space, noise_sd):
        self.space, self.noise_sd = space, noise_sd
        self._cache = {}

    def _key(self, spec):
        return json.dumps(self.space.point_of(spec), sort_keys=True)

    def _answer(self, spec):
        k = self._key(spec)
        if k not in self._cache:
            x = self.space.encode_spec(spec)
            self._cache[k] = (float(self._predict([x])[0]), float(self._fail([x])[0]))
        return self._cache[k]

    def mean(self, spec):
        return self._answer(spec)[0]

    def fail_prob(self, spec):
        return self._answer(spec)[1]

    def means(self, specs):
        """Means of many specs in one call (the long search's speed)."""
        xs = [self.space.encode_spec(s) for s in specs]
        return [float(v) for v in self._predict(xs)]

    def run(self, spec, *noise_key):
        """One simulated run: ("failed", None) or ("succeeded", mean + noise); the
        draws are functions of noise_key (e.g. night seed, configuration, run seed)."""
        m, pf = self._answer(spec)
        key = (self._key(spec),) + noise_key
        if pf > 0 and unit_hash(*key, "fail") < pf:
            return "failed", None
        return "succeeded", m + self.noise_sd * normal_hash(*key, "noise")


class ForestSurrogate(Surrogate):
    def __init__(self, space, pts, noise="better-half", trees=100, seed=0):
        import numpy as np
        from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor
        keys = [k for k, p in pts.items() if point_mean(p) is not None]
        pairs_all = seed_pairs(pts)
        if noise == "better-half" and pairs_all:
            med = sorted((a + b) / 2 for a, b in pairs_all)[len(pairs_all) // 2]
            pairs = [(a, b) for a, b in pairs_all if (a + b) / 2 <= med]
        else:
            pairs = pairs_all
        super().__init__(space, pooled_sd(pairs))
        self.noise_all = pooled_sd(pairs_all)
        self.n_points, self.n_pairs = len(keys), len(pairs_all)
        X = np.array([space.encode_spec(pts[k]["spec"]) for k in keys])
        y = np.array([point_mean(pts[k]) for k in keys])
        self.reg = RandomForestRegressor(n_estimators=trees, min_samples_leaf=1, max_features=0.5,
                                         random_state=seed, n_jobs=1).fit(X, y)
        rows, labels = [], []
        for p in pts.values():
            x = space.encode_spec(p["spec"])
            for _, st, _ in p["runs"]:
                rows.append(x)
                labels.append(1 if st in FAILED else 0)
        self.n_failed = sum(labels)
        self.clf = None
        if self.n_failed >= 2:
            self.clf = RandomForestClassifier(n_estimators=trees, min_samples_leaf=2,
                                              random_state=seed, n_jobs=1).fit(np.array(rows),
                                                                               np.array(labels))
        self.y_min, self.y_max = float(y.min()), float(y.max())

    def _predict(self, xs):
        import numpy as np
        return self.reg.predict(np.array(xs))

    def _fail(self, xs):
        import numpy as np
        if self.clf is None:
            return [0.0] * len(xs)
        return self.clf.predict_proba(np.array(xs))[:, 1]


def spearman(a, b):
    def ranks(x):
        order = sorted(range(len(x)), key=lambda i: x[i])
        r = [0.0] * len(x)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and x[order[j + 1]] == x[order[i]]:
                j += 1
            for k in range(i, j + 1):
                r[order[k]] = (i + j) / 2
            i = j + 1
        return r
    ra, rb = ranks(a), ranks(b)
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    va = math.sqrt(sum((x - ma) ** 2 for x in ra))
    vb = math.sqrt(sum((y - mb) ** 2 for y in rb))
    return cov / (va * vb) if va and vb else float("nan")


def top_overlap(real, pred, k=10):
    ri = set(sorted(range(len(real)), key=lambda i: real[i])[:k])
    pi = set(sorted(range(len(pred)), key=lambda i: pred[i])[:k])
    return len(ri & pi)


def check(space, pts, seed=0, folds=5, trees=100):
    """The held-out check (see the file's header) as a dict."""
    keys = sorted(k for k, p in pts.items() if point_mean(p) is not None)
    rng = random.Random(seed)
    rng.shuffle(keys)
    n_test = max(1, len(keys) // 5)
    test, train = keys[:n_test], keys[n_test:]
    sub = ForestSurrogate(space, {k: pts[k] for k in train}, trees=trees, seed=seed)
    real = [point_mean(pts[k]) for k in test]
    pred = sub.means([pts[k]["spec"] for k in test])
    out = {"points": len(keys), "train": len(train), "test": len(test),
           "spearman_80_20": spearman(real, pred),
           "top10_80_20": top_overlap(real, pred, min(10, len(test))),
           "top_k_80_20": min(10, len(test))}
    oof = {}
    for f in range(folds):
        te = keys[f::folds]
        tr = [k for k in keys if k not in set(te)]
        m = ForestSurrogate(space, {k: pts[k] for k in tr}, trees=trees, seed=seed)
        for k, v in zip(te, m.means([pts[k]["spec"] for k in te])):
            oof[k] = v
    real_all = [point_mean(pts[k]) for k in keys]
    pred_all = [oof[k] for k in keys]
    out.update(spearman_oof=spearman(real_all, pred_all),
               top10_oof=top_overlap(real_all, pred_all, 10))
    pairs = seed_pairs(pts)
    out["spearman_seed1_seed2"] = spearman([a for a, _ in pairs], [b for _, b in pairs])
    # the top 10 of seed 1 against that of seed 2: what the noise alone leaves of a top 10
    out["top10_seed1_seed2"] = top_overlap([a for a, _ in pairs], [b for _, b in pairs], 10)
    out["noise_sd_all"] = pooled_sd(pairs)
    full = ForestSurrogate(space, pts, trees=trees, seed=seed)
    out["noise_sd_used"] = full.noise_sd
    out["pairs"] = len(pairs)
    out["failed_runs"] = full.n_failed
    out["runs"] = sum(len(p["runs"]) for p in pts.values())
    out["range"] = [full.y_min, full.y_max]
    return out


def load(landscapes, space=None, trees=100, seed=0):
    """A ForestSurrogate over landscape JSONL files; its features are space's
    axes (default: the space the first landscape was recorded over)."""
    if space is None:
        space = landscape_space(landscapes[0])
    return ForestSurrogate(space, read_landscape(landscapes), trees=trees, seed=seed)


def landscape_space(path):
    """The Space a landscape was recorded over."""
    return spacemod.load(landscape_space_path(path))


def landscape_space_path(path):
    """The space file a landscape was recorded over (named in its .meta.jsonl,
    else the space*.json beside it)."""
    meta = path + ".meta.jsonl"
    sp_path = None
    if os.path.exists(meta):
        with open(meta) as f:
            lines = [json.loads(ln) for ln in f if ln.strip()]
        if lines:
            sp_path = os.path.join(spacemod.ROOT, lines[-1]["space"])
    if not sp_path or not os.path.exists(sp_path):
        d = os.path.dirname(path)
        cands = sorted(f for f in os.listdir(d) if f.startswith("space") and f.endswith(".json"))
        sp_path = os.path.join(d, cands[0])
    return sp_path


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--landscape", action="append", required=True, help="a landscape JSONL (repeatable)")
    ap.add_argument("--space", help="the space whose axes are the features (default the landscape's)")
    ap.add_argument("--check", action="store_true", help="the held-out check")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--trees", type=int, default=100)
    ap.add_argument("--out", help="write the check as JSON here")
    a = ap.parse_args()
    space = spacemod.load(a.space) if a.space else landscape_space(a.landscape[0])
    pts = read_landscape(a.landscape)
    res = check(space, pts, a.seed, trees=a.trees)
    txt = (f"landscape: {res['points']} points with a result ({res['runs']} runs, "
           f"{res['failed_runs']} failed), {res['pairs']} seed pairs; val_bpb "
           f"{res['range'][0]:.3f}..{res['range'][1]:.3f}\n"
           f"seed noise: sd {res['noise_sd_all']:.4f} over all pairs, {res['noise_sd_used']:.4f} "
           f"over the better half (used)\n"
           f"held-out 80/20 ({res['train']} fitted, {res['test']} held out): Spearman "
           f"{res['spearman_80_20']:.3f}, real top {res['top_k_80_20']} in the surrogate's top "
           f"{res['top_k_80_20']}: {res['top10_80_20']}\n"
           f"5-fold out of fold, all {res['points']} points: Spearman {res['spearman_oof']:.3f}, "
           f"real top 10 in its top 10: {res['top10_oof']}\n"
           f"noise ceiling (seed 1 against seed 2 of every point): Spearman "
           f"{res['spearman_seed1_seed2']:.3f}, top 10 shared {res['top10_seed1_seed2']}\n")
    print(txt, end="")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
