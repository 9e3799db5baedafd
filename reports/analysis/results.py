"""Typed result objects: what the analysis computes and every renderer takes.

Data flows one way: parsers -> tables -> metrics (``reports.analysis.metrics``) -> findings
(``reports.analysis.findings``) -> these objects -> renderers (``reports.render``). Renderers only
format what is here; they never compute a metric. Durations are integer nanoseconds; fractions
are floats in 0..1; a field is ``None`` when the profiles of a run cannot tell.

Words kept to one meaning each: an **input** (:class:`InputFile`) is a file given to the analysis;
an **origin** is the profiler (or the runner's manifest) a figure comes from; **source** is a
program's source code (a line's text, ``--source-root``). The JSON report keeps its published keys
(``sources`` for the inputs, ``source`` for an evidence's origin and a line's text).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from profreport.concepts import ANNOTATED_RANGE
from profreport.model import SourceHidden, process_label
from profreport.units import pct

SCHEMA = "profreport/1"

Severity = Literal["high", "medium", "low", "info"]
Verdict = Literal["loader-bound", "compute-bound", "communication-bound", "host-bound",
                  "sync-bound", "transfer-bound", "balanced", "unknown"]
#: Which statistic a comparison row's step time is.
StepTimeKind = Literal["median", "mean"]
#: Where a metric came from: a profiler, or the runner's own measurement.
Origin = Literal["nsys", "kineto", "lprof", "manifest"]
#: What a share of CPU-operator time is of: the summed step windows, or, in a profile without
#: steps, the profiled span (model.profiled_span: its first recorded start to its last end).
ShareBasis = Literal["step time", "profiled span"]

#: The name people know each origin by, for evidence sentences and tables.
ORIGIN_LABELS: dict[str, str] = {
    "nsys": "Nsight Systems",
    "kineto": "torch.profiler",
    "lprof": "line_profiler",
    "manifest": "runner measurement",
}


def origin_label(origin: str) -> str:
    """The name of the profiler (or the runner) a figure came from."""
    return ORIGIN_LABELS.get(origin, origin)

#: The parts of a step, in the order tables and charts show them: the pipeline's order, not the
#: order they claim time in (each claims only what is not yet claimed), which is their
#: builder's (gpu.gpu_parts: the device's work first; breakdown.cpu_parts).
BREAKDOWN_PARTS = ("dataloader", "h2d_copy", "compute", "copy_memset", "comm_exposed",
                   "host_runtime", "other")
#: The name of each part, for tables, charts and sentences (keys in BREAKDOWN_PARTS order).
PART_LABELS = {
    "dataloader": "DataLoader wait",
    "h2d_copy": "Host-to-device copy",
    "compute": "Compute",
    "copy_memset": "Other GPU copies and memsets",
    "comm_exposed": "Communication (exposed)",
    "host_runtime": "Host / CUDA runtime",
    "other": "Other",
}


@dataclass(frozen=True)
class InputFile:
    """One input file of a run."""

    path: str
    kind: Literal["nsys", "kineto", "lprof"]
    tool_version: str | None = None
    rank: int | None = None
    #: The process of the file this input is, when the file holds several (Profile.process).
    process: int | None = None


@dataclass(frozen=True)
class StepStats:
    """Iteration count and duration, from one origin."""

    origin: Origin
    count: int
    mean_ns: int
    #: The spread of the step durations; None when the origin knows only the mean
    #: (line_profiler records each line's total over the passes, not each pass) or with one
    #: step (no spread: steps.STEADY_MIN_STEPS).
    p50_ns: int | None
    p90_ns: int | None
    min_ns: int | None
    max_ns: int | None
    #: Start-to-start time of consecutive steps (includes the gaps between annotated ranges);
    #: None with one step or without start times (line_profiler).
    wall_mean_ns: int | None = None
    #: How many intervals ``wall_mean_ns`` is the mean of (consecutive steps' start to next
    #: start; every step when the steps are tiled): 1 is a single measurement, two steps' (no
    #: spread, no mean of several); 0 when it is None.
    wall_intervals: int = 0
    #: Sample standard deviation of the step durations; None with fewer than 2 steps or when the
    #: origin knows only the mean (line_profiler).
    stdev_ns: int | None = None
    #: What each step is, as the source recorded it: an annotated range (ProfilerStep, a user's
    #: ``step N``, NVTX), line_profiler's loop pass, or a stretch found without step markers
    #: (see concepts.step_marker).
    marker: str = ANNOTATED_RANGE
    #: Every whole step window (start to the next step's start, warm-up left out, the last
    #: window left out when it is only its own range), ns; empty when the origin records no
    #: windows (line_profiler).
    window_ns: tuple[int, ...] = ()
    #: Each step the mean counts, as (its number, its range's duration in ns): the ranks of a
    #: job are compared over the steps they all count (job.common_step_means); empty when the
    #: origin records no step of its own (line_profiler).
    range_by_number: tuple[tuple[int, int], ...] = ()
    #: The steps left out because torch.compile compiled again in them (steps.StepWindows
    #: .compiling), by number; empty when none is (an origin that records no compiling: nsys).
    recompiling_left_out: tuple[int, ...] = ()
    #: What the ranks of a job are compared by (job.common_step_means), as (step number, ns):
    #: the ranges when each holds its whole iteration (ProfilerStep spans, optimizer steps),
    #: else the whole windows, start to next start: a range opened after the fetch leaves the
    #: wait for data out, so the rank waiting in a collective for a slower loader has the longer
    #: range. Empty as range_by_number.
    pace_by_number: tuple[tuple[int, int], ...] = ()
    #: What pace_by_number holds: the marker, or the marker and concepts.START_TO_NEXT_START.
    pace_marker: str = ANNOTATED_RANGE

    @property
    def single_interval(self) -> bool:
        """Whether ``wall_mean_ns`` is one interval, a single measurement (see
        wall_intervals)."""
        return self.wall_intervals == 1

    @property
    def pace_mean_ns(self) -> int:
        """Mean of pace_by_number (the mean range when it is empty)."""
        if not self.pace_by_number:
            return self.mean_ns
        return int(sum(ns for _, ns in self.pace_by_number) / len(self.pace_by_number))


@dataclass(frozen=True)
class StepOutlier:
    """One step whose figure lies far from the others' (see reports.analysis.shape)."""

    number: int
    #: Start and end of the step window, ns on the profile's clock (for the evidence).
    span: tuple[int, int]
    value_ns: int


@dataclass(frozen=True)
class PerStep:
    """How one per-step figure spreads over the step windows: its median, p90 and range, the
    outlying steps (stalls) and their period when they recur every Nth step."""

    median_ns: int
    p90_ns: int
    min_ns: int
    max_ns: int
    #: Steps the figure was measured over, and its sum over them.
    count: int
    total_ns: int
    #: The largest outliers (at most shape.OUTLIERS_LISTED), largest first.
    outliers: list[StepOutlier]
    #: Every outlier: how many, their summed figure and their smallest and largest, ns.
    outlier_count: int
    outlier_ns: int
    outlier_range_ns: tuple[int, int] | None
    #: Outliers recur every ``period`` steps; None when they do not (or are too few to tell).
    period: int | None
    #: Median of the steps that are not outliers.
    steady_ns: int
    #: Share of the outliers' time with a GPU busy (kernels, copies, memsets): near 0 the GPU
    #: waits with the loop, high it runs other work then (evaluation, say); None unknown.
    outlier_gpu_busy: float | None = None


@dataclass(frozen=True)
class Warmup:
    """The first step of a profile when it is start-up rather than steady state, or the
    start-up recorded before its first step."""

    #: Its step number; None for start-up before the first step (no step's).
    number: int | None
    #: Start and end of its window, ns on the profile's clock.
    span: tuple[int, int]
    duration_ns: int
    #: Median window of the later steps; None when there are none.
    others_median_ns: int | None
    #: Start-up calls recorded in it (and not as often later), by API or operator name.
    setup_calls: dict[str, int]
    #: True when the profile holds no later step: it shows start-up only.
    only: bool
    #: The DataLoader spans' time in it and their median in the later steps, ns (the workers'
    #: first fill); None without DataLoader spans.
    loader_fill: tuple[int, int] | None = None
    #: Steps the process ran before it that the profiler counted but did not record
    #: (``ProfilerStep#3`` first: a schedule's wait and warmup steps 0-2): its start-up ran
    #: then, so this step holds none of it. 0 when none did or the profile does not say.
    steps_before: int = 0

    @property
    def after_startup(self) -> bool:
        """Whether it is a long first step recorded after the process's start-up: the process
        ran steps before it (``steps_before``) and it records no set-up call."""
        return bool(self.steps_before) and self.number is not None and not self.setup_calls


