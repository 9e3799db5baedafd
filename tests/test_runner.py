"""The runner: real training launches under the real profilers, manifests, IDX data, variants,
Slurm scripts."""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

# Without the train extra (an analysis-only install) the runner cannot be imported: skip it all.
torch = pytest.importorskip("torch", reason="the runner needs pip install 'profreport[train]'")

sys.path.insert(0, str(Path(__file__).parent))
from conftest import torch_heap_crash  # noqa: E402

from profreport import concepts
from profreport.cli import build_parser
from profreport.errors import EXIT_INTERRUPTED, EXIT_PARTIAL, InputError, UsageError
from profreport.manifest import Manifest, load_manifest, read_manifest, write_manifest
from profreport.parsers import ParseOptions, parse_file
from profreport.reports.analysis.analyze import AnalyzeOptions, analyze_paths
from profreport.runner.launch import (
    NSYS_OUTPUT,
    Launch,
    failure_line,
    nsys_options,
    qdstrm_importer,
    run_launch,
    signal_of,
    wrap_command,
)
from profreport.runner.options import add_run_arguments
from profreport.runner.orchestrate import (
    PLAIN_STEPS_FACTOR,
    RunOptions,
    plan_runs,
    planned_variant,
    point_options,
    record_launch,
    run_all,
    run_options,
    slurm_jobs,
    write_slurm,
)
from profreport.runner.script_scan import scan_script
from profreport.runner.scripts import ScriptSetting, vary_settings
from profreport.runner.slurm import SlurmJob, too_large
from profreport.runner.train import WARMUP_STEPS, TrainConfig
from profreport.runner.variants import (
    CPU_DEFAULT_VARIANTS,
    Knobs,
    Variant,
    cpu_flags,
    cpu_has_native_bf16,
    cpus_available,
    default_variants,
    device_notes,
    resolve_variants,
    variant_registry,
)
from profreport.runner.workloads import load_mnist, read_idx

#: A tiny run: enough steps for the torch.profiler schedule (1 wait + 1 warm-up + 2 active).
TINY_STEPS = 4


def tiny_options(runs_dir: Path, profilers: tuple[str, ...]) -> RunOptions:
    """A 4-step MNIST run with short trials, on the CPU."""
    return RunOptions("mnist", TINY_STEPS, runs_dir, profilers, "cpu", trial_steps=3,
                      active_steps=2)


def write_idx(path: Path, array: np.ndarray) -> None:
    """Write ``array`` of uint8 as an IDX file (gzipped when the name ends in .gz)."""
    header = bytes([0, 0, 0x08, array.ndim]) + np.array(array.shape, dtype=">u4").tobytes()
    data = header + array.astype(np.uint8).tobytes()
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)


@pytest.fixture(scope="module")
def baseline_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real 4-step baseline under kernprof, torch.profiler and nsys (nsys when installed)."""
    runs = tmp_path_factory.mktemp("runs")
    summary = run_all(resolve_variants(["baseline"]),
                      tiny_options(runs, ("kernprof", "torch", "nsys")))
    assert summary.failures == [] and not summary.interrupted
    return summary.folders[0]


@pytest.mark.slow
def test_baseline_run_writes_every_artifact_and_a_valid_manifest(baseline_run: Path) -> None:
    """Plain run + three profilers: manifest lists the .lprof, the gzipped trace and the report."""
    manifest = load_manifest(baseline_run / "manifest.json")
    assert manifest.name == "baseline" and manifest.knobs["num_workers"] == 1
    assert [run.profiler for run in manifest.launches][:3] == ["none", "kernprof",
                                                               "torch.profiler"]
    assert all(run.exit_status == 0 and run.wall_time_s > 0 for run in manifest.launches)
    kinds = {artifact.profiler: artifact.path for artifact in manifest.artifacts}
    assert kinds["kernprof"] == "train.lprof"
    assert kinds["torch.profiler"].startswith("trace/rank0.")
    assert kinds["torch.profiler"].endswith(".pt.trace.json.gz")
    assert set(manifest.trials) == {"io", "synthetic", "full"}
    assert manifest.trials["full"] == manifest.throughput_samples_per_s > 0
    steps = manifest.plain_step_ns  # every timed step of the plain run, integer ns
    assert len(steps) == TINY_STEPS * PLAIN_STEPS_FACTOR - WARMUP_STEPS
    assert all(isinstance(ns, int) and ns > 0 for ns in steps)
    batch = TrainConfig.load(baseline_run / "train_config.none.json").batch_size
    assert len(steps) * batch / (sum(steps) / 1e9) == pytest.approx(
        manifest.throughput_samples_per_s, rel=1e-6)
    assert manifest.environment["torch"].startswith("2.") and manifest.environment["cpu_count"]
    if "nsys" in kinds:
        assert (baseline_run / kinds["nsys"]).stat().st_size > 10_000
    else:
        assert any("nsys is not installed" in note for note in manifest.notes)


@pytest.mark.slow
def test_baseline_trace_has_profiler_steps_and_nvtx_ranges(baseline_run: Path) -> None:
    """The Kineto trace holds 2 ProfilerStep spans (active=2) and the runner's NVTX-named loop."""
    trace_path = next((baseline_run / "trace").glob("*.pt.trace.json.gz"))
    events = json.loads(gzip.decompress(trace_path.read_bytes()))["traceEvents"]
    names = [event.get("name", "") for event in events]
    assert sorted(n for n in names if n.startswith("ProfilerStep#")) == [
        "ProfilerStep#2", "ProfilerStep#3"]
    assert any(n.startswith("enumerate(DataLoader)#") for n in names)


def loader_line_hits(lprof: Path) -> int:
    """Hits of train()'s ``for ... in enumerate(train_loader)`` line in a real .lprof."""
    from line_profiler import load_stats

    stats = load_stats(str(lprof))
    (key, lines), = [(k, v) for k, v in stats.timings.items() if k[2] == "train"]
    source = Path(key[0]).read_text().splitlines()
    loop = [hits for lineno, hits, _t in lines
            if "in enumerate(train_loader)" in source[lineno - 1]]
    assert loop, f"no loader line in {lprof}"
    return loop[0]


@pytest.mark.slow
def test_baseline_line_profile_shows_the_loader_line(baseline_run: Path) -> None:
    """kernprof recorded train(): the ``for ... in enumerate(train_loader)`` line has 4 hits."""
    assert loader_line_hits(baseline_run / "train.lprof") == TINY_STEPS


def test_generated_data_is_labelled(tmp_path: Path) -> None:
    """No IDX files in the folder: 640 MNIST-shaped samples, and the source says so."""
    data = load_mnist(tmp_path, 640, seed=1)
    assert data.images.shape == (640, 28, 28) and data.images.dtype == np.uint8
    assert set(np.unique(data.labels)) <= set(range(10))
    assert data.source == f"generated (MNIST-shaped, 640 samples): no MNIST files in {tmp_path}"


def test_idx_files_are_read_in_torchvision_layout(tmp_path: Path) -> None:
    """Gzipped images and plain labels under MNIST/raw are read with their shapes and values."""
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    images = np.arange(3 * 28 * 28, dtype=np.int64).reshape(3, 28, 28) % 256
    write_idx(raw / "train-images-idx3-ubyte.gz", images)
    write_idx(raw / "train-labels-idx1-ubyte", np.array([7, 2, 1]))
    data = load_mnist(tmp_path, 640, seed=1)
    assert data.images.shape == (3, 28, 28) and data.images[2, 27, 27] == (3 * 784 - 1) % 256
    assert data.labels.tolist() == [7, 2, 1]
    assert data.source == f"MNIST IDX files in {raw}"


@pytest.mark.nsys
@pytest.mark.slow
def test_a_loader_that_runs_out_gets_no_step_range_for_its_last_fetch(
        tmp_path: Path, nsys_available: str) -> None:
    """The runner's training under nsys (its CPU tracing: OS runtime calls and NVTX) over 150
    MNIST images, 3 batches of 64, asked for 5 steps: the loop ran out of data. Its ``step 3``
    range held only the ``dataloader`` range of the fetch that raised StopIteration (tens of
    µs), and the OS runtime calls of writing the result after it made the capture read it as
    a fourth step. Only the 3 iterations that trained are ``step N`` ranges now."""
    write_idx(tmp_path / "train-images-idx3-ubyte",
              np.random.default_rng(1).integers(0, 256, (150, 28, 28)))
    write_idx(tmp_path / "train-labels-idx1-ubyte", np.arange(150) % 10)
    config = TrainConfig(steps=5, data_dir=str(tmp_path), width=0.25, profiler="nsys",
                         knobs={"num_workers": 0})
    config.save(tmp_path / "config.json")
    capture = tmp_path / "capture"
    subprocess.run([nsys_available, "profile", *nsys_options(on_gpu=False),
                    "--force-overwrite=true", "-o", str(capture), sys.executable, "-m",
                    "profreport.runner.train", "--config", str(tmp_path / "config.json"),
                    "--result", str(tmp_path / "result.json")],
                   check=True, capture_output=True, timeout=300)
    assert json.loads((tmp_path / "result.json").read_text())["steps"] == 3
    profile = parse_file(capture.with_suffix(".nsys-rep"),
                         ParseOptions(cache_dir=tmp_path / "cache"))
    assert profile.table("steps")["number"].tolist() == [0, 1, 2]
    assert len(profile.table("dataloader")) == 3


def test_damaged_idx_file_is_an_input_error(tmp_path: Path) -> None:
    """A truncated IDX file raises InputError naming the byte count."""
    path = tmp_path / "train-images-idx3-ubyte"
    write_idx(path, np.zeros((2, 28, 28)))
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(InputError, match="holds 1558 bytes"):
        read_idx(path)


def test_variant_registry_and_unknown_variant() -> None:
    """Default variants resolve; an unknown name lists the known ones."""
    assert [v.name for v in resolve_variants(list(CPU_DEFAULT_VARIANTS))] == [
        "baseline", "workers", "channels_last"]
    workers = resolve_variants(["workers"])[0]
    assert workers.knobs(Knobs()).num_workers >= 1
    with pytest.raises(UsageError, match="unknown variant fast.*known variants: baseline"):
        resolve_variants(["baseline", "fast"])


def test_module_level_loop_is_detected(tmp_path: Path) -> None:
    """A top-level ``for`` over a loader is found by line; one inside a function is not."""
    top = tmp_path / "top.py"
    top.write_text("import x\nloader = x.f()\nfor batch in train_loader:\n    pass\n")
    inside = tmp_path / "inside.py"
    inside.write_text("def train(loader):\n    for batch in loader:\n        pass\n")
    assert scan_script(top).module_level_loader_line == 3
    assert scan_script(inside).module_level_loader_line is None
    # A form feed (a page break) is no newline to Python: the loop is still read at its line
    # (str.splitlines split there, so line 4 read the line before the loop, and none was found).
    paged = tmp_path / "paged.py"
    paged.write_text("import x\n\x0c\nfor batch in train_loader:\n    pass\n")
    assert scan_script(paged).module_level_loader_line == 3


def test_a_module_level_loop_over_a_name_assigned_a_dataloader_is_detected(tmp_path: Path
                                                                           ) -> None:
    """``dl = DataLoader(ds, batch_size=8)`` then ``for x, y in dl:`` at module level: the
    runner's scan read the loop line's words alone, so no note said the loop sits where
    line_profiler records nothing; it now reads the loop as the .lprof parser does (the name's
    assignment before it). A loop over ``cfg = yaml.load(f, Loader=yaml.SafeLoader)`` is none."""
    assigned = tmp_path / "assigned.py"
    assigned.write_text("from torch.utils.data import DataLoader\n"
                        "dl = DataLoader(ds, batch_size=8)\n"
                        "for x, y in dl:\n    step(x, y)\n")
    assert scan_script(assigned).module_level_loader_line == 3
    config = tmp_path / "config.py"
    config.write_text("import yaml\ncfg = yaml.load(open('c.yaml'), Loader=yaml.SafeLoader)\n"
                      "for key in cfg:\n    print(key)\n")
    assert scan_script(config).module_level_loader_line is None


def test_a_module_level_loop_over_a_factory_of_a_module_beside_the_script_is_detected(
        tmp_path: Path) -> None:
    """``from data import make_loader``, ``dl = make_loader(8)``, ``for x, y in dl:`` at module
    level, data.py beside the script returning a DataLoader: the call's result was not read,
    so ``dl`` was no DataLoader and no note said the loop sits where line_profiler records
    nothing. data.py is read as text from the script's folder (never run: it would leave
    ``ran``); a module outside that folder is not read."""
    (tmp_path / "data.py").write_text(
        "import pathlib\npathlib.Path(__file__).with_name('ran').touch()\n"
        "from torch.utils.data import DataLoader\n\n\n"
        "def make_loader(bs):\n    return DataLoader(range(64), batch_size=bs)\n")
    script = tmp_path / "train.py"
    script.write_text("from data import make_loader\ndl = make_loader(8)\n"
                      "for x, y in dl:\n    step(x, y)\n")
    assert scan_script(script).module_level_loader_line == 3
    nested = tmp_path / "sub" / "train.py"
    nested.parent.mkdir()
    (nested.parent / "__init__.py").write_text("")  # a package: Python would look above it
    nested.write_text("from data import make_loader\ndl = make_loader(8)\n"
                      "for x, y in dl:\n    step(x, y)\n")
    assert scan_script(nested).module_level_loader_line is None
    assert not (tmp_path / "ran").exists()


