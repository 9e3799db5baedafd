"""The input-safety layer (core/inputs.py, core/text.py): file kinds, limits, containment, text."""

from __future__ import annotations

import gzip
import io
import json
import os
import sqlite3
import threading
from pathlib import Path

import pytest

from profreport.errors import InputError, UnsupportedFormatError
from profreport.inputs import (
    EVENT_TIMES,
    MAX_EVENTS,
    BoundedReader,
    RefusedPathError,
    check_regular_file,
    decompressed_limit,
    open_input,
    resolve_inside,
)
from profreport.parsers import FORMATS, PROFILE_SUFFIXES, detect_format, parse_file
from profreport.reports.analysis.analyze import find_profiles
from profreport.text import MAX_SHOWN_NAME, display_text, elide, error_text, neutralise


def test_regular_file_is_opened(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    path.write_bytes(b"{}")
    with open_input(path) as handle:
        assert handle.read() == b"{}"
    assert check_regular_file(path).st_size == 2


@pytest.mark.parametrize(("path", "kind"), [("/dev/null", "a character device"),
                                            ("/dev/zero", "a character device")])
def test_devices_are_refused_with_their_kind(path: str, kind: str) -> None:
    with pytest.raises(InputError) as caught:
        open_input(path)
    assert caught.value.one_line() == f"{path}: {kind}, not a regular file: only files are read"


def test_fifo_is_refused_without_hanging(tmp_path: Path) -> None:
    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)
    outcome: list[str] = []

    def attempt() -> None:
        try:
            open_input(fifo)
        except InputError as exc:
            outcome.append(exc.one_line())

    worker = threading.Thread(target=attempt, daemon=True)
    worker.start()
    worker.join(timeout=10)
    assert outcome == [f"{fifo}: a FIFO (named pipe), not a regular file: only files are read"]


def test_folder_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="a folder, not a regular file"):
        check_regular_file(tmp_path)
    with pytest.raises(InputError, match="cannot read: No such file"):
        open_input(tmp_path / "absent.json")


def test_limit_names_itself_and_its_reason() -> None:
    MAX_EVENTS.check(MAX_EVENTS.value)
    with pytest.raises(InputError) as caught:
        MAX_EVENTS.check(MAX_EVENTS.value + 1, "t.json")
    line = caught.value.one_line()
    assert line.startswith("t.json: too large: 50,000,001 events where at most 50,000,000")
    assert MAX_EVENTS.reason in line


def test_bounded_reader_stops_a_gzip_bomb() -> None:
    bomb = gzip.compress(b" " * (4 << 20))
    assert len(bomb) < 10_000
    limit = decompressed_limit(len(bomb))
    assert limit == 256 << 20  # the allowance: small files may still expand to 256 MiB
    reader = BoundedReader(gzip.GzipFile(fileobj=io.BytesIO(bomb)), 1 << 20, "b.json.gz")
    with pytest.raises(InputError, match="more than 1,048,576 decompressed bytes"):
        io.BufferedReader(reader).read()
    small = BoundedReader(gzip.GzipFile(fileobj=io.BytesIO(gzip.compress(b"abc"))), 3)
    assert io.BufferedReader(small).read() == b"abc"


@pytest.fixture
def run_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "run"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "train.py").write_text("x = 1\n")
    (folder / "passwd").symlink_to("/etc/passwd")
    (folder / "inner").symlink_to(folder / "sub" / "train.py")
    return folder


def test_resolve_inside_accepts_files_in_the_roots(run_folder: Path) -> None:
    real = run_folder.resolve() / "sub" / "train.py"
    assert resolve_inside("sub/train.py", [run_folder]) == real
    assert resolve_inside(str(real), [run_folder]) == real
    assert resolve_inside("inner", [run_folder]) == real  # a link that stays inside


