"""``profreport run-and-report``'s runs: plan them (each variant or script setting, at each
scaling point), then run each plain and under each profiler into its run folder, writing its
manifest as it goes, or write one sbatch script per run (``--emit-slurm``). The run folders are
analysed by the caller (``commands.report_on``), not here."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from profreport.errors import RunError, UsageError
from profreport.manifest import Manifest, ProfiledRun, write_manifest
from profreport.runner.launch import (
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
from profreport.runner.script_scan import ScriptFacts, scan_script
from profreport.runner.scripts import (
    ScriptSetting,
    collect_own_traces,
    keep_source_copy,
    new_trace_files,
    overhead_notes,
    profiled_source_root,
    record_plain_result,
    script_entry,
    trace_search_dirs,
    vary_settings,
)
from profreport.runner.slurm import (
    SlurmJob,
    SlurmPlan,
    emit_slurm,
    largest_node_cpus,
    no_gpu_note,
    too_large,
)
from profreport.runner.train import WARMUP_STEPS, TrainConfig
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
from profreport.units import NS_PER_S

#: Steps of the Benchy-style io and synthetic trials in the plain launch: fewer than ~15 timed
#: batches swing by a quarter between identical runs on a busy 2-core machine.
TRIAL_STEPS = 16
#: The plain launch times this many times --steps: its throughput is what variants are compared
#: on, so it gets the longest, least noisy measurement (it costs no profiler overhead).
PLAIN_STEPS_FACTOR = 3
#: Steps torch.profiler records (after one waiting and one warm-up step).
ACTIVE_STEPS = 6
#: Processes of the built-in ddp variant when --nproc is not given.
DDP_NPROC = 2
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
    bucket_cap_mb: float | None = None
    broadcast_buffers: bool = True
    batch_size: int = 64
    augment: bool = True
    width: float = 1.0
    trial_steps: int = TRIAL_STEPS
    active_steps: int = ACTIVE_STEPS
    #: The user's script (absolute), its own arguments, and the settings --vary runs it with.
    script: Path | None = None
    script_args: list[str] = field(default_factory=list)
    settings: tuple[ScriptSetting, ...] = ()
    nodes: int = 1
    #: --scaling: the process counts to run the variant (or script) at; empty: no scaling.
    scaling: tuple[int, ...] = ()
    #: --strong: keep the global batch fixed across the scaling points (weak scaling otherwise).
    strong: bool = False

    @property
    def on_gpu(self) -> bool:
        """Whether the launches train on CUDA."""
        return self.device == "cuda"

    def base_knobs(self) -> Knobs:
        """The baseline's knobs, with the DDP settings from the command line."""
        return Knobs(nproc=self.nproc, bucket_cap_mb=self.bucket_cap_mb,
                     broadcast_buffers=self.broadcast_buffers)


@dataclass
class Outcome:
    """What one variant's run left: its folder, each failed launch, and whether any profiler
    wrote a profile."""

    folder: Path
    failures: list[str] = field(default_factory=list)
    profiled: bool = False


@dataclass
class RunSummary:
    """Every variant's run: folders, failures (one line each), and whether Ctrl-C stopped it."""

    folders: list[Path]
    failures: list[str]
    interrupted: bool = False
    #: Variants no profiler could profile.
    unprofiled: list[str] = field(default_factory=list)


def resolve_device(requested: str) -> str:
    """``auto`` -> ``cuda`` when a GPU is visible, else ``cpu``."""
    if requested != "auto":
        return requested
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def run_options(args: argparse.Namespace) -> RunOptions:
    """RunOptions from the parsed command line (a relative --script made absolute)."""
    script = args.script.resolve() if args.script is not None else None
    settings: tuple[ScriptSetting, ...] = ()
    if script is not None:
        if not script.is_file():
            raise UsageError(f"--script {args.script}: no such file")
        settings = tuple(vary_settings(args.vary or [], args.vary_args or [], scan_script(script),
                                       script.stem))
    elif args.vary or args.vary_args:
        raise UsageError("--vary and --vary-args change a --script's arguments; the built-in "
                         "workload takes --variants")
    nproc = args.nproc if args.nproc is not None else (1 if script else DDP_NPROC)
    return RunOptions(workload=args.workload, steps=args.steps,
                      runs_dir=(args.runs_dir or args.out / "runs").absolute(),
                      profilers=args.profilers, device=resolve_device(args.device),
                      data_dir=args.data_dir.absolute() if args.data_dir else None,
                      nproc=nproc, bucket_cap_mb=args.bucket_cap_mb,
                      broadcast_buffers=not args.no_broadcast_buffers, script=script,
                      script_args=list(args.script_args), settings=settings, nodes=args.nodes,
                      scaling=tuple(args.scaling or ()), strong=args.strong)


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
                f"{NSYS_OUTPUT}*.qdstrm", RESULT_NAME, "script_result.*.json")
    for pattern in patterns:
        for path in folder.glob(pattern):
            path.unlink()


