#!/usr/bin/env bash
# The MCP conformance suite's server scenarios that apply to this server,
# against the daemon's /mcp (a daemon on loopback without a token: the
# suite's client sends none).
#
#   tests/mcp/conformance.sh BIN NODE_MODULES OUTDIR
#
# They apply: server-initialize, ping, tools-list, resources-list,
# prompts-list, dns-rebinding-protection. Each must pass every check.
#
# They do not, and are not run:
#   tools-call-*, json-schema-2020-12, resources-read-*,
#   resources-templates-read, prompts-get-*, elicitation-*
#       call the suite's own test fixtures (test_simple_text, test://static-text,
#       test_simple_prompt, ...), which only its reference server has; the
#       equivalents on this server's tools, resources and prompt are checked
#       by client.test.js with the SDK's client.
#   logging-set-level, tools-call-with-logging, completion-complete,
#   resources-subscribe, resources-unsubscribe, tools-call-sampling,
#   tools-call-elicitation
#       capabilities this server does not declare (logging, completions,
#       resource subscriptions) or client features it never asks for.
#   server-sse-polling, server-sse-multiple-streams
#       need a session (Mcp-Session-Id) and a GET stream; /mcp is stateless
#       and answers GET with 405, which the transport allows. (They report a
#       warning and no check.)
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=tests/mcp/daemon.sh
source tests/mcp/daemon.sh
bin=$1
modules=$2
out=$3
scenarios=(server-initialize ping tools-list resources-list prompts-list dns-rebinding-protection)

work=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$work"' EXIT
printf '{"text":"the cat sat on the mat. a dog ran to the park. the bird looked at a tree."}\n%.0s' \
    $(seq 40) >"$work/corpus.jsonl"
"$bin" prep --dir "$work/state" --name tiny --vocab 260 --val-fraction 0.1 --quiet \
    "$work/corpus.jsonl"
start_daemon conformance "$bin" "$work"

failed=0
for s in "${scenarios[@]}"; do
    log=$out/conformance-$s.txt
    if ! node "$modules/@modelcontextprotocol/conformance/dist/index.js" server --url "$url/mcp" \
        --scenario "$s" >"$log" 2>&1; then
        echo "conformance: $s: the suite failed" >&2
        failed=1
    fi
    result=$(grep -E '^Passed: ' "$log" || echo "no result")
    echo "conformance: $s: $result"
    [[ $result =~ ^Passed:\ ([0-9]+)/([0-9]+),\ 0\ failed && ${BASH_REMATCH[1]} == "${BASH_REMATCH[2]}" &&
        ${BASH_REMATCH[1]} -gt 0 ]] || failed=1
done
exit $failed
