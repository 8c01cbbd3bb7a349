#!/usr/bin/env bash
# Fetches uPlot (the dashboard's charts; MIT, https://github.com/leeoniya/uPlot)
# from the npm registry, pinned by version and checksum, and writes its two
# built files to OUTDIR: uPlot.iife.min.js and uPlot.min.css. They are
# compiled into the binary (scripts/embed-web.sh); nothing is committed.
#
#   scripts/fetch-uplot.sh OUTDIR
#
# Idempotent: does nothing when OUTDIR already holds this version. Nothing but
# `npm pack` touches the network.
set -euo pipefail

version=1.6.32
sha256=4b8a8191e425658e3ea8c8c1314b0fc679c861ee3a1af2b20c7b16ba50b5133d

if (($# != 1)); then
    echo "usage: scripts/fetch-uplot.sh OUTDIR" >&2
    exit 2
fi
out=$1
stamp=$out/.uplot-$version
if [[ -f $stamp && -f $out/uPlot.iife.min.js && -f $out/uPlot.min.css ]]; then
    exit 0
fi
mkdir -p "$out"
work=$(mktemp -d "$out/.fetch-uplot.XXXXXX")
trap 'rm -rf "$work"' EXIT
# shellcheck source=scripts/fetch-npm.sh
source "$(dirname "$0")/fetch-npm.sh"
npm_fetch fetch-uplot uplot "$version" "$sha256" "$work" package/dist/uPlot.iife.min.js \
    package/dist/uPlot.min.css package/LICENSE
cp "$work/package/dist/uPlot.iife.min.js" "$work/package/dist/uPlot.min.css" "$out/"
cp "$work/package/LICENSE" "$out/uPlot.LICENSE"
touch "$stamp"
