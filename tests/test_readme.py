"""The README documents what the code does: every threshold with its value, every finding id.

The README's table of findings is made from the registry: after adding a rule, rewrite it with
``.venv/bin/python tests/test_readme.py --update-findings-table`` and review ``git diff README.md``.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from profreport.reports.analysis import compare, dataloader, findings, gpu, job, metrics, scaling

README_PATH = Path(__file__).resolve().parents[1] / "README.md"
README = README_PATH.read_text(encoding="utf-8")
#: The README's table of findings: its header and every row after it.
FINDINGS_TABLE = re.compile(
    r"\| id \| severity \| theme \| needs \| what it finds \|\n(?:\|.*\|\n)+")


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


#: Modules holding thresholds, with how many each holds at least (a test of the scan itself).
THRESHOLD_MODULES = [(gpu, 3), (compare, 2), (scaling, 1), (job, 1), (metrics, 2),
                     (dataloader, 2)] + [
    (theme, 1) for theme in findings.THEMES if theme.__name__.rsplit(".", 1)[-1] != "startup"]


@pytest.mark.parametrize(("module", "least"), THRESHOLD_MODULES,
                         ids=[module.__name__.split("analysis.", 1)[1]
                              for module, _ in THRESHOLD_MODULES])
def test_every_threshold_is_in_the_readme_with_its_value(module: object, least: int) -> None:
    constants = documented_constants(module)
    assert len(constants) >= least
    for name, value in constants:
        assert f"| `{name}` | `{value}` |" in README, f"README lacks {name} = {value}"


def findings_table() -> str:
    """The README's table of findings, made from the registry: one row per finding id."""
    rows = ["| id | severity | theme | needs | what it finds |", "|---|---|---|---|---|"]
    order = {theme.__name__.rsplit(".", 1)[-1]: i for i, theme in enumerate(findings.THEMES)}
    for rule in sorted(findings.RULES, key=lambda r: order[r.theme]):  # stable: in-module order
        needs = ", ".join(findings.catalogue.NEEDS[need] for need in rule.needs)
        doc = rule.doc.replace("``", "`")
        rows += [f"| `{finding_id}` | {' / '.join(rule.severities)} | {rule.theme} | {needs} | "
                 f"{doc} |" for finding_id in rule.ids]
    return "\n".join(rows)


def test_the_readme_table_of_findings_is_the_registry() -> None:
    """Every finding id the analysis can emit is in the README's table, as registered (a new
    rule fails this test until the table is rewritten: see the module's docstring)."""
    table = findings_table()
    assert len(findings.FINDING_IDS) >= 29
    assert FINDINGS_TABLE.search(README) is not None
    assert table + "\n" in README, ("README's table of findings is not the registry's: run "
                                    "`.venv/bin/python tests/test_readme.py "
                                    "--update-findings-table`")


def test_quick_start_is_two_commands_and_ci_runs_the_readme_test_command() -> None:
    quick = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"```bash\n(.+?)\n```", quick, re.S)
    assert commands == ["bash scripts/setup.sh && .venv/bin/profreport run-and-report",
                        ".venv/bin/python -m pytest"]
    ci = (Path(__file__).resolve().parents[1] / ".ci" / "run").read_text()
    assert commands[1] in ci and "scripts/setup.sh" in ci


def update_findings_table() -> bool:
    """Rewrite the README's table of findings from the registry; whether it changed."""
    text = FINDINGS_TABLE.sub(lambda _: findings_table() + "\n", README, count=1)
    README_PATH.write_text(text, encoding="utf-8")
    return text != README


if __name__ == "__main__":
    import sys

    if sys.argv[1:] != ["--update-findings-table"]:
        sys.exit("usage: tests/test_readme.py --update-findings-table")
    print("README.md: findings table " + ("rewritten" if update_findings_table() else
                                          "unchanged"))