@dataclass(frozen=True)
class StepShape:
    """The run's steps beyond their mean: start-up left out of the per-step figures, and the
    spread of the step window and of the DataLoader wait over the steps that remain."""

    origin: Origin
    warmup: Warmup | None
    #: Step windows (start to the next step's start), the last one left out when it is only its
    #: own range (no fetch after it).
    step_window: PerStep | None
    dataloader_wait: PerStep | None
    #: Steps whose windows hold torch.compile compiling (concepts.COMPILE_SPANS: a recompile
    #: after start-up), as (step number, ns compiling in it); empty when none does.
    compiling: tuple[tuple[int, int], ...] = ()
    #: Whether those steps are left out of the per-step figures (some step does not compile:
    #: steps.StepWindows.compiling); False when every step compiles and the figures hold it.
    compiling_left_out: bool = False
    #: Steps that only evaluate, left out of the per-step figures (no backward pass or
    #: optimizer step in them while other steps record the backward pass:
    #: steps.StepWindows.evaluating), by number; empty when none is.
    evaluating: tuple[int, ...] = ()

    @property
    def compiling_ns(self) -> int:
        """The ns torch.compile compiles in the steps of :attr:`compiling`."""
        return sum(ns for _, ns in self.compiling)


@dataclass(frozen=True)
class IdleGap:
    """A stretch of time with nothing running on one GPU."""

    device: int
    start_ns: int
    duration_ns: int
    #: "between steps", "inside step N", "from step N into step M" (it spans the boundary),
    #: or "outside steps" (see steps.where_in_steps).
    where: str


@dataclass(frozen=True)
class GpuUtilization:
    """Union of kernel, memcpy and memset intervals over the step windows (or the profiled
    span), per device."""

    origin: Origin
    busy_fraction: float
    window_ns: int
    busy_ns: int
    per_device: dict[int, float]
    largest_gaps: list[IdleGap]
    #: How many gaps exceed ``long_gap_ns``.
    long_gap_count: int
    long_gap_ns: int
    #: What the busy share is measured against: "step windows" or "profiled span".
    span: str = "step windows"

    def window_text(self, length: Callable[[int], str]) -> str:
        """The window as ``length`` writes it, one device's times the devices where several
        GPUs' windows add up to ``window_ns`` ('2 GPUs × 4.0 ms', never '8.0 ms' of a 4 ms
        trace)."""
        devices = len(self.per_device)
        if devices <= 1:
            return length(self.window_ns)
        return f"{devices} GPUs × {length(self.window_ns // devices)}"


@dataclass(frozen=True)
class Breakdown:
    """Mean time per step split into parts that add up to the mean step time."""

    origin: Origin
    step_ns: int
    #: Keys are BREAKDOWN_PARTS, values mean ns per step; they sum to ``step_ns``.
    parts_ns: dict[str, int]
    #: Communication hidden under compute (not a part: compute already claims it).
    comm_overlapped_ns: int = 0
    #: Host-to-device copy time with a compute kernel running beside it (not a part: compute,
    #: which claims before the h2d_copy part, holds it): copies hidden under the kernels.
    h2d_overlapped_ns: int = 0
    #: Each part's ns in every whole step window (for robust comparisons); empty when the
    #: origin splits no window (line_profiler).
    per_step_ns: dict[str, tuple[int, ...]] = field(default_factory=dict)
    #: The parts its source measured (GPU events: all of them); the others read 0 in
    #: ``parts_ns`` but are unmeasured, their time inside a measured part (line_profiler's
    #: lines give the DataLoader wait and the rest of the loop, counted as compute).
    measured: frozenset[str] = frozenset(BREAKDOWN_PARTS)
    #: What its source's parts are where they are not PART_LABELS' (line_profiler's "compute"
    #: is the rest of the loop).
    labels: dict[str, str] = field(default_factory=dict)

    def label(self, part: str) -> str:
        """The name of ``part`` in this breakdown."""
        return self.labels.get(part, PART_LABELS.get(part, part))


@dataclass(frozen=True)
class AllReduceSizes:
    """The all-reduces the steps make for DDP's gradient buckets (issued in the backward pass:
    see comm.gradient_buckets), as the trace records what each sends (elements times their dtype's
    size): DDP reduces the gradients in buckets, one all-reduce each; 0 calls when every
    all-reduce is another one."""

    calls_per_step: float
    bytes_per_step: int
    largest_bytes: int
    #: The middle all-reduce by size (the smaller of the two middle ones for an even count): a
    #: size some bucket has, never the mean of two.
    median_bytes: int
    #: Each distinct size, largest first, when there are at most comm.FEW_SIZES; else ().
    sizes_bytes: tuple[int, ...] = ()
    #: All-reduces per step outside the backward pass (a loss or metric the loop reduces): no
    #: gradient bucket, and bucket_cap_mb does not change them.
    others_per_step: float = 0.0


@dataclass(frozen=True)
class CommStats:
    """Collective communication: NCCL/RCCL kernels on GPU, gloo/c10d calls on CPU-only runs."""

    origin: Origin
    total_ns_per_step: int
    fraction: float
    exposed_fraction: float
    #: Share of communication time that overlaps compute kernels (0..1).
    overlap_fraction: float
    calls_per_step: float
    calls_total: int
    names: list[str]
    on_gpu: bool
    #: Time per step with each kind of collective in flight (concepts.ALL_REDUCE...,
    #: "unknown" where nothing recorded says), largest first: what the communication is for.
    ns_per_step_by_collective: dict[str, int] = field(default_factory=dict)
    #: The sizes of the steps' all-reduces; None when unknown (``sizes_unknown`` says why) or
    #: when the steps make none.
    all_reduce_sizes: AllReduceSizes | None = None
    sizes_unknown: str | None = None
    #: The library of the communication kernels (concepts.collective_library: "NCCL", "RCCL");
    #: None on CPU-only runs.
    library: str | None = None
    #: Why some communication kernels are counted in ``calls_per_step`` by the step they
    #: started in, not the one that launched them: they are linked to no launch call
    #: (launches.unlinked); None when every one is, and on CPU-only runs.
    calls_unknown: str | None = None


