"""The README documents what the code does: every threshold with its value, every finding id."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from profreport.reports.analysis import compare, findings, gpu, job, memory, scaling

README = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")


def documented_constants(module: object) -> list[tuple[str, str]]:
    """Module-level constants with a ``#:`` comment (the thresholds), as (name, value text);
    lookup tables (dict literals, e.g. compare's part names) are vocabulary, not thresholds."""
    source = Path(module.__file__).read_text(encoding="utf-8")
    lines = source.splitlines()
    found = []
    for node in ast.parse(source).body:
        if (isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
                and re.fullmatch(r"[A-Z][A-Z0-9_]+", node.targets[0].id)
                and lines[node.lineno - 2].strip().startswith("#:")
                and not node.targets[0].id.startswith("TOP_")
                and not isinstance(node.value, ast.Dict)):
            found.append((node.targets[0].id, ast.get_source_segment(source, node.value)))
    return found


@pytest.mark.parametrize(("module", "least"), [(gpu, 3), (findings, 3), (compare, 2),
                                               (memory, 3), (scaling, 3), (job, 1)],
                         ids=["gpu", "findings", "compare", "memory", "scaling", "job"])
def test_every_threshold_is_in_the_readme_with_its_value(module: object, least: int) -> None:
    constants = documented_constants(module)
    assert len(constants) >= least
    for name, value in constants:
        assert f"| `{name}` | `{value}` |" in README, f"README lacks {name} = {value}"


def test_every_finding_id_is_in_the_readme() -> None:
    ids = set(re.findall(r'"([A-Z][A-Z_]+)"', Path(findings.__file__).read_text()))
    required = {"LOADER_BOUND", "COMPUTE_BOUND", "COMM_OVERHEAD", "HOST_LAUNCH_BOUND",
                "PAGEABLE_MEMCPY", "SYNC_STALL", "LOW_GPU_UTIL", "SMALL_BATCH",
                "DATAPARALLEL_NOT_DDP"}
    assert required <= ids
    for finding_id in ids & (required | {"SOURCES_AGREE", "SOURCES_DISAGREE"}):
        assert f"`{finding_id}`" in README


def test_quick_start_is_two_commands_and_ci_runs_the_readme_test_command() -> None:
    quick = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"```bash\n(.+?)\n```", quick, re.S)
    assert commands == ["bash scripts/setup.sh && .venv/bin/profreport run-and-report",
                        ".venv/bin/python -m pytest"]
    ci = (Path(__file__).resolve().parents[1] / ".ci" / "run").read_text()
    assert commands[1] in ci and "scripts/setup.sh" in ci
