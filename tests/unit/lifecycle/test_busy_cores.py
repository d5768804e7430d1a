"""A run left to torch's thread count (``threads=null``) warns when other processes keep the
cores its threads need busy, and says which ``threads=`` would fit; a run whose thread count was
chosen, or that is not one CPU process, is not measured at all."""

from __future__ import annotations

import logging
import os
import time

import pytest
from omegaconf import OmegaConf

from tests.fixtures.busy_cores import every_core_busy
from treernn import cpu_load
from treernn.lifecycle import process
from treernn.lifecycle.process import busy_cores_message, warn_if_cores_busy, watch_cores

CPU_RUN = {"threads": None, "trainer": {"accelerator": "cpu", "devices": 1}}


@pytest.mark.parametrize(
    ("others", "threads", "cpus", "suggested"),
    [
        # 2 CPUs, both kept busy: no free core, one thread
        (2.0, 2, 2, 1),
        # 0.7 busy leaves 1.3 < 2 - 0.5 free: the kernels' probes call that busy too
        (0.7, 2, 2, 1),
        # 16 CPUs, 8.3 busy: 7.7 free, about 8 threads
        (8.3, 16, 16, 8),
    ],
)
def test_a_crowded_machine_is_warned_about_with_the_threads_that_fit(
    others, threads, cpus, suggested
) -> None:
    message = busy_cores_message(others, threads, cpus)
    assert message is not None
    assert message.startswith(
        f"other processes kept {others:.1f} of {cpus} CPUs busy while this run set up, "
        f"and it runs {threads} torch threads (threads=null: one per core)"
    )
    assert f"threads={suggested} is likely faster" in message


@pytest.mark.parametrize(
    ("others", "threads", "cpus"),
    [
        (0.4, 2, 2),  # 1.6 free, not below 2 - 0.5
        (0.0, 2, 2),
        (2.0, 1, 2),  # one thread has no other to hold up
        (7.0, 8, 16),  # 9 free for 8 threads
    ],
)
def test_cores_enough_for_the_threads_say_nothing(others, threads, cpus) -> None:
    assert busy_cores_message(others, threads, cpus) is None


@pytest.mark.parametrize(
    ("overrides", "env"),
    [
        ({"threads": 1}, {}),
        ({"threads": 2}, {}),
        ({}, {"SLURM_CPUS_PER_TASK": "2"}),
        ({"trainer": {"accelerator": "gpu", "devices": 1}}, {}),
        ({"trainer": {"accelerator": "cpu", "devices": 2, "strategy": "ddp_spawn"}}, {}),
        ({"trainer": {"accelerator": "cpu", "devices": 1, "num_nodes": 2}}, {}),
        ({}, {"WORLD_SIZE": "2"}),
    ],
)
def test_runs_whose_threads_are_chosen_or_spread_are_not_measured(
    monkeypatch, overrides, env
) -> None:
    monkeypatch.setattr(process.torch, "get_num_threads", lambda: 2)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    cfg = OmegaConf.merge(OmegaConf.create(CPU_RUN), OmegaConf.create(overrides))
    assert watch_cores(cfg) is None


def test_a_single_cpu_run_on_torch_threads_is_measured_unless_it_has_one_thread(
    monkeypatch,
) -> None:
    monkeypatch.delenv("SLURM_CPUS_PER_TASK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    cfg = OmegaConf.create(CPU_RUN)
    monkeypatch.setattr(process.torch, "get_num_threads", lambda: 2)
    assert isinstance(watch_cores(cfg), cpu_load.CpuSample)
    monkeypatch.setattr(process.torch, "get_num_threads", lambda: 1)
    assert watch_cores(cfg) is None


def test_the_warning_counts_the_cpus_other_processes_used_since_the_sample(
    monkeypatch, caplog
) -> None:
    """Over 2 s the machine used 3.8 CPU-seconds and this process 0.4 (one thread reading data):
    the others kept 1.7 of 2 CPUs busy, and the run's 2 threads would wait."""
    monkeypatch.setattr(process.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(process.torch, "get_num_threads", lambda: 2)
    monkeypatch.setattr(process.time, "sleep", lambda seconds: pytest.fail("waited"))
    start = cpu_load.CpuSample(machine=100.0, own=10.0, wall=time.monotonic() - 2.0)
    now = cpu_load.CpuSample(machine=103.8, own=10.4, wall=start.wall + 2.0)
    monkeypatch.setattr(cpu_load, "cpu_sample", lambda: now)
    with caplog.at_level(logging.WARNING, logger="treernn"):
        message = warn_if_cores_busy(start)
    assert message is not None and message.startswith("other processes kept 1.7 of 2 CPUs")
    assert [record.getMessage() for record in caplog.records] == [message]


def test_a_start_too_recent_to_tell_is_waited_out(monkeypatch) -> None:
    waited = []
    monkeypatch.setattr(process.time, "sleep", waited.append)
    monkeypatch.setattr(cpu_load.CpuSample, "others_cpus", lambda self: 0.0)
    start = cpu_load.CpuSample(machine=0.0, own=0.0, wall=time.monotonic() - 0.1)
    assert warn_if_cores_busy(start) is None
    assert len(waited) == 1 and 0.3 < waited[0] <= process.BUSY_WINDOW - 0.1
    assert warn_if_cores_busy(None) is None


def test_processes_spinning_on_every_core_are_seen(monkeypatch) -> None:
    """Real processes, real ``/proc/stat``: one busy loop per CPU leaves no core free."""
    if cpu_load.cpu_sample() is None:
        pytest.skip("no /proc/stat on this machine: the CPU time of other processes is unknown")
    cpus = os.cpu_count() or 1
    monkeypatch.setattr(process.torch, "get_num_threads", lambda: max(2, cpus))
    with every_core_busy():
        message = warn_if_cores_busy(cpu_load.cpu_sample())
    assert message is not None and "threads=1 is likely faster" in message
