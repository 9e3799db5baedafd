"""Variants: named sets of training knobs that run-and-report compares against the baseline."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from profreport.errors import UsageError

#: What run-and-report runs when ``--variants`` is not given; fits in 3 minutes on 2 CPU cores.
DEFAULT_VARIANTS = ("baseline", "workers", "amp")


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
    bucket_cap_mb: float = 25.0
    broadcast_buffers: bool = True
    dataparallel: bool = False

    def as_dict(self) -> dict[str, Any]:
        """The knobs as a plain dict (for manifests and JSON configs)."""
        return asdict(self)


@dataclass(frozen=True)
class Variant:
    """A named change to the baseline's knobs, with one sentence saying what it tries."""

    name: str
    description: str
    changes: dict[str, Any] = field(default_factory=dict)

    def knobs(self, base: Knobs) -> Knobs:
        """``base`` with this variant's changes applied."""
        return replace(base, **self.changes)

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


def variant_registry() -> dict[str, Variant]:
    """Every known variant by name (``workers`` depends on the CPUs this job has)."""
    variants = [
        Variant("baseline", "one DataLoader worker, fp32, default memory format"),
        Variant("workers", "one DataLoader worker per available CPU",
                {"num_workers": cpus_available()}),
        Variant("pinned", "pinned host memory, non-blocking copies, persistent workers",
                {"pin_memory": True, "non_blocking": True, "persistent_workers": True}),
        Variant("amp", "automatic mixed precision (fp16 + GradScaler on CUDA, bf16 on CPU)",
                {"amp": True}),
        Variant("channels_last", "channels-last memory format for model and inputs",
                {"channels_last": True}),
        Variant("compile", "torch.compile on the model", {"compile": True}),
        Variant("ddp", "DistributedDataParallel over torchrun (gloo on CPU, nccl on GPU)",
                {"ddp": True}),
        Variant("dataparallel", "nn.DataParallel over every visible GPU",
                {"dataparallel": True}),
    ]
    return {variant.name: variant for variant in variants}


def parse_variant_names(text: str | None) -> list[str]:
    """``"baseline,amp"`` -> ``["baseline", "amp"]``; the default set when ``text`` is empty."""
    if not text:
        return list(DEFAULT_VARIANTS)
    return list(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))


def resolve_variants(names: list[str]) -> list[Variant]:
    """The variants called ``names``; UsageError naming the known ones for any unknown name."""
    registry = variant_registry()
    unknown = [name for name in names if name not in registry]
    if unknown or not names:
        raise UsageError(f"unknown variant {', '.join(unknown) or '(none)'}; "
                         f"known variants: {', '.join(registry)}")
    return [registry[name] for name in names]
