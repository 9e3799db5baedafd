"""The JSON report, schema ``profreport/1``: a public, stable interface for scripts and graders.

Top level: ``schema``, ``generated_by``, ``title``, ``runs``, ``comparison`` (or null),
``failures``. Times are milliseconds (``*_ms``) or seconds (``time_s``); fractions are 0..1; a
metric is null where the run's sources cannot tell. Output is deterministic: keys sorted, lists in
a meaningful order (findings: the one explaining the verdict first, then by severity; top
lists by time) or sorted.
"""

from __future__ import annotations

import json
from typing import Any

from profreport.reports.analysis.results import (
    AllReduceSizes,
    Breakdown,
    Comparison,
    CpuOpMix,
    DeviceMemory,
    Finding,
    JobAnalysis,
    KernelMix,
    LineItem,
    MemoryStats,
    PerStep,
    Report,
    RunAnalysis,
    RunMetrics,
    ScalingStudy,
    SharedCpu,
    StepShape,
    StepStats,
    TopItem,
    TraceLocation,
    Trials,
)
from profreport.units import NS_PER_S, ms_value


def _ms(ns: float | None) -> float | None:
    """Nanoseconds to milliseconds (3 decimals), None stays None."""
    return None if ns is None else ms_value(ns)


def _frac(value: float | None) -> float | None:
    """A fraction rounded to 4 decimals."""
    return None if value is None else round(float(value), 4)


def _step_time(steps: StepStats | None) -> dict[str, float | None] | None:
    """mean/p50/p90/min/max of the step time in ms."""
    if steps is None:
        return None
    return {"mean": _ms(steps.mean_ns), "p50": _ms(steps.p50_ns), "p90": _ms(steps.p90_ns),
            "min": _ms(steps.min_ns), "max": _ms(steps.max_ns)}


