"""Verdicts and findings on real profiles: the corpus and real kernprof runs of tiny loops."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from profreport.parsers import parse_file
from profreport.reports.analysis.findings import RunContext, find_all, verdict
from profreport.reports.analysis.findings.compute import LIGHT_LOADER_CORES
from profreport.reports.analysis.findings.verdicts import TRIAL_LIMIT_RATIO
from profreport.reports.analysis.metrics import compute_run_metrics
from profreport.reports.analysis.results import RunMetrics, TraceLocation

sys.path.insert(0, str(Path(__file__).parent))
from conftest import cpu_event, kineto_trace  # noqa: E402

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
    """DDP rank 0: compute-bound; COMM_OVERHEAD says 93% of NCCL time overlaps compute
    kernels."""
    m = metrics_of(corpus / "nsys" / "sc22_4gpu_baseline.nsys-rep")
    assert verdict(m)[0] == "compute-bound"
    comm = ids(m, RunContext(knobs={"bucket_cap_mb": 25.0}))["COMM_OVERHEAD"]
    assert comm.severity == "low" and "93% of it overlaps compute" in comm.title
    assert any("8 calls per step" in e.text for e in comm.evidence)
    assert "bucket_cap_mb from 25 MB" in comm.recommendation


def test_sc22_4gpu_advice_comes_from_the_kernels(corpus: Path, nsys_available: str) -> None:
    """Already fp16 (76% of kernel time) with a fused Adam: no AMP advice; the NCHW/NHWC
    conversions (19% of kernel time) make channels_last the first fix."""
    m = metrics_of(corpus / "nsys" / "sc22_4gpu_baseline.nsys-rep")
    finding = ids(m)["COMPUTE_BOUND"]
    texts = [e.text for e in finding.evidence]
    assert ("76% of compute-kernel time is in kernels named fp16/bf16 (kernel names only: the "
            "profiles record no input dtypes, and a name need not carry one)") in texts
    assert any("layout conversion kernels" in t and "19%" in t for t in texts)
    assert "the optimizer already runs as fused multi_tensor_apply kernels" in texts
    fix = finding.recommendation
    assert "mixed precision" not in fix and "foreach" not in fix
    assert fix.startswith("To go faster: put the model and every batch in channels_last")
    assert "layout conversions take 19% of kernel time" in fix


def test_resnet50_advice_comes_from_the_kernels(corpus: Path) -> None:
    """resnet50, 4 workers (compute-bound): fp32 convolutions (their recorded input dtypes,
    read before the kernel names) and an unfused SGD launching 483 kernels per step: mixed
    precision and foreach, with the figures."""
    m = metrics_of(corpus / "kineto" / "resnet50_num_workers_4.pt.trace.json.gz")
    fix = ids(m)["COMPUTE_BOUND"].recommendation
    assert ("enable mixed precision (torch.autocast + GradScaler; the matmuls and convolutions "
            "take no fp16/bf16 input now, by their recorded dtypes)") in fix
    assert "torch.optim.SGD(..., foreach=True)" in fix and "launches 483 optimizer kernels" in fix
    assert "channels_last" not in fix


def test_cpu_advice_for_autocast_without_native_bf16() -> None:
    """A CPU run whose convolutions fell back to ATen's slow kernels under bf16 autocast, on a
    CPU the manifest says lacks native bf16: turn autocast off, naming the slow ops."""
    from profreport.reports.analysis.results import BREAKDOWN_PARTS, Breakdown, CpuOpMix, TopItem

    parts = dict.fromkeys(BREAKDOWN_PARTS, 0) | {"compute": 640, "other": 14}
    mix = CpuOpMix("kineto", 2_600, 0.71, 0.0,
                   ["aten::_slow_conv2d_forward", "aten::_slow_conv2d_backward"])
    m = RunMetrics(breakdown=Breakdown("kineto", 654, parts), cpu_op_mix=mix,
                   top_ops=[TopItem("aten::_slow_conv2d_forward", 1338, 8, 0.51, True)],
                   top_ops_origin="kineto")
    bare = ids(m, RunContext(knobs={"amp": True}, environment={"cpu_native_bf16": False}))
    finding = bare["COMPUTE_BOUND"]
    assert finding.recommendation.startswith("Turn autocast off on this CPU: it has no native "
                                             "bf16")
    assert "aten::_slow_conv2d_forward" in finding.recommendation
    assert any("71% of operator self time, none on oneDNN" in e.text for e in finding.evidence)
    unsure = ids(m, RunContext(knobs={"amp": True}))["COMPUTE_BOUND"].recommendation
    assert "probably lacks native bf16" in unsure
    assert "miss oneDNN" in ids(m, RunContext(knobs={"amp": False}))["COMPUTE_BOUND"].recommendation


def test_resnet50_workers(corpus: Path) -> None:
    """num_workers=0 is loader-bound; with 4 workers it is not, and pageable H2D is flagged."""
    w0 = metrics_of(corpus / "kineto" / "resnet50_num_workers_0.pt.trace.json.gz")
    w4 = metrics_of(corpus / "kineto" / "resnet50_num_workers_4.pt.trace.json.gz")
    assert verdict(w0)[0] == "loader-bound"
    assert verdict(w4) == ("compute-bound", "GPU kernels take 70% of step time")
    loader = ids(w0, RunContext(knobs={"num_workers": 0}, environment={"cpus": 8}))
    # The loop loads each batch itself in 69.3 ms and does 105.6 ms of other work per step: two
    # workers (1.5 x 69.3 / 105.6 rounded up, at least 2) keep up; the 4-worker run of the same
    # model confirms the wait is gone well before 7.
    assert w0.breakdown is not None and w0.dataloader_fraction is not None
    wait = w0.dataloader_fraction * w0.breakdown.step_ns
    # The loop's whole time in its fetches: the breakdown's DataLoader part (59.3 ms) leaves
    # out the 10.0 ms of them the GPU still computes the step before, compute's time.
    assert wait == pytest.approx(69_298_500, abs=1)
    assert w0.breakdown.parts_ns["dataloader"] == 59_261_833
    assert w0.breakdown.step_ns - wait == pytest.approx(174_886_166 - 69_298_500, abs=1)
    assert "Raise DataLoader num_workers from 0 to 2 (the loop waits 69.3 ms per step for " \
        "105.6 ms of other work)" in loader["LOADER_BOUND"].recommendation
    assert "--cpus-per-task=3" in loader["LOADER_BOUND"].recommendation
    assert w4.dataloader_fraction == pytest.approx(0.0102, abs=1e-4)  # measured: 1.0%
    assert "LOADER_BOUND" not in ids(w4)
    assert "pin_memory=True" in ids(w4)["PAGEABLE_MEMCPY"].recommendation


def test_the_finding_behind_the_verdict_leads(corpus: Path) -> None:
    """The finding that explains the verdict comes first, ahead of more severe side issues:
    resnet50 with 4 workers is compute-bound, and its pageable copies (medium) come after."""
    w4 = metrics_of(corpus / "kineto" / "resnet50_num_workers_4.pt.trace.json.gz")
    name = verdict(w4)[0]
    assert name == "compute-bound"
    found = find_all(w4, RunContext(), name)
    assert found[0].id == "COMPUTE_BOUND" and found[0].severity == "info"
    assert "PAGEABLE_MEMCPY" in [f.id for f in found[1:]]
    by_severity = find_all(w4, RunContext())  # by severity alone: the medium ones first
    assert [f.id for f in by_severity[:2]] == ["FP32_ON_TENSOR_CORES", "PAGEABLE_MEMCPY"]


def test_hta_trace_is_diagnosed(corpus: Path) -> None:
    """The HTA trace has steps and a GPU: a real verdict, host-bound (its GPU idles 76% of
    the step waiting for what the CPU launches), not unknown."""
    m = metrics_of(corpus / "hta" / "nccl_data.json.gz")
    assert verdict(m) == ("host-bound", "the GPU idles 76% of the step until work the CPU "
                          "launches during the idle time arrives: it waits for the CPU")


def test_lprof_loader_heavy_is_loader_bound(make_lprof) -> None:
    """A real kernprof run of a sleeping loader: the loop line holds most of the time."""
    m = metrics_of(make_lprof("loader_heavy", LOADER_HEAVY))
    # The loader's 20 batches: the loop line hit 21 times, 20 passes.
    assert m.steps is not None and (m.steps.origin, m.steps.count) == ("lprof", 20)
    # Real sleeps: each pass waits at least 5 ms for a body of microseconds.
    assert m.dataloader_fraction > 0.8
    assert verdict(m)[0] == "loader-bound"
    assert m.lines[0].is_dataloader_loop


def test_lprof_compute_heavy_is_not_loader_bound(make_lprof) -> None:
    """A real kernprof run of a heavy loop body with an instant loader: compute-bound."""
    m = metrics_of(make_lprof("compute_heavy", COMPUTE_HEAVY))
    assert (m.steps.origin, m.steps.count) == ("lprof", 20)
    assert m.dataloader_fraction < 0.1  # real times: an instant loader, 30,000 squares a pass
    assert verdict(m)[0] == "compute-bound"
    assert "LOADER_BOUND" not in ids(m) and "COMPUTE_BOUND" in ids(m)


def test_no_steps_no_gpu_is_unknown() -> None:
    """Empty metrics give an unknown verdict with a reason, and no findings."""
    name, reason = verdict(RunMetrics())
    assert name == "unknown" and "no step markers" in reason
    assert find_all(RunMetrics(), RunContext()) == []


def test_dataparallel_knob_and_ops() -> None:
    """nn.DataParallel is flagged from its forward span or the knob, with its ops as evidence;
    its autograd functions alone are not enough, and torch.gather's backward (GatherBackward0,
    as in a real DDP trace) is none of them."""
    m = RunMetrics(dataparallel_ops={"BroadcastBackward": 3})
    assert "DATAPARALLEL_NOT_DDP" not in ids(m)
    finding = ids(m, RunContext(knobs={"dataparallel": True}))["DATAPARALLEL_NOT_DDP"]
    assert finding.severity == "high" and len(finding.evidence) == 2
    assert "DistributedDataParallel" in finding.recommendation
    assert "DATAPARALLEL_NOT_DDP" not in ids(RunMetrics())
    forward = RunMetrics(dataparallel_ops={"nn.Module: DataParallel_0": 2, "Broadcast": 2})
    assert "DATAPARALLEL_NOT_DDP" in ids(forward)


def test_ddp_trace_is_not_dataparallel(tmp_path: Path) -> None:
    """A hand-built DDP trace shaped like the real one of issue #10: DistributedDataParallel's
    forward, torch.gather's GatherBackward0, NCCL kernels on one GPU per process."""
    import json

    from profreport.reports.analysis.analyze import AnalyzeOptions, analyze_paths

    def op(name: str, ts: int, dur: int, cat: str = "cpu_op", **args: object) -> dict:
        """One complete event."""
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur,
                "args": args}

    events = [op("ProfilerStep#1", 0, 1000, "user_annotation"),
              op("nn.Module: DistributedDataParallel_0", 10, 500, "python_function"),
              op("DistributedDataParallel.forward", 10, 500, "user_annotation"),
              op("GatherBackward0", 600, 50), op("aten::gather", 20, 5),
              op("cudaLaunchKernel", 700, 5, "cuda_runtime", correlation=7),
              {**op("ncclKernel_AllReduce_RING_LL_Sum_float", 710, 100, "kernel", correlation=7,
                    device=0, stream=7), "pid": 0, "tid": 7}]
    trace = {"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": 0,
                                                     "world_size": 8},
             "traceEvents": events}
    path = tmp_path / "ddp.json"
    path.write_text(json.dumps(trace))
    run = analyze_paths([path], AnalyzeOptions()).runs[0]
    assert run.metrics.ddp_forward_calls >= 1
    assert "GatherBackward0" not in run.metrics.dataparallel_ops
    assert "DATAPARALLEL_NOT_DDP" not in {f.id for f in run.findings}


