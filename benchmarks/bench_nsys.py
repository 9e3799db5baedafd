"""Time profreport on an nsys SQLite export of 10 million kernels against ``nsys stats``.

    .venv/bin/python benchmarks/bench_nsys.py [--kernels N] [--out FOLDER] [--skip-nsys]

Builds the export once (kept in ``--out``, default ``~/.cache/profreport/bench``) from the
corpus's ``sc22_4gpu_baseline.nsys-rep``: its kernel, runtime, memcpy, memset, synchronisation
and NVTX range rows are replicated, each copy shifted in time past the previous one, with
correlation ids shifted so that every launch still names its own GPU work and ``step N`` ranges
renumbered so that every copy adds its own steps. Then, each in a fresh process, measures wall
time, CPU seconds (user + system) and peak memory (``peaks.run_measured``) of:

- ``profreport analyze EXPORT --format json`` (the whole analysis, report written);
- the same with each C half left to numpy (``NUMPY_PEERS``: the SQLite page decoder,
  ``parsers/_pages.c``, and the analysis's searches, ``core/_searches.c``), each that is built,
  as where no C compiler built it: what each compiled half gains;
- ``nsys stats --report gpukernsum`` on the same export (Nsight's own kernel summary);
- one ``sqlite3`` scan of the kernel table's start, end, device, stream, correlation and name
  columns in Python (the floor of reading the rows one by one).

Prints one table with ratios to profreport. Exits 1 when profreport misses its targets
(``TARGET_SECONDS``, ``TARGET_PEAK_MB``). Not a unit test.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

from peaks import run_measured  # the sibling module: one way of measuring for every benchmark

#: The issue's targets on a 2-core machine for the 10-million-kernel export.
TARGET_SECONDS = 10.0
TARGET_PEAK_MB = 1024.0
DEFAULT_KERNELS = 10_000_000
CORPUS_REPORT = (Path(__file__).resolve().parents[2] / "shared" / "corpus" / "nsys"
                 / "sc22_4gpu_baseline.nsys-rep")
#: The tables replicated, and the columns shifted in each (times, correlation ids).
REPLICATED = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME",
              "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
              "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "NVTX_EVENTS")
# NVTX push/pop and start/end ranges: the only NVTX rows that repeat per step.
NVTX_RANGE_TYPES = "(59, 60, 70, 71)"
# Time between the end of one copy and the start of the next (1 ms of idle GPU).
COPY_GAP_NS = 1_000_000

def _source_export() -> Path:
    """The corpus report's SQLite export (made through profreport's cache when needed)."""
    from profreport.parsers import nsys

    return nsys.export_report(CORPUS_REPORT)


def _select_list(conn: sqlite3.Connection, table: str) -> str:
    """The SELECT list copying ``table`` with times, correlation ids and step names shifted."""
    columns = [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]
    shifted = {"start": "t.start + k.n * :span", "end": "t.end + k.n * :span",
               "correlationId": "t.correlationId + k.n * :corr"}
    if table == "NVTX_EVENTS":
        shifted["text"] = ("CASE WHEN t.text GLOB 'step [0-9]*' THEN 'step ' || "
                           "(CAST(substr(t.text, 6) AS INTEGER) + k.n * :steps) ELSE t.text END")
    return ", ".join(shifted.get(col, f"t.{col}") for col in columns)


def build_export(target: Path, kernels: int) -> Path:
    """Write the replicated export to ``target`` (kept when it already exists)."""
    if target.is_file():
        return target
    source = _source_export()
    tmp = target.with_suffix(".tmp")
    shutil.copyfile(source, tmp)
    conn = sqlite3.connect(tmp)
    conn.executescript("PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF;")
    base = conn.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    copies = -(-kernels // base)
    span = max(conn.execute(f"SELECT max(end) FROM {t}").fetchone()[0] or 0
               for t in REPLICATED) - min(
        conn.execute(f"SELECT min(start) FROM {t} WHERE start > 0").fetchone()[0]
        for t in REPLICATED) + COPY_GAP_NS
    corr = conn.execute("SELECT max(correlationId) FROM CUPTI_ACTIVITY_KIND_RUNTIME"
                        ).fetchone()[0] + 1
    steps = conn.execute("SELECT max(CAST(substr(text, 6) AS INTEGER)) FROM NVTX_EVENTS "
                         "WHERE text GLOB 'step [0-9]*'").fetchone()[0] + 1
    conn.execute("CREATE TEMP TABLE k (n INTEGER)")
    conn.executemany("INSERT INTO k VALUES (?)", [(n,) for n in range(1, copies)])
    for table in REPLICATED:
        conn.execute(f"CREATE TEMP TABLE base AS SELECT * FROM {table}" + (
            f" WHERE eventType IN {NVTX_RANGE_TYPES}" if table == "NVTX_EVENTS" else ""))
        conn.execute(f"INSERT INTO {table} SELECT {_select_list(conn, table)} "
                     f"FROM k, temp.base AS t ORDER BY k.n",
                     {"span": span, "corr": corr, "steps": steps})
        conn.execute("DROP TABLE temp.base")
        conn.commit()
    conn.close()
    os.replace(tmp, target)
    return target


def _measure(command: list[str]) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds and peak MB of ``command`` (``peaks.run_measured``). On a shared
    machine the CPU seconds are the steadier figure."""
    run = run_measured(command)
    if run.returncode != 0:
        print(f"{command[0]} failed ({run.returncode}): {run.stderr[-2000:]}", file=sys.stderr)
    return run.wall_s, run.cpu_s, run.peak_mb


