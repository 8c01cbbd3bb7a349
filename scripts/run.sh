#!/usr/bin/env bash
# The main job: the daemon and the reference agent, hooked together on
# loopback, with the baseline spec queued. Ctrl-C stops both cleanly; running
# it again resumes where it stopped (the queue and the agent's state persist in
# STATE, and the baseline is not queued twice).
#
#   scripts/run.sh BIN STATE
#
# Environment: NIGHTSHIFT_PORT (default 8080) and NIGHTSHIFT_AGENT_PORT (8090),
# NIGHTSHIFT_SLOTS (1), NIGHTSHIFT_BASELINE (experiments/baseline.json).
set -euo pipefail

bin=$1
state=$2
port=${NIGHTSHIFT_PORT:-8080}
agent_port=${NIGHTSHIFT_AGENT_PORT:-8090}
slots=${NIGHTSHIFT_SLOTS:-1}
baseline=${NIGHTSHIFT_BASELINE:-experiments/baseline.json}
url=http://127.0.0.1:$port

mkdir -p "$state"
# The hook's shared secret: made once, readable by this user only.
secret=$state/agent.secret
if [[ ! -s $secret ]]; then
    (umask 077 && head -c 32 /dev/urandom | base64 >"$secret")
fi

pids=()
# stop [STATUS]: stop everything started so far and exit with STATUS (0: a
# requested stop; non-zero: something failed to start or died).
stop() {
    trap - INT TERM
    echo
    echo "run: stopping (the daemon re-queues a running experiment)"
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    wait "${pids[@]}" 2>/dev/null || true
    exit "${1:-0}"
}
trap stop INT TERM

# Start one process in the background and wait for its "listening on" line.
start() {
    local name=$1 log=$2
    shift 2
    rm -f "$log.out" # so an old "listening on" line cannot count for this start
    "$@" >"$log.out" 2>>"$log" &
    pids+=($!)
    for _ in $(seq 100); do
        if grep -q "listening on" "$log.out" 2>/dev/null; then return 0; fi
        if ! kill -0 "${pids[-1]}" 2>/dev/null; then
            echo "run: $name did not start:" >&2
            tail -n 20 "$log" >&2
            stop 1
        fi
        sleep 0.1
    done
    echo "run: $name did not report its address in 10 s" >&2
    stop 1
}

start agent "$state/agent.log" "$bin" agent --listen "127.0.0.1:$agent_port" \
    --secret-file "$secret" --baseline "$baseline" --state "$state/agent-state.json"
start daemon "$state/daemon.log" "$bin" serve --dir "$state" --listen "127.0.0.1:$port" \
    --slots "$slots" --agent-url "http://127.0.0.1:$agent_port/hook" --agent-secret-file "$secret"

"$bin" submit "$baseline" --url "$url" || true

cat <<EOF

nightshift is running: the daemon at $url, the reference agent at 127.0.0.1:$agent_port.
  dashboard:       $url/
  live progress:   $bin watch --url $url
  experiments:     $bin ls --url $url          (or curl $url/v1/experiments)
  the best config: $bin best --url $url        (or curl $url/v1/best)
  from SQL:        sqlite3 $state/nightshift.db "select * from leaderboard limit 5"
  logs:            $state/daemon.log, $state/agent.log, $state/runs/<id>/train.log
Ctrl-C stops both; run it again to resume.

EOF
tail -n 0 -F "$state/daemon.log" &
pids+=($!)
# Should either end by itself, stop the other too.
wait -n "${pids[0]}" "${pids[1]}" || true
echo "run: the agent or the daemon exited; see $state/agent.log and $state/daemon.log" >&2
stop 1