@pytest.mark.parametrize("fractions, expected", [({"nsys": 0.88, "lprof": 0.84}, "SOURCES_AGREE"),
                                                 ({"kineto": 0.02, "lprof": 0.7},
                                                  "SOURCES_DISAGREE")])
def test_sources_agreement(fractions: dict[str, float], expected: str) -> None:
    """Two sources that measured the DataLoader share either agree or not."""
    assert expected in ids(RunMetrics(dataloader_fraction_by_origin=fractions))


@pytest.mark.parametrize("fractions, title", [
    ({"nsys": 0.134, "kineto": 0.002},
     "The 2 profilers of this run agree that the run is not loader-bound: they put the "
     "DataLoader wait at 0.2% to 13% of step time, each below 25%."),
    ({"nsys": 0.88, "kineto": 0.30},
     "The 2 profilers of this run agree that the run is loader-bound: they put the DataLoader "
     "wait at 30% to 88% of step time, each at or above 25%."),
    ({"nsys": 0.20, "kineto": 0.30},
     "The 2 profilers of this run agree on the DataLoader wait (20% to 30% of step time).")])
def test_sources_agreement_names_what_they_agree_on(fractions: dict[str, float],
                                                    title: str) -> None:
    """Shares 65x apart (a real script run: nsys 13%, torch.profiler 0.2%) agree on the verdict,
    not on the wait, and the title says which."""
    found = ids(RunMetrics(dataloader_fraction_by_origin=fractions))
    assert found["SOURCES_AGREE"].title == title  # type: ignore[attr-defined]


