#!/usr/bin/env bash
# The main job as a service: scripts/run.sh (the daemon and the reference
# agent) detached from the shell that starts it, so the night survives
# logging out, closing the terminal or a dropped ssh connection.
#
#   scripts/service.sh start|stop|status|unit BIN STATE
#
# start: runs run.sh in a session of its own (setsid: no controlling
#   terminal, so no SIGHUP when the terminal goes), its output in
#   STATE/nightshift.log and its pid in STATE/nightshift.pid, and returns
#   once the daemon answers. It refuses a second start while that pid runs
#   (or while any daemon answers on the port), and removes a pid file whose
#   process is gone (a reboot, a kill -9).
# stop: SIGTERM to run.sh, which stops the agent, the daemon and the run in
#   training (the daemon re-queues it), then waits for the whole session to
#   end (60 s, then SIGKILL to what is left).
# status: exit 0 and the daemon's progress when running, 3 when not (as
#   `systemctl status` does).
# unit: prints a systemd user unit that runs run.sh under systemd instead
#   (`make install-service` writes it), with the NIGHTSHIFT_* variables set
#   now as its environment.
#
# The environment is run.sh's (NIGHTSHIFT_PORT, NIGHTSHIFT_SLOTS, ...).
set -euo pipefail

if (($# != 3)); then
    echo "usage: scripts/service.sh start|stop|status|unit BIN STATE" >&2
    exit 2
fi
cmd=$1
bin=$2
state=$3
here=$(cd "$(dirname "$0")" && pwd)
pidfile=$state/nightshift.pid
logfile=$state/nightshift.log
url=http://127.0.0.1:${NIGHTSHIFT_PORT:-8080}

# The pid in the pid file when that process is our run.sh, else nothing
# (no file, a dead process, or a pid the system has since given to another
# program).
live_pid() {
    local pid
    [[ -s $pidfile ]] || return 0
    pid=$(<"$pidfile")
    [[ $pid =~ ^[0-9]+$ ]] || return 0
    if tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q 'scripts/run\.sh'; then
        echo "$pid"
    fi
}

# How many processes are left in session SID (run.sh's, since setsid made it
# the session's leader): the agent, the daemon, its workers, tail.
in_session() { pgrep -s "$1" | wc -l || true; }

answers() { "$bin" watch --once --url "$url" >/dev/null 2>&1; }

case $cmd in
start)
    pid=$(live_pid)
    if [[ -n $pid ]]; then
        echo "nightshift is already running (pid $pid, $pidfile); 'make stop' stops it" >&2
        exit 1
    fi
    if [[ -e $pidfile ]]; then
        echo "service: removing a stale pid file ($pidfile: $(<"$pidfile") is not running)"
        rm -f "$pidfile"
    fi
    if answers; then
        echo "a daemon already answers at $url (a 'make run' in a terminal?); not starting another" >&2
        exit 1
    fi
    mkdir -p "$state"
    from=$(($(stat -c %s "$logfile" 2>/dev/null || echo 0) + 1))
    echo "=== service start $(date -u '+%Y-%m-%d %H:%M:%S UTC')" >>"$logfile"
    setsid bash "$here/run.sh" "$bin" "$state" </dev/null >>"$logfile" 2>&1 &
    pid=$!
    echo "$pid" >"$pidfile"
    for _ in $(seq 300); do
        if grep -q "nightshift is running" <(tail -c "+$from" "$logfile"); then
            echo "nightshift started (pid $pid): the daemon at $url"
            echo "  log:      $logfile (and $state/daemon.log, $state/agent.log)"
            echo "  progress: $bin watch --url $url"
            echo "  status:   make status      stop: make stop"
            exit 0
        fi
        if ! kill -0 "$pid" 2>/dev/null; then
            rm -f "$pidfile"
            echo "service: nightshift did not start:" >&2
            tail -c "+$from" "$logfile" | tail -n 20 >&2
            exit 1
        fi
        sleep 0.1
    done
    echo "service: nightshift did not report running in 30 s; see $logfile ('make stop' stops it)" >&2
    exit 1
    ;;
stop)
    pid=$(live_pid)
    if [[ -z $pid ]]; then
        [[ -e $pidfile ]] && rm -f "$pidfile"
        echo "nightshift is not running"
        exit 0
    fi
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 600); do
        (($(in_session "$pid") == 0)) && break
        sleep 0.1
    done
    left=$(in_session "$pid")
    if ((left > 0)); then
        echo "service: $left processes still ran 60 s after SIGTERM; killing them" >&2
        pkill -KILL -s "$pid" || true
    fi
    rm -f "$pidfile"
    echo "nightshift stopped (a running experiment was re-queued; 'make start' resumes)"
    ;;
status)
    pid=$(live_pid)
    if [[ -z $pid ]]; then
        if [[ -e $pidfile ]]; then
            echo "nightshift is not running (stale pid file $pidfile)"
        else
            echo "nightshift is not running"
        fi
        exit 3
    fi
    echo "nightshift is running (pid $pid), the daemon at $url; log $logfile"
    "$bin" watch --once --url "$url" 2>&1 || echo "(the daemon does not answer at $url yet)"
    ;;
unit)
    src=$(cd "$here/.." && pwd)
    cat <<EOF
# nightshift: the daemon and the reference agent (scripts/run.sh), written by
# make install-service. systemctl --user start|stop|status nightshift;
# journalctl --user -u nightshift for its output.
[Unit]
Description=nightshift: the daemon and the reference agent
After=network.target

[Service]
Type=simple
WorkingDirectory=$src
ExecStart=/bin/bash $src/scripts/run.sh $bin $state
EOF
    env | grep '^NIGHTSHIFT_' | sort | sed 's/^/Environment=/' || true
    cat <<EOF
# run.sh stops the agent, the daemon and its run on SIGTERM; what is left
# after 60 s is killed.
KillMode=mixed
TimeoutStopSec=60
Restart=on-failure
RestartSec=30

[Install]
WantedBy=default.target
EOF
    ;;
*)
    echo "usage: scripts/service.sh start|stop|status|unit BIN STATE" >&2
    exit 2
    ;;
esac
