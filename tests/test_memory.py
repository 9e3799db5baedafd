"""Memory events: the ``memory`` table from Kineto (both formats) and nsys, and its analysis."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from profreport.model import Profile
from profreport.parsers import kineto, nsys
from profreport.reports.analysis import memory
from profreport.reports.analysis.findings import RunContext, find_all
from profreport.reports.analysis.results import MemoryStats, RunMetrics
from profreport.reports.analysis.steps import step_windows

RESNET_GPU_MEMORY_EVENTS = 8_220
RESNET_PEAK_ABOVE_START = 2_791_636_480  # bytes: 2.79 GB, 2.60 GiB
V100_MEMORY = 34_084_028_416  # deviceProperties[0].totalGlobalMem


@pytest.fixture(scope="module")
def resnet(corpus: Path) -> Profile:
    """resnet50_num_workers_0 (2021 trace format, profile_memory=True on a V100)."""
    return kineto.parse(corpus / "kineto" / "resnet50_num_workers_0.pt.trace.json.gz")


def _memory_event(ts: float, size: int, *, device_type: int = 1, device: int = 0,
                  totals: tuple[int, int] | None = None, addr: int | None = None) -> dict:
    """One Kineto ``[memory]`` instant event; ``totals`` (allocated, reserved) make it current."""
    args: dict = {"Device Type": device_type, "Device Id": device, "Bytes": size}
    if totals is not None:
        args.update({"Total Allocated": totals[0], "Total Reserved": totals[1]})
    if addr is not None:
        args["Addr"] = addr
    return {"ph": "i", "s": "t", "name": "[memory]", "pid": 7, "tid": 7, "ts": ts, "args": args}


def _write_trace(path: Path, events: list[dict], devices: list[dict] | None = None) -> Path:
    """A small Kineto-shaped trace holding ``events``."""
    document = {"schemaVersion": 1, "deviceProperties": devices or [], "traceEvents": events}
    path.write_text(json.dumps(document))
    return path


@pytest.mark.corpus
def test_resnet50_memory_events(resnet: Profile) -> None:
    """8,220 GPU allocator events that net out to zero, 2.79 GB above the window's start."""
    memory = resnet.table("memory")
    gpu = memory[memory["device_kind"] == "cuda"]
    assert len(gpu) == RESNET_GPU_MEMORY_EVENTS
    assert set(gpu["device"]) == {0}
    assert int(gpu["bytes"].sum()) == 0
    assert int(gpu["bytes"].cumsum().max()) == RESNET_PEAK_ABOVE_START
    assert (memory["total_allocated"] == -1).all()  # the 2021 format records no totals
    assert set(memory.loc[memory["device_kind"] == "cpu", "device"]) == {-1}
    assert memory["time"].is_monotonic_increasing
    devices = resnet.table("devices")
    assert int(devices.loc[devices["device"] == 0, "memory_bytes"].iloc[0]) == V100_MEMORY


def test_current_format_totals_and_addresses(tmp_path: Path) -> None:
    """Current-format events keep their totals and addresses; fields absent read as unknown."""
    events = [
        _memory_event(10.5, 512, totals=(512, 2 << 20), addr=0x7F00),
        _memory_event(11.0, 4, device_type=0, device=-1, totals=(4, 0), addr=0x10),
        _memory_event(12.25, -512, totals=(0, 2 << 20), addr=0x7F00),
        {"ph": "i", "s": "g", "name": "Record Window End", "pid": "", "tid": "", "ts": 13.0},
    ]
    memory = kineto.parse(_write_trace(tmp_path / "t.json", events)).table("memory")
    assert memory["time"].tolist() == [10_500, 11_000, 12_250]
    assert memory["device_kind"].tolist() == ["cuda", "cpu", "cuda"]
    assert memory["device"].tolist() == [0, -1, 0]
    assert memory["bytes"].tolist() == [512, 4, -512]
    assert memory["total_allocated"].tolist() == [512, 4, 0]
    assert memory["total_reserved"].tolist() == [2 << 20, 0, 2 << 20]
    assert memory["addr"].tolist() == [0x7F00, 0x10, 0x7F00]
    assert set(memory["counts"]) == {"allocated"}