def metrics_json(m: RunMetrics) -> dict[str, Any]:
    """The documented metric keys of one run."""
    comm, launch, copies, gpu, idle = m.comm, m.launch, m.copies, m.gpu, m.gpu_idle
    return {
        "steps": m.steps.count if m.steps else None,
        "steps_origin": m.steps.origin if m.steps else None,
        "steps_marker": m.steps.marker if m.steps else None,
        "step_time_ms": _step_time(m.steps),
        "step_shape": _shape(m.shape),
        "wall_step_time_ms": _ms(m.steps.wall_mean_ns) if m.steps else None,
        "wall_step_intervals": m.steps.wall_intervals if m.steps else None,
        "gpu_busy_fraction": _frac(gpu.busy_fraction) if gpu else None,
        "gpu_window_ms": _ms(gpu.window_ns) if gpu else None,
        "gpu_window_devices": len(gpu.per_device) if gpu else None,
        "gpu_busy_ms": _ms(gpu.busy_ns) if gpu else None,
        "long_idle_gaps": gpu.long_gap_count if gpu else None,
        "long_idle_gap_threshold_ms": _ms(gpu.long_gap_ns) if gpu else None,
        "dataloader_fraction": _frac(m.dataloader_fraction),
        "dataloader_fraction_by_origin": {k: _frac(v) for k, v in
                                          sorted(m.dataloader_fraction_by_origin.items())},
        "comm_fraction": _frac(comm.fraction) if comm else None,
        "comm_exposed_fraction": _frac(comm.exposed_fraction) if comm else None,
        "comm_overlap_fraction": _frac(comm.overlap_fraction) if comm else None,
        "comm_calls_per_step": round(comm.calls_per_step, 3) if comm else None,
        "comm_calls_unknown_reason": comm.calls_unknown if comm else None,
        "comm_on_gpu": comm.on_gpu if comm else None,
        "comm_ms_per_step_by_collective": ({kind: _ms(ns) for kind, ns in
                                            comm.ns_per_step_by_collective.items()}
                                           if comm else None),
        "comm_all_reduce_sizes": _all_reduce_sizes(comm.all_reduce_sizes if comm else None),
        "comm_all_reduce_sizes_unknown_reason": comm.sizes_unknown if comm else None,
        "h2d_bytes": copies.h2d_bytes if copies else None,
        "h2d_pageable_bytes": copies.h2d_pageable_bytes if copies else None,
        "h2d_pageable_unknown_reason": copies.h2d_kinds_unknown if copies else None,
        "h2d_unsized_copies": copies.h2d_unsized if copies else None,
        "sync_api_calls": copies.sync_api_calls if copies else None,
        "launch_origin": launch.origin if launch else None,
        "kernels_per_step": round(launch.kernels_per_step, 3) if launch else None,
        "kernels_per_step_unknown_reason": launch.kernels_unknown if launch else None,
        "short_kernel_fraction": _frac(launch.short_kernel_fraction) if launch else None,
        "short_kernel_threshold_ms": _ms(launch.short_kernel_ns) if launch else None,
        "gpu_kernel_ms_per_step": _ms(launch.gpu_kernel_ns_per_step) if launch else None,
        "runtime_ms_per_step": _ms(launch.runtime_ns_per_step) if launch else None,
        "launch_delay_p50_ms": _ms(launch.launch_delay_p50_ns) if launch else None,
        "launch_delay_kernels": launch.launch_delay_kernels if launch else None,
        "launch_delay_skewed_kernels": launch.launch_delay_skewed if launch else None,
        "launch_delay_waited_kernels": launch.launch_delay_waited if launch else None,
        "launch_delay_wait_unknown_kernels": launch.launch_delay_wait_unknown if launch
        else None,
        "launch_delay_waits_recorded": launch.waits_recorded if launch else None,
        "queued_launch_fraction": _frac(launch.queued_launch_fraction) if launch else None,
        "launch_delay_unknown_reason": launch.launches_unknown if launch else None,
        "idle_launch_unknown_ms_per_step": _ms(idle.launch_unknown_ns_per_step)
        if idle is not None and idle.launch_unknown_ns_per_step is not None else None,
        "idle_launch_unknown_reason": idle.launch_unknown if idle else None,
        "throughput_samples_per_s": m.throughput_samples_per_s,
        "per_rank_step_ms": {str(k): _ms(v) for k, v in m.per_rank_step_ns.items()},
        "per_rank_steps_note": m.per_rank_steps_note,
        "cpu_phases": ({k: _frac(v) for k, v in sorted(m.cpu_phases.fractions.items())}
                       if m.cpu_phases else None),
        "trials": _trials(m.trials),
        "plain_cpu": _plain_cpu(m.plain_cpu),
        "kernel_mix": _kernel_mix(m.kernel_mix),
        "cpu_op_mix": _cpu_op_mix(m.cpu_op_mix),
        "compiled_regions": m.compiled_regions,
        "conv_formats": None if m.conv_formats is None else {
            "convolutions": m.conv_formats.convolutions,
            "channels_last": m.conv_formats.channels_last,
            "contiguous": m.conv_formats.contiguous},
    }


def _all_reduce_sizes(s: AllReduceSizes | None) -> dict[str, Any] | None:
    """The steps' all-reduces for DDP's gradient buckets: calls and bytes per step."""
    if s is None:
        return None
    return {"calls_per_step": round(s.calls_per_step, 3), "bytes_per_step": s.bytes_per_step,
            "largest_bytes": s.largest_bytes, "median_bytes": s.median_bytes,
            "sizes_bytes": list(s.sizes_bytes),
            "others_per_step": round(s.others_per_step, 3)}


def _per_step(d: PerStep | None) -> dict[str, Any] | None:
    """A per-step figure's spread in ms, with its outliers (step, time in the trace's clock)."""
    if d is None:
        return None
    return {"median": _ms(d.median_ns), "p90": _ms(d.p90_ns), "min": _ms(d.min_ns),
            "max": _ms(d.max_ns), "steps": d.count, "outlier_count": d.outlier_count,
            "outliers": [{"step": o.number, "ms": _ms(o.value_ns)} for o in d.outliers],
            "period": d.period, "steady_median": _ms(d.steady_ns),
            "outlier_gpu_busy": _frac(d.outlier_gpu_busy)}


