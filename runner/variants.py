"""Variants: named sets of training knobs that run-and-report compares against the baseline."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from profreport import concepts
from profreport.errors import UsageError

#: The built-in workloads (runner/workloads.py builds them).
WORKLOADS = ("mnist", "resnet18")
#: What run-and-report runs on a GPU when ``--variants`` is not given.
GPU_DEFAULT_VARIANTS = ("baseline", "workers", "pinned", "amp")
#: The same on a CPU: pinned memory does nothing without a GPU; channels-last made the MNIST net
#: ~16% faster on a 2-core AVX2 CPU. Fits in 3 minutes on 2 cores.
CPU_DEFAULT_VARIANTS = ("baseline", "workers", "channels_last")
#: /proc/cpuinfo flags of CPUs that compute bf16 natively (x86 AVX512-BF16 / AMX, Arm BF16);
#: elsewhere bf16 autocast is emulated (5.8x slower than fp32 on a 2-core AVX2 CPU).
NATIVE_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})
CPUINFO = Path("/proc/cpuinfo")


@dataclass(frozen=True)
class Knobs:
    """Every setting a variant may change; the training entry point reads exactly these."""

    num_workers: int = 1
    pin_memory: bool = False
    non_blocking: bool = False
    persistent_workers: bool = False
    amp: bool = False
    channels_last: bool = False
    compile: bool = False
    ddp: bool = False
    nproc: int = 1
    #: DDP's bucket_cap_mb; None leaves DDP its own default (a 1 MiB first bucket, then 25 MiB):
    #: torch gives the first bucket the cap too whenever bucket_cap_mb is passed, 25 included.
    bucket_cap_mb: float | None = None
    broadcast_buffers: bool = True
    dataparallel: bool = False

    def as_dict(self) -> dict[str, Any]:
        """The knobs as a plain dict (for manifests and JSON configs); a knob left to PyTorch's
        default is recorded as None: the runner passed none, which the analysis tells apart
        from a knob no one recorded (DDP's buckets differ with bucket_cap_mb passed or not)."""
        return asdict(self)


@dataclass(frozen=True)
class Variant:
    """A named change to the baseline's knobs, with one sentence saying what it tries."""

    name: str
    description: str
    changes: dict[str, Any] = field(default_factory=dict)
    #: Whether num_workers follows the CPUs where the variant runs (workers_per_process over
    #: cpus_available: the machine's, or the Slurm job's), rather than a fixed count.
    workers_from_cpus: bool = False

    def knobs(self, base: Knobs) -> Knobs:
        """``base`` with this variant's changes applied; nproc 1 unless it trains with DDP
        (``base`` holds --nproc, the ddp variant's processes per node: the baseline beside it
        trains one); num_workers from the CPUs each process has when workers_from_cpus."""
        knobs = replace(base, **self.changes)
        knobs = knobs if knobs.ddp else replace(knobs, nproc=1)
        if not self.workers_from_cpus:
            return knobs
        return replace(knobs, num_workers=workers_per_process(cpus_available(), knobs.nproc))

    @property
    def multi_process(self) -> bool:
        """Whether the variant launches several training processes (torchrun)."""
        return bool(self.changes.get("ddp"))


def cpus_available() -> int:
    """CPUs this job may use: Slurm's SLURM_CPUS_PER_TASK, else the process's CPU affinity."""
    slurm = os.environ.get("SLURM_CPUS_PER_TASK", "")
    if slurm.isdigit() and int(slurm) > 0:
        return int(slurm)
    return len(os.sched_getaffinity(0))


def workers_per_process(cpus: int, processes: int = 1) -> int:
    """The ``workers`` variant's DataLoader workers in each of ``processes`` training processes
    on ``cpus`` CPUs: the CPUs each leaves beside its loop (concepts.worker_cpus), so workers
    and loops together take the CPUs and no more; at least one more than the baseline's, so
    that the variant changes something (on 2 CPUs it then asks one CPU more than it has, and
    the DataLoader advice says so)."""
    return max(concepts.worker_cpus(cpus, processes), Knobs().num_workers + 1)


def cpu_flags(cpuinfo: Path = CPUINFO) -> set[str]:
    """The CPU feature flags /proc/cpuinfo lists (x86 ``flags``, Arm ``Features``); empty where
    it cannot be read."""
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return set()
    return {flag for line in text.splitlines()
            if line.split(":")[0].strip() in ("flags", "Features")
            for flag in line.partition(":")[2].split()}


def cpu_has_native_bf16() -> bool:
    """Whether this CPU computes bf16 in hardware (so CPU autocast can pay off)."""
    return not NATIVE_BF16_FLAGS.isdisjoint(cpu_flags())


def default_variants(on_gpu: bool, native_bf16: bool) -> tuple[str, ...]:
    """The variants run when ``--variants`` is not given, for this device."""
    if on_gpu:
        return GPU_DEFAULT_VARIANTS
    return (*CPU_DEFAULT_VARIANTS, "amp") if native_bf16 else CPU_DEFAULT_VARIANTS


def device_notes(knobs: Knobs, on_gpu: bool, native_bf16: bool) -> list[str]:
    """What a variant's knobs cannot do on this device, as manifest notes."""
    notes = []
    if knobs.amp and not on_gpu and not native_bf16:
        notes.append("amp: this CPU has no native bf16 (no avx512_bf16, amx_bf16 or Arm bf16 "
                     "flag), so bf16 autocast is emulated here and is usually slower than fp32")
    if knobs.pin_memory and not on_gpu:
        notes.append("pin_memory: no GPU is in use, so torch warns and ignores it; non-blocking "
                     "copies are ordinary copies")
    return notes


def variant_registry() -> dict[str, Variant]:
    """Every known variant by name (``workers`` depends on the CPUs this job has)."""
    cpus = cpus_available()
    variants = [
        Variant("baseline", "one DataLoader worker, fp32, default memory format"),
        Variant("workers", "one DataLoader worker per CPU, less one for the loop "
                f"({workers_per_process(cpus)} here)", workers_from_cpus=True),
        Variant("pinned", "pinned host memory, non-blocking copies, persistent workers",
                {"pin_memory": True, "non_blocking": True, "persistent_workers": True}),
        Variant("amp", "autocast: fp16 + GradScaler on CUDA, bf16 on the CPU",
                {"amp": True}),
        Variant("channels_last", "channels-last memory format for model and inputs",
                {"channels_last": True}),
        Variant("compile", "torch.compile on the model", {"compile": True}),
        Variant("ddp", "DDP over torchrun, --nproc ranks (gloo on CPU, nccl on GPU)",
                {"ddp": True}),
        Variant("dataparallel", "nn.DataParallel over every visible GPU",
                {"dataparallel": True}),
    ]
    return {variant.name: variant for variant in variants}


def parse_variant_names(text: str | None, defaults: Iterable[str]) -> list[str]:
    """``"baseline,amp"`` -> ``["baseline", "amp"]``; ``defaults`` when ``text`` is empty."""
    if not text:
        return list(defaults)
    return list(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))


def resolve_variants(names: list[str]) -> list[Variant]:
    """The variants called ``names``; UsageError naming the known ones for any unknown name."""
    registry = variant_registry()
    unknown = [name for name in names if name not in registry]
    if unknown or not names:
        raise UsageError(f"unknown variant {', '.join(unknown) or '(none)'}; "
                         f"known variants: {', '.join(registry)}")
    return [registry[name] for name in names]
