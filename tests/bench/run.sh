#!/usr/bin/env bash
# run.sh - `make bench`: tests/bench/run.sh BIN [bench.py options]
#
# Times BIN's full training steps beside the PyTorch reference on three model
# sizes (tests/bench/bench.py) and prints the table. Torch comes from Debian's
# python3-torch under /usr/bin/python3 (scripts/setup.sh --torch); without it
# only nightshift's columns are printed. Takes a few minutes on 2 cores.
set -euo pipefail

if [[ $# -lt 1 ]]; then
    echo "usage: tests/bench/run.sh BIN [--rounds R] [--threads N] [--only NAME...]" >&2
    exit 2
fi
bin=$1
shift
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

if [[ ! -x $bin ]]; then
    echo "bench: $bin is not an executable (run make first)" >&2
    exit 1
fi
if ! /usr/bin/python3 -c 'import torch, numpy' 2>/dev/null; then
    echo "bench: /usr/bin/python3 cannot import torch; timing nightshift alone." >&2
    echo "bench: install Debian's python3-torch with: bash scripts/setup.sh --torch" >&2
fi
exec /usr/bin/python3 "$here/bench.py" --bin "$bin" "$@"
