"""A differential check: the headline figures of each corpus file recomputed by a simpler route
(plain ``json`` over the Kineto events, plain ``sqlite3`` over the nsys export), independently of
profreport's parsers and analysis, and compared with what the analysis reports.

Figures: step count and mean annotated step time, kernels and NCCL kernels launched per step
(kernel -> launching runtime call by correlation id, call start inside a step window), compute
kernel time (kernels that are not NCCL), and the GPU busy share of the step windows (union of
kernel, copy and memset intervals). Step windows as the README defines them: from a step's
start to the next step's start, the last one its own range.
"""

from __future__ import annotations

import gzip
import json
import re
import sqlite3
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from profreport.parsers import ParseOptions, parse_file
from profreport.reports.analysis.metrics import compute_run_metrics

_STEP = re.compile(r"^(?:ProfilerStep#|step )(\d+)$")
_KINETO_GPU = {"kernel": "kernel", "Kernel": "kernel", "gpu_memcpy": "copy", "Memcpy": "copy",
               "gpu_memset": "copy", "Memset": "copy"}
_KINETO_LAUNCHERS = {"cuda_runtime", "Runtime", "cuda_driver"}


@dataclass
class Raw:
    """What the simple route reads from a file."""

    steps: list[tuple[int, int]]
    #: (start, end, device, is_kernel, is_nccl, launch start or None)
    gpu: list[tuple[int, int, int, bool, bool, int | None]]


