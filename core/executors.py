"""Where independent tasks (one per rank file) run: local worker processes by default, or a Dask
cluster (``pip install 'profreport[dask]'``): a running scheduler (``tcp://HOST:PORT``) or Dask
workers started as Slurm jobs through dask-jobqueue (``slurm``).

Tasks and their results are pickled; a Dask worker reads the files itself, so the paths must be
absolute and visible from every worker (a shared filesystem). Results come back in task order
whatever order the tasks finish in, so every executor gives the same report.
"""

from __future__ import annotations

import functools
import importlib.util
import multiprocessing
import os
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from profreport.errors import MissingToolError, UsageError

T = TypeVar("T")
R = TypeVar("R")

#: ``--scheduler`` value that starts Dask workers as Slurm jobs.
SLURM = "slurm"
#: Seconds to wait for a Dask scheduler to answer before giving up.
CONNECT_TIMEOUT_S = 30
#: Modules the Dask executors need, from the ``dask`` extra.
DASK_MODULES = ("distributed", "dask_jobqueue")


@dataclass(frozen=True)
class ExecutorOptions:
    """How per-rank tasks are run (``profreport analyze --scheduler ...``)."""

    #: None: local processes; ``tcp://HOST:PORT``: a running Dask scheduler; ``slurm``.
    scheduler: str | None = None
    #: Local worker processes (default: the CPUs this process may use).
    processes: int | None = None
    #: Slurm jobs to start, each one Dask worker (``--scheduler slurm``).
    slurm_jobs: int = 1
    slurm_queue: str | None = None
    slurm_account: str | None = None
    slurm_walltime: str = "01:00:00"
    slurm_cores: int = 1
    slurm_memory: str = "8GB"


def available_cpus() -> int:
    """The CPUs this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


#: The CPUs a local pool's worker process may use for its own parallel work (set in each
#: worker when the pool starts); None in any other process.
_POOL_SHARE: int | None = None


def cpu_share() -> int:
    """The CPUs this process's own parallel work (a parser's decoding threads or range workers)
    may use: all it may run on, or, in one of a local pool's worker processes or a Dask worker
    whose CPUs run N tasks at once (its threads and those of the other workers on them), an
    equal share of them, so that N files read side by side never start N times as many threads
    or processes as there are CPUs."""
    if _POOL_SHARE:
        return _POOL_SHARE
    tasks = _dask_worker_threads()
    return max(1, available_cpus() // tasks) if tasks else available_cpus()


def _dask_worker_threads() -> int | None:
    """The tasks run at once on this Dask worker's CPUs: its own threads, and those of the other
    workers on its host whose CPUs overlap its own (``dask worker --nworkers N`` starts N
    processes on the same CPUs); None outside a Dask task."""
    if "distributed" not in sys.modules:  # never imported: no Dask worker in this process
        return None
    from distributed import get_worker

    try:
        worker = get_worker()
    except ValueError:  # not inside a task
        return None
    return _threads_on_cpus_of(worker.address, int(worker.state.nthreads))


def _worker_cpus() -> list[int]:
    """The CPUs the Dask worker process running this may use (asked of every worker)."""
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []


@functools.cache
def _threads_on_cpus_of(address: str, own_threads: int) -> int:
    """The threads of the workers on the host of worker ``address`` whose CPUs overlap its own,
    asked of the scheduler and those workers once per worker process; its own threads when they
    cannot be asked."""
    from distributed import get_client

    try:
        client = get_client()
        try:  # distributed 2025+ lists only a few workers unless asked for all
            workers = client.scheduler_info(n_workers=-1)["workers"]
        except TypeError:
            workers = client.scheduler_info()["workers"]
        host = workers[address]["host"]
        neighbours = [other for other, info in workers.items() if info.get("host") == host]
        cpus = client.run(_worker_cpus, workers=neighbours)
    except (OSError, KeyError, ValueError, TimeoutError):
        return own_threads
    mine = set(cpus.get(address, ()))
    sharing = sum(int(workers[other]["nthreads"]) for other in neighbours
                  if other != address and mine & set(cpus.get(other, ())))
    return own_threads + sharing


def _set_pool_share(share: int) -> None:
    """Record this worker process's share of the CPUs (a pool's initializer)."""
    global _POOL_SHARE
    _POOL_SHARE = share


def require_dask(options: ExecutorOptions) -> None:
    """MissingToolError naming the ``dask`` extra when a Dask scheduler is asked for and the
    extra is not installed (checked before any file is read)."""
    if options.scheduler is None:
        return
    needed = DASK_MODULES if options.scheduler == SLURM else DASK_MODULES[:1]
    missing = [name for name in needed if importlib.util.find_spec(name) is None]
    if missing:
        raise MissingToolError.for_extra(f"--scheduler {options.scheduler}", missing, "dask")


class Executor:
    """Runs a function over items and yields ``(index, result)`` as each finishes."""

    def map_unordered(self, function: Callable[[T], R],
                      items: Sequence[T]) -> Iterator[tuple[int, R]]:
        """``function(item)`` for every item, in this process, one after the other."""
        for index, item in enumerate(items):
            yield index, function(item)


class LocalProcesses(Executor):
    """A pool of local worker processes, started on first use (fork where the platform has it,
    so workers inherit the imported modules instead of importing them again)."""

    def __init__(self, processes: int, stack: ExitStack) -> None:
        self._processes = processes
        self._stack = stack
        self._pool: ProcessPoolExecutor | None = None

    def map_unordered(self, function: Callable[[T], R],
                      items: Sequence[T]) -> Iterator[tuple[int, R]]:
        """Each item in a worker process; one item runs here (a pool would only add start-up)."""
        if len(items) < 2 or self._processes < 2:
            yield from super().map_unordered(function, items)
            return
        if self._pool is None:
            methods = multiprocessing.get_all_start_methods()
            context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
            share = max(1, available_cpus() // self._processes)
            self._pool = self._stack.enter_context(
                ProcessPoolExecutor(self._processes, mp_context=context,
                                    initializer=_set_pool_share, initargs=(share,)))
        futures = {self._pool.submit(function, item): index for index, item in enumerate(items)}
        for future in as_completed(futures):
            yield futures[future], future.result()


class DaskExecutor(Executor):
    """Tasks sent to a Dask cluster through a ``distributed.Client``."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def map_unordered(self, function: Callable[[T], R],
                      items: Sequence[T]) -> Iterator[tuple[int, R]]:
        """Each item as one Dask task; results come back as they finish."""
        from distributed import as_completed as dask_completed

        futures = self._client.map(function, list(items), pure=False)
        index = {future.key: i for i, future in enumerate(futures)}
        for future in dask_completed(futures):
            yield index[future.key], future.result()
            future.release()


