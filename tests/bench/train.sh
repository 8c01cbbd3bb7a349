# shellcheck shell=bash
# train.sh - sourced by the training benchmarks (noise.sh, sampler.sh): a
# spec's variant, one `nightshift train` and a row of its summary.

# bench_spec SRC DST SEED BUDGET TOKENS THREADS [PATH=JSON...]
# Writes DST: SRC with the seed, the budget (BUDGET seconds, or TOKENS
# training tokens when TOKENS is not 0), resources.threads, and each dotted
# PATH (e.g. train.sampler) set to its JSON value.
bench_spec() {
    python3 - "$@" <<'PY'
import json, sys
src, dst, seed, budget, tokens, threads, *sets = sys.argv[1:]
s = json.load(open(src))
s["seed"] = int(seed)
s["time_budget_s"] = 0.0 if int(tokens) else float(budget)
s["token_budget"] = int(tokens)
s.setdefault("resources", {})["threads"] = int(threads)
for kv in sets:
    path, value = kv.split("=", 1)
    *parents, key = path.split(".")
    o = s
    for p in parents:
        o = o.setdefault(p, {})
    o[key] = json.loads(value)
json.dump(s, open(dst, "w"))
PY
}

# bench_train BIN STATE SPEC LOG: trains SPEC on STATE's datasets, stderr to
# LOG; the summary stays in bench_out for bench_field and bench_row.
bench_train() {
    bench_out=$("$1" train --dir "$2" "$3" 2>"$4")
}

# bench_field KEY: the summary's value of KEY.
bench_field() {
    awk -v k="$1:" '$1 == k { print $2 }' <<<"$bench_out"
}

# bench_row FORMAT ARG...: printf FORMAT with the ARGs, then val_bpb, steps,
# training seconds, epochs and the load average when the run ended.
bench_row() {
    local fmt=$1
    shift
    # shellcheck disable=SC2059 # the format is the caller's
    printf "$fmt" "$@" "$(bench_field val_bpb)" "$(bench_field num_steps)" \
        "$(bench_field training_seconds)" "$(bench_field epochs)" "$(cut -d' ' -f1 /proc/loadavg)"
}
