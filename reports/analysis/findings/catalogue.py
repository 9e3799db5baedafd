"""The catalogue of findings: every rule registered once, with the ids it emits, its severities,
what it needs and a one-line doc.

A rule is one function ``Facts -> Finding | None`` in a themed module of this package, registered
with :func:`rule`. The finding ids a grading rubric may name, the severity order of a run's
findings and the README's table of findings all come from :data:`RULES`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal

from profreport.reports.analysis.findings.context import RunContext
from profreport.reports.analysis.results import Finding, RunMetrics, ScalingPoint, Severity

#: Most severe first: the order of a run's findings (after the one explaining its verdict).
SEVERITIES: tuple[Severity, ...] = ("high", "medium", "low", "info")

#: What a rule reads.
Need = Literal["profiles", "manifest", "memory", "study"]
#: Each need in words (the README's table of findings).
NEEDS: dict[Need, str] = {
    "profiles": "profiles",
    "manifest": "manifest",
    "memory": "memory events",
    "study": "runs at several world sizes",
}


@dataclass(frozen=True)
class Study:
    """One scaling study: its points (first is the reference), throughput unit and mode."""

    points: list[ScalingPoint]
    unit: str
    mode: str


@dataclass(frozen=True)
class Facts:
    """What every rule is given: a run's metrics and context, or a scaling study."""

    metrics: RunMetrics = field(default_factory=RunMetrics)
    context: RunContext = field(default_factory=RunContext)
    study: Study | None = None


Check = Callable[[Facts], "Finding | None"]


@dataclass(frozen=True)
class Rule:
    """One registered rule: every id it can emit, its severities, what it needs, its doc."""

    ids: tuple[str, ...]
    severities: tuple[Severity, ...]
    needs: tuple[Need, ...]
    doc: str
    check: Check

    @property
    def theme(self) -> str:
        """The themed module the rule lives in (``loader``, ``memory``...)."""
        return self.check.__module__.rsplit(".", 1)[-1]

    @property
    def on_study(self) -> bool:
        """Whether the rule judges a scaling study rather than one run."""
        return "study" in self.needs


#: Every rule, in the order the themed modules register them.
RULES: list[Rule] = []


def _summary(check: Check) -> str:
    """The first paragraph of a rule's docstring, on one line."""
    paragraph = (check.__doc__ or "").strip().split("\n\n", 1)[0]
    return " ".join(paragraph.split())


def rule(*ids: str, severity: tuple[Severity, ...],
         needs: tuple[Need, ...] = ("profiles",)) -> Callable[[Check], Check]:
    """Register the decorated function as the rule emitting ``ids``."""
    def register(check: Check) -> Check:
        RULES.append(Rule(ids, severity, needs, _summary(check), check))
        return check
    return register


def finding_ids() -> frozenset[str]:
    """Every id a rule can emit."""
    return frozenset(finding_id for r in RULES for finding_id in r.ids)


def _fired(facts: Facts, on_study: bool) -> list[Finding]:
    """The findings of every rule of one kind that fires on ``facts``."""
    found = []
    for r in RULES:
        if r.on_study != on_study:
            continue
        finding = r.check(facts)
        if finding is not None:
            if finding.id not in r.ids or finding.severity not in r.severities:
                raise ValueError(f"{r.check.__name__} emitted {finding.id} ({finding.severity}), "
                                 f"which its registration does not declare")
            found.append(finding)
    return found


def by_severity(found: Iterable[Finding], lead: str | None = None) -> list[Finding]:
    """``found`` with ``lead`` first, then most severe first (then by id, a stable order)."""
    return sorted(found, key=lambda f: (f.id != lead, SEVERITIES.index(f.severity), f.id))


def run_findings(facts: Facts, lead: str | None = None) -> list[Finding]:
    """Every run rule that fires, ``lead`` (the finding explaining the verdict) first."""
    return by_severity(_fired(facts, on_study=False), lead)


def study_findings(study: Study) -> list[Finding]:
    """Every scaling rule that fires on ``study``, most severe first."""
    return by_severity(_fired(Facts(study=study), on_study=True))
