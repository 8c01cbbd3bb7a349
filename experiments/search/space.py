#!/usr/bin/python3
"""space.py - the search space file (experiments/search/space.json) in Python,
for the landscape, the surrogate and the replay.

It reads the file as the reference agent (experiments/agent/space.c) and the
Optuna bridge do:

- `axes` in order; each has `path`, `type` (int, float, choice), `values`
  (ordered) or `low`/`high` (+ `log`), `also` (paths that get the same value),
  `why` (read and ignored) and `when`, a condition on an EARLIER axis:
  {"path": P, "not": [..]}, {"path": P, "above": x} or {"path": P, "in": [..]}.
  When it is false the axis is inactive: it is not part of the point, the spec
  keeps the base spec's value, and two points that differ only in inactive
  axes are the same point. A condition reads the value its axis has in the
  spec: the point's value when that axis is active, else the base spec's.
- The micro-batch is derived, never an axis: once the point is written into
  the base spec, train.batch_size is the largest power of two that is at most
  the base spec's train.batch_size and divides total_batch_tokens / seq_len.
- Floats are kept to 4 significant digits (as the agent and the bridge).

A point is a dict {path: value} holding the active axes only. Nothing here
needs numpy: `encode` returns a list of floats.
"""
import copy
import json
import math
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
DEFAULT_SPEC = os.path.join(ROOT, "experiments", "specs", "default.json")
BASELINE = os.path.join(ROOT, "experiments", "specs", "baseline.json")
SPACE = os.path.join(ROOT, "experiments", "search", "space.json")

NOT_AXES = ("name", "tags", "seed", "priority", "parent", "prune", "dataset",
            "time_budget_s", "token_budget", "eval_tokens")
AXIS_KEYS = ("path", "type", "values", "low", "high", "log", "also", "why", "when")
WHEN_OPS = ("not", "above", "in")
MAX_AXES, MAX_VALUES, MAX_ALSO = 32, 64, 4
SIG_DIGITS = 4
INACTIVE = -1.0  # an inactive axis' coordinates in `encode`


class SpaceError(ValueError):
    pass


def get_path(tree, path):
    """(value, found) of a dotted path in a JSON tree."""
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
            raise SpaceError(f"{path}: {part} is not an object")
    node[parts[-1]] = copy.deepcopy(value)


def round_sig(x, digits=SIG_DIGITS):
    if x == 0 or not math.isfinite(x):
        return x
    scale = 10 ** (digits - 1 - math.floor(math.log10(abs(x))))
    return round(x * scale) / scale


def _is_num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _same(a, b):
    """JSON equality that tells 1 from true and 1.0 from 1 only by value."""
    if _is_num(a) and _is_num(b):
        return float(a) == float(b)
    return type(a) is type(b) and a == b


class Axis:
    def __init__(self, path, typ, values=None, low=None, high=None, log=False, also=(),
                 when=None):
        self.path, self.type, self.values = path, typ, values
        self.low, self.high, self.log = low, high, log
        self.also, self.when = list(also), when

    @property
    def listed(self):
        return self.values is not None

    def value_at(self, u):
        """The value at u in [0, 1): a listed value by its slot, a range on its scale
        (the agent's space_from_unit and log_int_at)."""
        u = min(max(u, 0.0), math.nextafter(1.0, 0.0))
        if self.listed:
            return self.values[int(u * len(self.values))]
        if self.type == "int" and not self.log:
            return int(self.low + int(u * (self.high - self.low + 1)))
        if self.type == "int":
            lo = math.log(self.low - 0.5 if self.low - 0.5 > 0 else self.low)
            hi = math.log(self.high + 0.5)
            return int(min(max(round(math.exp(lo + u * (hi - lo))), self.low), self.high))
        if self.log:
            x = math.exp(math.log(self.low) + u * (math.log(self.high) - math.log(self.low)))
        else:
            x = self.low + u * (self.high - self.low)
        return min(max(round_sig(x), self.low), self.high)

    def unit(self, v):
        """v's coordinate in [0, 1] for a surrogate: a listed number by its value
        (on a log scale when every value is positive and they span 4x or more),
        a range on its scale. None for a choice (one-hot) or a value outside."""
        if self.listed:
            nums = [x for x in self.values if _is_num(x)]
            if len(nums) != len(self.values) or not _is_num(v):
                return None
            lg = min(nums) > 0 and max(nums) >= 4 * min(nums)
            lo, hi, v = min(nums), max(nums), float(v)
        else:
            if not _is_num(v):
                return None
            lo, hi, lg, v = self.low, self.high, self.log, float(v)
        if lg:
            if v <= 0:
                return None
            lo, hi, v = math.log(lo), math.log(hi), math.log(v)
        return 0.5 if hi == lo else (v - lo) / (hi - lo)

    def width(self):
        """Columns of this axis in `encode`."""
        return 1 if self.unit_numeric() else len(self.values)

    def unit_numeric(self):
        return not self.listed or all(_is_num(x) for x in self.values)

    def index(self, v):
        if not self.listed:
            return -1
        for i, x in enumerate(self.values):
            if _same(x, v):
                return i
        return -1