def launch_label(profiler: str) -> str:
    """``none`` -> ``plain run``; a profiler's launch by its manifest name."""
    return "plain run" if profiler in ("none", "plain") else f"{profiler} run"


def launch_one(manifest: Manifest, folder: Path, profiler: str, command: list[str],
               multi_process: bool, started: float) -> ProfiledRun:
    """Run one launch into ``folder/<profiler>.log``, record it and rewrite the manifest."""
    progress(started, f"{manifest.name}: {launch_label(profiler)}")
    record = run_launch(Launch(profiler, command, folder / f"{profiler}.log"))
    if record.leftovers:
        progress(started, f"{manifest.name}: {launch_label(profiler)}: {record.leftovers}")
    record_launch(manifest, folder, profiler, record, multi_process)
    write_manifest(folder, manifest)
    if record.error:
        progress(started, f"{manifest.name}: {launch_label(profiler)} failed: {record.error}")
    return record


def launch_variant(manifest: Manifest, folder: Path, knobs: Knobs, options: RunOptions,
                   started: float) -> None:
    """Run the plain launch and each profiler's launch, updating the manifest after each."""
    nproc = knobs.nproc
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
        command = wrap_command(profiler, folder, entry, options.on_gpu, nproc, options.nodes)
        record = launch_one(manifest, folder, profiler, command, nproc * options.nodes > 1,
                            started)
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
        steps = len(manifest.plain_step_ns)
        if steps and sum(manifest.plain_step_ns):
            manifest.throughput_steps_per_s = steps / (sum(manifest.plain_step_ns) / NS_PER_S)
        manifest.throughput_basis = (f"plain run, rank 0: {steps} timed steps after "
                                     f"{WARMUP_STEPS} warm-up step, x {manifest.world_size} "
                                     "process(es)")
        manifest.trials = result.get("trials", {})
        manifest.data_source = result.get("data_source", "")
        manifest.environment["torch_threads"] = result.get("torch_threads")


def launch_failures(manifest: Manifest) -> list[str]:
    """One line per failed launch: run name, which launch, how it ended, its last error."""
    return [f"{manifest.name}: {launch_label(run.profiler)} failed: {run.error}"
            for run in manifest.launches if run.error and not run.note]


def scaling_note(manifest: Manifest) -> None:
    """Say what a scaling point keeps fixed."""
    if manifest.scaling:
        point = manifest.scaling
        manifest.notes.append(
            f"{point['mode']} scaling point: {point['processes']} process(es) x "
            f"{point['nodes']} node(s), {point['local_batch_size']} samples per process, "
            f"{point['global_batch_size']} per step in all ({point['backend']})")


def run_variant(variant: Variant, options: RunOptions, started: float,
                scaling: dict[str, Any] | None = None) -> Outcome:
    """Run one variant into ``runs_dir/<name>``: its folder, failed launches, whether profiled."""
    folder = options.runs_dir / variant.name
    folder.mkdir(parents=True, exist_ok=True)
    clear_outputs(folder)
    knobs = variant.knobs(options.base_knobs())
    notes = [variant.description, *device_notes(knobs, options.on_gpu, cpu_has_native_bf16())]
    world = knobs.nproc * options.nodes
    # Batch per process and learning rate join the knobs: the memory advice scales them.
    recorded = {**knobs.as_dict(), "batch_size": options.batch_size, "lr": TrainConfig.lr}
    manifest = Manifest(variant.name, options.workload, recorded, environment(),
                        notes=notes, world_size=world, scaling=scaling)
    scaling_note(manifest)
    try:
        write_manifest(folder, manifest)
        launch_variant(manifest, folder, knobs, options, started)
    except RunError as exc:
        manifest.notes.append(f"variant failed: {exc.one_line()}")
        write_manifest(folder, manifest)
        return Outcome(folder, [f"{variant.name}: {exc.one_line()}"], bool(manifest.artifacts))
    except KeyboardInterrupt:
        manifest.notes.append("interrupted by Ctrl-C: only the launches listed finished")
        write_manifest(folder, manifest)
        raise
    return Outcome(folder, launch_failures(manifest), bool(manifest.artifacts))


