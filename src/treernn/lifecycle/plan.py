"""What an invocation of ``train.py`` does, decided once before anything is built: one immutable
`Plan` from the composed config, the run records, the locks and the checkpoints.

A new run, ``ckpt_path=last``, ``ckpt_path=<file>``, a requeued SLURM job, a job of a resumed
sweep and ``mode=test`` of a checkpoint are ways of making a plan; `treernn.lifecycle.execute`
follows any of them the same way. The planner writes nothing: the config as it will run is a new,
read-only config made here (the checkpoint to resume, the run directory it continues in, the model
as a checkpoint trained it), and nothing changes it afterwards.

``ckpt_path=last`` reads the run records (`treernn.lifecycle.records`, found by
`treernn.lifecycle.runs`), not file times: it takes the newest run of this task and model
(single runs and sweep jobs alike), passes over runs that have no checkpoint (a ``mode=test`` run, a
run that failed while setting up) with a word, refuses a run that is still running and a run that
finished its budget, and in the chosen run takes the newest checkpoint that loads (any
``checkpoints/*.ckpt``, by training step).

A sweep job reads its own record first (`plan_sweep_job`): skipped if it finished, resumed
from its newest checkpoint if it was interrupted (a signal, a requeue, a killed process), run
again from the start if it failed.

Torch is imported only where a checkpoint file is opened.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from omegaconf import DictConfig, OmegaConf, open_dict

from treernn.config_checks import check_config
from treernn.errors import CheckpointError, UserError
from treernn.lifecycle import locks, records, runs
from treernn.lifecycle.records import DamagedRecord, RunState, read_metrics, read_status
from treernn.lifecycle.sweeps.layout import (
    RESUMABLE,
    DamagedJob,
    NotStarted,
    SweepChanged,
    refuse_links,
    without_name,
)

if TYPE_CHECKING:
    from treernn.checkpoints import CheckpointInfo

log = logging.getLogger("treernn")

#: config keys whose values live in a checkpoint's optimizer / scheduler state: a resume applies
#: the new values to the restored state (`treernn.lifecycle.resume.apply_resumed_overrides`)
APPLIED_ON_RESUME = ("task.module.optimizer", "task.module.scheduler")

#: run: a new run (a sweep job's first attempt too); resume: continue from ``checkpoint``;
#: rerun: a failed sweep job from the start; skip: a sweep job that finished; test: ``mode=test``
#: of ``checkpoint``; refuse: nothing runs (``refusal`` says why)
Action = Literal["run", "resume", "rerun", "skip", "test", "refuse"]


@dataclass(frozen=True)
class Plan:
    """What one invocation does."""

    action: Action
    #: the config as it runs (read-only); None where nothing runs (skip, refuse)
    config: DictConfig | None = None
    #: the directory this invocation writes into (its own, or the run it continues)
    run_dir: Path | None = None
    #: this invocation's own directory (Hydra's), which links to ``run_dir`` where they differ
    invocation_dir: Path | None = None
    #: the checkpoint resumed or tested, and what it says about itself (inspected once)
    checkpoint: Path | None = None
    info: CheckpointInfo | None = None
    #: optimizer / scheduler keys whose new values a resume applies to the restored state
    apply_on_resume: tuple[str, ...] = ()
    #: the metrics of a finished sweep job (skip)
    metrics: dict[str, float] | None = None
    #: why a sweep job resumes or runs again
    why: str = ""
    refusal: UserError | None = None
    #: a process of a multi-process job other than rank 0: it follows rank 0's record
    follower: bool = False

    @property
    def continues_elsewhere(self) -> bool:
        """A resume that continues another directory than this invocation's own."""
        return (
            self.run_dir is not None
            and self.invocation_dir is not None
            and self.run_dir.resolve() != self.invocation_dir.resolve()
        )