class Space:
    """A parsed space file. `base` is the base spec points are written into."""

    def __init__(self, axes, about="", base=None, defaults=None):
        self.axes, self.about = axes, about
        self.defaults = defaults if defaults is not None else load_json(DEFAULT_SPEC)
        self.base = base if base is not None else load_json(BASELINE)
        self.by_path = {a.path: a for a in axes}

    # ---------------------------------------------------------------- values

    def spec_value(self, spec, path):
        """A path's value in a spec, the default spec's when the spec omits it."""
        v, found = get_path(spec, path)
        return v if found else get_path(self.defaults, path)[0]

    def condition(self, ax, lookup):
        """Whether ax is active, its condition's axis read through lookup(path)."""
        if ax.when is None:
            return True
        v = lookup(ax.when["path"])
        if "not" in ax.when:
            return not any(_same(v, x) for x in ax.when["not"])
        if "in" in ax.when:
            return any(_same(v, x) for x in ax.when["in"])
        return _is_num(v) and float(v) > float(ax.when["above"])

    def active(self, point):
        """The axes active at a point (a dict that may hold inactive axes too).
        An axis whose condition names an inactive axis is inactive too, as the
        agent's reader (space.c) and the Optuna bridge have it."""
        out, seen = [], {}
        axis_paths = {a.path for a in self.axes}

        def lookup(p):
            return seen[p] if p in seen else self.spec_value(self.base, p)

        for ax in self.axes:
            if ax.when is not None and ax.when["path"] in axis_paths and \
                    ax.when["path"] not in seen:
                continue
            if self.condition(ax, lookup) and ax.path in point:
                seen[ax.path] = point[ax.path]
                out.append(ax)
        return out

    def canonical(self, point):
        """The point without its inactive axes (the point as the space sees it)."""
        return {a.path: point[a.path] for a in self.active(point)}

    def key(self, point):
        """A hashable key: equal for points that differ only in inactive axes."""
        return json.dumps(self.canonical(point), sort_keys=True)

    # -------------------------------------------------------------- sampling

    def from_unit(self, u):
        """The point at u (one coordinate in [0, 1) per axis, in order; an
        inactive axis' coordinate is ignored)."""
        point = {}

        def lookup(p):
            return point[p] if p in point else self.spec_value(self.base, p)

        for ax, x in zip(self.axes, u):
            if self.condition(ax, lookup):
                point[ax.path] = ax.value_at(x)
        return point

    def sample(self, rng):
        """A uniform draw (rng: random.Random): listed values equally likely, a
        range uniform on its (log) scale."""
        return self.from_unit([rng.random() for _ in self.axes])

    def latin_hypercube(self, n, rng):
        """n points of a Latin hypercube over the axes' unit coordinates: every
        axis sees each of n equal slices once, in its own shuffled order."""
        cols = []
        for _ in self.axes:
            perm = list(range(n))
            rng.shuffle(perm)
            cols.append([(perm[i] + rng.random()) / n for i in range(n)])
        return [self.from_unit([c[i] for c in cols]) for i in range(n)]

    # ------------------------------------------------------------------ specs

    def apply(self, point, base=None):
        """A new spec: base (default the space's) with the point's active axes and
        their `also` paths written in, then the micro-batch derived."""
        base = self.base if base is None else base
        spec = copy.deepcopy(base)
        for ax in self.active(point):
            for p in [ax.path] + ax.also:
                set_path(spec, p, point[ax.path])
        derive_batch(spec, base, self.defaults)
        return spec

    def refusal(self, spec):
        return refusal(spec, self.defaults)

    def point_of(self, spec):
        """The point a spec is (its values at the active axes)."""
        point = {}

        def lookup(p):
            return point[p] if p in point else self.spec_value(spec, p)

        for ax in self.axes:
            if self.condition(ax, lookup):
                point[ax.path] = self.spec_value(spec, ax.path)
        return point

    # --------------------------------------------------------------- encoding

    def feature_names(self):
        names = []
        for ax in self.axes:
            if ax.unit_numeric():
                names.append(ax.path)
            else:
                names += [f"{ax.path}={v}" for v in ax.values]
        return names

    def encode_spec(self, spec):
        """A spec as features: per active axis its unit coordinate (numbers) or a
        one-hot (choices); an inactive axis is INACTIVE in every column, whatever
        value the spec holds, so points equal but for inactive axes encode alike.
        A value outside the space keeps its coordinate on the axis' scale (below 0
        or above 1) or, for a choice, all columns 0."""
        feats = []
        point = self.point_of(spec)
        for ax in self.axes:
            if ax.path not in point:
                feats += [INACTIVE] * ax.width()
            elif ax.unit_numeric():
                u = ax.unit(point[ax.path])
                feats.append(INACTIVE if u is None else u)
            else:
                i = ax.index(point[ax.path])
                feats += [1.0 if j == i else 0.0 for j in range(len(ax.values))]
        return feats

    def encode(self, point):
        return self.encode_spec(self.apply(point))


