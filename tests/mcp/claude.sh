#!/usr/bin/env bash
# The README's `claude mcp add` lines (daemon/README.md, "MCP with a client's
# defaults") run as written, with Claude Code from npm, against a real daemon
# with a token; `claude mcp list` then checks each server's health without a
# model: both must say Connected, and a server added with a wrong token must
# not (so the check is not vacuous).
#
#   tests/mcp/claude.sh BIN NODE_MODULES OUTDIR
#
# The lines are read from the README, not copied here: a README that drifts
# from what works fails this. Their placeholders become this test's:
# /path/to/build/nightshift the binary, http://127.0.0.1:8080 the daemon, and
# state/token its token file. Claude Code's configuration goes to a HOME of
# its own.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=tests/mcp/daemon.sh
source tests/mcp/daemon.sh
bin=$(realpath "$1")
modules=$(realpath "$2")
mkdir -p "$3"
out=$(realpath "$3")
claude=$modules/.bin/claude

work=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$work"' EXIT
mkdir -p "$work/state" "$work/home"
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$work/state/token"
chmod 600 "$work/state/token"
start_daemon claude "$bin" "$work" --token-file "$work/state/token"

# Every `claude mcp add` command of the README, continuation lines joined.
lines=$(sed -n '/^## MCP with a client.s defaults/,/^## /p' daemon/README.md |
    sed -e ':a' -e '/\\$/N; s/\\\n//; ta' | sed -n 's/^ *\(claude mcp add .*\)$/\1/p')
n=$(grep -c . <<<"$lines" || true)
((n == 2)) || { echo "claude: expected the README's 2 'claude mcp add' lines, found $n" >&2; exit 1; }

export HOME=$work/home DISABLE_AUTOUPDATER=1 DISABLE_TELEMETRY=1 \
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1
cd "$work" # where the README's state/token is
i=0
while IFS= read -r line; do
    i=$((i + 1))
    cmd=${line//\/path\/to\/build\/nightshift/$bin}
    cmd=${cmd//http:\/\/127.0.0.1:8080/$url}
    cmd=${cmd/claude mcp add /\"\$claude\" mcp add }
    # the two lines name one server; the second gets a name of its own here
    ((i == 2)) && cmd=${cmd/ nightshift / nightshift-http }
    echo "claude: $line"
    eval "timeout -k 5 60 $cmd" >>"$out/claude.txt" 2>&1
done <<<"$lines"
timeout -k 5 60 "$claude" mcp add --transport http wrong-token "$url/mcp" \
    --header "Authorization: Bearer not-the-token" >>"$out/claude.txt" 2>&1

timeout -k 5 180 "$claude" mcp list >"$out/claude-list.txt" 2>&1 || true
cat "$out/claude-list.txt"
ok=1
grep -Eq '^nightshift: .*Connected' "$out/claude-list.txt" || ok=0
grep -Eq '^nightshift-http: .*Connected' "$out/claude-list.txt" || ok=0
grep -Eq '^wrong-token: .*Failed' "$out/claude-list.txt" || ok=0
if ((!ok)); then
    echo "claude: claude mcp list does not show the README's two servers connected and the" \
        "wrong token refused" >&2
    exit 1
fi
echo "claude: the README's claude mcp add lines connect (stdio and HTTP); a wrong token does not"
