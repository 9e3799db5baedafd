"""Golden reports: ``report.json`` and ``report.md`` of the fixtures and a few corpus files,
committed under ``tests/golden/`` and compared with freshly generated ones, so that a report
changes only where a commit means it to.

When a change is meant to alter reports, regenerate them and review the diff:

    .venv/bin/python tests/test_golden.py --update && git diff --stat tests/golden/

then name each changed behaviour in the commit message. Only what truly varies between machines
is scrubbed: absolute paths (the checkout, ../shared/corpus, the nsys export cache) and the
profreport version. Reports are exported with the nsys on PATH (Debian's 2022.4, which
scripts/setup.sh installs) into a fresh cache, never with a newer nsys unpacked under
~/.cache/profreport/nsys-tools, whose version the reports would name. The corpus cases skip when
../shared/corpus is absent, the ones holding an ``.nsys-rep`` when nsys is absent.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from profreport import __version__
from profreport.executors import ExecutorOptions
from profreport.parsers import ParseOptions
from profreport.reports.analysis.analyze import AnalyzeOptions, analyze_paths
from profreport.reports.render import RENDERERS

REPO = Path(__file__).resolve().parents[1]
GOLDEN = REPO / "tests" / "golden"
CORPUS = REPO.parent / "shared" / "corpus"
#: The formats kept as golden files: the two text formats a diff can be read in.
FORMATS = ("json", "md")


@dataclass(frozen=True)
class Case:
    """One golden report: its inputs (relative to the checkout or the corpus) and needs."""

    name: str
    inputs: tuple[str, ...]
    corpus: bool = False
    nsys: bool = False

    def paths(self) -> list[Path]:
        """The inputs as absolute paths."""
        root = CORPUS if self.corpus else REPO
        return [root / item for item in self.inputs]

    def missing(self) -> str | None:
        """Why this case cannot run here, or None."""
        if self.corpus and not CORPUS.is_dir():
            return "../shared/corpus is absent"
        if self.nsys and shutil.which("nsys") is None:
            return "nsys is not installed"
        return None


CASES = (
    Case("loader_heavy", ("fixtures/loader_heavy",), nsys=True),
    Case("compute_heavy", ("fixtures/compute_heavy",), nsys=True),
    Case("ddp_gloo", ("fixtures/ddp_gloo",)),
    Case("resnet50_num_workers_0", ("kineto/resnet50_num_workers_0.pt.trace.json.gz",),
         corpus=True),
    Case("cuda_event_sync", ("hta/cuda_event_sync.json.gz",), corpus=True),
    Case("sc22_1gpu_baseline", ("nsys/sc22_1gpu_baseline.nsys-rep",), corpus=True, nsys=True),
)


def scrub(text: str, cache_dir: Path) -> str:
    """The report with what varies between machines replaced by placeholders."""
    for path, mark in ((cache_dir.resolve(), "<nsys-cache>"), (CORPUS.resolve(), "<corpus>"),
                       (REPO, "<repo>")):
        text = text.replace(str(path), mark)
    return text.replace(f"profreport {__version__}", "profreport <version>")


def generate(case: Case, cache_dir: Path) -> dict[str, str]:
    """The scrubbed reports of ``case`` by format name (one local process: deterministic)."""
    nsys = shutil.which("nsys")
    parse = ParseOptions(cache_dir=cache_dir, nsys=Path(nsys) if nsys else None)
    report = analyze_paths(case.paths(), AnalyzeOptions(
        parse=parse, executor=ExecutorOptions(processes=1)))
    return {name: scrub(str(RENDERERS[name].render(report)), cache_dir) for name in FORMATS}


def golden_path(case: Case, name: str) -> Path:
    """Where the golden file of ``case`` in format ``name`` lives."""
    return GOLDEN / case.name / RENDERERS[name].file_name


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_report_matches_golden(case: Case, nsys_cache_dir: Path) -> None:
    reason = case.missing()
    if reason:
        pytest.skip(reason)
    for name, text in generate(case, nsys_cache_dir).items():
        expected = golden_path(case, name).read_text(encoding="utf-8")
        assert text == expected, (
            f"{case.name}/{RENDERERS[name].file_name} differs from the golden report; if the "
            "change is meant, run `.venv/bin/python tests/test_golden.py --update`, review "
            "`git diff tests/golden/` and name the change in the commit")


def main(argv: list[str] | None = None) -> int:
    """``--update``: rewrite the golden reports of every case that can run here."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--update", action="store_true", help="rewrite tests/golden/")
    args = parser.parse_args(argv)
    if not args.update:
        parser.error("nothing to do: pass --update (the comparison runs under pytest)")
    with tempfile.TemporaryDirectory(prefix="golden-nsys-") as cache:
        for case in CASES:
            update(case, Path(cache))
    return 0


def update(case: Case, cache_dir: Path) -> None:
    """Rewrite the golden reports of ``case``, saying which changed (or why it was skipped)."""
    reason = case.missing()
    if reason:
        print(f"{case.name}: skipped ({reason})")
        return
    for name, text in generate(case, cache_dir).items():
        path = golden_path(case, name)
        path.parent.mkdir(parents=True, exist_ok=True)
        changed = not path.is_file() or path.read_text(encoding="utf-8") != text
        path.write_text(text, encoding="utf-8")
        print(f"{path.relative_to(REPO)}: {'changed' if changed else 'unchanged'}")


if __name__ == "__main__":
    sys.exit(main())
