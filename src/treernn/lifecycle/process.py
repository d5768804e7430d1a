"""Setting up the process a run lives in, before anything is built: Hydra's resolvers, torch's
threads (and a warning where other processes keep the cores they would use busy), subnormal
floats, and where log lines go (Lightning's into ``train.log``, a full disk as one warning).
Nothing here knows about tasks, data or checkpoints' contents.
"""

from __future__ import annotations

import logging
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.utilities.rank_zero import rank_zero_only

from treernn import cpu_load
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


#: seconds over which a run's start measures how many CPUs other processes keep busy; building
#: the data and the model usually takes longer, and where it did not the rest is waited out
BUSY_WINDOW = 0.5


def watch_cores(cfg: Any) -> cpu_load.CpuSample | None:
    """The sample `warn_if_cores_busy` judges from, taken as a run starts setting up; None
    where a warning could not help: a thread count chosen (``threads=<n>``, or SLURM's CPUs), a
    run that is not one CPU process (a GPU, DDP, several nodes), one torch thread, a rank other
    than 0, or a machine without ``/proc/stat``."""
    if cfg.get("threads") is not None or os.environ.get("SLURM_CPUS_PER_TASK"):
        return None
    if torch.get_num_threads() < 2 or rank_zero_only.rank != 0 or not _one_cpu_process(cfg):
        return None
    return cpu_load.cpu_sample()


def _one_cpu_process(cfg: Any) -> bool:
    trainer = cfg.get("trainer") or {}
    accelerator = str(trainer.get("accelerator", "auto"))
    on_cpu = accelerator == "cpu" or (accelerator == "auto" and not torch.cuda.is_available())
    one = (
        str(trainer.get("devices", 1)) in ("1", "auto", "None")
        and str(trainer.get("num_nodes", 1)) in ("1", "None")
        and "ddp" not in str(trainer.get("strategy", "auto"))
        and os.environ.get("WORLD_SIZE", "1") == "1"
    )
    return on_cpu and one


def warn_if_cores_busy(since: cpu_load.CpuSample | None) -> str | None:
    """Warn (and return the warning) where, since ``since`` (`watch_cores`), other processes
    kept so many CPUs busy that this run's torch threads would wait for cores (the rule the
    kernels' probes use, `treernn.cpu_load.crowded`). ``threads=null`` gives a run one
    thread per core, and an OpenMP thread that waits holds up the others at every parallel
    step: beside a parallel sweep's two one-thread jobs on 2 cores, the main job's updates took
    1.85x as long on two threads as on one (docs/performance.md). Only a warning: the machine
    may be idle again a minute later."""
    if since is None:
        return None
    wait = BUSY_WINDOW - (time.monotonic() - since.wall)
    if wait > 0:
        time.sleep(wait)
    others = since.others_cpus()
    if others is None:
        return None
    message = busy_cores_message(others, torch.get_num_threads(), os.cpu_count() or 1)
    if message is not None:
        log.warning(message)
    return message


def busy_cores_message(others: float, threads: int, cpus: int) -> str | None:
    """The warning for a run of ``threads`` torch threads on ``cpus`` CPUs, ``others`` of them
    kept busy by other processes; None where its threads find their cores."""
    if threads < 2 or not cpu_load.crowded(others, threads, cpus):
        return None
    free = max(1, round(cpus - others))
    return (
        f"other processes kept {others:.1f} of {cpus} CPUs busy while this run set up, and it "
        f"runs {threads} torch threads (threads=null: one per core); a thread that waits for a "
        f"core holds up the others at every parallel step. While the machine stays this busy, "
        f"threads={free} is likely faster; threads=<n> sets the count and silences this"
    )


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