def test_a_module_level_loop_over_a_loader_a_module_beside_the_script_binds_is_detected(
        tmp_path: Path) -> None:
    """``from data import dl``, ``for x, y in dl:`` at module level, data.py beside the script
    binding ``dl = DataLoader(...)``: the import was no assignment and ``dl`` names no loader,
    so no note said the loop sits where line_profiler records nothing. What data.py binds is
    read there as text (never run: it would leave ``ran``)."""
    (tmp_path / "data.py").write_text(
        "import pathlib\npathlib.Path(__file__).with_name('ran').touch()\n"
        "from torch.utils.data import DataLoader\ndl = DataLoader(range(64), batch_size=8)\n")
    script = tmp_path / "train.py"
    script.write_text("from data import dl\n\nfor x, y in dl:\n    step(x, y)\n")
    assert scan_script(script).module_level_loader_line == 3
    assert not (tmp_path / "ran").exists()


def test_the_run_folder_keeps_the_modules_beside_the_script_that_it_imports(
        tmp_path: Path) -> None:
    """The runner keeps a copy of the script in the run folder; ``from data import
    make_loader`` read data.py beside the original, but data.py was not copied, so
    re-analysing the run folder (a kernprof .lprof naming the script) read the loop by its
    name alone and had no knobs. The modules beside the script that it imports, in turn too
    (loaders/common.py through loaders/build.py, with the package's __init__.py), are copied
    in the same layout and named in the note; one outside its folder, or reached through a
    link leading out of it, is not copied, and nothing is run (it would leave ``ran``)."""
    import pickle

    from line_profiler.line_profiler import LineStats

    from profreport.runner.scripts import keep_source_copy

    project, folder = tmp_path / "project", tmp_path / "runs" / "s"
    (project / "loaders").mkdir(parents=True)
    folder.mkdir(parents=True)
    ran = "import pathlib\npathlib.Path(__file__).with_name('ran').touch()\n"
    (project / "data.py").write_text(
        f"{ran}from loaders.build import make_loader\n")
    (project / "loaders" / "__init__.py").write_text("")
    (project / "loaders" / "build.py").write_text(
        "from .common import pair\n\n\ndef make_loader(path):\n    return pair(path)\n")
    (project / "loaders" / "common.py").write_text(
        "from torch.utils.data import DataLoader\n\n\ndef pair(path):\n"
        "    return DataLoader(path, batch_size=8, num_workers=3)\n")
    (tmp_path / "outside.py").write_text("def make():\n    return open('/etc/passwd')\n")
    (project / "linked.py").symlink_to(tmp_path / "outside.py")
    (project / "unused.py").write_text("x = 1\n")
    script = project / "train.py"
    script.write_text("from data import make_loader\nimport linked\n\n\ndef fit(path):\n"
                      "    train_loader = make_loader(path)\n"
                      "    for x, y in train_loader:\n        step(x, y)\n")
    note = keep_source_copy(script, folder)
    assert note == ("train.py: a copy of the script as profiled is kept in the run folder, "
                    "with the modules beside it that it imports (data.py, loaders/build.py, "
                    "loaders/common.py, loaders/__init__.py); the line profile's source lines "
                    "come from it")
    assert sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) == [
        "data.py", "loaders", "loaders/__init__.py", "loaders/build.py", "loaders/common.py",
        "train.py"]
    lines = {(str(script), 5, "fit"): [(6, 1, 10_000), (7, 61, 30_000_000),
                                       (8, 60, 6_000_000)]}
    (folder / "train.py.lprof").write_bytes(pickle.dumps(LineStats(lines, 1e-9), protocol=5))
    shutil.rmtree(project)  # re-analysed from the run folder alone
    profile = parse_file(folder / "train.py.lprof", ParseOptions())
    assert (profile.meta.loop.lineno, profile.meta.loop.evidence) == (7, "source")
    assert (profile.meta.loader_knobs, profile.meta.loader_calls) == (
        {"batch_size": 8, "num_workers": 3, "pin_memory": False}, "common.py line 5")
    assert not (folder / "ran").exists()


def test_emit_slurm_scripts_pass_bash_syntax_check(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """One sbatch script per variant plus submit_all.sh, all valid bash: absolute interpreter,
    the folders Slurm writes --output into made before submission, a multi-node ddp job that
    runs run-and-report (every profiler, the manifest) with its nodes and GPUs."""
    out = tmp_path / "slurm"
    monkeypatch.chdir(tmp_path)
    args = build_parser().parse_args(
        ["run-and-report", "--variants", "baseline,workers,ddp", "--emit-slurm", "slurm",
         "--nodes", "2", "--device", "cuda", "--out", "report"])
    write_slurm(args, resolve_variants(["baseline", "workers", "ddp"]), run_options(args))
    names = sorted(path.name for path in out.iterdir())
    assert names == ["baseline.sbatch", "ddp.sbatch", "submit_all.sh", "workers.sbatch"]
    for name in names:
        check = subprocess.run(["bash", "-n", str(out / name)], capture_output=True, text=True)
        assert check.returncode == 0, check.stderr
    assert (tmp_path / "report").is_dir()
    assert all((tmp_path / "report" / "runs" / name).is_dir()
               for name in ("baseline", "workers", "ddp"))
    baseline = (out / "baseline.sbatch").read_text()
    assert "#SBATCH --cpus-per-task=2" in baseline and "#SBATCH --gres=gpu:1" in baseline
    assert f"#SBATCH --output={tmp_path}/report/runs/baseline/slurm-%j.out" in baseline
    assert f"{sys.executable} -m profreport run-and-report" in baseline
    assert "--variants baseline --nproc 1 --nodes 1" in baseline
    ddp = (out / "ddp.sbatch").read_text()
    assert "#SBATCH --nodes=2" in ddp and "#SBATCH --gres=gpu:2" in ddp
    assert "#SBATCH --cpus-per-task=4" in ddp and "--variants ddp --nproc 2 --nodes 2" in ddp
    assert "--profilers kernprof,torch,nsys" in ddp
    driver = (out / "submit_all.sh").read_text()
    assert driver.count("sbatch --parsable") == 4 and "--dependency=afterany:" in driver
    assert f"{sys.executable} -m profreport analyze" in driver


def test_emit_slurm_with_device_auto_on_a_cpu_machine_says_no_gpu_is_asked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--device auto on a machine without a GPU (a CPU-only login node) asks the jobs for no
    GPU: a warning on stderr and a comment atop each script say so and how to ask for GPUs,
    and the jobs train on the CPU as they asked (--device cpu). It wrote no --gres and passed
    --device auto on without a word, so on a GPU cluster the jobs trained on the CPU."""
    import torch

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # the login node
    args = build_parser().parse_args(
        ["run-and-report", "--variants", "baseline", "--emit-slurm", "slurm", "--out", "r"])
    write_slurm(args, resolve_variants(["baseline"]), run_options(args))
    note = ("--device auto found no GPU on this machine, so the jobs ask for none (no --gres) "
            "and train on the CPU (--device cpu); to train on the cluster's GPUs, write the "
            "scripts with --device cuda (one GPU per process)")
    assert f"profreport: warning: {note}\n" in capsys.readouterr().err
    script = (tmp_path / "slurm" / "baseline.sbatch").read_text()
    header = script.split("#SBATCH", 1)[0].splitlines()
    assert header[0] == "#!/usr/bin/env bash"
    assert " ".join(line.removeprefix("# ") for line in header[1:]) == note
    assert "#SBATCH --gres" not in script and " --device cpu " in script
    check = subprocess.run(["bash", "-n", str(tmp_path / "slurm" / "baseline.sbatch")],
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    cpu = build_parser().parse_args(
        ["run-and-report", "--variants", "baseline", "--emit-slurm", "cpu", "--out", "r",
         "--device", "cpu"])
    write_slurm(cpu, resolve_variants(["baseline"]), run_options(cpu))
    assert "warning: --device" not in capsys.readouterr().err
    assert (tmp_path / "cpu" / "baseline.sbatch").read_text().startswith(
        "#!/usr/bin/env bash\n#SBATCH")


def job_knobs(script: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[int, list[Knobs]]:
    """The CPUs an emitted sbatch script asks for, and the knobs of each run its run-and-report
    command line makes when it runs inside that allocation (SLURM_CPUS_PER_TASK set to them)."""
    text = script.read_text()
    cpus = int(re.search(r"^#SBATCH --cpus-per-task=(\d+)$", text, re.MULTILINE).group(1))
    line = next(line for line in text.splitlines() if " run-and-report " in line)
    words = shlex.split(line)
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", str(cpus))
    args = build_parser().parse_args(words[words.index("run-and-report"):])
    options = run_options(args)
    runs = plan_runs(resolve_variants(args.variants.split(",")), options)
    return cpus, [planned_variant(run).knobs(
        (point_options(options, run.point) if run.point else options).base_knobs())
        for run in runs]


def test_the_workers_variants_job_starts_the_workers_its_cpus_hold(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--emit-slurm from a machine with 6 CPUs: the workers job asked for 7 CPUs (6 workers and
    the training loop) and inside it the variant read SLURM_CPUS_PER_TASK=7 and started 7
    workers beside the loop, 8 processes on 7 CPUs; at --scaling 2 --nproc 2 it asked 14 and
    each of the 2 ranks started 14. Each process now starts its CPUs less one for its loop
    (5 here), and the job asks for exactly the workers and loops it runs."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "6")  # the CPUs of the machine writing them
    assert resolve_variants(["workers"])[0].description == (
        "one DataLoader worker per CPU, less one for the loop (5 here)")
    for folder, extra in (("plain", []), ("scaled", ["--scaling", "2", "--nproc", "2"])):
        args = build_parser().parse_args(
            ["run-and-report", "--variants", "baseline,workers", "--emit-slurm", folder,
             "--out", "report", "--device", "cpu", *extra])
        write_slurm(args, resolve_variants(["baseline", "workers"]), run_options(args))
    cpus, (knobs,) = job_knobs(tmp_path / "plain" / "workers.sbatch", monkeypatch)
    assert (cpus, knobs.num_workers, knobs.nproc) == (6, 5, 1)
    cpus, (knobs,) = job_knobs(tmp_path / "scaled" / "workers-np2.sbatch", monkeypatch)
    assert (cpus, knobs.num_workers, knobs.nproc) == (12, 5, 2)
    # The baseline keeps its one worker and 2 CPUs; the workers job holds the CPUs it starts.
    cpus, (knobs,) = job_knobs(tmp_path / "plain" / "baseline.sbatch", monkeypatch)
    assert (cpus, knobs.num_workers) == (2, 1)
    # Too few CPUs to spare more than the baseline's one: one more than it, never the same
    # run twice; on 2 CPUs its job then asks for the 3 it runs.
    for cpus in ("1", "2"):
        monkeypatch.setenv("SLURM_CPUS_PER_TASK", cpus)
        assert resolve_variants(["workers"])[0].knobs(Knobs()).num_workers == 2
    write_slurm(args := build_parser().parse_args(
        ["run-and-report", "--variants", "workers", "--emit-slurm", "two", "--out", "report",
         "--device", "cpu"]), resolve_variants(["workers"]), run_options(args))
    cpus, (knobs,) = job_knobs(tmp_path / "two" / "workers.sbatch", monkeypatch)
    assert (cpus, knobs.num_workers) == (3, 2)


#: Counts the gradient all-reduces of the third step of the built-in model wrapped as the ddp
#: variant wraps it (prepare_model with the ddp variant's knobs) in a real gloo group of one
#: process: DDP rebuilds its buckets after the first step, in the order gradients came.
DDP_BUCKETS_SCRIPT = """
import os, sys, torch, torch.distributed as dist
import torch.nn.functional as F
from profreport.runner.train import Rank, prepare_model
from profreport.runner.variants import Knobs, resolve_variants
from profreport.runner.workloads import MnistNet
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1])
dist.init_process_group("gloo", rank=0, world_size=1)
knobs = resolve_variants(["ddp"])[0].knobs(Knobs(nproc=2))
model = prepare_model(MnistNet(), torch.device("cpu"), knobs, Rank(0, 2, 0))
x, y = torch.randn(8, 1, 28, 28), torch.randint(0, 10, (8,))
for step in range(3):
    with torch.profiler.profile() as prof:
        F.nll_loss(model(x), y).backward()