def fixture_metrics(folder: Path, *names: str) -> RunMetrics:
    """Metrics of some files (all profiles when none are named) of a project fixture folder."""
    from profreport.reports.analysis.analyze import find_profiles

    paths = [folder / name for name in names] or find_profiles(folder)
    return compute_run_metrics([parse_file(path) for path in paths])


def fixture_context(folder: Path, **environment: object) -> RunContext:
    """The knobs and environment of a fixture's manifest, with some environment keys replaced."""
    from profreport.manifest import load_manifest

    manifest = load_manifest(folder / "manifest.json")
    return RunContext(knobs=dict(manifest.knobs),
                      environment={**manifest.environment, **environment})


def test_fixture_lprof_alone(fixtures_dir: Path) -> None:
    """The runner's .lprof files alone: loader_heavy is loader-bound, compute_heavy is not."""
    loader = fixture_metrics(fixtures_dir / "loader_heavy", "train.lprof")
    compute = fixture_metrics(fixtures_dir / "compute_heavy", "train.lprof")
    assert loader.steps.origin == "lprof" and verdict(loader)[0] == "loader-bound"
    # Measured on the fixtures' .lprof files: the loop line 90.4% and 2.5% of the loop.
    assert loader.dataloader_fraction == pytest.approx(0.9043, abs=1e-4)
    assert compute.dataloader_fraction == pytest.approx(0.0247, abs=1e-4)
    assert verdict(compute)[0] == "compute-bound" and "LOADER_BOUND" not in ids(compute)


def test_fixture_loader_heavy_folder(fixtures_dir: Path, nsys_available: str) -> None:
    """All three profilers see the loader: each one's own figure is in SOURCES_AGREE."""
    m = fixture_metrics(fixtures_dir / "loader_heavy")
    name, reason = verdict(m)
    assert name == "loader-bound" and m.breakdown.origin == "kineto"
    # Measured on the fixture: torch.profiler 91.9%, line_profiler 90.4%, Nsight Systems 81.0%
    # (its `dataloader` ranges; the 0.1-6.5 ms between the step ranges is no fetch).
    assert m.dataloader_fraction_by_origin == pytest.approx(
        {"kineto": 0.9191, "lprof": 0.9043, "nsys": 0.8100}, abs=1e-4)
    found = ids(m, fixture_context(fixtures_dir / "loader_heavy"))
    assert "LOADER_BOUND" in found and "CPU_OVERSUBSCRIBED" not in found
    texts = [e.text for e in found["SOURCES_AGREE"].evidence]
    origins = [e.origin for e in found["SOURCES_AGREE"].evidence]
    assert origins[:3] == ["kineto", "lprof", "nsys"]
    assert texts[:3] == ["92% of step time waiting for the next batch",
                         "90% of train() on the DataLoader loop line train.py:115",
                         "81% of step time waiting for the next batch"]


def test_fixture_compute_heavy_folder(fixtures_dir: Path, nsys_available: str) -> None:
    """Not loader-bound: torch.profiler's CPU ops fill the step; nsys alone cannot tell."""
    m = fixture_metrics(fixtures_dir / "compute_heavy")
    name, reason = verdict(m)
    assert (name, reason) == ("compute-bound", "the model's CPU operators take 99% of step time")
    # Measured on the fixture: torch.profiler 0.56%, line_profiler 2.5%, Nsight Systems 1.8%
    # (its `dataloader` ranges; the 0.1-5.9 ms between the step ranges is no fetch).
    assert m.dataloader_fraction_by_origin == pytest.approx(
        {"kineto": 0.00557, "lprof": 0.02467, "nsys": 0.01765}, abs=1e-5)
    assert m.dataloader_fraction == m.dataloader_fraction_by_origin["kineto"]
    assert "LOADER_BOUND" not in ids(m)
    assert "SOURCES_AGREE" in ids(m)
    nsys_only = fixture_metrics(fixtures_dir / "compute_heavy", "nsys.nsys-rep")
    name, reason = verdict(nsys_only)
    assert name == "unknown" and "Nsight Systems cannot attribute" in reason


def test_intra_op_threads_alone_over_the_cpus_are_not_a_loader_competing() -> None:
    """A --script run's Slurm job (the emitted sbatch: --cpus-per-task=1) with num_workers=0 and
    PyTorch's 2 intra-op threads: the batches load in the training thread, so no DataLoader
    competes for cores; the title said it did and the advice named '0 DataLoader workers'."""
    context = RunContext(knobs={"num_workers": 0, "batch_size": 32},
                         environment={"cpus": 1, "cpu_count": 2, "torch_threads": 2})
    found = ids(RunMetrics(), context)["CPU_OVERSUBSCRIBED"]
    assert found.title == ("0 DataLoader workers + 2 PyTorch intra-op threads on 1 CPU: "
                           "PyTorch's intra-op threads outnumber the CPUs and take turns on them.")
    assert found.recommendation == (
        "Call torch.set_num_threads(1) (or set OMP_NUM_THREADS=1) so the intra-op threads share "
        "1 CPU per process without contention; or request --cpus-per-task=2 in Slurm.")


