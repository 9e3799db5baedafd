"""Time profreport's Kineto parser against Holistic Trace Analysis on the same trace.

    .venv/bin/python benchmarks/bench_kineto.py [TRACE] [--size-mb N]

Each parse runs in a fresh interpreter so that its peak resident memory (``ru_maxrss``) is its
own; a third interpreter that imports profreport's parser and runs it on a two-event trace
(loading the code, not the data) gives the baseline subtracted from profreport's peak. With
``--size-mb`` the trace's events are replicated (each copy shifted in time past the previous
one) into a temporary plain ``.json`` of about that size.

Exits 1 when profreport is less than ``MIN_SPEEDUP`` times faster than HTA, or when its peak
memory above the baseline exceeds the uncompressed size of the trace. Both targets are meant
for real traces (tens of MB and up): on a trace of a few MB the parser's fixed buffers and
start-up costs dominate. Not a unit test.
"""

from __future__ import annotations

import argparse
import gzip
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: The speed-up over HTA's trace parser that profreport's must reach.
MIN_SPEEDUP = 3.0
DEFAULT_TRACE = (Path(__file__).resolve().parents[2] / "shared" / "corpus" / "kineto"
                 / "resnet50_num_workers_0.pt.trace.json.gz")
MB = 1 << 20
# Text read at a time when measuring a trace's uncompressed size.
READ_CHUNK = 16 * MB


def _peak_rss_mb() -> float:
    """This process's peak resident memory in MB (Linux reports ru_maxrss in kB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _child(tool: str, trace: Path) -> None:
    """Run one measurement in this (fresh) interpreter and print it as JSON."""
    seconds = 0.0
    if tool == "profreport":
        from profreport.parsers import kineto

        started = time.perf_counter()
        kineto.parse(trace)
        seconds = time.perf_counter() - started
    elif tool == "hta":
        from hta.common.trace import parse_trace_file

        started = time.perf_counter()
        parse_trace_file(str(trace))
        seconds = time.perf_counter() - started
    else:
        _warm_up()
    print(json.dumps({"seconds": seconds, "peak_mb": _peak_rss_mb()}))


def _warm_up() -> None:
    """Import profreport's parser and run it on a tiny gzip trace of every event kind.

    This loads the code and the modules pandas imports lazily, and no data to speak of.
    """
    from profreport.parsers import kineto

    gpu = {"device": 0, "stream": 7, "correlation": 1, "bytes": 8}
    kinds = [("cpu_op", "aten::mm", {}), ("user_annotation", "ProfilerStep#1", {}),
             ("cpu_op", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", {}),
             ("cpu_op", "c10d::allreduce_", {}), ("python_function", "train.py(1): f", {}),
             ("cuda_runtime", "cudaLaunchKernel", {"correlation": 1}),
             ("kernel", "void ncclKernel_AllReduce<int>(int)", gpu),
             ("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", gpu),
             ("gpu_memset", "Memset (Device)", gpu)]
    events = [{"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": 1.5, "dur": 2.0,
               "args": args} for cat, name, args in kinds]
    events.append({"ph": "M", "name": "thread_name", "pid": 1, "tid": 1,
                   "args": {"name": "main"}})
    document = {"schemaVersion": 1, "distributedInfo": {"rank": 0}, "traceEvents": events}
    with tempfile.TemporaryDirectory() as folder:
        tiny = Path(folder) / "tiny.json.gz"
        tiny.write_bytes(gzip.compress(json.dumps(document).encode()))
        kineto.parse(tiny)


def _measure(tool: str, trace: Path) -> dict[str, float]:
    """Run ``tool``'s parse of ``trace`` in a fresh interpreter; its seconds and peak MB."""
    done = subprocess.run([sys.executable, __file__, "--child", tool, str(trace)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{tool} failed on {trace}:\n{done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _uncompressed_mb(trace: Path) -> float:
    """Size of the trace's JSON text in MB, gzip or not."""
    opener = gzip.open if trace.read_bytes()[:2] == b"\x1f\x8b" else open
    total = 0
    with opener(trace, "rb") as handle:
        while chunk := handle.read(READ_CHUNK):
            total += len(chunk)
    return total / MB


def _replicate(source: Path, size_mb: float, folder: Path) -> Path:
    """Write a plain-JSON trace of about ``size_mb`` MB by repeating ``source``'s events."""
    import msgspec

    opener = gzip.open if source.read_bytes()[:2] == b"\x1f\x8b" else open
    with opener(source, "rb") as handle:
        document = json.load(handle)
    events = document.pop("traceEvents")
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    span = max(e["ts"] + e.get("dur", 0) for e in timed) - min(e["ts"] for e in timed)
    header = json.dumps(document)[:-1]
    target = folder / f"{source.name.split('.')[0]}_{int(size_mb)}mb.json"
    written = 0
    with open(target, "wb") as out:
        out.write(header.encode() + b', "traceEvents": [\n')
        copy = 0
        while written < size_mb * MB:
            for event in timed:
                event["ts"] += span if copy else 0
            body = msgspec.json.encode(events)[1:-1]
            out.write((b",\n" if copy else b"") + body)
            written += len(body)
            copy += 1
        out.write(b"\n]}\n")
    return target


def _replicated(source: Path, size_mb: float, folder: Path) -> Path:
    """Build the replicated trace in a child process.

    Linux carries ``ru_maxrss`` across fork and exec, so this process must stay small for the
    measuring children's peaks to be their own.
    """
    done = subprocess.run([sys.executable, __file__, str(source), "--size-mb", str(size_mb),
                           "--replicate-into", str(folder)],
                          capture_output=True, text=True, check=True)
    return Path(done.stdout.strip().splitlines()[-1])


def _report(trace: Path, results: dict[str, dict[str, float]], text_mb: float) -> bool:
    """Print the comparison table; whether profreport meets both targets."""
    base = results["baseline"]["peak_mb"]
    ours, hta = results["profreport"], results["hta"]
    speedup = hta["seconds"] / ours["seconds"]
    over_base = ours["peak_mb"] - base
    print(f"trace: {trace} ({text_mb:.1f} MB uncompressed)")
    print(f"{'parser':<12}{'seconds':>10}{'peak MB':>10}")
    for tool in ("profreport", "hta"):
        print(f"{tool:<12}{results[tool]['seconds']:>10.2f}{results[tool]['peak_mb']:>10.1f}")
    print(f"{'baseline':<12}{'':>10}{base:>10.1f}")
    print(f"speedup {speedup:.1f}x (need {MIN_SPEEDUP:.0f}x); profreport peak over baseline "
          f"{over_base:.1f} MB (limit {text_mb:.1f} MB)")
    return speedup >= MIN_SPEEDUP and over_base <= text_mb


def main(argv: list[str] | None = None) -> int:
    """Parse the command line, run the three measurements, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", nargs="?", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--size-mb", type=float, help="replicate events to about this size")
    parser.add_argument("--child", choices=("profreport", "hta", "baseline"),
                        help=argparse.SUPPRESS)
    parser.add_argument("--replicate-into", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(args.child, args.trace)
        return 0
    if args.replicate_into:
        print(_replicate(args.trace, args.size_mb, args.replicate_into))
        return 0
    if not args.trace.is_file():
        parser.error(f"no trace at {args.trace}")
    with tempfile.TemporaryDirectory() as folder:
        trace = _replicated(args.trace, args.size_mb, Path(folder)) if args.size_mb else args.trace
        results = {tool: _measure(tool, trace) for tool in ("baseline", "profreport", "hta")}
        ok = _report(trace, results, _uncompressed_mb(trace))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