def _slurm_cluster(options: ExecutorOptions) -> AbstractContextManager[Any]:
    """A dask-jobqueue SLURMCluster with ``slurm_jobs`` jobs of one Dask worker each."""
    # dask_jobqueue.runner replaces the SIGINT handler when imported (``sys.exit`` on Ctrl-C),
    # which would take Ctrl-C away from the CLI and from the report set's deferred signals.
    handler = signal.getsignal(signal.SIGINT)
    try:
        from dask_jobqueue import SLURMCluster
    finally:
        signal.signal(signal.SIGINT, handler)

    cluster = SLURMCluster(queue=options.slurm_queue, account=options.slurm_account,
                           walltime=options.slurm_walltime, cores=options.slurm_cores,
                           memory=options.slurm_memory, processes=1)
    cluster.scale(jobs=options.slurm_jobs)
    return cluster


def _dask_client(options: ExecutorOptions, stack: ExitStack) -> Any:
    """A connected ``distributed.Client`` for ``options.scheduler``; UsageError when the
    scheduler cannot be reached."""
    from distributed import Client

    address: Any = options.scheduler
    if options.scheduler == SLURM:
        address = stack.enter_context(_slurm_cluster(options))
    elif not str(options.scheduler).startswith(("tcp://", "tls://", "ucx://", "inproc://")):
        raise UsageError(f"--scheduler {options.scheduler!r}: give tcp://HOST:PORT of a "
                         f"running Dask scheduler, or {SLURM}")
    try:
        return stack.enter_context(Client(address, timeout=CONNECT_TIMEOUT_S))
    except OSError as exc:
        raise UsageError(f"cannot reach the Dask scheduler at {options.scheduler}: "
                         f"{exc}") from None


@contextmanager
def open_executor(options: ExecutorOptions) -> Iterator[Executor]:
    """The executor ``options`` ask for, shut down (pool, client, Slurm jobs) on leaving."""
    require_dask(options)
    with ExitStack() as stack:
        if options.scheduler is None:
            yield LocalProcesses(options.processes or available_cpus(), stack)
        else:
            yield DaskExecutor(_dask_client(options, stack))
