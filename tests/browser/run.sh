#!/usr/bin/env bash
# The dashboard's end-to-end test in a real browser: Debian's chromium,
# headless, driven by playwright-core (pinned in tests/browser/package-lock.json,
# installed into build/browser, never committed), against a real daemon.
#
#   tests/browser/run.sh BIN OUTDIR [SCRIPT]
#
# SCRIPT is dashboard.test.js (the test, the default), sweep.test.js (the
# sweep views on stand-in answers) or bench.js (the
# daemon's CPU share with ten dashboards open during training).
#
# Installs what is missing first (scripts/setup.sh --browser: chromium and
# Node.js). Fails, with the reason, when chromium cannot start: the test never
# passes without a browser.
set -euo pipefail
cd "$(dirname "$0")/../.."
if (($# < 2 || $# > 3)); then
    echo "usage: tests/browser/run.sh BIN OUTDIR [SCRIPT]" >&2
    exit 2
fi
bin=$(realpath "$1")
out=$2
script=${3:-dashboard.test.js}

bash scripts/setup.sh --browser
deps=build/browser
if ! cmp -s tests/browser/package-lock.json "$deps/package-lock.json" ||
    [[ ! -d $deps/node_modules/playwright-core ]]; then
    mkdir -p "$deps"
    cp tests/browser/package.json tests/browser/package-lock.json "$deps/"
    (cd "$deps" && npm ci --ignore-scripts --no-audit --no-fund --silent)
fi
mkdir -p "$out"
NODE_PATH=$(realpath "$deps/node_modules") NIGHTSHIFT_BIN=$bin NIGHTSHIFT_BROWSER_OUT=$(realpath "$out") \
    timeout -k 10 600 node "tests/browser/$script"
