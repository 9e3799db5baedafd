"""Verdicts and findings on real profiles: the corpus and real kernprof runs of tiny loops."""

from __future__ import annotations

from pathlib import Path

import pytest

from profreport.parsers import parse_file
from profreport.reports.findings import RunContext, find_all, verdict
from profreport.reports.metrics import compute_run_metrics
from profreport.reports.results import RunMetrics

# A training loop whose loader sleeps per batch while the step itself is light.
LOADER_HEAVY = """\
import time


class Loader:
    def __iter__(self):
        for index in range(20):
            time.sleep(0.005)
            yield index


@profile
def train(train_loader):
    total = 0
    for batch in train_loader:
        total += batch * 2
    return total


train(Loader())
"""

# The same loop with an instant loader and a heavy step.
COMPUTE_HEAVY = """\
class Loader:
    def __iter__(self):
        yield from range(20)


@profile
def train(train_loader):
    total = 0
    for batch in train_loader:
        total += sum(k * k for k in range(30000))
    return total


train(Loader())
"""


def metrics_of(path: Path) -> RunMetrics:
    """Parse one file and compute its metrics."""
    return compute_run_metrics([parse_file(path)])


def ids(metrics: RunMetrics, ctx: RunContext | None = None) -> dict[str, object]:
    """The findings that fire, by id."""
    return {f.id: f for f in find_all(metrics, ctx or RunContext())}


def test_sc22_1gpu_is_loader_bound(corpus: Path, nsys_available: str) -> None:
    """The tutorial's dataloader-bound run: LOADER_BOUND and LOW_GPU_UTIL, both from nsys."""
    m = metrics_of(corpus / "nsys" / "sc22_1gpu_baseline.nsys-rep")
    name, reason = verdict(m)
    assert name == "loader-bound" and "88%" in reason
    found = ids(m)
    assert {"LOADER_BOUND", "LOW_GPU_UTIL"} <= set(found)
    assert found["LOADER_BOUND"].severity == "high"
    assert any("28 idle gaps" in e.text and e.origin == "nsys"
               for e in found["LOADER_BOUND"].evidence)
    assert "COMM_OVERHEAD" not in found and "HOST_LAUNCH_BOUND" not in found


def test_sc22_4gpu_comm_overlap_reported(corpus: Path, nsys_available: str) -> None:
    """DDP rank 0: compute-bound; COMM_OVERHEAD says 97% of NCCL time overlaps compute."""
    m = metrics_of(corpus / "nsys" / "sc22_4gpu_baseline.nsys-rep")
    assert verdict(m)[0] == "compute-bound"
    comm = ids(m, RunContext(knobs={"bucket_cap_mb": 25.0}))["COMM_OVERHEAD"]
    assert comm.severity == "low" and "97% of it overlaps compute" in comm.title
    assert any("8 calls per step" in e.text for e in comm.evidence)
    assert "bucket_cap_mb from 25 MB" in comm.recommendation


def test_resnet50_workers(corpus: Path) -> None:
    """num_workers=0 is loader-bound; with 4 workers it is not, and pageable H2D is flagged."""
    w0 = metrics_of(corpus / "kineto" / "resnet50_num_workers_0.pt.trace.json.gz")
    w4 = metrics_of(corpus / "kineto" / "resnet50_num_workers_4.pt.trace.json.gz")
    assert verdict(w0)[0] == "loader-bound"
    assert verdict(w4)[0] not in ("loader-bound", "unknown")
    loader = ids(w0, RunContext(knobs={"num_workers": 0}, environment={"cpus": 8}))
    assert "Raise DataLoader num_workers from 0 to 7" in loader["LOADER_BOUND"].recommendation
    assert "--cpus-per-task=8" in loader["LOADER_BOUND"].recommendation
    assert "LOADER_BOUND" not in ids(w4)
    assert "pin_memory=True" in ids(w4)["PAGEABLE_MEMCPY"].recommendation


def test_hta_trace_is_diagnosed(corpus: Path) -> None:
    """The HTA trace has steps and a GPU: a real verdict, not unknown."""
    m = metrics_of(corpus / "hta" / "nccl_data.json.gz")
    assert verdict(m)[0] != "unknown"


def test_lprof_loader_heavy_is_loader_bound(make_lprof) -> None:
    """A real kernprof run of a sleeping loader: the loop line holds most of the time."""
    m = metrics_of(make_lprof("loader_heavy", LOADER_HEAVY))
    assert m.steps is not None and m.steps.origin == "lprof" and m.steps.count >= 20
    assert m.dataloader_fraction > 0.8
    assert verdict(m)[0] == "loader-bound"
    assert m.lines[0].is_dataloader_loop


def test_lprof_compute_heavy_is_not_loader_bound(make_lprof) -> None:
    """A real kernprof run of a heavy loop body with an instant loader: compute-bound."""
    m = metrics_of(make_lprof("compute_heavy", COMPUTE_HEAVY))
    assert m.dataloader_fraction < 0.1
    assert verdict(m)[0] == "compute-bound"
    assert "LOADER_BOUND" not in ids(m) and "COMPUTE_BOUND" in ids(m)


def test_no_steps_no_gpu_is_unknown() -> None:
    """Empty metrics give an unknown verdict with a reason, and no findings."""
    name, reason = verdict(RunMetrics())
    assert name == "unknown" and "no step markers" in reason
    assert find_all(RunMetrics(), RunContext()) == []


def test_dataparallel_knob_and_ops() -> None:
    """nn.DataParallel is flagged from its ops or the knob."""
    m = RunMetrics(dataparallel_ops={"BroadcastBackward": 3})
    finding = ids(m, RunContext(knobs={"dataparallel": True}))["DATAPARALLEL_NOT_DDP"]
    assert finding.severity == "high" and len(finding.evidence) == 2
    assert "DistributedDataParallel" in finding.recommendation
    assert "DATAPARALLEL_NOT_DDP" not in ids(RunMetrics())


@pytest.mark.parametrize("fractions, expected", [({"nsys": 0.88, "lprof": 0.84}, "SOURCES_AGREE"),
                                                 ({"kineto": 0.02, "lprof": 0.7},
                                                  "SOURCES_DISAGREE")])
def test_sources_agreement(fractions: dict[str, float], expected: str) -> None:
    """Two sources that measured the DataLoader share either agree or not."""
    assert expected in ids(RunMetrics(dataloader_fraction_by_origin=fractions))
