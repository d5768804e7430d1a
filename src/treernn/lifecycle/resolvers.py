"""How a run's and a sweep's directories are named, and the resolvers the configs use for it
(``${run_dir_name:}``, ``${sweep_dir_name:}``, ``${rank_zero_only:...}``,
``${unless_finished:...}``, ``${pid:}``, the SLURM task counts): what Hydra needs before it
composes a config.

Nothing here imports torch or Lightning, so that ``train.py`` registers these and lets Hydra
compose (and reject a wrong choice or key, in about a second) before the heavy imports of a run
(`treernn.lifecycle.entry`, several seconds).
"""

from __future__ import annotations

import datetime as _dt
import os
from pathlib import Path
from typing import Any

from treernn.invocation import trainer_name
from treernn.lifecycle.identity import is_rank_zero, process_started


def _in_slurm_step() -> bool:
    # srun sets SLURM_STEP_ID for every task; a bare `python train.py` inside salloc does not
    return "SLURM_JOB_ID" in os.environ and "SLURM_STEP_ID" in os.environ


def _in_torchrun() -> bool:
    return "TORCHELASTIC_RUN_ID" in os.environ


def run_dir_name() -> str:
    """The last part of a single run's directory, the same in every process of one job.

    - under ``srun`` (a SLURM job step): ``slurm-<job id>[_<array task>]-<step>``. A requeued job
      keeps its job id, so it continues in its directory, from the ``last.ckpt`` it saved there.
    - under ``torchrun`` on one node: the start time and pid of the torchrun agent, the parent of
      every worker: ``<date>_<time>-<centiseconds>_<agent pid>``.
    - under ``torchrun`` across nodes: ``torchrun-<rdzv id>``; give each job its own ``--rdzv-id``
      (for instance ``$SLURM_JOB_ID``).
    - otherwise: this process's start time in microseconds and its pid.
    """
    if _in_slurm_step():
        job = os.environ.get("SLURM_ARRAY_JOB_ID")
        job = f"{job}_{os.environ['SLURM_ARRAY_TASK_ID']}" if job else os.environ["SLURM_JOB_ID"]
        return f"slurm-{job}-{os.environ['SLURM_STEP_ID']}"
    if _in_torchrun():
        nodes = int(os.environ.get("GROUP_WORLD_SIZE", "1"))
        started = process_started(os.getppid()) if nodes == 1 else None
        if started is not None:
            return f"{started:%Y-%m-%d_%H-%M-%S}-{started.microsecond // 10_000:02d}_{os.getppid()}"
        return f"torchrun-{os.environ['TORCHELASTIC_RUN_ID']}"
    return f"{_dt.datetime.now():%Y-%m-%d_%H-%M-%S-%f}_{os.getpid()}"


def sweep_dir_name(*, _root_: Any = None) -> str:
    """The last part of a multirun's directory, fixed by the process that starts the sweep.

    ``sweep_id=<name>`` names it: running the same ``-m`` command with the same name again
    continues that sweep (`treernn.lifecycle.sweeps.layout`). Without a name it is the
    sweep's start time and process. A launcher that runs each job in its own process (submitit,
    locally or on SLURM) resolves the config again there; the name is handed to those processes in
    ``TREERNN_SWEEP_ID`` (they inherit the submitting environment) so that all jobs land in one
    sweep directory.
    """
    from treernn.errors import ConfigValueError

    chosen = _root_.get("sweep_id") if _root_ is not None else None
    if chosen is not None:
        name = str(chosen)
        if not name or "/" in name or name.startswith("."):
            raise ConfigValueError(
                f"sweep_id={name!r}: a name for the sweep's directory, without '/'; e.g. "
                "sweep_id=logic-long"
            )
        os.environ["TREERNN_SWEEP_ID"] = name
        return name
    name = os.environ.get("TREERNN_SWEEP_ID")
    if not name:
        name = f"{_dt.datetime.now():%Y-%m-%d_%H-%M-%S-%f}_{os.getpid()}"
        os.environ["TREERNN_SWEEP_ID"] = name
    return name


def register_resolvers() -> None:
    """The resolvers the configs use: ``${run_dir_name:}``, ``${sweep_dir_name:}``, ``${pid:}``,
    the SLURM task counts, and ``${rank_zero_only:value,otherwise}`` and
    ``${unless_finished:value,run_dir,otherwise}`` for Hydra's own files, ``${program_name:}`` for
    the help; call before Hydra
    composes a config."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("run_dir_name"):
        # cached: every use in one process (hydra.run.dir, paths.output_dir) gives one name
        OmegaConf.register_new_resolver("run_dir_name", run_dir_name, use_cache=True)
    if not OmegaConf.has_resolver("sweep_dir_name"):
        OmegaConf.register_new_resolver("sweep_dir_name", sweep_dir_name)
    if not OmegaConf.has_resolver("slurm_tasks_per_node"):
        OmegaConf.register_new_resolver("slurm_tasks_per_node", slurm_tasks_per_node)
        OmegaConf.register_new_resolver("slurm_gpus_per_node", slurm_gpus_per_node)
    if not OmegaConf.has_resolver("pid"):
        OmegaConf.register_new_resolver("pid", lambda: os.getpid())
    if not OmegaConf.has_resolver("rank_zero_only"):
        OmegaConf.register_new_resolver(
            "rank_zero_only", lambda value, otherwise=None: value if is_rank_zero() else otherwise
        )
    if not OmegaConf.has_resolver("unless_finished"):
        OmegaConf.register_new_resolver("unless_finished", unless_finished)
    if not OmegaConf.has_resolver("program_name"):
        # --help names the program as typed (conf/hydra/default.yaml's hydra.help)
        OmegaConf.register_new_resolver("program_name", trainer_name)


def unless_finished(value: Any, run_dir: str, otherwise: Any = None) -> Any:
    """``value`` in rank 0 of a run that has not finished, else ``otherwise``: Hydra's own files
    (``.hydra/``, ``train.log``) of a finished job stay as that job wrote them when a resumed
    sweep passes over it (the job is skipped; Hydra would otherwise rewrite its composed config
    with this invocation's paths and append to its log), and other DDP ranks write none. A job
    whose record is damaged is left as it is too (the job itself says why and runs nothing)."""
    from treernn.lifecycle.records import DamagedRecord, is_finished

    try:
        return value if is_rank_zero() and not is_finished(Path(run_dir)) else otherwise
    except DamagedRecord:
        return otherwise


def slurm_tasks_per_node(devices: Any) -> int:
    """SLURM tasks per node for ``trainer.devices``: one task per device."""
    if isinstance(devices, int) and devices > 0:
        return devices
    if isinstance(devices, str) and devices.isdigit():
        return int(devices)
    from treernn.errors import UserError

    raise UserError(
        f"trainer.devices={devices}: on SLURM each device is a task; give a number "
        "(trainer.devices=4), not -1 or auto"
    )


def slurm_gpus_per_node(accelerator: str, devices: Any) -> int | None:
    return slurm_tasks_per_node(devices) if accelerator in ("gpu", "cuda") else None
