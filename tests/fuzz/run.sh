#!/usr/bin/env bash
# Run libFuzzer targets one after another, each for SECONDS, from the
# committed seeds, and print one summary line per target (runs, runs/s, new
# corpus units, crashes). Exits non-zero if any target found a crash.
#
#   tests/fuzz/run.sh BUILD_DIR SECONDS TARGET...
set -uo pipefail
build=$1
seconds=$2
shift 2
src=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$build/crashes" "$build/logs"
status=0
summary=()
for t in "$@"; do
    work="$build/corpus/$t"
    mkdir -p "$work"
    log="$build/logs/$t.log"
    echo "== fuzz $t for ${seconds}s"
    # -timeout: one input taking longer is a finding; rss: a leak or a blow-up.
    "$build/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
        -max_len=65536 -print_final_stats=1 -artifact_prefix="$build/crashes/$t-" \
        "$work" "$src/corpus/$t" >"$log" 2>&1
    rc=$?
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$')
    speed=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$')
    units=$(find "$work" -type f | wc -l)
    line=$(printf "%-10s rc %d  runs %10s  %7s/s  corpus %5s" "$t" "$rc" "${runs:-?}" \
        "${speed:-?}" "$units")
    if ((rc != 0)); then
        status=1
        line+="  FAILED (see $log)"
        tail -n 40 "$log"
    fi
    summary+=("$line")
done
echo "== fuzz summary"
printf '%s\n' "${summary[@]}"
exit $status
