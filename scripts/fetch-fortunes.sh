#!/usr/bin/env bash
# Fetches the second corpus of the search benchmark: the fortune cookies of
# Debian's `fortunes` package (epigrams, jokes and quotations of a few lines
# each, separated by "%" lines; a text of another kind than the Brown corpus's
# prose), without root: `apt-get download` and `dpkg-deb -x` into a new
# temporary directory. Every cookie file of the package (not the .dat indexes)
# is joined in name order into one text file, whose path is printed.
#
#   scripts/fetch-fortunes.sh [DIR]     (DIR: where the temporary directory goes;
#                                        default $TMPDIR or /tmp)
#
# experiments/search/landscape.py takes that file as --corpus (its first 1 MB).
set -euo pipefail

if (($# > 1)); then
    echo "usage: scripts/fetch-fortunes.sh [DIR]" >&2
    exit 2
fi
base=${1:-${TMPDIR:-/tmp}}
mkdir -p "$base"
work=$(mktemp -d "$base/fortunes.XXXXXX")
chmod 755 "$work" # apt-get download run as root hands the fetch to the _apt user
(cd "$work" && apt-get download fortunes >/dev/null)
deb=$(find "$work" -maxdepth 1 -name 'fortunes_*.deb' | head -n 1)
if [[ -z $deb ]]; then
    echo "fetch-fortunes: apt-get download fortunes gave no package" >&2
    exit 1
fi
dpkg-deb -x "$deb" "$work/pkg"
dir=$work/pkg/usr/share/games/fortunes
out=$work/fortunes.txt
find "$dir" -maxdepth 1 -type f ! -name '*.dat' -printf '%f\n' | LC_ALL=C sort |
    while read -r f; do cat "$dir/$f"; done >"$out"
if [[ ! -s $out ]]; then
    echo "fetch-fortunes: no cookie files in the package" >&2
    exit 1
fi
echo "$out"
