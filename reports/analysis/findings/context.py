"""What a rule may know about a run besides its metrics: the manifest's knobs, environment and
training settings, and the CPU load they imply.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from profreport.reports.analysis.memory import TrainingSettings
from profreport.reports.analysis.results import Origin, RankVerdict, Trials


@dataclass(frozen=True)
class RunContext:
    """What a rule may know besides the metrics: the manifest's knobs, environment and the
    training settings (batch size, learning rate) it records."""

    knobs: dict[str, object] = field(default_factory=dict)
    environment: dict[str, object] = field(default_factory=dict)
    settings: TrainingSettings = field(default_factory=TrainingSettings)
    #: Spans of torch.compile'd code the profiles record (RunMetrics.compiled_regions).
    compiled_regions: int | None = None
    #: Forward convolutions the profiles record taking a channels_last input
    #: (RunMetrics.conv_formats).
    channels_last_convolutions: int = 0
    #: The rank the job waits for when the findings come from another rank's profile (see
    #: analyze.waited_for): that rank's exposed communication is mostly waiting for it.
    waited_for: RankVerdict | None = None
    #: ``only rank 1 of the job's 2 ranks given`` when a communicating job's traces are not all
    #: there (see analyze.ranks_not_given): its collectives' time may be waiting for the others.
    ranks_not_given: str | None = None

    #: The knobs read from a line profile's shown source, where no manifest records them
    #: (analyze.run_knobs); the others are the manifest's.
    source_knobs: frozenset[str] = frozenset()

    def knob(self, name: str) -> object | None:
        """A knob's value, or None when the run has no such knob."""
        return self.knobs.get(name)

    def knob_origin(self, name: str) -> Origin:
        """Where a knob's value was read: the manifest, or line_profiler's shown source."""
        return "lprof" if name in self.source_knobs else "manifest"

    def compiled(self) -> bool:
        """Whether the model runs compiled: the manifest's ``compile`` knob, or compiled code
        in the profiles (an ``analyze`` of a trace has no knobs)."""
        return bool(self.knob("compile")) or bool(self.compiled_regions)

    def channels_last(self) -> bool:
        """Whether the model uses channels_last: the manifest's knob, or convolutions in the
        profiles whose inputs are in that layout (a model converted in part counts: what is
        left is to find the rest)."""
        return bool(self.knob("channels_last")) or self.channels_last_convolutions > 0

    def num_workers(self) -> int | None:
        """The DataLoader's worker count the manifest (or the shown source) records, if any."""
        workers = self.knob("num_workers")
        return workers if isinstance(workers, int) and not isinstance(workers, bool) else None

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
    """Training processes sharing the job's CPUs: the DDP ranks on one node (the built-in
    workload's knobs), else the processes a --script run's torchrun started on its node
    (``local_world_size``, from torchrun's LOCAL_WORLD_SIZE), else one."""
    nproc = ctx.knob("nproc")
    if ctx.knob("ddp") and isinstance(nproc, int) and nproc > 1:
        return nproc
    local = ctx.environment.get("local_world_size")
    return local if isinstance(local, int) and not isinstance(local, bool) and local > 1 else 1


def cpu_load(ctx: RunContext) -> CpuLoad | None:
    """Workers and compute threads against CPUs, for a CPU-only run whose manifest has them."""
    workers, cpus = ctx.num_workers(), ctx.cpus()
    if ctx.on_gpu() or workers is None or not cpus:
        return None
    threads = ctx.torch_threads()
    return CpuLoad(workers=workers, threads=threads or 1, threads_known=threads is not None,
                   cpus=cpus, processes=training_processes(ctx))


def loader_core_demand(load: CpuLoad, trials: Trials | None) -> float | None:
    """Cores the DataLoader keeps busy at the real loop's pace: its workers, scaled by how much
    of the loader-only (IO trial) throughput the real loop (full trial) uses."""
    if trials is None or not trials.io or not trials.full or load.workers == 0:
        return None
    return load.workers * min(trials.full / trials.io, 1.0)
