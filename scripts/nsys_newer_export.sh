#!/usr/bin/env bash
# Export the corpus .nsys-rep reports with a newer Nsight Systems than the one installed, to test
# parsers/nsys.py against a newer export schema. Nothing is installed: Debian's non-free
# nsight-systems-target package is downloaded and unpacked with dpkg -x into a scratch folder.
#
# usage: scripts/nsys_newer_export.sh SCRATCH_DIR [SUITE] [REPORT...]
#   SCRATCH_DIR  where the package, its unpacked files and the exports go (exports/ under it)
#   SUITE        Debian suite to take the package from (default: experimental, which has
#                2024.2; trixie and sid have 2023.4)
#   REPORT       reports to export (default: ../shared/corpus/nsys/*.nsys-rep)
# then: PROFREPORT_NSYS_NEWER_EXPORTS=SCRATCH_DIR/exports PROFREPORT_NSYS_NEWER_TOOL=<printed>
#       .venv/bin/pytest tests/test_nsys.py
# The unpacked package is also linked into ~/.cache/profreport/nsys-tools/ (XDG_CACHE_HOME
# respected), where profreport looks for an nsys that can export a report written by a newer
# Nsight Systems than the one on PATH; --nsys PATH overrides.
set -euo pipefail

if [[ $# -lt 1 ]]; then
    sed -n '2,10p' "$0" >&2
    exit 2
fi
scratch=$(realpath -m "$1")
suite=${2:-experimental}
shift $(( $# >= 2 ? 2 : 1 ))
repo=$(cd "$(dirname "$0")/.." && pwd)
if [[ $# -eq 0 ]]; then
    set -- "$repo"/../shared/corpus/nsys/*.nsys-rep
fi

apt_dir=$scratch/apt
mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$scratch/exports"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg]" \
     "http://deb.debian.org/debian $suite non-free" > "$apt_dir/sources.list"
apt_opts=(-o "Dir::Etc::SourceList=$apt_dir/sources.list" -o "Dir::Etc::SourceParts=/dev/null"
          -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache")

apt-get "${apt_opts[@]}" update
(cd "$apt_dir/cache" && apt-get "${apt_opts[@]}" download "nsight-systems-target/$suite")
deb=$(ls "$apt_dir"/cache/nsight-systems-target_*.deb | head -n 1)
rm -rf "$scratch/unpacked"
dpkg -x "$deb" "$scratch/unpacked"
nsys=$(find "$scratch/unpacked" -type f -name nsys -path '*target-linux-x64*' | head -n 1)
"$nsys" --version
tools=${XDG_CACHE_HOME:-$HOME/.cache}/profreport/nsys-tools
mkdir -p "$tools"
ln -sfn "$scratch/unpacked" "$tools/$("$nsys" --version | awk '{print $NF}')"
echo "linked into $tools (profreport exports with it the reports the nsys on PATH is too old for)"

for report in "$@"; do
    name=$(basename "$report")
    out=$scratch/exports/${name%.*}.sqlite
    "$nsys" export --type sqlite --quiet true --force-overwrite true --output "$out" "$report"
    echo "exported $report -> $out"
done
echo "PROFREPORT_NSYS_NEWER_EXPORTS=$scratch/exports PROFREPORT_NSYS_NEWER_TOOL=$nsys"
