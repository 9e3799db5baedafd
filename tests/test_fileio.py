"""Output files are written whole or not at all, with the user's usual permissions."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from profreport.fileio import atomic_open, write_text


def test_written_file_gets_umask_permissions(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        path = write_text(tmp_path / "a" / "report.md", "hello\n")
    finally:
        os.umask(old)
    assert path.read_text() == "hello\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_failure_leaves_neither_file_nor_temporary(tmp_path: Path) -> None:
    target = tmp_path / "report.html"
    target.write_text("old report")
    with pytest.raises(RuntimeError), atomic_open(target) as handle:
        handle.write("half a report")
        raise RuntimeError("renderer broke")
    assert target.read_text() == "old report"
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]