def test_one_intra_op_thread_per_rank_is_said_in_the_singular(fixtures_dir: Path) -> None:
    """A 2-rank DDP run on 2 CPUs (the runner's ddp variant: 1 DataLoader worker and 1
    intra-op thread per rank, a cheap loader): the compute advice read 'PyTorch's 1 intra-op
    threads have the 1 CPUs nearly to themselves'."""
    folder = fixtures_dir / "compute_heavy"
    m = fixture_manifest_metrics(folder)
    context = fixture_context(folder, torch_threads=1, cpus_usable=2)
    context.knobs.update(ddp=True, nproc=2)
    advice = ids(m, context)["COMPUTE_BOUND"].recommendation
    assert ("so PyTorch's 1 intra-op thread has the 1 CPU nearly to itself: more cores "
            "(--cpus-per-task=2) make the operators faster") in advice


def test_cpu_oversubscribed_only_with_evidence(fixtures_dir: Path, nsys_available: str) -> None:
    """compute_heavy (1 worker, 2 CPUs): with 2 intra-op threads it is oversubscribed; with 1
    thread, unknown threads, or a GPU run, it is not."""
    folder = fixtures_dir / "compute_heavy"
    m = fixture_metrics(folder)
    found = ids(m, fixture_context(folder, torch_threads=2, cpus_usable=2))["CPU_OVERSUBSCRIBED"]
    assert found.title.startswith("1 DataLoader worker + 2 PyTorch intra-op threads on 2 CPUs")
    assert found.evidence[0].origin == "manifest" and "3 busy threads" in found.evidence[0].text
    assert any(e.origin == "kineto" for e in found.evidence)
    m = fixture_manifest_metrics(folder)
    found = ids(m, fixture_context(folder, torch_threads=2, cpus_usable=2))["CPU_OVERSUBSCRIBED"]
    demand = m.trials.full / m.trials.io
    assert demand < LIGHT_LOADER_CORES  # its loader is cheap: keep the threads, add CPUs
    assert found.severity == "low" and f"{demand:.2f} of a core" in found.recommendation
    assert "torch.set_num_threads" not in found.recommendation
    assert "--cpus-per-task=3" in found.recommendation
    # The same run with a loader as slow as the real loop needs a whole core: give it one.
    heavy = dataclasses.replace(m, trials=dataclasses.replace(m.trials, io=m.trials.full))
    found = ids(heavy, fixture_context(folder, torch_threads=2, cpus_usable=2))
    assert found["CPU_OVERSUBSCRIBED"].severity == "medium"
    assert "torch.set_num_threads(1)" in found["CPU_OVERSUBSCRIBED"].recommendation
    for environment in ({"torch_threads": 1}, {"torch_threads": None},
                        {"torch_threads": 2, "cuda": "12.4"}):
        context = fixture_context(folder, cpus_usable=2, **environment)
        assert "CPU_OVERSUBSCRIBED" not in ids(m, context)


def test_ddp_gloo_verdict_and_comm(fixtures_dir: Path) -> None:
    """2 gloo ranks on 2 CPUs: rank 0's verdict (compute-bound, its all-reduce exposing 5.2%
    of its step: no COMM_OVERHEAD), and no oversubscription when torchrun gave each rank one
    thread, which two threads each would be."""
    folder = fixtures_dir / "ddp_gloo"
    m = fixture_metrics(folder)
    assert verdict(m) == ("compute-bound", "the model's CPU operators take 71% of step time")
    found = ids(m, fixture_context(folder, torch_threads=1))
    assert sorted(found) == ["COMPUTE_BOUND", "SYNC_DATALOADER"]
    assert "CPU_OVERSUBSCRIBED" in ids(m, fixture_context(folder, torch_threads=2))


def fixture_manifest_metrics(folder: Path, *names: str) -> RunMetrics:
    """Like :func:`fixture_metrics`, with the folder's manifest (throughput and trials)."""
    from profreport.manifest import load_manifest
    from profreport.reports.analysis.analyze import find_profiles

    paths = [folder / name for name in names] or find_profiles(folder)
    return compute_run_metrics([parse_file(path) for path in paths],
                               load_manifest(folder / "manifest.json"))


def test_trials_back_the_verdict(fixtures_dir: Path, nsys_available: str) -> None:
    """loader_heavy's trials (the loader alone slower than the model alone) agree with the
    profilers: LOADER_BOUND quotes them and the verdict says so. compute_heavy's NVTX-only nsys
    capture cannot attribute the step, but its trials (the loader alone many times faster than
    the model alone) can: compute-bound. Figures are the fixtures' own manifests'."""
    from profreport.manifest import load_manifest

    folder = fixtures_dir / "loader_heavy"
    trials = load_manifest(folder / "manifest.json").trials
    assert trials["synthetic"] >= TRIAL_LIMIT_RATIO * trials["io"]
    loader = fixture_manifest_metrics(folder)
    assert (loader.trials.io, loader.trials.synthetic) == (trials["io"], trials["synthetic"])
    name, reason = verdict(loader)
    assert name == "loader-bound" and reason.endswith("; the runner's unprofiled trials agree")
    found = ids(loader, fixture_context(folder))
    trial = [e for e in found["LOADER_BOUND"].evidence if e.origin == "manifest"]
    assert trial[0].text == (
        f"without a profiler, the DataLoader alone delivers {trials['io']:.0f} samples/s, the "
        f"model alone {trials['synthetic']:.0f} (one cached batch), the real loop "
        f"{trials['full']:.0f}: the DataLoader sets the pace")
    assert "TRIALS" not in found
    folder = fixtures_dir / "compute_heavy"
    trials = load_manifest(folder / "manifest.json").trials
    assert trials["io"] >= TRIAL_LIMIT_RATIO * trials["synthetic"]
    name, reason = verdict(fixture_manifest_metrics(folder, "nsys.nsys-rep"))
    assert name == "compute-bound"
    assert reason.startswith(f"without a profiler, the DataLoader alone delivers "
                             f"{trials['io']:.0f} samples/s, the model alone "
                             f"{trials['synthetic']:.0f}")
    assert "Nsight Systems cannot attribute" in reason