@pytest.mark.parametrize(("named", "reason"), [
    ("../../../../etc/passwd", "it names a parent folder ('..')"),
    ("sub/../../x", "it names a parent folder ('..')"),
    ("/etc/passwd", "it lies outside"),
    ("/etc/shadow", "it lies outside"),
    ("passwd", "(through a symbolic link)"),
    ("/proc/self/environ", "system folders (/proc, /sys, /dev) are never read"),
    ("/sys/kernel/notes", "system folders"),
    ("/dev/stdin", "system folders"),
    ("a\x00b", "not a usable path"),
    ("", "not a usable path"),
])
def test_resolve_inside_refuses(run_folder: Path, named: str, reason: str) -> None:
    with pytest.raises(RefusedPathError) as caught:
        resolve_inside(named, [run_folder], owner="p.lprof")
    assert reason in caught.value.reason
    assert caught.value.one_line().startswith("p.lprof: refused ")


def test_display_text_makes_controls_and_bidi_visible() -> None:
    assert neutralise("evil\u202etxt.exe") == "evil\\u202etxt.exe"
    assert neutralise("a\x00b\x1b[31mc\n") == "a\\x00b\\x1b[31mc\\x0a"
    assert neutralise("\u2066x\u2069\u200b") == "\\u2066x\\u2069\\u200b"
    assert neutralise("void at::native::élan<float>()") == "void at::native::élan<float>()"


def test_long_names_are_elided_with_their_length() -> None:
    name = "k" * 100_000
    shown = display_text(name)
    assert len(shown) <= MAX_SHOWN_NAME
    assert "[100,000 chars]" in shown
    assert elide("short") == "short"


def test_error_lines_stay_short_whatever_the_name() -> None:
    line = InputError("bad name " + "y" * 100_000 + "\n\u202e", "z" * 100_000).one_line()
    assert len(line) < 1000
    assert "\n" not in line and "\u202e" not in line
    assert error_text("a\n  b") == "a b"


# --- the registry of input formats (parsers.FORMATS) -------------------------------------------

def _kineto_text(events: list[dict[str, object]]) -> str:
    """A small current-format Kineto trace holding ``events``."""
    return json.dumps({"schemaVersion": 1, "deviceProperties": [], "traceEvents": events})


_ONE_STEP = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1,
              "ts": 10.0, "dur": 100.0},
             {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 20.0,
              "dur": 50.0}]


def test_run_folder_without_manifest_skips_the_runners_own_json(tmp_path: Path) -> None:
    """The runner's result file is JSON but no trace: the folder search leaves it out (it was
    read as a trace and failed), and a trace named plainly ``.json`` is still found."""
    (tmp_path / "script_result.none.rank0.json").write_text(json.dumps(
        {"steps": 5, "step_seconds": [0.1] * 5, "device": "cpu"}))
    (tmp_path / "rank0.json").write_text(_kineto_text(_ONE_STEP))
    assert find_profiles(tmp_path) == [tmp_path / "rank0.json"]
    with pytest.raises(InputError, match=r"not a profile profreport knows \(a JSON file "
                                         r"without traceEvents\)"):
        detect_format(tmp_path / "script_result.none.rank0.json")


def test_gzip_compressed_sqlite_gets_one_clear_line(tmp_path: Path) -> None:
    """A ``.sqlite.gz`` was read as a gzip JSON trace ("malformed JSON"): its content says it is
    a compressed SQLite file, and the line says what to do."""
    plain = tmp_path / "capture.sqlite"
    with sqlite3.connect(plain) as conn:
        conn.execute("CREATE TABLE StringIds (id INTEGER, value TEXT)")
    packed = tmp_path / "capture.sqlite.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert detect_format(plain).name == "nsys-sqlite"
    with pytest.raises(UnsupportedFormatError) as caught:
        parse_file(packed)
    assert caught.value.one_line() == (
        f"{packed}: a gzip-compressed SQLite file: decompress it first (gunzip -k FILE) and "
        "pass the .sqlite")


