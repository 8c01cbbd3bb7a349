#!/usr/bin/env bash
# HTTP load on a busy daemon, with wrk on loopback: GET /v1/status, GET
# /v1/leaderboard over 100,000 finished experiments (inserted with sqlite3
# before the daemon starts), and a mix of POSTs and reads, each for
# LOAD_SECONDS at LOAD_CONNECTIONS connections, while two workers train.
# Prints requests/s, p50/p99 latency and errors per run, and the daemon's RSS
# before and after. The target is p99 < 20 ms for the two reads at 50
# connections.
#
#   tests/bench/load.sh BIN          (make load)
#   LOAD_SECONDS (20), LOAD_CONNECTIONS (50), LOAD_THREADS (2), LOAD_ROWS (100000)
set -euo pipefail

bin=$(realpath "$1")
seconds=${LOAD_SECONDS:-20}
conns=${LOAD_CONNECTIONS:-50}
threads=${LOAD_THREADS:-2}
rows=${LOAD_ROWS:-100000}
command -v wrk >/dev/null || { echo "load: wrk is not installed (scripts/setup.sh)" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/nightshift-load.XXXXXX")
state=$work/state
daemon_pid=
cleanup() {
    [[ -n $daemon_pid ]] && kill -KILL "$daemon_pid" 2>/dev/null
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
url=http://127.0.0.1:$port

# A tiny dataset, as the tests prepare it.
bash "$(dirname "$0")/../tiny-corpus.sh" >"$work/corpus.jsonl"
"$bin" prep --dir "$state" --name default --vocab 300 --val-fraction 0.1 --quiet "$work/corpus.jsonl"

start_daemon() {
    "$bin" serve --dir "$state" --listen "127.0.0.1:$port" --slots 2 --memory-mb 0 \
        >"$work/daemon.out" 2>>"$work/daemon.log" &
    daemon_pid=$!
    for _ in $(seq 200); do
        grep -q "listening on" "$work/daemon.out" 2>/dev/null && return 0
        sleep 0.05
    done
    echo "load: the daemon did not start" >&2
    tail "$work/daemon.log" >&2
    exit 1
}
stop_daemon() {
    kill -TERM "$daemon_pid"
    wait "$daemon_pid" || true
    daemon_pid=
}

# The schema comes from the daemon's migrations; then the rows, in one go.
start_daemon
stop_daemon
t0=$(date +%s.%N)
sqlite3 "$state/nightshift.db" <<EOF
BEGIN;
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < $rows)
INSERT INTO experiments (name, spec, dataset, budget_kind, budget, config_hash, seed, source,
                         status, started, finished)
SELECT 'load-' || i,
       json_object('name', 'load-' || i, 'dataset', 'default', 'seed', i, 'time_budget_s', 300,
                   'model', json_object('depth', 1 + i % 8, 'n_embd', 64 * (1 + i % 4),
                                        'n_head', 2, 'n_kv_head', 2, 'mlp', 'relu2',
                                        'mlp_ratio', 4, 'window_pattern', 'SSSL',
                                        've_layers', 'alternate', 've_gate_channels', 32,
                                        'seq_len', 256, 'pos', 'rope', 'tie_embeddings', 0,
                                        'vocab_size', 0)),
       'default', 'time', 300, printf('c%063x', i % 20000), i, 'api', 'succeeded',
       strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
FROM n;
INSERT INTO results (experiment_id, val_bpb, params_total, num_steps, training_seconds,
                     mfu_percent, tokens_per_second)
SELECT id, 1.0 + abs(random() % 1000000) / 1e6, 1000000, 500, 300, 5, 10000 FROM experiments
WHERE name LIKE 'load-%';
COMMIT;
EOF
echo "load: $rows experiments inserted in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s"

start_daemon
# Two workers training for the whole run.
for seed in 1 2; do
    curl -sf -o /dev/null -H 'Content-Type: application/json' --data-binary @- "$url/v1/experiments" <<EOF
{"name":"busy","seed":$seed,"dataset":"default","time_budget_s":$((seconds * 4 + 60)),
 "model":{"depth":2,"n_embd":64,"n_head":2,"seq_len":64},
 "train":{"batch_size":4,"total_batch_tokens":256},"resources":{"threads":1,"peak_gflops":10}}
EOF
done
for _ in $(seq 100); do
    [[ $(curl -s "$url/v1/status" | python3 -c 'import json,sys; print(json.load(sys.stdin)["running"])') == 2 ]] && break
    sleep 0.1
done
rss() { awk '/VmRSS/ {print $2 " kB"}' "/proc/$daemon_pid/status"; }
rss_before=$(rss)

# POST mix: 1 in 10 a valid new spec, 2 in 10 an invalid one (400 by design),
# the rest reads of the experiment list.
cat >"$work/mix.lua" <<'EOF'
local n = 0
request = function()
    n = n + 1
    local r = math.random(10)
    if r == 1 then
        local body = string.format('{"name":"mix","seed":%d,"dataset":"default","time_budget_s":60,' ..
            '"model":{"depth":1,"n_embd":32,"n_head":2,"seq_len":32},' ..
            '"train":{"batch_size":4,"total_batch_tokens":128}}', math.random(1, 2^30) * 1000 + n)
        return wrk.format("POST", "/v1/experiments", {["Content-Type"] = "application/json"}, body)
    elseif r <= 3 then
        return wrk.format("POST", "/v1/experiments", {["Content-Type"] = "application/json"},
            '{"model":{"n_head":7}}')
    end
    return wrk.format("GET", "/v1/experiments?limit=20")
end
EOF

results=()
run() { # run NAME PATH [SCRIPT]
    local name=$1 path=$2 script=${3:-} out
    out=$(wrk -t"$threads" -c"$conns" -d"${seconds}s" --latency ${script:+-s "$script"} "$url$path" 2>&1)
    echo "$out" >"$work/wrk-$name.txt"
    local rps p50 p99 non2xx sock
    rps=$(awk '/^Requests\/sec:/ {print $2}' <<<"$out")
    p50=$(awk '$1 == "50%" {print $2}' <<<"$out")
    p99=$(awk '$1 == "99%" {print $2}' <<<"$out")
    non2xx=$(awk '/Non-2xx or 3xx responses:/ {print $NF}' <<<"$out")
    sock=$(awk '/Socket errors:/ {print $0}' <<<"$out" | sed 's/ *Socket errors: //')
    results+=("$(printf '%-22s %10s %10s %10s %10s  %s' "$name" "$rps" "$p50" "$p99" "${non2xx:-0}" "${sock:-none}")")
    # Requests wrk left behind (a slow endpoint's backlog) must not spill
    # into the next run: wait until /healthz answers at once again.
    for _ in $(seq 100); do
        [[ $(curl -s -o /dev/null -m 5 -w '%{time_total}' "$url/healthz") < 0.05 ]] && break
        sleep 0.2
    done
}
run status /v1/status
run leaderboard "/v1/leaderboard?limit=20"
run post-mix /v1/experiments "$work/mix.lua"
rss_after=$(rss)
running=$(curl -s "$url/v1/status" | python3 -c 'import json,sys; print(json.load(sys.stdin)["running"])')

echo
echo "load: $conns connections, $threads wrk threads, ${seconds} s per run, $rows finished experiments, $running workers training at the end"
printf '%-22s %10s %10s %10s %10s  %s\n' run "req/s" p50 p99 non-2xx "socket errors"
printf '%s\n' "${results[@]}"
echo "post-mix: 2 in 10 requests are invalid specs, answered 400 by design (counted as non-2xx)"
echo "daemon RSS: before $rss_before, after $rss_after"
stop_daemon
