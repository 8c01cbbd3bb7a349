#!/usr/bin/env bash
# The main job: the daemon and the reference agent, hooked together on
# loopback, with the baseline spec queued. Ctrl-C stops both cleanly; running
# it again resumes where it stopped (the queue and the agent's state persist in
# STATE, and the baseline is not queued twice).
#
#   scripts/run.sh BIN STATE
#
# Environment: NIGHTSHIFT_PORT (default 8080) and NIGHTSHIFT_AGENT_PORT (8090),
# NIGHTSHIFT_SLOTS (auto: serve picks slots and threads from the CPUs, the memory
# and the default spec; a number fixes it), NIGHTSHIFT_BASELINE (experiments/specs/baseline.json),
# NIGHTSHIFT_PRUNE (off; "median" stops runs that lag the median, "asha" runs successive
# halving over budgets; see serve --help),
# NIGHTSHIFT_STRATEGY (the agent's --strategy: climb, tpe or random; default below),
# NIGHTSHIFT_UNTIL (HH:MM, the agent's --until: the night's end, a local time; its
# last runs then confirm the answer, and nothing starts that cannot end in time).
set -euo pipefail

# The agent's strategy when NIGHTSHIFT_STRATEGY does not name one: the one
# place to change it (make bench-search measures the strategies side by side).
default_strategy=tpe

bin=$1
state=$2
port=${NIGHTSHIFT_PORT:-8080}
agent_port=${NIGHTSHIFT_AGENT_PORT:-8090}
slots=${NIGHTSHIFT_SLOTS:-auto}
baseline=${NIGHTSHIFT_BASELINE:-experiments/specs/baseline.json}
prune=${NIGHTSHIFT_PRUNE:-off}
strategy=${NIGHTSHIFT_STRATEGY:-$default_strategy}
until_args=()
[ -n "${NIGHTSHIFT_UNTIL:-}" ] && until_args=(--until "$NIGHTSHIFT_UNTIL")
# The agent sizes its night by the runs --until leaves at its pace: told the
# slots when they are a number (with auto it counts one slot until three runs
# have ended and their pace is known).
[[ $slots =~ ^[0-9]+$ ]] && until_args+=(--slots "$slots")
url=http://127.0.0.1:$port

# Already running (a second `make run`)? Say where, rather than fail on the port.
if "$bin" watch --once --url "$url" >/dev/null 2>&1; then
    echo "nightshift is already running at $url"
    echo "  live progress:   $bin watch --url $url"
    echo "  the agent:       $bin agent status --url http://127.0.0.1:$agent_port"
    exit 0
fi

mkdir -p "$state"
# The hook's shared secret and the daemon's token: made once, readable by this
# user only. The token guards every POST (another user of the machine cannot
# submit or cancel); the CLI finds it in the state directory by itself.
secret=$state/agent.secret
token=$state/token
for f in "$secret" "$token"; do
    if [[ ! -s $f ]]; then
        (umask 077 && head -c 32 /dev/urandom | base64 | tr -d '/+=\n' >"$f")
    fi
    chmod 600 "$f"
done

# Each background job in its own process group: the terminal's Ctrl-C
# reaches only this script, which stops the others once (one SIGTERM each).
set -m
pids=()
# stop [STATUS]: stop everything started so far and exit with STATUS (0: a
# requested stop; non-zero: something failed to start or died).
stop() {
    trap - INT TERM HUP
    echo
    echo "run: stopping (the daemon re-queues a running experiment)"
    [ -z "${watcher:-}" ] || kill -TERM "$watcher" 2>/dev/null || true
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    wait "${pids[@]}" 2>/dev/null || true
    exit "${1:-0}"
}
trap stop INT TERM HUP

