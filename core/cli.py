"""The ``profreport`` command line: argument parsing, and the one place errors become exit codes."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from profreport import __version__
from profreport.allocator import tune_for_large_arrays
from profreport.argtypes import DeprecatedAlias, positive_int
from profreport.errors import (
    EXIT_BROKEN_PIPE,
    EXIT_INTERRUPTED,
    ProfreportError,
    UsageError,
)
from profreport.reports.render import DEFAULT_FORMATS, RENDERERS


def parse_formats(text: str) -> tuple[str, ...]:
    """``"html,pdf"`` -> ``("html", "pdf")``, refusing unknown names."""
    names = tuple(dict.fromkeys(part.strip().lower() for part in text.split(",") if part.strip()))
    unknown = [name for name in names if name not in RENDERERS]
    if unknown or not names:
        label = ", ".join(unknown) if unknown else repr(text)
        raise argparse.ArgumentTypeError(
            f"unknown format {label}; choose from {', '.join(RENDERERS)}")
    return names


def _add_report_options(parser: argparse.ArgumentParser) -> None:
    """Options shared by every subcommand that writes a report."""
    parser.add_argument("--out", type=Path, default=Path("profreport-out"),
                        help="folder for the report files (default: %(default)s)")
    parser.add_argument("--format", dest="formats", type=parse_formats,
                        default=DEFAULT_FORMATS, metavar="LIST",
                        help=f"comma-separated: {','.join(RENDERERS)} "
                             f"(default: {','.join(DEFAULT_FORMATS)})")
    parser.add_argument("--title", help="title of the report")
    parser.add_argument("--baseline", metavar="NAME",
                        help="run to compare the others against (default: the first)")
    parser.add_argument("--open", action="store_true",
                        help="open the HTML report in a browser when a display exists")


#: The subcommand whose options come from the runner (imported only when it is asked for).
RUN_COMMAND = "run-and-report"


def _add_executor_options(parser: argparse.ArgumentParser) -> None:
    """Where the per-rank parsing runs: local processes, or Dask (the ``dask`` extra)."""
    group = parser.add_argument_group(
        "parallel reading", "The files of a run (one per rank) are read and reduced in parallel: "
        "in local processes by default, or by Dask workers (pip install 'profreport[dask]'); "
        "Dask workers read the files themselves, so they must see the same paths.")
    group.add_argument("--processes", type=positive_int, metavar="N",
                       help="local worker processes (default: the CPUs available)")
    group.add_argument("--scheduler", metavar="ADDRESS",
                       help="tcp://HOST:PORT of a running Dask scheduler, or 'slurm' to start "
                            "Dask workers as Slurm jobs (dask-jobqueue)")
    group.add_argument("--slurm-jobs", type=positive_int, default=1, metavar="N",
                       help="Slurm jobs to start, one Dask worker each (default: %(default)s)")
    group.add_argument("--slurm-queue", metavar="PARTITION", help="Slurm partition")
    group.add_argument("--slurm-account", metavar="ACCOUNT", help="Slurm account")
    group.add_argument("--slurm-walltime", default="01:00:00", metavar="HH:MM:SS",
                       help="time limit of each job (default: %(default)s)")
    group.add_argument("--slurm-cores", type=positive_int, default=1, metavar="N",
                       help="cores per job (default: %(default)s)")
    group.add_argument("--slurm-memory", default="8GB", metavar="SIZE",
                       help="memory per job (default: %(default)s)")


def build_parser(run_options: bool = True) -> argparse.ArgumentParser:
    """The argument parser for every subcommand; ``run_options=False`` leaves run-and-report's
    own options out, which spares ``--help`` and ``analyze`` importing the runner."""
    parser = argparse.ArgumentParser(
        prog="profreport",
        description="Tells you why your PyTorch training is slow: runs and reads kernprof, "
                    "torch.profiler and Nsight Systems, and writes one report comparing runs.")
    parser.add_argument("--version", action="version", version=f"profreport {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    analyze = sub.add_parser(
        "analyze", help="analyse existing profiles (.nsys-rep, .sqlite, .lprof, trace .json[.gz])",
        description="Analyse existing profiles. Each INPUT is one run: a profile file, or a "
                    "folder holding several profiles of the same training (and optionally the "
                    "manifest.json that run-and-report writes). Writes the report to --out.")
    analyze.add_argument("inputs", nargs="+", type=Path, metavar="INPUT")
    analyze.add_argument("--source-root", type=Path,
                         help="folder to look for line_profiler source files in")
    analyze.add_argument("--cache-dir", type=Path,
                         help="where nsys exports are cached (default: ~/.cache/profreport)")
    analyze.add_argument("--nsys", type=Path, metavar="PATH",
                         help="the nsys that exports .nsys-rep reports (default: the newest "
                              "found: on PATH or unpacked by scripts/nsys_newer_export.sh)")
    _add_report_options(analyze)
    _add_executor_options(analyze)

    run = sub.add_parser(
        RUN_COMMAND,
        help="run training variants under kernprof, torch.profiler and nsys, then report",
        description="Run a built-in workload (or --script) in several variants, each under "
                    "kernprof, torch.profiler and nsys plus one plain timed run, then write one "
                    "report comparing them. With no arguments: the MNIST workload on this "
                    "machine's CPU or GPU.")
    if run_options:
        from profreport.runner.options import add_run_arguments

        add_run_arguments(run)
    _add_report_options(run)

    grade = sub.add_parser(
        "grade", help="grade a class's submitted profiles against a rubric",
        description="Grade a folder of student submissions (one folder or .zip/.tar.gz/.tgz "
                    "archive per student; each subfolder is one run) against a TOML rubric. "
                    "Writes gradebook.csv, gradebook.json, summary.html and "
                    "students/NAME/report.html + feedback.md to --out. Without --run nothing "
                    "from a submission is executed; with --run the grader runs each "
                    "submission's script itself, in a sandbox.")
    grade.add_argument("submissions", type=Path, nargs="?", metavar="SUBMISSIONS")
    grade.add_argument("--rubric", type=Path, metavar="RUBRIC.toml",
                       help="the rubric (required to grade)")
    grade.add_argument("--example-rubric", action="store_true",
                       help="print a commented example rubric to start from, and exit")
    grade.add_argument("--out", type=Path, default=Path("grades"),
                       help="folder for the gradebook and the students' pages "
                            "(default: %(default)s)")
    grade.add_argument("--lms", choices=("canvas", "moodle"),
                       help="also write the totals as a CSV this LMS imports")
    grade.add_argument("--processes", type=positive_int, default=os.cpu_count() or 1,
                       metavar="N", help="submissions graded at once, each in a local worker "
                                         "process (default: the CPU count, %(default)s)")
    grade.add_argument("--jobs", type=positive_int, dest="processes", action=DeprecatedAlias,
                       replacement="--processes", metavar="N",
                       help="deprecated name of --processes")
    grade.add_argument("--roster", type=Path, metavar="ROSTER.csv",
                       help="CSV of student (folder or archive name), name, id, sis_user_id, "
                            "login, section: the LMS identities --lms writes")
    grade.add_argument("--overrides", type=Path, metavar="OVERRIDES.csv",
                       help="CSV of student, check, points, comment: the teacher's changes, "
                            "applied on every regrade (default: OUT/overrides.csv when present)")
    grade.add_argument("--anonymous", action="store_true",
                       help="students appear under codes (anon-1a2b3c4d) in every page and "
                            "gradebook; OUT/anonymous-key.csv maps them back, and the --lms "
                            "file uses the real identities")
    grade.add_argument("--run", action="store_true",
                       help="run each submission's script (the rubric's [run] table) in the "
                            "sandbox, beside the reference, and grade what the grader measured")
    grade.add_argument("--slurm", action="store_true",
                       help="with --run: run the submissions as one Slurm job array and wait "
                            "for it")
    return parser


def _dispatch(args: argparse.Namespace) -> int:
    """Run the chosen subcommand and return its exit status."""
    if args.command == "analyze":
        from profreport.commands import analyze_command

        return analyze_command(args)
    if args.command == RUN_COMMAND:
        from profreport.commands import run_and_report_command

        return run_and_report_command(args)
    if args.command == "grade":
        from profreport.commands import grade_command

        return grade_command(args)
    raise UsageError("no command given; try 'profreport --help'")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: every ProfreportError becomes one line on stderr and its exit code."""
    words = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(run_options=RUN_COMMAND in words).parse_args(words)
    tune_for_large_arrays()
    try:
        return _dispatch(args)
    except ProfreportError as exc:
        print(f"profreport: error: {exc.one_line()}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("profreport: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # stdout's reader left (`| head`): stop quietly, as a shell tool does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left to flush
        return EXIT_BROKEN_PIPE
