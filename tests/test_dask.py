"""The per-rank work on a real Dask cluster: a scheduler and two workers started here with the
``dask`` command line, on 127.0.0.1 only, torn down after; the report must be identical to the
one local processes make."""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from profreport import executors
from profreport.executors import ExecutorOptions, cpu_share
from profreport.parsers import ParseOptions
from profreport.reports.analysis.analyze import AnalyzeOptions, analyze_paths
from profreport.reports.render.json import render_json

distributed = pytest.importorskip(
    "distributed", reason="the Dask tests need pip install 'profreport[dask]'")

REPO = Path(__file__).resolve().parents[1]
#: Seconds the cluster has to come up, and each process to stop.
START_TIMEOUT_S = 90
STOP_TIMEOUT_S = 20
#: Dask workers, each with one thread.
WORKERS = 2


def _free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _stop(process: subprocess.Popen[bytes]) -> None:
    """Stop a process started here (its own process group), killing it if it lingers."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(STOP_TIMEOUT_S)


@pytest.fixture(scope="module")
def dask_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``tcp://127.0.0.1:PORT`` of a scheduler with two one-thread workers, started in a folder
    other than the tests' (so relative paths must be resolved by the task, not the worker)."""
    dask = Path(sys.executable).with_name("dask")
    if not dask.is_file():
        pytest.skip("the dask command line is not installed beside this Python")
    folder = tmp_path_factory.mktemp("dask")
    address = f"tcp://127.0.0.1:{_free_port()}"
    common = {"cwd": folder, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL,
              "start_new_session": True}
    processes = [subprocess.Popen([str(dask), "scheduler", "--host", "127.0.0.1", "--port",
                                   address.rsplit(":", 1)[1], "--no-dashboard"], **common)]
    try:
        processes += [subprocess.Popen(
            [str(dask), "worker", address, "--host", "127.0.0.1", "--nthreads", "1",
             "--no-nanny", "--no-dashboard", "--memory-limit", "2GB",
             "--death-timeout", str(START_TIMEOUT_S)], **common) for _ in range(WORKERS)]
        with distributed.Client(address, timeout=START_TIMEOUT_S) as client:
            client.wait_for_workers(WORKERS, timeout=START_TIMEOUT_S)
        yield address
    finally:
        for process in reversed(processes):
            _stop(process)


def _tasks_run(address: str) -> int:
    """How many per-rank tasks the scheduler has seen finish."""
    with distributed.Client(address, timeout=START_TIMEOUT_S) as client:
        return client.run_on_scheduler(
            lambda dask_scheduler: sum(
                prefix.state_counts.get("released", 0) + prefix.state_counts.get("memory", 0)
                + prefix.state_counts.get("forgotten", 0)
                for name, prefix in dask_scheduler.task_prefixes.items()
                if name == "read_rank"))


def test_dask_cluster_report_is_identical_to_local_processes(
        dask_cluster: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two fixture runs (a 2-rank gloo DDP folder with its manifest; a run folder with a trace,
    a .lprof and an .nsys-rep), given as paths relative to the repository."""
    monkeypatch.chdir(REPO)
    inputs = [Path("fixtures/ddp_gloo"), Path("fixtures/loader_heavy")]
    parse = ParseOptions(cache_dir=tmp_path / "nsys-cache")
    local = analyze_paths(inputs, AnalyzeOptions(parse=parse,
                                                 executor=ExecutorOptions(processes=2)))
    before = _tasks_run(dask_cluster)
    remote = analyze_paths(inputs, AnalyzeOptions(
        parse=parse, executor=ExecutorOptions(scheduler=dask_cluster)))
    files = sum(len(run.inputs) for run in remote.runs) + len(remote.failures)
    assert _tasks_run(dask_cluster) - before >= files > 2
    assert render_json(remote) == render_json(local)
    assert sorted(remote.runs[0].metrics.per_rank_step_ns) == [0, 1]


def test_unreachable_scheduler_is_one_line(tmp_path: Path) -> None:
    """A scheduler nobody listens at: one line naming it, exit status 2, no traceback."""
    address = f"tcp://127.0.0.1:{_free_port()}"
    result = subprocess.run(
        [sys.executable, "-m", "profreport", "analyze", str(REPO / "fixtures" / "ddp_gloo"),
         "--out", str(tmp_path), "--scheduler", address],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and address in result.stderr
    assert "Traceback" not in result.stderr


def test_slurm_workers_give_the_same_report(slurm_available: str, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """--scheduler slurm: dask-jobqueue submits a real Slurm job that runs a Dask worker on the
    cluster's node; the report equals the local one and the job wrote its log here."""
    if importlib.util.find_spec("dask_jobqueue") is None:  # importing it would take SIGINT
        pytest.skip("needs pip install 'profreport[dask]'")
    monkeypatch.chdir(tmp_path)  # the job's slurm-*.out lands in the submission folder
    inputs = [REPO / "fixtures" / "ddp_gloo"]
    local = analyze_paths(inputs, AnalyzeOptions(executor=ExecutorOptions(processes=2)))
    remote = analyze_paths(inputs, AnalyzeOptions(executor=ExecutorOptions(
        scheduler="slurm", slurm_jobs=1, slurm_memory="1GB", slurm_walltime="00:10:00")))
    assert render_json(remote) == render_json(local)
    logs = list(tmp_path.glob("slurm-*.out"))
    assert logs and "Start worker" in logs[0].read_text()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # Ctrl-C still ours


def test_a_dask_task_gets_its_share_of_the_worker_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker running 2 tasks at once on 8 CPUs gives each task 4 for its own parallel work
    (decoding threads, range workers), as a local pool's worker does; outside a task, all 8."""
    monkeypatch.setattr(executors, "available_cpus", lambda: 8)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                                  dashboard_address="127.0.0.1:0") as cluster, \
            distributed.Client(cluster) as client:
        assert client.submit(cpu_share, pure=False).result(timeout=START_TIMEOUT_S) == 4
    assert cpu_share() == 8


def test_workers_on_the_same_cpus_share_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two workers of 2 threads each on the same 8 CPUs (``dask worker --nworkers 2``) run 4
    tasks at once there: each task gets 2 CPUs, not the 4 its own worker's threads would leave."""
    monkeypatch.setattr(executors, "available_cpus", lambda: 8)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=2, processes=False,
                                  dashboard_address="127.0.0.1:0") as cluster, \
            distributed.Client(cluster) as client:
        shares = client.run(lambda: None)  # every worker is up
        futures = [client.submit(cpu_share, pure=False, workers=[address])
                   for address in shares]
        assert [f.result(timeout=START_TIMEOUT_S) for f in futures] == [2, 2]


def test_separate_worker_processes_share_the_host_cpus(dask_cluster: str) -> None:
    """The two one-thread worker processes of the test cluster run on the same CPUs: a task of
    either gets half of them (the worker's own thread alone would take them all)."""
    cpus = len(os.sched_getaffinity(0))
    if cpus < 2:
        pytest.skip("one CPU: a half share and the whole are the same")
    with distributed.Client(dask_cluster, timeout=START_TIMEOUT_S) as client:
        futures = [client.submit(cpu_share, pure=False, workers=[address])
                   for address in client.scheduler_info()["workers"]]
        assert {f.result(timeout=START_TIMEOUT_S) for f in futures} == {cpus // 2}