def test_trace_without_memory_events(tmp_path: Path) -> None:
    """A trace recorded without profile_memory has an empty memory table."""
    span = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1,
            "dur": 2}
    profile = kineto.parse(_write_trace(tmp_path / "t.json", [span]))
    assert not profile.has("memory")
    assert profile.table("memory").empty


def _add_memory_usage_table(export: Path, rows: list[tuple[int, int, int, int, int, int]]) -> None:
    """CUDA_GPU_MEMORY_USAGE_EVENTS as nsys 2022.4+ writes it, holding ``rows`` of
    (start, globalPid, deviceId, bytes, memKind, memoryOperationType)."""
    with sqlite3.connect(export) as conn:
        conn.execute("CREATE TABLE CUDA_GPU_MEMORY_USAGE_EVENTS (start INTEGER NOT NULL, "
                     "globalPid INTEGER, deviceId INTEGER, contextId INTEGER, address INTEGER, "
                     "pc INTEGER, bytes INTEGER, memKind INTEGER, memoryOperationType INTEGER, "
                     "name TEXT, correlationId INTEGER, streamId INTEGER)")
        conn.executemany(
            "INSERT INTO CUDA_GPU_MEMORY_USAGE_EVENTS (start, globalPid, deviceId, address, "
            "bytes, memKind, memoryOperationType) VALUES (?, ?, ?, 4096, ?, ?, ?)", rows)


@pytest.mark.corpus
def test_nsys_memory_usage_events(corpus: Path, nsys_available: str, nsys_cache_dir: Path,
                                  tmp_path: Path) -> None:
    """nsys driver allocations become reserved-memory changes; absent table, empty memory."""
    report = corpus / "nsys" / "sc22_1gpu_baseline.nsys-rep"
    export = nsys.export_report(report, cache_dir=nsys_cache_dir)
    assert not nsys.parse(export).has("memory")  # recorded without --cuda-memory-usage
    copy = Path(shutil.copy2(export, tmp_path / "with_memory.sqlite"))
    pid = 4242 << 24
    _add_memory_usage_table(copy, [(100, pid, 0, 1 << 21, 2, 0), (200, pid, 0, 1 << 20, 1, 0),
                                   (300, pid, 0, 1 << 21, 2, 1)])
    profile = nsys.parse(copy)
    memory = profile.table("memory")
    assert memory["bytes"].tolist() == [1 << 21, 1 << 20, -(1 << 21)]
    assert memory["device_kind"].tolist() == ["cuda", "cpu", "cuda"]
    assert memory["device"].tolist() == [0, -1, 0]
    assert memory["pid"].tolist() == [4242] * 3
    assert set(memory["counts"]) == {"reserved"}
    # TARGET_INFO_GPU: an A100-SXM4-40GB's 39.44 GiB.
    assert int(profile.table("devices")["memory_bytes"].iloc[0]) == 42_350_739_456


# --- analysis ---------------------------------------------------------------------------------

GIB = 1 << 30
MIB = 1 << 20


def _step_span(number: int, start_us: float, dur_us: float) -> dict:
    """A ProfilerStep#N span as current torch.profiler writes it."""
    return {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{number}", "pid": 7,
            "tid": 7, "ts": start_us, "dur": dur_us}


class _Allocator:
    """Builds current-format memory events with the running totals a real allocator reports."""

    def __init__(self, reserved: int = 0) -> None:
        self.allocated = 0
        self.reserved = reserved
        self.events: list[dict] = []
        self.held: dict[int, list[int]] = {}  # size -> addresses allocated, not yet released

    def change(self, ts: float, size: int, reserve: int = 0) -> None:
        """Allocate (size > 0, at a new address) or release (the latest allocation of that
        size, at its address); ``reserve`` grows the reserved total first."""
        self.allocated += size
        self.reserved = max(self.reserved + reserve, self.allocated)
        addr = (self.held.setdefault(size, []).append(0x7F0000000000 + len(self.events)) or
                self.held[size][-1]) if size > 0 else self.held[-size].pop()
        self.events.append(_memory_event(ts, size, totals=(self.allocated, self.reserved),
                                         addr=addr))


def _analysed(path: Path, settings: memory.TrainingSettings) -> tuple[MemoryStats, list]:
    """Memory statistics and findings of one trace file."""
    stats = memory.memory_stats([kineto.parse(path)])
    assert stats is not None
    return stats, find_all(RunMetrics(memory=stats), RunContext(settings=settings))


