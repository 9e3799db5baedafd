"""Local worker processes share the CPUs: a parser inside one of N workers decodes with its
share of them, not with every CPU again (N files on a 64-core node would otherwise start N x 64
decoding threads or range workers)."""

from __future__ import annotations

import os
from contextlib import ExitStack

import pytest

from profreport import executors
from profreport.executors import LocalProcesses, cpu_share

#: The CPUs the tests pretend this process may run on (whatever the machine has).
CPUS = 8


def _where_and_share(_: int) -> tuple[int, int]:
    """The process a task ran in and the CPUs its own parallel work may use there."""
    return os.getpid(), cpu_share()


@pytest.mark.parametrize(("processes", "share"), [(2, 4), (3, 2), (16, 1)])
def test_pool_workers_each_get_an_equal_share_of_the_cpus(
        processes: int, share: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(executors, "available_cpus", lambda: CPUS)  # forked workers inherit it
    with ExitStack() as stack:
        pool = LocalProcesses(processes, stack)
        ran = [result for _, result in pool.map_unordered(_where_and_share, [0, 1, 2, 3])]
    assert os.getpid() not in {pid for pid, _ in ran}  # every task ran in a worker
    assert {got for _, got in ran} == {share}
    assert cpu_share() == CPUS  # this process is no pool worker


def test_a_single_file_read_here_keeps_every_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(executors, "available_cpus", lambda: CPUS)
    with ExitStack() as stack:
        ran = [result for _, result in
               LocalProcesses(2, stack).map_unordered(_where_and_share, [0])]
    assert ran == [(os.getpid(), CPUS)]