def test_execution_trace_is_named_for_what_it_is(tmp_path: Path) -> None:
    """A PyTorch execution trace (the Chakra ET input) given by mistake, plain or gzip."""
    document = {"schema": "1.0.2-chakra.0.0.4", "pid": 7, "time": "2024-05-01 10:00:00",
                "start_ts": 100, "nodes": [{"id": 1, "name": "[pytorch|profiler|execution_trace|"
                                                        "process]", "ctrl_deps": 1,
                                            "inputs": {"values": [], "shapes": [],
                                                       "types": []}}],
                "finish_ts": 200}
    for name, data in (("et.json", json.dumps(document).encode()),
                       ("et.json.gz", gzip.compress(json.dumps(document).encode()))):
        path = tmp_path / name
        path.write_bytes(data)
        with pytest.raises(UnsupportedFormatError, match="this is a PyTorch execution trace"):
            parse_file(path)


def test_an_execution_trace_beside_its_kineto_trace_is_no_failure(tmp_path: Path) -> None:
    """ExecutionTraceObserver writes its graph beside the torch.profiler trace of the same run
    (a real torch 2.13 run: et.json and kineto.json in one folder): the folder's trace is read
    and the execution trace left out; it was a failure line telling to 'pass the torch.profiler
    trace of the same run', which the folder holds, and exit status 1. Alone in its folder it
    is still named for what it is."""
    document = {"schema": "1.1.1-chakra.0.0.4", "pid": 7, "nodes": [], "finish_ts": 200}
    (tmp_path / "et.json").write_text(json.dumps(document))
    (tmp_path / "kineto.json").write_text(json.dumps({"schemaVersion": 1, "traceEvents": []}))
    assert find_profiles(tmp_path) == [tmp_path / "kineto.json"]
    (tmp_path / "kineto.json").unlink()
    assert find_profiles(tmp_path) == [tmp_path / "et.json"]


def test_every_format_is_one_record_with_its_parser_limits_and_bounds() -> None:
    """Detection, parser, limits and bounds of each format live in its registry record; the
    folder search's names come from the records; every format shares one time bound."""
    readable = [fmt for fmt in FORMATS if fmt.entry_point]
    assert {fmt.kind for fmt in readable} == {"nsys", "kineto", "lprof"}
    assert all(fmt.refusal for fmt in FORMATS if not fmt.entry_point)
    assert {s for fmt in readable for s in fmt.suffixes} == set(PROFILE_SUFFIXES)
    assert {fmt.bounds for fmt in readable if fmt.bounds} == {EVENT_TIMES}
    assert EVENT_TIMES.max_duration_ns == 7 * 24 * 3600 * 10**9


def test_kineto_and_nsys_drop_the_same_impossible_durations(tmp_path: Path) -> None:
    """One bound: an 8-day kernel is dropped by the Kineto parser as by nsys (Kineto let
    durations up to 30 days through)."""
    eight_days_us = 8 * 24 * 3600 * 10**6
    events = [*_ONE_STEP, {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7,
                           "ts": 30.0, "dur": float(eight_days_us),
                           "args": {"device": 0, "stream": 7, "correlation": 1}}]
    path = tmp_path / "long.pt.trace.json"
    path.write_text(_kineto_text(events))
    profile = parse_file(path)
    assert profile.table("kernels").empty
    assert profile.meta.dropped == {"dur longer than possible": 1}
    assert profile.meta.notes == ["1 records dropped: dur longer than possible"]


def test_nsys_report_is_recognised_by_content(tmp_path: Path, fixtures_dir: Path) -> None:
    """An Nsight Systems report is known by its header whatever its name (``.qdrep``, the
    older name, or none); a damaged report named ``.qdrep`` still goes to nsys."""
    report = fixtures_dir / "loader_heavy" / "nsys.nsys-rep"
    for name in ("old.qdrep", "renamed.bin"):
        copy = tmp_path / name
        copy.write_bytes(report.read_bytes())
        assert detect_format(copy).name == "nsys-report"
    damaged = tmp_path / "damaged.qdrep"
    damaged.write_bytes(b"\x00" * 64)
    assert detect_format(damaged).name == "nsys-report"
