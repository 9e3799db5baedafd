"""Units are written only in core/units.py: a scan of the source for the ways a time, a size or a
share gets formatted by hand (dividing by a literal scale, an f-string that converts a value and
writes its unit, a binary scale picked inline), and the figures the units give."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np
import pytest

from profreport import units
from profreport.reports.analysis.findings import Study, study_findings
from profreport.reports.analysis.results import ScalingPoint

REPO = Path(__file__).resolve().parents[1]
#: The package's source folders; core/units.py is the one place allowed to format units.
FOLDERS = ("core", "parsers", "reports", "runner")
UNITS_FILE = REPO / "core" / "units.py"
#: Scale factors between display units (decimal and binary).
SCALES = {10**3, 10**6, 10**9, 2**10, 2**20, 2**30}
#: A unit written right after a formatted value.
UNIT_AFTER = re.compile(r"\s?(ns|µs|us|ms|s|KiB|MiB|GiB|TiB|kB|KB|MB|GB|TB|%)(?!\w)")


def _number(node: ast.AST) -> float | None:
    """The value of a literal number, ``2**20`` or ``1 << 20``; None for anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float) \
            and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow | ast.LShift):
        left, right = _number(node.left), _number(node.right)
        if left is not None and right is not None:
            return left ** right if isinstance(node.op, ast.Pow) else int(left) << int(right)
    return None


def _is_scale(node: ast.AST) -> bool:
    """A literal scale factor (1e6, 1_000_000, 2**20, 1 << 30...)."""
    value = _number(node)
    return value is not None and value in SCALES


def _converts(expr: ast.AST) -> bool:
    """Whether a formatted expression turns a raw figure into a unit: arithmetic on it, or a
    nanosecond or byte count written as it is."""
    for node in ast.walk(expr):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div | ast.FloorDiv | ast.Mult):
            return True
        name = node.id if isinstance(node, ast.Name) else (
            node.attr if isinstance(node, ast.Attribute) else "")
        if name == "ns" or name.endswith(("_ns", "bytes")):
            return True
    return False


