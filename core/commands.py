"""The subcommands: each composes the layers (runner -> parsers -> analysis -> renderers) and
talks to the terminal. Nothing below this module prints a summary or returns an exit status."""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import webbrowser
from pathlib import Path
from typing import TYPE_CHECKING

from profreport.errors import (
    EXIT_INTERRUPTED,
    EXIT_PARTIAL,
    MissingToolError,
    RunError,
    UsageError,
)
from profreport.executors import ExecutorOptions
from profreport.fileio import check_output_folder
from profreport.parsers import ParseOptions
from profreport.progress import read_progress
from profreport.reports.analysis.analyze import AnalyzeOptions, analyze_paths, find_profiles
from profreport.reports.analysis.results import Report, RunAnalysis
from profreport.reports.analysis.top import TopKernel, top_kernel
from profreport.reports.render import require_renderers, write_reports
from profreport.text import display_text, elide
from profreport.units import ms

if TYPE_CHECKING:  # the grader (and all it imports) loads only for ``profreport grade``
    from profreport.grade.results import StudentResult

#: How many findings the terminal summary shows per run.
SUMMARY_FINDINGS = 3
#: Longest kernel or op name in the terminal summary.
SUMMARY_NAME_LIMIT = 70
#: Longest terminal line of the summary (a run name or reason from an input can be any length).
SUMMARY_LINE_LIMIT = 400
#: Modules of the ``train`` extra that run-and-report imports.
TRAIN_MODULES = ("torch", "line_profiler", "nvtx")


def run_summary(run: RunAnalysis) -> list[str]:
    """A few lines about one run for the terminal (names from inputs elided and neutralised)."""
    return [display_text(line, SUMMARY_LINE_LIMIT) for line in _summary_lines(run)]


def _summary_lines(run: RunAnalysis) -> list[str]:
    """The summary lines of one run, names elided to fit a terminal line."""
    m = run.metrics
    lines = [f"{run.name}: {run.verdict} ({run.verdict_reason})"]
    if m.steps is not None:
        one = " over one interval" if m.steps.single_interval else ""
        wall = (f", {ms(m.steps.wall_mean_ns)} start to next start{one}" if m.steps.wall_mean_ns
                else "")
        window = m.shape.step_window if m.shape is not None else None
        median = f", median window {ms(window.median_ns)}" if window is not None else ""
        lines.append(f"  steps: {m.steps.count} × {ms(m.steps.mean_ns)} {m.steps.marker} "
                     f"({m.steps.origin}{wall}{median})")
    lines += [f"  [{f.severity}] {f.title}" for f in run.findings[:SUMMARY_FINDINGS]]
    top = top_kernel(m.top_kernels)
    if top is not None:
        lines.append(f"  top kernel: {_top_kernel_summary(top)}")
    if m.top_ops:
        op = m.top_ops[0]
        lines.append(f"  top op: {elide(op.name, SUMMARY_NAME_LIMIT)} {ms(op.total_ns)}")
    if m.lines:
        line = m.lines[0]
        sync = " (a sync point: the GPU work queued before it)" if line.is_sync_point else ""
        code = f": {line.source.strip()[:60]}" if line.source else " (source not shown)"
        lines.append(f"  top line: {Path(line.file).name}:{line.lineno} {line.share:.0%} of "
                     f"{line.function}{code}{sync}")
    return lines


def _top_kernel_summary(top: TopKernel) -> str:
    """The top kernel as the summary says it: its name, time and share; 'unknown' when the
    kernels of unrecorded name outweigh every named one (top.top_kernel), with both."""
    k = top.top
    if top.known:
        return f"{elide(k.name, SUMMARY_NAME_LIMIT)} {ms(k.total_ns)} ({k.share:.0%})"
    named = top.largest_named
    largest = ("" if named is None else f"; the largest named one, "
               f"{elide(named.name, SUMMARY_NAME_LIMIT)}, {ms(named.total_ns)} ({named.share:.0%})")
    return (f"unknown (kernels whose names the profile does not record take {ms(k.total_ns)} "
            f"({k.share:.0%}) together{largest})")


def _display_available() -> bool:
    """Whether a browser window can be shown here."""
    return sys.platform == "darwin" or bool(os.environ.get("DISPLAY")
                                            or os.environ.get("WAYLAND_DISPLAY"))


def _open_report(written: list[Path]) -> None:
    """Open the HTML report in a browser when a display exists, else say where it is."""
    html = next((p for p in written if p.suffix == ".html"), None)
    if html is None:
        print("--open: no HTML report was written")
    elif _display_available():
        webbrowser.open(html.resolve().as_uri())
    else:
        print(f"--open: no display here; open {html} on a machine with a browser")


def _say(line: str) -> None:
    """A progress line on stderr."""
    print(f"profreport: {line}", file=sys.stderr)


def finish_report(report: Report, args: argparse.Namespace) -> int:
    """Write the formats, print the summary and the failures; 0, or 1 when an input failed."""
    written = write_reports(report, Path(args.out), tuple(args.formats), on_wait=_say)
    for run in report.runs:
        print("\n".join(run_summary(run)))
    if report.comparison is not None:
        for row in report.comparison.rows:
            if row.name == report.comparison.baseline:
                continue
            speed = f"{row.speedup:.2f}x" if row.speedup else "?"
            print(display_text(f"{row.name} vs {report.comparison.baseline}: {speed}; "
                               f"{row.explanation}", SUMMARY_LINE_LIMIT))
    for path in written:
        print(f"wrote {path}")
    for failure in report.failures:
        print(f"profreport: failed: {failure}", file=sys.stderr)
    if getattr(args, "open", False):
        _open_report(written)
    return EXIT_PARTIAL if report.failures else 0


