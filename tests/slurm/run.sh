#!/usr/bin/env bash
# tests/slurm/run.sh - the Slurm executor against a real one-node Slurm cluster
# on localhost (`make test-slurm`).
#
#   tests/slurm/run.sh NIGHTSHIFT_BIN BAD_WORKER_BIN [--quick] [--rest]
#
# As root on a Debian 12 machine: installs slurm-wlm, slurmrestd, its JWT
# plugin and munge (scripts/setup.sh --slurm, idempotent), writes a one-node
# slurm.conf into a temporary directory (used through SLURM_CONF; a system
# Slurm configuration is never read or touched), starts its own munged,
# slurmctld and slurmd on free ports, and runs `nightshift serve --executor
# slurm --slots 3` on a tiny dataset: through the commands (sbatch, squeue,
# scancel), or with --rest through its own slurmrestd (openapi/v0.0.38, JWT
# auth, running as nobody; the first daemon on a loopback port, the second on
# a UNIX socket). Checks:
#
#   1. two experiments succeed through Slurm, with their results in the database
#   2. one cancelled while its job runs ends `cancelled`
#   3. the daemon stopped while a job runs and started again re-attaches to the
#      job: no second submission, attempt 1, one result row
#   4. slow (about 1-2 minutes; skipped with --quick): a worker that outlives its
#      Slurm time limit ends `timeout`
#
# The slow check starts first and runs alongside the others. Every process the
# script starts is stopped by its PID on every exit path (trap). When Slurm
# cannot be installed or started, the script fails and says why.
set -euo pipefail

BIN=$(readlink -f "${1:?usage: run.sh NIGHTSHIFT_BIN BAD_WORKER_BIN [--quick]}")
BAD=$(readlink -f "${2:?usage: run.sh NIGHTSHIFT_BIN BAD_WORKER_BIN [--quick]}")
QUICK=0 REST=0
for arg in "${@:3}"; do
    case "$arg" in
    --quick) QUICK=1 ;;
    --rest) REST=1 ;;
    *)
        echo "run.sh: unknown option $arg" >&2
        exit 2
        ;;
    esac
done
SRC=$(cd "$(dirname "$0")/../.." && pwd)
T0=$(date +%s)

MODE=commands
((REST)) && MODE=slurmrestd
say() { echo "== slurm test ($MODE) [$(($(date +%s) - T0)) s]: $*"; }
fail() {
    echo "FAIL: $*" >&2
    exit 1
}

[[ $(id -u) -eq 0 ]] || fail "needs root (it starts slurmctld and slurmd)"
bash "$SRC/scripts/setup.sh" --slurm || fail "could not install slurm-wlm and munge"
for c in munged mungekey slurmctld slurmd slurmrestd sbatch squeue scancel sinfo scontrol sqlite3; do
    command -v "$c" >/dev/null || fail "$c is not installed"
done

TMP=$(mktemp -d -t nightshift-slurm.XXXXXX)
chmod 755 "$TMP"
DAEMON_PID=""
PIDS_OF=() # pid files of the Slurm daemons, stopped in reverse order
status=1

