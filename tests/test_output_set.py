"""--out is checked before any work; the report set is swapped in whole, under a folder lock."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from profreport.cli import main
from profreport.errors import OutputError
from profreport.fileio import folder_lock, signals_deferred
from profreport.reports.analysis.analyze import AnalyzeOptions, analyze_paths
from profreport.reports.analysis.results import Report
from profreport.reports.render import json as json_renderer
from profreport.reports.render import write_reports


@pytest.fixture
def report(tiny_trace: Path) -> Report:
    """The report of the hand-built trace."""
    return analyze_paths([tiny_trace], AnalyzeOptions())


def _out_error(capsys: pytest.CaptureFixture[str], out: Path) -> tuple[int, list[str]]:
    """Run analyze on a missing input with ``out``: the --out check must speak first."""
    status = main(["analyze", str(out.parent / "no-such-trace.json"), "--out", str(out)])
    captured = capsys.readouterr()
    assert captured.out == ""
    return status, captured.err.splitlines()


def test_out_that_is_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "report.html"
    out.write_text("not a folder")
    assert _out_error(capsys, out) == (2, [
        f"profreport: error: {out}: cannot write the report here: it is a file, not a folder"])


def test_out_under_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "file").write_text("x")
    out = tmp_path / "file" / "sub" / "out"
    assert _out_error(capsys, out) == (2, [
        f"profreport: error: {out}: cannot write the report here: it lies under "
        f"{tmp_path / 'file'}, which is a file, not a folder"])


def test_out_not_writable(capsys: pytest.CaptureFixture[str]) -> None:
    out = Path("/proc/profreport-out")
    status, lines = _out_error(capsys, out)
    assert status == 2 and len(lines) == 1
    assert lines[0].startswith(f"profreport: error: {out}: cannot write the report here: the "
                               "folder is not writable (/proc, where it would be made)")


def test_set_replaces_the_previous_set_whole(tmp_path: Path, report: Report) -> None:
    out = tmp_path / "out"
    first = write_reports(report, out, ["md", "json"])
    assert [p.name for p in first] == ["report.md", "report.json"]
    second = write_reports(report, out, ["html", "md"])
    assert sorted(p.name for p in out.iterdir()) == ["report.html", "report.md"]
    assert [p.name for p in second] == ["report.html", "report.md"]
    assert oct(second[0].stat().st_mode & 0o777) == oct(0o666 & ~_umask())


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_interrupt_while_rendering_leaves_the_old_set(tmp_path: Path, report: Report,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out"
    write_reports(report, out, ["md", "json"])
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def interrupted(rendered: Report) -> str:
        raise KeyboardInterrupt  # Ctrl-C after report.md was rendered, while JSON renders

    monkeypatch.setattr(json_renderer, "render_json", interrupted)
    report.title = "a second run"
    with pytest.raises(KeyboardInterrupt):
        write_reports(report, out, ["md", "json"])
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_signals_are_held_while_the_set_moves() -> None:
    delivered: list[str] = []
    with pytest.raises(KeyboardInterrupt), signals_deferred():
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)
        delivered.append("swap finished")  # the held Ctrl-C arrives only when the block ends
    assert delivered == ["swap finished"]


def test_second_writer_waits_for_the_first(tmp_path: Path, report: Report) -> None:
    out = tmp_path / "out"
    heard: list[str] = []
    holding = threading.Event()

    def first_run() -> None:
        with folder_lock(out):
            holding.set()
            time.sleep(1.0)

    worker = threading.Thread(target=first_run)
    worker.start()
    holding.wait(10)
    started = time.monotonic()
    written = write_reports(report, out, ["md"], on_wait=heard.append)
    waited = time.monotonic() - started
    worker.join()
    assert heard == [f"{out}: another profreport is writing its report here; waiting for it"]
    assert waited >= 0.5 and written == [out / "report.md"]


def test_lock_held_too_long_is_one_line(tmp_path: Path) -> None:
    with folder_lock(tmp_path), pytest.raises(OutputError) as caught, \
            folder_lock(tmp_path, wait_s=0.3):
        pass
    assert caught.value.one_line() == (
        f"{tmp_path}: another profreport has been writing its report here for over 0 s; wait "
        "for it or choose another --out")
