#!/usr/bin/env bash
# noise.sh - `make bench-noise`: seed-to-seed noise of val_bpb.
#
#   tests/bench/noise.sh BIN STATE [--spec SPEC] [--budget S | --tokens N] [--seeds N]
#                        [--first K] [--threads N]
#
# Trains SPEC (default experiments/specs/baseline.json) on its dataset under STATE
# for S seconds (default 60), or for N training tokens with --tokens, with
# seeds K..K+N-1 (default 1..5) and prints each val_bpb, then the mean and the
# sample standard deviation (n - 1). The seed changes both the initialisation
# and the rows drawn. A wall-clock budget on a loaded machine adds the load's
# noise to the seed's: the steps and load1 (the load average when the run
# ended) columns show it. A token budget leaves only the seed's.
set -euo pipefail

usage() {
    echo "usage: tests/bench/noise.sh BIN STATE [--spec SPEC] [--budget S | --tokens N]" \
        "[--seeds N] [--first K] [--threads N]" >&2
    exit 2
}
[[ $# -ge 2 ]] || usage
bin=$1 state=$2
shift 2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$here/../../experiments/specs/baseline.json budget=60 tokens=0 seeds=5 first=1 threads=1
while [[ $# -gt 0 ]]; do
    case $1 in
    --spec) src=$2 ;;
    --budget) budget=$2 ;;
    --tokens) tokens=$2 ;;
    --seeds) seeds=$2 ;;
    --first) first=$2 ;;
    --threads) threads=$2 ;;
    *) usage ;;
    esac
    shift 2 || usage
done
[[ -x $bin ]] || { echo "bench: $bin is not an executable (run make first)" >&2; exit 1; }

# shellcheck source=tests/bench/train.sh
source "$here/train.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf '%6s %10s %8s %8s %8s %6s\n' seed val_bpb steps train_s epochs load1
for ((seed = first; seed < first + seeds; seed++)); do
    spec=$work/seed-$seed.json
    bench_spec "$src" "$spec" "$seed" "$budget" "$tokens" "$threads"
    bench_train "$bin" "$state" "$spec" "$work/seed-$seed.log"
    bench_row '%6s %10s %8s %8s %8s %6s\n' "$seed"
    bench_field val_bpb >>"$work/bpb"
done
label="$budget s"
[[ $tokens == 0 ]] || label="$tokens tokens"
python3 - "$work/bpb" "$label" <<'PY'
import statistics, sys
v = [float(x) for x in open(sys.argv[1])]
sd = statistics.stdev(v) if len(v) > 1 else float("nan")
print(f"{len(v)} seeds, {sys.argv[2]}: mean {statistics.mean(v):.4f}  sd {sd:.4f}"
      f"  min {min(v):.4f}  max {max(v):.4f}")
PY