def _shape(s: StepShape | None) -> dict[str, Any] | None:
    """Start-up and the spread of the step window and the DataLoader wait."""
    if s is None:
        return None
    w = s.warmup
    return {"origin": s.origin,
            "warmup": None if w is None else {
                "step": w.number, "duration_ms": _ms(w.duration_ns),
                "others_median_ms": _ms(w.others_median_ns), "setup_calls": w.setup_calls,
                "startup_only": w.only,
                "loader_fill_ms": None if w.loader_fill is None
                else [_ms(v) for v in w.loader_fill],
                "steps_before": w.steps_before},
            "compiling": [{"step": number, "ms": _ms(ns), "left_out": s.compiling_left_out}
                          for number, ns in s.compiling],
            "evaluating": list(s.evaluating),
            "step_window_ms": _per_step(s.step_window),
            "dataloader_wait_ms": _per_step(s.dataloader_wait)}


def _trials(t: Trials | None) -> dict[str, float | None] | None:
    """The runner's trials, samples/s."""
    return None if t is None else {"io": t.io, "synthetic": t.synthetic, "full": t.full}


def _plain_cpu(c: SharedCpu | None) -> dict[str, Any] | None:
    """The unprofiled run's CPU time beside the rest of its machine's."""
    if c is None:
        return None
    return {"wall_ms": _ms(c.wall_ns), "cpu_ms": _ms(c.cpu_ns), "other_cpu_ms": _ms(c.other_cpu_ns),
            "cpus": c.cpus, "other_share": _frac(c.other_share), "idle_share": _frac(c.idle_share),
            "shared": c.shared}


def _kernel_mix(k: KernelMix | None) -> dict[str, Any] | None:
    """Precision, layout conversions, elementwise share and optimizer kernels."""
    if k is None:
        return None
    per_step = k.optimizer_kernels_per_step
    return {"reduced_precision_fraction": _frac(k.reduced_precision_fraction),
            "layout_conversion_fraction": _frac(k.layout_conversion_fraction),
            "elementwise_fraction": _frac(k.elementwise_fraction),
            "unnamed_kernel_fraction": _frac(k.unnamed_kernel_fraction),
            "names_unknown": k.names_unknown,
            "optimizer_kernels_per_step": None if per_step is None else round(per_step, 3),
            "optimizer_unlinked_kernels_per_step": None if k.optimizer_unlinked_per_step is None
            else round(k.optimizer_unlinked_per_step, 3),
            "fused_optimizer": k.fused_optimizer, "launches_unknown": k.launches_unknown,
            "source": k.origin}


def _cpu_op_mix(c: CpuOpMix | None) -> dict[str, Any] | None:
    """Slow-fallback and oneDNN shares of CPU operator self time."""
    if c is None:
        return None
    return {"slow_fallback_fraction": _frac(c.slow_fallback_fraction),
            "onednn_fraction": _frac(c.onednn_fraction),
            "slow_fallback_ops": c.slow_fallback_ops, "source": c.origin}


def _breakdown(b: Breakdown | None) -> dict[str, float | None] | None:
    """{part: ms per step, null where unmeasured}, plus the overlapped communication."""
    if b is None:
        return None
    out = {part: _ms(ns) if part in b.measured else None for part, ns in b.parts_ns.items()}
    out["comm_overlapped"] = _ms(b.comm_overlapped_ns)
    return out


def _finding(f: Finding) -> dict[str, Any]:
    """One finding."""
    return {"id": f.id, "severity": f.severity, "title": f.title,
            "evidence": [{"text": e.text, "source": e.origin, "at": _location(e.at)}
                         for e in f.evidence],
            "recommendation": f.recommendation}


def _location(at: TraceLocation | None) -> dict[str, Any] | None:
    """Where a piece of evidence lies: file, and offset and duration in ms."""
    if at is None:
        return None
    return {"file": at.file, "offset_ms": _ms(at.offset_ns), "duration_ms": _ms(at.duration_ns)}


def _top(item: TopItem) -> dict[str, Any]:
    """One top-list entry."""
    return {"name": item.name, "total_ms": _ms(item.total_ns), "count": item.count,
            "share": _frac(item.share)}