def test_trials_that_disagree_are_reported(corpus: Path) -> None:
    """resnet50 with 0 workers is loader-bound by torch.profiler; trials saying the model is the
    limit (loader alone 2000 samples/s, model alone 500) give the TRIALS finding."""
    from dataclasses import replace

    from profreport.reports.analysis.results import Trials

    m = metrics_of(corpus / "kineto" / "resnet50_num_workers_0.pt.trace.json.gz")
    disagreeing = replace(m, trials=Trials(io=2000.0, synthetic=500.0, full=450.0))
    assert verdict(disagreeing)[0] == "loader-bound"
    finding = ids(disagreeing)["TRIALS"]
    assert finding.title == ("The runner's trials point at the model, the profilers at the "
                             "DataLoader.")
    assert [e.origin for e in finding.evidence] == ["manifest", "kineto"]
    agreeing = replace(m, trials=Trials(io=100.0, synthetic=500.0, full=95.0))
    assert "TRIALS" not in ids(agreeing)


def test_new_hta_traces_get_verdicts_from_mechanisms(corpus: Path) -> None:
    """Triton: unknown with the reason (not 'compute-bound, GPU busy 100%'); event sync:
    host-bound because the idle GPU waits for launches (not 'many short kernels': there are 4),
    with the syncs named per step by SYNC_STALL's evidence when they matter."""
    triton = metrics_of(corpus / "hta" / "triton_example.json.gz")
    name, reason = verdict(triton)
    assert name == "unknown" and "no DataLoader wait, sync or launch" in reason
    assert "SMALL_BATCH" not in ids(triton)  # one short kernel is no evidence of tiny batches
    event_sync = metrics_of(corpus / "hta" / "cuda_event_sync.json.gz")
    name, reason = verdict(event_sync)
    assert name == "host-bound" and "many short kernels" not in reason
    assert "idles 92% of the step until work the CPU launches" in reason
    finding = ids(event_sync)["HOST_LAUNCH_BOUND"]
    assert finding.title == "The GPU waits for the CPU to launch its work."
    texts = [e.text for e in finding.evidence]
    # aten::empty holds the CPU 2,187 µs of which 2,185 µs lie in the GPU's launch wait.
    assert ("while the GPU waited, the CPU spent 2.2 ms per step in aten::empty (self time, 76% "
            "of the wait)") in texts
    # The syncs are named and weighed: 77 µs of the 3.15 ms step is no stall.
    assert any(t.startswith("the CPU also blocks in cudaEventSynchronize") and
               "77.0 µs per step (2.4% of the step): too little to be the stall" in t
               for t in texts)
    assert finding.recommendation.startswith("Make aten::empty cheaper or move it out of the step")
    # The proof is located: the GPU's 2.81 ms wait from the step's start (the file's first
    # event) to the first kernel, in this file.
    assert finding.evidence[0].at == TraceLocation("cuda_event_sync.json.gz", 0, 2_810_000)


def test_host_bound_spread_over_many_ops_advises_fewer_ops(corpus: Path) -> None:
    """nccl_data: the GPU idles 76% of the step waiting for launches, and no CPU op holds a fifth
    of that wait (aten::empty 8.1%, aten::copy_ 6.2%, aten::view 5.9%): the per-op cost is the
    bottleneck, so the fix is fusing ops, not one op."""
    hta = metrics_of(corpus / "hta" / "nccl_data.json.gz")
    assert [op.name for op in hta.gpu_idle.launch_wait_ops] == ["aten::empty", "aten::copy_",
                                                                "aten::view"]
    assert hta.gpu_idle.launch_wait_ops[0].share == pytest.approx(0.0809, abs=0.0005)
    finding = ids(hta)["HOST_LAUNCH_BOUND"]
    assert any("no CPU operator held more than 20% of the wait" in e.text
               for e in finding.evidence)
    assert finding.recommendation.startswith("Cut the CPU's cost per operator")


@pytest.mark.parametrize(("name", "expected", "confidence"), [
    ("kineto/resnet50_num_workers_0.pt.trace.json.gz", "loader-bound", "medium"),
    ("kineto/resnet50_num_workers_4.pt.trace.json.gz", "compute-bound", "medium"),
    ("hta/nccl_data.json.gz", "host-bound", "high"),
    ("hta/cuda_event_sync.json.gz", "host-bound", "low"),
    ("hta/triton_example.json.gz", "unknown", None),
    ("hta/rank_not_found.json.gz", "unknown", None),
    ("hta/mtia_inference_rank_0.json.gz", "compute-bound", "medium")])
def test_verdict_reason_never_contradicts_the_findings(corpus: Path, name: str, expected: str,
                                                       confidence: str | None) -> None:
    """Each trace's verdict and confidence; the finding that explains a named verdict is there
    and leads, with a margin past zero; an unknown verdict has a reason and no confidence; no
    other high-severity cause contradicts the verdict."""
    from profreport.reports.analysis.analyze import AnalyzeOptions, analyze_paths
    from profreport.reports.analysis.findings import VERDICT_FINDINGS

    run = analyze_paths([corpus / name], AnalyzeOptions()).runs[0]
    assert (run.verdict, run.verdict_confidence) == (expected, confidence)
    lead = VERDICT_FINDINGS.get(run.verdict)
    assert (lead is None) == (expected == "unknown")
    if lead is None:
        assert run.verdict_reason and run.verdict_margin is None
    else:
        assert run.findings and run.findings[0].id == lead and run.verdict_margin > 0
    bound = {"LOADER_BOUND", "COMM_OVERHEAD", "HOST_LAUNCH_BOUND", "SYNC_STALL"}
    others = {f.id for f in run.findings if f.severity == "high"} & bound - {lead}
    assert not others, f"{run.verdict} but high-severity {others}"


