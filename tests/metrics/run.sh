#!/usr/bin/env bash
# GET /metrics of a real daemon through Prometheus' own checker: a daemon on
# a free loopback port with a temporary state directory runs a tiny
# experiment to completion, then one scrape goes through `promtool check
# metrics` (Debian's prometheus package: scripts/setup.sh --prometheus).
# Any complaint of promtool, or a wrong content type, fails the run; the
# scrape is kept in OUTDIR/metrics.txt.
#
#   tests/metrics/run.sh BIN OUTDIR
set -euo pipefail
cd "$(dirname "$0")/../.."
if (($# != 2)); then
    echo "usage: tests/metrics/run.sh BIN OUTDIR" >&2
    exit 2
fi
bin=$(realpath "$1")
out=$2
run_timeout_s=120 # the tiny run: a two-second budget, its startup and evaluation

bash scripts/setup.sh --prometheus
command -v promtool >/dev/null || { echo "metrics: no promtool after setup" >&2; exit 1; }
mkdir -p "$out"

work=$(mktemp -d)
pid=
cleanup() {
    if [[ -n $pid ]]; then
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT
fail() {
    echo "metrics: $*" >&2
    [[ -f $work/serve.err ]] && tail -n 20 "$work/serve.err" >&2
    exit 1
}

bash tests/tiny-corpus.sh >"$work/corpus.jsonl"
"$bin" prep --dir "$work/state" --name tiny --vocab 300 --val-fraction 0.1 --quiet \
    "$work/corpus.jsonl"
"$bin" serve --dir "$work/state" --listen 127.0.0.1:0 --slots 1 --threads-per-slot 1 \
    >"$work/serve.out" 2>"$work/serve.err" &
pid=$!
for _ in $(seq 100); do
    grep -q "listening on" "$work/serve.out" 2>/dev/null && break
    kill -0 "$pid" 2>/dev/null || fail "the daemon exited"
    sleep 0.2
done
url=$(sed -n 's/^listening on //p' "$work/serve.out")
[[ -n $url ]] || fail "the daemon did not start"

spec='{"name":"metrics-check","dataset":"tiny","time_budget_s":2,
       "model":{"depth":1,"n_embd":32,"n_head":2,"seq_len":32},
       "train":{"batch_size":4,"total_batch_tokens":128}}'
reply=$(curl -sS --max-time 10 -H 'Content-Type: application/json' -d "$spec" "$url/v1/experiments")
id=$(sed -n 's/.*"id":\([0-9]*\).*/\1/p' <<<"$reply")
[[ -n $id ]] || fail "the submission was refused: $reply"
deadline=$((SECONDS + run_timeout_s))
while :; do
    status=$(curl -sS --max-time 10 "$url/v1/experiments/$id" |
        sed -n 's/.*"status":"\([a-z]*\)".*/\1/p' | head -n 1)
    [[ $status == queued || $status == running || -z $status ]] || break
    ((SECONDS < deadline)) || fail "experiment $id did not finish in ${run_timeout_s} s"
    sleep 0.5
done
[[ $status == succeeded ]] || fail "experiment $id ended $status"
# A path the daemon does not serve, so the request counts hold more than 200s.
curl -sS --max-time 10 -o /dev/null "$url/no/such/path"

curl -sS --max-time 10 -D "$work/headers" -o "$out/metrics.txt" "$url/metrics"
ctype=$(sed -n 's/^Content-Type: *//Ip' "$work/headers" | tr -d '\r')
[[ $ctype == "text/plain; version=0.0.4; charset=utf-8" ]] || fail "Content-Type: $ctype"
grep -q '^nightshift_experiments_ended_total{status="succeeded"} 1$' "$out/metrics.txt" ||
    fail "the finished run is not counted: $(grep experiments_ended_total "$out/metrics.txt")"
grep -q '^nightshift_run_duration_seconds_count{status="succeeded"} 1$' "$out/metrics.txt" ||
    fail "the finished run is not in the duration histogram"
grep -q '^nightshift_best_val_bpb{dataset=' "$out/metrics.txt" || fail "no best val_bpb gauge"
grep -q '^process_resident_memory_bytes ' "$out/metrics.txt" || fail "no process_* metrics"
head_status=$(curl -sS --max-time 10 -o /dev/null -w '%{http_code}' -I "$url/metrics")
[[ $head_status == 200 ]] || fail "HEAD /metrics: $head_status"
if ! complaints=$(promtool check metrics <"$out/metrics.txt" 2>&1) || [[ -n $complaints ]]; then
    echo "$complaints" >&2
    fail "promtool check metrics complained about $out/metrics.txt"
fi
echo "metrics: promtool check metrics passed ($(grep -c '^nightshift_' "$out/metrics.txt") samples, $(grep -c '^# TYPE' "$out/metrics.txt") families)"
