"""Resuming a run: which checkpoint and run directory to continue, what a resume may change, and
continuing there.

``ckpt_path=last`` reads the run records (:mod:`treernn.runs`), not file times: it takes the newest
run of this task and model (single runs and sweep jobs alike), passes over runs that have no
checkpoint (a ``mode=test`` run, a run that failed while setting up) with a word, refuses a run
that is still running and a run that finished its budget, and in the chosen run takes the newest
checkpoint that loads (any ``checkpoints/*.ckpt``, by training step). A resumed run continues in
the directory of the run it resumes (checkpoints, metrics, status), and its own Hydra directory
links there, so one experiment has one history.

Also here: the other ways a run continues (a requeued SLURM job, a job of a resumed sweep), the
overrides a resume refuses or applies to the restored optimizer and scheduler, and ``mode=test``'s
task rebuilt as its checkpoint trained it. Everything is decided before any data is loaded.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from lightning.fabric.utilities.rank_zero import rank_zero_only
from lightning.pytorch.callbacks import Callback
from omegaconf import DictConfig, OmegaConf, open_dict

from treernn import checkpoints, launch, runs, sweeps
from treernn.checkpoints import CheckpointInfo, build_task, inspect_checkpoint
from treernn.errors import CheckpointError, UserError
from treernn.identity import is_rank_zero
from treernn.process import log_also_to
from treernn.records import RunState

log = logging.getLogger("treernn")

#: config keys whose values live in a checkpoint's optimizer / scheduler state: a resume applies
#: the new values to the restored state (see :func:`apply_resumed_overrides`)
APPLIED_ON_RESUME = ("task.module.optimizer", "task.module.scheduler")


# ----------------------------------------------------------------------------- planning
def plan_from_config(cfg: DictConfig) -> ResumePlan | None:
    """Which checkpoint (and run) ``ckpt_path`` names, checked before any data is loaded."""
    if cfg.ckpt_path in (None, ""):
        return None
    if cfg.ckpt_path == "last":
        trainer = OmegaConf.to_container(cfg.trainer, resolve=True) if cfg.mode != "test" else None
        plan = plan_last(
            Path(cfg.paths.log_dir),
            cfg.task.name,
            cfg.model.name,
            trainer,
            exclude=Path(cfg.paths.output_dir),
        )
    else:
        plan = plan_path(cfg.ckpt_path)
    checkpoints.check_task_and_model(plan.checkpoint, cfg.task.name, cfg.model.name)
    return plan


@dataclass
class ResumePlan:
    checkpoint: CheckpointInfo
    run_dir: Path | None  # where the resumed run continues (None: a checkpoint outside a run)


def _why_no_checkpoint(record: dict[str, Any]) -> str:
    if record.get("mode") == "test":
        return "a mode=test run"
    if record.get("status") == RunState.FAILED and record.get("stage", "setup") == "setup":
        return "failed while setting up"
    return str(record.get("status", "no status record"))


def plan_last(
    log_dir: Path,
    task: str,
    model: str,
    trainer: dict[str, Any] | None,
    exclude: Path | None,
) -> ResumePlan:
    """``ckpt_path=last``: the newest run of this task and model that has a checkpoint, at its
    newest good checkpoint. ``trainer``: the trainer settings of this invocation (None for
    ``mode=test``, which may test a finished run)."""
    candidates = runs.runs_of(log_dir, task, model, exclude)
    for run_dir in candidates:
        if runs.is_live(run_dir):
            raise UserError(
                f"ckpt_path=last: the newest run {run_dir} is still running "
                f"({runs.describe_owner(run_dir)}); wait for it to finish, or stop it (kill -TERM "
                "<pid> saves a checkpoint), then resume"
            )
        record = runs.read_status(run_dir)
        info, skipped = runs.newest_complete_checkpoint(run_dir)
        for reason in skipped:
            log.warning("ckpt_path=last: passed over %s", reason)
        if info is None:
            log.warning(
                "ckpt_path=last: passed over %s (%s, no checkpoint)",
                run_dir,
                _why_no_checkpoint(record),
            )
            continue
        if trainer is not None and record.get("status") == RunState.FINISHED:
            check_budget_left(run_dir, info, trainer)
        return ResumePlan(checkpoint=info, run_dir=run_dir)
    raise CheckpointError(
        f"ckpt_path=last: no run of task={task} model={model} with a checkpoint under "
        f"{Path(log_dir)}; train one first, or give ckpt_path=<file>"
    )


def check_budget_left(run_dir: Path, info: CheckpointInfo, trainer: dict[str, Any]) -> None:
    """A finished run is resumed only to train it further: with a budget (max_epochs,
    max_steps, max_time) other than the one it finished, and not yet used up."""
    old = info.config.get("trainer", {})
    max_steps = trainer.get("max_steps")
    used_up = runs.budget_used_up(trainer, info.global_step, info.epochs_done)
    unchanged = all(old.get(key) == trainer.get(key) for key in runs.BUDGET_KEYS)
    if used_up or unchanged:
        budget = ", ".join(
            f"trainer.{key}={trainer.get(key)}" for key in runs.BUDGET_KEYS if trainer.get(key)
        )
        more = (
            f"trainer.max_steps={info.global_step * 2}"
            if max_steps is not None and max_steps > 0
            else f"trainer.max_epochs={info.epochs_done * 2 or 1}"
        )
        raise UserError(
            f"ckpt_path=last: the newest run {run_dir} finished ({info.epochs_done} epochs, "
            f"step {info.global_step}; {budget or 'no budget'}); to train it further ask for a "
            f"larger budget (e.g. {more}), or start a new run"
        )


def plan_path(path: str | Path) -> ResumePlan:
    info = inspect_checkpoint(path)
    return ResumePlan(checkpoint=info, run_dir=info.run_dir)


# ---------------------------------------------------------------- what a resume may change
def flatten(config: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(config, dict):
        items: dict[str, Any] = {}
        for key, value in config.items():
            items.update(flatten(value, f"{prefix}{key}."))
        return items
    return {prefix[:-1]: config}


def differing_keys(old: dict[str, Any], new: dict[str, Any], under: tuple[str, ...]) -> list[str]:
    """Keys below the prefixes ``under`` whose values differ between two (nested) configs."""
    old_flat, new_flat = flatten(old), flatten(new)
    keys = sorted(set(old_flat) | set(new_flat))
    return [
        key
        for key in keys
        if key.startswith(under) and old_flat.get(key, "<unset>") != new_flat.get(key, "<unset>")
    ]


def describe(keys: list[str], old: dict[str, Any], new: dict[str, Any]) -> str:
    old_flat, new_flat = flatten(old), flatten(new)
    return ", ".join(
        f"{key} (checkpoint {old_flat.get(key, '<unset>')}, now {new_flat.get(key, '<unset>')})"
        for key in keys
    )


def check_resume_config(
    info: CheckpointInfo, config: dict[str, Any], module_shapes: dict[str, tuple[int, ...]]
) -> list[str]:
    """Refuse overrides that the restored state would silently undo; return the keys whose new
    values must be applied to the restored optimizer / scheduler."""
    old = info.config
    if old.get("seed") != config.get("seed"):
        raise UserError(
            f"resuming {info.path}: seed={config.get('seed')} differs from the checkpoint's "
            f"seed={old.get('seed')}, but a resumed run continues the checkpoint's random state; "
            "drop the seed override, or start a new run"
        )
    if module_shapes != info.state_shapes:
        changed = differing_keys(old, config, ("model.", "task.module."))
        changed = [key for key in changed if not key.startswith(APPLIED_ON_RESUME)]
        raise UserError(
            f"resuming {info.path}: the model built from this config does not match the "
            f"checkpoint's weights; these settings differ: {describe(changed, old, config)}. "
            "Drop these overrides, or start a new run"
        )
    return differing_keys(old, config, APPLIED_ON_RESUME)


def apply_resumed_overrides(trainer: Any, config: dict[str, Any], keys: list[str]) -> list[str]:
    """Set the new optimizer / scheduler values on the state Lightning restored; returns what was
    applied, as ``key=value`` strings."""
    flat = flatten(config)
    applied = []
    for key in keys:
        group, name = key.split(".")[2], key.split(".", 3)[3]
        if name in ("_target_", "_partial_") or "." in name:
            raise UserError(
                f"resuming: {key} changed, but a resumed run keeps the checkpoint's "
                f"{group}; drop the override, or start a new run"
            )
        value = flat.get(key)
        if group == "optimizer":
            for optimizer in trainer.optimizers:
                for param_group in optimizer.param_groups:
                    if name not in param_group:
                        raise UserError(
                            f"resuming: {key}={value} cannot be applied to the restored "
                            f"{type(optimizer).__name__}; drop the override"
                        )
                    param_group[name] = tuple(value) if isinstance(value, list) else value
                    if name == "lr":
                        # the LM rescales lr from base_lr each step; schedulers keep initial_lr
                        for extra in ("base_lr", "initial_lr"):
                            if extra in param_group:
                                param_group[extra] = value
        else:
            for config_ in trainer.lr_scheduler_configs:
                scheduler = config_.scheduler
                if not hasattr(scheduler, name):
                    raise UserError(
                        f"resuming: {key}={value} cannot be applied to the restored "
                        f"{type(scheduler).__name__}; drop the override"
                    )
                setattr(scheduler, name, value)
        applied.append(f"{key}={value}")
    return applied


# ----------------------------------------------------------------------------- continuing
class ResumeOverrides(Callback):
    """Applies the new optimizer / scheduler settings to the state restored from a checkpoint."""

    def __init__(self, config: dict[str, Any], keys: list[str]) -> None:
        self.config = config
        self.keys = keys

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        applied = apply_resumed_overrides(trainer, self.config, self.keys)
        if applied and trainer.is_global_zero:
            log.info("resumed with new settings applied: %s", ", ".join(applied))


def continue_in(cfg: DictConfig, plan: ResumePlan) -> None:
    """Point this run's outputs at the run it resumes; this invocation's directory links there."""
    own_dir = Path(cfg.paths.output_dir)
    target = plan.run_dir
    if target is None or target.resolve() == own_dir.resolve():
        return
    if rank_zero_only.rank == 0:
        runs.write_status(own_dir, status=RunState.RESUMED, resumed_into=str(target))
        link = own_dir / "run"
        if not link.exists():
            link.symlink_to(target.resolve(), target_is_directory=True)
        record = runs.read_status(target)
        runs.write_status(
            target,
            resumes=[
                *record.get("resumes", []),
                {
                    "from": str(plan.checkpoint.path),
                    "at": runs.now(),
                    "invocation_dir": str(own_dir),
                },
            ],
        )
        log_also_to(target / "train.log")
    with open_dict(cfg):
        cfg.paths.output_dir = str(target)


def resume_requeued_job(cfg: DictConfig) -> None:
    """A SLURM job that started again after ``scontrol requeue`` runs in the directory of its
    first attempt (``slurm-<job id>-<step>``, or its sweep job's): it resumes from there."""
    run_dir = Path(cfg.paths.output_dir)
    if (
        cfg.ckpt_path
        or cfg.mode == "test"
        or runs.read_status(run_dir).get("status") != RunState.REQUEUED
    ):
        return
    info, _ = runs.newest_complete_checkpoint(run_dir)
    if info is not None:
        with open_dict(cfg):
            cfg.ckpt_path = str(info.path)


def continue_sweep_job(cfg: DictConfig) -> dict[str, float] | None:
    """A sweep job that ran before (a resumed sweep): the metrics of a finished job, which is
    skipped; otherwise it resumes from its newest checkpoint, or runs again from the start."""
    job_dir = Path(cfg.paths.output_dir)
    if sweeps.stop_requested() is not None:
        # a joblib sweep asked to stop (sweeps._StopSweep): this job is not started
        raise sweeps.NotStarted(f"job {job_dir.name}: the sweep is stopping; not started")
    follower = not is_rank_zero()  # a DDP job's other ranks follow rank 0's record
    plan = sweeps.plan_job(job_dir, launch.job_overrides(), follower=follower)
    if plan.action == "skip":
        log.info("job %s: finished before, skipped", job_dir.name)
        return plan.metrics
    if plan.action == "resume":
        log.info("job %s: %s; resuming from %s", job_dir.name, plan.why, plan.checkpoint)
        with open_dict(cfg):
            cfg.ckpt_path = str(plan.checkpoint)
    elif plan.action == "rerun":
        log.info("job %s: %s; running it again from the start", job_dir.name, plan.why)
        if not follower:  # rank 0 clears what the failed attempt wrote
            sweeps.clear_attempt(job_dir, plan.why)
    return None


# ----------------------------------------------------------------------------- mode=test
def model_as_trained(cfg: DictConfig, info: CheckpointInfo) -> None:
    """``mode=test``: the model and task settings the checkpoint was trained with, except the
    keys given on the command line (a test-time setting such as ``model.test_memory_slots``)."""
    stored = info.config
    checkpoints.check_stored_targets(
        {"model": stored.get("model", {}), "task": {"module": stored["task"].get("module", {})}},
        f"checkpoint {info.path}",
    )
    explicit = launch.override_keys()
    ignored = []
    with open_dict(cfg):
        for section in ("model", "task.module"):
            node = OmegaConf.select(OmegaConf.create(stored), section)
            now = flatten(
                OmegaConf.to_container(OmegaConf.select(cfg, section), resolve=True), f"{section}."
            )
            for key, value in now.items():
                if key in explicit:
                    OmegaConf.update(node, key[len(section) + 1 :], value, force_add=True)
            ignored += [
                key
                for key, value in flatten(OmegaConf.to_container(node), f"{section}.").items()
                if key not in explicit and now.get(key) != value
            ]
            OmegaConf.update(cfg, section, node, merge=False)
    if ignored:
        log.info(
            "mode=test: the model as the checkpoint trained it (from the checkpoint: %s)",
            ", ".join(sorted(ignored)),
        )


def task_as_trained(
    cfg: DictConfig, info: CheckpointInfo
) -> tuple[pl.LightningModule, dict[str, Any]]:
    """The task of a checkpoint and its constructor's data arguments, built before any data is
    loaded (``mode=test``)."""
    stored = checkpoints.read_checkpoint(info.path, mmap=True)["treernn"]
    task_kwargs = checkpoints.deserialise_task_kwargs(stored["task_kwargs"])
    module = build_task(cfg, task_kwargs)
    shapes = {key: tuple(value.shape) for key, value in module.state_dict().items()}
    if shapes != info.state_shapes:
        explicit = sorted(k for k in launch.override_keys() if k.startswith(("model.", "task.")))
        raise UserError(
            f"mode=test: the model built with {', '.join(explicit) or 'these settings'} does not "
            f"match the weights of {info.path}; drop those overrides to test the model as trained"
        )
    return module, task_kwargs
