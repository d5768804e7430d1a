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

Every refusal of a resume is decided here, from the checkpoint's own record, before anything is
written: a seed other than the checkpoint's, a model whose weights have other shapes (built from
this config and the checkpoint's stored task arguments on the meta device: no data is read and
nothing is allocated), a budget below what the run has already trained, a new optimizer or
scheduler value that the restored state cannot take, a run still running, a finished run with no
budget left. ``mode=test`` refuses a model that does not fit its weights the same way. A refusal
leaves the run it names as it was (`Plan.record_refusal`).

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
    #: whether a refusal is recorded in this invocation's directory: only where this invocation
    #: made it (a user error's ending then removes it); the directory of an earlier attempt (a
    #: sweep job's, a requeued run's) is left as it was
    record_refusal: bool = True
    #: the task's data arguments stored in the checkpoint resumed or tested (its vocabulary,
    #: class count, ...), as the planner read them to build the model as trained
    trained_kwargs: dict[str, Any] | None = None
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
    own_dir = runs.output_dir_of(cfg)
    made_here = own_dir is None or not (own_dir / records.STATUS_FILE).exists()
    try:
        return _plan(cfg, overrides, multirun, follower, stop_signal)
    except UserError as error:
        return Plan("refuse", refusal=error, record_refusal=made_here, follower=follower)


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
        _check_kernel_record(info.run_dir)
        config = _frozen(config_as_trained(cfg, info, _keys(overrides)))
        trained_kwargs = stored_task_kwargs(info.path)
        differing = differing_shapes(config, trained_kwargs, info)
        if differing:
            explicit = sorted(k for k in _keys(overrides) if k.startswith(("model.", "task.")))
            raise UserError(
                f"mode=test: the model built with {', '.join(explicit) or 'these settings'} does "
                f"not match the weights of {info.path} ({differing}); drop those overrides to "
                "test the model as trained"
            )
        return Plan(
            "test",
            config=config,
            run_dir=own_dir,
            invocation_dir=own_dir,
            checkpoint=info.path,
            info=info,
            trained_kwargs=trained_kwargs,
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
    applied = tuple(differing_keys(info.config, resolved, APPLIED_ON_RESUME))
    trained_kwargs = check_resumable(config, resolved, info, applied)
    _check_kernel_record(run_dir)
    if named_run is not None and cfg.ckpt_path:
        _say_resumed(str(cfg.ckpt_path), named_run, info, overrides)
    return Plan(
        "resume",
        config=_frozen(config),
        run_dir=run_dir,
        invocation_dir=own_dir,
        checkpoint=info.path,
        info=info,
        apply_on_resume=applied,
        why=why,
        trained_kwargs=trained_kwargs,
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
    is named: a run still running is not resumed, a finished run only with a budget left to train
    (``mode=test`` may test either)."""
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
    if named != "last" and locks.is_live(run_dir):  # plan_last refused a live run
        raise UserError(
            f"ckpt_path={named}: run {run_dir} is still running ({locks.describe_owner(run_dir)}); "
            "wait for it to finish, or stop it (kill -TERM <pid> saves a checkpoint), then resume"
        )
    if read_status(run_dir).get("status") == RunState.FINISHED:
        check_budget_left(named, run_dir, info, trainer)
    return run_dir, info


def _say_resumed(named: str, run_dir: Path, info: CheckpointInfo, overrides: list[str]) -> None:
    """Name the run ``ckpt_path`` resumes (once nothing refuses it), with its overrides that
    differ from this command's."""
    record = read_status(run_dir)
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


# ---------------------------------------------------------------------- what a resume refuses
def _check_kernel_record(run_dir: Path | None) -> None:
    """The kernels' choices a resumed or tested run recorded can be read (a FIFO, a link or a
    damaged file there is one line now, not a hang or a refusal after the attempt is recorded)."""
    from treernn.lifecycle import kernel_context

    kernel_context.check(run_dir)


def check_resumable(
    config: DictConfig, resolved: dict[str, Any], info: CheckpointInfo, applied: tuple[str, ...]
) -> dict[str, Any]:
    """Refuse a resume that would not continue the checkpoint's run, from what the checkpoint
    records (``resolved``: ``config`` resolved; ``applied``: the optimizer and scheduler keys
    whose new values the resume applies): a seed other than its own (the restored random state
    would be the checkpoint's), a budget below what the run has already trained, a new value
    that cannot be applied to the restored optimizer or scheduler, a model whose weights have
    other shapes. Returns the checkpoint's stored task arguments."""
    from treernn import checkpoints

    old = info.config
    where = f"resuming {info.path}"  # names the run too: <run>/checkpoints/<file>
    if old.get("seed") != resolved.get("seed"):
        raise UserError(
            f"{where}: seed={resolved.get('seed')} differs from the checkpoint's "
            f"seed={old.get('seed')}, but a resumed run continues the checkpoint's random state; "
            f"drop the seed override (or give seed={old.get('seed')}), or start a new run"
        )
    check_budget_not_passed(where, info, resolved.get("trainer", {}))
    checkpoint = checkpoints.read_checkpoint(info.path, mmap=True)
    check_applicable(where, applied, resolved, checkpoint)
    trained_kwargs = stored_task_kwargs(info.path, checkpoint)
    differing = differing_shapes(config, trained_kwargs, info)
    if differing:
        changed = differing_keys(old, resolved, ("model.", "task.module."))
        changed = [key for key in changed if not key.startswith(APPLIED_ON_RESUME)]
        if changed:
            raise UserError(
                f"{where}: the model built from this config does not match the checkpoint's "
                f"weights; these settings differ: {describe(changed, old, resolved)}. Drop "
                "these overrides, or start a new run"
            )
        raise UserError(
            f"{where}: the model built from this config does not match the checkpoint's "
            f"weights ({differing}); give the model settings the run was trained with, or start "
            "a new run"
        )
    return trained_kwargs


def check_applicable(
    where: str, keys: tuple[str, ...], resolved: dict[str, Any], checkpoint: dict[str, Any]
) -> None:
    """A resume sets the new optimizer and scheduler values on the state it restores
    (`treernn.lifecycle.resume.apply_resumed_overrides`): refuse those it cannot set, from the
    state the checkpoint holds (its optimizers' parameter groups, its schedulers' state)."""
    flat = flatten(resolved)
    for key in keys:
        parts = key.split(".", 3)  # task.module.<optimizer | scheduler>.<name>
        group = parts[2]
        if len(parts) < 4 or parts[3] in ("_target_", "_partial_") or "." in parts[3]:
            raise UserError(
                f"{where}: {key} changed, but a resumed run keeps the checkpoint's {group}; drop "
                "the override, or start a new run"
            )
        name = parts[3]
        if group == "optimizer":
            held = checkpoint.get("optimizer_states")
            states = [
                param_group
                for state in (held if isinstance(held, list) else [])
                if isinstance(state, dict) and isinstance(state.get("param_groups"), list)
                for param_group in state["param_groups"]
            ]
        else:
            held = checkpoint.get("lr_schedulers")
            states = held if isinstance(held, list) else []
        if any(not isinstance(state, dict) or name not in state for state in states):
            target = flat.get(f"{parts[0]}.{parts[1]}.{parts[2]}._target_", group)
            raise UserError(
                f"{where}: {key}={flat.get(key)} cannot be applied to the restored "
                f"{str(target).rpartition('.')[2]} ({name} is not one of its settings); drop the "
                "override, or start a new run"
            )


def check_budget_not_passed(where: str, info: CheckpointInfo, trainer: dict[str, Any]) -> None:
    """Refuse a budget below what a run has already trained (Lightning would stop with a
    traceback, or train nothing). A budget it has just reached is fine: a run interrupted after
    training, before its test, resumes to test."""
    max_epochs, max_steps = trainer.get("max_epochs"), trainer.get("max_steps")
    if isinstance(max_epochs, int) and 0 <= max_epochs < info.epochs_done:
        asked, done, unit = f"trainer.max_epochs={max_epochs}", info.epochs_done, "epochs"
        fix = f"trainer.max_epochs={info.epochs_done}"
    elif isinstance(max_steps, int) and 0 < max_steps < info.global_step:
        asked, done, unit = f"trainer.max_steps={max_steps}", info.global_step, "steps"
        fix = f"trainer.max_steps={info.global_step}"
    else:
        return
    raise UserError(
        f"{where}: {asked} is below the {done} {unit} it has already trained ({info.epochs_done} "
        f"epochs, step {info.global_step}); give {fix} to end it where it stands, a larger "
        "budget to train it further, or start a new run"
    )


def stored_task_kwargs(path: Path, checkpoint: dict[str, Any] | None = None) -> dict[str, Any]:
    """The task's data arguments a checkpoint stored (its vocabulary, class count, ...);
    ``checkpoint``: its contents, where they were read already."""
    from treernn import checkpoints

    if checkpoint is None:
        checkpoint = checkpoints.read_checkpoint(path, mmap=True)
    stored = checkpoint["treernn"].get("task_kwargs")
    if not isinstance(stored, dict):
        raise CheckpointError(
            f"checkpoint {path} holds no task arguments (treernn.task_kwargs), which every "
            "checkpoint of python train.py has; use another checkpoint of the run"
        )
    return checkpoints.deserialise_task_kwargs(stored)


def differing_shapes(config: DictConfig, task_kwargs: dict[str, Any], info: CheckpointInfo) -> str:
    """Where the task that ``config`` builds with ``task_kwargs`` does not have the shapes of the
    checkpoint's weights, the first difference; "" where it has. The task is built on the meta
    device: shapes only, nothing allocated, however large the config asks it to be."""
    import torch
    from hydra.errors import InstantiationException

    from treernn.checkpoints import build_task

    try:
        with torch.device("meta"):
            module = build_task(config, task_kwargs)
    except InstantiationException as error:
        if isinstance(error.__cause__, UserError):  # a constructor's own one-line refusal
            raise error.__cause__ from None
        raise
    shapes = {key: tuple(value.shape) for key, value in module.state_dict().items()}
    trained = info.state_shapes
    for key in sorted(set(trained) | set(shapes)):
        if key not in shapes:
            return f"{key} is in the checkpoint, not in this model"
        if key not in trained:
            return f"{key} is in this model, not in the checkpoint"
        if tuple(trained[key]) != shapes[key]:
            return f"{key}: {tuple(trained[key])} in the checkpoint, {shapes[key]} now"
    return ""


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