def test_verdict_confidence_margins(corpus: Path) -> None:
    """resnet50 num_workers=0: loader-bound at 40% against a 25% threshold and no other cause
    past its threshold: medium (margin 14.7 points); the event-sync trace: host-bound by 41.6
    points, but of its one step, which cannot show a typical step: low."""
    from profreport.reports.analysis.findings import verdict_confidence

    resnet = metrics_of(corpus / "kineto" / "resnet50_num_workers_0.pt.trace.json.gz")
    label, margin = verdict_confidence(resnet, "loader-bound")
    assert label == "medium" and margin == pytest.approx(0.1466, abs=0.0005)
    event_sync = metrics_of(corpus / "hta" / "cuda_event_sync.json.gz")
    assert verdict_confidence(event_sync, "host-bound") == ("low", pytest.approx(0.416,
                                                                                abs=0.0005))
    assert verdict_confidence(event_sync, "unknown") is None


def test_zero_grad_and_in_process_loader_from_the_trace(corpus: Path) -> None:
    """resnet50 num_workers=0: zero_grad launches 161 fill kernels per step (launched inside
    Optimizer.zero_grad, by correlation id): set_to_none is off. Its DataLoader spans are
    _SingleProcessDataLoaderIter, so the loader advice starts from num_workers 0; with 4 workers
    the spans say so and no in-process finding fires. The HTA trace's zero_grad launches none."""
    w0 = metrics_of(corpus / "kineto" / "resnet50_num_workers_0.pt.trace.json.gz")
    assert w0.kernel_mix.zero_grad_work_per_step == 161 and w0.loader_in_process is True
    assert w0.zero_grad_fills_per_step == 161  # ResNet-50's 161 parameters, each zero_()'d
    found = ids(w0)
    assert "161 kernels" in found["ZERO_GRAD_NOT_NONE"].evidence[0].text
    assert "from 0 to" in found["LOADER_BOUND"].recommendation
    w4 = metrics_of(corpus / "kineto" / "resnet50_num_workers_4.pt.trace.json.gz")
    assert w4.loader_in_process is False and "SYNC_DATALOADER" not in ids(w4)
    hta = metrics_of(corpus / "hta" / "nccl_data.json.gz")
    assert hta.kernel_mix.zero_grad_work_per_step == 0 and "ZERO_GRAD_NOT_NONE" not in ids(hta)


def test_lprof_without_its_source_is_diagnosed_from_hit_counts(fixtures_dir: Path,
                                                                tmp_path: Path) -> None:
    """The loader-heavy run's .lprof alone (its script not beside it): the DataLoader line is
    found from hit counts, the verdict says loader-bound no surer than that identification, the
    evidence says how it was found, and a CPU-only run is not told to pin memory."""
    from profreport.reports.analysis.analyze import AnalyzeOptions, analyze_paths

    alone = tmp_path / "train.lprof"
    alone.write_bytes((fixtures_dir / "loader_heavy" / "train.lprof").read_bytes())
    run = analyze_paths([alone], AnalyzeOptions()).runs[0]
    assert run.verdict == "loader-bound"
    assert run.metrics.loop_identification is not None
    assert run.metrics.loop_identification.evidence == "hit counts"
    assert run.verdict_confidence in ("medium", "low")
    assert run.verdict_confidence == run.metrics.loop_identification.confidence
    loader = next(f for f in run.findings if f.id == "LOADER_BOUND")
    assert any("from hit counts alone" in e.text for e in loader.evidence)
    assert "pin_memory" not in loader.recommendation
    assert any("not shown" in note for note in run.notes)


def test_cpu_compute_advice_follows_the_runs_evidence(fixtures_dir: Path) -> None:
    """compute_heavy (CPU, compute-bound, top op aten::convolution_backward): the advice names
    what this run's threads, workers, knobs and top operator call for, so runs whose evidence
    differs get different advice (the quick-start CPU variants once all got the same line)."""
    folder = fixtures_dir / "compute_heavy"
    m = fixture_manifest_metrics(folder)
    assert m.top_ops[0].name == "aten::convolution_backward"

    def advice(trials: object = m.trials, **knobs: object) -> str:
        cpus = knobs.pop("cpus", 2)
        context = fixture_context(folder, torch_threads=knobs.pop("threads", 2), cpus=cpus,
                                  cpus_usable=cpus)
        context = dataclasses.replace(context, knobs={**context.knobs, **knobs})
        return ids(dataclasses.replace(m, trials=trials), context)["COMPUTE_BOUND"].recommendation

    cheap_loader = advice()
    assert "the DataLoader needs only" in cheap_loader and "--cpus-per-task=4" in cheap_loader
    surplus = advice(num_workers=2)
    assert surplus.startswith("To go faster: lower num_workers from 2 to 1 (the loader needs "
                              "only ")
    assert "fuse the operators around aten::convolution_backward" in cheap_loader
    busy_loader = advice(trials=dataclasses.replace(m.trials, io=m.trials.full))
    assert "competing for cores (see the oversubscription finding)" in busy_loader
    idle_cpus = advice(threads=1, cpus=8)
    assert "PyTorch computes on 1 thread while 6 of 8 CPUs are free: call " \
        "torch.set_num_threads(7)" in idle_cpus
    pinned = advice(pin_memory=True)
    assert "drop pin_memory=True" in pinned
    compiled = advice(compile=True)
    assert "torch.compile" not in compiled and "even compiled" in compiled
    assert len({cheap_loader, surplus, busy_loader, idle_cpus, pinned, compiled}) == 6


