"""``profreport run-and-report``: run each variant plain and under each profiler, write its
manifest as it goes, then analyse the run folders into one report."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from profreport.errors import RunError, UsageError
from profreport.manifest import Manifest, ProfiledRun, write_manifest
from profreport.runner.launch import (
    LPROF_NAME,
    NSYS_OUTPUT,
    TRACE_DIR,
    Launch,
    environment,
    find_artifacts,
    import_leftover_qdstrm,
    run_launch,
    tool_missing,
    wrap_command,
)
from profreport.runner.script_profile import module_level_loader_loop
from profreport.runner.slurm import SlurmPlan, emit_slurm
from profreport.runner.train import TrainConfig
from profreport.runner.variants import (
    Knobs,
    Variant,
    cpu_has_native_bf16,
    default_variants,
    device_notes,
    parse_variant_names,
    resolve_variants,
)
from profreport.runner.workloads import require_workload

#: Steps of the Benchy-style io and synthetic trials in the plain launch: fewer than ~15 timed
#: batches swing by a quarter between identical runs on a busy 2-core machine.
TRIAL_STEPS = 16
#: The plain launch times this many times --steps: its throughput is what variants are compared
#: on, so it gets the longest, least noisy measurement (it costs no profiler overhead).
PLAIN_STEPS_FACTOR = 3
#: Steps torch.profiler records (after one waiting and one warm-up step).
ACTIVE_STEPS = 6
#: Each launch's training config: ``train_config.<profiler>.json`` in the run folder.
CONFIG_NAME = "train_config.{profiler}.json"
RESULT_NAME = "plain_result.json"


@dataclass(frozen=True)
class RunOptions:
    """What every variant's launches share."""

    workload: str
    steps: int
    runs_dir: Path
    profilers: tuple[str, ...]
    device: str
    data_dir: Path | None = None
    nproc: int = 2
    bucket_cap_mb: float = 25.0
    broadcast_buffers: bool = True
    batch_size: int = 64
    augment: bool = True
    width: float = 1.0
    trial_steps: int = TRIAL_STEPS
    active_steps: int = ACTIVE_STEPS
    script: Path | None = None
    script_args: list[str] = field(default_factory=list)

    @property
    def on_gpu(self) -> bool:
        """Whether the launches train on CUDA."""
        return self.device == "cuda"

    def base_knobs(self) -> Knobs:
        """The baseline's knobs, with the DDP settings from the command line."""
        return Knobs(nproc=self.nproc, bucket_cap_mb=self.bucket_cap_mb,
                     broadcast_buffers=self.broadcast_buffers)


def resolve_device(requested: str) -> str:
    """``auto`` -> ``cuda`` when a GPU is visible, else ``cpu``."""
    if requested != "auto":
        return requested
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def run_options(args: argparse.Namespace) -> RunOptions:
    """RunOptions from the parsed command line."""
    return RunOptions(workload=args.workload, steps=args.steps,
                      runs_dir=args.runs_dir or args.out / "runs", profilers=args.profilers,
                      device=resolve_device(args.device), data_dir=args.data_dir,
                      nproc=args.nproc, bucket_cap_mb=args.bucket_cap_mb,
                      broadcast_buffers=not args.no_broadcast_buffers, script=args.script,
                      script_args=list(args.script_args))


def progress(started: float, text: str) -> None:
    """One progress line on stderr, with the seconds since ``started``."""
    print(f"[profreport {time.perf_counter() - started:6.1f} s] {text}", file=sys.stderr,
          flush=True)


def train_config(knobs: Knobs, options: RunOptions, profiler: str, folder: Path) -> TrainConfig:
    """The training config of one launch of a variant."""
    steps = options.steps * PLAIN_STEPS_FACTOR if profiler == "none" else options.steps
    return TrainConfig(workload=options.workload, steps=steps,
                       batch_size=options.batch_size,
                       data_dir=str(options.data_dir) if options.data_dir else None,
                       device=options.device, augment=options.augment, width=options.width,
                       knobs=knobs.as_dict(), profiler=profiler,
                       trace_dir=str(folder / TRACE_DIR), active_steps=options.active_steps,
                       trials=profiler == "none", trial_steps=options.trial_steps)


def clear_outputs(folder: Path) -> None:
    """Remove the profiles an earlier run left in ``folder`` (only files the runner writes)."""
    shutil.rmtree(folder / TRACE_DIR, ignore_errors=True)
    patterns = ("*.lprof", CONFIG_NAME.format(profiler="*"), f"{NSYS_OUTPUT}*.nsys-rep",
                f"{NSYS_OUTPUT}*.qdstrm", RESULT_NAME)
    for pattern in patterns:
        for path in folder.glob(pattern):
            path.unlink()