def _training(tmp_path: Path, *, kept_per_step: int, temporary: int, device_total: int,
              reserve_each_step: int = 0, fixed: int = GIB, steps: int = 4) -> Path:
    """A trace of ``steps`` steps: ``fixed`` bytes before the first, then per step
    ``temporary`` bytes allocated and released and ``kept_per_step`` bytes kept."""
    allocator = _Allocator()
    allocator.change(1.0, fixed, reserve=fixed)
    events = []
    for n in range(steps):
        start = 100.0 + n * 100
        events.append(_step_span(n + 1, start, 90.0))
        allocator.change(start + 10, temporary, reserve=reserve_each_step)
        if kept_per_step:
            allocator.change(start + 20, kept_per_step)
        allocator.change(start + 30, -temporary, reserve=-reserve_each_step)
    devices = [{"id": 0, "name": "Test GPU", "totalGlobalMem": device_total, "numSms": 1}]
    return _write_trace(tmp_path / "train.json", events + allocator.events, devices)


@pytest.mark.corpus
def test_resnet50_memory_analysis(resnet: Profile) -> None:
    """Relative levels (no totals in 2021): peak 2.79 GB above the window's start, net zero,
    every one of the 6 steps allocates the same; no headroom claim without absolute levels."""
    stats = memory.memory_stats([resnet])
    assert stats is not None
    gpu = next(d for d in stats.devices if d.device_kind == "cuda")
    assert gpu.basis == "relative to window start"
    assert gpu.events == RESNET_GPU_MEMORY_EVENTS
    assert gpu.peak_allocated == RESNET_PEAK_ABOVE_START
    assert gpu.net_bytes == 0
    assert gpu.total_bytes == V100_MEMORY and gpu.device_name == "Tesla V100-DGXS-32GB"
    assert [s.number for s in gpu.steps] == [5, 6, 7, 8, 9, 10]
    assert {s.peak_allocated for s in gpu.steps} == {RESNET_PEAK_ABOVE_START}
    assert len({(s.allocations, s.allocated_bytes) for s in gpu.steps}) == 1
    assert gpu.largest[0].bytes == max(s for s in resnet.table("memory")["bytes"])
    assert gpu.largest[0].op is not None and gpu.largest[0].step == 5
    findings = find_all(RunMetrics(memory=stats),
                        RunContext(settings=memory.TrainingSettings(batch_size=32)))
    assert "MEMORY_HEADROOM" not in {f.id for f in findings}  # a relative peak is a lower bound
    assert "MEMORY_GROWTH" not in {f.id for f in findings}


def test_growth_from_step_to_step_is_a_leak(tmp_path: Path) -> None:
    """4 MiB kept in each of 4 steps: the level ends every step higher, +12 MiB over them."""
    path = _training(tmp_path, kept_per_step=4 * MIB, temporary=64 * MIB, device_total=16 * GIB)
    stats, findings = _analysed(path, memory.TrainingSettings())
    device = stats.devices[0]
    assert device.basis == "absolute"
    assert [s.end_level - GIB for s in device.steps] == [4 * MIB, 8 * MIB, 12 * MIB, 16 * MIB]
    assert device.net_bytes == GIB + 16 * MIB
    growth = next(f for f in findings if f.id == "MEMORY_GROWTH")
    assert "12.6 MB (12.0 MiB)" in growth.evidence[0].text
    assert "loss.item()" in growth.recommendation
    # What is kept: the allocations of steps 1 to 3 (the last step's may be released after
    # the profiler stops); the temporaries are released at their addresses.
    assert device.held == [memory.HeldAllocations(None, 4 * MIB, 3, 3)]
    assert growth.evidence[1].text.startswith("outside any recorded operator: 3 allocations of "
                                              "4.2 MB (4.0 MiB) made over 3 steps are never "
                                              "released")


