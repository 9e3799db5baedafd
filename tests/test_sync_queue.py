"""What a blocking call waited for: the GPU work queued when it began, counted from launch and
kernel correlation, on a hand-built sync-bound Kineto trace (the sync-bound reason used to say
"with nothing more queued" while hundreds of kernels were pending)."""

from __future__ import annotations

import json
from pathlib import Path

from profreport.reports.analysis.analyze import AnalyzeOptions, analyze_paths

KERNEL = "volta_sgemm_128x64_nn"


def write_sync_trace(path: Path, steps: int = 4, kernels: int = 40) -> Path:
    """Each 10 ms step launches ``kernels`` kernels of 100 µs in the first 400 µs, then reads a
    value back with a blocking cudaMemcpyAsync into pageable memory (it waits for all of them),
    then the CPU works 5 ms before the next step: the GPU idles after the copy."""
    events, corr = [], 1
    for n in range(steps):
        ts = 1000 + n * 10_000
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}",
                       "pid": 1, "tid": 1, "ts": ts, "dur": 9_990, "args": {}})
        for k in range(kernels):
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel",
                           "pid": 1, "tid": 1, "ts": ts + 10 * k, "dur": 5,
                           "args": {"correlation": corr}})
            events.append({"ph": "X", "cat": "kernel", "name": KERNEL, "pid": 0, "tid": 7,
                           "ts": ts + 20 + 100 * k, "dur": 100,
                           "args": {"correlation": corr, "stream": 7, "device": 0}})
            corr += 1
        copy_at = ts + 20 + 100 * kernels
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 1,
                       "tid": 1, "ts": ts + 10 * kernels + 10,
                       "dur": copy_at + 10 - (ts + 10 * kernels + 10),
                       "args": {"correlation": corr}})
        events.append({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pageable)",
                       "pid": 0, "tid": 7, "ts": copy_at, "dur": 5,
                       "args": {"correlation": corr, "stream": 7, "device": 0, "bytes": 4}})
        corr += 1
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    return path


def test_the_sync_bound_reason_counts_the_work_the_copy_waited_for(tmp_path: Path) -> None:
    """The blocking copy begins 410 µs into the step, when all 40 kernels are launched and the
    first three (ending at 120, 220 and 320 µs) have run: 37 are queued or running (launch calls
    joined to the kernels by correlation id). The reason says it waited for those 37, then the
    GPU had nothing more, not that nothing was queued."""
    run = analyze_paths([write_sync_trace(tmp_path / "sync.pt.trace.json")],
                        AnalyzeOptions()).runs[0]
    call = run.metrics.syncs.calls[0]
    assert call.name == "cudaMemcpyAsync DtoH to pageable" and call.queued == (37, 37)
    assert run.verdict == "sync-bound"
    assert "which waited for the 37 GPU operations queued before it" in run.verdict_reason
    assert "nothing more queued" not in run.verdict_reason
