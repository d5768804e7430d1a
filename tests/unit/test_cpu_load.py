"""How many CPUs other processes keep busy, read from this machine, and the rule for whether a
process's threads fit beside them."""

from __future__ import annotations

import os
import time

import pytest

from treernn.cpu_load import cpu_sample, crowded


def test_a_cpu_sample_reads_this_machine() -> None:
    """Two real samples around a busy loop of this process: the process's own time grows by the
    CPU time the loop took, and what the others used is a number of CPUs between 0 and the
    machine's. The loop runs for 0.3 s of this process's CPU time, not of the clock: on a loaded
    machine 0.3 s of the clock gave it 0.1 s of CPU."""
    start = cpu_sample()
    if start is None:
        pytest.skip("no /proc/stat here")
    spent, deadline = time.process_time(), time.monotonic() + 30
    while time.process_time() - spent < 0.3 and time.monotonic() < deadline:
        pass
    now = cpu_sample()
    assert now.own - start.own > 0.25
    assert 0.0 <= start.others_cpus() <= (os.cpu_count() or 1)


@pytest.mark.parametrize(
    ("others", "threads", "cpus", "waits"),
    [
        (0.4, 2, 2, False),  # 1.6 free: not below 2 - 0.5
        (0.6, 2, 2, True),  # 1.4 free
        (2.0, 1, 2, True),  # none free: even one thread waits (the run warns of two or more)
        (2.0, 2, 1, True),  # more threads than CPUs count as the CPUs: 1 - 2 < 1 - 0.5
        (7.0, 8, 16, False),  # 9 free for 8
        (8.6, 8, 16, True),  # 7.4 free for 8
    ],
)
def test_threads_wait_where_fewer_cpus_are_free_than_threads_less_half_a_cpu(
    others, threads, cpus, waits
) -> None:
    assert crowded(others, threads, cpus) is waits
