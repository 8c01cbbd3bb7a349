#!/usr/bin/python3
"""surrogate.py - a surrogate of a recorded landscape (landscape.py): any spec
of the space answered with a mean val_bpb plus noise drawn as the measured
seed noise, or as a failure.

    /usr/bin/python3 experiments/search/surrogate.py --landscape FILE.jsonl
        [--landscape FILE2.jsonl] [--space FILE] [--model extratrees|forest|gp]
        [--out FILE.json] [--nights OUT/search.json ...] [--held-out FILE.jsonl ...]

The features of a spec are the space's encoding (space.encode_spec: unit
coordinates, one-hot choices, inactive axes at -1; the union of the axes of
the space searched and of the spaces the landscapes were recorded over) and
a few derived ones (derived_features: the optimiser steps the budget buys,
the model's size, their product, the log learning rates). The target is
log(mean val_bpb - floor) of each point over its succeeded seeds.

The model is extremely randomised trees (sklearn's ExtraTreesRegressor, 200
trees, half the features tried at each split). Chosen by measurement, among
the three `--model` keeps: out of fold (5-fold) on the Brown landscapes'
first 39 points extra trees ranked the held-out points at Spearman 0.92,
a random forest at 0.85 and a Gaussian process (ARD Matern-5/2 + white
noise) at 0.84; the table of the three is printed below every check. Trees
also answer only within the range of what was measured: the GP's long
search found a "best" 0.20 val_bpb below the lowest point ever recorded, an
optimum of its extrapolation toward a corner of the space, against which
every strategy's regret would be fictitious. Extra trees split at random
thresholds and average 200 such trees, so their answer is smoother than a
forest's plateaus (which tie the points a search must tell apart at the top).
The price: away from the recorded points a tree model is flat, so it cannot
say what lies past the best region the landscape sampled.

Noise: a run answers mean + N(0, sd^2), sd pooled over the landscape's
pairs of seeds (sd^2 = mean over pairs of (a - b)^2 / 2), from the better
half of the points (the region a search ends in; the noise of poor
configurations is larger and would exaggerate it there).

Failures: a random forest classifier on the same features gives each point
the probability that a run fails (diverged, failed, out of memory,
timeout); a run fails when a uniform draw falls below it. With fewer than
two failed runs in the landscape nothing fails. A spec the engine refuses
(space.refusal) is refused before it reaches the surrogate.

The held-out check: the points are split 80/20 (seeded); the model fitted
on 80% ranks the other 20% against their measured means (Spearman), and
counts how many of the real top 10 of the held-out points it puts in its
own top 10; the same over all points out of fold (5-fold), and beside it the
ceiling the noise allows (seed 1 against seed 2 of every point). --nights
adds the check that matters most for ranking searches: the answers real
`make bench-search` nights found, re-measured on fresh seeds, against what
the surrogate says of the same specs. --held-out does the same for every
point of other landscape files (e.g. bench nights recorded after the fit)
that the fitted landscapes do not hold.
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
    """{configuration: {"spec", "point", "kind", "runs": [(seed, status, val_bpb)]}}
    from landscape JSONL files (refused draws skipped). A configuration is the
    spec without its name and seed, so one recorded in two landscapes (over
    two spaces) is one point, and a seed recorded twice counts once."""
    pts = {}
    for path in paths:
        with open(path) as f:
            for line in f:
                if not line.strip():
                    continue
                r = json.loads(line)
                if r.get("status") == "refused" or "spec" not in r:
                    continue
                cfg = {k: v for k, v in r["spec"].items() if k not in ("name", "seed")}
                key = json.dumps(cfg, sort_keys=True)
                p = pts.setdefault(key, {"spec": r["spec"], "point": r["point"],
                                         "kind": r.get("kind"), "runs": []})
                if all(s != r["seed"] for s, _, _ in p["runs"]):
                    p["runs"].append((r["seed"], r["status"], r.get("val_bpb")))
    return pts


def union_space(spaces):
    """One Space whose axes are the first space's, then every axis of the
    others whose path it lacks (the features of a surrogate fitted on
    landscapes over several spaces: a query from the first space has the
    other axes at the base spec's values)."""
    first = spaces[0]
    axes = list(first.axes)
    for sp in spaces[1:]:
        for ax in sp.axes:
            if ax.path not in first.by_path and all(a.path != ax.path for a in axes):
                axes.append(ax)
    return spacemod.Space(axes, first.about, base=first.base, defaults=first.defaults)


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


def derived_features(space, spec):
    """What a spec's axes decide, as a small model cannot easily learn it from
    them: log2 of the optimiser steps the budget buys (token_budget /
    total_batch_tokens), log of the block matrices' parameters (depth x
    width^2 x (4 + 4 x MLP factor)), log of their product (the training
    compute), and the log learning rates of Muon and lm_head."""
    def v(p):
        return space.spec_value(spec, p)
    steps = (spec.get("token_budget") or 65536) / v("train.total_batch_tokens")
    d, w = v("model.depth"), v("model.n_embd")
    mlp = 3 if v("model.mlp") in ("swiglu", "geglu") else 2
    params = d * w * w * (4 + mlp * v("model.mlp_ratio"))
    return [math.log2(steps), math.log(params), math.log(params * steps),
            math.log(v("train.matrix_lr")), math.log(v("train.unembedding_lr"))]


MODELS = ("gp", "forest", "extratrees")


class FittedSurrogate(Surrogate):
    """The surrogate of a landscape: model on the features (the space's
    encoding and derived_features) of each point, fitted to log(mean val_bpb -
    floor), floor = the lowest mean - 0.5 (val_bpb's spread is skewed: a few
    poor points, 1.5 above the rest, would otherwise decide the fit)."""

    def __init__(self, space, pts, model="extratrees", noise="better-half", trees=200,
                 seed=0):
        import numpy as np
        from sklearn.ensemble import RandomForestClassifier
        keys = sorted(k for k, p in pts.items() if point_mean(p) is not None)
        pairs_all = seed_pairs(pts)
        if noise == "better-half" and pairs_all:
            med = sorted((a + b) / 2 for a, b in pairs_all)[len(pairs_all) // 2]
            pairs = [(a, b) for a, b in pairs_all if (a + b) / 2 <= med]
        else:
            pairs = pairs_all
        super().__init__(space, pooled_sd(pairs))
        self.model = model
        self.noise_all = pooled_sd(pairs_all)
        self.n_points, self.n_pairs = len(keys), len(pairs_all)
        X = np.array([self.features(pts[k]["spec"]) for k in keys])
        y = np.array([point_mean(pts[k]) for k in keys])
        self.y_min, self.y_max = float(y.min()), float(y.max())
        self.floor = self.y_min - 0.5
        t = np.log(y - self.floor)
        if model == "gp":
            import warnings
            from sklearn.exceptions import ConvergenceWarning
            from sklearn.gaussian_process import GaussianProcessRegressor
            from sklearn.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel
            kernel = ConstantKernel() * Matern(length_scale=np.ones(X.shape[1]), nu=2.5) \
                + WhiteKernel()
            self.reg = GaussianProcessRegressor(kernel, normalize_y=True, random_state=seed)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                self.reg.fit(X, t)
        elif model == "forest":
            from sklearn.ensemble import RandomForestRegressor
            self.reg = RandomForestRegressor(n_estimators=trees, max_features=0.5,
                                             random_state=seed, n_jobs=1).fit(X, t)
        else:
            from sklearn.ensemble import ExtraTreesRegressor
            self.reg = ExtraTreesRegressor(n_estimators=trees, max_features=0.5,
                                           random_state=seed, n_jobs=1).fit(X, t)
        rows, labels = [], []
        for p in pts.values():
            x = self.features(p["spec"])
            for _, st, _ in p["runs"]:
                rows.append(x)
                labels.append(1 if st in FAILED else 0)
        self.n_failed = sum(labels)
        self.clf = None
        if self.n_failed >= 2:
            self.clf = RandomForestClassifier(n_estimators=100, min_samples_leaf=2,
                                              random_state=seed, n_jobs=1).fit(np.array(rows),
                                                                               np.array(labels))

    def features(self, spec):
        return self.space.encode_spec(spec) + derived_features(self.space, spec)

    def _answer(self, spec):
        k = self._key(spec)
        if k not in self._cache:
            x = self.features(spec)
            self._cache[k] = (float(self._predict([x])[0]), float(self._fail([x])[0]))
        return self._cache[k]

    def means(self, specs):
        return [float(v) for v in self._predict([self.features(s) for s in specs])]

    def _predict(self, xs):
        import numpy as np
        return self.floor + np.exp(self.reg.predict(np.array(xs)))

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


def check(space, pts, seed=0, folds=5, model="extratrees"):
    """The held-out check (see the file's header) as a dict."""
    keys = sorted(k for k, p in pts.items() if point_mean(p) is not None)
    rng = random.Random(seed)
    rng.shuffle(keys)
    n_test = max(1, len(keys) // 5)
    test, train = keys[:n_test], keys[n_test:]
    sub = FittedSurrogate(space, {k: pts[k] for k in train}, model=model, seed=seed)
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
        m = FittedSurrogate(space, {k: pts[k] for k in tr}, model=model, seed=seed)
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
    full = FittedSurrogate(space, pts, model=model, seed=seed)
    out["noise_sd_used"] = full.noise_sd
    out["pairs"] = len(pairs)
    out["failed_runs"] = full.n_failed
    out["runs"] = sum(len(p["runs"]) for p in pts.values())
    out["range"] = [full.y_min, full.y_max]
    return out


def load(landscapes, space=None, model="extratrees", seed=0):
    """A FittedSurrogate over landscape JSONL files; its features are the axes
    of space (if given) and of the spaces the landscapes were recorded over."""
    spaces = ([space] if space is not None else []) + [landscape_space(p) for p in landscapes]
    space = union_space(spaces)
    return FittedSurrogate(space, read_landscape(landscapes), model=model, seed=seed)


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


def mean_se(d):
    """The mean of d and its standard error (0 for one value)."""
    m = sum(d) / len(d)
    return m, (math.sqrt(sum((x - m) ** 2 for x in d) / (len(d) - 1) / len(d))
               if len(d) > 1 else 0.0)


def check_nights(sur, paths):
    """The surrogate against the answers real nights re-measured: every
    night of make bench-search's search.json files with its answer's whole
    spec (answer_spec) and its score (the answer's mean over fresh seeds).
    Returns the rows and the summary; None without such a night."""
    rows = []
    for path in paths:
        with open(path) as f:
            doc = json.load(f)
        for n in doc["nights"]:
            if n.get("answer_spec") and n.get("score") is not None:
                rows.append({"strategy": n["strategy"], "k": n["k"], "runs": doc["args"]["runs"],
                             "real": n["score"], "surrogate": sur.means([n["answer_spec"]])[0]})
    if len(rows) < 2:
        return None
    m, se = mean_se([r["surrogate"] - r["real"] for r in rows])
    return rows, {"nights": len(rows), "bias": m, "bias_se": se,
                  "spearman": spearman([r["real"] for r in rows], [r["surrogate"] for r in rows]),
                  "below_landscape": sum(r["real"] < sur.y_min for r in rows),
                  "landscape_lowest": sur.y_min}


def check_held_out(sur, fitted, paths):
    """The surrogate against real runs it was not fitted on: every point of
    the landscape files paths (e.g. the runs of bench nights recorded after the
    fit) whose configuration the fitted points do not hold, its mean over its
    seeds against the surrogate's mean of the same spec. Spearman over all of
    them, the real top 10 in the surrogate's top 10, the bias (surrogate minus
    real) over all and over the real best fifth, where searches end. None with
    fewer than two such points."""
    held = read_landscape(paths)
    keys = [k for k, p in held.items() if k not in fitted and point_mean(held[k]) is not None]
    if len(keys) < 2:
        return None
    real = [point_mean(held[k]) for k in keys]
    pred = sur.means([held[k]["spec"] for k in keys])

    def bias(idx):
        return mean_se([pred[i] - real[i] for i in idx])

    order = sorted(range(len(keys)), key=lambda i: real[i])
    top = order[:max(2, len(order) // 5)]
    b, b_se = bias(range(len(keys)))
    tb, tb_se = bias(top)
    return {"points": len(keys), "runs": sum(len(held[k]["runs"]) for k in keys),
            "spearman": spearman(real, pred), "top10": top_overlap(real, pred, min(10, len(keys))),
            "top_k": min(10, len(keys)), "bias": b, "bias_se": b_se, "best_fifth": len(top),
            "best_fifth_bias": tb, "best_fifth_bias_se": tb_se,
            "spearman_best_fifth": spearman([real[i] for i in top], [pred[i] for i in top]),
            "real_range": [min(real), max(real)]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--landscape", action="append", required=True, help="a landscape JSONL (repeatable)")
    ap.add_argument("--space", help="the space searched (default the last landscape's); the "
                    "features are its axes and those of the landscapes' spaces")
    ap.add_argument("--check", action="store_true", help="the held-out check")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model", choices=MODELS, default="extratrees")
    ap.add_argument("--out", help="write the check as JSON here")
    ap.add_argument("--nights", action="append", default=[], metavar="SEARCH_JSON",
                    help="make bench-search's search.json (repeatable): the surrogate fitted on "
                    "every point against the answers those real nights re-measured")
    ap.add_argument("--held-out", action="append", default=[], metavar="LANDSCAPE_JSONL",
                    help="real runs not fitted on (repeatable): the surrogate fitted on every "
                    "--landscape point against the points of these it does not hold")
    a = ap.parse_args()
    # the space searched first (its definitions of shared axes encode them):
    # --space, else the last landscape's
    first = spacemod.load(a.space) if a.space else landscape_space(a.landscape[-1])
    spaces = [first] + [landscape_space(p) for p in a.landscape]
    space = union_space(spaces)
    pts = read_landscape(a.landscape)
    res = check(space, pts, a.seed, model=a.model)
    txt = (f"model: {a.model}\nlandscape: {res['points']} points with a result ({res['runs']} runs, "
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
    others = []
    for m in MODELS:
        if m != a.model:
            r = check(space, pts, a.seed, model=m)
            others.append(f"{m}: Spearman {r['spearman_oof']:.3f}, top 10 {r['top10_oof']}")
    txt += "the other models, 5-fold out of fold: " + "; ".join(others) + "\n"
    if a.nights:
        got = check_nights(FittedSurrogate(space, pts, model=a.model, seed=a.seed), a.nights)
        if got is None:
            txt += "real nights: none with its answer's spec and score in " + \
                ", ".join(a.nights) + "\n"
        else:
            rows, sm = got
            res["real_nights"] = sm
            txt += (f"real nights' answers ({sm['nights']}; their mean over fresh seeds against the "
                    f"surrogate's mean of the same spec): Spearman {sm['spearman']:.3f}, surrogate "
                    f"minus real {sm['bias']:+.4f} ± {sm['bias_se']:.4f}; {sm['below_landscape']} "
                    f"lie below the landscape's lowest point mean {sm['landscape_lowest']:.4f}, "
                    f"where the trees cannot answer\n")
            for r in sorted(rows, key=lambda r: r["real"]):
                txt += (f"  {r['strategy']} k={r['k']} ({r['runs']:g} runs): real "
                        f"{r['real']:.4f}, surrogate {r['surrogate']:.4f}\n")
    if a.held_out:
        got = check_held_out(FittedSurrogate(space, pts, model=a.model, seed=a.seed), pts,
                             a.held_out)
        if got is None:
            txt += "held-out runs: fewer than two points the landscapes do not hold\n"
        else:
            res["held_out"] = got
            txt += (f"held-out runs ({got['points']} points the fit never saw, {got['runs']} runs, "
                    f"val_bpb {got['real_range'][0]:.3f}..{got['real_range'][1]:.3f}): Spearman "
                    f"{got['spearman']:.3f}, real top {got['top_k']} in the surrogate's top "
                    f"{got['top_k']}: {got['top10']}, surrogate minus real {got['bias']:+.4f} ± "
                    f"{got['bias_se']:.4f}; the real best fifth ({got['best_fifth']} points): "
                    f"Spearman {got['spearman_best_fifth']:.3f}, surrogate minus real "
                    f"{got['best_fifth_bias']:+.4f} ± {got['best_fifth_bias_se']:.4f}\n")
    print(txt, end="")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
