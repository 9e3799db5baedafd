"""The PDF report, made from the real pipeline's report of a corpus trace."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from profreport.errors import MissingToolError
from profreport.reports.analysis.analyze import AnalyzeOptions, analyze_paths
from profreport.reports.render import write_reports
from profreport.reports.render.display import verdict_label

pytestmark = pytest.mark.corpus


@pytest.fixture(scope="module")
def pdf_of_pair(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list]:
    """report.pdf of both ResNet-50 traces (two runs and a comparison), with the report."""
    report = analyze_paths([corpus / "kineto" / "resnet50_num_workers_0.pt.trace.json.gz",
                            corpus / "kineto" / "resnet50_num_workers_4.pt.trace.json.gz"],
                           AnalyzeOptions())
    out = tmp_path_factory.mktemp("pdf")
    try:
        (path,) = write_reports(report, out, ["pdf"])
    except MissingToolError as exc:  # kaleido needs a Chrome/Chromium for the charts
        pytest.skip(exc.one_line())
    return path, report.runs


def pdf_text(path: Path, first: int, last: int) -> str:
    """Text of pages ``first``..``last`` (poppler's pdftotext)."""
    if shutil.which("pdftotext") is None:
        pytest.skip("pdftotext (poppler-utils) is not installed")
    return subprocess.run(["pdftotext", "-layout", "-f", str(first), "-l", str(last),
                           str(path), "-"], capture_output=True, text=True, check=True).stdout


def test_pdf_is_a_pdf_with_numbered_pages(pdf_of_pair: tuple[Path, list]) -> None:
    """The file is a PDF of several A4 pages, each numbered "n / total"."""
    path, _ = pdf_of_pair
    assert path.read_bytes().startswith(b"%PDF-")
    if shutil.which("pdfinfo") is None:
        pytest.skip("pdfinfo (poppler-utils) is not installed")
    info = subprocess.run(["pdfinfo", str(path)], capture_output=True, text=True,
                          check=True).stdout
    pages = int(next(line.split()[-1] for line in info.splitlines() if line.startswith("Pages:")))
    assert pages >= 2
    assert "595.276 x 841.89" in info  # A4 in points
    assert f"1 / {pages}" in pdf_text(path, 1, 1)


def test_verdicts_are_on_page_one(pdf_of_pair: tuple[Path, list]) -> None:
    """Page one names each run's verdict: 40% waiting for data with num_workers=0."""
    path, runs = pdf_of_pair
    first_page = " ".join(pdf_text(path, 1, 1).split())
    assert runs[0].verdict == "loader-bound"
    for run in runs:
        assert verdict_label(run.verdict) in first_page
    # The verdict's own figure, not any '40%' on the page.
    assert runs[0].verdict_reason == "40% of step time waits for data"
    assert "40% of step time waits for data" in first_page
