#!/usr/bin/env bash
# The fault-injection soak: the daemon (two slots, 1-2 s budgets) and the
# reference agent run hooked together for MINUTES while a driver injects
# faults at random:
#
#   worker-kill    kill -9 a running `nightshift train`
#   daemon-kill    kill -9 the daemon, then start it again on the same state
#   agent-hang     SIGSTOP the agent for 5-15 s (the hook's requests time out)
#   agent-garbage  replace the agent for 5-15 s by a stand-in that answers
#                  garbage, trailing data, NUL escapes, 500s or nothing
#   disk-full      fill the state directory's tmpfs for 3-8 s, then free it
#                  (needs root for `mount -t tmpfs`; skipped with a message)
#   submit         POST random valid and invalid specs (invalid ones must be 400)
#
# At the end both processes are stopped with SIGTERM and the database is
# checked with SQL (see check_invariants). Prints the faults injected by kind,
# the experiments by status and every invariant violation; exits 1 if there
# was one.
#
#   tests/soak/soak.sh BIN MINUTES        (make soak MINUTES=N)
set -uo pipefail

bin=$(realpath "$1")
minutes=${2:-10}
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/nightshift-soak.XXXXXX")
state=$work/state
mounted=0
daemon_pid=
agent_pid=
garbage_pid=

log() { echo "soak: $(date -u +%H:%M:%S) $*"; }

