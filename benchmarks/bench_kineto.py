"""Time profreport on a large Kineto trace against Holistic Trace Analysis and the JSON floor.

    .venv/bin/python benchmarks/bench_kineto.py [TRACE] [--size-mb 400] [--skip hta]

With ``--size-mb`` the trace (default: the corpus's ``hta/nccl_data.json.gz``) is grown into a
plain ``.json`` of about that size by repeating its events, each copy shifted in time past the
previous one, with its correlation ids, ``External id``s, flow ids and ``ProfilerStep#N`` numbers
shifted too, so the copies are distinct steps. Each measurement runs in a fresh interpreter,
measured by ``peaks.run_measured`` (wall time, CPU time of its process tree, and peak memory: its
own peak resident set, or the largest proportional set size of it and its workers together when
larger):

- ``profreport``: ``profreport analyze TRACE --format json`` (parse, analysis, report).
- ``profreport parse``: the Kineto parser alone.
- ``profreport, msgspec`` and ``profreport parse, msgspec``: the same with every batch decoded by
  msgspec (``MSGSPEC_PEERS``), as where no C compiler built the event scanner
  (``parsers/_kineto_scan.c``): what the scanner gains. Left out where it is not built.
- ``hta``: HTA's ``TraceAnalysis`` load plus temporal, idle-time and kernel breakdowns.
- ``orjson.loads``: the floor, reading the file and building the whole tree.

Targets (issue #14, on the 2-core development machine): the analysis in at most half the time
of ``orjson.loads``, at least ``MIN_SPEEDUP_OVER_HTA`` times faster than HTA, and a peak resident
memory of at most half the trace's size.
Each row shows its CPU time and peak as ratios to profreport's. Exits 1 when a target is missed.
Not a unit test.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from peaks import run_measured  # the sibling module: one way of measuring for every benchmark

#: profreport's analysis may take at most this fraction of ``orjson.loads``'s time.
MAX_SHARE_OF_ORJSON = 0.5
#: profreport's analysis must be at least this many times faster than HTA's.
MIN_SPEEDUP_OVER_HTA = 10.0
#: profreport's peak resident memory may be at most this fraction of the trace's size.
MAX_RSS_SHARE_OF_FILE = 0.5
DEFAULT_TRACE = (Path(__file__).resolve().parents[2] / "shared" / "corpus" / "hta"
                 / "nccl_data.json.gz")
MB = 1 << 20
#: Seconds between two samples of a measured process tree's memory.
SAMPLE_S = 0.05
#: The rows that run a profreport row with the C event scanner left out (msgspec decodes every
#: batch), by the row they repeat.
MSGSPEC_PEERS = {"profreport, msgspec": "profreport",
                 "profreport parse, msgspec": "profreport parse"}
TOOLS = ("profreport", "profreport parse", *MSGSPEC_PEERS, "hta", "orjson.loads")
_STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")


def _run_tool(tool: str, trace: Path) -> None:
    """Run one measurement in this (fresh) interpreter."""
    if tool in MSGSPEC_PEERS:
        from profreport.parsers import kineto_columns

        kineto_columns._kineto_scan = None
        tool = MSGSPEC_PEERS[tool]
    if tool == "profreport":
        from profreport.cli import main

        with tempfile.TemporaryDirectory() as out:
            code = main(["analyze", str(trace), "--format", "json", "--out", out])
        if code:
            raise SystemExit(f"profreport analyze exited {code}")
    elif tool == "profreport parse":
        from profreport.parsers import kineto

        kineto.parse(trace)
    elif tool == "hta":
        _run_hta(trace)
    else:
        import orjson

        orjson.loads(trace.read_bytes())


def _run_hta(trace: Path) -> None:
    """HTA: load the trace (as rank 0 of a folder), or every rank trace of a folder, and compute
    its three main breakdowns."""
    from hta.trace_analysis import TraceAnalysis

    analysis = (TraceAnalysis(trace_dir=str(trace)) if trace.is_dir() else
                TraceAnalysis(trace_files={0: str(trace)}, trace_dir=str(trace.parent)))
    analysis.get_temporal_breakdown(visualize=False)
    analysis.get_idle_time_breakdown(visualize=False)
    analysis.get_gpu_kernel_breakdown(visualize=False)


def _measure(tool: str, trace: Path) -> dict[str, float] | str:
    """Run ``tool`` on ``trace`` in a fresh interpreter; its figures, or why it failed."""
    run = run_measured([sys.executable, __file__, "--child", tool, str(trace)])
    if run.returncode != 0:
        return run.stderr.strip().splitlines()[-1] if run.stderr.strip() else "failed"
    return {"seconds": run.wall_s, "cpu_s": run.cpu_s, "peak_mb": run.peak_mb}


def _scanner_built() -> bool:
    """Whether the C event scanner is built (else profreport itself decodes with msgspec)."""
    from profreport.parsers import kineto_columns

    return kineto_columns._kineto_scan is not None


def _open_text(trace: Path):
    """The trace opened for reading text, gzip or plain."""
    return gzip.open(trace, "rb") if trace.read_bytes()[:2] == b"\x1f\x8b" else open(trace, "rb")


def _shift(event: dict, copy: int, span: float, id_span: int, step_span: int) -> dict:
    """``event`` as it appears in copy number ``copy``: later, with distinct ids and steps."""
    out = dict(event)
    if isinstance(out.get("ts"), (int, float)):
        out["ts"] = out["ts"] + copy * span
    if isinstance(out.get("id"), int):
        out["id"] = out["id"] + copy * id_span
    step = _STEP_NAME.match(str(out.get("name", "")))
    if step:
        out["name"] = f"ProfilerStep#{int(step.group(1)) + copy * step_span}"
    args = out.get("args")
    if isinstance(args, dict):
        args = dict(args)
        for key in ("correlation", "External id"):
            if isinstance(args.get(key), int):
                args[key] = args[key] + copy * id_span
        out["args"] = args
    return out


def _replicate(source: Path, size_mb: float, folder: Path) -> Path:
    """Write a plain-JSON trace of about ``size_mb`` MB by repeating ``source``'s events."""
    import msgspec

    with _open_text(source) as handle:
        document = json.load(handle)
    events = document.pop("traceEvents")
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    span = max(e["ts"] + e.get("dur", 0) for e in timed) - min(e["ts"] for e in timed)
    ids = [v for e in events for v in (e.get("id"), (e.get("args") or {}).get("correlation"),
                                        (e.get("args") or {}).get("External id"))
           if isinstance(v, int)]
    id_span = max(ids, default=0) + 1
    steps = [int(m.group(1)) for e in events if (m := _STEP_NAME.match(str(e.get("name"))))]
    step_span = max(steps, default=0) + 1
    target = folder / f"{source.name.split('.')[0]}_{int(size_mb)}mb.json"
    written, copy = 0, 0
    with open(target, "wb") as out:
        out.write(json.dumps(document)[:-1].encode() + b', "traceEvents": [\n')
        while written < size_mb * MB:
            shifted = [_shift(e, copy, span, id_span, step_span) for e in events]
            body = msgspec.json.encode(shifted)[1:-1].replace(b'},{"', b'},\n{"')
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


