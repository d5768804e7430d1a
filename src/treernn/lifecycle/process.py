"""Setting up the process a run lives in, before anything is built: Hydra's resolvers, torch's
threads, subnormal floats, and where log lines go (Lightning's into ``train.log``, a full disk as
one warning). Nothing here knows about tasks, data or checkpoints' contents.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from pathlib import Path
from typing import Any

import torch

from treernn.errors import ConfigValueError
from treernn.files import is_full_disk

log = logging.getLogger("treernn")

#: the line format of Hydra's default job logging (``train.log``), for a log file added by hand
LOG_FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"


def flush_denormals(enabled: bool = True) -> None:
    """Treat subnormal floats as zero on the CPU (see ``flush_denormal`` in conf/config.yaml).

    The flag lives in each thread's floating-point control register; threads started afterwards
    (torch's intra-op OpenMP pool) inherit it, so call this before the first parallel operation.
    """
    torch.set_flush_denormal(enabled)


def set_threads(threads: Any) -> None:
    """``threads``: torch's intra-op thread count for this run (null: the CPUs of a SLURM task, or
    torch's default, one per core). Parallel sweeps (``table=...``, two jobs at once) give each
    job one thread: on a busy machine two OpenMP threads of one job wait for each other."""
    if threads is None:
        # a SLURM task: as many threads as CPUs it was given, not one per core of the node
        allocated = os.environ.get("SLURM_CPUS_PER_TASK")
        if allocated and allocated.isdigit():
            torch.set_num_threads(int(allocated))
            log.info("torch threads: %s (the CPUs SLURM gave this task)", allocated)
        return
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ConfigValueError(
            f"threads={threads!r} must be a positive integer or null; e.g. threads=1"
        )
    torch.set_num_threads(threads)


# ----------------------------------------------------------------------------- log lines
def route_lightning_logs() -> None:
    """Lightning's own logger does not propagate (it prints through its own handler), so its lines
    never reached train.log. Send them through the root logger that Hydra set up."""
    if not logging.getLogger().handlers:
        return  # not under Hydra's logging (e.g. tests composing configs): leave it alone
    for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
        logger = logging.getLogger(name)
        for handler in list(logger.handlers):
            if type(handler) is logging.StreamHandler:
                logger.removeHandler(handler)
        logger.propagate = True
    logging.captureWarnings(True)
    # Lightning's own pytree helper trips torch's LeafSpec deprecation on every batch transfer;
    # it is not ours to fix and says nothing about the run
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)")
    # our loaders hold in-memory tensors and use no worker processes on purpose
    warnings.filterwarnings("ignore", message=r".*does not have many workers.*")
    # our DataModules keep the epoch's batch order and position themselves (state_dict)
    warnings.filterwarnings("ignore", message=r".*your dataloader is\s+not resumable.*")
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handleError = _log_write_failed(handler)


def log_also_to(path: Path) -> None:
    """Append this process's log lines to ``path`` too (a resumed run's ``train.log``)."""
    handler = logging.FileHandler(path, mode="a")
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    handler.handleError = _log_write_failed(handler)
    logging.getLogger().addHandler(handler)


def _log_write_failed(handler: logging.FileHandler):
    """A log line that cannot be written (a full disk) is one warning, not a traceback per line."""
    said = []

    def handle_error(record: logging.LogRecord) -> None:
        error = sys.exc_info()[1]
        if not is_full_disk(error):
            return logging.FileHandler.handleError(handler, record)
        if not said:
            said.append(True)
            print(
                f"warning: cannot write {handler.baseFilename}: {error.strerror}; log lines are "
                "lost until there is room",
                file=sys.stderr,
                flush=True,
            )

    return handle_error


def log_to_files_only(emit, *args) -> None:
    """Log to the file handlers only (the console already has the message)."""
    root = logging.getLogger()
    consoles = [h for h in root.handlers if type(h) is logging.StreamHandler]
    for handler in consoles:
        root.removeHandler(handler)
    try:
        emit(*args)
    finally:
        for handler in consoles:
            root.addHandler(handler)