@dataclass(frozen=True)
class LaunchStats:
    """How the CPU feeds the GPU."""

    origin: Origin
    kernels_per_step: float
    short_kernel_fraction: float
    short_kernel_ns: int
    #: Median of launch call start to kernel start, over the kernels launched onto an idle
    #: stream (``launch_delay_kernels`` of them); None when no kernel was.
    launch_delay_p50_ns: int | None
    runtime_ns_per_step: int
    gpu_kernel_ns_per_step: int
    launch_delay_kernels: int = 0
    #: Kernels launched onto an idle stream whose recorded start precedes their launch call's
    #: start: the CPU's and GPU's clocks disagree (CUPTI's skew), their delay is no launch's,
    #: so the median leaves them out.
    launch_delay_skewed: int = 0
    #: Kernels launched onto an idle stream that had been told to wait on an event first (a
    #: stream wait-event sync record, gpu.waited_on_event: cudaStreamWaitEvent, as DDP's NCCL
    #: stream waits on the compute stream): they start when another stream's work reaches that
    #: event, their delay is that wait, so the median leaves them out.
    launch_delay_waited: int = 0
    #: Kernels launched onto an idle stream that may have waited on an event so: the first of
    #: their stream's linked work launched after the record, but behind work linked to no launch
    #: call that started after the record, which may have been enqueued after it and waited
    #: instead (gpu.waited_on_event). Whether they waited is unknown; the median leaves them out.
    launch_delay_wait_unknown: int = 0
    #: Whether the profile records GPU sync records at all (nsys's CUPTI synchronization
    #: table, Kineto's ``cuda_sync`` events): where it does not, a stream told to wait on an
    #: event is unseen and the launch delay may hold cross-stream waits.
    waits_recorded: bool = True
    #: Share of the step's kernels (with a launch call recorded) launched while work ahead of
    #: them on their stream was still queued or running: their wait is queueing, the CPU ran
    #: ahead of the GPU. None when no launch call was recorded.
    queued_launch_fraction: float | None = None
    #: Why the launch delay and the queued share leave out some of the step's kernels (they
    #: are over the kernels linked to their launch call; None when none is): how many are
    #: linked to none (launches.unlinked); None when every one is.
    launches_unknown: str | None = None

    #: How ``kernels_per_step`` (and the short share and kernel time per step) counts the
    #: kernels linked to no launch call, whose launch step is unknown: by the step they
    #: started in on the GPU, with how many and why (launches.counted_by_start); None when
    #: every one is linked.
    kernels_unknown: str | None = None

    def skewed_text(self) -> str:
        """What the launch delay leaves out for the clocks' skew; empty when nothing."""
        count = self.launch_delay_skewed
        if not count:
            return ""
        kernels = "1 kernel recorded as starting before its" if count == 1 else \
            f"{count:,} kernels recorded as starting before their"
        return f"{kernels} launch call left out: the CPU's and the GPU's clocks disagree"

    def left_out_text(self) -> str:
        """What the launch delay leaves out or may hold beyond launch latency, in a clause
        (:meth:`skewed_text`, the kernels whose stream waited on an event or may have, the waits
        a profile without sync records cannot show); empty when nothing."""
        waited, maybe = self.launch_delay_waited, self.launch_delay_wait_unknown
        parts = [self.skewed_text(),
                 f"{_kernels(waited)} whose stream was told to wait on an event "
                 "(cudaStreamWaitEvent) before the launch left out: they wait for another "
                 "stream's work" if waited else "",
                 f"{_kernels(maybe)} whose stream was told to wait on an event before the "
                 "launch, behind work linked to no launch call that started after the wait and "
                 "may have waited instead, left out: whether they waited is unknown"
                 if maybe else "",
                 "" if self.waits_recorded else
                 "the profile records no GPU sync records, so a stream told to wait on another "
                 "stream's work is unseen: the delay may include such waits"]
        return "; ".join(part for part in parts if part)


def _kernels(count: int) -> str:
    """'1 kernel', '1,200 kernels'."""
    return "1 kernel" if count == 1 else f"{count:,} kernels"


@dataclass(frozen=True)
class CopyStats:
    """Host/device copies and synchronisations."""

    origin: Origin
    h2d_bytes: int
    h2d_ns: int
    #: None (unknown) when the profile records no source memory kind for some H2D copies.
    h2d_pageable_bytes: int | None
    h2d_pinned_bytes: int | None
    #: Why the pageable and pinned bytes are unknown (None when they are known).
    h2d_kinds_unknown: str | None
    tiny_d2h_count: int
    sync_api_ns: int
    sync_api_calls: int
    #: Host-to-device copies that record no size: their bytes are in no figure (``h2d_ns``
    #: counts their time), and the pageable and pinned bytes are unknown.
    h2d_unsized: int = 0