def test_cpu_thread_advice_names_workers_only_where_a_dataloader_is_recorded(
        tmp_path: Path) -> None:
    """A hand-built CPU trace (6 ProfilerStep spans of 10 ms, 9 ms of aten::conv2d each, no
    manifest so the CPU load is unknown): without a DataLoader span or num_workers knob the
    thread advice leaves the DataLoader workers out (it said to match the threads to 'the cores
    left after the DataLoader workers' of a run that had none); with a single-process
    DataLoader span, or the knob, it keeps them."""
    def cpu_trace(name: str, loader_us: int) -> Path:
        events = []
        for i in range(6):
            t = 1000 + i * 10_000
            events += [cpu_event(f"ProfilerStep#{i + 1}", t, 10_000, cat="user_annotation"),
                       cpu_event("aten::conv2d", t + loader_us + 10, 9_000 - loader_us)]
            if loader_us:
                events.append(cpu_event(
                    "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t, loader_us,
                    cat="user_annotation"))
        return kineto_trace(tmp_path / f"{name}.pt.trace.json", events)

    threads = "match torch.set_num_threads to "
    bare = metrics_of(cpu_trace("bare", 0))
    assert bare.dataloader_fraction == 0.0 and bare.loader_in_process is None
    advice = ids(bare)["COMPUTE_BOUND"].recommendation
    assert f"{threads}the job's cores;" in advice and "DataLoader" not in advice
    workers = f"{threads}the cores left after the DataLoader workers;"
    knob = ids(bare, RunContext(knobs={"num_workers": 2}))["COMPUTE_BOUND"].recommendation
    assert workers in knob
    loaded = metrics_of(cpu_trace("loaded", 300))
    assert loaded.dataloader_fraction == pytest.approx(0.03)
    assert workers in ids(loaded)["COMPUTE_BOUND"].recommendation


def test_loader_advice_when_the_worker_count_is_not_recorded(corpus: Path) -> None:
    """resnet50 num_workers=4 without a manifest: its DataLoader spans say worker processes run
    but not how many, so a loader-bound verdict does not claim a current value ("from N"): it
    scales whatever the count is by what the loop needs (the issue's run with 16 workers was
    told to raise it to 8). With 16 recorded, half the step waiting means each batch takes a
    worker 16 steps of 2 x the rest of the loop: 48 workers, or cheaper samples."""
    w4 = metrics_of(corpus / "kineto" / "resnet50_num_workers_4.pt.trace.json.gz")
    starved = dataclasses.replace(w4, dataloader_fraction=0.5)
    advice = ids(starved)["LOADER_BOUND"].recommendation
    assert advice.startswith("The DataLoader runs in worker processes")
    assert "so it needs about 3.0 times as many workers as it has." in advice
    assert "make each sample cheaper" in advice and "from " not in advice
    known = ids(starved, RunContext(knobs={"num_workers": 16}))["LOADER_BOUND"].recommendation
    assert known.startswith("Raise DataLoader num_workers from 16 to 48 ")
    assert "or make each sample cheaper" in known
    capped = ids(starved, RunContext(knobs={"num_workers": 16}, environment={"cpus": 17}))
    assert capped["LOADER_BOUND"].recommendation.startswith(
        "num_workers is already 16, as many as the job's 17 CPUs allow beside the training "
        "loop, and the loop would need about 48")
    # 2 workers on 2 CPUs (a real --run grading): more than the one core the loop leaves; it
    # read 'already 2, as many as the job's 2 CPUs allows'.
    over = ids(starved, RunContext(knobs={"num_workers": 2}, environment={"cpus": 2}))
    assert over["LOADER_BOUND"].recommendation.startswith(
        "num_workers is already 2, more than the 1 the job's 2 CPUs leave beside the training "
        "loop, and the loop would need about")


def test_a_run_that_shared_the_cpus_says_so_with_the_cpu_times() -> None:
    """SHARED_CPUS: a 21.9 s unprofiled run on 2 CPUs used 15.9 s of CPU while other processes
    used 27.8 s and 0.3% stayed idle (the new-user run beside another job); not on an idle
    machine."""
    from profreport.reports.analysis.results import SharedCpu

    shared = SharedCpu(wall_ns=21_897_000_000, cpu_ns=15_889_000_000,
                       other_cpu_ns=27_790_000_000, cpus=2, other_share=0.6346,
                       idle_share=0.0026, shared=True)
    finding = ids(RunMetrics(plain_cpu=shared))["SHARED_CPUS"]
    assert finding.severity == "medium" and "63%" in finding.title
    assert finding.evidence[0].text == (
        "in 21.90 s on the 2 CPUs it may use, the run used 15.89 s of CPU time, other "
        "processes 27.79 s, and 0.3% of their CPU time was left idle")
    assert finding.evidence[0].origin == "manifest"
    idle = dataclasses.replace(shared, other_cpu_ns=200_000_000, other_share=0.005,
                               idle_share=0.6, shared=False)
    assert "SHARED_CPUS" not in ids(RunMetrics(plain_cpu=idle))


def test_a_profiler_that_made_the_steps_far_longer_is_named() -> None:
    """PROFILER_SLOWED: a real --script run of a small MLP took 0.33 ms a step without a
    profiler, 127.9 ms under torch.profiler (aten::mm 24 ms a call) and 2.8 ms under nsys; the
    report said 'compute 99% of 127.9 ms per step' with nothing saying that step is 385x the
    real one. nsys's 8.4x is under PROFILER_SLOWDOWN_LIMIT and not named."""
    from profreport.reports.analysis.results import StepStats

    plain = [332_000, 330_000, 335_000, 332_000]
    timed = [StepStats("nsys", 29, 2_790_000, 476_200, 4_800_000, None, None),
             StepStats("kineto", 6, 127_900_000, None, None, None, None)]
    finding = ids(RunMetrics(plain_step_ns=plain, steps_by_origin=timed))["PROFILER_SLOWED"]
    assert finding.title == ("torch.profiler made the steps 385× longer than without a "
                             "profiler: its figures describe mostly its own work.")
    assert [(e.text, e.origin) for e in finding.evidence] == [
        ("mean step 127.9 ms under it", "kineto"),
        ("mean step 332.3 µs over 4 steps without a profiler", "manifest")]
    assert "PROFILER_SLOWED" not in ids(RunMetrics(plain_step_ns=plain,
                                                   steps_by_origin=timed[:1]))
    assert "PROFILER_SLOWED" not in ids(RunMetrics(steps_by_origin=timed))


