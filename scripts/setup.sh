#!/usr/bin/env bash
# Install everything profreport needs on a fresh Debian 12 (bookworm) machine, then the project.
#
#   scripts/setup.sh            system tools (nsys, chromium, poppler) + .venv with torch and the project
#   scripts/setup.sh --system   only the system tools
#   scripts/setup.sh --python   only the virtual environment
#
# Fails loudly (exit 1) when Nsight Systems could not be installed or does not work.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${PROFREPORT_VENV:-$ROOT/.venv}
TORCH_VERSION=${PROFREPORT_TORCH:-2.13.0}
# Debian installs the host tools (QdstrmImporter) here ...
NSYS_HOST_DIR=/usr/lib/nsight-systems/host-linux-x64
# ... but nsys looks for them beside its target folder, here.
NSYS_EXPECTED_HOST_DIR=/usr/lib/x86_64-linux-gnu/nsight-systems/host-linux-x64

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi

say() { printf '[setup] %s\n' "$*"; }
die() { printf '[setup] ERROR: %s\n' "$*" >&2; exit 1; }

check_nsys_profile() {
    # A real capture must end as an .nsys-rep that exports to SQLite with NVTX-capable tables.
    local scratch
    scratch=$(mktemp -d)
    nsys profile --trace=osrt --sample=none --cpuctxsw=none --force-overwrite=true \
        -o "$scratch/check" true >"$scratch/log" 2>&1 || true
    [ -f "$scratch/check.nsys-rep" ] || { cat "$scratch/log" >&2; rm -rf "$scratch";
        die "nsys profile wrote no .nsys-rep (is $NSYS_EXPECTED_HOST_DIR linked?)"; }
    nsys export --type sqlite -o "$scratch/check.sqlite" "$scratch/check.nsys-rep" \
        >"$scratch/log" 2>&1 || { cat "$scratch/log" >&2; rm -rf "$scratch";
        die "nsys export failed"; }
    rm -rf "$scratch"
}

install_system() {
    # Nsight Systems lives in Debian's non-free component; chromium renders HTML checks and
    # plotly's static images (kaleido); poppler-utils turns PDF pages into PNGs for checks.
    local list=/etc/apt/sources.list.d/profreport-nonfree.sources
    if ! grep -rqsE "^[^#]*non-free( |$)" /etc/apt/sources.list /etc/apt/sources.list.d/; then
        say "adding Debian bookworm contrib non-free to $list"
        # deb822 with the same Signed-By as Debian's own entry, so apt sees no conflicting values.
        printf '%s\n' "Types: deb" "URIs: http://deb.debian.org/debian" "Suites: bookworm" \
            "Components: contrib non-free" \
            "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg" | $SUDO tee "$list" >/dev/null
    fi
    export DEBIAN_FRONTEND=noninteractive
    say "apt-get update"
    $SUDO apt-get update -qq
    say "installing nsight-systems, chromium, poppler-utils, fonts"
    $SUDO apt-get install -y -qq --no-install-recommends \
        nsight-systems nsight-systems-target chromium poppler-utils fonts-dejavu-core >/dev/null
    # Debian's nsys looks for its importer in the wrong place: without this link `nsys profile`
    # leaves a .qdstrm and no .nsys-rep.
    if [ -d "$NSYS_HOST_DIR" ] && [ ! -e "$NSYS_EXPECTED_HOST_DIR" ]; then
        $SUDO ln -s "$NSYS_HOST_DIR" "$NSYS_EXPECTED_HOST_DIR"
    fi
    command -v nsys >/dev/null || die "nsys is not on PATH after installing nsight-systems"
    nsys --version >/dev/null 2>&1 || die "nsys is installed but does not run"
    check_nsys_profile
    say "$(nsys --version)"
}

install_python() {
    say "creating $VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --upgrade pip
    # Pin torch first: a bare requirement would pull several GB of CUDA packages.
    say "installing torch==$TORCH_VERSION"
    "$VENV/bin/python" -m pip install -q "torch==$TORCH_VERSION"
    say "installing profreport with its train and test extras"
    "$VENV/bin/python" -m pip install -q -e "$ROOT[train,pdf,test]"
    say "done: $("$VENV/bin/profreport" --version)"
}

case "${1:-all}" in
    --system) install_system ;;
    --python) install_python ;;
    all) install_system; install_python ;;
    *) die "unknown option ${1}; use --system, --python or nothing" ;;
esac