def _size_mb(trace: Path) -> float:
    """Size of the trace's JSON text in MB, gzip or not."""
    total = 0
    with _open_text(trace) as handle:
        while chunk := handle.read(16 * MB):
            total += len(chunk)
    return total / MB


def _report(trace: Path, results: dict[str, dict[str, float] | str], text_mb: float) -> bool:
    """Print the comparison table; whether profreport meets every target it was measured on."""
    print(f"trace: {trace.name} ({text_mb:.0f} MB of JSON)")
    ours = results.get("profreport")
    print(f"{'tool':<27}{'seconds':>10}{'CPU s':>10}{'peak MB':>10}{'CPU vs ours':>13}"
          f"{'peak vs ours':>14}")
    for tool, result in results.items():
        if isinstance(result, str):
            print(f"{tool:<27}  failed: {result}")
            continue
        ratios = (f"{result['cpu_s'] / ours['cpu_s']:>12.2f}x"
                  f"{result['peak_mb'] / ours['peak_mb']:>13.2f}x"
                  if isinstance(ours, dict) else "")
        print(f"{tool:<27}{result['seconds']:>10.2f}{result['cpu_s']:>10.2f}"
              f"{result['peak_mb']:>10.0f}{ratios}")
    if not isinstance(ours, dict):
        return False
    checks = [(f"peak memory <= {MAX_RSS_SHARE_OF_FILE:.0%} of the file",
               ours["peak_mb"] / text_mb, ours["peak_mb"] <= MAX_RSS_SHARE_OF_FILE * text_mb)]
    floor = results.get("orjson.loads")
    if isinstance(floor, dict):
        share = ours["seconds"] / floor["seconds"]
        checks.append((f"time <= {MAX_SHARE_OF_ORJSON:.0%} of orjson.loads", share,
                       share <= MAX_SHARE_OF_ORJSON))
    hta = results.get("hta")
    if isinstance(hta, dict):
        speedup = hta["seconds"] / ours["seconds"]
        checks.append((f"speed-up over HTA >= {MIN_SPEEDUP_OVER_HTA:.0f}x", speedup,
                       speedup >= MIN_SPEEDUP_OVER_HTA))
    for label, value, ok in checks:
        print(f"{'met ' if ok else 'MISSED'} {label}: {value:.2f}")
    return all(ok for _, _, ok in checks)


def main(argv: list[str] | None = None) -> int:
    """Parse the command line, build the trace, run the measurements, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", nargs="?", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--size-mb", type=float, help="replicate events to about this size")
    parser.add_argument("--skip", action="append", default=[], choices=TOOLS,
                        help="leave a tool out (repeatable)")
    parser.add_argument("--keep", type=Path, help="folder to keep the replicated trace in")
    parser.add_argument("--child", choices=TOOLS, help=argparse.SUPPRESS)
    parser.add_argument("--replicate-into", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _run_tool(args.child, args.trace)
        return 0
    if args.replicate_into:
        print(_replicate(args.trace, args.size_mb, args.replicate_into))
        return 0
    if not args.trace.is_file():
        parser.error(f"no trace at {args.trace}")
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.keep or Path(scratch)
        trace = args.trace
        if args.size_mb:
            trace = folder / f"{args.trace.name.split('.')[0]}_{int(args.size_mb)}mb.json"
            if not trace.exists():
                trace = _replicated(args.trace, args.size_mb, folder)
        results = {tool: _measure(tool, trace) for tool in TOOLS
                   if tool not in args.skip and (tool not in MSGSPEC_PEERS or _scanner_built())}
        ok = _report(trace, results, _size_mb(trace))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