# ----------------------------------------------------------------------------- the planner
def plan_run(
    cfg: DictConfig,
    *,
    overrides: list[str],
    multirun: bool = False,
    follower: bool = False,
    stop_signal: int | None = None,
) -> Plan:
    """The plan of this invocation. ``overrides``: its command-line overrides (Hydra's task
    overrides); ``multirun``: a job of a sweep; ``follower``: not rank 0 of a multi-process job;
    ``stop_signal``: the signal that asked this job's sweep to stop, if one did. A reason to run
    nothing (a user error) is a ``refuse`` plan, raised by the executor."""
    try:
        return _plan(cfg, overrides, multirun, follower, stop_signal)
    except UserError as error:
        return Plan("refuse", refusal=error, follower=follower)


def _plan(
    cfg: DictConfig,
    overrides: list[str],
    multirun: bool,
    follower: bool,
    stop_signal: int | None,
) -> Plan:
    own_dir = Path(cfg.paths.output_dir)
    info: CheckpointInfo | None = None
    action: Action = "run"
    why = ""
    if multirun:
        if stop_signal is not None:
            raise NotStarted(f"job {own_dir.name}: the sweep is stopping; not started")
        job = plan_sweep_job(own_dir, overrides, follower=follower)
        if job.action == "skip":
            log.info("job %s: finished before, skipped", own_dir.name)
            return replace(job, invocation_dir=own_dir, run_dir=own_dir)
        action, info, why = job.action, job.info, job.why
        if action == "resume":
            log.info("job %s: %s; resuming from %s", own_dir.name, why, job.checkpoint)
        elif action == "rerun":
            log.info("job %s: %s; running it again from the start", own_dir.name, why)
    check_config(cfg)
    named_run: Path | None = None  # the run ckpt_path names (last, or the run of its file)
    if info is None and not cfg.ckpt_path and cfg.mode != "test":
        info = _requeued(own_dir)
    if info is None and cfg.ckpt_path:
        named_run, info = _named_checkpoint(cfg, own_dir, overrides)
    if cfg.mode == "test":
        if info is None:
            raise UserError("mode=test needs ckpt_path=<checkpoint> (or ckpt_path=last)")
        from treernn.checkpoints import check_task_and_model

        check_task_and_model(info, cfg.task.name, cfg.model.name)
        config = _frozen(config_as_trained(cfg, info, _keys(overrides)))
        return Plan(
            "test",
            config=config,
            run_dir=own_dir,
            invocation_dir=own_dir,
            checkpoint=info.path,
            info=info,
            follower=follower,
        )
    if info is None:
        return Plan(action, _frozen(_copy(cfg)), own_dir, own_dir, why=why, follower=follower)
    from treernn.checkpoints import check_task_and_model

    check_task_and_model(info, cfg.task.name, cfg.model.name)
    run_dir = named_run or info.run_dir or own_dir
    config = _copy(cfg)
    with open_dict(config):
        config.ckpt_path = str(info.path)
        config.paths.output_dir = str(run_dir)
    resolved = OmegaConf.to_container(config, resolve=True)
    return Plan(
        "resume",
        config=_frozen(config),
        run_dir=run_dir,
        invocation_dir=own_dir,
        checkpoint=info.path,
        info=info,
        apply_on_resume=tuple(differing_keys(info.config, resolved, APPLIED_ON_RESUME)),
        why=why,
        follower=follower,
    )


def _copy(cfg: DictConfig) -> DictConfig:
    config = copy.deepcopy(cfg)
    OmegaConf.set_readonly(config, False)
    return config


def _frozen(config: DictConfig) -> DictConfig:
    OmegaConf.set_readonly(config, True)
    return config


def _keys(overrides: list[str]) -> set[str]:
    """The keys set on the command line (``key=value``, ``+key=value``)."""
    return {item.split("=", 1)[0].lstrip("+~") for item in overrides}


def _requeued(own_dir: Path) -> CheckpointInfo | None:
    """A SLURM job that started again after ``scontrol requeue`` runs in the directory of its
    first attempt (``slurm-<job id>-<step>``, or its sweep job's): it resumes from there."""
    if read_status(own_dir).get("status") != RunState.REQUEUED:
        return None
    info, _ = runs.newest_complete_checkpoint(own_dir)
    return info