def windows_of(steps: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Step windows: start to the next start (or the range's end when it runs past it)."""
    out = []
    for i, (start, end) in enumerate(steps):
        out.append((start, max(steps[i + 1][0], end) if i + 1 < len(steps) else end))
    return out


def inside(t: int, windows: list[tuple[int, int]]) -> bool:
    """Whether time ``t`` lies in a window."""
    return any(a <= t < b for a, b in windows)


def merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Union of intervals."""
    out: list[list[int]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def figures(raw: Raw) -> dict[str, float]:
    """The headline figures from the raw events."""
    windows = windows_of(raw.steps)
    n = len(raw.steps)
    launched = [g for g in raw.gpu if g[3] and inside(g[5] if g[5] is not None else g[0],
                                                       windows)]
    busy = 0
    devices = sorted({g[2] for g in raw.gpu})
    for device in devices:
        for a, b in merged([(g[0], g[1]) for g in raw.gpu if g[2] == device]):
            busy += sum(max(0, min(b, wb) - max(a, wa)) for wa, wb in windows)
    total = sum(b - a for a, b in windows)
    return {"steps": n, "step_mean_ns": sum(e - s for s, e in raw.steps) / n,
            "kernels_per_step": len(launched) / n,
            "nccl_per_step": sum(g[4] for g in launched) / n,
            "compute_kernel_ns": sum(g[1] - g[0] for g in raw.gpu if g[3] and not g[4]),
            "busy_fraction": busy / (total * len(devices))}


def _ns(us: float) -> int:
    """Kineto microseconds to integer ns."""
    return round(us * 1000)


def read_kineto(path: Path) -> Raw:
    """Steps and GPU rows straight from the trace's events."""
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    launches = {e["args"]["correlation"]: _ns(e["ts"]) for e in events
                if e.get("cat") in _KINETO_LAUNCHERS and "correlation" in e.get("args", {})}
    first: dict[int, tuple[int, int]] = {}
    for e in events:
        match = _STEP.match(str(e.get("name", "")))
        if match and e.get("ph") == "X" and e.get("cat") != "gpu_user_annotation":
            span = (_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"]))
            number = int(match.group(1))
            if number not in first or span[0] < first[number][0]:
                first[number] = span
    gpu = [(_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"]), int(e["args"].get("device", 0)),
            _KINETO_GPU[e["cat"]] == "kernel", "nccl" in e["name"].lower(),
            launches.get(e["args"].get("correlation")))
           for e in events if e.get("cat") in _KINETO_GPU and e.get("ph") == "X"]
    return Raw(steps=sorted(first.values()), gpu=gpu)


def read_nsys(sqlite: Path) -> Raw:
    """Steps and GPU rows with plain SQL over the export."""
    db = sqlite3.connect(sqlite)
    strings = dict(db.execute("SELECT id, value FROM StringIds"))
    first: dict[int, tuple[int, int]] = {}
    for start, end, text, text_id in db.execute(
            "SELECT start, end, text, textId FROM NVTX_EVENTS WHERE end IS NOT NULL "
            "ORDER BY start"):
        match = _STEP.match(text if text is not None else strings.get(text_id, ""))
        if match and int(match.group(1)) not in first:
            first[int(match.group(1))] = (start, end)
    launches = dict(db.execute("SELECT correlationId, min(start) FROM CUPTI_ACTIVITY_KIND_RUNTIME "
                               "GROUP BY correlationId"))
    gpu = [(s, e, d, True, "nccl" in strings[name].lower(), launches.get(c))
           for s, e, d, name, c in db.execute(
               "SELECT start, end, deviceId, demangledName, correlationId "
               "FROM CUPTI_ACTIVITY_KIND_KERNEL")]
    for table in ("CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
        gpu += [(s, e, d, False, False, None)
                for s, e, d in db.execute(f"SELECT start, end, deviceId FROM {table}")]
    return Raw(steps=sorted(first.values()), gpu=gpu)


def analysed(path: Path, cache: Path) -> dict[str, float]:
    """The same figures from profreport's analysis."""
    m = compute_run_metrics([parse_file(path, ParseOptions(cache_dir=cache))])
    return {"steps": m.steps.count, "step_mean_ns": m.steps.mean_ns,
            "kernels_per_step": m.launch.kernels_per_step,
            "nccl_per_step": m.comm.calls_per_step if m.comm is not None else 0.0,
            "compute_kernel_ns": m.kernel_mix.compute_kernel_ns,
            "busy_fraction": m.gpu.busy_fraction}


def compare(simple: dict[str, float], ours: dict[str, float]) -> None:
    """Counts exactly; times to the ns rounding of the means; the busy share to 1e-6."""
    assert ours["steps"] == simple["steps"]
    assert ours["step_mean_ns"] == pytest.approx(simple["step_mean_ns"], abs=1)
    assert ours["kernels_per_step"] == pytest.approx(simple["kernels_per_step"], abs=1e-9)
    assert ours["nccl_per_step"] == pytest.approx(simple["nccl_per_step"], abs=1e-9)
    assert ours["compute_kernel_ns"] == pytest.approx(simple["compute_kernel_ns"], rel=1e-9)
    assert ours["busy_fraction"] == pytest.approx(simple["busy_fraction"], abs=1e-6)


@pytest.mark.parametrize("name", ["kineto/resnet50_num_workers_0.pt.trace.json.gz",
                                  "kineto/resnet50_num_workers_4.pt.trace.json.gz",
                                  "hta/nccl_data.json.gz", "hta/cuda_event_sync.json.gz",
                                  "hta/triton_example.json.gz"])
def test_kineto_headline_figures(corpus: Path, tmp_path: Path, name: str) -> None:
    """Kineto traces (both formats): the analysis agrees with plain json."""
    compare(figures(read_kineto(corpus / name)), analysed(corpus / name, tmp_path))


@pytest.mark.parametrize("name", ["sc22_1gpu_baseline", "sc22_4gpu_baseline"])
def test_nsys_headline_figures(corpus: Path, nsys_available: str, nsys_cache_dir: Path,
                               tmp_path: Path, name: str) -> None:
    """nsys reports: the analysis agrees with plain sqlite3 over nsys's own export."""
    report = corpus / "nsys" / f"{name}.nsys-rep"
    sqlite = tmp_path / f"{name}.sqlite"
    subprocess.run([nsys_available, "export", "--type", "sqlite", "--output", str(sqlite),
                    str(report)], check=True, capture_output=True, timeout=300)
    compare(figures(read_nsys(sqlite)), analysed(report, nsys_cache_dir))
