"""Findings and the verdict: small rules, each one function of the facts of a run (or of a
scaling study), registered once in the catalogue (:mod:`.catalogue`).

The rules live in themed modules (loader, gpu, copies, compute, ops, comm, memory, scaling,
startup; the verdict and the TRIALS finding in :mod:`.verdicts`); importing this package imports
every one of them, so :data:`FINDING_IDS` and the rule list are complete. A new finding is one
function with its ``@rule(...)`` registration in one of these modules. The thresholds are named
constants beside the rules that use them; each comment says why the value is where it is.
"""

from __future__ import annotations

from profreport.reports.analysis.findings import (
    comm,
    compute,
    copies,
    gpu,
    loader,
    memory,
    ops,
    scaling,
    startup,
    verdicts,
)
from profreport.reports.analysis.findings.catalogue import (
    RULES,
    Facts,
    Rule,
    Study,
    finding_ids,
    run_findings,
    study_findings,
)
from profreport.reports.analysis.findings.context import CpuLoad, RunContext, cpu_load
from profreport.reports.analysis.findings.verdicts import (
    VERDICT_FINDINGS,
    find_all,
    profiler_verdict,
    trial_limit,
    verdict,
    verdict_confidence,
)

#: The themed modules, in the README table's order (each holds its rules and thresholds).
THEMES = (loader, gpu, copies, compute, ops, comm, memory, scaling, startup, verdicts)
#: Every id the analysis can emit: what a grading rubric may name.
FINDING_IDS = finding_ids()

__all__ = ["FINDING_IDS", "RULES", "THEMES", "VERDICT_FINDINGS", "CpuLoad", "Facts", "Rule",
           "RunContext", "Study", "cpu_load", "find_all", "profiler_verdict", "run_findings",
           "study_findings", "trial_limit", "verdict", "verdict_confidence"]
