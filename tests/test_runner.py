"""The runner: real training launches under the real profilers, manifests, IDX data, variants,
Slurm scripts."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from profreport.cli import build_parser
from profreport.errors import InputError, UsageError
from profreport.runner.manifest import load_manifest
from profreport.runner.orchestrate import RunOptions, run_all, run_options, write_slurm
from profreport.runner.script_profile import module_level_loader_loop
from profreport.runner.variants import DEFAULT_VARIANTS, Variant, resolve_variants
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
    folders, failures, interrupted = run_all(
        resolve_variants(["baseline"]), tiny_options(runs, ("kernprof", "torch", "nsys")))
    assert failures == [] and not interrupted
    return folders[0]


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


@pytest.mark.slow
def test_baseline_line_profile_shows_the_loader_line(baseline_run: Path) -> None:
    """kernprof recorded train(): the ``for ... in enumerate(train_loader)`` line has 4 hits."""
    from line_profiler import load_stats

    stats = load_stats(str(baseline_run / "train.lprof"))
    (key, lines), = [(k, v) for k, v in stats.timings.items() if k[2] == "train"]
    source = Path(key[0]).read_text().splitlines()
    loop = [(lineno, hits) for lineno, hits, _t in lines
            if "in enumerate(train_loader)" in source[lineno - 1]]
    assert loop and loop[0][1] == TINY_STEPS


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


def test_damaged_idx_file_is_an_input_error(tmp_path: Path) -> None:
    """A truncated IDX file raises InputError naming the byte count."""
    path = tmp_path / "train-images-idx3-ubyte"
    write_idx(path, np.zeros((2, 28, 28)))
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(InputError, match="holds 1558 bytes"):
        read_idx(path)


def test_variant_registry_and_unknown_variant() -> None:
    """Default variants resolve; an unknown name lists the known ones."""
    assert [v.name for v in resolve_variants(list(DEFAULT_VARIANTS))] == [
        "baseline", "workers", "amp"]
    workers = resolve_variants(["workers"])[0]
    assert workers.changes["num_workers"] >= 1
    with pytest.raises(UsageError, match="unknown variant fast.*known variants: baseline"):
        resolve_variants(["baseline", "fast"])


def test_module_level_loop_is_detected(tmp_path: Path) -> None:
    """A top-level ``for`` over a loader is found by line; one inside a function is not."""
    top = tmp_path / "top.py"
    top.write_text("import x\nloader = x.f()\nfor batch in train_loader:\n    pass\n")
    inside = tmp_path / "inside.py"
    inside.write_text("def train(loader):\n    for batch in loader:\n        pass\n")
    assert module_level_loader_loop(top) == 3
    assert module_level_loader_loop(inside) is None


def test_emit_slurm_scripts_pass_bash_syntax_check(tmp_path: Path) -> None:
    """One sbatch script per variant plus submit_all.sh, all valid bash, with the sbatch lines."""
    out = tmp_path / "slurm"
    args = build_parser().parse_args(
        ["run-and-report", "--variants", "baseline,workers,ddp", "--emit-slurm", str(out),
         "--nodes", "2", "--device", "cuda", "--out", str(tmp_path / "report")])
    assert write_slurm(args, resolve_variants(["baseline", "workers", "ddp"]),
                       run_options(args)) == 0
    names = sorted(path.name for path in out.iterdir())
    assert names == ["baseline.sbatch", "ddp.sbatch", "ddp.train.json", "submit_all.sh",
                     "workers.sbatch"]
    for name in ("baseline.sbatch", "ddp.sbatch", "workers.sbatch", "submit_all.sh"):
        check = subprocess.run(["bash", "-n", str(out / name)], capture_output=True, text=True)
        assert check.returncode == 0, check.stderr
    baseline = (out / "baseline.sbatch").read_text()
    assert "#SBATCH --cpus-per-task=2" in baseline and "#SBATCH --gres=gpu:1" in baseline
    assert "profreport run-and-report --variants baseline" in baseline
    ddp = (out / "ddp.sbatch").read_text()
    assert "#SBATCH --nodes=2" in ddp and "#SBATCH --gres=gpu:2" in ddp
    assert "scontrol show hostnames" in ddp and "--rdzv_backend=c10d" in ddp
    assert '--rdzv_endpoint="$MASTER_ADDR:29500"' in ddp and ddp.count("srun torchrun") == 1
    driver = (out / "submit_all.sh").read_text()
    assert driver.count("sbatch --parsable") == 4 and "--dependency=afterany:" in driver
    assert "profreport analyze" in driver


def test_failing_variant_is_recorded_and_others_still_run(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A variant whose training crashes (bad knob) is recorded with its error; the next runs."""
    broken = Variant("broken", "a DataLoader with -1 workers", {"num_workers": -1})
    options = tiny_options(tmp_path, ())
    folders, failures, _ = run_all([broken, resolve_variants(["baseline"])[0]], options)
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
        "train_loader = [torch.randn(2, 4) for _ in range(8)]\n"
        "for x in train_loader:\n"
        "    od.zero_grad(); d(g(x).detach()).sum().backward(); od.step()\n"
        "    og.zero_grad(); d(g(x)).sum().backward(); og.step()\n")
    options = replace(tiny_options(tmp_path / "runs", ("torch",)), script=script)
    folders, failures, _ = run_all([], options)
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
