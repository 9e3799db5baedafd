#!/usr/bin/env bash
# Install everything profreport needs on a fresh Debian 12 (bookworm) machine, then the project.
#
#   scripts/setup.sh            system tools (nsys, chromium, poppler), a one-node Slurm on this
#                               machine, and .venv with torch and the project
#   scripts/setup.sh --system   only the system tools
#   scripts/setup.sh --slurm    only the local Slurm (munge, slurmctld, slurmd; Debian slurm-wlm)
#   scripts/setup.sh --python   only the virtual environment
#
# Fails loudly (exit 1) when Nsight Systems or the local Slurm could not be installed or do not
# work. The Slurm is for the tests that submit the emitted sbatch scripts; where a real cluster
# is at hand, skip it (--system then --python).
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
    say "installing nsight-systems, chromium, poppler-utils, fonts, bubblewrap"
    $SUDO apt-get install -y -qq --no-install-recommends \
        nsight-systems nsight-systems-target chromium poppler-utils fonts-dejavu-core bubblewrap \
        >/dev/null
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

# A one-node Slurm on localhost, as the tests of --emit-slurm need: its own config only when this
# machine has none (a real cluster's configuration is never touched).
SLURM_CONF=/etc/slurm/slurm.conf
SLURM_MARK="# written by profreport scripts/setup.sh"

write_slurm_conf() {
    local node
    # slurmd -C prints this machine's real node line (CPUs, sockets, memory).
    node=$(slurmd -C | head -n1)
    [ -n "$node" ] || die "slurmd -C printed no node line"
    $SUDO mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm
    printf '%s\n' "$SLURM_MARK" "ClusterName=profreport" "SlurmctldHost=$(hostname -s)" \
        "AuthType=auth/munge" "SlurmUser=root" "SlurmdUser=root" \
        "StateSaveLocation=/var/spool/slurmctld" "SlurmdSpoolDir=/var/spool/slurmd" \
        "SlurmctldLogFile=/var/log/slurm/slurmctld.log" "SlurmdLogFile=/var/log/slurm/slurmd.log" \
        "ProctrackType=proctrack/linuxproc" "TaskPlugin=task/none" "MpiDefault=none" \
        "SelectType=select/cons_tres" "SelectTypeParameters=CR_Core" \
        "SchedulerType=sched/backfill" "ReturnToService=2" \
        "JobAcctGatherType=jobacct_gather/none" "AccountingStorageType=accounting_storage/none" \
        "$node State=UNKNOWN" \
        "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP" \
        | $SUDO tee "$SLURM_CONF" >/dev/null
}

start_slurm() {
    # No systemd in containers: start the daemons directly (each is a no-op when running).
    $SUDO mkdir -p /run/munge && $SUDO chown munge:munge /run/munge
    pgrep -x munged >/dev/null || $SUDO runuser -u munge -- /usr/sbin/munged
    pgrep -x slurmctld >/dev/null || $SUDO slurmctld
    pgrep -x slurmd >/dev/null || $SUDO slurmd
    local waited=0
    until sinfo -h -o '%t' 2>/dev/null | grep -qE '^(idle|mix|alloc)'; do
        [ "$waited" -lt 180 ] || { sinfo >&2 || true; die "the local Slurm node is not idle after 180 s"; }
        # A node that came back after a restart may need to be told it is usable.
        [ $((waited % 20)) -ne 10 ] || $SUDO scontrol update nodename="$(hostname -s)" state=resume \
            >/dev/null 2>&1 || true
        sleep 2; waited=$((waited + 2))
    done
}

install_slurm() {
    export DEBIAN_FRONTEND=noninteractive
    if ! command -v sbatch >/dev/null || ! command -v slurmd >/dev/null; then
        say "installing Slurm (Debian slurm-wlm: munge, slurmctld, slurmd, client)"
        $SUDO apt-get update -qq
        $SUDO apt-get install -y -qq --no-install-recommends munge slurmctld slurmd slurm-client \
            >/dev/null
    fi
    if [ ! -f "$SLURM_CONF" ] || grep -q "^$SLURM_MARK" "$SLURM_CONF"; then
        write_slurm_conf
    else
        say "keeping the existing $SLURM_CONF"
    fi
    [ -s /etc/munge/munge.key ] || $SUDO /usr/sbin/mungekey --create
    start_slurm
    # A real submission must run to the end.
    local job
    job=$(sbatch --parsable --wait --time=1 --output=/dev/null --wrap=true) \
        || die "a trivial sbatch job did not complete"
    say "Slurm $(sinfo --version | cut -d' ' -f2): node $(hostname -s) idle, job $job completed"
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
    "$VENV/bin/python" -c "from profreport.parsers import sqlite_pages as s; print('[setup]',
        'nsys exports decode in', 'numpy: no C compiler built parsers/_pages.c (slower)'
        if s._pages is None else 'C (parsers/_pages.c built)')"
    "$VENV/bin/python" -c "from profreport import searches as s; print('[setup]',
        'the analysis searches in', 'C (core/_searches.c built)' if s.compiled()
        else 'numpy: no C compiler built core/_searches.c (slower)')"
    "$VENV/bin/python" -c "from profreport.parsers import kineto_columns as k; print('[setup]',
        'Kineto events scanned in', 'msgspec: no C compiler built parsers/_kineto_scan.c '
        '(slower)' if k._kineto_scan is None else 'C (parsers/_kineto_scan.c built)')"
    say "done: $("$VENV/bin/profreport" --version)"
}

case "${1:-all}" in
    --system) install_system ;;
    --slurm) install_slurm ;;
    --python) install_python ;;
    all) install_system; install_slurm; install_python ;;
    *) die "unknown option ${1}; use --system, --slurm, --python or nothing" ;;
esac
