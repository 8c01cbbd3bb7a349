#!/usr/bin/env bash
# Prints the tiny prose corpus the scripted benchmarks train on (40 documents
# of 30 sentences from a 4-word grammar, as JSON lines), the same text the
# Criterion tests prepare:
#
#   bash tests/tiny-corpus.sh >corpus.jsonl    (tests/bench/load.sh, tests/soak/soak.sh)
set -euo pipefail
subjects=("the cat" "a dog" "the bird" "my friend")
verbs=("sat on" "ran to" "looked at" "walked past")
objects=("the mat" "the park" "a tree" "the house")
for d in $(seq 0 39); do
    line=""
    for s in $(seq 0 29); do
        line+="${subjects[$(((d + s) % 4))]} ${verbs[$(((d * 3 + s) % 4))]} ${objects[$(((d + 2 * s) % 4))]}. "
    done
    printf '{"text":"%s"}\n' "$line"
done