def script_manifest(setting: ScriptSetting, options: RunOptions, facts: ScriptFacts,
                    scaling: dict[str, Any] | None) -> Manifest:
    """The manifest a script's run starts with: script, arguments, knobs the setting names,
    and what the syntax tree says about line profiling and its own profiler."""
    script = options.script
    assert script is not None
    manifest = Manifest(setting.name, f"script {script}", dict(setting.knobs), environment(),
                        data_source="the script's own", script=str(script),
                        script_args=[*options.script_args, *setting.args],
                        world_size=options.nproc * options.nodes, scaling=scaling)
    scaling_note(manifest)
    manifest.notes += [note for note in (facts.unreadable,) if note]
    if facts.module_level_loader_line is not None:
        manifest.notes.append(f"{script.name}:{facts.module_level_loader_line}: the training "
                              "loop sits at module level, where line_profiler records nothing; "
                              "move it into a function to get a line profile")
    if facts.drives_torch_profiler:
        manifest.notes.append(f"{script.name} drives torch.profiler itself: it is not wrapped "
                              "a second time; its own traces are collected, and every launch "
                              "(the plain one too) pays its profiler's overhead")
    return manifest


def run_script_setting(setting: ScriptSetting, options: RunOptions, facts: ScriptFacts,
                       started: float, scaling: dict[str, Any] | None = None) -> Outcome:
    """Profile the user's script with one setting into ``runs_dir/<setting name>``: the plain
    run, then each profiler; a failed launch does not stop the others."""
    script = options.script
    assert script is not None
    folder = options.runs_dir / setting.name
    folder.mkdir(parents=True, exist_ok=True)
    clear_outputs(folder)
    nproc = options.nproc
    manifest = script_manifest(setting, options, facts, scaling)
    manifest.notes.append(keep_source_copy(script, folder))
    write_manifest(folder, manifest)
    args = [*options.script_args, *setting.args]
    search = trace_search_dirs(facts, script, Path.cwd())
    own = facts.drives_torch_profiler
    multi = nproc * options.nodes > 1
    try:
        for profiler in ("none", *options.profilers):
            missing = tool_missing(profiler)
            if missing:
                manifest.notes.append(missing)
                continue
            entry = script_entry(profiler, script, args, folder, options.active_steps, own)
            command = wrap_command(profiler, folder, entry, options.on_gpu, nproc, options.nodes)
            since = time.time_ns()
            launch_one(manifest, folder, profiler, command, multi, started)
            written = new_trace_files(search, since, options.runs_dir.resolve())
            if profiler == "none":
                record_plain_result(manifest, folder)
                own = own or own_traces_noted(manifest, written)
            elif profiler == "torch" and own:
                take_own_traces(manifest, folder, written, multi)
            write_manifest(folder, manifest)
        manifest.notes += overhead_notes(manifest, folder)
        write_manifest(folder, manifest)
    except KeyboardInterrupt:
        manifest.notes.append("interrupted by Ctrl-C: only the launches listed finished")
        write_manifest(folder, manifest)
        raise
    return Outcome(folder, launch_failures(manifest), bool(manifest.artifacts))


def own_traces_noted(manifest: Manifest, written: list[Path]) -> bool:
    """Whether the plain run wrote torch.profiler traces (the script drives its own profiler
    where the syntax tree did not show it); noted in the manifest when so."""
    if written and not any("drives torch.profiler itself" in note for note in manifest.notes):
        manifest.notes.append(f"the plain run wrote {len(written)} torch.profiler trace(s) "
                              f"({written[0].parent}): the script drives torch.profiler itself, "
                              "so it is not wrapped a second time")
    return bool(written)


def take_own_traces(manifest: Manifest, folder: Path, written: list[Path],
                    multi_process: bool) -> None:
    """Copy the traces the script wrote during the torch launch into the run folder."""
    if not written:
        manifest.notes.append("the script drives torch.profiler but wrote no trace during its "
                              "torch launch (does its schedule reach an active step?)")
        return
    names = collect_own_traces(written, folder)
    places = ", ".join(sorted({str(path.parent) for path in written}))
    manifest.notes.append(f"collected {len(names)} trace(s) the script wrote itself in {places}")
    manifest.artifacts.extend(find_artifacts(folder, "torch", multi_process))