def _line(line: LineItem) -> dict[str, Any]:
    """One line_profiler line."""
    return {"profile": line.profile, "file": line.file, "function": line.function,
            "lineno": line.lineno, "hits": line.hits, "time_s": round(line.time_ns / NS_PER_S, 6),
            "share": _frac(line.share), "source": line.source,
            "is_dataloader_loop": line.is_dataloader_loop, "is_sync_point": line.is_sync_point}


def run_json(run: RunAnalysis) -> dict[str, Any]:
    """One run."""
    m = run.metrics
    return {
        "name": run.name,
        "sources": [{"path": s.path, "kind": s.kind, "tool_version": s.tool_version,
                     "rank": s.rank} for s in run.inputs],
        "verdict": run.verdict, "verdict_reason": run.verdict_reason,
        "verdict_confidence": run.verdict_confidence,
        "verdict_margin": _frac(run.verdict_margin),
        "metrics": metrics_json(m), "breakdown": _breakdown(m.breakdown),
        "findings": [_finding(f) for f in run.findings],
        "top_kernels": [_top(k) for k in m.top_kernels],
        "top_ops": [_top(k) for k in m.top_ops],
        "top_ops_share_of": m.top_ops_share_of,
        "lines": [_line(line) for line in m.lines],
        "knobs": run.knobs, "environment": run.environment, "notes": run.notes,
        "memory": memory_json(m.memory), "world_size": run.world_size,
        "job": job_json(run.job), "detailed_rank": run.detailed_rank,
    }


def job_json(job: JobAnalysis | None) -> dict[str, Any] | None:
    """The ranks of a job analysed together; None for one process."""
    if job is None:
        return None
    return {"verdict": job.verdict, "verdict_reason": job.verdict_reason,
            "slowest_rank": job.slowest_rank, "slowest_step_ms": _ms(job.slowest_step_ns),
            "others_step_ms": _ms(job.others_step_ns), "straggler": job.straggler,
            "disagreement": job.disagreement, "paced_by": job.paced_by,
            "steps_origin": job.steps_origin, "steps_unknown_reason": job.steps_unknown_reason,
            "common_steps_note": job.common_steps_note,
            "ranks": [{"rank": r.rank, "process": r.process, "verdict": r.verdict,
                       "verdict_reason": r.verdict_reason,
                       "step_ms": _ms(r.step_ns), "comm_fraction": _frac(r.comm_fraction),
                       "comm_exposed_fraction": _frac(r.comm_exposed_fraction)}
                      for r in job.ranks]}


def comparison_json(c: Comparison | None) -> dict[str, Any] | None:
    """The comparison against the baseline."""
    if c is None:
        return None
    return {"baseline": c.baseline, "noise_confidence": c.noise_confidence,
            "steps_origin": c.steps_origin, "steps_unknown_reason": c.steps_unknown_reason,
            "rows": [{
        "name": r.name, "step_time_ms": _ms(r.step_time_ns), "step_time_kind": r.step_time_kind,
        "step_time_intervals": r.step_intervals,
        "throughput_samples_per_s": r.throughput_samples_per_s,
        "speedup": None if r.speedup is None else round(r.speedup, 4),
        "speedup_basis": r.speedup_basis,
        "step_speedup": None if r.step_speedup is None else round(r.step_speedup, 4),
        "confounds": r.confounds,
        "throughput_gain": None if r.throughput_gain is None else round(r.throughput_gain, 4),
        "breakdown_delta_ms": {k: _ms(v) for k, v in r.breakdown_delta_ns.items()},
        "parts_not_compared": r.parts_not_compared,
        "changed_knobs": r.changed_knobs, "explanation": r.explanation,
        "within_noise": r.within_noise,
        "noise_fraction": None if r.noise_fraction is None else round(r.noise_fraction, 4),
        "attribution": [{"part": a.part, "before_ms": _ms(a.before_ns), "after_ms": _ms(a.after_ns),
                         "delta_ms": _ms(a.delta_ns), "role": a.role,
                         "share_of_difference": None if a.share is None else round(a.share, 4),
                         "median_before_ms": _ms(a.median_before_ns),
                         "median_after_ms": _ms(a.median_after_ns), "band_ms": _ms(a.band_ns),
                         "beyond_noise": a.beyond_noise}
                        for a in r.attribution],
        "unexplained_ms": _ms(r.unexplained_ns),
    } for r in c.rows]}


