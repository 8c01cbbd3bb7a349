#!/usr/bin/env bash
# isa.sh - `make bench-isa`: make bench once per kernel path this CPU runs.
#
#   tests/bench/isa.sh BIN_AVX512 BIN_AVX2 BIN_GENERIC [bench.py options]
#
# Each path runs from a binary built for the machines it stands for (the
# Makefile builds them): avx512 from the default build, avx2 from one built
# with -march=haswell, generic from one built with -march=x86-64, each with
# NIGHTSHIFT_ISA forcing its path, so the avx2 round runs no AVX-512
# instruction on an AVX-512 machine. A path this CPU cannot run is skipped.
#
# OpenBLAS picks its kernels by CPU (the engine's fallbacks and the MFU's
# sgemm peak use them); to hold it to a path's instruction set, give
# AVX512_CORETYPE, AVX2_CORETYPE or GENERIC_CORETYPE (e.g. AVX2_CORETYPE=Haswell):
# that round, and only it, runs with OPENBLAS_CORETYPE set to it. Nothing
# here sets it otherwise.
set -euo pipefail

if [[ $# -lt 3 ]]; then
    echo "usage: tests/bench/isa.sh BIN_AVX512 BIN_AVX2 BIN_GENERIC [bench.py options]" >&2
    exit 2
fi
declare -A bins=([avx512]=$1 [avx2]=$2 [generic]=$3)
declare -A coretypes=([avx512]=${AVX512_CORETYPE:-} [avx2]=${AVX2_CORETYPE:-}
                      [generic]=${GENERIC_CORETYPE:-})
shift 3
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

for path in avx512 avx2 generic; do
    bin=${bins[$path]}
    if ! NIGHTSHIFT_ISA=$path "$bin" bench --help >/dev/null 2>&1; then
        echo "== $path: this CPU cannot run it, skipped"
        continue
    fi
    core=${coretypes[$path]}
    echo "== $path path ($bin${core:+, OPENBLAS_CORETYPE=$core})"
    if [[ -n $core ]]; then
        OPENBLAS_CORETYPE=$core NIGHTSHIFT_ISA=$path /usr/bin/python3 "$here/bench.py" \
            --bin "$bin" --isa "$path" "$@"
    else
        NIGHTSHIFT_ISA=$path /usr/bin/python3 "$here/bench.py" --bin "$bin" --isa "$path" "$@"
    fi
    echo
done