def test_held_allocations_need_addresses_and_repetition(tmp_path: Path) -> None:
    """Events without addresses cannot be paired (None: unknown); an allocation kept in one
    step only (optimizer state made once) is no group of held allocations."""
    path = _training(tmp_path, kept_per_step=0, temporary=64 * MIB, device_total=16 * GIB)
    document = json.loads(path.read_text())
    events = document["traceEvents"]
    once = _Allocator()
    once.change(110.0 + 15, 8 * MIB)  # in step 1 only, never released
    events.append(once.events[0])
    path.write_text(json.dumps(document))
    assert _analysed(path, memory.TrainingSettings())[0].devices[0].held == []
    two_steps = _training(tmp_path, kept_per_step=4 * MIB, temporary=64 * MIB,
                          device_total=16 * GIB, steps=2)
    assert _analysed(two_steps, memory.TrainingSettings())[0].devices[0].held is None
    for event in events:
        event.get("args", {}).pop("Addr", None)
    path.write_text(json.dumps(document))
    assert _analysed(path, memory.TrainingSettings())[0].devices[0].held is None


def test_step_without_events_does_not_hide_a_leak(tmp_path: Path) -> None:
    """A last step span with nothing in it (prof.step() opened it as the profiler stopped) is
    no step (see parsers.kineto._without_closing_span), and hides no leak."""
    path = _training(tmp_path, kept_per_step=4 * MIB, temporary=64 * MIB, device_total=16 * GIB)
    document = json.loads(path.read_text())
    document["traceEvents"].append(_step_span(5, 500.0, 90.0))
    path.write_text(json.dumps(document))
    stats, findings = _analysed(path, memory.TrainingSettings())
    assert [s.events for s in stats.devices[0].steps] == [3, 3, 3, 3]
    growth = next(f for f in findings if f.id == "MEMORY_GROWTH")
    assert "each of 4 steps" in growth.evidence[0].text


def test_steady_level_is_no_leak(tmp_path: Path) -> None:
    """Allocations that are all released within their step leave no growth finding."""
    path = _training(tmp_path, kept_per_step=0, temporary=64 * MIB, device_total=16 * GIB)
    _, findings = _analysed(path, memory.TrainingSettings())
    assert "MEMORY_GROWTH" not in {f.id for f in findings}


def test_headroom_suggests_batch_and_learning_rate(tmp_path: Path) -> None:
    """1 GiB fixed + 2 GiB per step on 16 GiB: the batch that fills 80% is 32 * (12.8 - 1) / 2
    = 188, learning rate 0.1 * sqrt(188 / 32) = 0.242."""
    path = _training(tmp_path, kept_per_step=0, temporary=2 * GIB, device_total=16 * GIB)
    stats, findings = _analysed(path, memory.TrainingSettings(batch_size=32, learning_rate=0.1))
    device = stats.devices[0]
    assert device.peak_allocated == 3 * GIB and device.peak_reserved == 3 * GIB
    advice = next(f for f in findings if f.id == "MEMORY_HEADROOM")
    assert "19%" in advice.title
    assert "from 32 to about 188" in advice.recommendation
    assert "from 0.1 to 0.242" in advice.recommendation


def test_peak_near_device_memory_is_an_oom_risk(tmp_path: Path) -> None:
    """3 GiB at peak on a 3.2 GiB device: above 90%, the fix names batch, checkpointing, AMP."""
    path = _training(tmp_path, kept_per_step=0, temporary=2 * GIB,
                     device_total=int(3.2 * GIB))
    _, findings = _analysed(path, memory.TrainingSettings(batch_size=32))
    risk = next(f for f in findings if f.id == "MEMORY_OOM_RISK")
    assert "94%" in risk.title
    assert "checkpoint" in risk.recommendation and "AMP" in risk.recommendation
    assert "MEMORY_HEADROOM" not in {f.id for f in findings}


def test_a_run_in_bf16_is_not_told_to_use_amp_against_oom(tmp_path: Path) -> None:
    """The same peak in a run whose matmuls and convolutions take bf16 inputs (their recorded
    dtypes): mixed precision is on already, so the fix names batch and checkpointing alone;
    fp32 inputs keep AMP among the levers."""
    from profreport.reports.analysis.results import OpDtypes

    path = _training(tmp_path, kept_per_step=0, temporary=2 * GIB,
                     device_total=int(3.2 * GIB))
    stats, _ = _analysed(path, memory.TrainingSettings(batch_size=32))

    def fix(precision: str) -> str:
        dtypes = OpDtypes("kineto", {"fp32": 0, "reduced": 0, "other": 0, "unrecorded": 0,
                                     precision: 9_000_000})
        found = find_all(RunMetrics(memory=stats, op_dtypes=dtypes), RunContext())
        return next(f for f in found if f.id == "MEMORY_OOM_RISK").recommendation

    assert fix("reduced").startswith(
        "Free room before it runs out: lower the per-process batch size, or recompute "
        "activations in backward (torch.utils.checkpoint on the largest blocks); set ")
    assert "or train in mixed precision (AMP halves activations)" in fix("fp32")


