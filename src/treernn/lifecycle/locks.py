"""Who writes into a run directory: one process at a time, holding an exclusive lock on its
``.lock`` file (the kernel releases it however the process ends); whether a run is live.
"""

from __future__ import annotations

import fcntl
import os
import socket
from pathlib import Path
from typing import Any

from treernn.errors import UserError
from treernn.lifecycle.identity import process_start_ticks
from treernn.lifecycle.records import RunState, read_status

LOCK_FILE = ".lock"


class RunLock:
    """An exclusive lock on a run directory, held by the process that writes into it; the kernel
    releases it when that process ends, however it ends."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)
        self._handle: Any = None

    def acquire(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        handle = open(self.run_dir / LOCK_FILE, "a")  # noqa: SIM115 - held until release()
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            raise UserError(
                f"run {self.run_dir} is still running ({describe_owner(self.run_dir)}): one run "
                "has one writer. Wait for it to finish, or stop it (kill -TERM <pid> saves a "
                "checkpoint), then resume"
            ) from None
        self._handle = handle

    def release(self) -> None:
        if self._handle is not None:
            fcntl.flock(self._handle, fcntl.LOCK_UN)
            self._handle.close()
            self._handle = None


def describe_owner(run_dir: Path) -> str:
    record = read_status(run_dir)
    if record.get("pid"):
        return f"pid {record['pid']} on {record.get('host', 'this host')}"
    return "another process"


def is_live(run_dir: Path) -> bool:
    """True while a process writes into ``run_dir``: its lock is held, or its record names a
    process of this host that is still alive (the same pid and start time)."""
    path = Path(run_dir) / LOCK_FILE
    if path.exists():
        with open(path, "a") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(handle, fcntl.LOCK_UN)
    record = read_status(run_dir)
    if record.get("status") != RunState.RUNNING or record.get("host") != socket.gethostname():
        return False
    pid = record.get("pid")
    if not isinstance(pid, int) or pid == os.getpid():
        return False
    start = process_start_ticks(pid)
    return start is not None and start == record.get("pid_start")
