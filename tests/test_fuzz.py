"""Fuzz suite (issue #12): generated Kineto events, nsys rows and manifests with wrong types,
extreme values and deep nesting, each analysed beside a good trace.

The property, for every generated input: ``analyze`` returns a report in which the good trace is
a run, the bad input is either a run or exactly one failure line naming it, every fraction lies
in [0, 1], the JSON and Markdown renderers finish, nothing raises, and each call stays within a
generous time bound (a hang detector, not a speed target). The budget is fixed so CI can run it:
derandomized (the same examples every run), no example database, few examples per property.
"""

from __future__ import annotations

import json
import math
import re
import resource
import shutil
import sys
import time
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis", reason="the test extra installs hypothesis")
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from profreport.errors import InputError  # noqa: E402
from profreport.manifest import MANIFEST_SCHEMA, read_manifest  # noqa: E402
from profreport.reports.analysis.analyze import AnalyzeOptions, analyze_paths  # noqa: E402
from profreport.reports.render.json import render_json  # noqa: E402
from profreport.reports.render.markdown import render_markdown  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from conftest import TINY_TRACE, fractions, write_nsys_export  # noqa: E402

#: Examples per property: the three properties take ~30 s of CPU in all (2-core machine).
EXAMPLES = 20
#: One analysis of a tiny generated input never takes this long unless something hangs.
CALL_BOUND_S = 30
#: Peak resident memory of the test process after the suite (the inputs are a few KB each).
PEAK_RSS_BOUND_MB = 3000
#: No shrinking: a failure is reported with the generated input as it was, within the budget.
FUZZ = settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None,
                phases=[Phase.explicit, Phase.generate],
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])

# --- hostile values --------------------------------------------------------------------------

EXTREME_INTS = st.sampled_from([0, -1, 1, 2**31, 2**53 + 1, 2**62, 2**63 - 1, 2**63, -(2**63),
                                2**64, 2**64 + 1, 10**30, -(10**30)])
EXTREME_FLOATS = st.sampled_from([0.5, -0.0, 1e30, -1e30, 1e308, 5e-324, math.inf, -math.inf,
                                  math.nan])
HOSTILE_TEXT = st.sampled_from(["", "\x00", "\u202eevil", "<script>alert(1)</script>", "a" * 2000,
                                "ProfilerStep#1", "step 1", "nccl:all_reduce", "Memcpy HtoD",
                                "../../../../etc/passwd", "/proc/self/environ", "1e30", "NaN"])
SCALARS = st.one_of(EXTREME_INTS, st.integers(-(2**70), 2**70), EXTREME_FLOATS,
                    st.floats(allow_nan=True, allow_infinity=True), HOSTILE_TEXT,
                    st.text(max_size=12), st.none(), st.booleans())
JSON_VALUES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=8)


#: Stands for a list nested N deep; :func:`to_json` writes it as N brackets (neither json.dumps
#: nor hypothesis's printer could handle the nesting as a Python value).
NESTED = st.sampled_from(["@@NEST10@@", "@@NEST200@@", "@@NEST5000@@", "@@NEST1000000@@"])
_NEST_TOKEN = re.compile(r'"@@NEST(\d+)@@"')


def to_json(value: object) -> str:
    """``value`` as JSON text, each NESTED token replaced by its nesting."""
    return _NEST_TOKEN.sub(lambda m: "[" * int(m.group(1)) + "]" * int(m.group(1)),
                           json.dumps(value))
ANY_VALUE = st.one_of(SCALARS, JSON_VALUES, NESTED)


# --- the property ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The good trace analysed beside every generated input."""
    path = tmp_path_factory.mktemp("good") / "good.pt.trace.json"
    path.write_text(json.dumps(TINY_TRACE), encoding="utf-8")
    return path


def check_beside_good(bad: Path, good: Path) -> None:
    """The property of the suite, for one generated input ``bad``."""
    started = time.monotonic()
    report = analyze_paths([bad, good], AnalyzeOptions())
    data = json.loads(render_json(report))
    render_markdown(report)
    assert time.monotonic() - started < CALL_BOUND_S
    names = [run.name for run in report.runs]
    assert "good" in names
    assert len(report.failures) <= 1 if "bad" in names else len(report.failures) == 1
    assert all(line.startswith(f"{bad}") and len(line) < 1200 for line in report.failures), \
        report.failures
    assert all(0.0 <= value <= 1.0 for value in fractions(data)), fractions(data)


# --- Kineto ------------------------------------------------------------------------------------

KINETO_CATS = st.sampled_from(["kernel", "Kernel", "cpu_op", "Operator", "cuda_runtime",
                               "Runtime", "gpu_memcpy", "Memcpy", "user_annotation",
                               "gpu_user_annotation", "python_function", "cuda_sync", "ac2g",
                               "", "unknown"])
EVENT = st.fixed_dictionaries(
    {"ph": st.sampled_from(["X", "X", "X", "i", "s", "f", "B", "E", "M"]), "cat": KINETO_CATS,
     "name": st.one_of(HOSTILE_TEXT, ANY_VALUE)},
    optional={"pid": ANY_VALUE, "tid": ANY_VALUE,
              "ts": st.one_of(st.integers(0, 30_000), ANY_VALUE),
              "dur": st.one_of(st.integers(0, 10_000), ANY_VALUE),
              "args": st.one_of(st.fixed_dictionaries({}, optional={
                  "correlation": ANY_VALUE, "stream": ANY_VALUE, "device": ANY_VALUE,
                  "bytes": ANY_VALUE, "External id": ANY_VALUE}), ANY_VALUE)})
