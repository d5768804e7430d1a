"""Which process this is, read from its environment and ``/proc`` without torch or Lightning (a
config is composed, and a run's records read, before they load):

- its rank as its launcher gave it (torchrun, srun, jsrun, Lightning's own ``ddp`` subprocesses),
  before any process group exists: `is_rank_zero`;
- who it is on this host (host, pid, start time), which tells a live process from a later one
  that got the same pid: `process_identity`.
"""

from __future__ import annotations

import datetime as _dt
import os
import socket
from pathlib import Path
from typing import Any

#: where launchers put a process's rank: torchrun (RANK, LOCAL_RANK, GROUP_RANK), srun
#: (SLURM_PROCID), jsrun (JSM_NAMESPACE_RANK), Lightning's subprocess launcher of plain ``ddp``
#: (LOCAL_RANK, and NODE_RANK on other nodes). Lightning's rank_zero_only reads the first four
#: before its strategy sets the rank; a process is rank 0 only where every one of them says 0.
RANK_VARIABLES = (
    "RANK",
    "LOCAL_RANK",
    "SLURM_PROCID",
    "JSM_NAMESPACE_RANK",
    "NODE_RANK",
    "GROUP_RANK",
)


def is_rank_zero() -> bool:
    """Rank 0 of the job (the one that writes a run's records), from the environment."""
    return all(os.environ.get(name, "0") == "0" for name in RANK_VARIABLES)


def process_start_ticks(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks after boot (``/proc/<pid>/stat``), or None
    where it is gone or this is not Linux."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[19])  # field 22 of stat(5): start time in clock ticks after boot
    except (OSError, ValueError, IndexError):
        return None


def process_started(pid: int) -> _dt.datetime | None:
    """`process_start_ticks` as a time of day, at the kernel's clock-tick resolution."""
    ticks = process_start_ticks(pid)
    try:
        boot = next(
            int(line.split()[1])
            for line in Path("/proc/stat").read_text().splitlines()
            if line.startswith("btime ")
        )
    except (OSError, ValueError, IndexError, StopIteration):
        return None
    if ticks is None:
        return None
    return _dt.datetime.fromtimestamp(boot + ticks / os.sysconf("SC_CLK_TCK"))


def process_identity(pid: int | None = None) -> dict[str, Any]:
    """Who runs a run: host, pid and the process's start time (``pid_start``, clock ticks)."""
    pid = os.getpid() if pid is None else pid
    return {"host": socket.gethostname(), "pid": pid, "pid_start": process_start_ticks(pid)}
