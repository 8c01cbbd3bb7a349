#!/usr/bin/env bash
# The MCP server against the official TypeScript SDK's client and the MCP
# conformance suite, both from npm (pinned in tests/mcp/package-lock.json,
# installed into build/mcp, never committed), against a real daemon.
#
#   tests/mcp/run.sh BIN OUTDIR
#
# 1. client.test.js: the SDK's client over stdio (`nightshift mcp`) and over
#    the daemon's /mcp; a scripted short night (OUTDIR/transcript.txt) and the
#    latency of 200 tool calls per transport (OUTDIR/latency.txt).
# 2. conformance.sh: the conformance suite's server scenarios that apply to
#    this server (the list, and why the others do not, is in it).
# 3. claude.sh: daemon/README.md's `claude mcp add` lines run with Claude
#    Code, and `claude mcp list` says both servers connect (no model needed).
set -euo pipefail
cd "$(dirname "$0")/../.."
if (($# != 2)); then
    echo "usage: tests/mcp/run.sh BIN OUTDIR" >&2
    exit 2
fi
bin=$(realpath "$1")
out=$2

bash scripts/setup.sh
deps=build/mcp
if ! cmp -s tests/mcp/package-lock.json "$deps/package-lock.json" ||
    [[ ! -d $deps/node_modules/@modelcontextprotocol/sdk ]]; then
    mkdir -p "$deps"
    cp tests/mcp/package.json tests/mcp/package-lock.json "$deps/"
    (cd "$deps" && npm ci --ignore-scripts --no-audit --no-fund --silent)
fi
# Claude Code's own install step (skipped by --ignore-scripts, the only
# script we run): it links the platform's native binary, an optional
# dependency in the lock, into place. Idempotent, and needs no network.
(cd "$deps" && node node_modules/@anthropic-ai/claude-code/install.cjs >/dev/null)
mkdir -p "$out"
NODE_PATH=$(realpath "$deps/node_modules") NIGHTSHIFT_BIN=$bin NIGHTSHIFT_MCP_OUT=$(realpath "$out") \
    timeout -k 10 600 node tests/mcp/client.test.js
timeout -k 10 600 bash tests/mcp/conformance.sh "$bin" "$(realpath "$deps/node_modules")" "$out"
timeout -k 10 600 bash tests/mcp/claude.sh "$bin" "$(realpath "$deps/node_modules")" "$out"