@dataclass(frozen=True)
class StepCopies:
    """Host <-> device copies launched inside the step windows (see reports.analysis.transfers);
    keys are copy kinds (``HtoD``, ``DtoH``)."""

    origin: Origin
    steps: int
    copies_per_step: dict[str, float]
    #: Copies under transfers.SMALL_COPY_BYTES per step (scalars, small tensors).
    small_per_step: dict[str, float]
    bytes_per_step: dict[str, int]
    #: Copy time on the GPU per step, ns.
    ns_per_step: dict[str, int]
    #: The outermost CPU operators that launched the copies, with copies per step, most first;
    #: empty when the profile records no operators (nsys).
    launchers: dict[str, list[tuple[str, float]]]
    #: Device-to-host copies into pageable memory per step: each blocks the CPU.
    blocking_per_step: float
    #: Per kind, start and end (ns) of the longest copy, for the evidence.
    longest: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: Whether the steps train (autograd's backward ops or optimizer steps recorded), False for
    #: inference (operators recorded, neither of these), None without operators (nsys).
    training: bool | None = None
    #: Whether the profile's format records the operators that launch copies
    #: (ProfileMeta.records_torch_spans): without them, which call launched a copy is unknown.
    records_operators: bool = True
    #: How the copies linked to no launch call, whose launch step is unknown, are counted: by
    #: the step they started in on the GPU, with how many and why (launches.unlinked); None
    #: when every copy of the steps is linked.
    launches_unknown: str | None = None


@dataclass(frozen=True)
class SyncCall:
    """One kind of call that blocks the CPU until the GPU catches up."""

    #: The API (``cudaStreamSynchronize``), or ``cudaMemcpyAsync DtoH to pageable``.
    name: str
    calls_per_step: float
    ns_per_step: int
    #: Calls before the first and after the last step window (warm-up, teardown).
    outside_calls: int
    outside_ns: int
    #: The longest call inside the step windows: its start and end, ns.
    longest: tuple[int, int] | None = None
    #: Fewest and most GPU operations queued or running when a call inside the step windows
    #: began (launched before it by correlation id, not yet finished): the work it waited for.
    queued: tuple[int, int] | None = None


@dataclass(frozen=True)
class SyncStats:
    """Blocking calls on the CPU, measured inside the step windows; outside them separately."""

    origin: Origin
    #: Most time per step first.
    calls: list[SyncCall]
    ns_per_step: int
    #: Share of the step window the CPU spends blocked in these calls.
    fraction: float
    outside_calls: int
    outside_ns: int
    #: Why the copy calls that only their copy makes blocking (cudaMemcpyAsync into pageable
    #: memory, or returning after its copy ended) cannot be judged, with how many there are
    #: per step: no correlation id links them to their copies (launches.unlinked); None when
    #: they can.
    copies_unknown: str | None = None
    #: Why the GPU operations queued when each call began (SyncCall.queued) are at least what
    #: they say: some GPU work is linked to no launch call (launches.unlinked), and was
    #: counted as queued only where its id shows it was launched before the call began
    #: (launches.launched_by); None when all of it is linked.
    queued_unknown: str | None = None


@dataclass(frozen=True)
class IdleCauses:
    """What the GPU waits for in its idle time inside the step windows, per step (ns): the
    DataLoader (the CPU in a DataLoader wait for most of the gap), a sync (the gap began while
    the CPU was blocked in a sync or blocking copy, so nothing more was queued, or the CPU is
    blocked for most of it), a launch (the work that ends the gap was launched
    during it: nothing was queued), or none of these (unexplained)."""

    origin: Origin
    step_ns: int
    #: Per cause, one device's idle ns per step: the devices' mean, so a share of the step.
    idle_ns_per_step: dict[str, int]
    #: Per step, the time some device waited for a launch: the union of every device's waits,
    #: what ``launch_wait_ops`` and ``launch_wait_outside_ops_ns`` are shares of.
    launch_wait_ns: int
    #: The framework ops with the most self time (per step) while the GPU waited for launches;
    #: their ``share`` is of that wait.
    launch_wait_ops: list[TopItem] = field(default_factory=list)
    #: Per step, the launch wait that no CPU op on any thread covers, nor a CUDA runtime or
    #: driver call (Python between ops); None when the profile records no CPU ops (what the
    #: CPU ran then is unknown).
    launch_wait_outside_ops_ns: int | None = 0
    #: Per step, the launch wait no CPU op covers that GPU runtime or driver calls do (calls
    #: made outside torch's operators: a module load, an allocation); None as above.
    launch_wait_runtime_ns: int | None = 0
    #: The runtime and driver calls with the most such time per step (share: of the wait).
    launch_wait_runtime_calls: list[TopItem] = field(default_factory=list)
    #: The longest idle gap that waited for a launch: its start and end, ns.
    longest_launch_wait: tuple[int, int] | None = None
    #: One device's idle time per step (the devices' mean, as ``idle_ns_per_step``), counted
    #: unexplained, that may have waited for a launch: the work
    #: ending its gaps is linked to no launch call (no correlation id, or no call recorded with
    #: it) and may have been launched during them; None when there is none.
    launch_unknown_ns_per_step: int | None = None
    #: Why, with how many gaps (syncs._launch_wait_unknown); None when there are none.
    launch_unknown: str | None = None

    def share(self, cause: str) -> float:
        """Share of the step the GPU idles for ``cause``."""
        return self.idle_ns_per_step.get(cause, 0) / max(self.step_ns, 1)


@dataclass(frozen=True)
class TopItem:
    """One row of a top-N table (kernels or CPU ops)."""

    name: str
    #: Kernels: summed duration. CPU ops: summed self (exclusive) time, see ``exclusive``.
    total_ns: int
    count: int
    share: float
    #: True when ``total_ns`` is self time: the op's duration minus its direct children's.
    exclusive: bool = False
    #: Kernels: whether this is a communication kernel (the table's ``is_comm``).
    is_comm: bool = False


@dataclass(frozen=True)
class KernelMix:
    """What the compute (non-communication) kernels are: their precision, layout conversions, and
    how the optimizer runs (see the kernel-name patterns in ``concepts``)."""

    origin: Origin
    compute_kernel_ns: int
    #: The shares by name below are of the compute-kernel time whose kernels' names the
    #: profile records (ops.share_of_recorded: a kernel of unrecorded name is no evidence
    #: either way), None when it records none (``names_unknown`` says so).
    #: Share of the named compute-kernel time in fp16/bf16 kernels (0..1).
    reduced_precision_fraction: float | None
    #: Share of the named compute-kernel time in NCHW <-> NHWC conversion kernels (0..1).
    layout_conversion_fraction: float | None
    #: Share of the named compute-kernel time in elementwise kernels, what torch.compile fuses.
    elementwise_fraction: float | None
    #: Kernels launched inside optimizer-step spans, per step; None without such spans.
    optimizer_kernels_per_step: float | None
    #: Whether the optimizer runs as multi-tensor (foreach/fused) kernels: True when a named
    #: one is among the kernels launched in the optimizer step (else the compute kernels),
    #: False when each of them is named and none is, None (unknown) when some are unnamed.
    fused_optimizer: bool | None
    #: The optimizer's class when the trace names it (``SGD``, ``AdamW``), else None.
    optimizer_name: str | None = None
    #: Kernels and memsets ``zero_grad()`` launches per step (0 with ``set_to_none=True``);
    #: None without zero_grad spans.
    zero_grad_work_per_step: float | None = None
    #: Why the kernels launched inside the optimizer step's spans are not all known
    #: (launches.unlinked): no correlation id links any kernel to its launch call (then the
    #: count is None), or some that may have been launched there have none (then the count is
    #: a lower bound, ``optimizer_unlinked_per_step`` the rest); None when known or without
    #: such spans.
    optimizer_unknown: str | None = None
    #: Kernels per step that started after an optimizer step began, so may have been launched
    #: inside one, with no launch call linked; None when there are none.
    optimizer_unlinked_per_step: float | None = None
    #: The same two for the kernels and memsets zero_grad() launches.
    zero_grad_unknown: str | None = None
    zero_grad_unlinked_per_step: float | None = None
    #: Compute-kernel time of kernels whose names the profile does not record
    #: (concepts.is_unrecorded_name), in ``compute_kernel_ns``, in no share by name, ns.
    unnamed_kernel_ns: int = 0

    @property
    def unnamed_kernel_fraction(self) -> float:
        """Share of compute-kernel time in kernels whose names the profile does not record."""
        return self.unnamed_kernel_ns / max(self.compute_kernel_ns, 1)

    @property
    def names_unknown(self) -> str | None:
        """Why the shares by name are unknown: no compute kernel's name is recorded; None when
        some is."""
        return ("the profile records no compute kernel's name"
                if self.unnamed_kernel_ns >= self.compute_kernel_ns else None)

    @property
    def named_time_text(self) -> str:
        """What the shares by name are of, as advice says it: 'kernel time', 'named kernel time'
        when some kernels' names are not recorded (the evidence says how much: of_named_text)."""
        return "named kernel time" if self.unnamed_kernel_ns else "kernel time"

    def of_named_text(self) -> str:
        """What the shares by name are of, as evidence says it: 'of compute-kernel
        time', or 'of the named compute-kernel time (50% of compute-kernel time has no recorded
        name)' when some kernels' names are not recorded."""
        unnamed = self.unnamed_text()
        return ("of compute-kernel time" if unnamed is None
                else f"of the named compute-kernel time ({unnamed})")

    def unnamed_text(self) -> str | None:
        """'50% of compute-kernel time has no recorded name'; None when every compute kernel's
        name is recorded."""
        return (f"{pct(self.unnamed_kernel_fraction)} of compute-kernel time has no recorded name"
                if self.unnamed_kernel_ns else None)

    @property
    def fused_unknown(self) -> str | None:
        """Why whether the optimizer runs as multi-tensor kernels is unknown (fused_optimizer
        None): some of the kernels it launched have no recorded name; None when known."""
        return "some of its kernels' names are not recorded" if self.fused_optimizer is None \
            else None

    @property
    def launches_unknown(self) -> str | None:
        """Why the optimizer's or zero_grad()'s launches are not all known, both reasons once."""
        why = dict.fromkeys(r for r in (self.optimizer_unknown, self.zero_grad_unknown) if r)
        return "; ".join(why) or None


@dataclass(frozen=True)
class OpPrecision:
    """What the matmul and convolution operators compute in (their recorded input dtypes) and
    the GPU kernel time they launched, against the compute capability of the GPU (see
    reports.analysis.ops). Calls and times are over the step windows (the whole profile when it
    has none)."""

    origin: Origin
    #: (major, minor) of the GPU that ran the kernels, (7, 0) = Volta; None when not recorded.
    compute_capability: tuple[int, int] | None
    device_name: str | None
    #: Step windows the figures cover; None when the profile has no steps.
    steps: int | None
    #: Matmul/convolution calls (innermost layer, the one launching kernels) by precision:
    #: "fp32", "reduced" (fp16/bf16), "other" (fp64, integers), "unrecorded" (no Input type).
    calls: dict[str, int]
    #: Compute-kernel time those calls launched, by the same labels, ns.
    kernel_ns: dict[str, int]
    #: Every compute kernel's time over the same windows, ns.
    compute_kernel_ns: int
    #: The fp32 operators by the kernel time they launched, most first.
    fp32_ops: list[str]
    #: Share of the fp32 operators' kernel time in kernels whose names say TF32 (names only).
    tf32_kernel_fraction: float
    #: Why the precision cannot be judged against tensor cores; None when it can.
    unknown_reason: str | None = None
    #: Start and end (ns) of the fp32 call that launched the most kernel time, for the evidence.
    longest_fp32: tuple[int, int] | None = None
    #: Compute-kernel time linked to no launch call, so launched by no call known (counted in
    #: ``compute_kernel_ns``, in no ``kernel_ns`` label: each label's share is a lower bound),
    #: ns; 0 when every kernel is linked.
    unlinked_kernel_ns: int = 0
    #: Why, with how many kernels (launches.unlinked); None when every kernel is linked.
    launches_unknown: str | None = None

    def share(self, label: str) -> float:
        """Share of compute-kernel time launched by the calls of one precision label."""
        return self.kernel_ns.get(label, 0) / max(self.compute_kernel_ns, 1)


@dataclass(frozen=True)
class OpDtypes:
    """What the matmul and convolution operators take on a CPU-only run (their recorded input
    dtypes, innermost layer): their own time by precision label (concepts.precision_of, plus
    "unrecorded"), over the step windows (the whole profile when it has none)."""

    origin: Origin
    ns: dict[str, int]


@dataclass(frozen=True)
class PrecisionReading:
    """What the model computes in, read once for every advice that depends on it: the share
    of the matmul/convolution work in fp16/bf16, and what it was read from (their recorded
    input dtypes, else the kernel names); share None, and ``source`` why, when nothing tells."""

    share: float | None
    source: str


@dataclass(frozen=True)
class ConvFormats:
    """The memory format of the forward convolutions' inputs in the step windows, from the sizes
    and strides torch.profiler records (record_shapes=True, torch 2.1+ for strides)."""

    origin: Origin
    #: Forward convolution calls (outermost layer).
    convolutions: int
    #: Of those, the ones whose input is channels_last (channels_last_3d for 5-D inputs), and the
    #: ones in the default row-major layout; the rest recorded no strides, or a layout neither
    #: tells (one channel or one pixel, where the two coincide, or a strided view).
    channels_last: int
    contiguous: int


@dataclass(frozen=True)
class ConvBiasStats:
    """Convolutions that add a bias and hand their output straight to BatchNorm, which removes
    any per-channel shift (see reports.analysis.ops); over the step windows (the whole profile
    when it has none)."""

    origin: Origin
    steps: int | None
    #: Convolution calls (outermost layer) in the windows, and those with a bias input.
    convolutions: int
    with_bias: int
    #: Of those, the ones whose next op on the same thread is batch_norm on their output (see
    #: ops.feeds_batch_norm).
    before_batch_norm: int
    #: Kernel time the biased convolutions launched outside their convolution kernels (the bias
    #: add), ns; None when no such kernel can be told apart (no GPU, or the bias fused).
    bias_kernel_ns: int | None
    #: Weight shapes of the biased convolutions before BatchNorm, most frequent first.
    weight_shapes: list[str]
    #: Why the check cannot be made; None when it can.
    unknown_reason: str | None = None
    #: Start and end (ns) of the first such convolution, for the evidence.
    first: tuple[int, int] | None = None
    #: Ranks of the convolutions' inputs (4: ``conv2d`` on NCHW, 5: ``conv3d`` on NCDHW), as
    #: recorded; empty when no shapes were recorded. Which memory format fits depends on it.
    input_ranks: tuple[int, ...] = ()


@dataclass(frozen=True)
class CpuOpMix:
    """CPU-only runs: which implementation the framework ops' self time goes to."""

    origin: Origin
    op_self_ns: int
    #: Share of op self time in ATen's slow reference kernels (``aten::_slow_conv2d_*``).
    slow_fallback_fraction: float
    #: Share of op self time in oneDNN (mkldnn) ops.
    onednn_fraction: float
    #: The slow reference ops seen, by self time, most first.
    slow_fallback_ops: list[str]


@dataclass(frozen=True)
class Trials:
    """The runner's Benchy-style trials without a profiler, samples/s: the DataLoader alone
    (``io``), the model on one cached batch (``synthetic``) and the real loop (``full``)."""

    io: float | None
    synthetic: float | None
    full: float | None


@dataclass(frozen=True)
class SharedCpu:
    """The runner's unprofiled launch beside the rest of its machine (runner measurement): the
    CPU time it used, the CPU time other processes used meanwhile, and whether it competed with
    them for the CPUs (its throughput then is not its own)."""

    wall_ns: int
    cpu_ns: int
    other_cpu_ns: int
    #: The CPUs the launch may use (its affinity set: other processes on them compete with it;
    #: the whole machine's for a manifest that does not say).
    cpus: int
    #: Shares of those CPUs' time (wall time x CPUs) other processes used and left idle.
    other_share: float
    idle_share: float
    shared: bool

    def sharing_text(self, run: str | None = None, idle: bool = False) -> str:
        """The one way every report says how much of the launch's CPUs other processes used
        ('other processes used 60% of its CPUs' time while it ran'): after ``run``'s name
        ('workers's: ...') when given, with the share left idle when ``idle``."""
        said = f"other processes used {pct(self.other_share)} of its CPUs' time while it ran"
        if idle:
            said += f" and {pct(self.idle_share)} was left idle"
        return said if run is None else f"{run}'s: {said}"


@dataclass
class LoopIdentification:
    """How line_profiler's DataLoader loop line was found: from its source text (a ``for`` over a
    DataLoader, or over range() with a body line fetching the batch; ``name`` when only a name
    there says it holds a DataLoader, no assignment shown telling), or, when the source is not
    shown or names no DataLoader, from hit counts alone (a loop header is hit once more per call
    than its body) and how sure that is."""

    evidence: Literal["source", "name", "hit counts"]
    #: ``high`` from the source; ``medium``/``low``/``none`` from hit counts (parsers.lprof).
    confidence: str
    #: Why it was taken for the DataLoader loop, for the evidence of a finding.
    reason: str
    #: Why the DataLoader's share of the step is unknown though the loop was found (its header
    #: counts passes, see pysource.counts_passes, and the source does not show where the batch
    #: comes from).
    dataloader_unknown: str | None = None
    #: Hit counts found the loop without its source: its header may only test (``while
    #: True:``) while a body line fetches, so the wait taken from the header may be wrong,
    #: moving the DataLoader's and compute's shares alike. A ``for`` header shown fetches.
    header_unseen: bool = False


@dataclass(frozen=True)
class LineItem:
    """One line of a line_profiler listing."""

    #: The .lprof it comes from, as the run's listings name it (lines.profile_labels).
    profile: str
    file: str
    function: str
    lineno: int
    hits: int
    time_ns: int
    time_per_hit_ns: int
    #: Share of the function's total time (0..1).
    share: float
    source: str | None
    is_dataloader_loop: bool
    #: The line waits for the GPU (``.item()``, ``.data[0]``...): its time is the GPU work
    #: queued before it, a sync point rather than a slow line.
    is_sync_point: bool = False


@dataclass(frozen=True)
class FunctionListing:
    """All lines of one profiled function that one .lprof records, in line order, for the
    annotated listing: two files timing one function are two measurements, two listings."""

    #: The .lprof it comes from, as the run's listings name it (lines.profile_labels).
    profile: str
    file: str
    function: str
    #: The line the function starts at as line_profiler recorded it (its first decorator's).
    first_lineno: int
    total_ns: int
    lines: list[LineItem]
    #: Why its source is not shown, as the parser of its .lprof decided it
    #: (LprofFunction.source_hidden); None when it is shown.
    source_hidden: SourceHidden | None


@dataclass(frozen=True)
class CpuPhaseBreakdown:
    """CPU-only runs: share of step time by phase, from CPU ops/ranges or lines."""

    origin: Origin
    #: Keys among "dataloader", "forward", "backward", "optimizer", "communication", "other".
    fractions: dict[str, float]


@dataclass(frozen=True)
class TimelineSegment:
    """One drawn interval of the timeline chart."""

    lane: str
    start_ns: int
    end_ns: int
    label: str
    #: "kernel", "comm", "memcpy", "memset", "dataloader", "step", "left_out_step" (a step the
    #: per-step figures leave out: steps.step_label), "idle", "cpu_op", "range".
    category: str


@dataclass(frozen=True)
class Timeline:
    """A few steps of one run, downsampled for drawing; times relative to ``origin_ns``."""

    origin_ns: int
    segments: list[TimelineSegment]
    lanes: list[str]
    dropped_segments: int
    #: The profiler the steps were drawn from.
    source: Origin


@dataclass
class RunMetrics:
    """Every metric of one run; ``None`` where its profiles cannot tell."""

    steps: StepStats | None = None
    #: Step statistics from every origin that has them (for the agreement finding).
    steps_by_origin: list[StepStats] = field(default_factory=list)
    gpu: GpuUtilization | None = None
    #: Start-up and the spread of the per-step figures (reports.analysis.shape).
    shape: StepShape | None = None
    breakdown: Breakdown | None = None
    #: The step split the same way over each other profiler's steps (every one that timed them
    #: besides ``breakdown``'s), so that a comparison of runs whose own breakdowns come from
    #: different profilers splits every run's step over one step definition
    #: (compare.one_step_definition).
    breakdowns_by_origin: dict[Origin, Breakdown] = field(default_factory=dict)
    dataloader_fraction: float | None = None
    #: The profiler ``dataloader_fraction`` comes from (the breakdown's: the one that attributes
    #: step time best, or the one over more steps when they disagree on the wait).
    dataloader_origin: Origin | None = None
    dataloader_fraction_by_origin: dict[str, float] = field(default_factory=dict)
    comm: CommStats | None = None
    launch: LaunchStats | None = None
    copies: CopyStats | None = None
    syncs: SyncStats | None = None
    gpu_idle: IdleCauses | None = None
    cpu_phases: CpuPhaseBreakdown | None = None
    top_kernels: list[TopItem] = field(default_factory=list)
    #: CPU ops by self time; ``top_ops_origin`` is the profiler they came from and
    #: ``top_ops_share_of`` what their ``share`` is of.
    top_ops: list[TopItem] = field(default_factory=list)
    top_ops_origin: Origin | None = None
    top_ops_share_of: ShareBasis | None = None
    kernel_mix: KernelMix | None = None
    cpu_op_mix: CpuOpMix | None = None
    trials: Trials | None = None
    lines: list[LineItem] = field(default_factory=list)
    listings: list[FunctionListing] = field(default_factory=list)
    #: The header line of line_profiler's DataLoader loop (lines.dataloader_loop), if any.
    loop_line: LineItem | None = None
    #: How the DataLoader loop line was identified (the source's text, or hit counts alone).
    loop_identification: LoopIdentification | None = None
    throughput_samples_per_s: float | None = None
    #: Each timed step of the runner's plain (unprofiled) run, ns: the samples behind the
    #: throughput (empty without a manifest that has them).
    plain_step_ns: list[int] = field(default_factory=list)
    #: The plain run's CPU time beside the rest of its CPUs', when the runner measured it.
    plain_cpu: SharedCpu | None = None
    #: Each profiled launch's, by the origin of its profiles; None where it was not measured.
    profiled_cpu: dict[str, SharedCpu | None] = field(default_factory=dict)
    #: Mean step time of every rank that timed steps (ns), by rank, then by ``pid N`` for a
    #: process of a capture of several whose rank is unknown.
    per_rank_step_ns: dict[int | str, int] = field(default_factory=dict)
    #: How the report names each key of ``per_rank_step_ns``: ``rank 1``, ``pid 7``, and
    #: ``rank 0, pid 9`` for a rank that is a process of a capture of several.
    per_rank_labels: dict[int | str, str] = field(default_factory=dict)
    #: Which steps ``per_rank_step_ns``'s means count when some rank's profile counts more
    #: steps than the others' (ranks.per_rank_steps_note): its own figures then differ from
    #: its bar; None when every rank counts the same steps.
    per_rank_steps_note: str | None = None
    #: Signs of ``nn.DataParallel``: its Broadcast/Scatter/Gather/ReduceAddCoalesced ops by count.
    dataparallel_ops: dict[str, int] = field(default_factory=dict)
    #: Most GPUs one process launched kernels on (several = one process drives many GPUs);
    #: None when unknown: the kernels ran on several GPUs and none is linked to its launch call.
    max_devices_per_process: int | None = 0
    #: Why ``max_devices_per_process`` is unknown (None) or, with a count, a lower bound:
    #: kernels linked to no launch call may be any process's (launches.unlinked); None when
    #: known.
    devices_per_process_unknown: str | None = None
    #: What the profiles with GPU work lack where some of it is linked to no launch call
    #: (launches.link_gaps: no runtime calls, no correlation ids, calls unrecorded), sorted;
    #: empty when every kernel, copy and memset is linked.
    launch_link_gaps: tuple[str, ...] = ()
    #: DistributedDataParallel forward spans seen (DDP's own signature).
    ddp_forward_calls: int = 0
    #: The fewest DDP forward passes one gradient all-reduce round takes over the steps
    #: (comm.ddp_forwards_per_sync): above one, the steps accumulate gradients under no_sync();
    #: None without DDP forward spans, steps or all-reduces issued in backward.
    ddp_forwards_per_sync: int | None = None
    #: Whether the DataLoader spans are single-process iterators (num_workers=0); None when the
    #: trace has no DataLoader span that tells.
    loader_in_process: bool | None = None
    #: Memory per device from allocator events (profile_memory / --cuda-memory-usage).
    memory: MemoryStats | None = None
    #: Matmul/convolution precision against the GPU's tensor cores (reports.analysis.ops).
    op_precision: OpPrecision | None = None
    #: Operators zero-filling gradients inside optimizer.zero_grad() per step, any device
    #: (cpu.zero_grad_fills_per_step); None without zero_grad spans or steps.
    zero_grad_fills_per_step: float | None = None
    #: Matmul/convolution input dtypes on a CPU-only run (reports.analysis.ops.op_dtypes).
    op_dtypes: OpDtypes | None = None
    #: Convolutions with a bias feeding BatchNorm (reports.analysis.ops).
    conv_bias: ConvBiasStats | None = None
    #: Memory formats of the convolutions' inputs (reports.analysis.ops.conv_formats).
    conv_formats: ConvFormats | None = None
    #: Spans of torch.compile'd code in the profile (cpu.compiled_regions); None when no
    #: profile records CPU operators or ranges that would show them.
    compiled_regions: int | None = None
    #: Host <-> device copies launched per step (reports.analysis.transfers).
    step_copies: StepCopies | None = None
    #: The file each profiler's figures come from (the primary rank's), for evidence locations.
    trace_files: dict[str, TraceFile] = field(default_factory=dict)

    @property
    def several_line_profiles(self) -> bool:
        """Whether the lines and listings come from more than one .lprof: each row and listing
        then names its own (LineItem.profile)."""
        return len({listing.profile for listing in self.listings}) > 1

    @property
    def startup_only(self) -> bool:
        """Whether the profile shows start-up only (StepShape.warmup.only: no step, or one step
        holding set-up calls): its figures are not training's steady state."""
        return self.shape is not None and self.shape.warmup is not None \
            and self.shape.warmup.only

    def locate(self, origin: Origin, span: tuple[int, int] | None) -> TraceLocation | None:
        """Where ``span`` (start, end ns of ``origin``'s clock) lies in its file; None without a
        span or when the run does not know that file."""
        found = self.trace_files.get(origin)
        if span is None or found is None:
            return None
        return TraceLocation(found.name, span[0] - found.first_ns, span[1] - span[0])


@dataclass(frozen=True)
class TraceFile:
    """A profile file the run's figures of one profiler come from, and its first recorded time
    (ns, the file's own clock), from which evidence locations are measured."""

    name: str
    first_ns: int


@dataclass(frozen=True)
class TraceLocation:
    """Where a piece of evidence can be seen: a file, and a span measured from the file's first
    recorded event (what Perfetto and chrome://tracing show as time zero)."""

    file: str
    offset_ns: int
    duration_ns: int


@dataclass(frozen=True)
class Evidence:
    """One observed fact behind a finding, with the profiler that showed it and, when the fact is
    one span of the trace (the longest gap, the longest blocking call), where to look."""

    text: str
    origin: Origin
    at: TraceLocation | None = None


@dataclass(frozen=True)
class Finding:
    """A diagnosed problem (or a clean bill), with evidence and a fix written for this run."""

    id: str
    severity: Severity
    title: str
    evidence: list[Evidence]
    recommendation: str


def rank_label(rank: int | None, process: int | None = None, pid_too: bool = False) -> str:
    """How a report names one member of a job: ``rank 1``, ``pid 4242`` when the rank is unknown
    (see model.process_label); with ``pid_too``, a ranked process of a capture of several with
    its pid as well (``rank 0, pid 9``); "" for neither."""
    named = [f"rank {rank}"] if rank is not None else []
    if process is not None and (pid_too or rank is None):
        named.append(process_label(process))
    return ", ".join(named)


@dataclass(frozen=True)
class RankVerdict:
    """One rank of a job analysed on its own profile (see reports.analysis.job): a rank the
    profile records, or a process of a capture of several whose rank is unknown."""

    #: The rank; None when unknown (then ``process`` names it).
    rank: int | None
    verdict: Verdict
    verdict_reason: str
    #: Mean step time of the rank (what ``step_marker`` marks), ns; None when its profile times
    #: no steps.
    step_ns: int | None
    #: Share of the rank's step in collectives, and the share not hidden under compute.
    comm_fraction: float | None = None
    comm_exposed_fraction: float | None = None
    #: How clearly the rank's verdict stands (see findings.verdict_confidence); None for unknown
    #: and balanced.
    confidence: str | None = None
    margin: float | None = None
    #: What marks the rank's steps (see StepStats.marker).
    step_marker: str = ANNOTATED_RANGE
    #: The process (Profile.process) of a rank whose rank is unknown; None otherwise.
    process: int | None = None
    #: When the rank's steps ran, on a clock the traces of every rank share: (the clock, first
    #: step's start, last step's end), ns; None where the format's times are its capture's own.
    steps_clock: tuple[str, int, int] | None = None
    #: The steps ``step_ns`` counts (StepStats.range_by_number).
    step_ranges: tuple[tuple[int, int], ...] = ()

    @property
    def label(self) -> str:
        """``rank 1``, or ``pid 4242`` when the rank is unknown."""
        return rank_label(self.rank, self.process)

    @property
    def order(self) -> tuple[int, int]:
        """Sort key: ranks in order, then processes of unknown rank by pid."""
        return (0, self.rank) if self.rank is not None else (1, self.process or 0)


@dataclass(frozen=True)
class JobAnalysis:
    """The ranks of one job analysed together: per-rank verdicts, the job's verdict, the slowest
    rank and why rank verdicts differ."""

    ranks: list[RankVerdict]
    verdict: Verdict
    verdict_reason: str
    #: The rank with the longest mean step, its mean step and the other ranks' mean, ns.
    slowest_rank: int | None = None
    slowest_step_ns: int | None = None
    others_step_ns: int | None = None
    #: Its label (RankVerdict.label), and that of the rank the job waits for.
    slowest: str | None = None
    pacer: str | None = None
    #: Whether the slowest rank lags the others by more than job.STRAGGLER_LAG.
    straggler: bool = False
    #: Why the rank verdicts differ; None when they agree.
    disagreement: str | None = None
    #: The rank the job waits for (see job.pace_setter), whose verdict is the job's.
    paced_by: int | None = None
    #: The profiler every rank's step time comes from (see ranks.job_step_source); None, and
    #: why, when no profiler timed every rank's steps (no rank then has a step time).
    steps_origin: Origin | None = None
    steps_unknown_reason: str | None = None
    #: Which steps the ranks' mean steps count when some rank's profile counts more (see
    #: job.common_steps_note): its own figures then differ from its row; None otherwise.
    common_steps_note: str | None = None


@dataclass
class RunAnalysis:
    """Everything profreport says about one run."""

    name: str
    inputs: list[InputFile]
    verdict: Verdict
    verdict_reason: str
    metrics: RunMetrics
    findings: list[Finding]
    timeline: Timeline | None = None
    #: Variant knobs and environment from the runner's manifest, when the run has one.
    knobs: dict[str, object] = field(default_factory=dict)
    environment: dict[str, object] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: Processes of the job (manifest, distributedInfo, or rank traces); None when unknown.
    world_size: int | None = None
    #: The runner's ``scaling`` record of this run when it is one point of a scaling study.
    scaling_point: dict[str, object] = field(default_factory=dict)
    #: How clearly the profilers' verdict stands ("high", "medium", "low") and the margin behind
    #: it (share of the step, see findings.verdict_confidence); None for unknown and balanced.
    verdict_confidence: str | None = None
    verdict_margin: float | None = None
    #: The ranks analysed together (two or more ranks with profiles); None for one process.
    job: JobAnalysis | None = None
    #: The rank whose profiles the metrics and findings come from (the lowest rank present);
    #: None when no source records a rank.
    detailed_rank: int | None = None
    #: The rank the detailed rank's exposed communication mostly waits for (analyze.waited_for):
    #: the job runs at that rank's pace; None when it waits for none or is that rank.
    waits_for: RankVerdict | None = None


#: How a breakdown part's change relates to the change of the whole step: it moved the same way
#: and accounts for a share of it ("driver"), moved the other way ("offset"), or is too small to
#: name on its own ("minor", under compare.PART_SHARE_MIN of the step difference).
PartRole = Literal["driver", "offset", "minor"]


@dataclass(frozen=True)
class PartChange:
    """One breakdown part's change between the baseline and a run, and its share of the step
    difference."""

    part: str
    before_ns: int
    after_ns: int
    #: Signed fraction of the step-time difference this part's change explains (negative for an
    #: offset: a part that grew while the step fell, or fell while it grew).
    share: float | None
    role: PartRole
    #: The part judged on its own step-to-step spread: its median per step before and after,
    #: the half-width of the confidence interval of their difference (compare.part_band_ns),
    #: and whether the medians differ by more; None without per-step samples on both sides.
    median_before_ns: int | None = None
    median_after_ns: int | None = None
    band_ns: float | None = None
    beyond_noise: bool | None = None

    @property
    def delta_ns(self) -> int:
        """Run minus baseline, ns per step."""
        return self.after_ns - self.before_ns


@dataclass(frozen=True)
class ComparisonRow:
    """One run against the baseline."""

    name: str
    #: The run's typical profiled step (``step_time_kind`` says which statistic it is).
    step_time_ns: int | None
    throughput_samples_per_s: float | None
    #: The run's speed against the baseline's (>1 faster): the unprofiled throughput ratio when
    #: both runs have one, else the step-time ratio (``speedup_basis`` says which).
    speedup: float | None
    throughput_gain: float | None
    #: Change in mean ns per step for each breakdown part (run minus baseline); empty when the
    #: parts are not compared (``parts_not_compared`` says why).
    breakdown_delta_ns: dict[str, int]
    changed_knobs: dict[str, object]
    #: One sentence naming what brought the gain (or the loss).
    explanation: str
    #: Baseline step time over this run's (profiled runs), shown beside the speedup.
    step_speedup: float | None = None
    #: "throughput" or "step time": what ``speedup`` is the ratio of.
    speedup_basis: str = "step time"
    #: Whether ``speedup`` is indistinguishable from 1 given the step-to-step spread of both runs
    #: (see compare.noise_band); None when the spread of either side is unknown (and baseline).
    within_noise: bool | None = None
    #: Half-width of the confidence interval of ``speedup``, as a fraction (0.04 = ±4%).
    noise_fraction: float | None = None
    #: Each breakdown part's change and its share of the step-time difference, drivers first
    #: (largest first), then offsets, then minor parts; empty without a breakdown on both sides.
    attribution: list[PartChange] = field(default_factory=list)
    #: Step-time difference the breakdown parts do not account for (the step time and the
    #: breakdown come from different origins), ns per step; None without a breakdown.
    unexplained_ns: int | None = None
    #: What else differs between the runs (knobs, world size, precision, optimizer kernels,
    #: DataLoader kind, bytes per step), see compare.confounds; a gain is credited to no single
    #: one when there are several.
    confounds: list[str] = field(default_factory=list)
    #: "median" when ``step_time_ns`` is the median step window, "mean" when the comparison's
    #: step source gives a mean only (line_profiler); None without a step time.
    step_time_kind: StepTimeKind | None = "median"
    #: Why the row has no change by part (a side without a breakdown, or breakdowns not alike:
    #: see compare.unlike_breakdowns); None when it has one, and for the baseline.
    parts_not_compared: str | None = None
    #: The run's step breakdown the row's parts come from: its own, or over the comparison's
    #: step source when the runs' own come from different profilers (compare.one_step_definition).
    breakdown: Breakdown | None = None
    #: How many step windows (start to next start, StepStats.window_ns) ``step_time_ns`` is the
    #: median of: 1 is a single interval, one measurement; 0 for a mean or no step time.
    step_intervals: int = 0

    @property
    def single_interval(self) -> bool:
        """Whether ``step_time_ns`` is one interval, a single measurement."""
        return self.step_intervals == 1


@dataclass(frozen=True)
class Comparison:
    """Several runs compared against one baseline."""

    baseline: str
    rows: list[ComparisonRow]
    #: Confidence level of every row's noise band (``ComparisonRow.noise_fraction``).
    noise_confidence: float | None = None
    #: The profiler that timed every row's steps (compare.STEP_SOURCE_ORDER: the first that
    #: timed every run's); None when none did, and ``steps_unknown_reason`` says why.
    steps_origin: Origin | None = None
    steps_unknown_reason: str | None = None


@dataclass
class Report:
    """The whole analysis: what every renderer takes."""

    title: str
    generated_by: str
    runs: list[RunAnalysis]
    comparison: Comparison | None = None
    failures: list[str] = field(default_factory=list)
    #: Throughput against process count, one study per group of runs (see reports.analysis.scaling).
    scaling: list[ScalingStudy] = field(default_factory=list)
    schema: str = SCHEMA


# --- memory (reports.analysis.memory) -----------------------------------------------------------

#: How a memory level is measured: the allocator's own totals (CUDA caching allocator: the
#: device's since the process started; CPU allocator: only what was allocated while memory
#: profiling was on), or the running sum of the allocations and releases since the profile's
#: window opened (its level there unknown).
MemoryBasis = Literal["absolute", "relative to profiling start", "relative to window start"]


@dataclass(frozen=True)
class MemoryStep:
    """One training step on one device; levels in bytes on the device's ``basis``."""

    number: int
    #: Highest allocated level inside the step; None when the origin records only reserved.
    peak_allocated: int | None
    #: Highest reserved level inside the step; None when the origin does not record it.
    peak_reserved: int | None
    #: Level (allocated, else reserved) when the step starts and when it ends.
    start_level: int
    end_level: int
    #: Allocator calls that took memory in the step, and the bytes they took.
    allocations: int
    allocated_bytes: int
    #: Memory events (allocations and releases) recorded in the step; 0 when the recorder was
    #: off for it (torch.profiler stops inside the last step of its window).
    events: int = 0
    #: Whether the step follows the one listed before it: False after a step the per-step
    #: figures leave out (start-up, torch.compile compiling again: steps.StepWindows).
    follows: bool = True


@dataclass(frozen=True)
class LargeAllocation:
    """One of the largest single allocations on a device."""

    bytes: int
    #: Time since the device's first event, ns.
    at_ns: int
    #: The step it happened in, when steps are known.
    step: int | None
    #: The innermost framework operator running on the allocating thread; None when the
    #: origin records no operators (nsys) or none encloses the event.
    op: str | None


@dataclass(frozen=True)
class HeldAllocations:
    """Allocations of one size by one operator, made in several steps and never released while
    the profile records (its addresses are not freed after them): what a leak keeps."""

    #: The operators running when they were made (``outer › inner``, see LargeAllocation.op);
    #: None when none encloses them.
    op: str | None
    #: Bytes of each allocation.
    bytes: int
    #: Allocations held, and the steps (before the last) they were made in.
    count: int
    steps: int


@dataclass(frozen=True)
class MemoryPoint:
    """One point of the memory timeline (bytes on the device's basis)."""

    at_ns: int
    allocated: int | None
    reserved: int | None


@dataclass(frozen=True)
class DeviceMemory:
    """Memory of one device of one process, from one profiler."""

    origin: Origin
    rank: int | None
    #: "cuda", "cpu", ...; ``device`` is -1 for host memory.
    device_kind: str
    device: int
    device_name: str | None
    #: Total memory of the device, bytes; None when the profile does not say (host memory).
    total_bytes: int | None
    #: "allocated": the framework allocator's tensors (Kineto); "reserved": driver allocations,
    #: i.e. the caching allocator's segments (nsys).
    counts: str
    basis: MemoryBasis
    events: int
    peak_allocated: int | None
    peak_reserved: int | None
    #: Level at the end minus level at the start of the window, bytes.
    net_bytes: int
    #: Largest reserved minus allocated over the window (cached, fragmented); None unknown.
    reserved_gap_bytes: int | None
    steps: list[MemoryStep]
    largest: list[LargeAllocation]
    #: A few steps of the level over time, downsampled; times from the first drawn step's start.
    timeline: list[MemoryPoint]
    #: Step boundaries inside the timeline (ns, same origin), with their names (``step 0
    #: (left out: start-up)`` for one the per-step figures leave out: steps.step_label).
    timeline_steps: list[tuple[int, str]]
    #: Driver allocations (cudaMalloc/cudaFree, reserved-level changes) per step after the first
    #: step; None when the origin cannot tell.
    driver_calls_per_step: float | None = None
    #: Allocations per step over the steps the recorder saw (see memory.allocations_per_step).
    allocations_per_step: float | None = None
    #: Allocations made step after step and never released, most bytes first (see
    #: memory.held_each_step); None when the events record no addresses to pair.
    held: list[HeldAllocations] | None = None
    #: The process of a capture of several it was read from (see Profile.process); None for
    #: a file of one process.
    process: int | None = None
    #: The name of the file it was read from.
    file: str | None = None
    #: Which of the files and processes feeding the run's memory it is from, as the report
    #: names it (``rank 1``, ``pid 4242``, ``rank 0, pid 9``, ``trace.2.json``; see
    #: ranks.memory_sources); None when one feeds it and records neither rank nor process.
    source_label: str | None = None


@dataclass(frozen=True)
class MemoryStats:
    """Every device whose memory events a run recorded."""

    devices: list[DeviceMemory]


# --- scaling (reports.analysis.scaling) ---------------------------------------------------------


@dataclass(frozen=True)
class ScalingPoint:
    """One process count of a scaling study (throughputs of the whole job)."""

    run: str
    processes: int
    throughput: float | None
    #: The first point's throughput per process times ``processes``.
    ideal: float | None
    #: ``throughput / ideal`` (1.0 = perfect scaling).
    efficiency: float | None
    #: The runner's trials at this point: the data loader alone, the model on one cached batch.
    loader_alone: float | None
    synthetic: float | None
    #: Mean step time (annotated steps of the primary rank, as ``profile_origin`` timed them),
    #: ns; None when no profiler timed every point's steps.
    step_ns: int | None
    #: Collective communication per step, and the part of it not hidden by compute, ns.
    comm_ns_per_step: int | None
    comm_exposed_ns_per_step: int | None
    #: Slowest rank's mean step over the fastest's (1.0 = even); None with one rank traced.
    rank_imbalance: float | None
    local_batch_size: int | None = None
    #: The profiler that timed the steps of every point of the study (see
    #: compare.STEP_SOURCE_ORDER), whose step figures each point holds; None when none did.
    profile_origin: Origin | None = None
    #: The profiler every point's communication figures come from (each run's from the
    #: profiler of its breakdown); None when two profilers measured them, or none did.
    comm_origin: Origin | None = None
    #: Mean step time as ``comm_origin`` timed it, ns, the step the exposed communication is a
    #: part of; None without ``comm_origin`` or its steps.
    comm_step_ns: int | None = None
    #: PyTorch intra-op threads per process (the runner's plain run), when recorded.
    threads_per_process: int | None = None
    #: What else differs from the study's reference point besides the process count (see
    #: compare.confounds): precision, optimizer kernels, DataLoader kind, bytes per step, knobs.
    confounds: list[str] = field(default_factory=list)
    #: The point's unprofiled run beside the other processes on its CPUs, when it competed with
    #: them for the CPUs (compare.shared_cpus: its throughput is then not its own); None when it
    #: had them to itself or nothing measured it.
    shared_cpu: SharedCpu | None = None
    #: How many start-to-next-start intervals (StepStats.wall_intervals) the throughput from the
    #: profiled steps is the mean of: 1 is a single interval, one measurement; 0 when the
    #: throughput is the runner's unprofiled one or comes from no such interval.
    throughput_intervals: int = 0

    @property
    def single_interval(self) -> bool:
        """Whether ``throughput`` comes from one interval, a single measurement."""
        return self.throughput_intervals == 1


@dataclass(frozen=True)
class ScalingStudy:
    """Throughput against process count for runs of one training at several world sizes."""

    group: str
    #: "weak" (fixed local batch), "strong" (fixed global batch) or "unknown".
    mode: str
    #: "samples/s" (the runner's unprofiled runs) or "local batches/s" (from profiled steps).
    unit: str
    points: list[ScalingPoint]
    #: Where and why scaling breaks, with the fix (empty when it holds up).
    findings: list[Finding] = field(default_factory=list)
