"""The executor: follows a `treernn.lifecycle.plan.Plan`, whatever made it (a new run,
``ckpt_path=last`` or ``=<file>``, a requeued SLURM job, a sweep job, ``mode=test``): lock the run
directory, record the attempt, build the data, task, loggers, callbacks and trainer, fit and/or
test, and record the result. It reads the config the plan made and changes nothing in it.

The executor refuses nothing the plan could decide: every refusal of a resume (its seed, its
model's shapes, its budget, a finished run) is the planner's. A resume records its attempt in the
run it continues only once the data has been read and gives the model the checkpoint's shapes
(`treernn.lifecycle.resume.check_data_as_trained`), so that data which does not fit leaves that
run as it was.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hydra
import lightning.pytorch as pl
from hydra.core.hydra_config import HydraConfig
from lightning.fabric.utilities.rank_zero import rank_zero_only
from omegaconf import DictConfig, OmegaConf

from treernn import checkpoints
from treernn.checkpoints import RunInfo, build_task
from treernn.datamodules import prepared_datamodule
from treernn.errors import ConfigValueError, RunInterrupted, UserError
from treernn.files import atomic_write
from treernn.lifecycle import kernel_context, launch, locks, records, resume, signals
from treernn.lifecycle import loggers as loggers_
from treernn.lifecycle.identity import process_identity
from treernn.lifecycle.outcomes import FINISHED
from treernn.lifecycle.plan import Plan
from treernn.lifecycle.process import (
    flush_denormals,
    log_also_to,
    log_to_files_only,
    route_lightning_logs,
    set_threads,
    warn_if_cores_busy,
    watch_cores,
)
from treernn.lifecycle.records import RunState, is_fraction
from treernn.lifecycle.sweeps import layout

log = logging.getLogger("treernn")


@dataclass
class Attempt:
    """Where this attempt's end is recorded (`treernn.lifecycle.outcomes`): its own
    directory, until it continues the run it resumes."""

    record_dir: Path | None


def execute(plan: Plan, attempt: Attempt) -> dict[str, float] | None:
    """Do what ``plan`` says; returns the final metrics (a skipped sweep job's earlier ones)."""
    if plan.refusal is not None:  # decided by the planner, before anything was written
        if not plan.record_refusal:
            attempt.record_dir = None  # an earlier attempt's directory: left as it was
        raise plan.refusal
    if plan.action == "skip":
        return plan.metrics
    if plan.action == "rerun" and not plan.follower:  # rank 0 clears what the failed attempt wrote
        layout.clear_attempt(plan.run_dir, plan.why)
    cfg = plan.config
    previous = signals.install_immediate_handlers(signals.requeue_signum(cfg.get("requeue_signal")))
    try:
        return _set_up_and_run(plan, attempt)
    finally:
        signals.restore_handlers(previous)


def _set_up_and_run(plan: Plan, attempt: Attempt) -> dict[str, float]:
    cfg = plan.config
    flush_denormals(bool(cfg.get("flush_denormal", True)))
    set_threads(cfg.get("threads"))
    route_lightning_logs()
    loggers_.check_wandb_reachable(cfg)
    # mode=test's task as its checkpoint trained it, built before any data is read (the plan
    # checked that it fits the weights)
    tested = build_task(cfg, plan.trained_kwargs) if plan.action == "test" else None
    # one writer per run: the directory this run writes into is locked while it runs, and a run
    # that is still running elsewhere is never resumed
    lock = locks.RunLock(plan.run_dir)
    if rank_zero_only.rank == 0:
        lock.acquire()
    try:
        return _run(plan, attempt, tested)
    finally:
        lock.release()


def continue_in(plan: Plan) -> None:
    """A resume's outputs go to the run it resumes; this invocation's directory links there."""
    own_dir, target = plan.invocation_dir, plan.run_dir
    if rank_zero_only.rank != 0 or not plan.continues_elsewhere:
        return
    records.write_status(own_dir, status=RunState.RESUMED, resumed_into=str(target))
    link = own_dir / "run"
    if not link.exists():
        link.symlink_to(target.resolve(), target_is_directory=True)
    record = records.read_status(target)
    records.write_status(
        target,
        resumes=[
            *record.get("resumes", []),
            {"from": str(plan.checkpoint), "at": records.now(), "invocation_dir": str(own_dir)},
        ],
    )
    log_also_to(target / "train.log")


def _run(plan: Plan, attempt: Attempt, tested: pl.LightningModule | None) -> dict[str, float]:
    cfg = plan.config
    # the other processes' use of the CPUs, judged over the building of the data and the model
    cores = watch_cores(cfg)
    ckpt_path = str(plan.checkpoint) if plan.checkpoint is not None else None
    run_dir = Path(cfg.paths.output_dir)
    resuming = plan.action == "resume"
    if not resuming:
        _record_attempt(plan, run_dir)
    pl.seed_everything(cfg.seed, workers=True, verbose=False)

    datamodule = prepared_datamodule(cfg.task.datamodule, "fit")
    task_kwargs = datamodule.task_kwargs()
    if tested is None:
        module = build_task(cfg, task_kwargs)
    else:
        module, trained_kwargs = tested, plan.trained_kwargs
        if task_kwargs.get("vocab_size") != trained_kwargs.get("vocab_size"):
            raise UserError(
                f"mode=test: the data's vocabulary ({task_kwargs.get('vocab_size')} words) is "
                f"not the one {plan.checkpoint} was trained with "
                f"({trained_kwargs.get('vocab_size')}); give the run's data settings "
                "(task.datamodule.*)"
            )
    if resuming:
        # the run resumed is written only once its data has been read and fits the weights
        shapes = {key: tuple(value.shape) for key, value in module.state_dict().items()}
        resolved = OmegaConf.to_container(cfg, resolve=True)
        resume.check_data_as_trained(plan.info, plan.trained_kwargs, task_kwargs, shapes, resolved)
        continue_in(plan)
        attempt.record_dir = plan.run_dir
        log.info(
            "resuming %s from %s (%d epochs done, step %d)",
            plan.info.run_dir or "a checkpoint outside a run directory",
            plan.info.path,
            plan.info.epochs_done,
            plan.info.global_step,
        )
        _record_attempt(plan, run_dir)

    wandb_id = plan.info.wandb_id if plan.info is not None else None  # read when inspected
    loggers = loggers_.build_loggers(cfg, wandb_id)
    if plan.action == "resume":
        loggers_.keep_csv_history(loggers, plan.info.global_step)
    try:
        # the chosen callbacks, then every run's own (conf/builtin_callbacks/), in this order
        builtin = cfg.builtin_callbacks
        callbacks = _instantiate_group(cfg.get("callbacks"))
        callbacks += _instantiate_group(cfg.task.get("callbacks"))
        callbacks.append(hydra.utils.instantiate(builtin.divergence))
        if cfg.trainer.get("enable_progress_bar", True):
            callbacks.append(hydra.utils.instantiate(builtin.progress_bar))
        callbacks.append(RunInfo(cfg, task_kwargs, loggers_.wandb_id(loggers)))
        callbacks.append(kernel_context.PlannedUpdates())
        callbacks.append(AttemptCpu(run_dir))
        if plan.apply_on_resume:
            resolved = OmegaConf.to_container(cfg, resolve=True)
            callbacks.append(resume.ResumeOverrides(resolved, list(plan.apply_on_resume)))
        last = None
        if cfg.trainer.get("enable_checkpointing", True):
            last = hydra.utils.instantiate(builtin.last_checkpoint)
            callbacks.append(last)
        stop = hydra.utils.instantiate(
            builtin.graceful_stop,
            last=last,
            requeue_signal=signals.requeue_signum(cfg.get("requeue_signal")),
            job_id=launch.slurm_job_id(),
            poll=signals.stop_requested if signals.in_worker_sweep() else None,
        )
        tail = hydra.utils.instantiate(builtin.unvalidated_tail)
        callbacks += [launch.ProcessGroupTeardown(), stop, tail]
        trainer: pl.Trainer = hydra.utils.instantiate(
            cfg.trainer,
            callbacks=callbacks,
            logger=loggers or False,
            plugins=[checkpoints.AtomicCheckpointIO(), *launch.slurm_plugins()],
        )
        warn_if_cores_busy(cores)
        metrics: dict[str, float] = {}
        if trainer.is_global_zero:
            records.write_status(run_dir, stage=cfg.mode)
        if cfg.mode in ("fit+test", "fit"):
            _fit(trainer, module, datamodule, ckpt_path)
            if stop.pending in signals.STOP_SIGNALS:  # a signal during the last validation
                raise RunInterrupted(
                    f"interrupted after training ended (step {trainer.global_step}), before "
                    "testing; resume with ckpt_path=last to test",
                    stop.pending,
                )
            metrics.update(_floats(trainer.callback_metrics))
        if cfg.mode in ("fit+test", "test"):
            if cfg.mode == "test":
                results = trainer.test(module, datamodule=datamodule, ckpt_path=ckpt_path)
            else:
                test_path = _test_checkpoint(trainer, cfg, last)
                untested = tail.message(trainer.global_step)
                if untested and test_path and cfg.test_ckpt != "last":  # the best, not the final
                    rank_zero_only(log.warning)(untested)
                results = trainer.test(module, datamodule=datamodule, ckpt_path=test_path)
            metrics.update(_floats(results[0] if results else {}))
        if trainer.is_global_zero:
            _report(cfg, metrics)
            records.write_status(run_dir, status=FINISHED.state, ended=records.now())
        return metrics
    finally:
        loggers_.finish_wandb(loggers)


class AttemptCpu(pl.Callback):
    """Brings the attempt's CPU time in the run's record up to date at each checkpoint (rank 0;
    `treernn.lifecycle.records.record_machine`), so that an attempt killed without warning
    keeps the time it had used by its last checkpoint."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir

    def on_save_checkpoint(self, trainer: pl.Trainer, *args: Any) -> None:
        if trainer.is_global_zero:
            records.write_status(self.run_dir)


def _record_attempt(plan: Plan, run_dir: Path) -> None:
    """Record this attempt in the run's ``status.json`` (rank 0), and make the kernels' choices
    part of the run: recorded with it, reused on resume and by the sweep's other jobs, read from
    the tested run by mode=test (`treernn.lifecycle.kernel_context`)."""
    cfg = plan.config
    if rank_zero_only.rank == 0:
        started = records.read_status(run_dir).get("started") or records.now()
        records.write_status(
            run_dir,
            status=RunState.RUNNING,
            stage="setup",
            task=cfg.task.name,
            model=cfg.model.name,
            mode=cfg.mode,
            started=started,
            command=" ".join(sys.argv),
            overrides=launch.job_overrides(),
            error=None,
            **process_identity(),
        )
        records.record_machine(run_dir)
    sweep_dir = Path(HydraConfig.get().sweep.dir) if launch.is_multirun() else None
    trained_in = plan.info.run_dir if plan.info is not None else None
    kernel_context.open_for_run(run_dir, sweep_dir, trained_in, write=rank_zero_only.rank == 0)


def _instantiate_group(group: DictConfig | None, **kwargs) -> list[Any]:
    if not group:
        return []
    return [
        hydra.utils.instantiate(node, **kwargs)
        for node in group.values()
        if isinstance(node, DictConfig) and "_target_" in node
    ]


def _test_checkpoint(trainer: pl.Trainer, cfg: DictConfig, last: Any):
    """The checkpoint to test after fitting: ``last``'s file (the built-in ``last_checkpoint``)
    or the best one."""
    if cfg.test_ckpt == "last":
        return str(last.path) if last is not None and last.path.is_file() else None
    callback = trainer.checkpoint_callback
    path = getattr(callback, "best_model_path", "") if callback is not None else ""
    return path or None


def _floats(metrics: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in metrics.items() if getattr(v, "numel", lambda: 1)() == 1}


def _report(cfg: DictConfig, metrics: dict[str, float]) -> None:
    output_dir = Path(cfg.paths.output_dir)
    text_json = json.dumps(metrics, indent=2, sort_keys=True).encode()
    atomic_write(output_dir / "metrics.json", lambda handle: handle.write(text_json))
    keys = [k for k in sorted(metrics) if k.startswith(("val/", "test/"))]
    # accuracies in %, as every table and report prints them (metrics.json keeps the logged
    # fractions)
    lines = [
        f"  {k:<28} {100 * metrics[k]:.2f} %" if is_fraction(k) else f"  {k:<28} {metrics[k]:.4f}"
        for k in keys
    ]
    text = "final metrics (" + str(output_dir) + "):\n" + "\n".join(lines)
    print("\n" + text, flush=True)
    if logging.getLogger().handlers:  # under Hydra: into train.log too
        log_to_files_only(log.info, text)


def _fit(trainer: pl.Trainer, module: Any, datamodule: Any, ckpt_path: str | None) -> None:
    """``trainer.fit``, with Lightning's refusal of a validation interval longer than an epoch
    (a ValueError raised while it sets up the data, a resumed run's too) turned into the config
    error it is."""
    try:
        trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt_path)
    except ValueError as error:
        if "`val_check_interval`" not in str(error):
            raise
        found = re.search(r"training batches \((\d+)\)", str(error))
        batches = f"the {found.group(1)} training batches" if found else "the training batches"
        raise ConfigValueError(
            f"trainer.val_check_interval={trainer.val_check_interval} is more than {batches} of "
            "an epoch: to validate every N updates across epochs add "
            "trainer.check_val_every_n_epoch=null, or give at most one epoch's batches (or a "
            "fraction of an epoch, e.g. trainer.val_check_interval=0.5)"
        ) from None