calls = [e for e in prof.events() if e.name == "c10d::allreduce_"]
print(len(calls))
dist.destroy_process_group()
"""


def test_the_ddp_variant_keeps_ddps_own_buckets(tmp_path: Path) -> None:
    """The ddp variant leaves bucket_cap_mb to DDP unless --bucket-cap-mb is given: it passed
    25.0, and torch then caps the first bucket at 25 MiB too (its default caps it at 1 MiB), so
    the built-in model's 4.6 MiB of gradients went in one all-reduce per step, none overlapping
    the backward pass, while its own report said DDP's default buckets would make about 2."""
    script = tmp_path / "buckets.py"
    script.write_text(DDP_BUCKETS_SCRIPT)
    port = str(29500 + os.getpid() % 1000)
    done = subprocess.run([sys.executable, str(script), port], capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    # fc2 and fc1 (1,181,066 gradients: past the 1 MiB first bucket), then the convolutions
    assert done.stdout.split()[-1] == "2"
    recorded = resolve_variants(["ddp"])[0].knobs(Knobs(nproc=2)).as_dict()
    assert recorded["ddp"] is True and recorded["bucket_cap_mb"] is None


def test_a_bucket_cap_left_to_ddp_is_recorded_as_passed_none(tmp_path: Path) -> None:
    """The ddp variant passes no bucket_cap_mb, and its manifest says so (null): the bucket
    advice judges the run at DDP's default buckets. The knob was dropped from the manifest, so
    the advice read 'the run's bucket_cap_mb is unknown, not recorded' for the runner's own
    run."""
    knobs = resolve_variants(["ddp"])[0].knobs(Knobs(nproc=2)).as_dict()
    write_manifest(tmp_path, Manifest("ddp", "mnist", knobs, {}))
    loaded, problems = read_manifest(tmp_path / "manifest.json")
    assert problems == [] and "bucket_cap_mb" in loaded.knobs
    assert loaded.knobs["bucket_cap_mb"] is None


def test_a_variant_without_ddp_records_one_process() -> None:
    """--variants baseline,ddp: the baseline trains one process, yet its manifest recorded
    nproc 2 (--nproc, the ddp variant's processes) beside world_size 1, and its comparison
    with the ddp run read 'ddp False -> True; world size 1 -> 2' as two differences."""
    base = Knobs(nproc=2)
    assert [(v.name, v.knobs(base).nproc) for v in resolve_variants(
        ["baseline", "workers", "dataparallel", "ddp"])] == [
        ("baseline", 1), ("workers", 1), ("dataparallel", 1), ("ddp", 2)]


def test_emit_slurm_report_job_keeps_the_report_options(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The report job analyses the runs as run-and-report's own report would: with the
    --format, --title and --baseline it was given and the runner's code as the source root
    (it ran 'analyze RUNS --out OUT' alone: the comparison against the first run instead of
    --baseline workers, the default title and formats, and the built-in workload's lines
    'source not shown')."""
    monkeypatch.chdir(tmp_path)
    args = build_parser().parse_args(
        ["run-and-report", "--variants", "baseline,workers", "--emit-slurm", "slurm",
         "--title", "My study", "--baseline", "workers", "--format", "md,json",
         "--out", "report"])
    write_slurm(args, resolve_variants(["baseline", "workers"]), run_options(args))
    driver = (tmp_path / "slurm" / "submit_all.sh").read_text()
    analyze = shlex.split(shlex.split(driver.split("--wrap=")[1].split(")")[0])[0])
    runner_dir = Path(sys.modules[TrainConfig.__module__].__file__).parent
    assert analyze[analyze.index("analyze") + 3:] == [
        "--out", f"{tmp_path}/report", "--format", "md,json", "--title", "My study",
        "--baseline", "workers", "--source-root", str(runner_dir)]


def test_emit_slurm_warns_of_a_job_no_node_can_hold(tmp_path: Path, slurm_available: str
                                                     ) -> None:
    """A job asking more CPUs per node than the cluster's largest node has is said as the
    scripts are written: the local one-node Slurm (2 CPUs) accepted the ddp job's 4 CPUs
    ('--cpus-per-task=4': 2 ranks, each with its DataLoader worker) and held it pending for
    good (PartitionConfig), and submit_all.sh's report job behind it, without a word."""
    sinfo = subprocess.run(["sinfo", "-h", "-o", "%c"], capture_output=True, text=True,
                           check=True).stdout
    largest = max(int(n) for n in re.findall(r"\d+", sinfo))
    done = subprocess.run(
        [sys.executable, "-m", "profreport", "run-and-report", "--variants", "baseline,ddp",
         "--emit-slurm", "slurm", "--out", "out", "--device", "cpu"],
        capture_output=True, text=True, cwd=tmp_path, check=False)
    assert done.returncode == 0, done.stderr
    warned = [line for line in done.stderr.splitlines() if "warning" in line]
    assert warned == ([] if largest >= 4 else [
        f"profreport: warning: ddp.sbatch asks for 4 CPUs per node and this cluster's largest "
        f"node has {largest} (sinfo): Slurm cannot start it (it refuses it or holds it "
        "pending), nor the report job after it"])
    assert too_large([SlurmJob("ddp", [], 1, 2, 1)], None) == []


def test_one_plan_names_the_runs_the_runner_and_slurm_make(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    """plan_runs is the one list of runs: each variant at each scaling point, in order, named as
    the run folders and the sbatch jobs are; a point whose processes cannot fill its nodes is
    refused before anything runs."""
    monkeypatch.chdir(tmp_path)
    args = build_parser().parse_args(
        ["run-and-report", "--variants", "baseline,workers", "--scaling", "1,2,4", "--nproc",
         "2", "--emit-slurm", "slurm", "--out", "report"])
    options, variants = run_options(args), resolve_variants(["baseline", "workers"])
    plan = plan_runs(variants, options)
    names = ["baseline-np1", "baseline-np2", "baseline-np4", "workers-np1", "workers-np2",
             "workers-np4"]
    assert [run.name for run in plan] == names
    assert [(run.total, run.point["nodes"], run.point["processes_per_node"])
            for run in plan[:3]] == [(1, 1, 1), (2, 1, 2), (4, 2, 2)]
    assert [job.name for job in slurm_jobs(variants, options)] == names
    assert [run.name for run in plan_runs(variants, replace(options, scaling=()))] == [
        "baseline", "workers"]
    with pytest.raises(UsageError, match="do not fill 2 nodes"):
        plan_runs(variants, replace(options, scaling=(3,)))


def test_emit_slurm_with_a_script_and_scaling(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """--script with --vary and --scaling: one job per setting and point, named as the runner
    names the runs, the script by absolute path and its arguments after --; GPUs per node."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(
        "import argparse\np = argparse.ArgumentParser()\np.add_argument('--num-workers')\n")
    args = build_parser().parse_args(
        ["run-and-report", "--script", "train.py", "--vary", "num_workers=0,2",
         "--scaling", "1,8", "--nproc", "4", "--emit-slurm", "slurm", "--device", "cuda",
         "--out", "report", "--", "--epochs", "1"])
    write_slurm(args, [], run_options(args))
    names = sorted(path.stem for path in (tmp_path / "slurm").glob("*.sbatch"))
    assert names == ["num_workers=0-np1", "num_workers=0-np8", "num_workers=2-np1",
                     "num_workers=2-np8"]
    big = (tmp_path / "slurm" / "num_workers=2-np8.sbatch").read_text()
    assert "#SBATCH --nodes=2" in big and "#SBATCH --gres=gpu:4" in big
    assert "#SBATCH --cpus-per-task=12" in big  # 4 processes per node, each with 2 workers
    assert (f"--script {tmp_path}/train.py --vary num_workers=2 --scaling 8 --nproc 4 -- "
            "--epochs 1") in big
    assert f"cd {tmp_path}" in big


def test_failing_variant_is_recorded_and_others_still_run(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A variant whose training crashes (bad knob) is recorded with its error; the next runs."""
    broken = Variant("broken", "a DataLoader with -1 workers", {"num_workers": -1})
    options = tiny_options(tmp_path, ())
    summary = run_all([broken, resolve_variants(["baseline"])[0]], options)
    folders, failures = summary.folders, summary.failures
    assert [folder.name for folder in folders] == ["broken", "baseline"]
    assert len(failures) == 1 and failures[0].startswith("broken: plain run failed")
    assert "num_workers" in failures[0]
    broken_manifest = load_manifest(tmp_path / "broken" / "manifest.json")
    assert broken_manifest.launches[0].exit_status == 1 and broken_manifest.launches[0].error
    assert broken_manifest.artifacts == []
    assert load_manifest(tmp_path / "baseline" / "manifest.json").throughput_samples_per_s > 0


def test_train_entry_point_refuses_missing_config(tmp_path: Path) -> None:
    """The training entry point is a real module run as ``python -m``."""
    done = subprocess.run([sys.executable, "-m", "profreport.runner.train", "--config",
                           str(tmp_path / "none.json")], capture_output=True, text=True)
    assert done.returncode != 0 and "none.json" in done.stderr


def test_a_training_launch_starts_without_pandas() -> None:
    """The modules every launch runs (the script wrapper, the built-in workload) load no pandas:
    they import profreport.concepts for the names they record, and it loads pandas only where
    it builds tables. Before, each launch paid pandas' import (~0.3 s) before training."""
    probe = ("import sys, profreport.runner.script_profile, profreport.runner.train\n"
             "print(sorted({m.split('.')[0] for m in sys.modules} & {'pandas', 'torch'}))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=300, check=True)
    assert done.stdout.split() == ["['torch']"]


def test_fixtures_say_what_limits_them(fixtures_dir: Path) -> None:
    """The made fixtures: the loader limits loader_heavy, the model limits compute_heavy, and
    ddp_gloo has one trace per rank."""
    loader = load_manifest(fixtures_dir / "loader_heavy" / "manifest.json")
    compute = load_manifest(fixtures_dir / "compute_heavy" / "manifest.json")
    assert loader.knobs["num_workers"] == 0 and loader.trials["io"] < loader.trials["synthetic"]
    assert compute.trials["synthetic"] < compute.trials["io"]
    for manifest in (loader, compute):
        assert {a.profiler for a in manifest.artifacts} == {"kernprof", "torch.profiler", "nsys"}
    ddp = load_manifest(fixtures_dir / "ddp_gloo" / "manifest.json")
    assert sorted(a.rank for a in ddp.artifacts) == [0, 1]
    assert all((fixtures_dir / "ddp_gloo" / a.path).is_file() for a in ddp.artifacts)


def test_user_script_is_profiled_through_the_optimizer_hook(tmp_path: Path) -> None:
    """An unmodified script with two optimizers (GAN-style): ProfilerStep counts whole iterations
    (the first optimizer's steps), and the module-level loop is noted."""
    script = tmp_path / "gan.py"
    script.write_text(
        "import torch\n"
        "g, d = torch.nn.Linear(4, 4), torch.nn.Linear(4, 1)\n"
        "og, od = torch.optim.SGD(g.parameters(), 0.1), torch.optim.SGD(d.parameters(), 0.1)\n"
        "train_loader = torch.utils.data.DataLoader(torch.randn(16, 4), batch_size=2)\n"
        "for x in train_loader:\n"
        "    od.zero_grad(); d(g(x).detach()).sum().backward(); od.step()\n"
        "    og.zero_grad(); d(g(x)).sum().backward(); og.step()\n")
    summary = run_all([], script_options(tmp_path / "out", str(script), "torch"))
    folders, failures = summary.folders, summary.failures
    assert failures == []
    manifest = load_manifest(folders[0] / "manifest.json")
    assert manifest.notes[0].startswith("gan.py:5: the training loop sits at module level")
    trace = (folders[0] / manifest.artifacts[0].path).read_bytes()
    events = json.loads(gzip.decompress(trace))["traceEvents"]
    steps = [e for e in events if e.get("name", "").startswith("ProfilerStep#")]
    assert sorted(e["name"] for e in steps) == ["ProfilerStep#2", "ProfilerStep#3"]
    # Each ProfilerStep holds one whole iteration: both optimizers' step() calls.
    sgd_steps = [e for e in events if e.get("name", "").startswith("Optimizer.step#SGD")]
    assert len(sgd_steps) == 4


def test_default_variants_depend_on_the_device() -> None:
    """GPU: pinned and amp; CPU: channels_last, with amp only where bf16 is native."""
    assert default_variants(on_gpu=True, native_bf16=False) == (
        "baseline", "workers", "pinned", "amp")
    assert default_variants(on_gpu=False, native_bf16=False) == (
        "baseline", "workers", "channels_last")
    assert default_variants(on_gpu=False, native_bf16=True) == (
        "baseline", "workers", "channels_last", "amp")


def test_cpu_flags_are_read_from_x86_and_arm_cpuinfo(tmp_path: Path) -> None:
    """x86 ``flags`` and Arm ``Features`` lines both count; other lines do not."""
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("model name\t: bf16 in a name\nflags\t\t: fpu avx2 avx512_bf16\n"
                       "Features\t: fp asimd sve\n")
    assert cpu_flags(cpuinfo) == {"fpu", "avx2", "avx512_bf16", "fp", "asimd", "sve"}
    assert cpu_flags(tmp_path / "absent") == set()


@pytest.mark.skipif(platform.machine() != "x86_64", reason="torch's probes compared are x86 ones")
def test_native_bf16_detection_agrees_with_torch() -> None:
    """/proc/cpuinfo's answer matches torch's own CPU probes (False on this AVX2 machine)."""
    torch_says = torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
    assert cpu_has_native_bf16() == torch_says


def test_device_notes_say_what_this_device_cannot_do() -> None:
    """amp on a CPU without native bf16 and pin_memory without a GPU are noted; nothing else."""
    amp, pinned = Knobs(amp=True), Knobs(pin_memory=True)
    assert device_notes(amp, on_gpu=False, native_bf16=False)[0].startswith(
        "amp: this CPU has no native bf16")
    assert device_notes(amp, on_gpu=False, native_bf16=True) == []
    assert device_notes(amp, on_gpu=True, native_bf16=False) == []
    assert device_notes(pinned, on_gpu=False, native_bf16=True)[0].startswith(
        "pin_memory: no GPU is in use")
    assert device_notes(pinned, on_gpu=True, native_bf16=False) == []


def test_help_lists_every_variant_with_what_it_does() -> None:
    """``run-and-report --help`` has one line per variant and names both default sets."""
    parser = argparse.ArgumentParser(prog="profreport run-and-report")
    add_run_arguments(parser)
    text = parser.format_help()
    for variant in variant_registry().values():
        assert f"  {variant.name:<15}{variant.description}" in text
    assert "default: baseline,workers,pinned,amp on a GPU; baseline,workers,channels_last" in text


@pytest.mark.slow
def test_pinned_and_channels_last_run_on_the_cpu(tmp_path: Path) -> None:
    """pinned: torch warns and ignores pin_memory, the manifest says so; channels_last trains;
    both record the intra-op threads and CPUs of the run."""
    summary = run_all(resolve_variants(["pinned", "channels_last"]), tiny_options(tmp_path, ()))
    folders, failures = summary.folders, summary.failures
    assert failures == []
    pinned, channels = (load_manifest(folder / "manifest.json") for folder in folders)
    assert pinned.knobs["pin_memory"] and pinned.knobs["non_blocking"]
    assert any(note.startswith("pin_memory: no GPU is in use") for note in pinned.notes)
    assert "'pin_memory' argument is set as true" in (folders[0] / "none.stderr.log").read_text()
    assert channels.knobs["channels_last"] and not any("pin_memory" in n for n in channels.notes)
    for manifest in (pinned, channels):
        assert manifest.throughput_samples_per_s > 0
        assert manifest.environment["torch_threads"] == torch.get_num_threads()
        assert manifest.environment["cpus"] == cpus_available()


@pytest.mark.slow
def test_kernprof_under_torchrun_writes_one_line_profile_per_rank(tmp_path: Path) -> None:
    """ddp under kernprof: train.rank0/1.lprof, each with every step on the loader line; each
    rank ran one intra-op thread (torchrun sets OMP_NUM_THREADS=1 unless it is set)."""
    summary = run_all(resolve_variants(["ddp"]), tiny_options(tmp_path, ("kernprof",)))
    folders, failures = summary.folders, summary.failures
    assert failures == []
    manifest = load_manifest(folders[0] / "manifest.json")
    assert sorted((a.path, a.rank) for a in manifest.artifacts) == [
        ("train.rank0.lprof", 0), ("train.rank1.lprof", 1)]
    assert [loader_line_hits(folders[0] / a.path) for a in manifest.artifacts] == [TINY_STEPS] * 2
    assert manifest.environment["torch_threads"] == int(os.environ.get("OMP_NUM_THREADS", "1"))


@pytest.mark.slow
def test_ctrl_c_keeps_the_finished_variant_and_reports_it(tmp_path: Path) -> None:
    """Ctrl-C while the second variant runs: exit 130, the first variant's folder and a report
    on it remain, and the report lists the second as not finished."""
    out = tmp_path / "out"
    command = [str(Path(sys.executable).with_name("profreport")), "run-and-report",
               "--variants", "baseline,workers", "--steps", str(TINY_STEPS), "--profilers",
               "torch", "--device", "cpu", "--format", "md,json", "--out", str(out)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)
    second = out / "runs" / "workers" / "manifest.json"
    deadline = time.monotonic() + 600  # a busy 2-core machine takes minutes per variant
    while not second.is_file() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    os.killpg(process.pid, signal.SIGINT)  # what Ctrl-C in a terminal sends: the whole group
    _stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == EXIT_INTERRUPTED, stderr
    baseline = load_manifest(out / "runs" / "baseline" / "manifest.json")
    assert [a.profiler for a in baseline.artifacts] == ["torch.profiler"]
    workers = load_manifest(second)
    assert workers.notes[-1].startswith("interrupted by Ctrl-C")
    report = json.loads((out / "report.json").read_text())
    assert [run["name"] for run in report["runs"]] == ["baseline"]
    assert report["failures"] == ["workers: not finished (interrupted by Ctrl-C)"]
    assert (out / "report.md").is_file()


@pytest.mark.nsys
def test_qdstrm_left_by_nsys_is_converted(tmp_path: Path, nsys_available: str,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """nsys without its importer beside it (no setup.sh link) leaves nsys.qdstrm: reproduced
    with a copy of the real nsys in a folder without host-linux-x64; the runner converts it
    and the report parses with the script's 3 NVTX steps."""
    importer = qdstrm_importer()
    if importer is None:
        pytest.skip("no QdstrmImporter on this machine")
    real = Path(nsys_available).resolve()
    target = tmp_path / "target-linux-x64"
    target.mkdir()
    for item in real.parent.iterdir():
        if item.name != real.name:
            (target / item.name).symlink_to(item)
    shutil.copy2(real, target / real.name)
    monkeypatch.setenv("PATH", f"{target}{os.pathsep}{os.environ['PATH']}")
    folder = tmp_path / "run"
    script = ("import nvtx\nfor n in range(3):\n    with nvtx.annotate(f'step {n}'):\n"
              "        sum(range(200_000))\n")
    command = wrap_command("nsys", folder, ["-c", script], on_gpu=False)
    record = run_launch(Launch("nsys", command, folder / "nsys.log"))
    assert record.exit_status == 0 and (folder / f"{NSYS_OUTPUT}.qdstrm").is_file()
    manifest = Manifest("qdstrm", "script", {}, {})
    record_launch(manifest, folder, "nsys", record, multi_process=False)
    assert record.note == f"nsys could not find its importer; converted nsys.qdstrm with {importer}"
    assert not (folder / f"{NSYS_OUTPUT}.qdstrm").exists()
    assert [a.path for a in manifest.artifacts] == ["nsys.nsys-rep"]
    profile = parse_file(folder / "nsys.nsys-rep", ParseOptions(cache_dir=tmp_path / "cache"))
    assert len(profile.tables["steps"]) == 3


def test_manifest_without_plain_steps_still_loads(tmp_path: Path) -> None:
    """A manifest written before plain_step_ns existed loads with an empty list."""
    data = json.loads(Manifest("old", "mnist", {}, {}).to_json())
    del data["plain_step_ns"]
    (tmp_path / "manifest.json").write_text(json.dumps(data), encoding="utf-8")
    assert load_manifest(tmp_path / "manifest.json").plain_step_ns == []


def test_multi_node_launch_uses_srun_and_a_rendezvous(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Two nodes inside an allocation: srun starts one torchrun per node with the job's CPUs
    (22.05's srun does not inherit them), c10d rendezvous on the allocation's first node (real
    ``scontrol show hostnames``), nsys inside srun with one report per node; outside an
    allocation two nodes are a usage error."""
    if shutil.which("scontrol") is None:
        pytest.skip("scontrol is not installed (scripts/setup.sh --slurm installs Slurm)")
    entry = ["-m", "profreport.runner.train", "--config", "x.json"]
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    with pytest.raises(UsageError, match="needs a Slurm allocation"):
        wrap_command("torch", tmp_path, entry, False, nproc=2, nodes=2)
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "gpu[07-08]")
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "8")
    nsys = wrap_command("nsys", tmp_path, entry, True, nproc=4, nodes=2)
    assert nsys[:5] == ["srun", "--nodes", "2", "--ntasks-per-node=1", "--cpus-per-task=8"]
    assert nsys[5:7] == ["nsys", "profile"] and "--cuda-memory-usage=true" in nsys
    assert str(tmp_path / "nsys.node%q{SLURM_NODEID}") in nsys
    assert "--nnodes=2" in nsys and "--rdzv_endpoint=gpu07:29500" in nsys
    assert "--rdzv_id=77" in nsys and "--nproc_per_node=4" in nsys


def test_multi_process_variants_use_srun_inside_an_allocation(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Inside a Slurm allocation torchrun is started through srun; outside, or with one
    process, it is not."""
    entry = ["-m", "profreport.runner.train", "--config", "x.json"]
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert wrap_command("torch", tmp_path, entry, False, nproc=2)[:3] == [
        sys.executable, "-m", "torch.distributed.run"]
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    inside = wrap_command("torch", tmp_path, entry, False, nproc=2)
    assert inside[:2] == ["srun", "--ntasks=1"] and "--nproc_per_node=2" in inside
    kernprof = wrap_command("kernprof", tmp_path, entry, False, nproc=2)
    assert kernprof[0] == "srun" and '"$RANK".lprof' in kernprof[-1]
    assert wrap_command("torch", tmp_path, entry, False, nproc=1)[0] == sys.executable


SCRIPTS = Path(__file__).resolve().parent / "scripts"


def script_options(out: Path, script: str, profilers: str, *extra: str) -> RunOptions:
    """run-and-report options for ``--script SCRIPT`` as the command line gives them, with a
    2-step torch.profiler window."""
    args = build_parser().parse_args(
        ["run-and-report", "--script", script, "--profilers", profilers, "--device", "cpu",
         "--out", str(out), *extra])
    return replace(run_options(args), active_steps=2)


@pytest.mark.slow
def test_profile_decorated_script_runs_in_every_launch(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A bare ``@profile`` script given by a relative path: every launch finishes, arguments
    arrive untouched, the line profile names the absolute source (the report finds the loader
    line without --source-root), and the plain run's throughput comes from its 8 steps."""
    monkeypatch.chdir(tmp_path)
    shutil.copy(SCRIPTS / "profile_decorated.py", "train.py")
    options = script_options(tmp_path / "out", "train.py", "kernprof,torch", "--",
                             "--steps", "8", "--tag", "two words")
    summary = run_all([], options)
    assert summary.failures == [] and summary.unprofiled == []
    folder = summary.folders[0]
    manifest = load_manifest(folder / "manifest.json")
    assert manifest.name == "train" and manifest.script == str(tmp_path / "train.py")
    assert "throughput: plain run, rank 0: 7 steps between optimizer.step() calls" in " ".join(
        manifest.notes)
    assert manifest.script_args == ["--steps", "8", "--tag", "two words"]
    assert [(run.profiler, run.exit_status) for run in manifest.launches] == [
        ("none", 0), ("kernprof", 0), ("torch.profiler", 0)]
    assert "tag='two words'" in (folder / "none.log").read_text()
    assert manifest.knobs == {"batch_size": 16, "num_workers": 0, "pin_memory": False,
                              "persistent_workers": False, "lr": 0.1, "batches_per_step": 1}
    assert len(manifest.plain_step_ns) == 7  # 8 optimizer steps: 7 intervals
    assert manifest.throughput_steps_per_s == pytest.approx(
        7 / (sum(manifest.plain_step_ns) / 1e9))
    assert manifest.throughput_samples_per_s == pytest.approx(
        manifest.throughput_steps_per_s * 16)
    from line_profiler import load_stats

    stats = load_stats(str(folder / "train.lprof"))
    (key, lines), = [(k, v) for k, v in stats.timings.items() if v]
    assert key[0] == str(tmp_path / "train.py") and key[2] == "train"
    assert dict((lineno, hits) for lineno, hits, _t in lines)[11] == 9  # loader line: 8 + end
    report = analyze_paths([folder], AnalyzeOptions())
    top = report.runs[0].metrics.lines
    assert top and all(line.source is not None for line in top)


@pytest.mark.slow
def test_failing_script_is_reported_with_its_error_and_signal(tmp_path: Path) -> None:
    """A script that raises, and one that dies of SIGSEGV, after torch.profiler's 8-step window:
    both runs (named by --vary) report every failed launch with its exit or signal, the report
    lists them, and run-and-report exits non-zero."""
    out = tmp_path / "out"
    command = [str(Path(sys.executable).with_name("profreport")), "run-and-report",
               "--script", str(SCRIPTS / "crashes.py"), "--vary", "crash=error,signal",
               "--profilers", "torch", "--device", "cpu", "--format", "json", "--out", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == EXIT_PARTIAL, done.stderr
    report = json.loads((out / "report.json").read_text())
    assert [run["name"] for run in report["runs"]] == ["crash=error", "crash=signal"]
    failures = report["failures"]
    assert len(failures) == 4
    for launch in ("plain run", "torch.profiler run"):
        assert (f"crash=error: {launch} failed: exit status 1: RuntimeError: loss is nan at "
                "step 9") in failures
        assert f"crash=signal: {launch} failed: killed by SIGSEGV" in failures
    crashed = load_manifest(out / "runs" / "crash=signal" / "manifest.json")
    assert crashed.launches[0].exit_status == -signal.SIGSEGV
    assert crashed.launches[0].signal == "SIGSEGV"
    raised = load_manifest(out / "runs" / "crash=error" / "manifest.json")
    assert raised.launches[0].stderr_tail[-1] == "RuntimeError: loss is nan at step 9"
    assert raised.script_args == ["--crash", "error"] and raised.knobs == {}


@pytest.mark.nsys
@pytest.mark.slow
def test_ddp_variant_under_nsys_records_each_rank(tmp_path: Path, nsys_available: str) -> None:
    """The built-in ddp variant (torchrun, 2 gloo ranks) under nsys: each rank of the runner's
    training marks its rank, so the one capture reads as rank 0 and rank 1 of 2, each with its
    own steps (they were two processes named by pid)."""
    summary = run_all(resolve_variants(["ddp"]), tiny_options(tmp_path, ("nsys",)))
    folder = summary.folders[0]
    manifest = load_manifest(folder / "manifest.json")
    nsys_launch = next(launch for launch in manifest.launches if launch.profiler == "nsys")
    assert nsys_launch.exit_status == 0, nsys_launch.error
    from profreport.parsers.nsys import process_profiles

    capture = parse_file(folder / "nsys.nsys-rep", ParseOptions(cache_dir=tmp_path / "cache"))
    parts = process_profiles(capture)
    assert sorted((p.rank, p.meta.world_size, len(p.table("steps"))) for p in parts) == [
        (0, 2, TINY_STEPS), (1, 2, TINY_STEPS)]
    run = analyze_paths([folder], AnalyzeOptions()).runs[0]
    assert run.job is not None and [r.label for r in run.job.ranks] == ["rank 0", "rank 1"]
    assert run.detailed_rank == 0 and run.world_size == 2


#: A gloo DDP script of 16 steps, as a user writes it: nothing in it says its rank to nsys.
_DDP_SCRIPT = """
import torch, torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

dist.init_process_group("gloo")
model = nn.parallel.DistributedDataParallel(nn.Linear(32, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
data = DataLoader(TensorDataset(torch.randn(512, 32), torch.randint(0, 4, (512,))),
                  batch_size=32)
for x, y in data:
    opt.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
dist.barrier()
dist.destroy_process_group()
"""


@pytest.mark.nsys
@pytest.mark.slow
def test_ddp_script_under_nsys_records_each_rank(tmp_path: Path, nsys_available: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A user's gloo DDP script under --nproc 2 --profilers nsys: the wrapper marks each rank's
    rank from torchrun's RANK and WORLD_SIZE, so the one capture of both processes reads as
    rank 0 and rank 1 of 2 (they were two processes named by pid)."""
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "ddp.py"
    script.write_text(_DDP_SCRIPT, encoding="utf-8")
    summary = run_all([], script_options(tmp_path / "out", str(script), "nsys", "--nproc", "2"))
    folder = summary.folders[0]
    manifest = load_manifest(folder / "manifest.json")
    nsys_launch = next(launch for launch in manifest.launches if launch.profiler == "nsys")
    if nsys_launch.exit_status != 0 and torch_heap_crash(nsys_launch, folder):
        pytest.xfail(f"torch's gloo teardown crashed in the nsys run: {nsys_launch.error}")
    assert nsys_launch.exit_status == 0, nsys_launch.error
    from profreport.parsers.nsys import process_profiles

    capture = parse_file(folder / "nsys.nsys-rep", ParseOptions(cache_dir=tmp_path / "cache"))
    parts = process_profiles(capture)
    assert sorted((p.rank, p.meta.world_size) for p in parts) == [(0, 2), (1, 2)]
    assert all(len(p.table("steps")) >= 10 for p in parts)
    job = analyze_paths([folder], AnalyzeOptions()).runs[0].job
    assert job is not None and [r.label for r in job.ranks] == ["rank 0", "rank 1"]


@pytest.mark.slow
def test_ddp_script_with_its_own_profiler_under_torchrun(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A gloo DDP script that drives torch.profiler itself, under --nproc 2: it is not wrapped a
    second time (exactly its two traces, one per rank, collected from ./tb_traces), kernprof's
    auto-profiling does not collide with ``from torch.profiler import profile`` (a line profile
    per rank with train's loop), and every rank's step marks are read."""
    monkeypatch.chdir(tmp_path)
    options = script_options(tmp_path / "out", str(SCRIPTS / "ddp_own_profiler.py"),
                             "kernprof,torch", "--nproc", "2")
    summary = run_all([], options)
    folder = summary.folders[0]
    manifest = load_manifest(folder / "manifest.json")
    crashed = [launch for launch in manifest.launches if launch.exit_status != 0]
    if crashed and all(torch_heap_crash(launch, folder) for launch in crashed):
        # Recorded as it should be (the signal, its stderr); the crash itself is torch's.
        pytest.xfail(f"torch's native profiler/gloo teardown crashed in the "
                     f"{crashed[0].profiler} run: {crashed[0].error}")
    assert summary.failures == [], summary.failures
    assert manifest.world_size == 2
    assert any("drives torch.profiler itself" in note for note in manifest.notes)
    traces = sorted((a.path, a.rank) for a in manifest.artifacts if a.profiler == "torch.profiler")
    assert [rank for _path, rank in traces] == [0, 1]
    assert all(path.startswith("trace/rank") for path, _rank in traces)
    assert len(list((folder / "trace").iterdir())) == 2
    for path, _rank in traces:
        events = json.loads((folder / path).read_text())["traceEvents"]
        steps = sorted(e["name"] for e in events if e.get("name", "").startswith("ProfilerStep#"))
        assert steps == ["ProfilerStep#2", "ProfilerStep#3"]
    lprofs = sorted((a.path, a.rank) for a in manifest.artifacts if a.profiler == "kernprof")
    assert lprofs == [("train.rank0.lprof", 0), ("train.rank1.lprof", 1)]
    from line_profiler import load_stats

    for path, _rank in lprofs:
        timings = load_stats(str(folder / path)).timings
        assert {key[2] for key, lines in timings.items() if lines} >= {"main", "train"}
    results = sorted(folder.glob("script_result.none.rank*.json"))
    assert len(results) == 2
    assert len(manifest.plain_step_ns) == 5  # 6 steps per rank (192 samples / 2 / 16)
    assert manifest.throughput_samples_per_s == pytest.approx(
        manifest.throughput_steps_per_s * 16 * 2)


def test_runner_manifest_fields_round_trip(tmp_path: Path) -> None:
    """Every field the runner writes for scripts, scaling and failures reads back unchanged,
    with no validation problem."""
    from profreport.manifest import ProfiledRun

    failed = ProfiledRun("none", ["python", "x.py"], -11, 1.5, error="killed by SIGSEGV",
                         signal="SIGSEGV", stderr_tail=["a warning", "Segmentation fault"],
                         cpu_s=2.75, other_cpu_s=0.5, cpus=2)
    manifest = Manifest("train", "script /abs/train.py", {"batch_size": 16, "lr": 0.1}, {},
                        launches=[failed], throughput_steps_per_s=7.5,
                        throughput_basis="plain run", world_size=2,
                        scaling={"mode": "weak", "processes": 2, "group": "baseline"},
                        script="/abs/train.py", script_args=["--steps", "8"])
    write_manifest(tmp_path, manifest)
    loaded, problems = read_manifest(tmp_path / "manifest.json")
    assert problems == [] and loaded == manifest


#: A Python loop spinning until it has used the CPU seconds given as its argument.
SPIN = "import sys, time\nwhile time.process_time() < float(sys.argv[1]): pass"


def test_a_launch_records_its_cpu_time_and_the_rest_of_the_machines(tmp_path: Path) -> None:
    """A launch spinning for 1.5 s of CPU while another process spins beside it: the launch
    used about its 1.5 s, and the rest of the machine at least a second meanwhile (the other
    spinner on another CPU for the launch's whole wall time, or half of one CPU shared with
    it; more on a loaded machine). srun runs its tasks under slurmstepd: not measured."""
    other = subprocess.Popen([sys.executable, "-c", SPIN, "60"])
    try:
        time.sleep(0.3)  # the other process is spinning before the launch starts
        record = run_launch(Launch("none", [sys.executable, "-c", SPIN, "1.5"],
                                   tmp_path / "spin.log"))
    finally:
        other.kill()
        other.wait()
    assert record.exit_status == 0
    assert 1.5 <= record.cpu_s <= 2.2
    assert record.other_cpu_s >= 1.0
    stand_in = tmp_path / "srun"
    stand_in.write_text('#!/bin/sh\nexec "$@"\n')
    stand_in.chmod(0o755)
    srun = run_launch(Launch("none", [str(stand_in), sys.executable, "-c", SPIN, "0.2"],
                             tmp_path / "srun.log"))
    assert srun.exit_status == 0 and srun.cpu_s is None and srun.other_cpu_s is None


@pytest.mark.nsys
def test_an_nsys_launch_records_the_cpu_time_of_its_program(tmp_path: Path,
                                                            nsys_available: str) -> None:
    """A real capture of a program spinning for 2 s of CPU: nsys runs it under nsys-launcher,
    and its agent in a session of its own, which the runner adopts as their subreaper: the
    program's whole 2 s (it lost up to its last CPU_SAMPLE_S when its processes were only
    sampled) and nsys's own work, its agent's short-lived helpers included. It was not
    measured at all, so the comparison could not say whether the nsys launches whose step
    times replace a shared run's throughput had the CPUs to themselves."""
    command = [nsys_available, "profile", "--trace=osrt", "--sample=none", "--cpuctxsw=none",
               "--force-overwrite=true", "-o", str(tmp_path / "spin"), sys.executable, "-c",
               SPIN, "2"]
    record = run_launch(Launch("nsys", command, tmp_path / "nsys.log"))
    assert record.exit_status == 0 and record.cpus == len(os.sched_getaffinity(0))
    # nsys profile, its launcher, agent and the agent's helpers add 0.7-1.1 s here.
    assert 2.0 <= record.cpu_s <= 2.0 + 1.5
    assert record.other_cpu_s is not None and record.other_cpu_s >= 0


def test_launch_cpu_accounting_subtracts_the_launch_and_the_runner(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The machine was busy 10 s during the launch, the launch's processes used 3 s and the
    runner 0.2 s: the rest of the machine used 6.8 s. A failed launch records neither (workers
    it leaves unreaped would read as the rest of the machine's)."""
    from profreport.runner import launch as launch_module
    from profreport.runner import leftovers

    busy = iter([100.0, 110.0, 200.0, 210.0])
    usage = {"self": iter([1.0, 1.2, 5.0, 5.0]), "children": iter([5.0, 8.0, 9.0, 9.0])}
    monkeypatch.setattr(launch_module, "cpus_busy_s", lambda cpus: next(busy))
    # The runner's own time is read by the launch, its children's by the count of the
    # launch's processes (leftovers.MarkedCpu), as it is entered and as it returns.
    monkeypatch.setattr(launch_module, "rusage_cpu_s", lambda who: next(usage["self"]))
    monkeypatch.setattr(leftovers, "rusage_cpu_s", lambda who: next(usage["children"]))
    done = run_launch(Launch("none", ["true"], tmp_path / "true.log"))
    assert (done.cpu_s, done.other_cpu_s) == (3.0, 6.8)
    assert done.cpus == len(os.sched_getaffinity(0))
    failed = run_launch(Launch("none", ["false"], tmp_path / "false.log"))
    assert failed.exit_status == 1 and (failed.cpu_s, failed.other_cpu_s) == (None, None)


def _proc_stat(busy: list[int]) -> str:
    """/proc/stat's text for CPUs whose user ticks are ``busy`` (each also 100 idle, 2 system
    and 1 steal ticks, 5 guest ticks inside user), with the machine's sum first and the lines
    that follow the CPUs'."""
    def line(name: str, user: int, cpus: int) -> str:
        return f"{name} {user} 0 {2 * cpus} {100 * cpus} 0 0 0 {cpus} {5 * cpus} 0"
    return "\n".join([line("cpu ", sum(busy), len(busy)),
                      *(line(f"cpu{i}", ticks, 1) for i, ticks in enumerate(busy)),
                      "intr 123456 0 0", "ctxt 98765", "btime 1764000000",
                      "processes 4242", "procs_running 9", "procs_blocked 0"]) + "\n"


def test_a_run_on_its_own_cpus_of_a_busy_node_did_not_share_them() -> None:
    """A 10 s launch with CPUs 2 and 3 of an 8-CPU node to itself (a Slurm allocation) keeps
    them busy with 19 s of its own CPU time, while other jobs keep the other 6 busy (USER_HZ
    100: 1,000 ticks a CPU). Over its CPUs (per-CPU lines of /proc/stat, those of its affinity
    set) the others used nothing: not shared. The whole machine's count (the summed line)
    read 60 s of others' work on 8 CPUs: 75% of the machine, 1% idle, which flagged it."""
    from profreport.manifest import Manifest, ProfiledRun
    from profreport.reports.analysis.metrics import plain_cpu
    from profreport.runner.launch import busy_ticks

    before = _proc_stat([5000] * 8)
    after = _proc_stat([6000, 6000, 5950, 5950, 6000, 6000, 6000, 6000])
    mine = {2, 3}
    assert busy_ticks(before, mine) == 2 * (5000 + 2 + 1)
    own_cpus = (busy_ticks(after, mine) - busy_ticks(before, mine)) / 100
    whole = (busy_ticks(after, range(8)) - busy_ticks(before, range(8))) / 100
    assert (own_cpus, whole) == (19.0, 79.0)
    environment = {"cpu_count": 8}
    run = ProfiledRun("none", ["python", "train.py"], 0, 10.0, cpu_s=19.0,
                      other_cpu_s=own_cpus - 19.0, cpus=len(mine))
    measured = plain_cpu(Manifest("run", "mnist", {}, environment, launches=[run]))
    assert (measured.cpus, measured.other_share, measured.shared) == (2, 0.0, False)
    machine = ProfiledRun("none", ["python", "train.py"], 0, 10.0, cpu_s=19.0,
                          other_cpu_s=whole - 19.0)  # as measured before, over the machine
    flagged = plain_cpu(Manifest("run", "mnist", {}, environment, launches=[machine]))
    assert (flagged.cpus, flagged.other_share, flagged.shared) == (8, 0.75, True)
    # A container's /proc/stat numbering its CPUs 0 and 1 while the affinity names the host's
    # 2 and 3 (lxcfs): their time is unknown, not idle.
    assert busy_ticks(_proc_stat([5000] * 2), mine) is None


@pytest.mark.slow
def test_scaling_runs_each_process_count_with_its_trials(tmp_path: Path) -> None:
    """--scaling 1,2 on the CPU (gloo): one run per point named baseline-npN, each with its
    world size, weak-scaling record and the three trials measured unprofiled; the report's
    scaling study takes its throughput and efficiency from those measurements."""
    out = tmp_path / "out"
    command = [str(Path(sys.executable).with_name("profreport")), "run-and-report",
               "--variants", "baseline", "--scaling", "1,2", "--steps", str(TINY_STEPS),
               "--profilers", "torch", "--device", "cpu", "--format", "json", "--out", str(out)]
    done = subprocess.run(command, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    points = [load_manifest(out / "runs" / name / "manifest.json")
              for name in ("baseline-np1", "baseline-np2")]
    assert [(m.world_size, m.knobs["ddp"]) for m in points] == [(1, False), (2, True)]
    for manifest, processes in zip(points, (1, 2), strict=True):
        assert manifest.scaling == {"mode": "weak", "processes": processes, "nodes": 1,
                                    "processes_per_node": processes, "local_batch_size": 64,
                                    "global_batch_size": 64 * processes, "backend": "gloo",
                                    "group": "baseline"}
        assert set(manifest.trials) == {"io", "synthetic", "full"}
        assert manifest.trials["full"] == manifest.throughput_samples_per_s > 0
    ranks = sorted(a.rank for a in points[1].artifacts)
    assert ranks == [0, 1]
    study, = json.loads((out / "report.json").read_text())["scaling"]
    assert study["group"] == "baseline" and study["mode"] == "weak"
    one, two = study["points"]
    assert (one["processes"], two["processes"]) == (1, 2)
    assert one["throughput"] == pytest.approx(points[0].throughput_samples_per_s, abs=1e-3)
    assert two["throughput"] == pytest.approx(points[1].throughput_samples_per_s, abs=1e-3)
    assert two["efficiency"] == pytest.approx(
        points[1].throughput_samples_per_s / (2 * points[0].throughput_samples_per_s), abs=1e-3)


def test_script_scan_reads_profilers_decorators_and_options() -> None:
    """The syntax tree alone tells: the DDP script drives torch.profiler (``profile`` imported
    by name, so its ``@profile`` would not be kernprof's) and writes to ./tb_traces; the
    tutorial script carries a bare ``@profile`` and spells its option ``--num-workers``."""
    ddp = scan_script(SCRIPTS / "ddp_own_profiler.py")
    assert ddp.drives_torch_profiler and ddp.trace_dirs == ("./tb_traces",)
    assert not ddp.has_profile_decorator and ddp.module_level_loader_line is None
    decorated = scan_script(SCRIPTS / "profile_decorated.py")
    assert decorated.has_profile_decorator and not decorated.drives_torch_profiler
    assert decorated.options == ("--num-workers", "--steps", "--tag")
    crashes = scan_script(SCRIPTS / "crashes.py")
    assert not crashes.drives_torch_profiler and not crashes.has_profile_decorator


def test_vary_settings_are_named_and_spelled_as_the_script_wants() -> None:
    """--vary values become the script's own option spelling, runs are named by the setting,
    known knobs are parsed, and --vary-args adds one run per argument set."""
    facts = scan_script(SCRIPTS / "profile_decorated.py")
    settings = vary_settings(["num_workers=0,2", "amp=true"], ["--num-workers 4 --tag x"],
                             facts, "train")
    assert [s.name for s in settings] == ["num_workers=0,amp=true", "num_workers=2,amp=true",
                                          "num-workers_4_tag_x"]
    assert settings[1].args == ("--num-workers", "2", "--amp", "true")
    assert dict(settings[1].knobs) == {"num_workers": 2, "amp": True}
    assert dict(settings[2].knobs) == {"num_workers": 4}
    assert settings[2].options == ("--vary-args", "--num-workers 4 --tag x")
    assert vary_settings([], [], facts, "train") == [ScriptSetting("train")]
    with pytest.raises(UsageError, match="expected NAME=VALUE"):
        vary_settings(["num_workers"], [], facts, "train")


def test_failure_lines_say_how_a_launch_ended() -> None:
    """An exit status with the last exception line; a signal by name, directly or as torchrun
    reports a rank's; an exception line is never hidden behind warnings."""
    lines = ["UserWarning: something", "Traceback (most recent call last):",
             "ValueError: bad value", "[W] a Kineto warning"]
    assert failure_line(1, None, lines) == "exit status 1: ValueError: bad value"
    assert signal_of(-11, ["[W] a Kineto warning"]) == "SIGSEGV"
    assert failure_line(-11, "SIGSEGV", ["[W] a Kineto warning"]) == "killed by SIGSEGV"
    torchrun = ["traceback : Signal 6 (SIGABRT) received by PID 4242"]
    assert signal_of(1, torchrun) == "SIGABRT"
    assert failure_line(1, "SIGABRT", torchrun) == ("exit status 1, a rank killed by SIGABRT")
    assert signal_of(2, ["usage: x"]) is None


def test_torchrun_root_cause_rank_and_the_ranks_own_last_lines() -> None:
    """torchrun lists every failed rank, the root cause (the first to fail) last: rank 0's
    SIGABRT is the cause, rank 1's SIGTERM (torchrun stopping it) is not; the kept tail holds
    the glibc abort line the rank printed, not only torchrun's long summary."""
    from profreport.runner.launch import stderr_tail

    summary = ["malloc(): unsorted double linked list corrupted",
               "W1123 torch/distributed/elastic/multiprocessing/api.py: Sending process 8 "
               "closing signal SIGTERM",
               "Traceback (most recent call last):", '  File "/usr/bin/torchrun", line 8',
               "    sys.exit(main())",
               "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
               "=" * 60, "train FAILED", "-" * 60, "Failures:", "[1]:",
               "time      : 2026-11-23_10:00:00", "host      : node1",
               "rank      : 1 (local_rank: 1)", "exitcode  : -15 (pid: 8) SIGTERM",
               "error_file: <N/A>", "traceback : Signal 15 (SIGTERM) received by PID 8",
               "-" * 60, "Root Cause (first observed failure):", "[0]:",
               "time      : 2026-11-23_10:00:00", "host      : node1",
               "rank      : 0 (local_rank: 0)", "exitcode  : -6 (pid: 7) SIGABRT",
               "error_file: <N/A>", "traceback : Signal 6 (SIGABRT) received by PID 7",
               "=" * 60]
    assert signal_of(1, summary) == "SIGABRT"
    assert failure_line(1, "SIGABRT", summary) == "exit status 1, rank 0 killed by SIGABRT"
    tail = stderr_tail(summary)
    assert tail[0] == "malloc(): unsorted double linked list corrupted"
    assert tail[-3:] == ["rank      : 0 (local_rank: 0)", "exitcode  : -6 (pid: 7) SIGABRT",
                         "traceback : Signal 6 (SIGABRT) received by PID 7"]
    assert len(tail) == 5


def test_profiler_overhead_is_noted_from_the_step_marks(tmp_path: Path) -> None:
    """torch.profiler's launch ran the steps 5x slower than the plain run: noted with both
    rates; kernprof's 1.1x is not worth a note."""
    from profreport.runner.scripts import overhead_notes

    for mode, rate in (("torch", 2.0), ("kernprof", 9.0)):
        (tmp_path / f"script_result.{mode}.rank0.json").write_text(
            json.dumps({"rank": 0, "steps_per_s": rate}))
    manifest = Manifest("train", "script train.py", {}, {}, throughput_steps_per_s=10.0)
    assert overhead_notes(manifest, tmp_path) == [
        "torch.profiler slowed the steps 5.0x (2.00 steps/s against 10.00 unprofiled): step "
        "times timed under it are inflated; throughput and comparisons come from the plain run"]


def plain_launch(script: Path, source: str) -> Manifest:
    """Write ``source`` as ``script``, run it through the wrapper's plain launch, and return a
    manifest with what the launch recorded (record_plain_result)."""
    from profreport.runner.scripts import record_plain_result

    script.write_text(source)
    subprocess.run([sys.executable, "-m", "profreport.runner.script_profile", "--mode", "none",
                    "--result", str(script.parent / "script_result.none.rank{rank}.json"),
                    str(script)], check=True, cwd=script.parent, timeout=120)
    manifest = Manifest(script.stem, f"script {script.name}", {}, {})
    record_plain_result(manifest, script.parent)
    return manifest


def test_gradient_accumulation_counts_every_batch_of_a_step(tmp_path: Path) -> None:
    """A script that steps its optimizer every 4th batch (gradient accumulation): the plain
    run's samples/s counts the 4 batches each step took from the DataLoader, not one."""
    manifest = plain_launch(
        tmp_path / "accumulate.py",
        "import torch\n"
        "model = torch.nn.Linear(8, 2)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "data = torch.utils.data.TensorDataset(torch.randn(16 * 40, 8))\n"
        "loader = torch.utils.data.DataLoader(data, batch_size=16)\n"
        "for i, (x,) in enumerate(loader):\n"
        "    (model(x).sum() / 4).backward()\n"
        "    if (i + 1) % 4 == 0:\n"
        "        opt.step(); opt.zero_grad()\n")
    assert len(manifest.plain_step_ns) == 9  # 10 optimizer steps
    assert manifest.knobs["batches_per_step"] == 4
    assert manifest.knobs["batch_size"] == 16
    assert manifest.throughput_steps_per_s is not None
    assert manifest.throughput_samples_per_s == pytest.approx(
        manifest.throughput_steps_per_s * 16 * 4)
    assert "x 4 batches per step" in manifest.throughput_basis


def test_a_scripts_line_profile_holds_only_its_own_functions(tmp_path: Path) -> None:
    """Under kernprof, the wrapper line-profiles every function the script defines and nothing
    of profreport's: runner.train's loop, decorated for kernprof when imported under it, had
    been registered in every script's .lprof (0 hits) and its report noted that profreport's
    own source was not shown."""
    import pickle

    script = tmp_path / "tiny.py"
    script.write_text(
        "import torch\n"
        "def fit():\n"
        "    model = torch.nn.Linear(4, 1)\n"
        "    opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "    for _ in range(3):\n"
        "        model(torch.randn(2, 4)).sum().backward(); opt.step()\n"
        "fit()\n")
    out = tmp_path / "tiny.lprof"
    subprocess.run([sys.executable, "-m", "kernprof", "-l", "-q", "-o", str(out), "-m",
                    "profreport.runner.script_profile", "--mode", "kernprof", str(script)],
                   check=True, cwd=tmp_path, timeout=120, capture_output=True)
    stats = pickle.loads(out.read_bytes())
    assert {(Path(file).name, name) for file, _, name in stats.timings} == {("tiny.py", "fit")}


def test_ranks_with_uneven_steps_are_noted(tmp_path: Path) -> None:
    """Two ranks whose step marks count 12 and 20 steps (uneven inputs under DDP's Join): the
    throughput is rank 0's, and a note says the ranks went on unevenly."""
    from profreport.runner.scripts import record_plain_result

    for rank, steps in ((0, 12), (1, 20)):
        (tmp_path / f"script_result.none.rank{rank}.json").write_text(json.dumps(
            {"rank": rank, "world_size": 2, "steps": steps, "step_ns": [5_000_000] * (steps - 1),
             "steps_per_s": 200.0, "loader": {"batch_size": 32}}))
    manifest = Manifest("uneven", "script ddp.py", {}, {})
    record_plain_result(manifest, tmp_path)
    assert manifest.throughput_samples_per_s == 200.0 * 32 * 2
    assert manifest.environment["local_world_size"] == 1  # results written before it was kept
    assert ("the ranks made different numbers of steps (rank 0 12, rank 1 20): uneven inputs; "
            "throughput and step times are rank 0's, while it trained, and the ranks that went "
            "on trained without it") in manifest.notes


def test_a_script_rank_records_the_processes_torchrun_started_on_its_node(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """torchrun --nproc_per_node=2 sets LOCAL_WORLD_SIZE=2 in each rank: the wrapper writes it
    in the rank's step marks and the manifest keeps it (environment.local_world_size), so the
    advice knows that both ranks share the node's CPUs."""
    from profreport.runner.script_profile import StepMarks, write_result
    from profreport.runner.scripts import record_plain_result

    for rank in (0, 1):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "2")
        monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
        write_result(StepMarks(), str(tmp_path / "script_result.none.rank{rank}.json"))
    manifest = Manifest("ddp", "script ddp.py", {}, {})
    record_plain_result(manifest, tmp_path)
    assert manifest.world_size == 2 and manifest.environment["local_world_size"] == 2


def test_the_scripts_prefetch_factor_is_recorded(tmp_path: Path) -> None:
    """The DataLoader's prefetch_factor is one of the knobs the wrapper records (the advice
    does not ask for a prefetch the run has)."""
    manifest = plain_launch(
        tmp_path / "prefetch.py",
        "import torch\n"
        "model = torch.nn.Linear(8, 2)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "data = torch.utils.data.TensorDataset(torch.randn(16 * 6, 8))\n"
        "loader = torch.utils.data.DataLoader(data, batch_size=16, num_workers=1,\n"
        "                                     prefetch_factor=4)\n"
        "if __name__ == '__main__':\n"
        "    for (x,) in loader:\n"
        "        model(x).sum().backward(); opt.step(); opt.zero_grad()\n")
    assert (manifest.knobs["num_workers"], manifest.knobs["prefetch_factor"]) == (1, 4)


#: A script whose DataLoader (num_workers=0) sleeps 30 ms per batch and whose step is short.
_SLOW_LOADER_SCRIPT = """\
import time, torch
from torch.utils.data import DataLoader, Dataset

class Slow(Dataset):
    def __len__(self):
        return 6 * 4
    def __getitem__(self, i):
        if i % 4 == 0:
            time.sleep(0.03)
        return torch.ones(8)

model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x in DataLoader(Slow(), batch_size=4):
    model(x).sum().backward()
    opt.step()
    opt.zero_grad()
"""


@pytest.mark.nsys
@pytest.mark.slow
def test_script_under_nsys_records_the_dataloader_wait(tmp_path: Path, nsys_available: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A user's script under nsys: the wrapper's ``step N`` ranges run from one optimizer step
    to the next, so they hold the fetch of the next batch; each fetch is a ``dataloader`` range
    of its own, and the capture's DataLoader wait is the 30 ms each batch sleeps (it read the
    gaps between back-to-back step ranges, about 50 us: 0.1% of a loader-bound step)."""
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "slow_loader.py"
    script.write_text(_SLOW_LOADER_SCRIPT, encoding="utf-8")
    summary = run_all([], script_options(tmp_path / "out", str(script), "nsys"))
    folder = summary.folders[0]
    capture = parse_file(folder / "nsys.nsys-rep", ParseOptions(cache_dir=tmp_path / "cache"))
    waits = capture.table("dataloader")
    assert len(waits) == 7  # 6 batches and the fetch that ends the loop
    assert ((waits["end"] - waits["start"]).iloc[:6] >= 30_000_000).all()
    metrics = analyze_paths([folder], AnalyzeOptions()).runs[0].metrics
    assert metrics.dataloader_origin == "nsys" and metrics.dataloader_fraction > 0.5


#: A script that trains from one dataset (30 ms per batch of 4) through a DataLoader made anew
#: for each of its 2 epochs of 3 batches, and runs a validation DataLoader (2 ms per batch of 2,
#: 5 batches: more than training's 6 in all) in the middle of the even steps under
#: ``no_grad`` and after the odd ones with autograd on (``model.eval()`` alone, as scripts do).
_VALIDATING_SCRIPT = """\
import time, torch
from torch.utils.data import DataLoader, Dataset

class Slow(Dataset):
    def __init__(self, n, sleep):
        self.n, self.sleep = n, sleep
    def __len__(self):
        return self.n
    def __getitem__(self, i):
        time.sleep(self.sleep)
        return torch.ones(8)

model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
train_set = Slow(3 * 4, 0.0075)
val = DataLoader(Slow(5 * 2, 0.001), batch_size=2)
step = 0
for epoch in range(2):
    for x in DataLoader(train_set, batch_size=4):
        model(x).sum().backward()
        if step % 2 == 0:
            with torch.no_grad():
                for v in val:
                    model(v)
        opt.step()
        opt.zero_grad()
        if step % 2 == 1:
            for v in val:
                model(v).sum()
        step += 1
"""


def test_a_validation_loader_is_not_the_training_loader(tmp_path: Path) -> None:
    """A script whose validation loader yields 30 batches to training's 6: the knobs and the
    batches per step are the training loader's, the one whose batches fed backward(), made
    anew each epoch over the same dataset (the wrapper took the loader that yielded the most
    batches: batch size 2, 6 batches a step)."""
    manifest = plain_launch(tmp_path / "validating.py", _VALIDATING_SCRIPT)
    result = json.loads((tmp_path / "script_result.none.rank0.json").read_text())
    assert result["loader"]["batch_size"] == 4
    assert (result["loader"]["batches"], result["loader"]["fed_backward"]) == (6, 6)
    assert manifest.knobs["batch_size"] == 4 and manifest.knobs["batches_per_step"] == 1
    assert manifest.throughput_samples_per_s == pytest.approx(
        manifest.throughput_steps_per_s * 4)


_EVALUATING_FIRST_SCRIPT = """\
import torch
from torch.utils.data import DataLoader, TensorDataset

data = TensorDataset(torch.randn(96, 8), torch.randn(96, 1))
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
with torch.no_grad():
    for x, y in DataLoader(data, batch_size=48):
        model(x)
for x, y in DataLoader(data, batch_size=8, pin_memory=False):
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()
    opt.zero_grad()
"""


def test_the_knobs_are_those_of_the_loader_that_trains(tmp_path: Path) -> None:
    """A script that first evaluates over its training set through another DataLoader (batch
    48, under no_grad), then trains from one of batch 8 over the same dataset: the loaders are
    one (their dataset), and the knobs are the training one's; the first loader's were recorded
    (batch size 48, and samples/s 6 times too high)."""
    manifest = plain_launch(tmp_path / "evaluating.py", _EVALUATING_FIRST_SCRIPT)
    result = json.loads((tmp_path / "script_result.none.rank0.json").read_text())
    assert result["loader"]["batch_size"] == 8
    assert (result["loader"]["batches"], result["loader"]["fed_backward"]) == (12, 12)
    assert manifest.knobs["batch_size"] == 8
    assert manifest.throughput_samples_per_s == pytest.approx(
        manifest.throughput_steps_per_s * 8)


@pytest.mark.nsys
@pytest.mark.slow
def test_a_validation_loaders_fetches_are_no_dataloader_wait(
        tmp_path: Path, nsys_available: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under nsys and torch.profiler, only the training loaders' fetches are DataLoader wait
    (the 30 ms batches, of both epochs' loaders); the validation loader's 36 fetches (6 passes
    of 5 batches and the fetch that ends each) stay in the capture under
    concepts.OTHER_LOADER_RANGE. The wrapper ranged every fetch of every loader as
    ``dataloader``: 44 waits."""
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "validating.py"
    script.write_text(_VALIDATING_SCRIPT, encoding="utf-8")
    summary = run_all([], script_options(tmp_path / "out", str(script), "torch,nsys"))
    assert summary.failures == []
    folder = summary.folders[0]
    capture = parse_file(folder / "nsys.nsys-rep", ParseOptions(cache_dir=tmp_path / "cache"))
    waits = capture.table("dataloader")
    assert len(waits) == 8  # 3 batches and the fetch that ends the epoch, twice
    assert ((waits["end"] - waits["start"]).to_numpy() >= 30_000_000).sum() == 6
    ranges = capture.table("ranges")
    assert (ranges["name"] == concepts.OTHER_LOADER_RANGE).sum() == 36
    trace_path = next((folder / "trace").glob("*.pt.trace.json.gz"))
    trace = parse_file(trace_path, ParseOptions(cache_dir=tmp_path / "cache"))
    slow = (trace.table("dataloader").eval("end - start") >= 30_000_000).value_counts()
    assert slow.get(True, 0) >= 2 and slow.get(False, 0) <= 1  # the fetch that ends epoch 1
    events = json.loads(gzip.decompress(trace_path.read_bytes()))["traceEvents"]
    assert any(event.get("name") == concepts.OTHER_LOADER_RANGE for event in events)


#: A script that trains 2 epochs of 3 batches (a DataLoader made anew each epoch over the same
#: map-style dataset), then spends 300 ms after its loop (an evaluation, a checkpoint: a sleep
#: here), marked by a range of its own.
_AFTER_THE_LOOP_SCRIPT = """\
import time, nvtx, torch
from torch.utils.data import DataLoader

model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
data = torch.randn(12, 8)
for epoch in range(2):
    for x in DataLoader(data, batch_size=4):
        model(x).sum().backward()
        opt.step()
        opt.zero_grad()
        time.sleep(0.01)
with nvtx.annotate("after training"), torch.profiler.record_function("after training"):
    time.sleep(0.3)
"""


@pytest.mark.nsys
@pytest.mark.slow
def test_the_last_step_ends_where_the_training_loop_ends(
        tmp_path: Path, nsys_available: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A script's 6 optimizer steps over 2 epochs, then 300 ms after its loop: the wrapper's
    last ``step 6`` range ran from the last optimizer step to the script's end, holding the
    fetch that ended the loop and the 300 ms (ProfilerStep#6 too), and the capture kept it as
    a step (work follows the fetch). Now no range opens for the fetch that ends a pass (the
    loader knows it has no batch left) and the next epoch's pass opens the next: steps 1 to 5
    under nsys, each ending before the stretch after the loop, and torch.profiler's
    ProfilerSteps are the same steps."""
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "after_the_loop.py"
    script.write_text(_AFTER_THE_LOOP_SCRIPT, encoding="utf-8")
    options = replace(script_options(tmp_path / "out", str(script), "torch,nsys"),
                      active_steps=6)
    summary = run_all([], options)
    assert summary.failures == []
    folder = summary.folders[0]
    parse = ParseOptions(cache_dir=tmp_path / "cache")
    capture = parse_file(folder / "nsys.nsys-rep", parse)
    ranges = capture.table("ranges")
    after = int(ranges.loc[ranges["name"] == "after training", "start"].iloc[0])
    steps = capture.table("steps")
    assert steps["number"].tolist() == [1, 2, 3, 4, 5]
    assert (steps["end"] <= after).all()
    assert ((steps["end"] - steps["start"]) < 300_000_000).all()
    trace = parse_file(next((folder / "trace").glob("*.pt.trace.json.gz")), parse)
    spans = trace.table("ranges")
    after = int(spans.loc[spans["name"] == "after training", "start"].iloc[0])
    profiler_steps = trace.table("steps")
    assert set(profiler_steps["number"]) <= {1, 2, 3, 4, 5}
    assert len(profiler_steps) >= 3 and (profiler_steps["end"] <= after).all()


def torch_mode_trace(tmp_path: Path, source: str, active: int) -> tuple[pd.DataFrame,
                                                                        pd.DataFrame]:
    """Run ``source`` as a script through the wrapper under torch.profiler (``active`` steps
    recorded after its wait and warm-up steps, the wrapper's result in ``result.json``): the
    trace's steps and its spans."""
    script = tmp_path / "script.py"
    script.write_text(source, encoding="utf-8")
    subprocess.run([sys.executable, "-m", "profreport.runner.script_profile", "--mode", "torch",
                    "--trace-dir", str(tmp_path / "trace"), "--active", str(active),
                    "--result", str(tmp_path / "result.json"), str(script)],
                   check=True, cwd=tmp_path, timeout=120)
    trace = parse_file(next((tmp_path / "trace").glob("*.pt.trace.json.gz")),
                       ParseOptions(cache_dir=tmp_path / "cache"))
    return trace.table("steps"), trace.table("ranges")


def spans_in(steps: pd.DataFrame, spans: pd.DataFrame, name: str) -> list[int]:
    """How many spans named ``name`` lie inside each of ``steps``."""
    named = spans[spans["name"] == name]
    return [int(((named["start"] >= start) & (named["end"] <= end)).sum())
            for start, end in zip(steps["start"], steps["end"], strict=True)]


@pytest.mark.parametrize("dataset", ["data", "datasets[epoch]"])
def test_every_epochs_steps_hold_what_the_loop_does_after_the_optimizer_step(
        tmp_path: Path, dataset: str) -> None:
    """3 epochs of 3 batches (a DataLoader made anew each epoch over ``dataset``: the same one,
    or each epoch's own), 20 ms of work after each optimizer step (zero_grad, a log line: a
    span here) and 100 ms of validation after each epoch. The first step of epoch 2 and 3
    opened where its pass started, so it held no after-the-step work while every other step
    held one: the last iteration of the epoch before ended at its optimizer step and its
    after-the-step work was no step's. A step now runs from where the loop asks for its batch
    to where it asks for the next, in every epoch: each holds its own after-the-step work, and
    the validation between epochs is no step's. Over each epoch's own dataset, each epoch's
    loader read as another loader: its first fetch came after the training loader's batches
    had fed backward, so it read as no training fetch (a span named
    concepts.OTHER_LOADER_RANGE, no step boundary there) and the epoch's first step opened at
    its optimizer step. A loader whose pass starts where the training loader's passes start
    is now the training loader: the same steps, and the 9 batches one loader's, 1 per step."""
    steps, spans = torch_mode_trace(tmp_path, f"""\
import time, torch
from torch.profiler import record_function
from torch.utils.data import DataLoader

model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
data = torch.randn(12, 8)
datasets = [torch.randn(12, 8) for _ in range(3)]
for epoch in range(3):
    for x in DataLoader({dataset}, batch_size=4):
        model(x).sum().backward()
        opt.step()
        with record_function("after the step"):
            opt.zero_grad()
            time.sleep(0.02)
    with record_function("validation"):
        time.sleep(0.1)
""", active=10)
    assert steps["number"].tolist() == [2, 3, 4, 5, 6, 7, 8]
    assert spans_in(steps, spans, "after the step") == [1] * 7
    validation = spans[spans["name"] == "validation"]
    for start, end in zip(validation["start"], validation["end"], strict=True):
        assert ((steps["end"] <= start) | (steps["start"] >= end)).all()
    assert not (spans["name"] == concepts.OTHER_LOADER_RANGE).any()
    result = json.loads((tmp_path / "result.json").read_text(encoding="utf-8"))
    assert result["loader"]["batches"] == 9 and result["loader"]["fed_backward"] == 9
    assert result["batches_per_step"] == 1.0


#: A training loop over ``{loader}`` that breaks off after its sixth batch, each iteration
#: doing 20 ms of work after its optimizer step, then 300 ms after the loop (``{preamble}``:
#: what the loader needs defined first).
BREAKS_OFF = """\
import time, torch
from torch.profiler import record_function
from torch.utils.data import DataLoader
{preamble}
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step, x in enumerate({loader}):
    model(x).sum().backward()
    opt.step()
    with record_function("after the step"):
        opt.zero_grad()
        time.sleep(0.02)
    if step == 5:
        break
with record_function("after training"):
    time.sleep(0.3)
"""


def assert_steps_end_where_the_loop_breaks_off(tmp_path: Path, preamble: str,
                                               loader: str) -> None:
    """Under torch.profiler, :data:`BREAKS_OFF` over ``loader`` has steps 2 to 5, each holding
    one iteration's work after its optimizer step, every one ending before the stretch after
    the loop."""
    steps, spans = torch_mode_trace(tmp_path, BREAKS_OFF.format(preamble=preamble,
                                                                loader=loader), active=10)
    assert steps["number"].tolist() == [2, 3, 4, 5]
    assert spans_in(steps, spans, "after the step") == [1] * 4
    after = int(spans.loc[spans["name"] == "after training", "start"].iloc[0])
    assert (steps["end"] <= after).all()


def test_a_loader_of_unknown_length_leaves_the_fetch_that_ends_its_pass_out_of_every_step(
        tmp_path: Path) -> None:
    """2 epochs over an IterableDataset (the loader cannot know it holds 3 batches), 20 ms of
    work after each optimizer step, then 300 ms after the loop. A step opened where the loop
    asked for its next batch, before the loader could say it had none: the fetch that raised
    StopIteration made a step of its own (ProfilerStep#3 and #6, holding that fetch alone), kept
    as a step since work follows it, and the next epoch's first step took its number again.
    Over such a loader a step now opens when its fetch returns a batch: steps 2 to 5, each
    holding one iteration's work after its optimizer step, every one ending before the stretch
    after the loop."""
    steps, spans = torch_mode_trace(tmp_path, """\
import time, torch
from torch.profiler import record_function

class Stream(torch.utils.data.IterableDataset):
    def __iter__(self):
        return (torch.ones(4, 8) for _ in range(3))

model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loader = torch.utils.data.DataLoader(Stream(), batch_size=None)
for epoch in range(2):
    for x in loader:
        model(x).sum().backward()
        opt.step()
        with record_function("after the step"):
            opt.zero_grad()
            time.sleep(0.02)
with record_function("after training"):
    time.sleep(0.3)
""", active=10)
    assert steps["number"].tolist() == [2, 3, 4, 5]
    assert spans_in(steps, spans, "after the step") == [1] * 4
    after = int(spans.loc[spans["name"] == "after training", "start"].iloc[0])
    assert (steps["end"] <= after).all()


def test_a_loop_that_breaks_off_ends_its_last_step_where_it_breaks(tmp_path: Path) -> None:
    """A loop that breaks off after 6 of its loader's 10 batches (``if step == 5: break``, 20 ms
    of work after each optimizer step), then 300 ms after the loop: its last step ran on to the
    script's end (ProfilerStep#5 held the 300 ms), since no fetch came to end it. The loop lets
    go of its iterator as it breaks off (CPython frees it there), which now ends the step: steps
    2 to 5, each holding one iteration's work after its optimizer step, every one ending before
    the stretch after the loop."""
    assert_steps_end_where_the_loop_breaks_off(
        tmp_path, "", "DataLoader(torch.randn(40, 8), batch_size=4)")


@pytest.mark.nsys
@pytest.mark.slow
def test_under_nsys_a_loop_that_breaks_off_ends_its_last_step_range_where_it_breaks(
        tmp_path: Path, nsys_available: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The NVTX side of the loop that breaks off (see the torch.profiler test above): its last
    ``step 5`` range ran on to the script's end, through the 300 ms after the loop; it ends now
    where the loop let go of its iterator, and steps 1 to 5 all end before that stretch."""
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "breaks_off.py"
    script.write_text("""\
import time, nvtx, torch
from torch.utils.data import DataLoader

model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step, x in enumerate(DataLoader(torch.randn(40, 8), batch_size=4)):
    model(x).sum().backward()
    opt.step()
    if step == 5:
        break
with nvtx.annotate("after training"):
    time.sleep(0.3)
""", encoding="utf-8")
    summary = run_all([], script_options(tmp_path / "out", str(script), "nsys"))
    assert summary.failures == []
    capture = parse_file(summary.folders[0] / "nsys.nsys-rep",
                         ParseOptions(cache_dir=tmp_path / "cache"))
    ranges = capture.table("ranges")
    after = int(ranges.loc[ranges["name"] == "after training", "start"].iloc[0])
    steps = capture.table("steps")
    assert steps["number"].tolist() == [1, 2, 3, 4, 5]
    assert (steps["end"] <= after).all()


def test_a_loader_whose_sampler_has_no_length_runs_and_its_steps_end_where_it_breaks_off(
        tmp_path: Path) -> None:
    """A DataLoader over a map-style dataset with an endless sampler (no ``__len__``: the loop
    ends by breaking off after 6 batches). Asking how many batches its pass had left raised the
    sampler's TypeError inside the script's fetch, so the script died under the wrapper though
    it runs on its own; the loader now counts as one that cannot know its length: steps 2 to 5,
    each holding one iteration's work after its optimizer step, all ending before the stretch
    after the loop."""
    assert_steps_end_where_the_loop_breaks_off(tmp_path, """\
import itertools
from torch.utils.data import Sampler

class Endless(Sampler):
    def __iter__(self):
        return itertools.cycle(range(8))
""", "DataLoader(torch.randn(8, 8), batch_size=4, sampler=Endless())")


def test_a_loop_that_breaks_off_a_loader_with_persistent_workers_ends_its_last_step_there(
        tmp_path: Path) -> None:
    """:data:`BREAKS_OFF` over a loader with persistent workers, bound to a name: the loader
    keeps its iterator for the next pass, so the loop breaking off freed nothing and the last
    step ran on through the 300 ms after the loop (ProfilerStep#5 held them). The loop now
    holds the pass's iterator behind a reference of its own, freed as it breaks off: steps 2
    to 5, each holding one iteration's work after its optimizer step, all ending before the
    stretch after the loop."""
    assert_steps_end_where_the_loop_breaks_off(tmp_path, """\
loader = DataLoader(torch.randn(40, 8), batch_size=4, num_workers=1, persistent_workers=True)
""", "loader")


#: 6 iterations over batches sliced by hand (no DataLoader) through ``{output}`` of ``x``
#: (``{preamble}``: the model and its optimizer ``opt``), 20 ms of work after each optimizer
#: step, then 300 ms after the loop.
SLICED_BY_HAND = """\
import time, torch
from torch.profiler import record_function
{preamble}
data = torch.randn(24, 8)
for i in range(0, 24, 4):
    x = data[i:i + 4]
    {output}.sum().backward()
    opt.step()
    with record_function("after the step"):
        opt.zero_grad()
        time.sleep(0.02)
with record_function("after training"):
    time.sleep(0.3)
"""


def test_a_loop_fed_by_no_dataloader_ends_its_last_step_at_its_last_optimizer_step(
        tmp_path: Path) -> None:
    """:data:`SLICED_BY_HAND` through a module. Each step opened at an optimizer step and ran
    to the next, so the last one (ProfilerStep#6, opened after the last optimizer step) ran on
    through the 300 ms to the script's end. A step now opens with the model's first forward
    under autograd after an optimizer step and ends at the next optimizer step: steps 2 to 5,
    each holding one optimizer step (its hook, inside it, ends the step) and none of the work
    after it, all ending before the stretch after the loop."""
    steps, spans = torch_mode_trace(tmp_path, SLICED_BY_HAND.format(preamble="""\
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
""", output="model(x)"), active=10)
    assert steps["number"].tolist() == [2, 3, 4, 5]
    optimizer = spans.loc[spans["name"] == "Optimizer.step#SGD.step", "start"].to_numpy()
    assert [int(((optimizer >= start) & (optimizer <= end)).sum())  # its hook ends the step
            for start, end in zip(steps["start"], steps["end"], strict=True)] == [1] * 4
    assert spans_in(steps, spans, "after the step") == [0] * 4
    after = int(spans.loc[spans["name"] == "after training", "start"].iloc[0])
    assert (steps["end"] <= after).all()


def test_a_loop_whose_model_is_no_module_opens_its_steps_at_its_optimizer_steps(
        tmp_path: Path) -> None:
    """:data:`SLICED_BY_HAND` with a model of bare tensors (``x @ w``): no module's forward
    ever comes to open a step, so the steps would all be lost. An iteration that ran with no
    such forward makes the loop's steps run from one optimizer step to the next again: steps 2
    to 6, each holding the work after its optimizer step, the last one on to the script's
    end."""
    steps, spans = torch_mode_trace(tmp_path, SLICED_BY_HAND.format(preamble="""\
w = torch.zeros(8, 1, requires_grad=True)
opt = torch.optim.SGD([w], lr=0.1)
""", output="(x @ w)"), active=10)
    assert steps["number"].tolist() == [2, 3, 4, 5, 6]
    assert spans_in(steps, spans, "after the step") == [1] * 5
    assert spans_in(steps, spans, "after training") == [0, 0, 0, 0, 1]
