"""Launchers and ranks: one run directory per job, rank-zero-only files, what Hydra launched (the
job's overrides, a multirun), SLURM requeue, teardown.

Whatever starts the processes of one job (``python train.py``, ``torchrun``, ``srun``, a submitit
job), every rank must write into the same run directory, and only rank 0 writes into it. Hydra
computes the directory in each process before any process group exists, so the name comes from
what the launcher gives every rank alike (`treernn.lifecycle.resolvers.run_dir_name`,
registered before Hydra composes), never from this process's clock or pid. Non-zero ranks skip
Hydra's ``.hydra/`` files and ``train.log`` (see ``conf/hydra/default.yaml``); Lightning already
saves checkpoints and logs metrics on rank 0 only.
"""

from __future__ import annotations

import atexit
import logging
import os
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer

log = logging.getLogger("treernn")


# ----------------------------------------------------------------------------- Hydra's job
def job_overrides() -> list[str]:
    """This job's command-line overrides (``key=value``), when run under Hydra."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return []
    return list(HydraConfig.get().overrides.task)


def override_keys() -> set[str]:
    """The keys set on the command line (``key=value``, ``+key=value``), when run under Hydra."""
    return {item.split("=", 1)[0].lstrip("+~") for item in job_overrides()}


def is_multirun() -> bool:
    """True in a job of a Hydra multirun (``-m``)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


# ----------------------------------------------------------------------------- process groups
def _destroy_process_group() -> None:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


class ProcessGroupTeardown(Callback):
    """Destroys the process group when a DDP process exits, while Python is still whole.

    Lightning does this at exit for NCCL only. A gloo process group left alive is destroyed during
    interpreter finalisation, while gloo's worker threads may still hold pending work: the process
    then aborts (``terminate called without an active exception``, SIGABRT) after it has done its
    job, and ``ddp_spawn`` reports the worker as failed. The ``atexit`` handler runs before that.
    """

    _registered = False

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if trainer.world_size > 1 and not ProcessGroupTeardown._registered:
            atexit.register(_destroy_process_group)
            ProcessGroupTeardown._registered = True


# ----------------------------------------------------------------------------- SLURM
# (its requeue signal: treernn.lifecycle.signals)
def slurm_plugins() -> list[Any]:
    """Lightning's SLURM environment, without Lightning's own requeue handling (treernn's
    `treernn.callbacks.graceful_stop.GracefulStop` requeues between two batches), when
    this process is a SLURM task; nothing otherwise."""
    from lightning.pytorch.plugins.environments import SLURMEnvironment

    if not SLURMEnvironment.detect():
        return []
    return [SLURMEnvironment(auto_requeue=False)]


def slurm_job_id() -> str | None:
    """The id that ``scontrol requeue`` takes: ``<array job>_<task>`` or the job id."""
    array = os.environ.get("SLURM_ARRAY_JOB_ID")
    if array:
        return f"{array}_{os.environ['SLURM_ARRAY_TASK_ID']}"
    return os.environ.get("SLURM_JOB_ID")