def report_json(report: Report) -> dict[str, Any]:
    """The whole report as plain data."""
    return {"schema": report.schema, "generated_by": report.generated_by, "title": report.title,
            "runs": [run_json(run) for run in report.runs],
            "comparison": comparison_json(report.comparison),
            "failures": sorted(report.failures),
            "scaling": [scaling_json(study) for study in report.scaling]}


def render_json(report: Report) -> str:
    """The report as JSON text (sorted keys, 2-space indent)."""
    return json.dumps(report_json(report), indent=2, sort_keys=True, default=str) + "\n"


def _device_memory(d: DeviceMemory) -> dict[str, Any]:
    """One device's memory: peaks in bytes on its basis, steps, largest allocations."""
    return {
        "source": d.origin, "rank": d.rank, "process": d.process, "file": d.file,
        "device_kind": d.device_kind, "device": d.device,
        "device_name": d.device_name, "total_bytes": d.total_bytes, "counts": d.counts,
        "basis": d.basis, "events": d.events, "peak_allocated_bytes": d.peak_allocated,
        "peak_reserved_bytes": d.peak_reserved, "net_bytes": d.net_bytes,
        "reserved_gap_bytes": d.reserved_gap_bytes,
        "driver_calls_per_step": (None if d.driver_calls_per_step is None
                                  else round(d.driver_calls_per_step, 3)),
        "allocations_per_step": (None if d.allocations_per_step is None
                                 else round(d.allocations_per_step, 3)),
        "steps": [{"number": s.number, "peak_allocated_bytes": s.peak_allocated,
                   "peak_reserved_bytes": s.peak_reserved, "start_bytes": s.start_level,
                   "end_bytes": s.end_level, "allocations": s.allocations,
                   "allocated_bytes": s.allocated_bytes, "events": s.events} for s in d.steps],
        "largest_allocations": [{"bytes": a.bytes, "at_ms": _ms(a.at_ns), "step": a.step,
                                 "op": a.op} for a in d.largest],
        "held_allocations": None if d.held is None else [
            {"op": h.op, "bytes": h.bytes, "count": h.count, "steps": h.steps} for h in d.held],
    }


def memory_json(stats: MemoryStats | None) -> list[dict[str, Any]] | None:
    """Memory per device, or null when the run recorded no allocator events."""
    return None if stats is None else [_device_memory(d) for d in stats.devices]


def scaling_json(study: ScalingStudy) -> dict[str, Any]:
    """One scaling study: throughput, ideal and efficiency per process count."""
    def rounded(value: float | None, digits: int = 3) -> float | None:
        """A throughput or ratio rounded, None stays None."""
        return None if value is None else round(value, digits)

    return {"group": study.group, "mode": study.mode, "unit": study.unit,
            "findings": [_finding(f) for f in study.findings],
            "points": [{"run": p.run, "processes": p.processes,
                        "throughput": rounded(p.throughput),
                        "throughput_intervals": p.throughput_intervals,
                        "ideal": rounded(p.ideal),
                        "efficiency": _frac(p.efficiency),
                        "loader_alone": rounded(p.loader_alone),
                        "synthetic": rounded(p.synthetic), "step_time_ms": _ms(p.step_ns),
                        "comm_ms_per_step": _ms(p.comm_ns_per_step),
                        "comm_exposed_ms_per_step": _ms(p.comm_exposed_ns_per_step),
                        "rank_imbalance": rounded(p.rank_imbalance, 4),
                        "local_batch_size": p.local_batch_size,
                        "confounds": p.confounds,
                        "shared_cpu_share": _frac(p.shared_cpu.other_share
                                                  if p.shared_cpu else None)}
                       for p in study.points]}