def test_reserving_in_every_step_is_churn(tmp_path: Path) -> None:
    """Reserved memory grown and given back inside every step: the allocator calls the driver."""
    path = _training(tmp_path, kept_per_step=0, temporary=512 * MIB, device_total=16 * GIB,
                     reserve_each_step=GIB)
    stats, findings = _analysed(path, memory.TrainingSettings())
    assert stats.devices[0].driver_calls_per_step == 2.0
    assert stats.devices[0].reserved_gap_bytes == GIB
    assert "MEMORY_CHURN" in {f.id for f in findings}
    steady = _training(tmp_path, kept_per_step=0, temporary=512 * MIB, device_total=16 * GIB)
    assert _analysed(steady, memory.TrainingSettings())[0].devices[0].driver_calls_per_step == 0


def _recompiling(path: Path, recompiling: int) -> Path:
    """Six 90 µs steps (1 to 6) that each keep 4 MiB (a leak); in step ``recompiling``
    torch.compile compiles again (Dynamo's entire_frame_compile) and its new graph takes five
    16 MiB segments from the driver and keeps them."""
    allocator = _Allocator()
    allocator.change(1.0, GIB, reserve=2 * GIB)  # room for the leak: reserved only by the compile
    events = []
    for n in range(1, 7):
        start = n * 100.0
        events.append(_step_span(n, start, 90.0))
        allocator.change(start + 10, 4 * MIB)
        if n == recompiling:
            events.append({"ph": "X", "cat": "cpu_op", "name": "entire_frame_compile", "pid": 7,
                           "tid": 7, "ts": start + 20, "dur": 60.0})
            for k in range(5):
                allocator.change(start + 30 + k, 16 * MIB, reserve=16 * MIB)
    devices = [{"id": 0, "name": "Test GPU", "totalGlobalMem": 16 * GIB, "numSms": 1}]
    return _write_trace(path, events + allocator.events, devices)


def test_a_recompiling_step_is_left_out_of_the_per_step_memory_figures(tmp_path: Path) -> None:
    """Six steps that each keep 4 MiB (a leak); in step 4 torch.compile compiles again (Dynamo's
    entire_frame_compile) and its new graph takes five 16 MiB segments from the driver and keeps
    them. The step figures leave step 4 out, and so do the memory ones: no step lists it, no
    driver call per step (it read 1.0 with the compile: MEMORY_CHURN), the leak grows 4 MiB per
    step (it read 20.0 MiB, the compile's 80 MiB in it) and the held group counts steps 1, 2, 3
    and 5 (it read 5 allocations over 5 steps)."""
    path = _recompiling(tmp_path / "recompile.json", 4)
    stats, findings = _analysed(path, memory.TrainingSettings())
    device = stats.devices[0]
    assert [s.number for s in device.steps] == [1, 2, 3, 5, 6]
    assert [s.follows for s in device.steps] == [True, True, True, False, True]
    assert device.driver_calls_per_step == 0
    assert "MEMORY_CHURN" not in {f.id for f in findings}
    growth = next(f for f in findings if f.id == "MEMORY_GROWTH")
    assert ("the level at the end of each of 5 steps is above the previous one, +12.6 MB "
            "(12.0 MiB) in all (+4.2 MB (4.0 MiB) per step)") in growth.evidence[0].text
    assert device.held == [memory.HeldAllocations(None, 4 * MIB, 4, 4)]


