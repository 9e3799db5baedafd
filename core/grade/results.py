"""What grading one submission produces: plain dataclasses, cached as JSON between runs."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

#: Version of the cached result and of gradebook.json (bump when a field changes meaning).
GRADEBOOK_SCHEMA = "profreport-gradebook/1"
Status = Literal["ok", "error"]


@dataclass(frozen=True)
class CheckResult:
    """One check of one student: points earned, what was measured, and what to try next."""

    id: str
    #: What the check asks, in words ("the optimized run is not loader-bound").
    asks: str
    points: float
    max_points: float
    passed: bool
    #: What was measured and from which profile, in a sentence a student can act on.
    measured: str
    #: Evidence lines behind the measurement (the verdict's or the finding's).
    evidence: list[str] = field(default_factory=list)
    #: What to try next (empty when the check passed).
    advice: str = ""


@dataclass(frozen=True)
class RunSummary:
    """One run of a submission as the feedback and the class summary show it."""

    name: str
    verdict: str
    verdict_reason: str
    #: (kind, path inside the submission) of each profile read.
    sources: list[tuple[str, str]]
    finding_ids: list[str]
    #: The run's own "what to change": its leading finding's recommendation.
    what_to_change: str
    #: Hash of what the profiler recorded about the run's timing (steps and their timestamps):
    #: equal for two submissions that hold the same profile, even re-compressed or renamed.
    timing_fingerprint: str | None
    #: Whether the run has line_profiler data whose source was not in the submission.
    source_missing: bool = False
    #: What the parsers left out of the run's files, and why (sources not shown, bad records).
    notes: list[str] = field(default_factory=list)


@dataclass
class StudentResult:
    """Everything grading one submission produced."""

    student: str
    status: Status
    error: str
    checks: list[CheckResult]
    runs: list[RunSummary] = field(default_factory=list)
    #: Entries of the submission that were not unpacked or copied, with the reason.
    refused: list[str] = field(default_factory=list)
    #: Profiles that could not be read, one line each.
    failures: list[str] = field(default_factory=list)
    content_hash: str = ""
    #: Path inside the submission -> SHA-256 of each profile file.
    profile_hashes: dict[str, str] = field(default_factory=dict)
    #: Whether this result came from the cache of an earlier run.
    reused: bool = False
    #: What intake decided (the newest of several submissions), and what ``--run`` measured.
    notes: list[str] = field(default_factory=list)
    #: Profile-only mode: signs of edited, made-up or unequally taken profiles, with evidence.
    flags: list[str] = field(default_factory=list)
    #: ``grade --run``: the speedup the grade used, with its spread over trials (None without).
    measured: dict[str, Any] | None = None

    #: Points taken for lateness (adjust.apply).
    penalty: float = 0.0

    @property
    def total(self) -> float:
        """Points earned over all checks, less the late penalty."""
        return max(round(sum(check.points for check in self.checks) - self.penalty, 3), 0.0)

    def to_json(self) -> dict[str, Any]:
        """Plain data for the cache and gradebook.json."""
        data = asdict(self)
        data["total"] = self.total
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StudentResult:
        """The result an earlier run cached."""
        data = dict(data)
        data.pop("total", None)
        data["checks"] = [CheckResult(**c) for c in data["checks"]]
        data["runs"] = [RunSummary(**{**r, "sources": [tuple(s) for s in r["sources"]]})
                        for r in data["runs"]]
        return cls(**data)