# A signal sent to make alone (`kill -INT <make's pid>`, not to its process
# group) would not reach this script: make forwards SIGTERM only, and on
# SIGINT or SIGHUP waits for its job to end. Make stops catching a signal once
# it has one (its handler resets it to the default), so watch the parent's
# caught signals (SigCgt in /proc/PPID/status: bit 0 SIGHUP, 1 SIGINT, 14
# SIGTERM) and stop when one of them leaves the set, or the parent goes.
caught() { awk '/^SigCgt:/ { print $2 }' "/proc/$1/status" 2>/dev/null; }
watch_make() {
    local parent=$PPID had now
    [ "$(cat "/proc/$parent/comm" 2>/dev/null)" = make ] || return 0
    had=$(caught "$parent")
    [ -n "$had" ] && (((0x$had & 0x4003) != 0)) || return 0
    while sleep 0.5; do
        now=$(caught "$parent")
        if [ -z "$now" ] || (((0x$now & 0x4003) != (0x$had & 0x4003))); then
            echo "run: make was signalled" >&2
            kill -TERM $$
            return 0
        fi
    done
}
watch_make &
watcher=$!

# The byte just past the end of a log (1 for none), for `tail -c +N`: what
# this run wrote, not what earlier runs left.
log_end() { echo $(($(stat -c %s "$1" 2>/dev/null || echo 0) + 1)); }

# Start one process in the background and wait for its "listening on" line.
start() {
    local name=$1 log=$2 from
    shift 2
    from=$(log_end "$log")
    rm -f "$log.out" # so an old "listening on" line cannot count for this start
    "$@" >"$log.out" 2>>"$log" &
    pids+=($!)
    for _ in $(seq 100); do
        if grep -q "listening on" "$log.out" 2>/dev/null; then return 0; fi
        if ! kill -0 "${pids[-1]}" 2>/dev/null; then
            echo "run: $name did not start:" >&2
            tail -c "+$from" "$log" | tail -n 20 >&2
            stop 1
        fi
        sleep 0.1
    done
    echo "run: $name did not report its address in 10 s" >&2
    stop 1
}

start agent "$state/agent.log" "$bin" agent --listen "127.0.0.1:$agent_port" \
    --secret-file "$secret" --baseline "$baseline" --strategy "$strategy" \
    --space experiments/search/space.json --state "$state/agent-state.json" "${until_args[@]}"
daemon_from=$(log_end "$state/daemon.log")
start daemon "$state/daemon.log" "$bin" serve --dir "$state" --listen "127.0.0.1:$port" \
    --slots "$slots" --prune "$prune" --agent-url "http://127.0.0.1:$agent_port/hook" \
    --agent-secret-file "$secret" --token-file "$token"

# Follow the daemon's log from its start, so this pane shows the baseline start.
tail -c "+$daemon_from" -F "$state/daemon.log" 2>/dev/null &
pids+=($!)

# The agent may have queued the baseline already (it proposes it on the
# daemon's first queue.empty); then the submission is a duplicate.
if reply=$("$bin" submit "$baseline" --url "$url" --token-file "$token" 2>&1); then
    if [[ $reply =~ ^([0-9]+)\ duplicate\ \(already\ (.*)\)$ ]]; then
        echo "run: the baseline is experiment ${BASH_REMATCH[1]} (${BASH_REMATCH[2]})"
    else
        echo "run: the baseline is experiment ${reply%% *} (queued)"
    fi
else
    echo "run: submitting the baseline failed: $reply" >&2
fi

cat <<EOF

nightshift is running: the daemon at $url, the reference agent ($strategy) at 127.0.0.1:$agent_port.
  dashboard:       $url/
  live progress:   $bin watch --url $url
  the agent:       $bin agent status --url http://127.0.0.1:$agent_port
  experiments:     $bin ls --url $url          (or curl $url/v1/experiments)
  the best config: $bin best --url $url        (or curl $url/v1/best)
  from SQL:        sqlite3 -header -column $state/nightshift.db "select id, name, round(val_bpb, 4) as val_bpb, dataset, budget_kind, budget, eval_tokens from leaderboard limit 5"
  logs:            $state/daemon.log, $state/agent.log, $state/runs/<id>/train.log
Ctrl-C stops both; run it again to resume.

EOF
# Should either end by itself, stop the other too.
wait -n "${pids[0]}" "${pids[1]}" || true
echo "run: the agent or the daemon exited; see $state/agent.log and $state/daemon.log" >&2
stop 1
