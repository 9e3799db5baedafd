"""The input-safety layer (core/inputs.py, core/text.py): file kinds, limits, containment, text."""

from __future__ import annotations

import gzip
import io
import os
import threading
from pathlib import Path

import pytest

from profreport.errors import InputError
from profreport.inputs import (
    MAX_EVENTS,
    BoundedReader,
    RefusedPathError,
    check_regular_file,
    decompressed_limit,
    open_input,
    resolve_inside,
)
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