def _sqlite_scan(export: Path) -> None:
    """One Python sqlite3 pass over the kernel table's analysed columns."""
    conn = sqlite3.connect(f"{export.as_uri()}?mode=ro", uri=True)
    rows = 0
    cursor = conn.execute("SELECT start, end, deviceId, streamId, correlationId, shortName "
                          "FROM CUPTI_ACTIVITY_KIND_KERNEL")
    while batch := cursor.fetchmany(65536):
        rows += len(batch)
    print(rows)


#: The C halves a peer row leaves to numpy, by the name the row gives them: the module whose
#: ``attribute`` set to None makes profreport run that part in numpy.
NUMPY_PEERS = {"page decoder": ("profreport.parsers.sqlite_pages", "_pages"),
               "searches": ("profreport.searches", "_searches")}


def _numpy_analysis(part: str, export: Path, out: Path) -> None:
    """``profreport analyze EXPORT --format json`` with the C half ``part`` (a NUMPY_PEERS
    name) left out: numpy runs it, as where no C compiler built it."""
    import importlib

    from profreport.cli import main as profreport

    module, attribute = NUMPY_PEERS[part]
    setattr(importlib.import_module(module), attribute, None)
    sys.argv = ["profreport", "analyze", str(export), "--format", "json", "--out", str(out)]
    profreport()


def numpy_peer_commands(export: Path, out: Path) -> dict[str, list[str]]:
    """The commands of :func:`_numpy_analysis` by row name (``profreport, numpy searches``),
    for each C half that is built (where one is not, profreport itself runs it in numpy)."""
    import importlib

    return {f"profreport, numpy {part}": [sys.executable, __file__, "--numpy", part,
                                          str(export), str(out)]
            for part, (module, attribute) in NUMPY_PEERS.items()
            if getattr(importlib.import_module(module), attribute) is not None}


def main() -> int:
    """Build the export, measure each tool, print the table; 1 when a target is missed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=int, default=DEFAULT_KERNELS)
    parser.add_argument("--out", type=Path,
                        default=Path.home() / ".cache" / "profreport" / "bench")
    parser.add_argument("--skip-nsys", action="store_true", help="do not run nsys stats")
    parser.add_argument("--scan", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--numpy", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.scan:
        _sqlite_scan(args.scan)
        return 0
    if args.numpy:
        part, export, out = args.numpy
        _numpy_analysis(part, Path(export), Path(out))
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    export = build_export(args.out / f"sc22_4gpu_x{args.kernels}.sqlite", args.kernels)
    print(f"export: {export} ({export.stat().st_size / 2**30:.2f} GiB, "
          f"ready in {time.perf_counter() - started:.1f} s)")
    results: dict[str, tuple[float, float, float]] = {}
    with tempfile.TemporaryDirectory() as out:
        wall, cpu, peak = _measure([sys.executable, "-m", "profreport", "analyze",
                                       str(export), "--format", "json", "--out", out])
        results["profreport analyze (json)"] = (wall, cpu, peak)
        for name, command in numpy_peer_commands(export, Path(out)).items():
            results[name] = _measure(command)
    nsys = shutil.which("nsys")
    if nsys and not args.skip_nsys:
        with tempfile.TemporaryDirectory() as out:
            wall, cpu, peak = _measure([nsys, "stats", "--report", "gpukernsum",
                                           "--format", "csv", "--output", f"{out}/k",
                                           str(export)])
        results["nsys stats --report gpukernsum"] = (wall, cpu, peak)
    wall, cpu, peak = _measure([sys.executable, __file__, "--scan", str(export)])
    results["sqlite3 scan of the kernel table"] = (wall, cpu, peak)
    base_wall, base_cpu, base_peak = results["profreport analyze (json)"]
    print(f"{'tool':36} {'wall s':>8} {'CPU s':>8} {'peak MB':>9} {'wall/ours':>10} "
          f"{'CPU/ours':>9} {'peak/ours':>10}")
    for name, (wall, cpu, peak) in results.items():
        print(f"{name:36} {wall:8.2f} {cpu:8.2f} {peak:9.0f} {wall / base_wall:10.2f} "
              f"{cpu / max(base_cpu, 1e-9):9.2f} {peak / base_peak:10.2f}")
    print(json.dumps({"targets": {"seconds": TARGET_SECONDS, "peak_mb": TARGET_PEAK_MB}}))
    return 0 if base_wall < TARGET_SECONDS and base_peak < TARGET_PEAK_MB else 1


if __name__ == "__main__":
    sys.exit(main())