def analyze_command(args: argparse.Namespace) -> int:
    """The ``analyze`` subcommand."""
    check_output_folder(Path(args.out))
    require_renderers(args.formats)
    options = AnalyzeOptions(
        title=args.title, baseline=args.baseline,
        parse=ParseOptions(cache_dir=getattr(args, "cache_dir", None),
                           source_root=getattr(args, "source_root", None),
                           nsys=getattr(args, "nsys", None)),
        executor=ExecutorOptions(
            scheduler=args.scheduler, processes=args.processes, slurm_jobs=args.slurm_jobs,
            slurm_queue=args.slurm_queue, slurm_account=args.slurm_account,
            slurm_walltime=args.slurm_walltime, slurm_cores=args.slurm_cores,
            slurm_memory=args.slurm_memory),
        progress=read_progress())
    try:
        report = analyze_paths(list(args.inputs), options)
    finally:
        options.progress.close()
    return finish_report(report, args)


def require_train_extra() -> None:
    """MissingToolError naming the extra when what run-and-report imports is not installed."""
    missing = [name for name in TRAIN_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        raise MissingToolError.for_extra("run-and-report", missing, "train",
                                         " (pin torch first, see the README)")


def run_and_report_command(args: argparse.Namespace) -> int:
    """Run the variants (or the script), then analyse every run folder into one report."""
    require_train_extra()
    check_output_folder(Path(args.out))
    require_renderers(args.formats)
    from profreport.runner import orchestrate

    summary = orchestrate.run_from_args(args)
    if summary is None:  # --emit-slurm: scripts written, nothing run
        return 0
    if summary.interrupted and not summary.folders:
        print("profreport: interrupted before any variant finished", file=sys.stderr)
        return EXIT_INTERRUPTED
    for name in summary.unprofiled:
        print(f"profreport: {name}: no profiler could profile it", file=sys.stderr)
    status = report_on(summary.folders, summary.failures, args)
    return EXIT_INTERRUPTED if summary.interrupted else status


def report_on(folders: list[Path], failures: list[str], args: argparse.Namespace) -> int:
    """Analyse the folders that hold profiles; every failed launch is listed in the report, and
    any failure makes the exit status non-zero."""
    from profreport.runner.scripts import profiled_source_root

    usable = [folder for folder in folders if find_profiles(folder)]
    if not usable:
        raise RunError("no variant produced a profile: " + "; ".join(failures or ["none ran"]))
    report = analyze_paths(usable, AnalyzeOptions(
        title=args.title, baseline=args.baseline,
        parse=ParseOptions(source_root=profiled_source_root(getattr(args, "script", None)))))
    report.failures.extend(failures)
    status = finish_report(report, args)
    return max(status, EXIT_PARTIAL) if failures else status


#: Width in characters of the grading progress bar.
PROGRESS_WIDTH = 30


def _progress_bar(done: int, total: int, result: StudentResult) -> None:
    """Redraw the grading progress bar on the terminal (stderr)."""
    filled = PROGRESS_WIDTH * done // max(total, 1)
    bar = "#" * filled + "." * (PROGRESS_WIDTH - filled)
    end = "\n" if done == total else ""
    print(f"\r[{bar}] {done}/{total} {result.student[:30]:<30}", end=end, file=sys.stderr,
          flush=True)


def grade_command(args: argparse.Namespace) -> int:
    """The ``grade`` subcommand: 0 when every submission was graded, 1 when some failed."""
    from profreport.grade import grade_class
    from profreport.grade.rubric import example_rubric, load_rubric

    if args.example_rubric:
        print(example_rubric(), end="")
        return 0
    if args.submissions is None or args.rubric is None:
        raise UsageError("grade needs SUBMISSIONS and --rubric RUBRIC.toml "
                         "(profreport grade --example-rubric prints one to start from)")
    check_output_folder(Path(args.out))
    rubric = load_rubric(args.rubric)
    outcome = grade_class(args.submissions, rubric, args.out, workers=args.processes,
                          lms=args.lms, run=args.run, slurm=args.slurm, roster=args.roster,
                          overrides=args.overrides, anonymous=args.anonymous,
                          progress=_progress_bar if sys.stderr.isatty() else _no_progress,
                          said=lambda line: print(f"profreport: {line}", file=sys.stderr))
    for result in outcome.results:
        state = result.error if result.status == "error" else "ok"
        reused = " (unchanged, reused)" if result.reused else ""
        print(f"{result.student}: {result.total:g}/{rubric.max_total:g} {state}{reused}")
    for line in outcome.skipped:
        print(f"profreport: skipped: {line}", file=sys.stderr)
    for path in outcome.written:
        print(f"wrote {path}")
    failed = any(r.status == "error" for r in outcome.results) or outcome.skipped
    return EXIT_PARTIAL if failed else 0


def _no_progress(done: int, total: int, result: StudentResult) -> None:
    """No progress bar when stderr is not a terminal (logs, CI)."""