def test_the_last_kept_step_counts_for_held_memory_when_a_training_step_follows(
        tmp_path: Path) -> None:
    """Six steps that each keep 4 MiB; torch.compile compiles again in the last, step 6 (an
    epoch's smaller last batch recompiles), so the per-step figures count steps 1 to 5. The
    held group left step 5 out as if it were the last recorded ("4 allocations over 4 steps"),
    though step 6, a training iteration, is recorded after it: what step 5 would release in the
    next iteration, the trace shows released. It counts 5 over 5 now. Evaluation-only steps
    after the last training step are another loop's: that step stays left out."""
    stats, _ = _analysed(_recompiling(tmp_path / "recompile.json", 6), memory.TrainingSettings())
    device = stats.devices[0]
    assert [s.number for s in device.steps] == [1, 2, 3, 4, 5]
    assert device.held == [memory.HeldAllocations(None, 4 * MIB, 5, 5)]
    allocator = _Allocator()
    allocator.change(1.0, GIB, reserve=2 * GIB)
    events = []
    for n in range(1, 8):
        start = n * 100.0
        events += [_step_span(n, start, 90.0),
                   {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": 7,
                    "ts": start + 5, "dur": 20.0}]
        if n <= 5:  # training: a backward pass, and 4 MiB kept
            events.append({"ph": "X", "cat": "cpu_op", "pid": 7, "tid": 7, "ts": start + 40,
                           "dur": 20.0,
                           "name": "autograd::engine::evaluate_function: MmBackward0"})
            allocator.change(start + 70, 4 * MIB)
    devices = [{"id": 0, "name": "Test GPU", "totalGlobalMem": 16 * GIB, "numSms": 1}]
    path = _write_trace(tmp_path / "evaluate.json", events + allocator.events, devices)
    stats, _ = _analysed(path, memory.TrainingSettings())
    assert [s.number for s in stats.devices[0].steps] == [1, 2, 3, 4, 5]
    assert stats.devices[0].held == [memory.HeldAllocations(None, 4 * MIB, 4, 4)]


def test_the_memory_chart_names_a_step_left_out_as_such(tmp_path: Path) -> None:
    """The memory chart draws the first three recorded steps, step 2 recompiling among them: its
    mark read "step 2" like the others although the per-step figures leave it out. It says so
    now, and why."""
    from profreport.reports.render.charts import memory_figure

    stats, _ = _analysed(_recompiling(tmp_path / "recompile.json", 2), memory.TrainingSettings())
    device = stats.devices[0]
    assert [s.number for s in device.steps] == [1, 3, 4, 5, 6]
    assert device.timeline_steps == [
        (0, "step 1"), (100_000, "step 2 (left out: torch.compile compiling again)"),
        (200_000, "step 3")]
    figure = memory_figure(device)
    assert [a.text for a in figure.layout.annotations] == [
        "step 1", "step 2 (left out: torch.compile compiling again)", "step 3", "device memory"]


# A CPU training loop under torch.profiler(profile_memory=True), current trace format. With
# "leak" it keeps every step's hidden activations (512 x 512 floats, 1 MiB) "for logging".
MEMORY_TRACE_SCRIPT = """
import sys
import torch
from torch.profiler import ProfilerActivity, profile, schedule

torch.manual_seed(0)
first, second = torch.nn.Linear(256, 512), torch.nn.Linear(512, 1)
params = [*first.parameters(), *second.parameters()]
optimizer = torch.optim.SGD(params, lr=0.1)
kept = []
with profile(activities=[ProfilerActivity.CPU], profile_memory=True,
             schedule=schedule(wait=0, warmup=2, active=5, repeat=1),
             on_trace_ready=lambda prof: prof.export_chrome_trace(sys.argv[1])) as prof:
    for _ in range(7):
        hidden = torch.relu(first(torch.randn(512, 256)))
        loss = second(hidden).pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if sys.argv[2] == "leak":
            kept.append(hidden)
        prof.step()
"""
ACTIVE_STEPS = 5


def _memory_trace(folder: Path, mode: str) -> Path:
    """Run the training above (``leak`` or ``clean``) and return its trace."""
    import subprocess
    import sys

    pytest.importorskip("torch")
    out = folder / f"{mode}.pt.trace.json"
    subprocess.run([sys.executable, "-c", MEMORY_TRACE_SCRIPT, str(out), mode], check=True,
                   capture_output=True, timeout=300)
    return out


