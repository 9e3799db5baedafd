"""``--emit-slurm DIR``: one sbatch script per variant and a ``submit_all.sh`` driver.

Each variant script runs ``profreport run-and-report`` for that one variant inside its own
allocation (so the runner's srun/torchrun launching applies); multi-node DDP is started with
``srun torchrun`` and a c10d rendezvous on the first node. The driver submits every script with
``sbatch --parsable`` and queues ``profreport analyze`` on the run folders with
``--dependency=afterany`` on all of them.
"""

from __future__ import annotations

import shlex
import stat
from dataclasses import dataclass
from pathlib import Path

from profreport.fileio import write_text
from profreport.runner.variants import Knobs, Variant

#: Port of the c10d rendezvous on the first node of a multi-node DDP job.
RENDEZVOUS_PORT = 29500
#: Wall-clock limit of each job; the built-in workloads need minutes, not hours.
JOB_TIME_LIMIT = "00:30:00"


@dataclass(frozen=True)
class SlurmPlan:
    """What the scripts need beyond the variants: the run-and-report arguments and layout."""

    runs_dir: Path
    report_dir: Path
    #: run-and-report options shared by every variant (workload, steps, profilers, device...).
    run_args: list[str]
    nodes: int = 1
    #: GPUs each training process needs (0 on CPU).
    gpus_per_process: int = 0


def sbatch_header(name: str, plan: SlurmPlan, knobs: Knobs, processes: int) -> list[str]:
    """The ``#SBATCH`` lines of one job: one task per node, CPUs for every process's workers."""
    cpus = (max(1, knobs.num_workers) + 1) * processes
    lines = ["#!/usr/bin/env bash", f"#SBATCH --job-name=profreport-{name}",
             f"#SBATCH --nodes={plan.nodes if processes > 1 else 1}",
             "#SBATCH --ntasks-per-node=1", f"#SBATCH --cpus-per-task={cpus}",
             f"#SBATCH --time={JOB_TIME_LIMIT}",
             f"#SBATCH --output={plan.runs_dir / name}/slurm-%j.out"]
    if plan.gpus_per_process:
        lines.append(f"#SBATCH --gres=gpu:{plan.gpus_per_process * processes}")
    return [*lines, "set -euo pipefail", f"mkdir -p {shlex.quote(str(plan.runs_dir / name))}"]


def variant_script(variant: Variant, plan: SlurmPlan, base: Knobs, train_config: Path) -> str:
    """The sbatch script of one variant (``train_config`` is used by multi-node DDP only)."""
    knobs = variant.knobs(base)
    processes = knobs.nproc if variant.multi_process else 1
    header = sbatch_header(variant.name, plan, knobs, processes)
    if not (variant.multi_process and plan.nodes > 1):
        run = ["profreport", "run-and-report", "--variants", variant.name,
               "--runs-dir", str(plan.runs_dir), *plan.run_args,
               "--out", str(plan.report_dir / variant.name)]
        return "\n".join([*header, shlex.join(run)]) + "\n"
    train = ["-m", "profreport.runner.train", "--config", str(train_config)]
    body = [
        "# One torchrun per node; the c10d rendezvous runs on the first node of the job.",
        'MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)',
        "export MASTER_ADDR",
        f"srun torchrun --nnodes={plan.nodes} --nproc_per_node={processes} "
        f'--rdzv_id="$SLURM_JOB_ID" --rdzv_backend=c10d '
        f'--rdzv_endpoint="$MASTER_ADDR:{RENDEZVOUS_PORT}" {shlex.join(train)}',
    ]
    return "\n".join([*header, *body]) + "\n"


def driver_script(names: list[str], plan: SlurmPlan) -> str:
    """``submit_all.sh``: submit every variant, then the report job after all of them."""
    here = 'HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)'
    lines = ["#!/usr/bin/env bash", "# Submits every variant, then analyses the run folders.",
             "set -euo pipefail", here, "ids=()"]
    lines += [f'ids+=("$(sbatch --parsable "$HERE/{name}.sbatch")")' for name in names]
    folders = " ".join(shlex.quote(str(plan.runs_dir / name)) for name in names)
    analyze = f"profreport analyze {folders} --out {shlex.quote(str(plan.report_dir))}"
    lines += ['deps=$(IFS=:; echo "${ids[*]}")',
              f'sbatch --parsable --job-name=profreport-report --dependency=afterany:"$deps" '
              f'--ntasks=1 --time={JOB_TIME_LIMIT} --wrap={shlex.quote(analyze)}',
              'echo "submitted ${#ids[@]} variant jobs and the report job"']
    return "\n".join(lines) + "\n"


def emit_slurm(variants: list[Variant], plan: SlurmPlan, base: Knobs, out: Path,
               train_configs: dict[str, Path]) -> list[Path]:
    """Write one ``<variant>.sbatch`` per variant and ``submit_all.sh`` into ``out``
    (``train_configs``: the training config each multi-node variant's torchrun reads)."""
    written = [write_text(out / f"{variant.name}.sbatch",
                          variant_script(variant, plan, base, train_configs.get(variant.name,
                                                                                Path())))
               for variant in variants]
    written.append(write_text(out / "submit_all.sh",
                              driver_script([variant.name for variant in variants], plan)))
    for path in written:
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return written
