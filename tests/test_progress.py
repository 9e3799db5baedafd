"""The reading progress bar: real bytes from the read offsets of open files, files done, and
silence when the output is not a terminal."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

from profreport.progress import PROC, ReadProgress, TerminalProgress, read_progress


def test_bar_counts_bytes_read_from_an_open_file_and_files_done(tmp_path: Path) -> None:
    if not PROC.is_dir():
        pytest.skip("read offsets come from /proc (Linux)")
    first, second = tmp_path / "rank0.json", tmp_path / "rank1.json"
    first.write_bytes(b"x" * 3000)
    second.write_bytes(b"y" * 1000)
    progress = TerminalProgress(io.StringIO())
    progress.start([first, second])
    try:
        with open(second, "rb", buffering=0) as handle:
            handle.read(400)
            assert "400 B / 3.9 KiB, 0/2 files" in progress.line()
        progress.file_done(first)
        # The closed file keeps the furthest offset seen, never falls back to 0.
        assert "3.3 KiB / 3.9 KiB, 1/2 files" in progress.line()
        progress.file_done(second)
        assert progress.line().startswith(f"reading [{'#' * 24}] 3.9 KiB / 3.9 KiB, 2/2 files")
        assert not progress.reading()
    finally:
        progress.close()


def test_quiet_when_not_a_terminal(fixtures_dir: Path, tmp_path: Path) -> None:
    """Pipes for stdout and stderr: a silent progress, and nothing but the summary lines."""
    assert type(read_progress()) is ReadProgress  # pytest captures both streams
    result = subprocess.run(
        [sys.executable, "-m", "profreport", "analyze", str(fixtures_dir / "ddp_gloo"),
         "--out", str(tmp_path), "--format", "json"],
        capture_output=True, text=True, timeout=300, check=True)
    assert "\r" not in result.stderr + result.stdout
    assert "reading [" not in result.stderr