def launch_variant(manifest: Manifest, folder: Path, knobs: Knobs, options: RunOptions,
                   started: float) -> None:
    """Run the plain launch and each profiler's launch, updating the manifest after each."""
    nproc = knobs.nproc if knobs.ddp else 1
    for profiler in ("none", *options.profilers):
        missing = tool_missing(profiler)
        if missing:
            manifest.notes.append(missing)
            progress(started, f"{manifest.name}: {missing}")
            continue
        config_path = train_config(knobs, options, profiler, folder).save(
            folder / CONFIG_NAME.format(profiler=profiler))
        entry = ["-m", "profreport.runner.train", "--config", str(config_path)]
        if profiler == "none":
            entry += ["--result", str(folder / RESULT_NAME)]
        command = wrap_command(profiler, folder, entry, options.on_gpu, nproc)
        progress(started, f"{manifest.name}: {profiler if profiler != 'none' else 'plain run'}")
        record = run_launch(Launch(profiler, command, folder / f"{profiler}.log"))
        record_launch(manifest, folder, profiler, record, nproc > 1)
        write_manifest(folder, manifest)
        if profiler == "none" and record.exit_status != 0:
            raise RunError(f"plain run failed: {record.error}")


def record_launch(manifest: Manifest, folder: Path, profiler: str, record: ProfiledRun,
                  multi_process: bool) -> None:
    """Add one launch, its artifacts and (plain run) its measurements to the manifest."""
    if profiler == "nsys":
        record.note = import_leftover_qdstrm(folder)
    artifacts = [] if profiler == "none" else find_artifacts(folder, profiler, multi_process)
    if record.exit_status not in (0, None) and artifacts and multi_process:
        record.note = (f"torchrun exited {record.exit_status} after writing "
                       f"{len(artifacts)} file(s); judged by its artifacts")
    manifest.launches.append(record)
    manifest.artifacts.extend(artifacts)
    result_path = folder / RESULT_NAME
    if profiler == "none" and record.exit_status == 0 and result_path.is_file():
        result = json.loads(result_path.read_text(encoding="utf-8"))
        manifest.throughput_samples_per_s = result.get("throughput_samples_per_s")
        manifest.plain_step_ns = [int(ns) for ns in result.get("step_ns", [])]
        manifest.trials = result.get("trials", {})
        manifest.data_source = result.get("data_source", "")
        manifest.environment["torch_threads"] = result.get("torch_threads")


def run_variant(variant: Variant, options: RunOptions, started: float) -> tuple[Path, str | None]:
    """Run one variant into ``runs_dir/<name>``; returns the folder and its error (or None)."""
    folder = options.runs_dir / variant.name
    folder.mkdir(parents=True, exist_ok=True)
    clear_outputs(folder)
    knobs = variant.knobs(options.base_knobs())
    notes = [variant.description, *device_notes(knobs, options.on_gpu, cpu_has_native_bf16())]
    manifest = Manifest(variant.name, options.workload, knobs.as_dict(), environment(),
                        notes=notes)
    try:
        write_manifest(folder, manifest)
        launch_variant(manifest, folder, knobs, options, started)
    except RunError as exc:
        manifest.notes.append(f"variant failed: {exc.one_line()}")
        write_manifest(folder, manifest)
        return folder, exc.one_line()
    except KeyboardInterrupt:
        manifest.notes.append("interrupted by Ctrl-C: only the launches listed finished")
        write_manifest(folder, manifest)
        raise
    return folder, None


def run_script(options: RunOptions, started: float) -> tuple[Path, str | None]:
    """Profile the user's own script into ``runs_dir/<script stem>``."""
    script = options.script
    if script is None or not script.is_file():
        raise UsageError(f"--script {script}: no such file")
    folder = options.runs_dir / script.stem
    folder.mkdir(parents=True, exist_ok=True)
    clear_outputs(folder)
    manifest = Manifest(script.stem, f"script {script}", {}, environment(),
                        data_source="the script's own")
    loop_line = module_level_loader_loop(script)
    if loop_line is not None:
        manifest.notes.append(f"{script.name}:{loop_line}: the training loop sits at module "
                              "level, where line_profiler records nothing; move it into a "
                              "function to get a line profile")
    entries = script_launch_entries(script, options, folder)
    for profiler, entry in entries.items():
        missing = tool_missing(profiler)
        if missing:
            manifest.notes.append(missing)
            continue
        progress(started, f"{script.name}: {profiler if profiler != 'none' else 'plain run'}")
        command = entry if profiler == "kernprof" else wrap_command(
            profiler, folder, entry, options.on_gpu)
        record = run_launch(Launch(profiler, command, folder / f"{profiler}.log"))
        record_launch(manifest, folder, profiler, record, multi_process=False)
        write_manifest(folder, manifest)
    failed = [run.error for run in manifest.launches if run.error]
    return folder, failed[0] if failed and not manifest.artifacts else None


