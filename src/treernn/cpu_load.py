"""How many CPUs the other processes on this machine keep busy, and whether a process's threads
fit beside them: used by the kernels' timing probes (`treernn.kernels.gemm.machine_busy`, a
figure taken under load) and by a run's start (`treernn.lifecycle.process.warn_if_cores_busy`,
torch's thread count on a busy machine). Linux's ``/proc/stat``; elsewhere unknown."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class CpuSample:
    """The CPU time the whole machine and this process had used at one moment (Linux's
    ``/proc/stat``, ``os.times``): two samples tell how many CPUs the other processes kept busy
    between them, whatever the load average says (two single-threaded jobs on a 2-core machine
    read as a load of 2, the same as this process's own two threads on an idle one)."""

    machine: float  # CPU-seconds busy, all CPUs
    own: float  # CPU-seconds of this process, all its threads
    wall: float

    def others_cpus(self) -> float | None:
        """How many CPUs the other processes kept busy, on average, since this sample."""
        now = cpu_sample()
        if now is None or now.wall - self.wall <= 0:
            return None
        others = (now.machine - self.machine) - (now.own - self.own)
        return max(others, 0.0) / (now.wall - self.wall)


def crowded(others: float, threads: int, cpus: int) -> bool:
    """Whether one process's ``threads`` threads wait for cores when other processes keep
    ``others`` of the machine's ``cpus`` CPUs busy: fewer CPUs are free than it has threads (no
    more than ``cpus``), less half a CPU. One OpenMP thread that waits holds up all the others
    at the next barrier."""
    return cpus - others < min(threads, cpus) - 0.5


def cpu_sample() -> CpuSample | None:
    """Now's `CpuSample`; None where ``/proc/stat`` cannot be read (not Linux)."""
    try:
        with open("/proc/stat", encoding="ascii") as handle:
            fields = handle.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu" or len(fields) < 8:
        return None
    ticks = [int(value) for value in fields[1:9]]
    busy = sum(ticks) - ticks[3] - ticks[4]  # all but idle and iowait
    times = os.times()
    return CpuSample(busy / os.sysconf("SC_CLK_TCK"), times.user + times.system, time.monotonic())