def violations(source: str) -> list[str]:
    """Each place in ``source`` that formats a unit by hand, as 'line: what'."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div | ast.FloorDiv) \
                and _is_scale(node.right):
            found.append(f"{node.lineno}: divides by a literal scale (use units' NS_PER_*, MIB...)")
        elif isinstance(node, ast.Compare | ast.Tuple | ast.Return) and any(
                _is_scale(child) and not isinstance(child, ast.Constant)
                for child in ast.iter_child_nodes(node)):
            found.append(f"{node.lineno}: picks a binary unit inline (use units.binary_unit)")
        elif isinstance(node, ast.JoinedStr):
            for value, after in zip(node.values, node.values[1:], strict=False):
                if isinstance(value, ast.FormattedValue) and isinstance(after, ast.Constant) \
                        and UNIT_AFTER.match(str(after.value)) and _converts(value.value):
                    found.append(f"{node.lineno}: formats a unit in an f-string "
                                 f"(...{after.value[:12]!r})")
    return found


def source_files() -> list[Path]:
    """Every module of the package but core/units.py."""
    return [path for folder in FOLDERS for path in sorted((REPO / folder).rglob("*.py"))
            if path != UNITS_FILE]


def test_units_are_formatted_only_in_units_py() -> None:
    files = source_files()
    assert len(files) > 50
    wrong = [f"{path.relative_to(REPO)}:{line}" for path in files
             for line in violations(path.read_text(encoding="utf-8"))]
    assert wrong == []


@pytest.mark.parametrize("source", [
    # scaling.py's own formatter, which printed 36 µs of communication as "0.0 ms"
    'def _ms(ns):\n    return f"{ns / 1e6:.1f} ms"\n',
    # memory.py's sizes
    'def _size(nbytes):\n    return f"{nbytes / 1e9:.2f} GB ({nbytes / 2**30:.2f} GiB)"\n',
    # charts.py's memory axis
    'def unit(highest):\n    return ("GiB", 2**30) if highest >= 2**30 else ("MiB", 2**20)\n',
    # a threshold in µs written by hand, a share in percent
    'x = f"shorter than {launch.short_kernel_ns // 1000} µs"\n',
    'x = f"{efficiency * 100:.0f}% of ideal"\n',
    'x = f"{m.gpu.busy_ns} ms"\n',
])
def test_the_scan_catches_units_formatted_by_hand(source: str) -> None:
    assert violations(source)


@pytest.mark.parametrize("source", [
    'LIMIT = 64 * 2**20\n', 'x = f"{DDP_DEFAULT_BUCKET_MB} MB"\n', 'x = f"{count} steps"\n',
    'x = f"{ms(ns)} per step"\n', 'n = us * 1000\n', 'b = gb * (1 << 30)\n',
])
def test_the_scan_leaves_what_is_not_a_unit_formatted_by_hand(source: str) -> None:
    assert violations(source) == []


def test_units_of_sentences_tables_and_sizes() -> None:
    assert units.ms(36_000) == "36.0 µs" and units.ms(2_500_000) == "2.5 ms"
    assert units.ms(12_300_000_000) == "12.3 s"
    assert units.whole_us(10_000) == "10 µs" and units.whole_pct(0.873) == "87%"
    assert units.ms_value(1_234_567) == 1.235
    assert units.delta_ms(-3_100_000) == "-3.1 ms" and units.delta_ms(250_000) == "+0.25 ms"
    assert units.memory_size(34_089_730_048) == "34.09 GB (31.75 GiB)"
    assert units.memory_size(5 * 2**20) == "5.2 MB (5.0 MiB)"
    assert units.binary_unit(3 * 2**30) == ("GiB", 2**30)
    assert units.binary_unit(2**29) == ("MiB", 2**20)


def _point(processes: int, throughput: float, step_ns: int, comm_ns: int,
           exposed_ns: int) -> ScalingPoint:
    """A scaling point with its step and communication per step, both torch.profiler's (ideal:
    100 samples/s per process)."""
    return ScalingPoint(run=f"np{processes}", processes=processes, throughput=throughput,
                        ideal=100.0 * processes, efficiency=throughput / (100.0 * processes),
                        loader_alone=None, synthetic=None, step_ns=step_ns,
                        comm_ns_per_step=comm_ns, comm_exposed_ns_per_step=exposed_ns,
                        rank_imbalance=None, profile_origin="kineto", comm_origin="kineto",
                        comm_step_ns=step_ns)


def test_scaling_evidence_gives_microseconds_not_zero_ms() -> None:
    """Scaling's communication figures go through units.ms: 36 µs per step is '36.0 µs' (its own
    formatter printed '0.0 ms')."""
    points = [_point(1, 100.0, 10_000_000, 10_000, 1_000),
              _point(2, 120.0, 10_050_000, 36_000, 36_000)]
    finding = study_findings(Study(points, "samples/s", "weak"))[0]
    text = " ".join(evidence.text for evidence in finding.evidence)
    assert finding.id == "SCALING_EFFICIENCY"
    assert "2 proc: 36.0 µs (36.0 µs exposed)" in text, text
    assert "grew by 35.0 µs of the 50.0 µs each step lost" in text, text
    assert "0.0 ms" not in text


def test_a_share_that_rounds_to_zero_keeps_a_significant_digit() -> None:
    """A peak of 0.4% of the device read 'Memory peaks at only 0% of the device': a share that
    is not 0 never reads 0 in any of the percentage helpers; 0 itself still reads 0."""
    from profreport.units import pct, percent, whole_pct

    assert [whole_pct(0.004), pct(0.0004), percent(0.00004)] == ["0.4%", "0.04%", "0.004%"]
    assert [whole_pct(0.000996), percent(-0.0004)] == ["0.1%", "-0.04%"]
    assert [whole_pct(0.0), pct(0.0), percent(0.0)] == ["0%", "0.0%", "0.0%"]
    assert [whole_pct(0.873), pct(0.05), percent(0.873)] == ["87%", "5.0%", "87.3%"]


def test_integer_ns_round_half_up_exactly() -> None:
    """118_050_000 ns is exactly 118.05 ms: it reads 118.1 ms in sentences, tables and
    changes (the binary float 118.05 lies below it and rounded to '118.0 ms'); numpy integers
    alike, and a half below a unit rounds up in µs and s too."""
    assert units.ms(118_050_000) == "118.1 ms" == units.duration(np.int64(118_050_000))
    assert units.delta_ms(-118_050_000) == "-118.1 ms"
    assert units.ms(50_050) == "50.1 µs" and units.duration(12_345_005_000_000) == "12,345.01 s"
