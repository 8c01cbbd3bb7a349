#!/usr/bin/env bash
# train_pair.sh - `make bench-train`: one training run of nightshift and one of
# the PyTorch reference, same model, data, budget and threads.
#
#   tests/bench/train_pair.sh BIN STATE [--budget S | --tokens N] [--spec FILE]
#                             [--dataset NAME] [--threads N] [--seed N]
#
# Trains the spec (default: the M model of tests/bench/bench.py - depth 4,
# width 128, 4 heads, full windows, value embeddings on alternate layers,
# relu2, seq_len 256, 16 rows a step - on the dataset's vocabulary) for S
# wall-clock seconds (default 300) or N training tokens, first with
# `BIN train` and then with tests/bench/torch_train.py, on STATE's dataset
# (default: the spec's, else `default`), and prints tokens trained, steps and
# val_bpb of both. The budget, dataset, seed and threads given here replace
# the spec's (threads 2 and seed 42 unless given; the variant and the
# nightshift run are train.sh's). Both sides start from the same weights and
# draw the same rows (torch_train.py reproduces the engine's generator), so
# with --tokens the two val_bpb agree closely (M, 20 steps: within 0.01, while
# seeds spread them by 0.04), and with a time budget the difference is what
# the engine's speed buys. Both run with OMP_NUM_THREADS=N and
# OMP_WAIT_POLICY=PASSIVE, one after the other, never at once. Without
# Debian's python3-torch (scripts/setup.sh --torch) only nightshift's row is
# printed. On a loaded machine a time budget means fewer steps on both sides:
# the load1 column is the load average when each run ended.
set -euo pipefail

usage() {
    echo "usage: tests/bench/train_pair.sh BIN STATE [--budget S | --tokens N] [--spec FILE]" \
        "[--dataset NAME] [--threads N] [--seed N]" >&2
    exit 2
}
[[ $# -ge 2 ]] || usage
bin=$1 state=$2
shift 2
budget=300 tokens=0 spec_in="" dataset="" threads=2 seed=42
while [[ $# -gt 0 ]]; do
    [[ $# -ge 2 ]] || usage
    case $1 in
    --budget) budget=$2 ;;
    --tokens) tokens=$2 ;;
    --spec) spec_in=$2 ;;
    --dataset) dataset=$2 ;;
    --threads) threads=$2 ;;
    --seed) seed=$2 ;;
    *) usage ;;
    esac
    shift 2
done
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[[ -x $bin ]] || { echo "bench-train: $bin is not an executable (run make first)" >&2; exit 1; }
[[ -z $spec_in || -f $spec_in ]] || { echo "bench-train: no spec $spec_in" >&2; exit 1; }

# shellcheck source=tests/bench/train.sh
source "$here/train.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The spec both sides train: SPEC (or the M model) with this run's budget,
# seed and threads, and --dataset's name.
src=$spec_in
if [[ -z $src ]]; then
    src=$work/m.json
    cat >"$src" <<'JSON'
{"name": "bench-train-M",
 "model": {"depth": 4, "n_embd": 128, "n_head": 4, "n_kv_head": 4, "mlp_ratio": 4, "mlp": "relu2",
           "seq_len": 256, "window_pattern": "L", "ve_layers": "alternate",
           "ve_gate_channels": 32},
 "train": {"batch_size": 16, "total_batch_tokens": 4096}}
JSON
fi
spec=$work/spec.json
bench_spec "$src" "$spec" "$seed" "$budget" "$tokens" "$threads" \
    ${dataset:+"dataset=\"$dataset\""}
# The spec's dataset, model, tokens per step (train.total_batch_tokens) and name.
read -r dataset depth width heads per_step name < <(python3 - "$spec" \
    "$here/../../experiments/specs/default.json" <<'PY'
import json, sys
s, d = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
m, t = dict(d["model"], **s.get("model", {})), dict(d["train"], **s.get("train", {}))
print(s.get("dataset", d["dataset"]), m["depth"], m["n_embd"], m["n_head"],
      t["total_batch_tokens"], s.get("name", "(unnamed)"))
PY
)
[[ -f $state/datasets/$dataset/manifest.json ]] ||
    { echo "bench-train: no dataset $state/datasets/$dataset (make dataset prepares 'default')" >&2
      exit 1; }

have_torch=1
if ! /usr/bin/python3 -c 'import torch, numpy' 2>/dev/null; then
    have_torch=0
    echo "bench-train: /usr/bin/python3 cannot import torch; nightshift's row only." >&2
    echo "bench-train: install Debian's python3-torch with: bash scripts/setup.sh --torch" >&2
fi

export OMP_NUM_THREADS=$threads OMP_WAIT_POLICY=PASSIVE
if [[ $tokens -gt 0 ]]; then what="$tokens tokens"; else what="${budget}s"; fi
echo "bench-train: $name | depth $depth n_embd $width heads $heads | dataset $dataset |" \
    "seed $seed | budget $what"
echo "each side: OMP_NUM_THREADS=$threads OMP_WAIT_POLICY=PASSIVE, one after the other;" \
    "load average at start $(cut -d' ' -f1-3 /proc/loadavg)"

# One JSON line per trainer: trainer, tokens, steps, val_bpb, tok/s, seconds, load1.
rows=$work/rows.jsonl
status=0
if bench_train "$bin" "$state" "$spec" "$work/ns.log"; then
    steps=$(bench_field num_steps)
    python3 - "$((steps * per_step))" "$steps" "$(bench_field val_bpb)" \
        "$(bench_field tokens_per_second)" "$(bench_field training_seconds)" >>"$rows" <<'PY'
import json, sys
tokens, steps, bpb, tok_s, seconds = sys.argv[1:]
print(json.dumps({"trainer": "nightshift", "tokens": int(tokens), "steps": int(steps),
                  "val_bpb": float(bpb), "tokens_per_second": float(tok_s),
                  "training_seconds": float(seconds),
                  "load1": open("/proc/loadavg").read().split()[0]}))
PY
else
    echo "bench-train: nightshift train failed:" >&2
    tail -n 5 "$work/ns.log" >&2
    status=1
fi
if [[ $have_torch == 1 ]]; then
    if /usr/bin/python3 "$here/torch_train.py" --dir "$state" --threads "$threads" "$spec" \
        >"$work/torch.out" 2>"$work/torch.log"; then
        python3 - "$work/torch.out" >>"$rows" <<'PY'
import json, sys
r = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
r["load1"] = open("/proc/loadavg").read().split()[0]
print(json.dumps(r))
PY
    else
        echo "bench-train: torch_train.py failed:" >&2
        tail -n 5 "$work/torch.log" >&2
        status=1
    fi
fi

echo
if [[ -s $rows ]]; then
    python3 - "$rows" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"{'trainer':<10} {'tokens':>10} {'steps':>6} {'val_bpb':>9} {'tok/s':>7} "
      f"{'train_s':>7} {'load1':>5}")
for r in rows:
    print(f"{r['trainer']:<10} {r['tokens']:>10.0f} {r['steps']:>6} {r['val_bpb']:>9.6f} "
          f"{r['tokens_per_second']:>7.0f} {r['training_seconds']:>7.1f} {r['load1']:>5}")
if len(rows) == 2:
    a, b = rows
    print(f"nightshift / torch: {a['tokens'] / b['tokens']:.2f}x the tokens, "
          f"val_bpb {a['val_bpb'] - b['val_bpb']:+.4f}")
PY
fi
exit $status