@pytest.mark.slow
def test_real_trace_levels_and_a_real_leak(tmp_path: Path) -> None:
    """A real current-format trace: the CPU allocator's totals move by each event's size (they
    count from when memory profiling started); keeping each step's activations grows memory
    every step by their 1 MiB."""
    clean = kineto.parse(_memory_trace(tmp_path, "clean"))
    memory_table = clean.table("memory")
    host = memory_table[memory_table["device_kind"] == "cpu"]
    assert len(host) > 0 and (host["total_allocated"] >= 0).all()
    totals = host["total_allocated"].to_numpy()
    assert (totals[1:] - totals[:-1] == host["bytes"].to_numpy()[1:]).all()
    stats, findings = _analysed(clean.path, memory.TrainingSettings())
    device = stats.devices[0]
    # The steps the step figures count: the first active one is left out where its length
    # makes it start-up (shape.find_warmup), as it is on a loaded machine.
    counted = step_windows(clean).numbers.tolist()
    assert device.basis == "relative to profiling start"
    assert [s.number for s in device.steps] == counted and len(counted) >= ACTIVE_STEPS - 1
    assert "MEMORY_GROWTH" not in {f.id for f in findings}
    leak = kineto.parse(_memory_trace(tmp_path, "leak"))
    _, leaking = _analysed(leak.path, memory.TrainingSettings())
    steps = step_windows(leak).count
    growth = next(f for f in leaking if f.id == "MEMORY_GROWTH")
    assert f"each of {steps} steps" in growth.evidence[0].text
    assert "(+1.0 MB (1.0 MiB) per step)" in growth.evidence[0].text
    # The kept activation, by the operators that made it, in every step but the last.
    assert growth.evidence[1].text.startswith(
        f"aten::relu › aten::clamp_min: {steps - 1} allocations of 1.0 MB (1.0 MiB) "
        f"made over {steps - 1} steps are never released")


def test_the_memory_of_each_profiling_cycle_names_its_file(tmp_path: Path) -> None:
    """torch.profiler's schedule with repeat=3 and tensorboard_trace_handler: one file per
    cycle, of one process, none recording a rank. Each file's memory is a row of the memory
    view, named by its file (the rows read 'cuda:0' alone, three times); a single file's row
    names nothing, as before."""
    from profreport.executors import ExecutorOptions
    from profreport.reports.analysis.analyze import AnalyzeOptions, analyze_paths
    from profreport.reports.render.markdown import render_markdown

    folder = tmp_path / "run"
    folder.mkdir()
    for cycle in range(3):
        at = 1_000_000 * cycle
        events = [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{cycle * 2 + i}",
                   "pid": 7, "tid": 7, "ts": at + 100 * i, "dur": 100} for i in range(2)]
        events += [_memory_event(at + 10 + 100 * i, (cycle + 1) << 20,
                                 totals=((cycle + 1) << 20, 4 << 20)) for i in range(2)]
        _write_trace(folder / f"host_7.{cycle}.pt.trace.json", events)
    options = AnalyzeOptions(executor=ExecutorOptions(processes=1))
    report = analyze_paths([folder], options)
    devices = report.runs[0].metrics.memory.devices
    assert [(d.source_label, d.peak_allocated) for d in devices] == [
        (f"host_7.{cycle}.pt.trace.json", (cycle + 1) << 20) for cycle in range(3)]
    markdown = render_markdown(report)
    assert "| host\\_7.1.pt.trace.json, cuda:0 | torch.profiler (allocated) |" in markdown
    alone = analyze_paths([folder / "host_7.0.pt.trace.json"], options)
    assert alone.runs[0].metrics.memory.devices[0].source_label is None


def test_growth_of_host_and_gpu_memory_names_both(tmp_path: Path) -> None:
    """The GPU keeps 4 MiB a step and the host 8 MiB: both levels end every step higher, and
    the finding names both, the host's larger growth first (it named the host alone, and the
    GPU leak was left out)."""
    path = _training(tmp_path, kept_per_step=4 * MIB, temporary=64 * MIB, device_total=16 * GIB)
    document = json.loads(path.read_text())
    document["traceEvents"] += [
        _memory_event(100.0 + n * 100 + 40, 8 * MIB, device_type=0, device=-1,
                      totals=((n + 1) * 8 * MIB, 0), addr=0x1000 + n) for n in range(4)]
    path.write_text(json.dumps(document))
    _, findings = _analysed(path, memory.TrainingSettings())
    growth = next(f for f in findings if f.id == "MEMORY_GROWTH")
    levels = [e.text for e in growth.evidence if "the level at the end" in e.text]
    assert [text.split(": the")[0] for text in levels] == ["host memory", "cuda:0 (Test GPU)"]
    assert "+25.2 MB (24.0 MiB) in all" in levels[0] and "+12.6 MB (12.0 MiB) in all" in levels[1]
