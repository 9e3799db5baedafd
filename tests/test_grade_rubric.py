"""Rubrics: every key declared, bad ones refused with the line they came from."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from profreport.errors import RubricError
from profreport.grade.rubric import parse_rubric
from profreport.reports.analysis import findings

BASE = """\
[assignment]
name = "t"

[[check]]
id = "one"
points = 1
require = ["any"]

[[check]]
id = "two"
points = 2
"""
PATH = Path("r.toml")


def error_of(text: str) -> str:
    """The one-line error of a rubric text."""
    with pytest.raises(RubricError) as caught:
        parse_rubric(text, PATH)
    return caught.value.one_line()


def test_valid_rubric_reads_every_kind() -> None:
    rubric = parse_rubric(BASE + 'run = "opt"\nexpect_finding = "PAGEABLE_MEMCPY"\n'
                          '\n[[check]]\nid = "three"\npoints = 3\nmetric = "step_time_ms.mean"\n'
                          'run = "opt"\nmax = 100\npartial_from = 200\n', PATH)
    assert [(c.id, c.kind, c.target) for c in rubric.checks] == [
        ("one", "require", ["any"]), ("two", "expect_finding", "PAGEABLE_MEMCPY"),
        ("three", "metric", "step_time_ms.mean")]
    assert rubric.max_total == 6 and rubric.name == "t"


@pytest.mark.parametrize("finding_id", ["MEMORY_GROWTH", "SCALING_EFFICIENCY", "DATA_STALLS",
                                        "SOURCES_DISAGREE"])
def test_every_finding_the_analysis_emits_may_be_named(finding_id: str) -> None:
    """Memory, scaling, start-up and second ids of a rule are findings a rubric may expect."""
    rubric = parse_rubric(BASE + f'run = "opt"\nexpect_no_finding = "{finding_id}"\n', PATH)
    assert rubric.checks[1].target == finding_id


@pytest.mark.parametrize(("extra", "message"), [
    ('run = "o"\nexpect_verdict = "slow"\n',
     "r.toml:13: expect_verdict = 'slow': expected one (or a list) of loader-bound"),
    ('run = "o"\nexpect_verdict = ["balanced", "slow"]\n',
     "r.toml:13: expect_verdict = ['balanced', 'slow']: expected one (or a list)"),
    ('run = "o"\nexpect_finding = "PAGEABLE_COPY"\n',
     "r.toml:13: expect_finding = 'PAGEABLE_COPY': expected a finding id"),
    ('run = "o"\nmetric = "gpu_bussy"\nmin = 1\n', "r.toml:13: metric = 'gpu_bussy'"),
    ('run = "o"\nexpect_verdict = "balanced"\ncolour = "red"\n',
     "r.toml:14: unknown key 'colour' in [check]"),
    ('expect_verdict = "balanced"\n', "r.toml:9: a expect_verdict check needs run"),
    ('run = "o"\nmetric = "gpu_busy_fraction"\n', "r.toml:9: a metric check needs min, max"),
    ('metric = "speedup"\nbaseline = "a"\ncandidate = "b"\nmin = 1.2\nrun = "x"\n',
     "r.toml:16: 'run' does not apply to a speedup check"),
    ('metric = "speedup"\nbaseline = "a"\ncandidate = "b"\nmin = 1.2\npartial_from = 1.5\n',
     "r.toml:16: partial_from = 1.5 must lie below min = 1.2"),
    ('run = "o"\nexpect_verdict = "balanced"\nexpect_finding = "TRIALS"\n',
     "r.toml:9: check 'two' needs exactly one of"),
])
def test_bad_check_names_its_line(extra: str, message: str) -> None:
    assert error_of(BASE + extra).startswith(message)


def test_other_rubric_errors() -> None:
    assert error_of(BASE.replace('points = 2', 'points = 0') + 'require = ["any"]\n'
                    ).startswith("r.toml:11: points = 0: expected a number above 0")
    assert error_of(BASE.replace('id = "two"', 'id = "one"') + 'require = ["any"]\n'
                    ).startswith("r.toml:10: two checks have the id 'one'")
    assert error_of("[assignment]\nname = 't'\nweight = 2\n").startswith(
        "r.toml:3: unknown key 'weight' in [assignment]")
    assert error_of("[grading]\n").startswith("r.toml:1: unknown table or key 'grading'")
    assert error_of("[assignment]\nname = 't'\n") == "r.toml: no [[check]] tables: nothing to grade"
    assert error_of("x = [\n").startswith("r.toml: not valid TOML")


def test_finding_ids_match_the_rules() -> None:
    """The rubric's ids are every id a rule's source emits, memory and scaling ones included."""
    emitted = set()
    for theme in findings.THEMES:
        source = Path(theme.__file__).read_text()
        emitted |= set(re.findall(r'Finding\(\s*(?:id=)?"([A-Z][A-Z0-9_]+)"', source))
    assert emitted == findings.FINDING_IDS
    assert {"MEMORY_GROWTH", "SCALING_EFFICIENCY", "STARTUP", "TRIALS"} <= emitted


def test_readme_rubric_is_valid() -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Grading a class", 1)[1].split("\n## ", 1)[0]
    text = re.search(r"```toml\n(\[assignment\].+?)\n```", section, re.S).group(1)
    rubric = parse_rubric(text, PATH)
    assert [c.id for c in rubric.checks] == ["profiled", "loader-fixed", "pinned", "speedup",
                                             "gpu-busy"]
    assert rubric.max_total == 13
