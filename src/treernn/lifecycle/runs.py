"""Finding runs and their checkpoints: the run directory a config names, the runs of a task and
model (single runs and sweep jobs, newest first by their records), a run's newest checkpoint
that loads, its best one, and whether a budget is used up; and the fast check of a single run's
switches before torch loads.

What a run records is `treernn.lifecycle.records`; who writes into it,
`treernn.lifecycle.locks`; deciding what to resume from all this is
`treernn.lifecycle.plan`.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from treernn.config_checks import check_switches, warn_doubtful
from treernn.errors import CheckpointError, UserError, say
from treernn.lifecycle.identity import is_rank_zero
from treernn.lifecycle.records import STATUS_FILE, read_status, remove_if_empty

if TYPE_CHECKING:
    from treernn.checkpoints import CheckpointInfo

log = logging.getLogger("treernn")


def output_dir_of(cfg: DictConfig) -> Path | None:
    """The run's directory, where the config got as far as naming one."""
    output_dir = OmegaConf.select(cfg, "paths.output_dir", throw_on_resolution_failure=False)
    return Path(output_dir) if output_dir else None


def check_before_loading(cfg: DictConfig) -> None:
    """`check_switches` for a single run, before torch and Lightning load (seconds): a
    wrong ``mode=`` or a negative dropout is answered at once, as the run entry
    (`treernn.lifecycle.entry.main`) answers it (one line on stderr, exit status 1, no run
    directory left behind). A job of a multirun is left to the run entry, which records the
    failure in the sweep and goes on."""
    if HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN:
        return
    try:
        check_switches(cfg)
    except UserError as error:
        say(error)
        remove_if_empty(output_dir_of(cfg), rank_zero=is_rank_zero())
        sys.exit(1)
    if is_rank_zero():
        warn_doubtful(cfg)


# ----------------------------------------------------------------------------- finding runs
def newest_complete_checkpoint(run_dir: Path) -> tuple[CheckpointInfo | None, list[str]]:
    """The checkpoint of ``run_dir`` with the most training steps that can be read (its
    ``checkpoints/`` and the SLURM requeue's ``hpc_ckpt_N.ckpt``), and the reasons the others
    (damaged ones) were passed over."""
    best, skipped = None, []
    run_dir = Path(run_dir)
    found = [*(run_dir / "checkpoints").glob("*.ckpt"), *run_dir.glob("hpc_ckpt_*.ckpt")]
    if found:  # torch reads them; a directory without checkpoints is answered without it
        from treernn.checkpoints import inspect_checkpoint
    for path in sorted(found):
        try:
            info = inspect_checkpoint(path)
        except CheckpointError as error:
            skipped.append(str(error))
            continue
        key = (info.global_step, info.epoch, path.name == "last.ckpt")
        if best is None or key > (best.global_step, best.epoch, best.path.name == "last.ckpt"):
            best = info
    return best, skipped


def runs_of(log_dir: Path, task: str, model: str, exclude: Path | None = None) -> list[Path]:
    """Run directories of this task and model under ``log_dir``, newest first by their own record
    (the start time in ``status.json``; the directory name's timestamp for runs without one):
    single runs (``<task>/<model>/<run>``) and the jobs of sweeps (``multirun/...``,
    ``tables/...``), which say their task and model in their record."""
    log_dir = Path(log_dir)
    candidates = {path.parent for path in (log_dir / task / model).glob("*/.hydra")}
    for path in log_dir.rglob(STATUS_FILE):
        record = read_status(path.parent)
        if record.get("task") == task and record.get("model") == model:
            candidates.add(path.parent)
    found = []
    for run_dir in candidates:
        if not (run_dir / ".hydra").is_dir():
            continue
        if exclude is not None and run_dir.resolve() == Path(exclude).resolve():
            continue
        record = read_status(run_dir)
        if record.get("resumed_into"):
            continue  # a resume's own directory: its history lives in the run it resumed
        found.append((record.get("started") or run_dir.name, str(run_dir), run_dir))
    return [run_dir for *_, run_dir in sorted(found, reverse=True)]


def best_file(newest: CheckpointInfo, job_dir: Path) -> Path | None:
    """The best checkpoint (by the run's monitor) that the job's newest checkpoint names, as a
    file of ``job_dir``'s ``checkpoints/`` (written whole: AtomicCheckpointIO), or None: a resumed
    job that tests its best checkpoint needs it (the newest alone would test the best since the
    resume)."""
    if not newest.best_model_path:
        return None
    path = job_dir / "checkpoints" / Path(newest.best_model_path).name
    return path if path != newest.path and path.is_file() else None


#: trainer keys that set a run's budget
BUDGET_KEYS = ("max_epochs", "max_steps", "max_time")


def budget_used_up(trainer: dict[str, Any], global_step: int, epochs_done: int) -> bool:
    """True where the budget in ``trainer`` (``max_epochs``, ``max_steps``; -1: no limit) leaves
    a run that stands at ``global_step`` after ``epochs_done`` epochs nothing to train."""
    max_epochs, max_steps = trainer.get("max_epochs"), trainer.get("max_steps")
    return (max_epochs is not None and 0 <= max_epochs <= epochs_done) or (
        max_steps is not None and 0 < max_steps <= global_step
    )


def job_order(job_dir: Path) -> tuple[int, str]:
    """Sort key of a sweep's job directories: by job number, then path."""
    return (int(job_dir.name) if job_dir.name.isdigit() else -1, str(job_dir))
