"""Every measurement of issue #14 in one command and one table: profreport against Holistic Trace
Analysis on Kineto traces, against ``nsys stats`` on an nsys export, and against the floors.

    .venv/bin/python benchmarks/run_all.py [--out FOLDER] [--skip CASE]... [--with-2gb-peers]

The inputs are built once from ``../shared/corpus`` and kept in ``--out`` (default
``~/.cache/profreport/bench``), with the builders of ``bench_kineto.py`` (a trace grown by
repeating its events with shifted times, ids and step numbers) and ``bench_nsys.py`` (an export
whose kernel, runtime and NVTX rows are replicated with shifted times):

- ``1mb``: the corpus's ResNet-50 trace as it is (startup: ``--help`` and a whole analysis);
- ``400mb`` and ``2gb``: ``hta/nccl_data.json.gz`` grown to plain JSON of that size;
- ``8ranks``: a folder of 8 rank traces of 50 MB each (``distributedInfo.rank`` 0..7);
- ``nsys10m``: the 4-GPU sc22 export grown to 10 million kernels.

Each tool runs in a fresh process; its wall time, CPU time (user + system of its whole process
tree) and peak memory (its own peak resident set, or the largest proportional set size of its
process tree when larger: ``peaks.py``) are printed side by side with ratios to profreport.
On a machine shared with other work, wall time moves with the load and CPU time much less: both
are shown. Holistic Trace Analysis and ``orjson.loads`` on the 2 GB trace need about 10 GB of
memory each and are left out unless ``--with-2gb-peers``. Not a unit test; it prints, it does
not judge.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_kineto  # noqa: E402  (the sibling script's trace builder)
from peaks import run_measured  # noqa: E402  (one way of measuring for every benchmark)

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"
SMALL_TRACE = CORPUS / "kineto" / "resnet50_num_workers_0.pt.trace.json.gz"
GROWN_FROM = CORPUS / "hta" / "nccl_data.json.gz"
#: Sizes of the grown traces, MB of JSON.
MID_MB, LARGE_MB, RANK_MB = 400, 2048, 50
RANKS = 8
NSYS_KERNELS = 10_000_000
#: Seconds a tool may run before it is stopped and reported as not finished (--timeout).
DEFAULT_TIMEOUT_S = 900
CASES = ("1mb", "400mb", "2gb", "8ranks", "nsys10m")
_RANK_FIELDS = re.compile(rb'"rank": \d+, "world_size": \d+')


@dataclass
class Measurement:
    """One tool on one input: wall and CPU seconds, peak MB of its process tree, or why not."""

    case: str
    tool: str
    wall_s: float = 0.0
    cpu_s: float = 0.0
    peak_mb: float = 0.0
    failed: str | None = None


def measure(case: str, tool: str, command: list[str],
            timeout_s: float = DEFAULT_TIMEOUT_S) -> Measurement:
    """Run ``command`` and measure it (:func:`peaks.run_measured`); stopped after
    ``timeout_s``."""
    run = run_measured(command, timeout_s)
    result = Measurement(case, tool, run.wall_s, run.cpu_s, run.peak_mb)
    if run.returncode != 0:
        lines = (run.stopped or run.stderr.strip()).splitlines()
        result.failed = (f"{lines[-1] if lines else ''} (exit {run.returncode}, "
                         f"{run.cpu_s:.0f} s CPU, {run.peak_mb:.0f} MB so far)")[:160]
    print(f"  {case:8} {tool:34} {run.wall_s:8.1f} s {run.cpu_s:8.1f} s cpu "
          f"{run.peak_mb:8.0f} MB" + (f"  FAILED {result.failed}" if result.failed else ""),
          flush=True)
    return result


def _grown(size_mb: int, folder: Path) -> Path:
    """The corpus trace grown to ``size_mb`` MB of plain JSON (bench_kineto's builder), kept."""
    target = folder / f"{GROWN_FROM.name.split('.')[0]}_{size_mb}mb.json"
    return target if target.exists() else bench_kineto._replicated(GROWN_FROM, size_mb, folder)


def rank_folder(folder: Path) -> Path:
    """``RANKS`` rank traces of ``RANK_MB`` MB each: one grown trace with its
    ``distributedInfo`` rank and world size set per file."""
    ranks = folder / f"ranks{RANKS}"
    if ranks.is_dir() and len(list(ranks.glob("*.json"))) == RANKS:
        return ranks
    text = _grown(RANK_MB, folder).read_bytes()
    head = text.index(b'"traceEvents"')
    ranks.mkdir(exist_ok=True)
    for rank in range(RANKS):
        header = _RANK_FIELDS.sub(f'"rank": {rank}, "world_size": {RANKS}'.encode(), text[:head])
        (ranks / f"rank{rank}.pt.trace.json").write_bytes(header + text[head:])
    return ranks


def nsys_export(folder: Path) -> Path | None:
    """The 10-million-kernel export (bench_nsys.py's builder), or None when that script or nsys
    is missing."""
    try:
        import bench_nsys
    except ImportError:
        return None
    if shutil.which("nsys") is None:
        return None
    return bench_nsys.build_export(folder / f"sc22_4gpu_x{NSYS_KERNELS}.sqlite", NSYS_KERNELS)


def _profreport(*args: str) -> list[str]:
    """The profreport command line."""
    return [sys.executable, "-m", "profreport", *args]


def _child(tool: str, trace: Path) -> list[str]:
    """bench_kineto.py measuring one tool (HTA, orjson.loads) in its own interpreter."""
    return [sys.executable, bench_kineto.__file__, "--child", tool, str(trace)]


def run_case(case: str, folder: Path, out: Path, peers_2gb: bool,
             timeout_s: float) -> list[Measurement]:
    """Build the inputs of ``case`` and measure every tool on them."""

    def run(tool: str, command: list[str]) -> Measurement:
        return measure(case, tool, command, timeout_s)

    report = ["--format", "json", "--out", str(out)]
    if case == "1mb":
        return [run("profreport --help", _profreport("--help")),
                run("profreport analyze", _profreport("analyze", str(SMALL_TRACE), *report)),
                run("HTA", _child("hta", SMALL_TRACE))]
    if case in ("400mb", "2gb"):
        trace = _grown(MID_MB if case == "400mb" else LARGE_MB, folder)
        rows = [run("profreport analyze", _profreport("analyze", str(trace), *report))]
        if case == "400mb" or peers_2gb:
            rows += [run("HTA", _child("hta", trace)),
                     run("orjson.loads (floor)", _child("orjson.loads", trace))]
        else:
            rows += [Measurement(case, tool, failed="not run: ~10 GB of memory; --with-2gb-peers")
                     for tool in ("HTA", "orjson.loads (floor)")]
        return rows
    if case == "8ranks":
        ranks = rank_folder(folder)
        return [run("profreport analyze", _profreport("analyze", str(ranks), *report)),
                run("profreport --processes 1",
                    _profreport("analyze", str(ranks), "--processes", "1", *report)),
                run("HTA", _child("hta", ranks))]
    export = nsys_export(folder)
    if export is None:
        return [Measurement(case, "profreport analyze",
                            failed="not run: no nsys, or no benchmarks/bench_nsys.py")]
    import bench_nsys

    return [run("profreport analyze", _profreport("analyze", str(export), *report)),
            *(run(name, command)
              for name, command in bench_nsys.numpy_peer_commands(export, out).items()),
            run("nsys stats gpukernsum",
                [shutil.which("nsys") or "nsys", "stats", "--report", "gpukernsum",
                 "--format", "csv", "--output", str(out / "k"), str(export)]),
            run("sqlite3 kernel scan (floor)",
                [sys.executable, bench_nsys.__file__, "--scan", str(export)])]


def table(rows: list[Measurement]) -> str:
    """The Markdown table: each tool with its ratios to profreport analyze on the same case."""
    lines = ["| input | tool | wall s | CPU s | peak MB | wall vs ours | CPU vs ours "
             "| peak vs ours |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    ours = {r.case: r for r in rows if r.tool == "profreport analyze" and not r.failed}
    for row in rows:
        if row.failed:
            lines.append(f"| {row.case} | {row.tool} | {row.failed} | | | | | |")
            continue
        base = ours.get(row.case)
        ratio = (f"{row.wall_s / base.wall_s:.2f}x | {row.cpu_s / base.cpu_s:.2f}x | "
                 f"{row.peak_mb / base.peak_mb:.2f}x"
                 if base and base.wall_s and base.cpu_s and base.peak_mb else " | | ")
        lines.append(f"| {row.case} | {row.tool} | {row.wall_s:.2f} | {row.cpu_s:.2f} | "
                     f"{row.peak_mb:.0f} | {ratio} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Build the inputs, run every case, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path.home() / ".cache" / "profreport" / "bench")
    parser.add_argument("--skip", action="append", default=[], choices=CASES,
                        help="leave a case out (repeatable)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="S",
                        help="stop a tool after S seconds (default: %(default)s)")
    parser.add_argument("--with-2gb-peers", action="store_true",
                        help="also run HTA and orjson.loads on the 2 GB trace (~10 GB each)")
    args = parser.parse_args(argv)
    if not CORPUS.is_dir():
        parser.error(f"the corpus is not at {CORPUS}")
    args.out.mkdir(parents=True, exist_ok=True)
    rows: list[Measurement] = []
    with tempfile.TemporaryDirectory() as out:
        for case in CASES:
            if case not in args.skip:
                print(f"{case}:", flush=True)
                rows += run_case(case, args.out, Path(out), args.with_2gb_peers, args.timeout)
    print(f"\n{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end\n")
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