cleanup() {
    for p in $garbage_pid $agent_pid $daemon_pid; do
        kill -CONT "$p" 2>/dev/null
        kill -KILL "$p" 2>/dev/null
    done
    wait 2>/dev/null
    ((mounted)) && umount "$state" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
port=$(free_port)
agent_port=$(free_port)
url=http://127.0.0.1:$port

# ----------------------------------------------------------------- the state

mkdir -p "$state"
if [[ $(id -u) -eq 0 ]] && mount -t tmpfs -o size=96m tmpfs "$state" 2>/dev/null; then
    mounted=1
else
    log "not root (or no tmpfs): the disk-full fault is skipped"
fi
bash "$(dirname "$0")/../tiny-corpus.sh" >"$work/corpus.jsonl"
"$bin" prep --dir "$state" --name default --vocab 300 --val-fraction 0.1 --quiet \
    "$work/corpus.jsonl" || exit 1

head -c 32 /dev/urandom | base64 >"$work/secret"
chmod 600 "$work/secret"
cat >"$work/baseline.json" <<'EOF'
{"name":"baseline","seed":1,"dataset":"default","time_budget_s":1,
 "model":{"depth":2,"n_embd":32,"n_head":2,"seq_len":32},
 "train":{"batch_size":4,"total_batch_tokens":128},
 "resources":{"threads":1,"peak_gflops":10}}
EOF

# ------------------------------------------------------------- the processes

# start_logged NAME LOG CMD...: start in the background, wait for "listening on".
started_pid=
start_logged() {
    local name=$1 logf=$2
    shift 2
    "$@" >"$logf.out" 2>>"$logf" &
    started_pid=$!
    for _ in $(seq 200); do
        grep -q "listening on" "$logf.out" 2>/dev/null && return 0
        kill -0 "$started_pid" 2>/dev/null || break
        sleep 0.05
    done
    log "$name did not start; tail of $logf:"
    tail -n 20 "$logf"
    return 1
}

start_daemon() {
    rm -f "$work/daemon.log.out"
    # --deadline-slack 5: a run of 1-2 s that hangs is a timeout after ~7 s.
    start_logged daemon "$work/daemon.log" "$bin" serve --dir "$state" --listen "127.0.0.1:$port" \
        --slots 2 --memory-mb 0 --deadline-slack 5 --kill-grace 1 \
        --agent-url "http://127.0.0.1:$agent_port/hook" --agent-secret-file "$work/secret" ||
        return 1
    daemon_pid=$started_pid
}

start_agent() {
    rm -f "$work/agent.log.out"
    start_logged agent "$work/agent.log" "$bin" agent --listen "127.0.0.1:$agent_port" \
        --secret-file "$work/secret" --baseline "$work/baseline.json" \
        --state "$work/agent-state.json" || return 1
    agent_pid=$started_pid
}

# A stand-in agent on the agent's port that answers badly, one way per request.
start_garbage() {
    python3 - "$agent_port" >>"$work/garbage.log" 2>&1 <<'EOF' &
import http.server, random, sys, time
answers = [
    (200, b"this is not json"), (200, b'{"name":"a","seed":5}{"name":"b"}'),
    (200, b'{"name":"a\\u0000b","seed":7}'), (200, b'{"name":"a\x01b"}'),
    (200, b'[{"model":{"n_head":7}}]'), (200, b'{"time_budget_s":1e17}'),
    (500, b"oops"), (404, b""), ("hang", b""), ("close", b""),
]
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        status, body = random.choice(answers)
        if status == "hang":
            time.sleep(40)
            return
        if status == "close":
            self.close_connection = True
            return
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer.allow_reuse_address = True
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
EOF
    garbage_pid=$!
}

# ------------------------------------------------------------- submissions

accepted=$work/accepted.ids # one id per accepted (201) submission
: >"$accepted"
declare -A faults=()
bad_accepted=0
good_refused=0

submit() { # submit JSON-TEXT -> prints "STATUS BODY"
    curl -s -m 10 -o "$work/reply" -w '%{http_code}' -H 'Content-Type: application/json' \
        --data-binary @- "$url/v1/experiments" <<<"$1"
}

submit_random() {
    local r=$((RANDOM % 10)) seed=$((RANDOM * 32768 + RANDOM)) code
    if ((r < 6)); then
        local depth=$((1 + RANDOM % 2)) width=$((32 * (1 + RANDOM % 2))) budget=$((1 + RANDOM % 2))
        code=$(submit "{\"name\":\"soak\",\"seed\":$seed,\"dataset\":\"default\",\"time_budget_s\":$budget,\"model\":{\"depth\":$depth,\"n_embd\":$width,\"n_head\":2,\"seq_len\":32},\"train\":{\"batch_size\":4,\"total_batch_tokens\":128},\"resources\":{\"threads\":1,\"peak_gflops\":10}}")
        faults[submit-valid]=$((${faults[submit-valid]:-0} + 1))
        if [[ $code == 201 ]]; then
            python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' "$work/reply" >>"$accepted"
        elif [[ $code == 4* ]]; then
            good_refused=$((good_refused + 1))
            log "a valid spec was refused ($code): $(head -c 300 "$work/reply")"
        fi # 000/5xx: the daemon is down or restarting; nothing was promised
        return
    fi
    local invalid=(
        '{"model":{"n_head":7}}' '{"bogus":1}' '{"time_budget_s":1e17}'
        '{"seed":1}{"seed":2}' '{"name":"a\u0000b"}' "{\"name\":\"a$(printf '\x01')b\"}"
        'not json' '{"dataset":"../etc"}' '{"train":{"matrix_lr":1e300}}' '[]'
    )
    code=$(submit "${invalid[$((RANDOM % ${#invalid[@]}))]}")
    faults[submit-invalid]=$((${faults[submit-invalid]:-0} + 1))
    if [[ $code == 2* ]]; then
        bad_accepted=$((bad_accepted + 1))
        log "an invalid spec was accepted: $(head -c 300 "$work/reply")"
    fi
}

# ------------------------------------------------------------------- faults

fault_worker_kill() {
    local pids
    pids=$(pgrep -f "$bin train --dir" || true)
    [[ -z $pids ]] && return
    local p
    p=$(shuf -n 1 <<<"$pids")
    kill -KILL "$p" 2>/dev/null && faults[worker-kill]=$((${faults[worker-kill]:-0} + 1))
}

fault_daemon_kill() {
    kill -KILL "$daemon_pid" 2>/dev/null
    wait "$daemon_pid" 2>/dev/null
    faults[daemon-kill]=$((${faults[daemon-kill]:-0} + 1))
    sleep 0.$((RANDOM % 10))
    start_daemon || { log "the daemon did not come back"; exit 1; }
}

fault_agent_hang() {
    kill -STOP "$agent_pid"
    faults[agent-hang]=$((${faults[agent-hang]:-0} + 1))
    sleep $((5 + RANDOM % 11))
    kill -CONT "$agent_pid"
}

fault_agent_garbage() {
    kill -TERM "$agent_pid"
    wait "$agent_pid" 2>/dev/null
    start_garbage
    faults[agent-garbage]=$((${faults[agent-garbage]:-0} + 1))
    sleep $((5 + RANDOM % 11))
    kill -KILL "$garbage_pid"
    wait "$garbage_pid" 2>/dev/null
    garbage_pid=
    start_agent || { log "the agent did not come back"; exit 1; }
}

fault_disk_full() {
    ((mounted)) || return
    dd if=/dev/zero of="$state/filler" bs=1M status=none 2>/dev/null
    faults[disk-full]=$((${faults[disk-full]:-0} + 1))
    sleep $((3 + RANDOM % 6))
    rm -f "$state/filler"
}

# -------------------------------------------------------------------- run

start_agent || exit 1
start_daemon || exit 1
log "daemon at $url, agent at 127.0.0.1:$agent_port, state $state; $minutes min"
end=$(($(date +%s) + minutes * 60))
while (($(date +%s) < end)); do
    for _ in $(seq $((1 + RANDOM % 3))); do submit_random; done
    sleep $((2 + RANDOM % 4))
    case $((RANDOM % 10)) in
    0 | 1 | 2) fault_worker_kill ;;
    3) fault_daemon_kill ;;
    4) fault_agent_hang ;;
    5) fault_agent_garbage ;;
    6 | 7) fault_disk_full ;;
    *) ;; # a quiet spell
    esac
done