def _named_checkpoint(
    cfg: DictConfig, own_dir: Path, overrides: list[str]
) -> tuple[Path | None, CheckpointInfo]:
    """The run and checkpoint ``ckpt_path`` names (``last`` or a file), under one rule however it
    is named: a finished run is resumed only with a budget left to train (``mode=test`` may test
    it), and the run chosen is named, with its overrides that differ from this command's."""
    named = str(cfg.ckpt_path)
    trainer = OmegaConf.to_container(cfg.trainer, resolve=True) if cfg.mode != "test" else None
    if named == "last":
        run_dir, info = plan_last(Path(cfg.paths.log_dir), cfg.task.name, cfg.model.name, own_dir)
    else:
        from treernn.checkpoints import inspect_checkpoint

        info = inspect_checkpoint(named)
        run_dir = info.run_dir
    if run_dir is None or trainer is None:
        return run_dir, info
    record = read_status(run_dir)
    if record.get("status") == RunState.FINISHED:
        check_budget_left(named, run_dir, info, trainer)
    state = f"{record.get('status', 'no status record')}, step {info.global_step}"
    before = record.get("overrides")
    changed = differing_overrides(before, overrides) if isinstance(before, list) else None
    if changed:
        log.warning(
            "ckpt_path=%s: resuming run %s (%s), whose overrides differ from this command's: %s; "
            "it goes on with this command's settings",
            named,
            run_dir,
            state,
            ", ".join(changed),
        )
    else:
        same = " with this command's overrides" if changed is not None else ""
        log.info("ckpt_path=%s: resuming run %s (%s)%s", named, run_dir, state, same)
    return run_dir, info


#: overrides that name a run rather than set it
_NAMING_KEYS = ("ckpt_path", "sweep_id")


def differing_overrides(before: list[str], now: list[str]) -> list[str]:
    """``key=value (this command: value)`` for each override of a run (``before``) that this
    command (``now``) gives otherwise or not at all, and each it adds."""

    def as_dict(lines: list[str]) -> dict[str, str]:
        pairs = (str(line).split("=", 1) for line in lines)
        found = {key.lstrip("+~"): value for key, value in (p for p in pairs if len(p) == 2)}
        return {key: value for key, value in found.items() if key not in _NAMING_KEYS}

    old, new = as_dict(before), as_dict(now)
    changed = []
    for key in sorted(set(old) | set(new)):
        if key not in new:
            changed.append(f"{key}={old[key]} (this command: not given)")
        elif key not in old:
            changed.append(f"{key} not given (this command: {new[key]})")
        elif old[key] != new[key]:
            changed.append(f"{key}={old[key]} (this command: {new[key]})")
    return changed


# ----------------------------------------------------------------------------- ckpt_path=last
def _why_no_checkpoint(record: dict[str, Any]) -> str:
    if record.get("mode") == "test":
        return "a mode=test run"
    if record.get("status") == RunState.FAILED and record.get("stage", "setup") == "setup":
        return "failed while setting up"
    return str(record.get("status", "no status record"))


def plan_last(
    log_dir: Path, task: str, model: str, exclude: Path | None
) -> tuple[Path, CheckpointInfo]:
    """``ckpt_path=last``: the newest run of this task and model that has a checkpoint, and its
    newest good checkpoint."""
    candidates = runs.runs_of(log_dir, task, model, exclude)
    for run_dir in candidates:
        if locks.is_live(run_dir):
            raise UserError(
                f"ckpt_path=last: the newest run {run_dir} is still running "
                f"({locks.describe_owner(run_dir)}); wait for it to finish, or stop it (kill -TERM "
                "<pid> saves a checkpoint), then resume"
            )
        record = read_status(run_dir)
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
        return run_dir, info
    raise CheckpointError(
        f"ckpt_path=last: no run of task={task} model={model} with a checkpoint under "
        f"{Path(log_dir)}; train one first, or give ckpt_path=<file>"
    )


