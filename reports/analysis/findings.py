"""Findings and the verdict: small rules, each a function of one run's metrics and knobs.

Every rule returns a :class:`Finding` (stable id, severity, one-sentence title, evidence naming
the profiler, a fix written for this run) or None. The thresholds below are the whole policy;
each comment says why the value is where it is.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import pandas as pd

from profreport import concepts
from profreport.reports.analysis.results import (
    CommStats,
    Evidence,
    Finding,
    IdleCauses,
    KernelMix,
    OpPrecision,
    Origin,
    RunMetrics,
    Severity,
    StepCopies,
    SyncStats,
    TopItem,
    TraceLocation,
    Trials,
    Verdict,
    origin_label,
)
from profreport.reports.analysis.shape import STALLS_DOMINATE, stalled_share, wait_shape_text
from profreport.units import ms, nbytes, pct

# --- thresholds -----------------------------------------------------------------------------
#: A quarter of every step spent waiting for the next batch is the biggest single loss a run can
#: fix without touching the model, so from here on the run is called loader-bound.
LOADER_BOUND_FRACTION = 0.25
#: Communication not hidden under compute for a quarter of the step makes the run comm-bound.
COMM_BOUND_EXPOSED_FRACTION = 0.25
#: NCCL/gloo taking a tenth of the step is worth reporting, even when mostly overlapped.
COMM_REPORT_FRACTION = 0.10
#: Exposed communication above this share is worth tuning (bucket sizes, overlap).
COMM_EXPOSED_WARN_FRACTION = 0.05
#: A GPU busy 80% of its window is limited by its own kernels: the run is compute-bound.
COMPUTE_BOUND_BUSY = 0.80
#: Compute (GPU kernels, or CPU framework ops on CPU-only runs) filling 60% of the step makes
#: the model's own math the bottleneck.
COMPUTE_BOUND_SHARE = 0.60
#: Below half busy the GPU idles more than it works: worth a finding on its own.
LOW_GPU_BUSY = 0.50
#: Below this the GPU is mostly idle: high severity.
VERY_LOW_GPU_BUSY = 0.30
#: Half the step with the GPU idle until work launched during the idle time arrives (nothing
#: queued): the GPU waits for the CPU more than it works, the run is host-bound.
HOST_BOUND_IDLE_SHARE = 0.50
#: A quarter of the step with the GPU idle since the CPU blocked in a sync (it could queue
#: nothing more) makes the run sync-bound.
SYNC_BOUND_IDLE_SHARE = 0.25
#: A verdict whose figure is 15 points of the step past its threshold and ahead of every other
#: cause would survive run-to-run noise of that size: high confidence.
CONFIDENT_MARGIN = 0.15
#: Under 5 points from the threshold or the runner-up, a rerun could flip it: low confidence.
CLEAR_MARGIN = 0.05
#: When more than this share of the step the GPU idles for no reason the trace shows (no data
#: wait, sync or launch ends it), the verdict says unknown rather than guess.
UNEXPLAINED_IDLE_SHARE = 0.50
#: Launch overhead adds up only over many launches: below 100 kernels per step (about 1 ms of
#: launch cost at ~10 us each) short kernels are not what the GPU waits for.
MANY_KERNELS_PER_STEP = 100
#: Half the kernels under SHORT_KERNEL_NS means launch overhead rivals the work itself.
SHORT_KERNEL_MANY = 0.50
#: Pageable copies are staged through a bounce buffer: worth fixing once half the H2D bytes ...
PAGEABLE_SHARE = 0.50
#: ... and at least this many bytes (64 MiB) come from pageable memory over the profile.
PAGEABLE_MIN_BYTES = 64 * 2**20
#: Blocking calls (syncs, copies to pageable memory) holding the CPU 10% of the step while the
#: GPU is not saturated stall the pipeline.
SYNC_STALL_FRACTION = 0.10
#: A CPU op (or Python between ops) holding a fifth of the GPU's launch wait is named as a cause:
#: below that the wait is spread over many small things and no one of them is the fix.
LAUNCH_WAIT_OP_SHARE = 0.20
#: Per-device batches at or below this rarely fill a modern GPU.
SMALL_BATCH_SIZE = 16
#: With a mostly idle GPU, 60% of kernels under SHORT_KERNEL_NS says the work per step is tiny.
SMALL_BATCH_SHORT_KERNELS = 0.60
#: A single-process DataLoader (num_workers=0) taking 5% of the step is worth a worker process
#: even when the run is not loader-bound.
IN_PROCESS_LOADER_SHARE = 0.05
#: Two sources agree about the DataLoader when their wait shares differ by at most this much.
SOURCES_AGREE_DELTA = 0.15
#: Spare producing capacity asked of the DataLoader's workers over the bare rate the loop
#: consumes batches at: batch load times vary, and a worker that is late stalls the loop.
WORKER_HEADROOM = 1.5
#: Fewest workers to suggest: one worker leaves no batch in flight while it loads the next.
MIN_SUGGESTED_WORKERS = 2
#: Half of the communication time in collectives of one kind (all-reduce, all-to-all...) says
#: what the communication is for, and so which knobs move it.
COLLECTIVE_DOMINANT_SHARE = 0.50
#: DDP's bucket size when the script does not set it (torch.nn.parallel.DistributedDataParallel):
#: a run at this value has not tuned it; any other value was chosen and is not advised again.
DDP_DEFAULT_BUCKET_MB = 25
#: A cause of the GPU's idle time under a tenth of it is not worth naming in the advice.
IDLE_CAUSE_SHARE = 0.10
#: Under autocast the convolutions and matmuls, which hold most kernel time, run in fp16/bf16:
#: half of compute-kernel time in such kernels says mixed precision is already on.
AMP_PRESENT_FRACTION = 0.50
#: NCHW <-> NHWC conversion kernels above this share of kernel time are a transpose per
#: convolution that channels_last removes.
LAYOUT_CONVERSION_SHARE = 0.05
#: A foreach/fused optimizer launches a handful of kernels per step; more than this is one or
#: several small kernels per parameter.
OPTIMIZER_KERNELS_MANY = 50
#: Elementwise kernels taking this share of kernel time are worth fusing with torch.compile.
ELEMENTWISE_SHARE = 0.15
#: ATen's slow reference kernels taking a fifth of the operators' self time is the CPU running
#: without its optimised (oneDNN) path.
SLOW_FALLBACK_SHARE = 0.20
#: In the runner's trials, the DataLoader alone or the model alone is the limit when the other
#: runs at least this much faster on its own; closer than that both matter and neither is named.
TRIAL_LIMIT_RATIO = 1.5
#: A loader that needs less than half a core at the real loop's pace costs the model less than
#: taking an intra-op thread away would: then more CPUs, not fewer threads, is the fix.
LIGHT_LOADER_CORES = 0.5
#: fp32 matmuls/convolutions launching a tenth of compute-kernel time are worth moving to tensor
#: cores (2-8x faster there); below that the step would gain under ~5%.
FP32_MATMUL_SHARE = 0.10
#: Half of the fp32 matmuls'/convolutions' kernel time in kernels named TF32 says TF32 is on
#: already (a name hint, used only to choose between two fixes).
TF32_PRESENT_FRACTION = 0.50
#: A batch is a few tensors, one of them perhaps small (the labels): from 4 small (<64 KiB)
#: host-to-device copies per step on, tensors are built on the host inside the loop.
SMALL_HTOD_PER_STEP = 4
#: One device-to-host copy per step is a loss read; from two on, values are read back in the loop
#: (.item(), .cpu(), printing, ``if tensor:``), each waiting for the GPU to get there.
DTOH_PER_STEP = 2
#: When half the step is time no source could attribute (a CPU-only nsys capture holds only NVTX
#: ranges), calling the run "balanced" would be a guess: the verdict is unknown instead.
UNATTRIBUTED_SHARE = 0.50

_SEVERITY_ORDER = {"high": 0, "medium": 1, "low": 2, "info": 3}
# Which limit (in the runner's trials' terms) each profiler verdict points at: the synthetic
# trial runs the whole model step, so launch overhead and communication count as the model's.
_VERDICT_LIMIT = {"loader-bound": "loader", "compute-bound": "compute",
                  "host-bound": "compute", "communication-bound": "compute",
                  "sync-bound": "compute"}
_LIMIT_VERDICT: dict[str, Verdict] = {"loader": "loader-bound", "compute": "compute-bound"}


@dataclass(frozen=True)
class RunContext:
    """What a rule may know besides the metrics: the manifest's knobs and environment."""

    knobs: dict[str, object] = field(default_factory=dict)
    environment: dict[str, object] = field(default_factory=dict)

    def knob(self, name: str) -> object | None:
        """A knob's value, or None when the run has no such knob."""
        return self.knobs.get(name)

    def cpus(self) -> int | None:
        """CPUs the run could use, when the manifest recorded them (its affinity mask before the
        machine's count: a Slurm job or taskset sees fewer CPUs than the node has)."""
        for key in ("cpus", "cpus_usable", "slurm_cpus_per_task", "cpus_available", "cpu_count"):
            value = self.environment.get(key)
            if isinstance(value, int) and value > 0:
                return value
        return None

    def torch_threads(self) -> int | None:
        """PyTorch's intra-op thread count in the run (``torch.get_num_threads()``), if recorded."""
        value = self.environment.get("torch_threads")
        return value if isinstance(value, int) and value > 0 else None

    def on_gpu(self) -> bool:
        """Whether the manifest says the run had a GPU (CUDA available)."""
        return bool(self.environment.get("cuda"))


