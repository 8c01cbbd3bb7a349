"""`make bench-train-vs-step`: a real run's speed against the benchmark's, interleaved.

    /usr/bin/python3 tests/bench/train_vs_step.py --bin BIN --dir STATE [--dataset NAME]
                     [--rounds R] [--seconds S] [--steps N] [--threads T] [--only M|default]

For make bench's M model and the default spec (experiments/specs/default.json),
both on STATE's dataset (its vocabulary), R rounds of: `nightshift bench` (N
timed steps of the spec on one batch: the steady state) then `nightshift
train` of the same spec for S seconds of training on the real data. Each
round's ratio is the run's tokens per second (summary: tokens over training
seconds, every step counted, the first included) over the benchmark's (its
median step). Prints every round and the median ratio with its range; a
machine whose speed drifts by a third within minutes can only be compared
with itself minutes apart, hence the rounds.

Where a gap goes, from the run's own step events (--progress): the median
step against the benchmark's median step (like with like), the first step's
time beyond the run's median step (the start-up cost: first touch of the
activations, the team's first regions), and the rest of the mean's excess
over the median (slow steps: a busy or shared machine). The three explain the
ratio: ratio = median ratio x median step / mean step.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))


def keys(text):
    got = {}
    for line in text.splitlines():
        k, sep, v = line.partition(":")
        if sep:
            try:
                got[k.strip()] = float(v.split()[0])
            except (ValueError, IndexError):
                pass
    return got


def run(cmd, env):
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr.strip()[-500:]}")
    return keys(r.stdout)


def step_seconds(path):
    """Every training step's seconds, in order, from a run's --progress events."""
    with open(path) as f:
        events = [json.loads(line) for line in f if line.strip()]
    dts = [e["dt_ms"] / 1e3 for e in events if e.get("event") == "step"]
    if not dts:
        raise RuntimeError(f"{path}: no step events")
    return dts


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bin", required=True)
    p.add_argument("--dir", default="state")
    p.add_argument("--dataset", default="default")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--seconds", type=float, default=30)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--only", choices=["M", "default"], help="one of the two specs")
    a = p.parse_args()
    with open(os.path.join(a.dir, "datasets", a.dataset, "manifest.json")) as f:
        vocab = json.load(f)["vocab_size"]
    with open(os.path.join(SRC, "experiments", "specs", "default.json")) as f:
        default = json.load(f)
    m_model = dict(default["model"], depth=4, n_embd=128, n_head=4, n_kv_head=4,
                   window_pattern="L")
    specs = [(n, m) for n, m in [("M", m_model), ("default", default["model"])]
             if a.only in (None, n)]
    # both sides as a night runs them: the engine's own wait policy and spin
    # count (engine/cli.h) unless the caller set them
    env = dict(os.environ)
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
          f"{a.rounds} rounds of bench ({a.steps} steps) then train ({a.seconds:g} s), "
          f"{a.threads} threads, dataset {a.dataset} (vocab {vocab})")
    tmp = tempfile.mkdtemp(prefix="nightshift-tvs-")
    for name, model in specs:
        spec = {"name": f"tvs-{name}", "dataset": a.dataset, "time_budget_s": a.seconds,
                "model": dict(model, vocab_size=vocab), "train": default["train"],
                "resources": {"threads": a.threads}}
        path = os.path.join(tmp, f"{name}.json")
        with open(path, "w") as f:
            json.dump(spec, f)
        ratios, med_ratios, firsts, tails = [], [], [], []
        events = os.path.join(tmp, "steps.jsonl")
        for r in range(a.rounds):
            b = run([a.bin, "bench", "--spec", path, "--steps", str(a.steps)], env)
            t = run([a.bin, "train", "--dir", a.dir, "--progress", events, path], env)
            dts = step_seconds(events)
            med, total = statistics.median(dts), sum(dts)
            ratio = t["tokens_per_second"] / b["tokens_per_second"]
            med_ratio = b["step_ms_median"] / 1e3 / med
            first = (dts[0] - med) / total  # share of the training time
            tail = (total - len(dts) * med) / total - first
            ratios.append(ratio)
            med_ratios.append(med_ratio)
            firsts.append(first)
            tails.append(tail)
            print(f"{name} round {r + 1}: bench {b['tokens_per_second']:,.0f} tok/s, train "
                  f"{t['tokens_per_second']:,.0f} tok/s ({t['num_steps']:.0f} steps, eval "
                  f"{t['eval_seconds']:.1f} s), ratio {ratio:.3f}; median step "
                  f"{med * 1e3:.0f} ms against the bench's {b['step_ms_median']:.0f} ms "
                  f"(ratio {med_ratio:.3f}), first step +{(dts[0] - med) * 1e3:.0f} ms "
                  f"({100 * first:.1f}% of the run), slower steps {100 * tail:.1f}%", flush=True)
        print(f"{name}: train / bench median {statistics.median(ratios):.3f} "
              f"(range {min(ratios):.3f}-{max(ratios):.3f}, {len(ratios)} rounds); median steps "
              f"{statistics.median(med_ratios):.3f} (range {min(med_ratios):.3f}-"
              f"{max(med_ratios):.3f}); the first step {100 * statistics.median(firsts):.1f}% "
              f"and slower steps {100 * statistics.median(tails):.1f}% of a run (medians)")
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    subprocess.run(["rm", "-rf", tmp])
    return 0


if __name__ == "__main__":
    sys.exit(main())