def check_budget_left(
    named: str, run_dir: Path, info: CheckpointInfo, trainer: dict[str, Any]
) -> None:
    """A finished run is resumed only to train it further: with a budget (max_epochs,
    max_steps, max_time) other than the one it finished, and not yet used up. ``named``: what
    ``ckpt_path`` said (``last`` or a file)."""
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
        which = "the newest run" if named == "last" else "run"
        raise UserError(
            f"ckpt_path={named}: {which} {run_dir} finished ({info.epochs_done} epochs, "
            f"step {info.global_step}; {budget or 'no budget'}); to train it further ask for a "
            f"larger budget (e.g. {more}), or start a new run"
        )


# ----------------------------------------------------------------------------- a sweep's job
def plan_sweep_job(job_dir: Path, overrides: list[str], follower: bool = False) -> Plan:
    """What a sweep job does, from its own record: run (new), skip (finished), resume (from its
    newest checkpoint) or rerun (it failed, or stopped before any checkpoint).

    ``follower``: a process of a multi-process job other than rank 0 (``srun`` starts every task
    of a DDP job at once). Rank 0 owns the record; a follower may find it already running this
    attempt, and takes the same decision from the same checkpoints (none is written before every
    rank has joined): it does not refuse a live job, and a job with no checkpoint runs afresh.

    A job whose record is damaged (`treernn.lifecycle.sweeps.layout.DamagedJob`) is not
    touched: a truncated ``status.json`` of a finished job must not read as a job that never
    started."""
    try:
        return _plan_sweep_job(Path(job_dir), overrides, follower)
    except DamagedRecord as error:
        raise DamagedJob(f"sweep job {job_dir} left as it is: {error}") from None


def _plan_sweep_job(job_dir: Path, overrides: list[str], follower: bool) -> Plan:
    try:
        refuse_links(job_dir, f"sweep job {job_dir.name}")
    except UserError as error:
        raise DamagedJob(f"{error}; the job is left as it is") from None
    record = read_status(job_dir)
    if not record:
        return Plan("run", follower=follower)
    before = record.get("overrides")
    if before is not None and sorted(without_name(before)) != sorted(without_name(overrides)):
        raise SweepChanged(
            f"sweep job {job_dir} ran with [{' '.join(before)}], this command gives it "
            f"[{' '.join(overrides)}]; resume a sweep with the command that started it "
            f"(python -m treernn sweep resume {job_dir.parent}), or start a new one (sweep_id=)"
        )
    if not follower and locks.is_live(job_dir):
        raise SweepChanged(
            f"sweep job {job_dir} is still running ({locks.describe_owner(job_dir)}); not started "
            "a second time"
        )
    status = record.get("status")
    if records.is_finished(job_dir):
        return Plan("skip", metrics=read_metrics(job_dir / "metrics.json"), follower=follower)
    if status in RESUMABLE:
        info, _ = runs.newest_complete_checkpoint(job_dir)
        if info is not None:
            return Plan(
                "resume", checkpoint=info.path, info=info, why=str(status), follower=follower
            )
        if follower:
            return Plan("run", follower=follower)
        return Plan("rerun", why=f"{status} before its first checkpoint", follower=follower)
    why = f"{status}: {record.get('error', '')}".strip(": ")
    return Plan("rerun", why=why, follower=follower)


# ----------------------------------------------------------------------------- mode=test
def config_as_trained(cfg: DictConfig, info: CheckpointInfo, explicit: set[str]) -> DictConfig:
    """``mode=test``: a new config with the model and task settings the checkpoint was trained
    with, except the keys given on the command line (``explicit``: a test-time setting such as
    ``model.test_memory_slots``)."""
    from treernn.checkpoints import check_stored_targets

    stored = info.config
    check_stored_targets(
        {"model": stored.get("model", {}), "task": {"module": stored["task"].get("module", {})}},
        f"checkpoint {info.path}",
    )
    config = _copy(cfg)
    ignored = []
    with open_dict(config):
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
            OmegaConf.update(config, section, node, merge=False)
    if ignored:
        log.info(
            "mode=test: the model as the checkpoint trained it (from the checkpoint: %s)",
            ", ".join(sorted(ignored)),
        )
    return config


# ----------------------------------------------------------------------------- comparing configs
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
