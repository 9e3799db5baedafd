"""Local worker processes share the CPUs: a parser inside one of N workers decodes with its
share of them, not with every CPU again (N files on a 64-core node would otherwise start N x 64
decoding threads or range workers)."""

from __future__ import annotations

import os
from contextlib import ExitStack

from profreport.executors import LocalProcesses, available_cpus, cpu_share


def _where_and_share(_: int) -> tuple[int, int]:
    """The process a task ran in and the CPUs its own parallel work may use there."""
    return os.getpid(), cpu_share()


def test_pool_workers_each_get_an_equal_share_of_the_cpus() -> None:
    with ExitStack() as stack:
        pool = LocalProcesses(2, stack)
        ran = [result for _, result in pool.map_unordered(_where_and_share, [0, 1, 2, 3])]
    assert {pid for pid, _ in ran} - {os.getpid()} == {pid for pid, _ in ran}  # in workers
    assert {share for _, share in ran} == {max(1, available_cpus() // 2)}
    assert cpu_share() == available_cpus()  # this process is no pool worker


def test_a_single_file_read_here_keeps_every_cpu() -> None:
    with ExitStack() as stack:
        ran = [result for _, result in
               LocalProcesses(2, stack).map_unordered(_where_and_share, [0])]
    assert ran == [(os.getpid(), available_cpus())]