@dataclass(frozen=True)
class CpuLoad:
    """Busy threads against CPUs on a CPU-only run: DataLoader workers plus compute threads."""

    workers: int
    #: PyTorch's intra-op threads; at least the training thread when the run did not record it.
    threads: int
    threads_known: bool
    cpus: int
    #: Training processes sharing the CPUs (DDP ranks on one node), each with its own workers.
    processes: int = 1

    @property
    def busy(self) -> int:
        """Threads that want a CPU at once while the loader prefetches and the model computes."""
        return self.processes * (self.workers + self.threads)

    @property
    def oversubscribed(self) -> bool:
        """More busy threads than CPUs."""
        return self.busy > self.cpus

    def describe(self) -> str:
        """'2 DataLoader workers + 2 PyTorch intra-op threads on 2 CPUs'."""
        threads = (f"{self.threads} PyTorch intra-op thread{'s' if self.threads != 1 else ''}"
                   if self.threads_known else "the training thread")
        per_process = (f"{self.workers} DataLoader worker{'s' if self.workers != 1 else ''} + "
                       f"{threads}")
        if self.processes > 1:
            per_process = f"{self.processes} ranks × ({per_process})"
        return f"{per_process} on {self.cpus} CPU{'s' if self.cpus != 1 else ''}"

    @property
    def cpus_per_process(self) -> int:
        """The CPUs each training process can have without contention (at least one)."""
        return max(self.cpus // self.processes, 1)


def training_processes(ctx: RunContext) -> int:
    """Training processes sharing the job's CPUs: the DDP ranks on one node, else one."""
    nproc = ctx.knob("nproc")
    return nproc if ctx.knob("ddp") and isinstance(nproc, int) and nproc > 1 else 1


def cpu_load(ctx: RunContext) -> CpuLoad | None:
    """Workers and compute threads against CPUs, for a CPU-only run whose manifest has them."""
    workers, cpus = ctx.knob("num_workers"), ctx.cpus()
    if ctx.on_gpu() or not isinstance(workers, int) or isinstance(workers, bool) or not cpus:
        return None
    threads = ctx.torch_threads()
    return CpuLoad(workers=workers, threads=threads or 1, threads_known=threads is not None,
                   cpus=cpus, processes=training_processes(ctx))


Rule = Callable[[RunMetrics, RunContext], "Finding | None"]


def _step_ns(m: RunMetrics) -> int | None:
    """The step time the breakdown adds up to (wall time per step when known)."""
    if m.breakdown is not None:
        return m.breakdown.step_ns
    return m.steps.mean_ns if m.steps is not None else None


def _loader_evidence(m: RunMetrics) -> list[Evidence]:
    """Where the DataLoader share was seen, one line per source."""
    out = [Evidence(f"{pct(share)} of step time waits for the next batch", origin)
           for origin, share in sorted(m.dataloader_fraction_by_origin.items())]
    spread = wait_shape_text(m)
    if spread is not None and m.shape is not None:
        out.append(Evidence(spread[:1].upper() + spread[1:], m.shape.origin))
    if m.loop_identification is not None and m.loop_identification.evidence == "hit counts" \
            and "lprof" in m.dataloader_fraction_by_origin:
        out.append(Evidence(m.loop_identification.reason, "lprof"))
    if m.steps is not None and m.steps.wall_mean_ns and m.steps.origin != "lprof" \
            and m.steps.wall_mean_ns > 1.5 * m.steps.mean_ns:
        out.append(Evidence(f"annotated steps average {ms(m.steps.mean_ns)} but wall time per "
                            f"step is {ms(m.steps.wall_mean_ns)}: the rest goes between steps",
                            m.steps.origin))
    if m.gpu is not None:
        out.append(Evidence(f"GPU busy {pct(m.gpu.busy_fraction)}; {m.gpu.long_gap_count} idle "
                            f"gaps over {ms(m.gpu.long_gap_ns)}", m.gpu.origin,
                            _largest_gap_at(m)))
    return out


def _largest_gap_at(m: RunMetrics) -> TraceLocation | None:
    """Where the GPU's largest idle gap lies in its trace."""
    if m.gpu is None or not m.gpu.largest_gaps:
        return None
    gap = m.gpu.largest_gaps[0]
    return m.locate(m.gpu.origin, (gap.start_ns, gap.start_ns + gap.duration_ns))


def loop_ns_without_loader(m: RunMetrics) -> tuple[int, int] | None:
    """Per step, the DataLoader wait and the rest of the loop (model, copies, Python), ns, from
    the step breakdown; None when the breakdown does not have both."""
    if m.breakdown is None or m.dataloader_fraction is None:
        return None
    wait = round(m.dataloader_fraction * m.breakdown.step_ns)
    rest = m.breakdown.step_ns - wait
    return (wait, rest) if wait > 0 and rest > 0 else None


def workers_needed(wait_ns: int, rest_ns: int, workers: int) -> int:
    """Workers that would load batches as fast as the rest of the loop consumes them.

    With ``workers`` = 0 the loop loads each batch itself, in ``wait_ns``; with n workers each
    batch takes one worker about n x (wait + rest), since n batches arrive per n steps. The loop
    then needs ``load / rest`` workers, with WORKER_HEADROOM to spare."""
    load_ns = wait_ns if workers == 0 else workers * (wait_ns + rest_ns)
    return max(MIN_SUGGESTED_WORKERS, math.ceil(WORKER_HEADROOM * load_ns / rest_ns))


def _loader_settings(m: RunMetrics | None, ctx: RunContext) -> str:
    """The DataLoader settings this run lacks: 'pin_memory=True, persistent_workers=True and
    prefetch_factor=4'; pin_memory only where the profile shows batches copied from pageable
    memory (a run whose copies are pinned, or without a GPU, has nothing to pin)."""
    wanted = []
    if not ctx.knob("pin_memory") and m is not None and m.copies is not None \
            and m.copies.h2d_pageable_bytes > 0:
        wanted.append("pin_memory=True")
    if not ctx.knob("persistent_workers"):
        wanted.append("persistent_workers=True")
    wanted.append("prefetch_factor=4")
    return ", ".join(wanted[:-1]) + (" and " if len(wanted) > 1 else "") + wanted[-1]


def _workers_advice(ctx: RunContext, m: RunMetrics | None = None) -> str:
    """Concrete DataLoader advice: the workers this run's loop needs (from its DataLoader wait
    and the rest of its step, the recorded worker count being the knob, or 0 when the trace
    shows a single-process DataLoader), within its CPUs, and the DataLoader settings it lacks."""
    workers = ctx.knob("num_workers")
    if workers is None and m is not None and m.loader_in_process:
        workers = 0
    known = isinstance(workers, int) and not isinstance(workers, bool)
    loop = loop_ns_without_loader(m) if m is not None else None
    cpus = ctx.cpus()
    cheaper = ("make each sample cheaper (decode/augment once and cache, smaller images, "
               "DALI/GPU augmentation)")
    extras = _loader_settings(m, ctx)
    if loop is None:
        return (f"Give the DataLoader more workers (num_workers; the profile has no step "
                f"breakdown to size them from) or {cheaper}; set {extras}.")
    wait, rest = loop
    if not known:
        scale = WORKER_HEADROOM * (wait + rest) / rest
        where = ("The DataLoader runs in worker processes (its spans are "
                 "_MultiProcessingDataLoaderIter) but the profile does not record how many"
                 if m is not None and m.loader_in_process is False else
                 f"The profile does not record num_workers (at 0, {workers_needed(wait, rest, 0)} "
                 "workers would keep up)")
        return (f"{where}: the loop waits {ms(wait)} per step for {ms(rest)} of other work, so "
                f"with n workers now it needs about {scale:.1f} x n to keep up. Raise num_workers "
                f"to that where the job has the CPUs, else {cheaper}; set {extras}.")
    target = workers_needed(wait, rest, workers)
    processes = training_processes(ctx)
    budget = cpus // processes - 1 if cpus else None  # one core for each training loop
    share = (f"the job's {cpus} CPUs" if processes == 1 else
             f"each of the {processes} ranks' share of the job's {cpus} CPUs")
    if budget is not None and target > budget:
        if budget <= 0:
            leave = "leave" if processes == 1 else "leaves"
            return (f"{share[0].upper()}{share[1:]} {leave} no core for DataLoader workers "
                    f"beside the training loop, and the loop would need about {target}: request "
                    f"--cpus-per-task={target + 1} (one task per rank), or {cheaper}.")
        if workers >= budget:
            return (f"num_workers is already {workers}, as many as {share} allows beside the "
                    f"training loop, and the loop would need about {target}: {cheaper}, or "
                    f"request more CPUs per task; set {extras}.")
        return (f"Raise DataLoader num_workers from {workers} to {budget} ({share}, less one for "
                f"the training loop; the loop would need about {target}) and {cheaper}; set "
                f"{extras}.")
    slurm = f"request --cpus-per-task={target + 1} in Slurm (one core for the training loop)"
    instead = f", or {cheaper}" if workers > 0 else ""
    return (f"Raise DataLoader num_workers from {workers} to {target} (the loop waits "
            f"{ms(wait)} per step for {ms(rest)} of other work) and {slurm}{instead}; set "
            f"{extras}.")


def loader_bound(m: RunMetrics, ctx: RunContext) -> Finding | None:
    """The training loop waits for batches for a large share of each step."""
    share = m.dataloader_fraction
    if share is None or share < LOADER_BOUND_FRACTION:
        return None
    stalls = stalled_share(m)
    where = (f"{pct(share)} of its step time waiting for data, {pct(stalls)} of that in "
             "stalls" if stalls is not None and stalls >= STALLS_DOMINATE
             else f"{pct(share)} of each step waiting for data")
    return Finding("LOADER_BOUND", "high", f"The training loop spends {where}.",
                   _loader_evidence(m) + _in_process_evidence(m)
                   + _trial_evidence(m.trials, "loader"),
                   _workers_advice(ctx, m))


def _in_process_evidence(m: RunMetrics) -> list[Evidence]:
    """That the DataLoader runs in the training process, when the trace's spans say so."""
    if not m.loader_in_process:
        return []
    origin: Origin = m.breakdown.origin if m.breakdown is not None else "kineto"
    return [Evidence("the DataLoader spans are _SingleProcessDataLoaderIter: num_workers=0, "
                     "every batch is loaded in the training process while the GPU waits", origin)]


def in_process_loader(m: RunMetrics, ctx: RunContext) -> Finding | None:
    """A single-process DataLoader costing a noticeable share of the step, below loader-bound
    (LOADER_BOUND covers it above)."""
    share = m.dataloader_fraction
    if not m.loader_in_process or share is None or \
            not IN_PROCESS_LOADER_SHARE <= share < LOADER_BOUND_FRACTION:
        return None
    return Finding("SYNC_DATALOADER", "medium",
                   f"The DataLoader loads batches in the training process (num_workers=0): "
                   f"{pct(share)} of each step.", _in_process_evidence(m),
                   _workers_advice(ctx, m))


def zero_grad_not_none(m: RunMetrics, ctx: RunContext) -> Finding | None:
    """``zero_grad()`` launches kernels: it fills the gradients with zeros instead of freeing
    them (``set_to_none=False``)."""
    mix = m.kernel_mix
    if mix is None or not mix.zero_grad_work_per_step:
        return None
    return Finding("ZERO_GRAD_NOT_NONE", "low",
                   "optimizer.zero_grad() writes zeros into every gradient each step.",
                   [Evidence(f"{mix.zero_grad_work_per_step:.0f} kernels and memsets launched "
                             "inside Optimizer.zero_grad per step (set_to_none=True launches "
                             "none)", mix.origin)],
                   "Call optimizer.zero_grad(set_to_none=True) (the default from PyTorch 2.0): "
                   "gradients are freed instead of zero-filled, saving a kernel per parameter.")


def _capability_text(precision: OpPrecision) -> str:
    """'Tesla V100-DGXS-32GB, compute capability 7.0'."""
    major, minor = precision.compute_capability or (0, 0)
    return f"{precision.device_name or 'the GPU'}, compute capability {major}.{minor}"


def _per_step(precision: OpPrecision, count: float) -> str:
    """``count`` per step when the figures cover steps, else in the profile."""
    steps = precision.steps
    return f"{count / steps:.0f} per step" if steps else f"{count:.0f} in the profile"


def _fp32_advice(capability: tuple[int, int], tf32_fraction: float) -> str:
    """Autocast in the precision this GPU's tensor cores take, and TF32 where it exists (unless
    the kernel names say it is already on)."""
    if capability >= concepts.TF32_CAPABILITY and tf32_fraction >= TF32_PRESENT_FRACTION:
        return ("TF32 already runs most of this fp32 work on the tensor cores (by the kernel "
                "names); run the forward pass and the loss under "
                "torch.autocast(device_type='cuda', dtype=torch.bfloat16) (no GradScaler "
                "needed): bf16 halves the operands' memory traffic and doubles tensor-core "
                "throughput again.")
    if capability >= concepts.TF32_CAPABILITY:
        return ("Run the forward pass and the loss under torch.autocast(device_type='cuda', "
                "dtype=torch.bfloat16) (bf16 needs no GradScaler); or, keeping fp32, let the "
                "tensor cores take it as TF32: torch.set_float32_matmul_precision('high') for "
                "matmuls and torch.backends.cudnn.allow_tf32 = True (the default) for "
                "convolutions.")
    return ("Run the forward pass and the loss under torch.autocast(device_type='cuda', "
            "dtype=torch.float16) and scale the loss with torch.cuda.amp.GradScaler: this GPU's "
            "tensor cores take fp16 (bf16 and TF32 need compute capability 8.0).")


def fp32_on_tensor_cores(m: RunMetrics, ctx: RunContext) -> Finding | None:
    """Matmuls and convolutions take fp32 inputs (their recorded dtypes) on a GPU whose tensor
    cores would run them several times faster in fp16/bf16 (or TF32)."""
    p = m.op_precision
    if p is None or p.unknown_reason is not None or p.compute_capability is None or \
            p.compute_capability < concepts.TENSOR_CORE_CAPABILITY or \
            p.share("fp32") < FP32_MATMUL_SHARE:
        return None
    evidence = [
        Evidence(f"matmul/convolution calls with fp32 inputs (the operators' recorded Input "
                 f"type 'float'): {_per_step(p, p.calls['fp32'])}, launching "
                 f"{_per_step_ms(p, p.kernel_ns['fp32'])} of kernels, "
                 f"{pct(p.share('fp32'))} of compute-kernel time", p.origin,
                 m.locate(p.origin, p.longest_fp32)),
        Evidence(f"the kernels ran on {_capability_text(p)}: tensor cores from 7.0, TF32 "
                 "from 8.0 (the profiles' device properties)", p.origin),
        Evidence("fp32 operators by kernel time: " + ", ".join(p.fp32_ops[:4]), p.origin)]
    if p.calls["reduced"]:
        evidence.append(Evidence(f"calls already in fp16/bf16: {_per_step(p, p.calls['reduced'])}"
                                 f" ({pct(p.share('reduced'))} of compute-kernel time)",
                                 p.origin))
    if p.compute_capability >= concepts.TF32_CAPABILITY:
        evidence.append(Evidence(f"kernel names only (a hint, not the dtypes): "
                                 f"{pct(p.tf32_kernel_fraction)} of the fp32 operators' kernel "
                                 "time is in kernels named TF32", p.origin))
    return Finding("FP32_ON_TENSOR_CORES", "medium",
                   f"{pct(p.share('fp32'))} of compute-kernel time is fp32 matmuls and "
                   f"convolutions on a GPU with tensor cores ({_capability_text(p)}).",
                   evidence, _amp_on_advice(p) if ctx.knob("amp") else
                   _fp32_advice(p.compute_capability, p.tf32_kernel_fraction))


def _amp_on_advice(p: OpPrecision) -> str:
    """fp32 matmuls in a run that has mixed precision on: they run outside it."""
    return ("Mixed precision is on, yet these operators receive fp32 tensors: they run outside "
            "the torch.autocast region (move the forward pass and the loss inside it) or on "
            f"tensors cast back to float ({', '.join(p.fp32_ops[:2])}: look for .float() or a "
            "custom autograd function with custom_fwd(cast_inputs=torch.float32)).")


def _per_step_ms(precision: OpPrecision, total_ns: int) -> str:
    """A duration per step when the figures cover steps, else in the profile."""
    steps = precision.steps
    return f"{ms(total_ns // steps)} per step" if steps else f"{ms(total_ns)} in the profile"


def _copy_evidence(m: RunMetrics, c: StepCopies, kind: str) -> list[Evidence]:
    """Count, size, GPU time and launching operators of one direction's copies per step."""
    if not c.copies_per_step[kind]:
        return []
    where = {concepts.HTOD: "host-to-device", concepts.DTOH: "device-to-host"}[kind]
    out = [Evidence(f"{_count(c.copies_per_step[kind])} {where} copies launched per step "
                    f"({_count(c.small_per_step[kind])} under 64 KiB), "
                    f"{nbytes(c.bytes_per_step[kind])} and {ms(c.ns_per_step[kind])} of copy "
                    "time per step", c.origin, m.locate(c.origin, c.longest.get(kind)))]
    if c.launchers.get(kind):
        listed = ", ".join(f"{name} ({_count(count)} per step)" if name != "(no operator)" else
                           f"no recorded operator ({_count(count)} per step)"
                           for name, count in c.launchers[kind])
        out.append(Evidence(f"launched (runtime call joined by correlation id) inside: {listed}",
                            c.origin))
    return out


def _count(value: float) -> str:
    """A per-step count: whole numbers as such, others to one decimal."""
    return f"{value:.0f}" if value == int(value) else f"{value:.1f}"


def host_device_copies(m: RunMetrics, ctx: RunContext) -> Finding | None:
    """More host <-> device copies per step than a batch needs: small tensors built on the host
    in the loop, or values read back each step."""
    c = m.step_copies
    if c is None:
        return None
    small_in = c.small_per_step[concepts.HTOD] >= SMALL_HTOD_PER_STEP
    # an inference step returns its outputs: reading them back is its job
    read_back = c.copies_per_step[concepts.DTOH] >= DTOH_PER_STEP and c.training is not False
    if not (small_in or read_back):
        return None
    evidence = _copy_evidence(m, c, concepts.HTOD) + _copy_evidence(m, c, concepts.DTOH)
    if c.origin == "nsys":
        evidence.append(Evidence("Nsight Systems records no framework operators: which call "
                                 "launched the copies is unknown", c.origin))
    if c.blocking_per_step:
        evidence.append(Evidence(f"{_count(c.blocking_per_step)} device-to-host copies per step "
                                 "go to pageable memory: each blocks the CPU until the GPU "
                                 "drains",
                                 c.origin))
    saturated = m.gpu is not None and m.gpu.busy_fraction >= COMPUTE_BOUND_BUSY
    severity: Severity = ("medium" if c.blocking_per_step >= DTOH_PER_STEP and not saturated
                          else "low")
    steps = []
    if small_in:
        steps.append("Build per-step tensors on the GPU (torch.tensor(..., device='cuda'), "
                     "torch.zeros(..., device=...)) or move them once, not each step")
    if read_back:
        steps.append(("k" if small_in else "K") + "eep per-step values on the GPU (accumulate "
                     "the loss as a tensor) and read them every N steps instead of calling "
                     ".item()/.cpu()/print or testing a tensor in an if inside the step")
    counts = " and ".join(f"{_count(c.copies_per_step[k])} {label}" for k, label in
                          ((concepts.HTOD, "host-to-device"), (concepts.DTOH, "device-to-host"))
                          if c.copies_per_step[k])
    return Finding("HOST_DEVICE_COPIES_PER_STEP", severity,
                   f"Each step copies between host and device more often than a batch needs: "
                   f"{counts} copies.", evidence, "; ".join(steps) + ".")


def _idle_cause_evidence(m: RunMetrics) -> list[Evidence]:
    """What the GPU's idle time inside the steps waits for, per step, when the trace tells."""
    idle = m.gpu_idle
    if idle is None or not sum(idle.idle_ns_per_step.values()):
        return []
    labels = {"data": "the DataLoader", "sync": "a sync", "launch": "launches",
              "unexplained": "nothing the trace shows"}
    parts = [f"{labels.get(cause, cause)} {ms(ns)}" for cause, ns in
             sorted(idle.idle_ns_per_step.items(), key=lambda item: -item[1]) if ns]
    return [Evidence("per step, the GPU's idle time waits for: " + ", ".join(parts),
                     idle.origin)]


def long_gpu_idle_gaps(m: RunMetrics, ctx: RunContext) -> Finding | None:
    """The GPU stops for more than LONG_IDLE_GAP_NS at a time although it is busy most of the
    time otherwise (a mostly idle GPU is LOW_GPU_UTIL's)."""
    g = m.gpu
    if g is None or not g.long_gap_count or g.busy_fraction < LOW_GPU_BUSY:
        return None
    gaps = [gap for gap in g.largest_gaps if gap.duration_ns > g.long_gap_ns]
    evidence = [Evidence(f"{g.long_gap_count} idle gap{'s' if g.long_gap_count != 1 else ''} "
                         f"over {ms(g.long_gap_ns)} while the GPU is busy "
                         f"{pct(g.busy_fraction)} of the {g.span}", g.origin)]
    evidence += [Evidence(f"idle {ms(gap.duration_ns)} on GPU {gap.device}, {gap.where}",
                          g.origin, m.locate(g.origin, (gap.start_ns,
                                                        gap.start_ns + gap.duration_ns)))
                 for gap in gaps[:3]]
    return Finding("LONG_GPU_IDLE_GAPS", "low",
                   f"The GPU stops for more than {ms(g.long_gap_ns)} at a time "
                   f"({g.long_gap_count} time{'s' if g.long_gap_count != 1 else ''}).",
                   evidence + _idle_cause_evidence(m),
                   "Look at what the loop does in these gaps (the locations point at them): a "
                   "DataLoader refilling at an epoch start (persistent_workers=True, a larger "
                   "prefetch_factor), evaluation, checkpointing or logging inside the loop (run "
                   "them less often or asynchronously), or a host-side sync.")


def optimizer_not_fused(m: RunMetrics, ctx: RunContext) -> Finding | None:
    """The optimizer step launches many kernels, none multi-tensor: one or more small kernels
    per parameter instead of foreach/fused ones."""
    mix = m.kernel_mix
    if mix is None or not _optimizer_many_kernels(mix):
        return None
    per_step = mix.optimizer_kernels_per_step or 0.0
    evidence = [Evidence(f"{per_step:.0f} kernels launched inside each optimizer step (launch "
                         "calls inside its span, kernels joined by correlation id), none of "
                         "them multi-tensor (multi_tensor_apply)", mix.origin)]
    if m.launch is not None and m.launch.kernels_per_step:
        evidence.append(Evidence(f"{pct(per_step / m.launch.kernels_per_step)} of the "
                                 f"{m.launch.kernels_per_step:.0f} kernels launched per step",
                                 m.launch.origin))
    name = mix.optimizer_name
    return Finding("OPTIMIZER_NOT_FUSED", "low",
                   f"The optimizer{f' ({name})' if name else ''} updates the parameters one "
                   f"small kernel at a time: {per_step:.0f} kernels per step.", evidence,
                   f"Build it with foreach=True (torch.optim.{name or 'AdamW'}(..., "
                   "foreach=True); the default on CUDA since PyTorch 2.0) or fused=True where "
                   "the optimizer has it (Adam, AdamW, SGD): a few multi-tensor kernels replace "
                   "the per-parameter ones.")


def _unknown_checks(m: RunMetrics) -> list[Evidence]:
    """One line per operator check that this run's sources cannot make, with the reason."""
    out = []
    p, bias = m.op_precision, m.conv_bias
    if p is not None and p.unknown_reason is not None:
        out.append(Evidence(f"fp32 matmuls/convolutions on tensor cores: unknown, "
                            f"{p.unknown_reason}", p.origin))
        if m.kernel_mix is not None:
            out.append(Evidence(f"kernel names only (supporting, not the dtypes): "
                                f"{pct(m.kernel_mix.reduced_precision_fraction)} of "
                                "compute-kernel time is in kernels named fp16/bf16",
                                m.kernel_mix.origin))
    if bias is not None and bias.unknown_reason is not None:
        out.append(Evidence(f"convolution bias before BatchNorm: unknown, {bias.unknown_reason}",
                            bias.origin))
    return out


def conv_bias_before_bn(m: RunMetrics, ctx: RunContext) -> Finding | None:
    """Convolutions add a bias that the BatchNorm right after them removes again."""
    b = m.conv_bias
    if b is None or b.unknown_reason is not None or not b.before_batch_norm:
        return None
    per = (f"{b.before_batch_norm / b.steps:.0f} per step" if b.steps else
           f"{b.before_batch_norm} in the profile")
    evidence = [Evidence(f"convolutions with a bias input (recorded Input Dims) whose next op "
                         f"on the same thread is batch_norm on their output: {per}, of "
                         f"{b.convolutions} convolution calls ({b.with_bias} with a bias)",
                         b.origin, m.locate(b.origin, b.first)),
                Evidence("their weights: " + ", ".join(b.weight_shapes[:4]), b.origin)]
    if b.bias_kernel_ns:
        added = (f"{ms(b.bias_kernel_ns // b.steps)} per step" if b.steps else
                 f"{ms(b.bias_kernel_ns)} in the profile")
        evidence.append(Evidence(f"kernels these convolutions launch outside their convolution "
                                 f"kernels (the bias add): {added}", b.origin))
    else:
        evidence.append(Evidence("the bias add's own kernel time cannot be told apart (no GPU "
                                 "kernel launched outside the convolution kernels)", b.origin))
    return Finding("CONV_BIAS_BEFORE_BN", "low",
                   f"Convolutions add a bias that the BatchNorm after them cancels ({per}).",
                   evidence,
                   "Build the convolutions that feed a BatchNorm with bias=False "
                   "(nn.Conv2d(..., bias=False)): BatchNorm subtracts the per-channel mean, so "
                   "the bias has no effect (BatchNorm's own shift replaces it), and dropping it "
                   "saves a bias add forward and a bias-gradient reduction backward per "
                   "convolution.")


def op_checks_unknown(m: RunMetrics, ctx: RunContext) -> Finding | None:
    """The operator checks (precision, conv bias before BatchNorm) this run's profiles cannot
    make, and why: said, never guessed."""
    evidence = _unknown_checks(m)
    if not evidence:
        return None
    return Finding("OP_CHECKS_UNKNOWN", "info",
                   "Some operator checks could not be made from these profiles.", evidence,
                   "Profile a few steps with torch.profiler(record_shapes=True) on the GPU: the "
                   "operators' input dtypes and shapes answer these checks.")


def trial_limit(trials: Trials | None) -> str | None:
    """What the runner's trials say limits throughput: "loader" when the model alone runs
    TRIAL_LIMIT_RATIO times faster than the DataLoader alone, "compute" the other way round,
    None when they are close or missing."""
    if trials is None or not trials.io or not trials.synthetic:
        return None
    if trials.synthetic >= TRIAL_LIMIT_RATIO * trials.io:
        return "loader"
    if trials.io >= TRIAL_LIMIT_RATIO * trials.synthetic:
        return "compute"
    return None


def _trial_sentence(trials: Trials) -> str:
    """'the DataLoader alone delivers 1767 samples/s, the model alone 858 (one cached batch),
    the real loop 652'."""
    full = f", the real loop {trials.full:.0f}" if trials.full else ""
    return (f"the DataLoader alone delivers {trials.io:.0f} samples/s, the model alone "
            f"{trials.synthetic:.0f} (one cached batch){full}")


def _trial_evidence(trials: Trials | None, limit: str) -> list[Evidence]:
    """The trials as evidence, when they point at ``limit``."""
    if trials is None or trial_limit(trials) != limit:
        return []
    who = "the DataLoader" if limit == "loader" else "the model"
    return [Evidence(f"without a profiler, {_trial_sentence(trials)}: {who} sets the pace",
                     "manifest")]


def compute_bound(m: RunMetrics, ctx: RunContext) -> Finding | None:
    """The GPU is saturated, or compute fills most of the step: the model's math sets the pace."""
    share = _compute_share(m)
    busy = m.gpu.busy_fraction if m.gpu is not None else None
    if not ((busy is not None and busy >= COMPUTE_BOUND_BUSY)
            or (share is not None and share >= COMPUTE_BOUND_SHARE)):
        return None
    evidence = []
    if share is not None and m.breakdown is not None:
        evidence.append(Evidence(f"compute {pct(share)} of {ms(m.breakdown.step_ns)} per step",
                                 m.breakdown.origin))
    evidence += _trial_evidence(m.trials, "compute")
    if m.gpu is None:
        return _cpu_compute_bound(m, ctx, share or 0.0, evidence)
    evidence.append(Evidence(f"GPU busy {pct(m.gpu.busy_fraction)} of its "
                             f"{ms(m.gpu.window_ns)} window", m.gpu.origin))
    top = _top_compute_kernel(m)
    if top is not None:
        evidence.append(Evidence(f"top kernel {top.name[:80]} takes {pct(top.share)} of "
                                 "kernel time", m.gpu.origin))
    if m.kernel_mix is not None:
        evidence += _kernel_mix_evidence(m.kernel_mix)
    return Finding("COMPUTE_BOUND", "info",
                   "The GPU's kernels set the pace of training.", evidence,
                   _gpu_compute_advice(m.kernel_mix, ctx, _conv_ranks(m)))


def _optimizer_many_kernels(mix: KernelMix) -> bool:
    """Whether the optimizer step launches many small kernels instead of fused ones."""
    per_step = mix.optimizer_kernels_per_step
    return per_step is not None and per_step >= OPTIMIZER_KERNELS_MANY and not mix.fused_optimizer


def _kernel_mix_evidence(mix: KernelMix) -> list[Evidence]:
    """What the kernel names say: precision, layout conversions, how the optimizer runs."""
    precision = (f"{pct(mix.reduced_precision_fraction)} of compute-kernel time runs in "
                 "fp16/bf16 kernels" if mix.reduced_precision_fraction > 0 else
                 "no compute kernel runs in fp16/bf16: the model trains in full precision")
    out = [Evidence(precision, mix.origin)]
    if mix.layout_conversion_fraction >= LAYOUT_CONVERSION_SHARE:
        out.append(Evidence(f"NCHW/NHWC layout conversion kernels (nchwToNhwc, nhwcToNchw) take "
                            f"{pct(mix.layout_conversion_fraction)} of compute-kernel time",
                            mix.origin))
    if mix.fused_optimizer:
        out.append(Evidence("the optimizer already runs as fused multi_tensor_apply kernels",
                            mix.origin))
    elif _optimizer_many_kernels(mix):
        out.append(Evidence(f"{mix.optimizer_kernels_per_step:.0f} kernels launched per "
                            "optimizer step, none of them multi-tensor (fused)", mix.origin))
    return out


#: The memory format that keeps a convolution's input in the layout its kernels want, by the
#: rank of that input (NCHW 2-D convolutions, NCDHW 3-D ones).
_MEMORY_FORMAT_OF_RANK = {4: "channels_last", 5: "channels_last_3d"}


def memory_format_advice(conv_ranks: tuple[int, ...]) -> str:
    """Which channels-last format to use, from the recorded ranks of the convolutions' inputs:
    'channels_last (model.to(memory_format=torch.channels_last), x.to(...))'; both, each with
    the convolutions it applies to, when the ranks were not recorded."""
    formats = [_MEMORY_FORMAT_OF_RANK[rank] for rank in conv_ranks
               if rank in _MEMORY_FORMAT_OF_RANK]
    if not formats:
        return ("channels_last for 2-D convolutions (4-D inputs) or channels_last_3d for 3-D "
                "ones (5-D inputs): the profile records no input shapes to tell which")
    spelled = [f"{name} (model.to(memory_format=torch.{name}), x.to(memory_format="
               f"torch.{name}))" for name in formats]
    return " and ".join(spelled)


def _conv_ranks(m: RunMetrics) -> tuple[int, ...]:
    """Ranks of the convolutions' inputs as recorded (empty when not)."""
    return m.conv_bias.input_ranks if m.conv_bias is not None else ()


def _gpu_compute_advice(mix: KernelMix | None, ctx: RunContext,
                        conv_ranks: tuple[int, ...]) -> str:
    """What to change, from what the kernels show (and the run's knobs and its convolutions'
    input ranks)."""
    if mix is None:
        amp = "" if ctx.knob("amp") else "enable mixed precision (torch.autocast + GradScaler), "
        layout = ("" if ctx.knob("channels_last") else
                  f"try {memory_format_advice(conv_ranks)} for the convolutions, and ")
        compiled = "" if ctx.knob("compile") else "try torch.compile, or "
        return f"To go faster, {amp}{layout}{compiled}reduce the model's work per sample."
    steps = []
    if mix.reduced_precision_fraction < AMP_PRESENT_FRACTION and not ctx.knob("amp"):
        now = (f"{pct(mix.reduced_precision_fraction)} of kernel time is fp16/bf16 now"
               if mix.reduced_precision_fraction > 0 else "every kernel runs in fp32 now")
        steps.append(f"enable mixed precision (torch.autocast + GradScaler; {now})")
    if mix.layout_conversion_fraction >= LAYOUT_CONVERSION_SHARE and ctx.knob("channels_last"):
        steps.append("find the layer or input still in the old layout: with channels_last on, "
                     f"layout conversions still take {pct(mix.layout_conversion_fraction)} of "
                     "kernel time")
    elif mix.layout_conversion_fraction >= LAYOUT_CONVERSION_SHARE:
        steps.append(f"put the model and every batch in {memory_format_advice(conv_ranks)}: "
                     f"layout conversions take {pct(mix.layout_conversion_fraction)} of kernel "
                     "time")
    if _optimizer_many_kernels(mix):
        optimizer = f"torch.optim.{mix.optimizer_name or 'AdamW'}"
        steps.append(f"build the optimizer with foreach=True ({optimizer}(..., foreach=True), or "
                     "fused=True where it supports it): each step launches "
                     f"{mix.optimizer_kernels_per_step:.0f} optimizer kernels")
    if mix.elementwise_fraction >= ELEMENTWISE_SHARE and not ctx.knob("compile"):
        steps.append("try torch.compile to fuse the elementwise kernels "
                     f"({pct(mix.elementwise_fraction)} of kernel time)")
    if not steps:
        return ("The kernels already run in reduced precision without layout conversions or an "
                "unfused optimizer: the remaining levers are less work per sample (a smaller "
                "model or input) or more GPUs.")
    return "To go faster: " + "; ".join(steps) + "."


def _cpu_compute_bound(m: RunMetrics, ctx: RunContext, share: float,
                       evidence: list[Evidence]) -> Finding:
    """COMPUTE_BOUND on a CPU-only run: the top operators by self time, and advice that fits
    the operators' implementation (oneDNN or ATen's slow fallback) and the run's knobs."""
    origin: Origin = m.top_ops_origin or "kineto"
    for top in m.top_ops[:1]:
        evidence.append(Evidence(f"top CPU operator by self time {top.name[:80]}: "
                                 f"{ms(top.total_ns)}, {pct(top.share)} of step time", origin))
    mix = m.cpu_op_mix
    slow = mix is not None and mix.slow_fallback_fraction >= SLOW_FALLBACK_SHARE
    if mix is not None and slow:
        names = ", ".join(mix.slow_fallback_ops[:2])
        evidence.append(Evidence(f"ATen's slow reference kernels ({names}) take "
                                 f"{pct(mix.slow_fallback_fraction)} of operator self time, "
                                 + (f"oneDNN ops {pct(mix.onednn_fraction)}" if mix.onednn_fraction
                                    else "none on oneDNN"), mix.origin))
    elif mix is not None and mix.onednn_fraction > 0:
        evidence.append(Evidence(f"oneDNN (mkldnn) ops take {pct(mix.onednn_fraction)} of "
                                 "operator self time: the optimised CPU path", mix.origin))
    return Finding("COMPUTE_BOUND", "info",
                   f"The CPU spends {pct(share)} of each step in the model's own operators.",
                   evidence, _cpu_compute_advice(m, ctx, slow))


def _cpu_compute_advice(m: RunMetrics, ctx: RunContext, slow: bool) -> str:
    """CPU advice from this run's evidence: autocast without native bf16 or a missed oneDNN path
    first; then how its threads fit its CPUs, its top operator's lever and knobs that do nothing
    without a GPU."""
    mix = m.cpu_op_mix
    cores = _cpu_threads_advice(ctx, m.trials)
    if ctx.knob("amp") and ctx.environment.get("cpu_native_bf16") is False:
        where = (f" ({', '.join(mix.slow_fallback_ops[:2])})" if slow and mix is not None
                 else "")
        return ("Turn autocast off on this CPU: it has no native bf16 (AVX512-BF16 or AMX), so "
                f"bf16 operators run emulated or on ATen's slow reference kernels{where}; fp32 "
                f"runs the convolutions on oneDNN. Then {cores}.")
    if ctx.knob("amp") and slow:
        return ("Autocast is on and the bf16 convolutions run on ATen's slow reference kernels: "
                "this CPU probably lacks native bf16 (look for avx512_bf16 or amx_bf16 in lscpu); "
                f"compare a run with amp off. Then {cores}.")
    if slow:
        return ("The convolutions miss oneDNN and run on ATen's slow reference kernels: keep "
                "inputs and weights float32 and contiguous, and check "
                f"torch.backends.mkldnn.is_available(). Then {cores}.")
    steps = [cores] + _top_op_levers(m, ctx)
    if ctx.knob("pin_memory"):
        steps.append("drop pin_memory=True: without a GPU it pins nothing and only costs the "
                     "DataLoader a copy")
    return "To go faster: " + "; ".join(steps) + ". A GPU is the larger step."


def _cpu_threads_advice(ctx: RunContext, trials: Trials | None) -> str:
    """How this run's compute threads and DataLoader workers fit its CPUs, as advice."""
    load = cpu_load(ctx)
    if load is None:
        return ("give the job more cores (--cpus-per-task) and match torch.set_num_threads to the "
                "cores left after the DataLoader workers")
    budget = load.cpus_per_process
    demand = loader_core_demand(load, trials)
    if load.oversubscribed and demand is not None and demand < LIGHT_LOADER_CORES:
        needed = max(math.ceil(demand), 1)
        surplus = (f"lower num_workers from {load.workers} to {needed} (the loader needs only "
                   f"{demand:.2f} of a core; more workers only compete for the {budget} CPUs), "
                   "then " if load.workers > needed else
                   f"the DataLoader needs only {demand:.2f} of a core, so ")
        return (f"{surplus}PyTorch's {load.threads} intra-op threads have the {budget} CPUs "
                f"nearly to themselves: more cores (--cpus-per-task={budget * 2}) make the "
                "operators faster")
    if load.oversubscribed:
        return (f"stop {load.describe()} competing for cores (see the oversubscription finding), "
                f"then request more cores: --cpus-per-task={load.busy} would give every thread "
                "its own")
    free = budget - load.workers - load.threads
    if load.threads_known and free > 0:
        return (f"PyTorch computes on {load.threads} thread{'s' if load.threads != 1 else ''} "
                f"while {free} of {budget} CPUs are free: call torch.set_num_threads"
                f"({budget - load.workers})")
    return (f"every CPU is in use ({load.describe()}): more cores (--cpus-per-task) make the "
            "operators faster")


def _top_op_levers(m: RunMetrics, ctx: RunContext) -> list[str]:
    """What can make this run's top CPU operator cheaper, by how it runs and the knobs not yet
    tried (channels_last for oneDNN convolutions, torch.compile)."""
    top = m.top_ops[0] if m.top_ops else None
    if top is None:
        return []
    out = []
    onednn = bool(concepts.is_onednn_op(pd.Series([top.name])).iloc[0])
    if onednn and not ctx.knob("channels_last"):
        out.append(f"{top.name} takes {pct(top.share)} of step time on oneDNN: try "
                   f"{memory_format_advice(_conv_ranks(m))}, which oneDNN's convolutions prefer")
    if not ctx.knob("compile"):
        out.append(f"torch.compile the model to fuse the operators around {top.name}"
                   if not out else "torch.compile the model to fuse the operators around it")
    elif not out:
        out.append(f"{top.name} takes {pct(top.share)} of step time even compiled: a smaller "
                   "model or input is the remaining lever")
    return out


def _top_compute_kernel(m: RunMetrics) -> TopItem | None:
    """The kernel with the most time that is not a communication kernel."""
    return next((k for k in m.top_kernels if not k.is_comm), None)


def _compute_share(m: RunMetrics) -> float | None:
    """Compute share of the step in the breakdown."""
    if m.breakdown is None or m.breakdown.step_ns <= 0:
        return None
    return m.breakdown.parts_ns["compute"] / m.breakdown.step_ns


def dominant_collective(c: CommStats) -> str | None:
    """The kind of collective (concepts.ALL_REDUCE...) that holds COLLECTIVE_DOMINANT_SHARE of
    the communication time, None when none does or the kinds are unknown."""
    total = sum(c.ns_per_step_by_collective.values())
    return next((kind for kind, ns in c.ns_per_step_by_collective.items()
                 if kind != "unknown" and ns >= COLLECTIVE_DOMINANT_SHARE * total > 0), None)


def _ddp_levers(c: CommStats, ctx: RunContext) -> str:
    """DDP's gradient all-reduce: the knobs that cut or hide it, less those the run has set."""
    calls = f"{_count(c.calls_per_step)} call{'' if c.calls_per_step == 1 else 's'} per step"
    levers = []
    bucket = ctx.knob("bucket_cap_mb")
    if bucket in (None, DDP_DEFAULT_BUCKET_MB) and c.calls_per_step > 1:
        levers.append(f"raise bucket_cap_mb from {DDP_DEFAULT_BUCKET_MB} MB to cut the {calls}")
    if ctx.knob("broadcast_buffers") in (None, True):
        levers.append("set broadcast_buffers=False if the model's buffers need no sync")
    levers.append("use a larger local batch or gradient accumulation with no_sync() so "
                  "gradients are reduced less often")
    return "; ".join(levers)


#: What to change for communication of each kind, when it dominates.
_COLLECTIVE_ADVICE = {
    concepts.ALL_TO_ALL: "The communication is all-to-all (embedding or expert sharding, not "
    "DDP's gradient reduction): overlap it with compute (a pipelined training loop such as "
    "TorchRec's TrainPipelineSparseDist), send fewer bytes (smaller or quantised embeddings, "
    "fp16/bf16 comms), or shard so that fewer lookups cross ranks.",
    concepts.SEND_RECV: "The communication is point-to-point send/recv (pipeline stages or "
    "all-to-all built from them): overlap it with compute (more micro-batches per pipeline "
    "step, an interleaved schedule) and send fewer bytes (bf16 activations).",
    concepts.ALL_GATHER: "The communication gathers parameters (FSDP/ZeRO): prefetch the next "
    "all-gather during compute (forward_prefetch=True, backward_prefetch=BACKWARD_PRE), wrap "
    "larger units so fewer gathers run, or keep parameters sharded less (hybrid sharding).",
    concepts.REDUCE_SCATTER: "The communication scatters gradients (FSDP/ZeRO): wrap larger "
    "units so fewer reduce-scatters run, reduce in bf16 (MixedPrecision(reduce_dtype="
    "torch.bfloat16)), or accumulate gradients over more micro-batches.",
    concepts.BROADCAST: "The communication is broadcasts (parameters or buffers sent from one "
    "rank every step): broadcast once at start-up (DDP's broadcast_buffers=False when buffers "
    "need no sync).",
}


def _comm_advice(c: CommStats, ctx: RunContext) -> str:
    """What to change, by the collective the communication is: DDP's knobs only for
    all-reduce, and conditional when the profile does not say what the kernels do."""
    kind = dominant_collective(c)
    if kind == concepts.ALL_REDUCE:
        return f"Tune DDP's gradient all-reduce: {_ddp_levers(c, ctx)}."
    if kind in _COLLECTIVE_ADVICE:
        return _COLLECTIVE_ADVICE[kind]
    return ("The profile does not say what most of this communication is (kernel names "
            "without the collective, launches not recorded): if it is DDP's gradient "
            f"all-reduce, {_ddp_levers(c, ctx)}.")


def comm_overhead(m: RunMetrics, ctx: RunContext) -> Finding | None:
    """Collectives take a noticeable share of the step; say how much is hidden under compute."""
    c = m.comm
    if c is None or c.fraction < COMM_REPORT_FRACTION:
        return None
    severity: Severity = ("high" if c.exposed_fraction >= COMM_BOUND_EXPOSED_FRACTION else
                          "medium" if c.exposed_fraction >= COMM_EXPOSED_WARN_FRACTION else "low")
    where = "NCCL kernels" if c.on_gpu else "CPU collectives"
    calls = f"{c.calls_per_step:g} call{'' if c.calls_per_step == 1 else 's'} per step"
    evidence = [Evidence(f"{where} take {pct(c.fraction)} of step time "
                         f"({ms(c.total_ns_per_step)} per step, {calls})", c.origin),
                Evidence(f"{pct(c.overlap_fraction)} of communication time overlaps compute; "
                         f"{pct(c.exposed_fraction)} of the step is exposed communication",
                         c.origin)]
    if c.ns_per_step_by_collective:
        evidence.append(Evidence("per step: " + ", ".join(
            f"{'not identified' if kind == 'unknown' else kind.replace('_', '-')} {ms(ns)}"
            for kind, ns in
            c.ns_per_step_by_collective.items()), c.origin))
    advice = _comm_advice(c, ctx)
    if severity == "low":
        advice = ("Communication is mostly hidden under compute; no change needed unless you "
                  "scale further. " + advice)
    title = (f"Communication takes {pct(c.fraction)} of each step; "
             f"{pct(c.overlap_fraction)} of it overlaps compute.")
    return Finding("COMM_OVERHEAD", severity, title, evidence, advice)


def host_launch_bound(m: RunMetrics, ctx: RunContext) -> Finding | None:
    """The GPU waits for the CPU: its idle time ends with work launched during it (nothing was
    queued), for a large share of the step."""
    idle, launch = m.gpu_idle, m.launch
    if idle is None or launch is None or idle.share("launch") < HOST_BOUND_IDLE_SHARE:
        return None
    many_short = launch.short_kernel_fraction >= SHORT_KERNEL_MANY and \
        launch.kernels_per_step >= MANY_KERNELS_PER_STEP
    evidence = [Evidence(f"the GPU idles {pct(idle.share('launch'))} of the step until work the "
                         "CPU launches during the idle time arrives (launch call and GPU work "
                         "joined by correlation id): nothing was queued", idle.origin,
                         m.locate(idle.origin, idle.longest_launch_wait)),
                Evidence(f"{launch.kernels_per_step:.0f} kernels launched per step, "
                         f"{pct(launch.short_kernel_fraction)} shorter than "
                         f"{launch.short_kernel_ns // 1000} µs; CUDA runtime calls take "
                         f"{ms(launch.runtime_ns_per_step)} of CPU time per step", launch.origin)]
    if launch.launch_delay_p50_ns is not None:
        evidence.append(Evidence(f"median launch-to-start latency {ms(launch.launch_delay_p50_ns)}",
                                 launch.origin))
    evidence += _launch_wait_evidence(idle) + _minor_sync_evidence(m.syncs)
    title = ("The GPU waits for the CPU to launch many small kernels." if many_short else
             "The GPU waits for the CPU to launch its work.")
    advice = (f"{_fuse_advice(ctx).capitalize()} and raise the batch size so each launch "
              "carries more work." if many_short else
              _launch_wait_advice(idle, m.steps.count if m.steps is not None else 1, ctx))
    return Finding("HOST_LAUNCH_BOUND", "high", title, evidence, advice)


def _launch_wait_evidence(idle: IdleCauses) -> list[Evidence]:
    """What the CPU did while the GPU waited for its launches: the ops with the most self time
    then, and the time outside every op."""
    out = [Evidence(f"while the GPU waited, the CPU spent {ms(op.total_ns)} per step in {op.name} "
                    f"(self time, {pct(op.share)} of the wait)", idle.origin)
           for op in idle.launch_wait_ops if op.share >= LAUNCH_WAIT_OP_SHARE]
    if not out and idle.launch_wait_ops:
        spread = ", ".join(f"{op.name} {pct(op.share)}" for op in idle.launch_wait_ops)
        out.append(Evidence("while the GPU waited, no CPU operator held more than "
                            f"{pct(LAUNCH_WAIT_OP_SHARE)} of the wait (top by self time: "
                            f"{spread}): the time is spread over many operators", idle.origin))
    waited = idle.idle_ns_per_step.get("launch", 0)
    outside = idle.launch_wait_outside_ops_ns
    if waited and outside / waited >= LAUNCH_WAIT_OP_SHARE:
        out.append(Evidence(f"{ms(outside)} per step ({pct(outside / waited)} of the wait) lies "
                            "outside every recorded CPU operator: Python code between "
                            "operators", idle.origin))
    return out


def _minor_sync_evidence(syncs: SyncStats | None) -> list[Evidence]:
    """Blocking calls that exist but are too short to be the stall: said, so that a reader who
    sees them in the trace knows they were weighed."""
    if syncs is None or syncs.fraction >= SYNC_STALL_FRACTION or syncs.ns_per_step <= 0:
        return []
    names = ", ".join(call.name for call in syncs.calls if call.calls_per_step > 0)
    return [Evidence(f"the CPU also blocks in {names} for {ms(syncs.ns_per_step)} per step "
                     f"({pct(syncs.fraction)} of the step): too little to be the stall",
                     syncs.origin)]


def _fuse_advice(ctx: RunContext) -> str:
    """How to launch fewer kernels from the CPU: torch.compile, or CUDA graphs when the model is
    compiled already (compiled kernels are still launched one by one)."""
    if ctx.knob("compile"):
        return ("replay the step as a CUDA graph (the model is compiled already, but each of its "
                "kernels is still launched from the CPU: compile with mode='reduce-overhead' or "
                "capture with torch.cuda.graph)")
    return ("fuse kernels with torch.compile (mode='reduce-overhead' also replays them as a "
            "CUDA graph)")


def _launch_wait_advice(idle: IdleCauses, steps: int, ctx: RunContext) -> str:
    """Advice aimed at what the CPU does while the GPU waits: the top op (or that it ran once,
    a start-up cost), or Python between ops, or generic when the trace names neither."""
    top = next((op for op in idle.launch_wait_ops if op.share >= LAUNCH_WAIT_OP_SHARE), None)
    waited = idle.idle_ns_per_step.get("launch", 0)
    outside = idle.launch_wait_outside_ops_ns / waited if waited else 0.0
    if top is not None and top.share >= outside and top.count == 1 and steps > 1:
        return (f"{top.name} held the CPU once in {steps} steps ({ms(top.total_ns * steps)}): "
                "a one-off cost (first call: lazy initialisation, allocation, autotuning), not "
                "one of every step; profile after a warm-up step (torch.profiler.schedule with "
                "warmup=1) to see the steady state.")
    if top is not None and top.share >= outside:
        return (f"Make {top.name} cheaper or move it out of the step: it holds the CPU for "
                f"{ms(top.total_ns)} per step while the GPU has nothing queued (allocate and "
                "prepare tensors once before the loop and reuse them, or launch the GPU work "
                "that does not depend on it first).")
    if top is None and outside < LAUNCH_WAIT_OP_SHARE and idle.launch_wait_ops:
        return ("Cut the CPU's cost per operator, which is spread over many small ops "
                f"({', '.join(op.name for op in idle.launch_wait_ops)}...): "
                f"{_fuse_advice(ctx)}, and raise the batch size so each op carries more GPU "
                "work.")
    if outside >= LAUNCH_WAIT_OP_SHARE:
        return ("Cut the Python between operators in the step (it runs while the GPU has nothing "
                f"queued): {_fuse_advice(ctx)}, move logging and metric computation out of the "
                "step, and avoid per-step .item()/print calls.")
    return ("Move Python and CPU work out of the step (or overlap it with the GPU: prepare the "
            "next batch while the current one runs), and avoid per-step .item()/print calls.")


def pageable_memcpy(m: RunMetrics, ctx: RunContext) -> Finding | None:
    """Host-to-device copies come from pageable (unpinned) memory."""
    c = m.copies
    if c is None or c.h2d_bytes <= 0:
        return None
    if c.h2d_pageable_bytes < PAGEABLE_MIN_BYTES or \
            c.h2d_pageable_bytes / c.h2d_bytes < PAGEABLE_SHARE:
        return None
    pinned = "pin_memory=True" if not ctx.knob("pin_memory") else "pinned buffers"
    return Finding("PAGEABLE_MEMCPY", "medium",
                   f"{pct(c.h2d_pageable_bytes / c.h2d_bytes)} of host-to-device bytes come "
                   "from pageable memory.",
                   [Evidence(f"{nbytes(c.h2d_pageable_bytes)} of {nbytes(c.h2d_bytes)} H2D copied "
                             f"from pageable memory, {ms(c.h2d_ns)} of copy time",
                             c.origin)],
                   f"Use {pinned} in the DataLoader with .to(device, non_blocking=True): "
                   f"{nbytes(c.h2d_pageable_bytes)} of H2D copies came from pageable memory.")


def _sync_evidence(syncs: SyncStats, m: RunMetrics) -> list[Evidence]:
    """One line per blocking call inside the steps (located at its longest call), and one for
    those outside them."""
    out = [Evidence(f"{call.name}: {call.calls_per_step:g} per step, {ms(call.ns_per_step)} per "
                    "step inside the step windows", syncs.origin,
                    m.locate(syncs.origin, call.longest))
           for call in syncs.calls if call.calls_per_step > 0]
    if syncs.outside_calls:
        out.append(Evidence(f"{syncs.outside_calls} more blocking call"
                            f"{'s' if syncs.outside_calls != 1 else ''} "
                            f"({ms(syncs.outside_ns)}) outside the steps (warm-up or teardown), "
                            "not counted per step", syncs.origin))
    return out


def sync_stall(m: RunMetrics, ctx: RunContext) -> Finding | None:
    """The CPU blocks in syncs or blocking copies for a large share of each step while the GPU is
    not saturated (a CPU waiting on a busy GPU costs nothing)."""
    syncs = m.syncs
    if syncs is None or syncs.fraction < SYNC_STALL_FRACTION or \
            (m.gpu is not None and m.gpu.busy_fraction >= COMPUTE_BOUND_BUSY):
        return None
    top = syncs.calls[0]
    pageable = any("pageable" in call.name and call.calls_per_step for call in syncs.calls)
    advice = ("Keep values on the GPU (accumulate the loss as a tensor), read them every N steps "
              "instead of each step (.item(), .cpu(), print(loss)), and remove "
              "torch.cuda.synchronize() from the step")
    if pageable:
        advice += ("; copy device-to-host into pinned memory with non_blocking=True so the copy "
                   "does not block")
    return Finding("SYNC_STALL", "medium",
                   f"The CPU waits for the GPU in blocking calls for {pct(syncs.fraction)} of "
                   f"each step, most in {top.name}.", _sync_evidence(syncs, m), advice + ".")


def low_gpu_util(m: RunMetrics, ctx: RunContext) -> Finding | None:
    """The GPU idles for most of its window."""
    g = m.gpu
    if g is None or g.busy_fraction >= LOW_GPU_BUSY:
        return None
    severity: Severity = "high" if g.busy_fraction < VERY_LOW_GPU_BUSY else "medium"
    evidence = [Evidence(f"kernels, copies and memsets cover {ms(g.busy_ns)} of the "
                         f"{ms(g.window_ns)} GPU window", g.origin)]
    if g.largest_gaps:
        gap = g.largest_gaps[0]
        evidence.append(Evidence(f"largest idle gap {ms(gap.duration_ns)} on GPU {gap.device},"
                                 f" {gap.where}; {g.long_gap_count} gaps over "
                                 f"{ms(g.long_gap_ns)}", g.origin, _largest_gap_at(m)))
    return Finding("LOW_GPU_UTIL", severity,
                   f"The GPU is busy only {pct(g.busy_fraction)} of the time.", evidence,
                   _idle_advice(m))


#: What the GPU's idle time waits for (IdleCauses' causes), as the advice names it.
_IDLE_CAUSE_FIX = {"data": "the DataLoader", "sync": "blocking syncs",
                   "launch": "the CPU launching its work",
                   "unexplained": "CPU work that launches nothing (compilation, Python)"}


def _idle_advice(m: RunMetrics) -> str:
    """Fix what the GPU's idle time waits for, largest first, from the profile's own causes;
    said plainly when the profile shows none."""
    waits = dict(m.gpu_idle.idle_ns_per_step) if m.gpu_idle is not None else {}
    loop = loop_ns_without_loader(m)
    if loop is not None:  # the loader wait includes the GPU idle time between steps
        waits["data"] = max(waits.get("data", 0), loop[0])
    total = sum(waits.values())
    causes = [cause for cause, ns in sorted(waits.items(), key=lambda item: -item[1])
              if cause in _IDLE_CAUSE_FIX and ns > 0 and ns >= IDLE_CAUSE_SHARE * total]
    if not causes:
        return ("The profile does not show what the GPU waits for (no step markers or CPU "
                "activity around its idle time): profile a few steps with torch.profiler to see "
                "the CPU side.")
    named = ", ".join(f"{_IDLE_CAUSE_FIX[cause]} ({ms(waits[cause])} per step)"
                      for cause in causes)
    batch = ("; then raise the batch size so each launch carries more GPU work"
             if "launch" in causes else "")
    return f"Fix what the GPU waits for first: {named}{batch}."


def small_batch(m: RunMetrics, ctx: RunContext) -> Finding | None:
    """Each step gives the GPU too little work (by the knobs, or by tiny kernels)."""
    batch = ctx.knob("batch_size")
    if m.gpu is None:
        return None
    if isinstance(batch, int) and batch <= SMALL_BATCH_SIZE:
        evidence = [Evidence(f"batch size {batch} per device (manifest)", "manifest")]
    elif (m.launch is not None and m.gpu.busy_fraction < LOW_GPU_BUSY
          and m.launch.short_kernel_fraction >= SMALL_BATCH_SHORT_KERNELS
          and m.launch.kernels_per_step >= MANY_KERNELS_PER_STEP
          and (m.dataloader_fraction or 0.0) < LOADER_BOUND_FRACTION):
        evidence = [Evidence(f"{pct(m.launch.short_kernel_fraction)} of kernels are shorter "
                             f"than {m.launch.short_kernel_ns // 1000} µs and the GPU is busy "
                             f"{pct(m.gpu.busy_fraction)}", m.launch.origin)]
    else:
        return None
    return Finding("SMALL_BATCH", "medium", "Each step gives the GPU too little work.", evidence,
                   "Raise the per-device batch size (scale the learning rate with it) or use "
                   "gradient accumulation; mixed precision frees memory for a larger batch.")


def dataparallel_not_ddp(m: RunMetrics, ctx: RunContext) -> Finding | None:
    """nn.DataParallel (one process driving several GPUs) instead of DDP: its forward span, or
    one process launching kernels on several GPUs, or the run's knob. DataParallel's autograd
    functions alone (Broadcast, Gather...) are not enough: ``GatherBackward0`` is torch.gather's
    backward, and a DistributedDataParallel run is no DataParallel run."""
    forward = bool(m.dataparallel_ops) and bool(
        concepts.is_dataparallel_forward(pd.Series(list(m.dataparallel_ops))).any())
    multi_device = m.max_devices_per_process > 1 and m.gpu is not None
    if not (forward or multi_device or ctx.knob("dataparallel")):
        return None
    evidence = []
    if m.dataparallel_ops:
        listed = ", ".join(f"{name} ×{count}" for name, count in m.dataparallel_ops.items())
        origin: Origin = "nsys" if m.gpu is not None and m.gpu.origin == "nsys" else "kineto"
        evidence.append(Evidence(f"nn.DataParallel ops: {listed[:200]}", origin))
    if multi_device:
        evidence.append(Evidence(f"one process launched kernels on {m.max_devices_per_process} "
                                 "GPUs", m.gpu.origin))
    if ctx.knob("dataparallel"):
        evidence.append(Evidence("the run's knobs use nn.DataParallel", "manifest"))
    return Finding("DATAPARALLEL_NOT_DDP", "high",
                   "The model uses nn.DataParallel: one process drives every GPU.", evidence,
                   "Switch to DistributedDataParallel with one process per GPU (torchrun "
                   "--nproc_per_node=<GPUs>, or srun --ntasks-per-node=<GPUs>) and a "
                   "DistributedSampler.")


def loader_core_demand(load: CpuLoad, trials: Trials | None) -> float | None:
    """Cores the DataLoader keeps busy at the real loop's pace: its workers, scaled by how much
    of the loader-only (IO trial) throughput the real loop (full trial) uses."""
    if trials is None or not trials.io or not trials.full or load.workers == 0:
        return None
    return load.workers * min(trials.full / trials.io, 1.0)


def cpu_oversubscribed(m: RunMetrics, ctx: RunContext) -> Finding | None:
    """CPU-only run: DataLoader workers and PyTorch's intra-op threads want more CPUs than the run
    has, so the loader steals cores from the model's operators."""
    load = cpu_load(ctx)
    if load is None or m.gpu is not None or not load.oversubscribed:
        return None
    evidence = [Evidence(f"{load.describe()}: {load.busy} busy threads", "manifest")]
    share = _compute_share(m)
    if share is not None and m.breakdown is not None:
        evidence.append(Evidence(f"the model's operators take {pct(share)} of the "
                                 f"{ms(m.breakdown.step_ns)} step, on the same cores",
                                 m.breakdown.origin))
    trials = m.trials
    if trials is not None and trials.synthetic and trials.full:
        evidence.append(Evidence(f"{trials.synthetic:.0f} samples/s on synthetic data "
                                 f"(no DataLoader) against {trials.full:.0f} with it",
                                 "manifest"))
    demand = loader_core_demand(load, trials)
    if demand is not None:
        evidence.append(Evidence(f"the DataLoader needs about {demand:.2f} of a core at the real "
                                 "loop's pace (workers × full / IO trial throughput)", "manifest"))
    budget = load.cpus_per_process
    if demand is not None and demand < LIGHT_LOADER_CORES:
        advice = (f"Keep PyTorch's {load.threads} intra-op threads: the loader needs only "
                  f"{demand:.2f} of a core, less than a thread taken from the model would cost. "
                  "Make the per-sample work cheaper (precompute or cache the transformed "
                  "samples)")
        severity: Severity = "low"
    elif load.workers < budget:
        left = budget - load.workers
        advice = (f"Call torch.set_num_threads({left}) (or set OMP_NUM_THREADS={left}) so the "
                  f"{load.workers} DataLoader worker{'s' if load.workers != 1 else ''} and the "
                  f"intra-op threads share {budget} CPU{'s' if budget != 1 else ''} per process "
                  "without contention")
        severity = "medium"
    else:
        advice = (f"Lower num_workers from {load.workers} to {budget - 1} and call "
                  "torch.set_num_threads(1)")
        severity = "medium"
    return Finding("CPU_OVERSUBSCRIBED", severity,
                   f"{load.describe()}: the DataLoader competes with the model for cores.",
                   evidence, f"{advice}; or request --cpus-per-task={load.busy} in Slurm.")


def _wait_evidence(m: RunMetrics, origin: str, share: float) -> Evidence:
    """What one profiler measured of the DataLoader wait, in its own terms."""
    loop = m.loop_line if origin == "lprof" else None
    if loop is not None:
        return Evidence(f"{pct(share)} of {loop.function}() on the DataLoader loop line "
                        f"{loop.file.rsplit('/', 1)[-1]}:{loop.lineno}", "lprof")
    return Evidence(f"{pct(share)} of step time waiting for the next batch",
                    origin)  # type: ignore[arg-type]


def sources_agreement(m: RunMetrics, ctx: RunContext) -> Finding | None:
    """When several profilers measured the DataLoader share: do they tell the same story?"""
    shares = m.dataloader_fraction_by_origin
    if len(shares) < 2:
        return None
    evidence = [_wait_evidence(m, origin, share) for origin, share in sorted(shares.items())]
    if m.gpu is not None:
        evidence.append(Evidence(f"GPU idle {pct(1 - m.gpu.busy_fraction)}", m.gpu.origin))
    values = list(shares.values())
    spread = f"{pct(min(values))} to {pct(max(values))}"
    agree = max(values) - min(values) <= SOURCES_AGREE_DELTA or \
        len({v >= LOADER_BOUND_FRACTION for v in values}) == 1
    if agree:
        return Finding("SOURCES_AGREE", "info",
                       f"The {len(values)} profilers of this run agree on the DataLoader wait "
                       f"({spread} of step time).", evidence,
                       "No action: the diagnosis rests on several independent measurements.")
    return Finding("SOURCES_DISAGREE", "info",
                   f"The profilers of this run disagree on the DataLoader wait ({spread} of "
                   "step time).", evidence,
                   "Trust the trace-based profiler (nsys/torch.profiler) over line_profiler, "
                   "whose per-line overhead inflates Python-heavy lines; re-run if in doubt.")


def _profiler_limit(m: RunMetrics) -> str | None:
    """What the profilers' verdict points at, in the trials' terms ("loader", "compute")."""
    return _VERDICT_LIMIT.get(profiler_verdict(m)[0])


def trials_disagree(m: RunMetrics, ctx: RunContext) -> Finding | None:
    """The runner's unprofiled trials point at another limit than the profilers."""
    limit, profiled = trial_limit(m.trials), _profiler_limit(m)
    if m.trials is None or limit is None or profiled is None or limit == profiled:
        return None
    name, reason = profiler_verdict(m)
    origin: Origin = m.breakdown.origin if m.breakdown is not None else (
        m.steps.origin if m.steps is not None else "manifest")
    who = {"loader": "the DataLoader", "compute": "the model"}
    return Finding("TRIALS", "info",
                   f"The runner's trials point at {who[limit]}, the profilers at "
                   f"{who[profiled]}.",
                   [Evidence(f"without a profiler, {_trial_sentence(m.trials)}", "manifest"),
                    Evidence(f"profiled: {name} ({reason})", origin)],
                   "Profilers slow down what they trace (every operator, every Python line), "
                   "so the unprofiled trials are the better guide to throughput; compare the "
                   "step breakdown with a longer profiled run before acting on either.")


RULES: tuple[Rule, ...] = (loader_bound, compute_bound, comm_overhead, host_launch_bound,
                           pageable_memcpy, sync_stall, low_gpu_util, small_batch,
                           dataparallel_not_ddp, cpu_oversubscribed, in_process_loader,
                           zero_grad_not_none, fp32_on_tensor_cores, conv_bias_before_bn,
                           host_device_copies, long_gpu_idle_gaps, optimizer_not_fused,
                           op_checks_unknown,
                           sources_agreement,
                           trials_disagree)
# Every id a rule gives its finding: what a grading rubric may name (vocabulary, not a
# threshold; tests/test_grade_rubric.py keeps it in step with the rules).
FINDING_IDS = frozenset({
    "LOADER_BOUND", "COMPUTE_BOUND", "COMM_OVERHEAD", "HOST_LAUNCH_BOUND", "PAGEABLE_MEMCPY",
    "SYNC_STALL", "LOW_GPU_UTIL", "SMALL_BATCH", "DATAPARALLEL_NOT_DDP", "CPU_OVERSUBSCRIBED",
    "SOURCES_AGREE", "SOURCES_DISAGREE", "TRIALS", "SYNC_DATALOADER", "ZERO_GRAD_NOT_NONE",
    "FP32_ON_TENSOR_CORES", "CONV_BIAS_BEFORE_BN", "HOST_DEVICE_COPIES_PER_STEP",
    "LONG_GPU_IDLE_GAPS", "OPTIMIZER_NOT_FUSED", "OP_CHECKS_UNKNOWN"})


#: The finding that explains each verdict: it leads the run's findings, whatever its severity.
VERDICT_FINDINGS: dict[str, str] = {
    "loader-bound": "LOADER_BOUND", "compute-bound": "COMPUTE_BOUND",
    "communication-bound": "COMM_OVERHEAD", "host-bound": "HOST_LAUNCH_BOUND",
    "sync-bound": "SYNC_STALL",
}


def find_all(metrics: RunMetrics, ctx: RunContext,
             run_verdict: Verdict | None = None) -> list[Finding]:
    """Every rule that fires: the one explaining ``run_verdict`` first, then most severe first
    (then by id, for a stable order)."""
    found = [f for rule in RULES if (f := rule(metrics, ctx)) is not None]
    lead = VERDICT_FINDINGS.get(run_verdict or "")
    return sorted(found, key=lambda f: (f.id != lead, _SEVERITY_ORDER[f.severity], f.id))


def _gpu_idle_candidates(m: RunMetrics) -> list[Candidate]:
    """Host-bound and sync-bound from what the GPU's idle time waits for (see IdleCauses)."""
    idle = m.gpu_idle
    if idle is None:
        return []
    out: list[Candidate] = []
    launch, sync = idle.share("launch"), idle.share("sync")
    if launch >= HOST_BOUND_IDLE_SHARE:
        out.append((launch, HOST_BOUND_IDLE_SHARE, "host-bound",
                    f"the GPU idles {pct(launch)} of the step until work the CPU launches during "
                    "the idle time arrives: it waits for the CPU"))
    if sync >= SYNC_BOUND_IDLE_SHARE:
        top = m.syncs.calls[0].name if m.syncs is not None and m.syncs.calls else "a sync"
        out.append((sync, SYNC_BOUND_IDLE_SHARE, "sync-bound",
                    f"the GPU idles {pct(sync)} of the step after the CPU blocked in {top}, with "
                    "nothing more queued"))
    return out


def _unexplained_idle(m: RunMetrics) -> tuple[Verdict, str] | None:
    """Unknown, when the GPU idles most of the step for no reason the trace shows."""
    idle = m.gpu_idle
    if idle is None or idle.share("unexplained") < UNEXPLAINED_IDLE_SHARE:
        return None
    return "unknown", (f"the GPU idles {pct(idle.share('unexplained'))} of the step, and no "
                       "DataLoader wait, sync or launch in the trace ends that idle time (CPU "
                       "work that launches nothing, e.g. compilation, looks like this)")


def verdict(m: RunMetrics) -> tuple[Verdict, str]:
    """The run's bottleneck in one word, with the numbers behind it: the profilers' verdict,
    supported by the runner's trials when they agree, and taken from the trials when the
    profilers cannot tell (unknown) or see no dominant part (balanced)."""
    name, reason = profiler_verdict(m)
    limit = trial_limit(m.trials)
    if m.trials is None or limit is None:
        return name, reason
    if name in ("unknown", "balanced"):
        return _LIMIT_VERDICT[limit], (f"without a profiler, {_trial_sentence(m.trials)} "
                                       f"(the runner's trials); the profilers: {reason}")
    if _VERDICT_LIMIT.get(name) == limit:
        return name, f"{reason}; the runner's unprofiled trials agree"
    return name, reason


Candidate = tuple[float, float, Verdict, str]


def _waste_candidates(m: RunMetrics) -> list[Candidate]:
    """Verdicts whose figure (a share of the step lost to one cause) passed its threshold:
    (figure, threshold, verdict, reason)."""
    loader = m.dataloader_fraction or 0.0
    exposed = m.comm.exposed_fraction if m.comm is not None else 0.0
    out: list[Candidate] = []
    if loader >= LOADER_BOUND_FRACTION:
        out.append((loader, LOADER_BOUND_FRACTION, "loader-bound",
                    f"{pct(loader)} of step time waits for data"))
    if exposed >= COMM_BOUND_EXPOSED_FRACTION:
        out.append((exposed, COMM_BOUND_EXPOSED_FRACTION, "communication-bound",
                    f"{pct(exposed)} of step time is communication not hidden by compute"))
    return out + _gpu_idle_candidates(m)


def profiler_verdict(m: RunMetrics) -> tuple[Verdict, str]:
    """The bottleneck the profiles alone show, with the numbers behind it."""
    if m.steps is None and m.gpu is None:
        return "unknown", ("no step markers (ProfilerStep, NVTX 'step N', a DataLoader loop "
                           "line) and no GPU activity in the inputs")
    candidates = _waste_candidates(m)
    if candidates:
        _, _, name, reason = max(candidates, key=lambda c: c[0])
        return name, reason
    return _compute_or_balanced(m)


def _compute_figure(m: RunMetrics) -> tuple[float, float] | None:
    """The figure behind compute-bound and its threshold: the GPU's busy share, else the compute
    share of the step."""
    if m.gpu is not None and m.gpu.busy_fraction >= COMPUTE_BOUND_BUSY:
        return m.gpu.busy_fraction, COMPUTE_BOUND_BUSY
    share = _compute_share(m)
    return (share, COMPUTE_BOUND_SHARE) if share is not None else None


def verdict_confidence(m: RunMetrics, name: Verdict) -> tuple[str, float] | None:
    """How clearly the profilers' verdict stands, as a label and the margin behind it: the
    smaller of how far its figure is past its threshold and how far ahead of the next candidate
    it is (shares of the step). None for unknown and balanced, whose reason says why."""
    candidates = _waste_candidates(m)
    chosen = next((c for c in sorted(candidates, reverse=True) if c[2] == name), None)
    if chosen is None and name == "compute-bound" and (figure := _compute_figure(m)):
        chosen = (figure[0], figure[1], name, "")
    if chosen is None:
        return None
    others = [c[0] for c in candidates if c is not chosen and c[2] != name]
    margin = min(chosen[0] - chosen[1], chosen[0] - max(others, default=0.0))
    label = ("high" if margin >= CONFIDENT_MARGIN else
             "medium" if margin >= CLEAR_MARGIN else "low")
    return _capped_by_loop(m, name, label), margin


def _capped_by_loop(m: RunMetrics, name: Verdict, label: str) -> str:
    """A loader-bound verdict seen only by line_profiler is no surer than the identification of
    its DataLoader line (hit counts alone give medium or low)."""
    found = m.loop_identification
    if name != "loader-bound" or found is None or set(m.dataloader_fraction_by_origin) != {"lprof"}:
        return label
    order = ("low", "medium", "high")
    return min(label, found.confidence if found.confidence in order else "low", key=order.index)


def _compute_or_balanced(m: RunMetrics) -> tuple[Verdict, str]:
    """Compute-bound when the GPU (or CPU ops) is saturated, else balanced or unknown."""
    unexplained = _unexplained_idle(m)
    if unexplained is not None:
        return unexplained
    if m.gpu is not None and m.gpu.busy_fraction >= COMPUTE_BOUND_BUSY:
        return "compute-bound", f"GPU busy {pct(m.gpu.busy_fraction)} of the {m.gpu.span}"
    share = _compute_share(m)
    if share is not None and share >= COMPUTE_BOUND_SHARE:
        where = "GPU kernels" if m.gpu is not None else "the model's CPU operators"
        return "compute-bound", f"{where} take {pct(share)} of step time"
    if m.steps is None:
        return "unknown", (f"GPU busy {pct(m.gpu.busy_fraction) if m.gpu else '?'} but no step "
                           "markers to attribute the idle time")
    if m.breakdown is None:
        return "unknown", "steps were found but no source could split the step time"
    other = m.breakdown.parts_ns["other"] / max(m.breakdown.step_ns, 1)
    if other >= UNATTRIBUTED_SHARE:
        return "unknown", (f"{pct(other)} of the step is time {origin_label(m.breakdown.origin)} "
                           "cannot attribute (no GPU events, CPU operators or source lines)")
    return "balanced", "no single part of the step dominates"