def scaling_layout(total: int, per_node_cap: int) -> tuple[int, int]:
    """``(nodes, processes per node)`` of a scaling point of ``total`` processes, at most
    ``per_node_cap`` per node; UsageError when they do not fill the nodes evenly."""
    nodes = -(-total // per_node_cap)
    if total % nodes:
        raise UsageError(f"--scaling {total}: {total} processes do not fill {nodes} nodes of "
                         f"at most {per_node_cap} evenly")
    return nodes, total // nodes


def scaling_point(options: RunOptions, total: int, group: str) -> dict[str, Any]:
    """The manifest's record of one --scaling point of ``total`` processes."""
    nodes, per_node = scaling_layout(total, options.nproc)
    local = options.batch_size // total if options.strong else options.batch_size
    return {"mode": "strong" if options.strong else "weak", "processes": total,
            "nodes": nodes, "processes_per_node": per_node, "local_batch_size": local,
            "global_batch_size": local * total,
            "backend": "nccl" if options.on_gpu else "gloo", "group": group}


def point_options(options: RunOptions, point: dict[str, Any]) -> RunOptions:
    """The options one scaling point runs with: its nodes, processes and batch per process."""
    return replace(options, nodes=point["nodes"], nproc=point["processes_per_node"],
                   batch_size=point["local_batch_size"])


def check_strong(options: RunOptions) -> None:
    """UsageError when --strong's global batch does not split evenly over every point."""
    if options.strong and any(options.batch_size % n for n in options.scaling):
        raise UsageError(f"--strong: the batch size {options.batch_size} does not split evenly "
                         f"over {','.join(map(str, options.scaling))} processes")


def scaled(name: str, total: int) -> str:
    """The run name of one scaling point: ``baseline-np2``."""
    return f"{name}-np{total}"


@dataclass(frozen=True)
class PlannedRun:
    """One run run-and-report makes: a variant or a script setting, at one scaling point (of
    ``total`` processes, with its manifest record) or at none; ``name`` is its run folder's."""

    name: str
    variant: Variant | None = None
    setting: ScriptSetting | None = None
    total: int | None = None
    point: dict[str, Any] | None = None


def plan_runs(variants: list[Variant], options: RunOptions) -> list[PlannedRun]:
    """Every run, in order: each variant (or each script setting), at each scaling point when
    asked; UsageError before anything runs when --strong or a point's layout cannot be met."""
    check_strong(options)
    bases = ([PlannedRun(setting.name, setting=setting) for setting in options.settings]
             if options.script is not None else
             [PlannedRun(variant.name, variant=variant) for variant in variants])
    if not options.scaling:
        return bases
    return [replace(base, name=scaled(base.name, total), total=total,
                    point=scaling_point(options, total, base.name))
            for base in bases for total in options.scaling]


def run_planned(run: PlannedRun, options: RunOptions, facts: ScriptFacts | None,
                started: float) -> Outcome:
    """Run one planned run with its scaling point's options (a variant at a point trains with
    DDP from two processes on)."""
    at = point_options(options, run.point) if run.point is not None else options
    if run.setting is not None:
        assert facts is not None
        return run_script_setting(replace(run.setting, name=run.name), at, facts, started,
                                  run.point)
    return run_variant(planned_variant(run), at, started, run.point)


def planned_variant(run: PlannedRun) -> Variant:
    """The variant a planned variant run trains: at a scaling point, under the run's name and
    with DDP from two processes on."""
    assert run.variant is not None
    if run.total is None:
        return run.variant
    return replace(run.variant, name=run.name, changes={**run.variant.changes,
                                                        "ddp": run.total > 1})


def run_every(plan: list[PlannedRun], options: RunOptions, started: float,
              outcomes: list[Outcome]) -> None:
    """Run each planned run, appending each outcome as it finishes."""
    facts = scan_script(options.script) if options.script is not None else None
    for run in plan:
        outcomes.append(run_planned(run, options, facts, started))


def write_slurm(args: argparse.Namespace, variants: list[Variant], options: RunOptions) -> None:
    """``--emit-slurm``: write the sbatch scripts and the driver, and make the folders the jobs
    write into (Slurm opens ``--output`` before the job starts); run nothing."""
    out = args.emit_slurm.absolute()
    note = no_gpu_note(args.device, options.device)
    plan = SlurmPlan(options.runs_dir, args.out.absolute(), slurm_run_args(args, options),
                     1 if options.on_gpu else 0, slurm_report_args(args, options), note)
    jobs = slurm_jobs(variants, options)
    written = emit_slurm(jobs, plan, out)
    print(f"wrote {len(written)} scripts to {out}; submit with: bash {out / 'submit_all.sh'}")
    if note:
        print(f"profreport: warning: {note}", file=sys.stderr)
    for line in too_large(jobs, largest_node_cpus()):
        print(f"profreport: warning: {line}", file=sys.stderr)


def slurm_run_args(args: argparse.Namespace, options: RunOptions) -> list[str]:
    """The run-and-report options every job repeats (absolute paths), with the device this
    machine resolved ``auto`` to: the jobs train where their GPU request (or none) says."""
    run_args = ["--steps", str(options.steps), "--profilers", ",".join(options.profilers),
                "--device", options.device, "--format", ",".join(args.formats)]
    if options.bucket_cap_mb is not None:
        run_args += ["--bucket-cap-mb", str(options.bucket_cap_mb)]
    if options.script is None:
        run_args += ["--workload", options.workload]
    if not options.broadcast_buffers:
        run_args.append("--no-broadcast-buffers")
    if options.data_dir:
        run_args += ["--data-dir", str(options.data_dir)]
    if options.strong:
        run_args.append("--strong")
    return run_args


def slurm_report_args(args: argparse.Namespace, options: RunOptions) -> tuple[str, ...]:
    """The options of the report job's ``profreport analyze``: the formats, title and baseline
    run-and-report was given, and the folder of the code it profiles (line_profiler's source
    lines, as run-and-report's own report shows them)."""
    report_args = ["--format", ",".join(args.formats)]
    if args.title:
        report_args += ["--title", args.title]
    if args.baseline:
        report_args += ["--baseline", args.baseline]
    root = profiled_source_root(options.script)
    if root is not None:
        report_args += ["--source-root", str(root)]
    return tuple(report_args)


def _job_args(run: PlannedRun, options: RunOptions) -> tuple[list[str], int, int, bool]:
    """What one run's job asks run-and-report for (its variant or script setting), its
    DataLoader workers, its processes per node and whether it spans --nodes."""
    if run.setting is not None:
        return (["--script", str(options.script), *run.setting.options],
                int(dict(run.setting.knobs).get("num_workers", 0)), options.nproc, True)
    assert run.variant is not None
    multi = run.variant.multi_process
    return (["--variants", run.variant.name], run.variant.knobs(options.base_knobs()).num_workers,
            options.nproc if multi else 1, multi)


def slurm_jobs(variants: list[Variant], options: RunOptions) -> list[SlurmJob]:
    """One job per planned run (variant, script setting, or scaling point); each runs
    run-and-report for itself inside its allocation (so every profiler and the manifest run on
    every node)."""
    after = ["--", *options.script_args] if options.script is not None else []
    jobs = []
    for run in plan_runs(variants, options):
        run_args, workers, processes, spans_nodes = _job_args(run, options)
        if run.point is None:
            nodes = options.nodes if spans_nodes else 1
            jobs.append(SlurmJob(run.name, [*run_args, "--nproc", str(processes), "--nodes",
                                            str(nodes), *after], nodes, processes, workers))
        else:
            jobs.append(SlurmJob(run.name, [*run_args, "--scaling", str(run.total), "--nproc",
                                            str(options.nproc), *after],
                                 run.point["nodes"], run.point["processes_per_node"], workers))
    return jobs


def runnable_variants(variants: list[Variant], options: RunOptions) -> list[Variant]:
    """Drop dataparallel when fewer than two GPUs are visible, saying so."""
    import torch

    gpus = torch.cuda.device_count() if options.on_gpu else 0
    keep = [v for v in variants if not (v.changes.get("dataparallel") and gpus < 2)]
    if len(keep) < len(variants):
        print(f"profreport: note: dataparallel skipped: it needs more than one GPU, {gpus} "
              "visible", file=sys.stderr)
    return keep


def run_all(variants: list[Variant], options: RunOptions) -> RunSummary:
    """Run every variant (or script setting); Ctrl-C stops it, and the variant it stopped and
    those not started are listed as failures."""
    started = time.perf_counter()
    plan = plan_runs(variants, options)
    outcomes: list[Outcome] = []
    interrupted = False
    try:
        run_every(plan, options, started, outcomes)
    except KeyboardInterrupt:
        progress(started, "interrupted: reporting on the variants that finished")
        interrupted = True
    failures = [failure for outcome in outcomes for failure in outcome.failures]
    unprofiled = [outcome.folder.name for outcome in outcomes if not outcome.profiled]
    if interrupted:
        failures += [f"{run.name}: not finished (interrupted by Ctrl-C)"
                     for run in plan[len(outcomes):]]
    else:
        progress(started, f"runs done in {options.runs_dir}")
    return RunSummary([outcome.folder for outcome in outcomes], failures, interrupted,
                      unprofiled)


def run_from_args(args: argparse.Namespace) -> RunSummary | None:
    """Run the variants (or the script) the command line asks for; None after --emit-slurm,
    which only writes scripts."""
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
