#!/usr/bin/env bash
# The analysis-only install, as the README promises it: `pip install .` (no extras, no torch) in a
# clean venv reads every profile of ../shared/corpus and fixtures/ and writes HTML, Markdown and
# JSON; the commands that need an extra say which one in one line. CI runs this (.ci/run).
#
#   bash scripts/check_base_install.sh [VENV]     (default: a temporary folder, removed after)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CORPUS=$ROOT/../shared/corpus
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
VENV=${1:-$work/venv}

fail() { echo "base install: FAILED: $*" >&2; exit 1; }

python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q "$ROOT"
for module in torch line_profiler nvtx weasyprint kaleido distributed; do
    if "$VENV/bin/python" -c "import $module" 2>/dev/null; then
        fail "pip install . brought in $module, which only an extra may install"
    fi
done
profreport=$VENV/bin/profreport
"$profreport" --help >/dev/null || fail "profreport --help"

# Every corpus file and every fixture run folder, each on its own: three formats each.
inputs=()
if [ -d "$CORPUS" ]; then
    while IFS= read -r file; do inputs+=("$file"); done < <(find "$CORPUS" -type f | sort)
else
    echo "base install: ../shared/corpus is absent; checking fixtures/ only" >&2
fi
for folder in "$ROOT"/fixtures/*/; do inputs+=("${folder%/}"); done
cache=$work/nsys-cache
for input in "${inputs[@]}"; do
    out=$work/out/$(basename "$input")
    if ! "$profreport" analyze "$input" --out "$out" --format html,md,json \
            --cache-dir "$cache" >"$work/log" 2>&1; then
        cat "$work/log" >&2
        fail "profreport analyze $input"
    fi
    for name in report.html report.md report.json; do
        [ -s "$out/$name" ] || fail "profreport analyze $input wrote no $name"
    done
    echo "ok: $input"
done

# What needs an extra says which one, in one line, with exit status 3 (MissingToolError).
expect_extra() {
    local extra=$1; shift
    local status=0
    "$@" >"$work/stdout" 2>"$work/stderr" || status=$?
    [ "$status" -eq 3 ] || fail "'$*' exited $status, expected 3: $(cat "$work/stderr")"
    [ "$(wc -l <"$work/stderr")" -eq 1 ] || fail "'$*' wrote more than one line: $(cat "$work/stderr")"
    grep -qF "profreport[$extra]" "$work/stderr" || fail "'$*' does not name the $extra extra"
    echo "ok: $* -> $(cat "$work/stderr")"
}
trace=$(find "$ROOT/fixtures" -name '*.pt.trace.json.gz' | sort | head -n 1)
expect_extra pdf "$profreport" analyze "$trace" --out "$work/pdf" --format pdf
expect_extra train "$profreport" run-and-report --out "$work/run"
expect_extra dask "$profreport" analyze "$trace" --out "$work/dask" --scheduler tcp://127.0.0.1:1
echo "base install: every input read, every extra named"