def derive_batch(spec, base, defaults):
    """train.batch_size = the largest power of two <= the base spec's batch_size
    that divides total_batch_tokens / seq_len (left alone when that is not a
    whole number: the spec then refuses the point)."""
    def val(tree, p):
        v, found = get_path(tree, p)
        return v if found else get_path(defaults, p)[0]

    b0 = val(base, "train.batch_size")
    tbt, T = val(spec, "train.total_batch_tokens"), val(spec, "model.seq_len")
    if not all(_is_num(x) for x in (b0, tbt, T)) or T <= 0 or tbt % T:
        return
    rows = int(tbt // T)
    b = 1
    while b * 2 <= b0 and rows % (b * 2) == 0:
        b *= 2
    set_path(spec, "train.batch_size", b)


def refusal(spec, defaults):
    """Why the engine's spec_parse refuses a spec, for the cross-field rules a
    point of a space can break (engine/spec.c), or None. A mirror for the
    replay's speed (a `nightshift cost` per point takes 60 ms); the test
    checks it against `nightshift cost` on random points of the space."""
    def val(p):
        v, found = get_path(spec, p)
        return v if found else get_path(defaults, p)[0]

    d, h, kv = val("model.n_embd"), val("model.n_head"), val("model.n_kv_head")
    if d % h:
        return f"model.n_head: {h} does not divide n_embd {d}"
    if h % kv:
        return f"model.n_kv_head: {kv} does not divide n_head {h}"
    if val("model.pos") == "rope" and (d // h) % 2:
        return f"model.head_dim: RoPE needs an even head_dim, got {d // h}"
    hidden = val("model.mlp_ratio") * d
    if hidden < 1 or hidden != int(hidden):
        return f"model.mlp_ratio: hidden width {hidden} is not a whole number >= 1"
    if val("model.ve_gate_channels") > d:
        return f"model.ve_gate_channels: {val('model.ve_gate_channels')} exceeds n_embd {d}"
    row = val("train.batch_size") * val("model.seq_len")
    if val("train.total_batch_tokens") % row:
        return f"train.total_batch_tokens: not a multiple of batch_size x seq_len {row}"
    if val("train.warmup_ratio") + val("train.warmdown_ratio") > 1 + 1e-12:
        return "train.warmdown_ratio: warmup_ratio + warmdown_ratio exceeds 1"
    return None


def load_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def parse(doc, what="space", base=None, defaults=None):
    """A Space from a space file's JSON; SpaceError naming the axis."""
    def bad(msg):
        raise SpaceError(f"{what}: {msg}")

    defaults = defaults if defaults is not None else load_json(DEFAULT_SPEC)
    if not isinstance(doc, dict):
        bad("not a JSON object")
    axes_doc = doc.get("axes")
    if not isinstance(axes_doc, list) or not 1 <= len(axes_doc) <= MAX_AXES:
        bad(f"axes: expected an array of 1 to {MAX_AXES} axes")

    def check_path(p, where):
        if not isinstance(p, str) or not p:
            bad(f'{where}: expected a spec path like "model.depth"')
        if p.split(".")[0] in NOT_AXES:
            bad(f"{where}: {p} labels the run or sets its scope; it is not an axis")
        if p == "train.batch_size":
            bad(f"{where}: train.batch_size is derived from total_batch_tokens, never an axis")
        v, found = get_path(defaults, p)
        if not found or isinstance(v, dict):
            bad(f"{where}: {p} is not a field of a spec")

    axes = []
    for i, ax in enumerate(axes_doc):
        where = f"axes[{i}]"
        if not isinstance(ax, dict):
            bad(f"{where}: expected an object")
        for k in ax:
            if k not in AXIS_KEYS:
                bad(f'{where}: unknown key "{k}"')
        path = ax.get("path")
        check_path(path, f"{where}.path")
        if any(a.path == path for a in axes):
            bad(f"{where}: {path} is already an axis")
        typ = ax.get("type")
        if typ not in ("int", "float", "choice"):
            bad(f'{where}.type: expected "int", "float" or "choice"')
        kw = {}
        if "values" in ax:
            if "low" in ax or "high" in ax:
                bad(f'{where}: either "values" or "low"/"high", not both')
            vals = ax["values"]
            if not isinstance(vals, list) or not 1 <= len(vals) <= MAX_VALUES:
                bad(f"{where}.values: expected an array of 1 to {MAX_VALUES} values")
            vals = list(vals)
            for k, v in enumerate(vals):
                if typ == "choice":
                    ok = isinstance(v, (str, bool, int, float))
                else:
                    ok = _is_num(v) and math.isfinite(v) and (typ == "float" or float(v).is_integer())
                if not ok:
                    bad(f"{where}.values[{k}]: not a{'n integer' if typ == 'int' else ' value'}")
                if typ == "int":
                    vals[k] = int(v)
                if any(_same(vals[j], vals[k]) for j in range(k)):
                    bad(f"{where}.values[{k}]: repeats an earlier value")
            kw["values"] = vals
        else:
            if typ == "choice":
                bad(f'{where}: a choice lists its "values"')
            lo, hi, lg = ax.get("low"), ax.get("high"), ax.get("log", False)
            if not (_is_num(lo) and _is_num(hi)) or not (math.isfinite(lo) and math.isfinite(hi)):
                bad(f'{where}: expected "values", or numbers "low" and "high"')
            if not isinstance(lg, bool):
                bad(f"{where}.log: expected true or false")
            if not lo < hi:
                bad(f"{where}: low {lo} is not below high {hi}")
            if typ == "int" and not (float(lo).is_integer() and float(hi).is_integer()):
                bad(f"{where}: an int range has integer bounds")
            if lg and lo <= 0:
                bad(f"{where}: a log range needs low > 0")
            kw.update(low=int(lo) if typ == "int" else float(lo),
                      high=int(hi) if typ == "int" else float(hi), log=lg)
        also = ax.get("also", [])
        if not isinstance(also, list) or len(also) > MAX_ALSO:
            bad(f"{where}.also: expected an array of at most {MAX_ALSO} paths")
        for k, p in enumerate(also):
            check_path(p, f"{where}.also[{k}]")
        if "why" in ax and not isinstance(ax["why"], str):
            bad(f"{where}.why: expected a string")
        when = ax.get("when")
        if when is not None:
            if not isinstance(when, dict) or set(when) - {"path", *WHEN_OPS} \
                    or sum(op in when for op in WHEN_OPS) != 1:
                bad(f'{where}.when: expected {{"path": P}} with one of "not", "above", "in"')
            if not any(a.path == when.get("path") for a in axes):
                bad(f"{where}.when.path: {when.get('path')} is not an earlier axis")
            if "above" in when and not _is_num(when["above"]):
                bad(f"{where}.when.above: expected a number")
            for op in ("not", "in"):
                if op in when and not isinstance(when[op], list):
                    bad(f"{where}.when.{op}: expected an array of values")
            when = dict(when)
        axes.append(Axis(path, typ, also=also, when=when, **kw))
    return Space(axes, doc.get("about", ""), base=base, defaults=defaults)


def load(path=SPACE, base_path=BASELINE, base=None):
    """A Space from a file; base (a spec dict) or base_path is the base spec."""
    if base is None:
        base = load_json(base_path)
    return parse(load_json(path), path, base=base)


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description="read a space file; print samples as specs")
    ap.add_argument("--space", default=SPACE)
    ap.add_argument("--base", default=BASELINE)
    ap.add_argument("--n", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    sp = load(a.space, a.base)
    rng = random.Random(a.seed)
    for _ in range(a.n):
        pt = sp.sample(rng)
        print(json.dumps({"point": pt, "features": sp.encode(pt)}))
