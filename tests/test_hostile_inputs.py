"""Every case of issue #12, end to end through ``profreport analyze`` with a good file beside
the bad one: a report or one line naming the bad file, the good run reported, no traceback, no
impossible figure, nothing from outside the inputs in the report."""

from __future__ import annotations

import dataclasses
import gzip
import json
import pickle
import sys
import time
from pathlib import Path

import pytest

from profreport.cli import main
from profreport.reports.analysis.analyze import AnalyzeOptions, analyze_paths

sys.path.insert(0, str(Path(__file__).parent))
from conftest import TINY_TRACE, fractions, write_nsys_export  # noqa: E402

MS = 1_000_000
INT64_MAX = 2**63 - 1
#: Whatever a hostile input holds, one call finishes within this (the issue saw > 120 s hangs).
CALL_BUDGET_S = 60


def analyze_beside_good(bad: Path, tiny_trace: Path, tmp_path: Path,
                        capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[dict, list[str]]:
    """``profreport analyze BAD GOOD``: the report (JSON and Markdown written) and the failure
    lines; checks the properties every hostile input must keep."""
    out = tmp_path / "out"
    started = time.monotonic()
    status = main(["analyze", str(bad), str(tiny_trace), "--out", str(out), "--format",
                   "json,md", *extra])
    assert time.monotonic() - started < CALL_BUDGET_S
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out
    failures = [line for line in captured.err.splitlines() if line.startswith("profreport: ")]
    assert status == (1 if failures else 0)
    assert all(line.startswith(f"profreport: failed: {bad}: ") and len(line) < 1200
               for line in failures), failures
    assert len(failures) <= 1
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert "good" in [run["name"] for run in report["runs"]]
    assert all(0.0 <= value <= 1.0 for value in fractions(report)), fractions(report)
    return report, failures


def kineto_with(tmp_path: Path, name: str, **changes: object) -> Path:
    """The tiny trace with top-level ``changes``, written as ``name``."""
    data = {**json.loads(json.dumps(TINY_TRACE)), **changes}
    path = tmp_path / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def kernel_event(**fields: object) -> dict:
    """A kernel event of the tiny trace's first step, with ``fields`` replaced."""
    event = {"ph": "X", "cat": "kernel", "name": "bad_kernel", "pid": 0, "tid": 7, "ts": 6000,
             "dur": 100, "args": {"correlation": 9, "stream": 7, "device": 0}}
    event.update(fields)
    return event


# --- 3. bad values -----------------------------------------------------------------------------

@pytest.mark.parametrize("event", [
    {k: v for k, v in kernel_event().items() if k != "ts"},
    {k: v for k, v in kernel_event().items() if k != "dur"},
    kernel_event(dur=-500),
    kernel_event(dur=INT64_MAX),
    kernel_event(ts=1e30, dur=1e30),
    kernel_event(args={"correlation": 2**64, "stream": 7, "device": 0}),
    {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0,
     "tid": 7, "ts": 6000, "dur": 10, "args": {"bytes": 2**64, "correlation": 9}},
    kernel_event(name=None),
    kernel_event(ts="soon"),
], ids=["no-ts", "no-dur", "negative-dur", "int64-dur", "1e30-times", "correlation-2^64",
        "bytes-2^64", "null-name", "ts-string"])
def test_bad_event_values(event: dict, tiny_trace: Path, tmp_path: Path,
                          capsys: pytest.CaptureFixture[str]) -> None:
    events = [*TINY_TRACE["traceEvents"], event]
    bad = kineto_with(tmp_path, "bad.pt.trace.json", traceEvents=events)
    report, failures = analyze_beside_good(bad, tiny_trace, tmp_path, capsys)
    if not failures:  # the bad record was dropped and the rest analysed as the good trace is
        run = next(run for run in report["runs"] if run["name"] == "bad")
        assert run["metrics"]["steps"] == 2
        assert run["metrics"]["step_time_ms"]["mean"] == 10.0


@pytest.mark.parametrize("name", ["bad.pt.trace.json", "bad.pt.trace.json.gz"])
@pytest.mark.parametrize("element", [None, 5])
def test_trace_events_ending_with_no_event_object(name: str, element: object, tiny_trace: Path,
                                                  tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """``..., {"ph": "X", ...}, null]}``: one line saying which element is no event object,
    where it said 'truncated trace: the file ends inside traceEvents'."""
    text = json.dumps({**TINY_TRACE, "traceEvents": [*TINY_TRACE["traceEvents"], element]})
    bad = tmp_path / name
    bad.write_bytes(gzip.compress(text.encode()) if name.endswith(".gz") else text.encode())
    _, failures = analyze_beside_good(bad, tiny_trace, tmp_path, capsys)
    byte = text.rindex(f", {json.dumps(element)}]") + 2
    kind = "null" if element is None else "a number"
    assert failures == [f"profreport: failed: {bad}: an element of traceEvents is {kind}, not "
                        f"an event object (at byte {byte} of the trace text)"]


def test_distributed_info_that_is_a_string(tiny_trace: Path, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    bad = kineto_with(tmp_path, "bad.pt.trace.json", distributedInfo="rank zero")
    analyze_beside_good(bad, tiny_trace, tmp_path, capsys)


def test_kineto_times_of_1e30_never_make_a_verdict(tiny_trace: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """The issue's trace with 1e30 times said "100% waits for data"."""
    events = [dict(event, ts=1e30 + index, dur=1e30) for index, event in
              enumerate(TINY_TRACE["traceEvents"])]
    bad = kineto_with(tmp_path, "bad.pt.trace.json", traceEvents=events)
    report, failures = analyze_beside_good(bad, tiny_trace, tmp_path, capsys)
    runs = [run for run in report["runs"] if run["name"] == "bad"]
    assert failures or runs[0]["verdict"] == "unknown"


@pytest.mark.parametrize("where", ["top", "args"])
def test_json_nested_a_million_deep(where: str, tiny_trace: Path, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    deep = "[" * 1_000_000 + "]" * 1_000_000
    text = json.dumps(TINY_TRACE)
    if where == "top":
        text = deep
    else:
        text = text.replace('"args": {"correlation": 7', f'"args": {{"x": {deep}, "correlation": 7',
                            1)
    bad = tmp_path / "deep.pt.trace.json"
    bad.write_text(text, encoding="utf-8")
    analyze_beside_good(bad, tiny_trace, tmp_path, capsys)


# --- 2. small files that hang or blow up memory ------------------------------------------------

def test_many_trace_event_keys_before_the_real_one(tiny_trace: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """300,000 ``"traceEvents"`` keys (4 MB) made the header scan quadratic."""
    real = json.dumps(TINY_TRACE["traceEvents"])
    bad = tmp_path / "keys.pt.trace.json"
    bad.write_text("{" + '"traceEvents": [], ' * 300_000 + f'"traceEvents": {real}}}',
                   encoding="utf-8")
    analyze_beside_good(bad, tiny_trace, tmp_path, capsys)


def test_gzip_holding_one_huge_name(tiny_trace: Path, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    """A 600 KB gzip expanding to one 600 MB name, scaled to 60 MB (still 900x the name limit)."""
    events = [*TINY_TRACE["traceEvents"][:-1], kernel_event(name="@NAME@")]
    head, tail = json.dumps({**TINY_TRACE, "traceEvents": events}).split("@NAME@")
    bad = tmp_path / "name.pt.trace.json.gz"
    with gzip.open(bad, "wb", compresslevel=1) as handle:
        handle.write(head.encode())
        for _ in range(60):
            handle.write(b"N" * MS)
        handle.write(tail.encode())
    assert bad.stat().st_size < 1 * MS
    _, failures = analyze_beside_good(bad, tiny_trace, tmp_path, capsys)
    assert len(failures) == 1 and "name" in failures[0]


def test_gzip_of_whitespace_between_events(tiny_trace: Path, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """2 GB of whitespace between events in a 2 MB gzip: stopped as a decompression bomb (the
    test writes 400 MB, past the 256 MiB a small file may expand to)."""
    text = json.dumps(TINY_TRACE)
    cut = text.index("{", text.index("traceEvents"))
    bad = tmp_path / "space.pt.trace.json.gz"
    with gzip.open(bad, "wb", compresslevel=1) as handle:
        handle.write(text[:cut].encode())
        blank = b" " * (4 * MS)
        for _ in range(100):
            handle.write(blank)
        handle.write(text[cut:].encode())
    _, failures = analyze_beside_good(bad, tiny_trace, tmp_path, capsys)
    assert len(failures) == 1 and "too large" in failures[0]


def lprof_bytes(timings: dict, unit: float = 1e-6) -> bytes:
    """A .lprof as kernprof pickles it (line_profiler's LineStats, protocol 2+)."""
    from line_profiler.line_profiler import LineStats

    return pickle.dumps(LineStats(timings, unit), protocol=pickle.HIGHEST_PROTOCOL)


def test_lprof_with_millions_of_line_entries(tiny_trace: Path, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """9.8 MB with 4.9 M entries took 1.6 GB: refused by count before it is unpickled whole."""
    entries = [(line, 1, 1) for line in range(1, 1_200_001)]
    bad = tmp_path / "many.lprof"
    bad.write_bytes(lprof_bytes({("train.py", 1, "train"): entries}))
    _, failures = analyze_beside_good(bad, tiny_trace, tmp_path, capsys)
    assert len(failures) == 1 and "line entries" in failures[0]


# --- 1. local files copied into the report through a .lprof ------------------------------------

@pytest.mark.parametrize("recorded", ["/etc/passwd", "/etc/shadow", "/proc/self/environ",
                                      "../../../../etc/passwd", "/etc/hostname"])
def test_lprof_sources_outside_the_roots_are_never_shown(
        recorded: str, tiny_trace: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "steal.lprof"
    bad.write_bytes(lprof_bytes({(recorded, 1, "train"): [(1, 10, 1000), (2, 10, 5000)]}))
    report, _ = analyze_beside_good(bad, tiny_trace, tmp_path, capsys,
                                    "--source-root", str(tmp_path))
    secret_lines = [line for name in ("/etc/passwd", "/etc/hostname")
                    for line in Path(name).read_text().splitlines() if len(line) > 3]
    page = (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    blob = json.dumps(report)
    assert not any(line in blob or line in page for line in secret_lines)
    assert "HOME=" not in blob and "PATH=" not in blob


# --- 7. silent drops and bad messages ------------------------------------------------------------

def test_device_alone_says_why(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    status = main(["analyze", "/dev/null", "--out", str(tmp_path / "out")])
    assert status == 1
    assert capsys.readouterr().err.splitlines() == [
        "profreport: error: no input could be read: /dev/null: a character device, not a "
        "regular file: only files are read"]


def test_fifo_among_inputs_is_one_line(tiny_trace: Path, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    import os

    fifo = tmp_path / "pipe.pt.trace.json"
    os.mkfifo(fifo)
    _, failures = analyze_beside_good(fifo, tiny_trace, tmp_path, capsys)
    assert failures == [f"profreport: failed: {fifo}: a FIFO (named pipe), not a regular file: "
                        "only files are read"]


def test_huge_file_name_inside_an_lprof(tiny_trace: Path, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "longname.lprof"
    bad.write_bytes(lprof_bytes({("x" * 100_000 + ".py", 1, "train"): [(1, 3, 300)]}))
    report, failures = analyze_beside_good(bad, tiny_trace, tmp_path, capsys)
    page = (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    assert "x" * 1000 not in page


# --- 4. impossible figures from nsys ------------------------------------------------------------

@pytest.mark.parametrize("hostile", [
    [(10 * MS, INT64_MAX, 99, "gemm_kernel")],
    [(2**62 + 1, 2**62 + 5, 99, "gemm_kernel")],
    [(-5 * MS, 2 * MS, 99, "gemm_kernel")],
    [(8 * MS, 2 * MS, 99, "gemm_kernel")],
    [(1e30, 1e30 + 5, 99, "gemm_kernel")],
], ids=["end-int64-max", "past-2^62", "negative-start", "end-before-start", "1e30-real"])
def test_nsys_impossible_times(hostile: list[tuple], tiny_trace: Path, tmp_path: Path,
                               capsys: pytest.CaptureFixture[str]) -> None:
    kernels = [(i * 10 * MS + 2 * MS, i * 10 * MS + 7 * MS, i, "gemm_kernel") for i in range(4)]
    steps = [(i * 10 * MS, i * 10 * MS + 9 * MS, f"step {i}") for i in range(4)]
    bad = write_nsys_export(tmp_path / "bad.sqlite", kernels + hostile, steps)
    report, failures = analyze_beside_good(bad, tiny_trace, tmp_path, capsys)
    # The impossible row is dropped, with a note, and the rest reads as the clean capture.
    assert failures == []
    run = next(run for run in report["runs"] if run["name"] == "bad")
    assert "bad.sqlite: nsys: 1 kernels rows dropped: times that no capture records (not "\
        "integer ns, negative, ending before they start, past 2**62 ns or lasting over a week)" \
        in run["notes"]
    # 4 kernels of 5 ms in the steps' window of 0-39 ms: 20 / 39 (the report rounds to 4 places).
    assert run["metrics"]["gpu_busy_fraction"] == round(20 / 39, 4)


def test_a_step_numbered_past_int64_is_no_step(tiny_trace: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """``ProfilerStep#`` and 20 digits beside the tiny trace's two steps, and an nsys capture
    whose ranges are ``step 99999999999999999990`` and on: such a number is no loop's count
    (its name marks no step), where reading it stopped the trace with 'cannot read
    (OverflowError: Python int too large to convert to C long)' and called the export 'damaged
    nsys export: a column holds values of the wrong type'. The trace keeps its two 10 ms steps;
    the capture's ranges, their counters too large to keep, are the repeated range, 4 steps of
    9 ms."""
    huge = {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#99999999999999999999",
            "pid": 1, "tid": 1, "ts": 25000, "dur": 100}
    bad = kineto_with(tmp_path, "bad.pt.trace.json",
                      traceEvents=[*TINY_TRACE["traceEvents"], huge])
    report, failures = analyze_beside_good(bad, tiny_trace, tmp_path, capsys)
    run = next(run for run in report["runs"] if run["name"] == "bad")
    assert failures == [] and run["metrics"]["steps"] == 2
    assert run["metrics"]["step_time_ms"]["mean"] == 10.0
    kernels = [(i * 10 * MS + 2 * MS, i * 10 * MS + 7 * MS, i, "gemm_kernel") for i in range(4)]
    steps = [(i * 10 * MS, i * 10 * MS + 9 * MS, f"step 9999999999999999999{i}")
             for i in range(4)]
    bad = write_nsys_export(tmp_path / "bad.sqlite", kernels, steps)
    report, failures = analyze_beside_good(bad, tiny_trace, tmp_path, capsys)
    run = next(run for run in report["runs"] if run["name"] == "bad")
    assert failures == [] and run["metrics"]["steps"] == 4
    assert run["metrics"]["step_time_ms"]["mean"] == 9.0


def test_last_guard_finds_impossible_fractions() -> None:
    """The guard after the analysis: any fraction outside [0, 1] (or NaN) is named."""
    import math

    from profreport.reports.analysis.analyze import impossible_fractions
    from profreport.reports.analysis.results import TopItem

    found = impossible_fractions({"top": [TopItem("k", 5, 1, 0.5), TopItem("k", 5, 1, 1.5)],
                                  "gpu_busy_fraction": math.nan, "count": 7,
                                  "by_origin": {"kineto": 3.0}})
    assert found == ["metrics.top[1].share = 1.5", "metrics.gpu_busy_fraction = nan"]


def test_last_guard_reads_long_runs_of_step_pairs_in_bulk(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """A run of 100,000 steps holds its (step number, ns) pairs in tuples (StepStats
    .range_by_number, .pace_by_number): the guard called itself on each pair, 0.4 s of the
    10 M-kernel benchmark's analysis (26,196 steps). Now pairs of numbers are read in bulk, one
    call per field whatever the steps; a share outside [0, 1] held deep among pairs, in a
    dataclass inside one of them, is still named."""
    from profreport.reports.analysis import analyze
    from profreport.reports.analysis.results import StepStats, TopItem

    calls = 0
    walk = analyze.impossible_fractions

    def counted(value: object, where: str = "metrics") -> list[str]:
        nonlocal calls
        calls += 1
        return walk(value, where)

    monkeypatch.setattr(analyze, "impossible_fractions", counted)
    pairs = tuple((number, 9 * MS) for number in range(100_000))
    steps = StepStats("nsys", 100_000, 9 * MS, None, None, None, None,
                      range_by_number=pairs, pace_by_number=pairs)
    assert analyze.impossible_fractions({"steps": steps}) == []
    assert calls <= 2 + len(dataclasses.fields(StepStats))
    launchers = {"memcpy": [("cudaMemcpyAsync", 0.5)] * 50_000 + [(("deep", TopItem(
        "k", 5, 1, 1.5)),)]}
    assert analyze.impossible_fractions({"steps": steps, "launchers": launchers}) == [
        "metrics.launchers.memcpy[50000][0][1].share = 1.5"]


@pytest.mark.parametrize("name", ["b.pt.trace.json", "manifest.json"])
def test_fifo_inside_a_run_folder_is_one_line(tiny_trace: Path, tmp_path: Path,
                                              name: str) -> None:
    """A FIFO named like a trace or like the run's manifest inside a folder is named, not
    skipped or opened (opening it would wait for a writer forever); the trace beside it is
    still read (TINY_TRACE's 2 steps)."""
    import os
    import shutil

    folder = tmp_path / "run"
    folder.mkdir()
    shutil.copy(tiny_trace, folder / "a.pt.trace.json")
    os.mkfifo(folder / name)
    report = analyze_paths([folder], AnalyzeOptions())
    assert report.runs[0].metrics.steps.count == 2
    assert report.failures == [f"{folder / name}: a FIFO (named pipe), not a regular file: "
                               "only files are read"]