HEADER = st.fixed_dictionaries({}, optional={
    "distributedInfo": ANY_VALUE, "schemaVersion": ANY_VALUE, "deviceProperties": ANY_VALUE,
    "traceEvents": st.one_of(ANY_VALUE, st.just([]))})


@FUZZ
@given(events=st.lists(EVENT, max_size=12), header=HEADER, keep=st.booleans())
def test_fuzz_kineto(events: list[dict], header: dict, keep: bool, good: Path,
                     tmp_path_factory: pytest.TempPathFactory) -> None:
    """Generated events (alone, or mixed into the good trace's) and generated header fields."""
    base = list(TINY_TRACE["traceEvents"]) if keep else []
    document = {**TINY_TRACE, "traceEvents": base + events, **header}
    bad = tmp_path_factory.mktemp("kineto") / "bad.pt.trace.json"
    bad.write_text(to_json(document), encoding="utf-8")
    check_beside_good(bad, good)


# --- nsys --------------------------------------------------------------------------------------

#: SQLite stores integers of at most 64 bits: an export cannot hold larger ones.
INT64_INTS = EXTREME_INTS.filter(lambda value: -(2**63) <= value < 2**63)
NS_VALUE = st.one_of(st.integers(0, 50_000_000), INT64_INTS, EXTREME_FLOATS, HOSTILE_TEXT,
                     st.none())
KERNEL_ROW = st.tuples(NS_VALUE, NS_VALUE, st.one_of(st.integers(-5, 5), INT64_INTS),
                       HOSTILE_TEXT)
STEP_ROW = st.tuples(NS_VALUE, NS_VALUE, st.one_of(HOSTILE_TEXT, st.just("step 3")))


@FUZZ
@given(kernels=st.lists(KERNEL_ROW, max_size=8), steps=st.lists(STEP_ROW, max_size=4),
       runtime=st.lists(KERNEL_ROW, max_size=4))
def test_fuzz_nsys(kernels: list[tuple], steps: list[tuple], runtime: list[tuple], good: Path,
                   tmp_path_factory: pytest.TempPathFactory) -> None:
    """A hand-built SQLite export whose rows hold extreme, negative, real and text times."""
    ms = 1_000_000
    real = [(i * 10 * ms + 2 * ms, i * 10 * ms + 7 * ms, i, "gemm") for i in range(3)]
    bad = write_nsys_export(tmp_path_factory.mktemp("nsys") / "bad.sqlite", real + kernels,
                            [(i * 10 * ms, i * 10 * ms + 9 * ms, f"step {i}") for i in range(3)]
                            + steps, runtime)
    check_beside_good(bad, good)


# --- manifests ---------------------------------------------------------------------------------

MANIFEST_FIELDS = st.fixed_dictionaries({}, optional={
    "name": ANY_VALUE, "workload": ANY_VALUE, "knobs": st.one_of(ANY_VALUE, st.dictionaries(
        st.sampled_from(["num_workers", "amp", "nproc", "bucket_cap_mb", "x"]), ANY_VALUE)),
    "environment": ANY_VALUE, "launches": ANY_VALUE, "plain_step_ns": ANY_VALUE,
    "artifacts": st.one_of(ANY_VALUE, st.lists(st.fixed_dictionaries(
        {"path": st.one_of(HOSTILE_TEXT, ANY_VALUE, st.just("trace.pt.trace.json")),
         "profiler": ANY_VALUE}, optional={"rank": ANY_VALUE}), max_size=3)),
    "throughput_samples_per_s": ANY_VALUE, "trials": ANY_VALUE, "data_source": ANY_VALUE,
    "notes": ANY_VALUE, "extra": ANY_VALUE})


@FUZZ
@given(fields=MANIFEST_FIELDS)
def test_fuzz_manifest(fields: dict, good: Path,
                       tmp_path_factory: pytest.TempPathFactory) -> None:
    """A run folder (the good trace, renamed) whose manifest has generated fields."""
    folder = tmp_path_factory.mktemp("run") / "bad"
    folder.mkdir()
    shutil.copy(good, folder / "trace.pt.trace.json")
    manifest = folder / "manifest.json"
    manifest.write_text(to_json({"schema": MANIFEST_SCHEMA, "name": "bad", **fields}),
                        encoding="utf-8")
    try:
        read, problems = read_manifest(manifest)
    except InputError as exc:
        assert exc.one_line().startswith(str(manifest))
    else:
        assert isinstance(read.knobs, dict) and isinstance(read.notes, list)
        assert all(isinstance(note, str) for note in read.notes)
        assert all(isinstance(a.path, str) for a in read.artifacts)
        assert len(problems) <= 11
    started = time.monotonic()
    report = analyze_paths([folder, good], AnalyzeOptions())
    render_markdown(report)
    assert time.monotonic() - started < CALL_BOUND_S
    assert "good" in [run.name for run in report.runs]
    assert all(line.startswith(str(folder)) for line in report.failures), report.failures
    assert all(0.0 <= value <= 1.0 for value in fractions(json.loads(render_json(report))))


def test_fuzz_suite_memory_bound() -> None:
    """After the generated inputs, the process's peak resident memory stayed bounded."""
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    assert peak_mb < PEAK_RSS_BOUND_MB