# Let what runs settle a little, then stop both the normal way.
sleep 3
kill -TERM "$daemon_pid"
for _ in $(seq 300); do kill -0 "$daemon_pid" 2>/dev/null || break; sleep 0.1; done
wait "$daemon_pid"
daemon_rc=$?
daemon_pid=
kill -TERM "$agent_pid"
wait "$agent_pid" 2>/dev/null
agent_pid=

# ----------------------------------------------------------------- checks

db=$state/nightshift.db
violations=0
check() { # check NAME SQL: the query counts violations
    local n
    n=$(sqlite3 "$db" "$2")
    if [[ $n != 0 ]]; then
        violations=$((violations + 1))
        echo "VIOLATION  $1: $n"
    else
        echo "ok         $1"
    fi
}

echo
echo "== faults injected"
for k in worker-kill daemon-kill agent-hang agent-garbage disk-full submit-valid submit-invalid; do
    printf '  %-15s %d\n' "$k" "${faults[$k]:-0}"
done
echo "== experiments by status (source)"
sqlite3 "$db" "SELECT '  ' || status || ' (' || source || '): ' || count(*) FROM experiments GROUP BY status, source ORDER BY status, source"
echo "  completed (a final status): $(sqlite3 "$db" "SELECT count(*) FROM experiments WHERE status NOT IN ('queued','running')")"
echo "  hook deliveries: $(sqlite3 "$db" "SELECT count(*) || ' attempts of ' || count(DISTINCT event_id) || ' events, ' || sum(http_status BETWEEN 200 AND 299) || ' answered 2xx' FROM hook_deliveries")"
echo "== invariants"
[[ $daemon_rc == 0 ]] || { violations=$((violations + 1)); echo "VIOLATION  the daemon exited $daemon_rc on SIGTERM"; }
check "integrity_check" "SELECT count(*) FROM pragma_integrity_check WHERE integrity_check != 'ok'"
check "experiments in a known state" "SELECT count(*) FROM experiments WHERE status NOT IN ('queued','succeeded','failed','crashed','timeout','oom','diverged','cancelled','interrupted')"
check "running after a clean stop" "SELECT count(*) FROM experiments WHERE status = 'running'"
lost=0
while read -r id; do
    [[ -z $id ]] && continue
    [[ $(sqlite3 "$db" "SELECT count(*) FROM experiments WHERE id = $id") == 1 ]] || lost=$((lost + 1))
done <"$accepted"
echo "  accepted submissions: $(wc -l <"$accepted")"
if ((lost)); then violations=$((violations + 1)); echo "VIOLATION  accepted submissions lost: $lost"; else echo "ok         every accepted submission is an experiment"; fi
check "results without an experiment" "SELECT count(*) FROM results WHERE experiment_id NOT IN (SELECT id FROM experiments)"
check "results of runs that did not succeed" "SELECT count(*) FROM results r JOIN experiments e ON e.id = r.experiment_id WHERE e.status != 'succeeded'"
check "succeeded without a result" "SELECT count(*) FROM experiments e WHERE status = 'succeeded' AND NOT EXISTS (SELECT 1 FROM results r WHERE r.experiment_id = e.id)"
check "duplicate results" "SELECT count(*) FROM (SELECT experiment_id FROM results GROUP BY experiment_id HAVING count(*) > 1)"
check "metrics without an experiment" "SELECT count(*) FROM metrics WHERE experiment_id NOT IN (SELECT id FROM experiments)"
check "metrics steps beyond the run's step count" "SELECT count(*) FROM metrics m JOIN results r ON r.experiment_id = m.experiment_id WHERE m.step > r.num_steps OR m.step < 0"
check "hook attempts numbered 1..n per event" "SELECT count(*) FROM (SELECT event_id FROM hook_deliveries GROUP BY event_id HAVING min(attempt) != 1 OR max(attempt) != count(*) OR count(DISTINCT attempt) != count(*))"
check "hook attempts with neither a 2xx nor an error" "SELECT count(*) FROM hook_deliveries WHERE NOT (http_status BETWEEN 200 AND 299) AND error IS NULL"
check "hook attempts beyond the cap of 8" "SELECT count(*) FROM hook_deliveries WHERE attempt > 8"
((bad_accepted)) && { violations=$((violations + 1)); echo "VIOLATION  invalid specs accepted: $bad_accepted"; }
((good_refused)) && { violations=$((violations + 1)); echo "VIOLATION  valid specs refused: $good_refused"; }
echo "  (not an invariant here: $(sqlite3 "$db" "SELECT count(*) FROM experiments WHERE status NOT IN ('queued','running','interrupted')") finished experiments," \
    "$(sqlite3 "$db" "SELECT count(DISTINCT event_id) FROM hook_deliveries WHERE event_type = 'experiment.finished'") experiment.finished events delivered or tried;" \
    "the hook keeps no outbox across a kill -9)"
echo "== $violations invariant violation(s)"
if ((violations)); then
    cp "$work/daemon.log" "${TMPDIR:-/tmp}/nightshift-soak-daemon.log" 2>/dev/null &&
        echo "daemon log kept in ${TMPDIR:-/tmp}/nightshift-soak-daemon.log"
    exit 1
fi
