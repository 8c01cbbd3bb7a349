# daemon.sh - sourced by the MCP checks: start a daemon on a free loopback port.
#
#   start_daemon NAME BIN WORK [serve options ...]
#
# Serves WORK/state (its output in WORK/serve.out and WORK/serve.err), waits
# up to 20 s for "listening on", and sets pid and url; exits 1, saying so as
# NAME, when the daemon does not start. The caller's EXIT trap stops it.
start_daemon() {
    local name=$1 bin=$2 work=$3
    shift 3
    "$bin" serve --dir "$work/state" --listen 127.0.0.1:0 "$@" >"$work/serve.out" \
        2>"$work/serve.err" &
    pid=$!
    for _ in $(seq 100); do
        grep -q "listening on" "$work/serve.out" 2>/dev/null && break
        sleep 0.2
    done
    url=$(sed -n 's/^listening on //p' "$work/serve.out")
    [[ -n $url ]] || { echo "$name: the daemon did not start" >&2; cat "$work/serve.err" >&2; exit 1; }
}