def script_launch_entries(script: Path, options: RunOptions, folder: Path) -> dict[str, list[str]]:
    """What each launch of a user script runs (kernprof's command is complete already)."""
    args = [str(script), *options.script_args]
    entries = {"none": args}
    if "kernprof" in options.profilers:
        entries["kernprof"] = [sys.executable, "-m", "kernprof", "-l", "-q", "-p", str(script),
                               "-o", str(folder / LPROF_NAME), *args]
    if "torch" in options.profilers:
        entries["torch"] = ["-m", "profreport.runner.script_profile", "--trace-dir",
                            str(folder / TRACE_DIR), "--active", str(options.active_steps),
                            *args]
    if "nsys" in options.profilers:
        entries["nsys"] = args
    return entries


def write_slurm(args: argparse.Namespace, variants: list[Variant], options: RunOptions) -> None:
    """``--emit-slurm``: write the sbatch scripts and the driver; run nothing."""
    out = args.emit_slurm
    run_args = ["--workload", options.workload, "--steps", str(options.steps),
                "--profilers", ",".join(options.profilers), "--device", args.device,
                "--nproc", str(options.nproc), "--bucket-cap-mb", str(options.bucket_cap_mb)]
    if not options.broadcast_buffers:
        run_args.append("--no-broadcast-buffers")
    if options.data_dir:
        run_args += ["--data-dir", str(options.data_dir)]
    plan = SlurmPlan(options.runs_dir.resolve(), args.out.resolve(), run_args, args.nodes,
                     1 if args.device == "cuda" else 0)
    configs = {}
    for variant in variants:
        if variant.multi_process and args.nodes > 1:
            folder = plan.runs_dir / variant.name
            config = train_config(variant.knobs(options.base_knobs()), options, "torch", folder)
            configs[variant.name] = config.save(out / f"{variant.name}.train.json")
    written = emit_slurm(variants, plan, options.base_knobs(), out, configs)
    print(f"wrote {len(written)} scripts to {out}; submit with: bash {out / 'submit_all.sh'}")


def runnable_variants(variants: list[Variant], options: RunOptions) -> list[Variant]:
    """Drop dataparallel when fewer than two GPUs are visible, saying so."""
    import torch

    gpus = torch.cuda.device_count() if options.on_gpu else 0
    keep = [v for v in variants if not (v.changes.get("dataparallel") and gpus < 2)]
    if len(keep) < len(variants):
        print(f"profreport: note: dataparallel skipped: it needs more than one GPU, {gpus} "
              "visible", file=sys.stderr)
    return keep


def run_all(variants: list[Variant], options: RunOptions) -> tuple[list[Path], list[str], bool]:
    """Run every variant; returns the folders of those that finished, the failures, and whether
    Ctrl-C stopped it (the variant it stopped and those not started are listed as failures)."""
    started = time.perf_counter()
    outcomes: list[tuple[Path, str | None]] = []
    interrupted = False
    try:
        if options.script is not None:
            outcomes.append(run_script(options, started))
        else:
            for variant in variants:
                outcomes.append(run_variant(variant, options, started))
    except KeyboardInterrupt:
        progress(started, "interrupted: reporting on the variants that finished")
        interrupted = True
    folders = [folder for folder, _error in outcomes]
    failures = [f"{folder.name}: {error}" for folder, error in outcomes if error]
    planned = [options.script.stem] if options.script is not None else [v.name for v in variants]
    if interrupted:
        failures += [f"{name}: not finished (interrupted by Ctrl-C)"
                     for name in planned[len(outcomes):]]
    else:
        progress(started, f"runs done in {options.runs_dir}")
    return folders, failures, interrupted


def run_from_args(args: argparse.Namespace) -> tuple[list[Path], list[str], bool] | None:
    """Run the variants (or the script) the command line asks for; None after --emit-slurm,
    which only writes scripts. Returns what :func:`run_all` returns."""
    options = run_options(args)
    # --emit-slurm cannot see the compute nodes' CPUs, so amp is left to an explicit --variants.
    native_bf16 = not args.emit_slurm and cpu_has_native_bf16()
    defaults = default_variants(options.on_gpu, native_bf16)
    variants = resolve_variants(parse_variant_names(args.variants, defaults))
    if options.script is None:
        require_workload(options.workload)
    if args.emit_slurm:
        write_slurm(args, variants, options)
        return None
    return run_all(runnable_variants(variants, options), options)
