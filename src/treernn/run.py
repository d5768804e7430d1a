"""The run entry: compose callbacks, loggers and the trainer, fit, test and report;
``train.py`` is a thin Hydra entry around :func:`main`.

The jobs around it live in modules named for them: the process's set-up in
:mod:`treernn.process`; run records and locks in :mod:`treernn.runs`; what to resume and
continuing a run in :mod:`treernn.resume`; sweep jobs and their return value in
:mod:`treernn.sweeps`; loggers in :mod:`treernn.loggers`; checkpoints (and the run information
they hold) in :mod:`treernn.checkpoints`.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import sys
import traceback
from pathlib import Path
from typing import Any

import hydra
import lightning.pytorch as pl
from hydra.core.hydra_config import HydraConfig
from hydra.errors import InstantiationException
from lightning.fabric.utilities.rank_zero import rank_zero_only
from omegaconf import DictConfig, OmegaConf

from treernn import checkpoints, launch, resume, runs, sweeps
from treernn import loggers as loggers_
from treernn.callbacks.checkpoint import LastCheckpoint
from treernn.callbacks.divergence import DivergenceMonitor
from treernn.callbacks.graceful_stop import (
    STOP_SIGNALS,
    GracefulStop,
    Requeued,
    install_immediate_handlers,
    restore_handlers,
)
from treernn.callbacks.progress import ProgressBar
from treernn.callbacks.unvalidated_tail import UnvalidatedTail
from treernn.checkpoints import RunInfo, build_task
from treernn.config_checks import check_config
from treernn.datamodules import prepared_datamodule
from treernn.errors import ConfigValueError, RunInterrupted, UserError, say
from treernn.files import atomic_write, full_disk_error, is_full_disk
from treernn.identity import process_identity
from treernn.kernels import choices as kernel_choices
from treernn.process import (
    flush_denormals,
    log_to_files_only,
    route_lightning_logs,
    set_threads,
)
from treernn.records import RunState
from treernn.resolvers import register_resolvers
from treernn.sweeps import sweep_value

log = logging.getLogger("treernn")

# register_resolvers: commands and scripts that compose configs import it from here
__all__ = ["UserError", "build_task", "main", "register_resolvers", "train"]


def _instantiate_group(group: DictConfig | None, **kwargs) -> list[Any]:
    if not group:
        return []
    return [
        hydra.utils.instantiate(node, **kwargs)
        for node in group.values()
        if isinstance(node, DictConfig) and "_target_" in node
    ]


def train(cfg: DictConfig) -> dict[str, float]:
    """Fit and/or test as ``cfg.mode`` says; returns the final metrics."""
    previous = install_immediate_handlers(launch.requeue_signum(cfg.get("requeue_signal")))
    try:
        return _set_up_and_train(cfg)
    finally:
        restore_handlers(previous)


def _set_up_and_train(cfg: DictConfig) -> dict[str, float]:
    flush_denormals(bool(cfg.get("flush_denormal", True)))
    set_threads(cfg.get("threads"))
    route_lightning_logs()
    check_config(cfg)
    resume.resume_requeued_job(cfg)
    plan = resume.plan_from_config(cfg)  # a bad checkpoint stops here, before any data is loaded
    if cfg.mode == "test" and plan is None:
        raise UserError("mode=test needs ckpt_path=<checkpoint> (or ckpt_path=last)")
    loggers_.check_wandb_reachable(cfg)
    tested = None
    if cfg.mode == "test":
        resume.model_as_trained(cfg, plan.checkpoint)
        tested = resume.task_as_trained(cfg, plan.checkpoint)
    # one writer per run: the directory this run writes into is locked while it runs, and a run
    # that is still running elsewhere is never resumed
    resumes_into = plan.run_dir if plan is not None and cfg.mode != "test" else None
    lock = runs.RunLock(resumes_into or Path(cfg.paths.output_dir))
    if rank_zero_only.rank == 0:
        lock.acquire()
    try:
        return _train(cfg, plan, tested)
    finally:
        lock.release()


def _train(
    cfg: DictConfig,
    plan: resume.ResumePlan | None,
    tested: tuple[pl.LightningModule, dict[str, Any]] | None,
) -> dict[str, float]:
    ckpt_path = str(plan.checkpoint.path) if plan else None
    if plan is not None and cfg.mode != "test":
        resume.continue_in(cfg, plan)
        log.info(
            "resuming %s from %s (%d epochs done, step %d)",
            plan.run_dir or "a checkpoint outside a run directory",
            plan.checkpoint.path,
            plan.checkpoint.epochs_done,
            plan.checkpoint.global_step,
        )
    run_dir = Path(cfg.paths.output_dir)
    if rank_zero_only.rank == 0:
        started = runs.read_status(run_dir).get("started") or runs.now()
        runs.write_status(
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
        runs.record_machine(run_dir)
    # the kernels' choices are part of the run: recorded with it, reused on resume and by the
    # sweep's other jobs (treernn.kernels.choices)
    sweep_dir = Path(HydraConfig.get().sweep.dir) if launch.is_multirun() else None
    trained_in = plan.run_dir if plan is not None else None
    kernel_choices.attach(run_dir, sweep_dir, trained_in, write=rank_zero_only.rank == 0)
    pl.seed_everything(cfg.seed, workers=True, verbose=False)

    datamodule = prepared_datamodule(cfg.task.datamodule, "fit")
    task_kwargs = datamodule.task_kwargs()
    if tested is None:
        module = build_task(cfg, task_kwargs)
    else:
        module, trained_kwargs = tested
        if task_kwargs.get("vocab_size") != trained_kwargs.get("vocab_size"):
            raise UserError(
                f"mode=test: the data's vocabulary ({task_kwargs.get('vocab_size')} words) is "
                f"not the one {plan.checkpoint.path} was trained with "
                f"({trained_kwargs.get('vocab_size')}); give the run's data settings "
                "(task.datamodule.*)"
            )

    wandb_id = None
    apply_keys: list[str] = []
    if plan is not None:
        config = OmegaConf.to_container(cfg, resolve=True)
        if cfg.mode != "test":
            shapes = {key: tuple(value.shape) for key, value in module.state_dict().items()}
            apply_keys = resume.check_resume_config(plan.checkpoint, config, shapes)
        wandb_id = plan.checkpoint.wandb_id  # read when the checkpoint was checked
    loggers = loggers_.build_loggers(cfg, wandb_id)
    if cfg.mode != "test" and plan is not None:
        loggers_.keep_csv_history(loggers, plan.checkpoint.global_step)
    try:
        callbacks = _instantiate_group(cfg.get("callbacks"))
        callbacks += _instantiate_group(cfg.task.get("callbacks"))
        callbacks.append(DivergenceMonitor(cfg.task.monitor, cfg.task.mode))
        if cfg.trainer.get("enable_progress_bar", True):
            callbacks.append(ProgressBar())
        callbacks.append(RunInfo(cfg, task_kwargs, loggers_.wandb_id(loggers)))
        if apply_keys:
            config = OmegaConf.to_container(cfg, resolve=True)
            callbacks.append(resume.ResumeOverrides(config, apply_keys))
        last = None
        if cfg.trainer.get("enable_checkpointing", True):
            last = LastCheckpoint(run_dir / "checkpoints", cfg.get("checkpoint_minutes"))
            callbacks.append(last)
        requeue = launch.requeue_signum(cfg.get("requeue_signal"))
        poll = sweeps.stop_requested if os.environ.get(sweeps.STOP_FILE_ENV) else None
        stop = GracefulStop(last, requeue, launch.slurm_job_id(), poll)
        tail = UnvalidatedTail()
        callbacks += [launch.ProcessGroupTeardown(), stop, tail]
        trainer: pl.Trainer = hydra.utils.instantiate(
            cfg.trainer,
            callbacks=callbacks,
            logger=loggers or False,
            plugins=[checkpoints.AtomicCheckpointIO(), *launch.slurm_plugins()],
        )
        metrics: dict[str, float] = {}
        if trainer.is_global_zero:
            runs.write_status(run_dir, stage=cfg.mode)
        if cfg.mode in ("fit+test", "fit"):
            _fit(trainer, module, datamodule, ckpt_path)
            if stop.pending in STOP_SIGNALS:  # a signal during the last validation
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
            runs.write_status(run_dir, status=RunState.FINISHED, ended=runs.now())
        return metrics
    finally:
        loggers_.finish_wandb(loggers)


def _test_checkpoint(trainer: pl.Trainer, cfg: DictConfig, last: LastCheckpoint | None):
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
    from treernn.reporting.run_records import is_fraction

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


def main(cfg: DictConfig) -> Any:
    """Hydra entry: a user error is one line on stderr and exit status 1; a bug keeps its
    traceback. A signal (Ctrl-C, SIGTERM) records the run as interrupted and exits with 130 / 143,
    in a sweep too (the sweep stops). In a multirun a failed job is recorded and the sweep goes on
    (the summary at the end lists the failures and exits non-zero). Returns
    :func:`sweep_value`."""
    try:
        return _main(cfg)
    finally:
        if launch.is_multirun() and os.environ.get(sweeps.STOP_FILE_ENV):
            # a joblib worker between two jobs: Ctrl-C of the sweep's process group reached an
            # idle worker as KeyboardInterrupt in its wait for work, joblib took its pool for
            # broken and killed the busy workers before they saved (a traceback, and the running
            # job's updates since its last checkpoint lost, seen 2026-12-02). The stop file tells
            # the jobs; the next job here installs its own handlers (and puts this one back).
            signal.signal(signal.SIGINT, signal.SIG_IGN)


def _main(cfg: DictConfig) -> Any:
    multirun = launch.is_multirun()
    try:
        try:
            if multirun:
                done = resume.continue_sweep_job(cfg)
                if done is not None:
                    return sweep_value(cfg, done)
            return sweep_value(cfg, train(cfg))
        except InstantiationException as error:
            # a constructor rejected its arguments: a user error keeps its own one-line message
            cause = error.__cause__
            if isinstance(cause, UserError):
                raise cause from None
            raise
    except RunInterrupted as error:
        runs.record_failure(runs.output_dir_of(cfg), RunState.INTERRUPTED, str(error))
        print(str(error), file=sys.stderr, flush=True)
        if multirun and os.environ.get(sweeps.STOP_FILE_ENV):
            # a joblib worker: its exit would make joblib kill the other workers, which may be
            # saving their own checkpoints; the launching process ends the sweep (130 / 143).
            # A job run by the launching process itself (one worker) took the sweep's signal
            # with its own handler: the sweep stops as that signal asked
            if sweeps.in_launching_process():
                sweeps.request_stop(error.signum)
            return sweep_value(cfg, None)
        sys.exit(error.exit_code)
    except sweeps.NotStarted as error:
        print(str(error), file=sys.stderr, flush=True)
        return sweep_value(cfg, None)
    except sweeps.SweepChanged as error:
        # the job's directory belongs to another attempt (or a live process): leave it alone
        say(str(error))
        return sweep_value(cfg, None)
    except Requeued as error:
        runs.record_failure(runs.output_dir_of(cfg), RunState.REQUEUED, str(error))
        print(f"requeued: {error}", file=sys.stderr, flush=True)
        # this process ends here, in a sweep too, without a result: SLURM runs the job again
        # (submitit's job, or the sweep's own batch job, which resumes the sweep: sweep_id=)
        sys.exit(0)
    except (UserError, OSError) as error:
        if isinstance(error, OSError) and not isinstance(error, UserError):
            if not is_full_disk(error):
                return _bug(cfg, error, multirun)
            error = full_disk_error(
                error.filename or "a file of the run", error, "the last good checkpoint is kept"
            )
        runs.record_failure(runs.output_dir_of(cfg), RunState.FAILED, str(error))
        say(str(error))
        if multirun:
            return sweep_value(cfg, None)
        runs.remove_if_empty(runs.output_dir_of(cfg))
        sys.exit(1)
    except Exception as error:
        return _bug(cfg, error, multirun)


def _bug(cfg: DictConfig, error: BaseException, multirun: bool) -> Any:
    details = traceback.format_exc()
    summary = f"{type(error).__name__}: {error}"
    runs.record_failure(runs.output_dir_of(cfg), RunState.FAILED, summary, details)
    if multirun:
        print(details, file=sys.stderr, flush=True)
        return sweep_value(cfg, None)
    raise error