stop_pid() { # stop_pid PID NAME: SIGTERM, then SIGKILL after 10 s
    local pid=$1 i
    [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null || return 0
    kill -TERM "$pid" 2>/dev/null || return 0
    for ((i = 0; i < 100; i++)); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    echo "   $2 ($pid) ignored SIGTERM; SIGKILL" >&2
    kill -KILL "$pid" 2>/dev/null || true
}

cleanup() {
    set +e
    stop_pid "$DAEMON_PID" "nightshift serve"
    if [[ -f "$TMP/slurmctld.pid" ]]; then
        # Jobs of this private cluster only (its own SLURM_CONF).
        scancel --me >/dev/null 2>&1
        for ((i = 0; i < 50; i++)); do
            [[ -z "$(squeue --me -h -t running,completing 2>/dev/null)" ]] && break
            sleep 0.2
        done
    fi
    for ((k = ${#PIDS_OF[@]} - 1; k >= 0; k--)); do
        f=${PIDS_OF[k]}
        [[ -f "$f" ]] && stop_pid "$(cat "$f")" "$(basename "$f" .pid)"
    done
    if [[ $status -ne 0 ]]; then
        for f in "$TMP"/log/*.log "$TMP"/serve*.err; do
            [[ -f "$f" ]] || continue
            echo "---- $(basename "$f") (last 30 lines)" >&2
            tail -n 30 "$f" >&2
        done
    fi
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# ------------------------------------------------------------ the cluster

free_port() { # a TCP port nothing listens on, from 20000 up
    local p
    for ((p = 20000 + RANDOM % 20000; ; p++)); do
        (echo >"/dev/tcp/127.0.0.1/$p") 2>/dev/null || {
            echo "$p"
            return
        }
    done
}

mkdir -p "$TMP/log" "$TMP/spool" "$TMP/ctld"
HOST=$(hostname -s)
CPUS=$(nproc)
CTLD_PORT=$(free_port)
SLURMD_PORT=$(free_port)
REST_PORT=$(free_port)
[[ "$SLURMD_PORT" != "$CTLD_PORT" ]] || SLURMD_PORT=$((CTLD_PORT + 1))
[[ "$REST_PORT" != "$CTLD_PORT" && "$REST_PORT" != "$SLURMD_PORT" ]] ||
    REST_PORT=$((SLURMD_PORT + 1))
# The controller's key for the JSON web tokens slurmrestd's clients present.
dd if=/dev/urandom of="$TMP/jwt.key" bs=32 count=1 2>/dev/null
chmod 600 "$TMP/jwt.key"

mungekey --create --keyfile="$TMP/munge.key" 2>"$TMP/log/mungekey.log" ||
    fail "mungekey: $(cat "$TMP/log/mungekey.log")"
munged --socket="$TMP/munge.sock" --key-file="$TMP/munge.key" --pid-file="$TMP/munged.pid" \
    --log-file="$TMP/log/munged.log" --seed-file="$TMP/munge.seed" --force ||
    fail "munged did not start: $(tail -n 5 "$TMP/log/munged.log" 2>/dev/null)"
PIDS_OF+=("$TMP/munged.pid")

cat >"$TMP/slurm.conf" <<EOF
# A one-node cluster for the nightshift Slurm test (written by tests/slurm/run.sh).
ClusterName=nightshift-test
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
AuthType=auth/munge
AuthInfo=socket=$TMP/munge.sock
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=$TMP/jwt.key
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$TMP/ctld
SlurmdSpoolDir=$TMP/spool
SlurmctldPidFile=$TMP/slurmctld.pid
SlurmdPidFile=$TMP/slurmd.pid
SlurmctldLogFile=$TMP/log/slurmctld.log
SlurmdLogFile=$TMP/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
InactiveLimit=0
KillWait=5
MinJobAge=600
OverTimeLimit=0
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=2048 State=UNKNOWN
PartitionName=test Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF="$TMP/slurm.conf"

slurmctld || fail "slurmctld did not start: $(tail -n 5 "$TMP/log/slurmctld.log" 2>/dev/null)"
PIDS_OF+=("$TMP/slurmctld.pid")
slurmd || fail "slurmd did not start: $(tail -n 5 "$TMP/log/slurmd.log" 2>/dev/null)"
PIDS_OF+=("$TMP/slurmd.pid")
for ((i = 0; ; i++)); do
    state=$(sinfo -h -N -o %T 2>/dev/null | head -n 1)
    [[ "$state" == idle ]] && break
    ((i < 150)) || fail "the node did not come up within 30 s (sinfo says '${state:-nothing}')"
    sleep 0.2
done
say "one-node Slurm up ($(sinfo -V), $CPUS CPUs, ports $CTLD_PORT/$SLURMD_PORT)"

REST_ARGS=()
if ((REST)); then
    # slurmrestd refuses to run as root or SlurmUser: it serves as nobody and
    # speaks to the controller with the callers' tokens only (SLURM_JWT=daemon).
    mkdir -p "$TMP/rest"
    chown nobody:nogroup "$TMP/rest"
    SLURM_JWT=daemon slurmrestd -u nobody -g nogroup -a rest_auth/jwt -s openapi/v0.0.38 \
        "127.0.0.1:$REST_PORT" "unix:$TMP/rest/slurmrestd.sock" >"$TMP/log/slurmrestd.log" 2>&1 &
    echo $! >"$TMP/slurmrestd.pid"
    PIDS_OF+=("$TMP/slurmrestd.pid")
    token=$(scontrol token username="$(id -un)" lifespan=3600) ||
        fail "scontrol token: $token"
    echo "${token#SLURM_JWT=}" >"$TMP/jwt"
    for ((i = 0; ; i++)); do
        code=$(curl -s -o /dev/null -w '%{http_code}' -H "X-SLURM-USER-NAME: $(id -un)" \
            -H "X-SLURM-USER-TOKEN: $(cat "$TMP/jwt")" \
            "http://127.0.0.1:$REST_PORT/slurm/v0.0.38/ping" || true)
        [[ "$code" == 200 ]] && break
        kill -0 "$(cat "$TMP/slurmrestd.pid")" 2>/dev/null ||
            fail "slurmrestd exited: $(tail -n 5 "$TMP/log/slurmrestd.log")"
        ((i < 100)) || fail "slurmrestd did not answer within 20 s (HTTP ${code:-none})"
        sleep 0.2
    done
    [[ -S "$TMP/rest/slurmrestd.sock" ]] || fail "slurmrestd made no socket"
    say "slurmrestd up on port $REST_PORT and a UNIX socket (JWT)"
    REST_ARGS=(--slurm-rest "http://127.0.0.1:$REST_PORT" --slurm-token-file "$TMP/jwt")
fi

# ------------------------------------------------------------ the daemon

STATE="$TMP/state"
DB="$STATE/nightshift.db"
python3 - "$TMP/corpus.jsonl" <<'EOF'
import json, sys
# The test suite's tiny corpus (tests/testutil.c tu_prep_tiny): forty short,
# very regular documents that a tiny model learns in seconds.
subjects = ["the cat", "a dog", "the bird", "my friend"]
verbs = ["sat on", "ran to", "looked at", "walked past"]
objects = ["the mat", "the park", "a tree", "the house"]
with open(sys.argv[1], "w") as f:
    for d in range(40):
        text = "".join(f"{subjects[(d + s) % 4]} {verbs[(d * 3 + s) % 4]} "
                       f"{objects[(d + 2 * s) % 4]}. " for s in range(30))
        f.write(json.dumps({"text": text}) + "\n")
EOF
"$BIN" prep --dir "$STATE" --name tiny --vocab 300 --val-fraction 0.1 --quiet "$TMP/corpus.jsonl"

# The worker: the real trainer, except for the experiment named "hang", which
# runs the stand-in worker that never ends (the time-limit check).
cat >"$TMP/worker.sh" <<EOF
#!/bin/sh
for a; do spec=\$a; done
if grep -q '"name":"hang"' "\$spec"; then exec '$BAD' hang; fi
exec '$BIN' train "\$@"
EOF
chmod +x "$TMP/worker.sh"

URL=""
start_daemon() { # start_daemon N: serve --executor slurm; sets DAEMON_PID and URL
    : >"$TMP/serve$1.out" # before the daemon: it may open it later than we read it
    "$BIN" serve --dir "$STATE" --listen 127.0.0.1:0 --executor slurm --slots 3 \
        --memory-mb 512 --deadline-slack 20 --slurm-poll 1 --slurm-job-prefix nstest \
        --worker-cmd "$TMP/worker.sh" "${REST_ARGS[@]}" >"$TMP/serve$1.out" 2>"$TMP/serve$1.err" &
    DAEMON_PID=$!
    for ((i = 0; i < 100; i++)); do
        URL=$(sed -n 's/^listening on //p' "$TMP/serve$1.out")
        [[ -n "$URL" ]] && return 0
        kill -0 "$DAEMON_PID" 2>/dev/null || fail "the daemon exited: $(cat "$TMP/serve$1.err")"
        sleep 0.1
    done
    fail "the daemon did not listen within 10 s"
}

sql() { sqlite3 -cmd ".timeout 2000" "$DB" "$@"; }

submit() { # submit NAME SEED BUDGET: prints the new experiment's id
    local spec="{\"name\":\"$1\",\"seed\":$2,\"dataset\":\"tiny\",\"time_budget_s\":$3,
      \"model\":{\"depth\":2,\"n_embd\":32,\"n_head\":2,\"seq_len\":32},
      \"train\":{\"batch_size\":4,\"total_batch_tokens\":128},
      \"resources\":{\"threads\":1,\"peak_gflops\":10}}"
    local out
    out=$(echo "$spec" | "$BIN" submit - --url "$URL") || fail "submit $1: $out"
    [[ "$out" =~ ^([0-9]+)\ queued ]] || fail "submit $1: $out"
    echo "${BASH_REMATCH[1]}"
}

wait_for() { # wait_for SECONDS WHAT COMMAND...: until COMMAND succeeds
    local limit=$1 what=$2 t
    shift 2
    t=$(date +%s)
    until "$@"; do
        (($(date +%s) - t < limit)) || fail "$what: not within $limit s"
        sleep 0.5
    done
}

status_is() { [[ "$(sql "select status from experiments where id = $1")" == "$2" ]]; }
job_of() { sql "select ifnull(slurm_job_id, '') from experiments where id = $1"; }
job_state_is() { # job_state_is EXPERIMENT STATE
    local job
    job=$(job_of "$1")
    [[ -n "$job" && "$(squeue -h -t all -j "$job" -o %T 2>/dev/null)" == "$2" ]]
}
has_metrics() { (($(sql "select count(*) from metrics where experiment_id = $1") > 0)); }
final() { # final ID: status|reason
    sql "select status || '|' || ifnull(reason, '') from experiments where id = $1"
}

start_daemon 1
say "daemon 1 (pid $DAEMON_PID) at $URL"

if ((QUICK == 0)); then
    HANG=$(submit hang 10 1)
    T_HANG=$(date +%s)
    wait_for 30 "the hang job runs" job_state_is "$HANG" RUNNING
    say "experiment $HANG (never ends) is slurm job $(job_of "$HANG") with --time=1"
fi

# 1 + 2: two runs that succeed, and one cancelled while its job runs.
OK1=$(submit ok1 1 3)
OK2=$(submit ok2 2 3)
CAN=$(submit cancel-me 3 60)
wait_for 120 "experiment $CAN's job runs and reports progress" \
    eval "job_state_is $CAN RUNNING && has_metrics $CAN"
"$BIN" cancel "$CAN" --url "$URL" >/dev/null
T_CAN=$(date +%s)
wait_for 60 "experiment $CAN ends" eval "! status_is $CAN running"
[[ "$(final "$CAN")" == "cancelled|"*"by the daemon"* ]] || fail "cancelled run: $(final "$CAN")"
say "cancelled: experiment $CAN in $(($(date +%s) - T_CAN)) s: $(final "$CAN")"

for id in $OK1 $OK2; do
    wait_for 120 "experiment $id ends" eval "! status_is $id running && ! status_is $id queued"
    [[ "$(final "$id")" == "succeeded|" ]] || fail "experiment $id: $(final "$id")"
done
row=$(sql "select count(*), count(distinct e.slurm_job_id), min(r.val_bpb > 0)
           from experiments e join results r on r.experiment_id = e.id
           where e.id in ($OK1, $OK2) and e.executor = 'slurm'")
[[ "$row" == "2|2|1" ]] || fail "results of the two succeeded runs: $row (want 2|2|1)"
say "succeeded: experiments $OK1 and $OK2 (slurm jobs $(job_of "$OK1"), $(job_of "$OK2")) with" \
    "val_bpb $(sql "select group_concat(round(val_bpb, 4), ', ') from results
                   where experiment_id in ($OK1, $OK2)")"

# 3: stop the daemon while a job runs; the next one re-attaches.
RE=$(submit reattach 4 15)
wait_for 60 "experiment $RE's job runs and reports progress" \
    eval "job_state_is $RE RUNNING && has_metrics $RE"
RE_JOB=$(job_of "$RE")
stop_pid "$DAEMON_PID" "nightshift serve"
DAEMON_PID=""
job_state_is "$RE" RUNNING || fail "slurm job $RE_JOB did not outlive the daemon"
[[ "$(sql "select status || ' ' || attempt from experiments where id = $RE")" == "running 1" ]] ||
    fail "after the stop: $(sql "select status, attempt, reason from experiments where id = $RE")"
say "daemon 1 stopped; slurm job $RE_JOB (experiment $RE) keeps running"
# The second daemon reaches slurmrestd through its UNIX socket.
((REST)) && REST_ARGS=(--slurm-rest "unix:$TMP/rest/slurmrestd.sock" --slurm-token-file "$TMP/jwt")
start_daemon 2
say "daemon 2 (pid $DAEMON_PID) at $URL"
grep -q "experiment $RE re-attached" "$TMP/serve2.err" || fail "daemon 2 did not re-attach"
wait_for 120 "experiment $RE ends" eval "! status_is $RE running"
[[ "$(final "$RE")" == "succeeded|" ]] || fail "re-attached run: $(final "$RE")"
row=$(sql "select e.attempt, e.slurm_job_id, (select count(*) from results
           where experiment_id = e.id) from experiments e where e.id = $RE")
[[ "$row" == "1|$RE_JOB|1" ]] || fail "re-attached run: attempt|job|results = $row"
jobs=$(squeue -h -t all --name="nstest-$RE" -o %i | wc -l)
((jobs == 1)) || fail "experiment $RE was submitted $jobs times"
say "re-attached: experiment $RE succeeded as slurm job $RE_JOB, attempt 1, one result row," \
    "one submission"

# 4: the time limit.
if ((QUICK == 0)); then
    wait_for 240 "experiment $HANG ends" eval "! status_is $HANG running"
    [[ "$(final "$HANG")" == "timeout|"* ]] || fail "hang: $(final "$HANG")"
    say "timeout: experiment $HANG after $(($(date +%s) - T_HANG)) s: $(final "$HANG")"
fi

stop_pid "$DAEMON_PID" "nightshift serve"
DAEMON_PID=""
status=0
say "all checks passed"
