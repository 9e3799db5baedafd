"""The command line itself: help, version, and the one-line errors of the CLI's own checks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from profreport import __version__
from profreport.cli import main, parse_formats


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """Run ``python -m profreport ARGS`` in a subprocess, capturing its output."""
    return subprocess.run([sys.executable, "-m", "profreport", *args],
                          capture_output=True, text=True, timeout=120)


def test_version_names_the_package() -> None:
    result = run_cli("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"profreport {__version__}"


@pytest.mark.parametrize("command", ["analyze", "run-and-report", "grade"])
def test_each_subcommand_explains_itself(command: str) -> None:
    result = run_cli(command, "--help")
    assert result.returncode == 0
    assert "usage: profreport " + command in result.stdout
    assert len(result.stdout.splitlines()) > 5


def test_grade_needs_submissions_and_a_rubric(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["grade"]) == 2
    err = capsys.readouterr().err
    assert "grade needs SUBMISSIONS and --rubric RUBRIC.toml" in err and "--example-rubric" in err
    assert len(err.strip().splitlines()) == 1


def test_grade_and_analyze_name_their_worker_processes_alike(
        capsys: pytest.CaptureFixture[str]) -> None:
    """grade takes --processes like analyze; its old --jobs still works, saying it is
    deprecated; neither takes less than one."""
    from profreport.cli import build_parser

    parser = build_parser(run_options=False)
    assert parser.parse_args(["grade", "--processes", "3"]).processes == 3
    assert parser.parse_args(["analyze", "x", "--processes", "3"]).processes == 3
    assert parser.parse_args(["grade", "--jobs", "2"]).processes == 2
    assert "--jobs is deprecated; use --processes" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parser.parse_args(["grade", "--processes", "0"])


def test_example_rubric_is_the_readmes_and_parses(tmp_path: Path) -> None:
    """`grade --example-rubric` prints the rubric the README shows, and it is a valid rubric."""
    from profreport.grade.rubric import parse_rubric

    result = run_cli("grade", "--example-rubric")
    assert result.returncode == 0
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    assert f"```toml\n{result.stdout}```" in readme
    rubric = parse_rubric(result.stdout, tmp_path / "rubric.toml")
    assert [check.id for check in rubric.checks] == ["profiled", "loader-fixed", "pinned",
                                                     "speedup", "gpu-busy"]


def test_no_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "try 'profreport --help'" in capsys.readouterr().err


def test_formats_are_checked() -> None:
    assert parse_formats("html, pdf,html") == ("html", "pdf")
    with pytest.raises(Exception, match="unknown format docx"):
        parse_formats("html,docx")
    result = run_cli("analyze", "x.json", "--format", "docx")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr


#: Modules that only run-and-report or the PDF renderer need: the analysis path never loads them.
HEAVY_MODULES = ("torch", "plotly", "weasyprint", "kaleido", "line_profiler", "nvtx",
                 "profreport.runner")


def _loaded_after(code: str) -> list[str]:
    """The HEAVY_MODULES (or their submodules) loaded once ``code`` has run in a fresh Python."""
    probe = (f"import sys\n{code}\n"
             f"print(sorted({{m.split('.')[0] if not m.startswith('profreport') else m"
             f" for m in sys.modules if m.startswith({HEAVY_MODULES!r})}}))")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            timeout=300, check=True)
    return result.stdout.strip().splitlines()[-1]


def test_help_loads_neither_the_runner_nor_torch() -> None:
    assert _loaded_after("from profreport.cli import main\n"
                         "try:\n    main(['--help'])\nexcept SystemExit:\n    pass") == "[]"


def test_analysis_to_json_and_markdown_loads_nothing_it_does_not_use(
        fixtures_dir: Path, tmp_path: Path) -> None:
    trace = next((fixtures_dir / "compute_heavy" / "trace").glob("*.pt.trace.json.gz"))
    assert _loaded_after(f"from profreport.cli import main\n"
                         f"assert main(['analyze', {str(trace)!r}, '--out', {str(tmp_path)!r},"
                         f" '--format', 'json,md']) == 0") == "[]"
    assert (tmp_path / "report.json").is_file()


def test_a_closed_stdout_ends_quietly_after_the_reports_are_written(tmp_path: Path) -> None:
    """``profreport analyze ... | head -3``: the reader closing the pipe had ended in a
    BrokenPipeError traceback on stderr; the reports are written first, and the command stops
    without a word, status 141 (128 + SIGPIPE)."""
    sys.path.insert(0, str(Path(__file__).parent))
    from conftest import cpu_event, kineto_trace

    events = [cpu_event(f"ProfilerStep#{n}", 1000 + 2000 * n, 1900, cat="user_annotation")
              for n in range(4)] + [cpu_event("aten::mm", 1500 + 2000 * n, 900)
                                    for n in range(4)]
    trace = kineto_trace(tmp_path / "t.pt.trace.json", events)
    child = subprocess.Popen([sys.executable, "-m", "profreport", "analyze", str(trace),
                              "--out", str(tmp_path / "out"), "--format", "md"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert child.stdout is not None
    child.stdout.close()  # long before the child, still importing, prints its summary
    _, stderr = child.communicate(timeout=120)
    assert "Traceback" not in stderr and stderr == ""
    assert child.returncode == 141
    assert (tmp_path / "out" / "report.md").is_file()
