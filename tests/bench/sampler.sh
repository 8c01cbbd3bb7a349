#!/usr/bin/env bash
# sampler.sh - `make bench-sampler`: does the row sampler change the ranking?
#
#   tests/bench/sampler.sh BIN STATE [--budget S | --tokens N] [--seeds "42 43"]
#                          [--threads N]
#
# Trains experiments/specs/default.json on STATE's `default` dataset (the Brown
# corpus in its original genre order, validation documents from the end) for
# S seconds (default 300), or N training tokens with --tokens, with train.sampler "sequential" (one contiguous walk
# from a seeded start, the old behaviour) and "random" (independent uniform
# row offsets, the default), once per seed, and prints val_bpb side by side.
# With a wall-clock budget a loaded machine means fewer steps: run it on a
# quiet machine, or read the steps and load1 (the load average when the run
# ended) columns; a token budget gives both samplers the same tokens.
set -euo pipefail

usage() {
    echo "usage: tests/bench/sampler.sh BIN STATE [--budget S | --tokens N] [--seeds \"42 43\"]" \
        "[--threads N]" >&2
    exit 2
}
[[ $# -ge 2 ]] || usage
bin=$1 state=$2
shift 2
budget=300 tokens=0 seeds=42 threads=1
while [[ $# -gt 0 ]]; do
    case $1 in
    --budget) budget=$2 ;;
    --tokens) tokens=$2 ;;
    --seeds) seeds=$2 ;;
    --threads) threads=$2 ;;
    *) usage ;;
    esac
    shift 2 || usage
done
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$here/../../experiments/specs/default.json
[[ -x $bin ]] || { echo "bench: $bin is not an executable (run make first)" >&2; exit 1; }
[[ -f $state/datasets/default/manifest.json ]] ||
    { echo "bench: no dataset $state/datasets/default (run make dataset)" >&2; exit 1; }

# shellcheck source=tests/bench/train.sh
source "$here/train.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf '%-10s %6s %10s %8s %8s %8s %6s\n' sampler seed val_bpb steps train_s epochs load1
for seed in $seeds; do
    for sampler in sequential random; do
        spec=$work/$sampler-$seed.json
        bench_spec "$src" "$spec" "$seed" "$budget" "$tokens" "$threads" \
            name="\"sampler-$sampler\"" train.sampler="\"$sampler\""
        bench_train "$bin" "$state" "$spec" "$work/$sampler-$seed.log"
        bench_row '%-10s %6s %10s %8s %8s %8s %6s\n' "$sampler" "$seed"
    done
done