def test_cpu_oversubscribed_keeps_the_workers_of_a_loop_waiting_for_data(
        fixtures_dir: Path) -> None:
    """2 DataLoader workers + 1 recorded intra-op thread on 2 CPUs: a loop waiting for data
    (loader_heavy's line profile) is not told to lower num_workers, which would slow it
    further, and no run recording one thread is told to call torch.set_num_threads(1)."""
    context = RunContext(knobs={"num_workers": 2}, environment={"torch_threads": 1, "cpus": 2})
    loader = fixture_metrics(fixtures_dir / "loader_heavy", "train.lprof")
    assert loader.dataloader_fraction > 0.5
    advice = ids(loader, context)["CPU_OVERSUBSCRIBED"].recommendation
    assert advice.startswith("Keep the 2 DataLoader workers: the loop waits for data ")
    assert advice.endswith("it needs more CPUs, not fewer workers: request --cpus-per-task=3 "
                           "in Slurm.")
    compute = fixture_metrics(fixtures_dir / "compute_heavy", "train.lprof")
    assert ids(compute, context)["CPU_OVERSUBSCRIBED"].recommendation == (
        "Lower num_workers from 2 to 1; or request --cpus-per-task=3 in Slurm.")


def test_loader_advice_asks_for_no_setting_the_run_has(fixtures_dir: Path) -> None:
    """A loader-bound run whose DataLoader already persists its workers and prefetches 4
    batches each is told neither again; with PyTorch's default prefetch_factor of 2 it is told
    to raise it."""
    loader = fixture_metrics(fixtures_dir / "loader_heavy", "train.lprof")
    knobs = {"num_workers": 1, "persistent_workers": True, "prefetch_factor": 4}
    advice = ids(loader, RunContext(knobs=knobs))["LOADER_BOUND"].recommendation
    assert "prefetch_factor" not in advice and "persistent_workers" not in advice
    assert advice.endswith(".") and "; set" not in advice
    default = ids(loader, RunContext(knobs={**knobs, "prefetch_factor": 2}))["LOADER_BOUND"]
    assert default.recommendation.endswith("; set prefetch_factor=4.")


def test_worker_advice_counts_the_ranks_a_script_started_on_the_node(tmp_path: Path) -> None:
    """A real --script --nproc 2 run of a gloo DDP script on 2 CPUs (num_workers=0, the
    DataLoader 5.1% of each step): its manifest has no ddp/nproc knobs (those are the built-in
    workload's), so the advice counted one training process and read 'Raise DataLoader
    num_workers from 0 to 1 (the job's 2 CPUs, less one for the training loop ...)', a worker
    per rank on CPUs both ranks already fill. The script's torchrun processes on the node
    (local_world_size, recorded from LOCAL_WORLD_SIZE) are the training processes now."""
    events = []
    for i in range(6):
        t = 1000 + i * 10_000
        events += [cpu_event(f"ProfilerStep#{i + 1}", t, 10_000, cat="user_annotation"),
                   cpu_event("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t,
                             600, cat="user_annotation"),
                   cpu_event("aten::mm", t + 610, 9_300)]
    metrics = metrics_of(kineto_trace(tmp_path / "rank0.pt.trace.json", events))
    environment = {"cpus": 2, "torch_threads": 1}

    def advice(**more: object) -> str:
        context = RunContext(knobs={"num_workers": 0}, environment={**environment, **more})
        return ids(metrics, context)["SYNC_DATALOADER"].recommendation

    assert advice().startswith("Raise DataLoader num_workers from 0 to 1 (the job's 2 CPUs, "
                               "less one for the training loop")
    assert advice(local_world_size=2).startswith(
        "Each of the 2 ranks' share of the job's 2 CPUs leaves no core for DataLoader workers "
        "beside the training loop")


def _module_load_trace(path: Path) -> Path:
    """4 steps of 10 ms: each opens with aten::linear (1 ms) launching a 1 ms kernel, then the
    CPU loads GPU code outside every operator (cuModuleLoadData, a driver call, 6 ms) before
    aten::relu launches the next 1 ms kernel: the GPU idles 7 ms a step waiting for it."""
    events, corr = [], 1
    for step in range(4):
        t = step * 10_000
        events.append(cpu_event(f"ProfilerStep#{step}", t, 10_000, cat="user_annotation"))
        for name, at in (("aten::linear", t + 100), ("aten::relu", t + 8_100)):
            events += [cpu_event(name, at, 1_000),
                       cpu_event("cudaLaunchKernel", at + 500, 20, cat="cuda_runtime",
                                 correlation=corr),
                       {"ph": "X", "cat": "kernel", "name": "gemm_kernel", "pid": 0, "tid": 7,
                        "ts": at + 600, "dur": 1_000,
                        "args": {"correlation": corr, "device": 0, "stream": 7}}]
            corr += 1
        events.append(cpu_event("cuModuleLoadData", t + 1_500, 6_000, cat="cuda_driver",
                                correlation=100_000 + step))
    return kineto_trace(path, events)


def test_a_launch_wait_in_cuda_calls_outside_operators_is_not_python(tmp_path: Path) -> None:
    """The GPU waits ~7 ms a step for the relu's launch while the CPU loads GPU code in a driver
    call outside every operator: HOST_LAUNCH_BOUND said that time was 'Python code between
    operators' and advised cutting Python. It now names the call and its time, and only what
    neither an op nor a call covers is Python."""
    m = metrics_of(_module_load_trace(tmp_path / "lazy_load.json"))
    idle = m.gpu_idle
    # Each step waits from the linear's kernel's end (1.7 ms) to the relu's kernel (8.7 ms),
    # and 1 ms from the relu's kernel's end to the next step's first (0.7 ms before the first
    # step's): 7.925 ms a step. The load holds 5.8 ms of it, the two ops 0.6 ms each, and the
    # rest, 0.925 ms (7.5 to 8.1 ms, and between the steps), is Python.
    assert (idle.launch_wait_ns, idle.launch_wait_runtime_ns) == (7_925_000, 5_800_000)
    assert [(c.name, c.total_ns) for c in idle.launch_wait_runtime_calls] == [
        ("cuModuleLoadData", 5_800_000)]
    assert idle.launch_wait_outside_ops_ns == 925_000
    finding = ids(m)["HOST_LAUNCH_BOUND"]
    texts = [e.text for e in finding.evidence]
    assert ("5.8 ms per step (73% of the wait) lies in GPU runtime or driver calls outside "
            "every recorded CPU operator (cuModuleLoadData 5.8 ms)") in texts
    assert not any("Python code between operators" in text for text in texts)
    assert finding.recommendation.startswith("The CPU spends the wait in GPU runtime calls made "
                                             "outside torch's operators (cuModuleLoadData)")
