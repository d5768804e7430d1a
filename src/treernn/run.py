"""Compose, instantiate, fit, test; ``train.py`` is a thin Hydra entry around :func:`main`.

What a run records about itself and how it resumes is in :mod:`treernn.runs`; checkpoints are read
and written by :mod:`treernn.checkpoints`; the process's set-up (threads, subnormal floats, log
lines, resolvers) is :mod:`treernn.process`.
"""

from __future__ import annotations

import json
import logging
import shutil
import sys
import traceback
from pathlib import Path
from typing import Any

import hydra
import lightning.pytorch as pl
import torch
from hydra.errors import InstantiationException
from lightning.fabric.utilities.rank_zero import rank_zero_only
from lightning.pytorch.callbacks import Callback
from omegaconf import DictConfig, OmegaConf, open_dict

from treernn import checkpoints, launch, runs, sweeps
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
from treernn.checkpoints import build_task, is_full_disk
from treernn.config_checks import check_config
from treernn.datamodules import prepared_datamodule
from treernn.errors import RunInterrupted, UserError, show_tracebacks
from treernn.process import (
    flush_denormals,
    log_also_to,
    log_to_files_only,
    register_resolvers,
    route_lightning_logs,
    set_threads,
)

log = logging.getLogger("treernn")

# register_resolvers: commands and scripts that compose configs import it from here
__all__ = ["UserError", "build_task", "main", "register_resolvers", "train"]


class RunInfo(Callback):
    """Puts what rebuilding the task needs (config, data kwargs, wandb id) in checkpoints."""

    def __init__(self, cfg: DictConfig, task_kwargs: dict[str, Any], wandb_id: str | None) -> None:
        self.cfg = OmegaConf.to_container(cfg, resolve=True)
        self.task_kwargs = checkpoints.serialise_task_kwargs(task_kwargs)
        self.wandb_id = wandb_id

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict[str, Any]) -> None:
        checkpoint["treernn"] = {
            "config": self.cfg,
            "task_kwargs": self.task_kwargs,
            "wandb_id": self.wandb_id,
            "rng": {"torch": torch.get_rng_state()},
        }

    def on_load_checkpoint(self, trainer, pl_module, checkpoint: dict[str, Any]) -> None:
        rng = checkpoint.get("treernn", {}).get("rng")
        self._restored_rng = rng["torch"] if rng and trainer.state.fn == "fit" else None

    def on_train_start(self, trainer, pl_module) -> None:
        # restored here, not when the checkpoint is loaded: Lightning draws random numbers while
        # it sets up the loops in between, which the run being resumed did not
        if getattr(self, "_restored_rng", None) is not None:
            torch.set_rng_state(self._restored_rng)
            self._restored_rng = None


def resume_plan(cfg: DictConfig) -> runs.ResumePlan | None:
    """Which checkpoint (and run) ``ckpt_path`` names, checked before any data is loaded."""
    if cfg.ckpt_path in (None, ""):
        return None
    if cfg.ckpt_path == "last":
        trainer = OmegaConf.to_container(cfg.trainer, resolve=True) if cfg.mode != "test" else None
        plan = runs.plan_last(
            Path(cfg.paths.log_dir),
            cfg.task.name,
            cfg.model.name,
            trainer,
            exclude=Path(cfg.paths.output_dir),
        )
    else:
        plan = runs.plan_path(cfg.ckpt_path)
    checkpoints.check_task_and_model(plan.checkpoint, cfg.task.name, cfg.model.name)
    return plan


class ResumeOverrides(Callback):
    """Applies the new optimizer / scheduler settings to the state restored from a checkpoint."""

    def __init__(self, config: dict[str, Any], keys: list[str]) -> None:
        self.config = config
        self.keys = keys

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        applied = runs.apply_resumed_overrides(trainer, self.config, self.keys)
        if applied and trainer.is_global_zero:
            log.info("resumed with new settings applied: %s", ", ".join(applied))


def _continue_in(cfg: DictConfig, plan: runs.ResumePlan) -> None:
    """Point this run's outputs at the run it resumes; this invocation's directory links there."""
    own_dir = Path(cfg.paths.output_dir)
    target = plan.run_dir
    if target is None or target.resolve() == own_dir.resolve():
        return
    if rank_zero_only.rank == 0:
        runs.write_status(own_dir, status="resumed", resumed_into=str(target))
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


def _instantiate_group(group: DictConfig | None, **kwargs) -> list[Any]:
    if not group:
        return []
    return [
        hydra.utils.instantiate(node, **kwargs)
        for node in group.values()
        if isinstance(node, DictConfig) and "_target_" in node
    ]


def _model_as_trained(cfg: DictConfig, info: checkpoints.CheckpointInfo) -> None:
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
            now = runs.flatten(
                OmegaConf.to_container(OmegaConf.select(cfg, section), resolve=True), f"{section}."
            )
            for key, value in now.items():
                if key in explicit:
                    OmegaConf.update(node, key[len(section) + 1 :], value, force_add=True)
            ignored += [
                key
                for key, value in runs.flatten(OmegaConf.to_container(node), f"{section}.").items()
                if key not in explicit and now.get(key) != value
            ]
            OmegaConf.update(cfg, section, node, merge=False)
    if ignored:
        log.info(
            "mode=test: the model as the checkpoint trained it (from the checkpoint: %s)",
            ", ".join(sorted(ignored)),
        )


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
    _resume_requeued_job(cfg)
    plan = resume_plan(cfg)  # a bad checkpoint stops here, before any data is loaded
    if cfg.mode == "test" and plan is None:
        raise UserError("mode=test needs ckpt_path=<checkpoint> (or ckpt_path=last)")
    loggers_.check_wandb_reachable(cfg)
    tested = None
    if cfg.mode == "test":
        _model_as_trained(cfg, plan.checkpoint)
        tested = _task_as_trained(cfg, plan.checkpoint)
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


def _resume_requeued_job(cfg: DictConfig) -> None:
    """A SLURM job that started again after ``scontrol requeue`` runs in the directory of its
    first attempt (``slurm-<job id>-<step>``, or its sweep job's): it resumes from there."""
    run_dir = Path(cfg.paths.output_dir)
    if cfg.ckpt_path or cfg.mode == "test" or runs.read_status(run_dir).get("status") != "requeued":
        return
    info, _ = runs.newest_complete_checkpoint(run_dir)
    if info is not None:
        with open_dict(cfg):
            cfg.ckpt_path = str(info.path)


def _task_as_trained(
    cfg: DictConfig, info: checkpoints.CheckpointInfo
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


def _train(
    cfg: DictConfig,
    plan: runs.ResumePlan | None,
    tested: tuple[pl.LightningModule, dict[str, Any]] | None,
) -> dict[str, float]:
    ckpt_path = str(plan.checkpoint.path) if plan else None
    if plan is not None and cfg.mode != "test":
        _continue_in(cfg, plan)
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
            status="running",
            stage="setup",
            task=cfg.task.name,
            model=cfg.model.name,
            mode=cfg.mode,
            started=started,
            command=" ".join(sys.argv),
            overrides=launch.job_overrides(),
            error=None,
            **runs.process_identity(),
        )
        runs.record_machine(run_dir)
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
            apply_keys = runs.check_resume_config(plan.checkpoint, config, shapes)
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
            callbacks.append(ResumeOverrides(OmegaConf.to_container(cfg, resolve=True), apply_keys))
        last = None
        if cfg.trainer.get("enable_checkpointing", True):
            last = LastCheckpoint(run_dir / "checkpoints")
            callbacks.append(last)
        requeue = launch.requeue_signum(cfg.get("requeue_signal"))
        stop = GracefulStop(last, requeue, launch.slurm_job_id())
        callbacks += [launch.ProcessGroupTeardown(), stop]
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
            trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt_path)
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
                results = trainer.test(
                    module, datamodule=datamodule, ckpt_path=_test_checkpoint(trainer, cfg, last)
                )
            metrics.update(_floats(results[0] if results else {}))
        if trainer.is_global_zero:
            _report(cfg, metrics)
            runs.write_status(run_dir, status="finished", ended=runs.now())
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
    checkpoints.atomic_write(output_dir / "metrics.json", lambda handle: handle.write(text_json))
    keys = [k for k in sorted(metrics) if k.startswith(("val/", "test/"))]
    lines = [f"  {k:<28} {metrics[k]:.4f}" for k in keys]
    text = "final metrics (" + str(output_dir) + "):\n" + "\n".join(lines)
    print("\n" + text, flush=True)
    if logging.getLogger().handlers:  # under Hydra: into train.log too
        log_to_files_only(log.info, text)


def _record_failure(cfg: DictConfig, status: str, message: str, details: str = "") -> None:
    """Say in the run directory why it stopped: ``status.json`` and train.log."""
    if rank_zero_only.rank != 0:
        return
    output_dir = OmegaConf.select(cfg, "paths.output_dir", throw_on_resolution_failure=False)
    run_dir = Path(output_dir) if output_dir else None
    if run_dir is None or not run_dir.is_dir():
        return
    if runs.read_status(run_dir).get("resumed_into"):
        return  # a refused resume: its own directory says where it pointed
    runs.write_status(run_dir, status=status, error=message, ended=runs.now())
    if logging.getLogger().handlers:
        emit = log.error if status == "failed" else log.warning
        log_to_files_only(emit, "%s: %s%s", status, message, "\n" + details if details else "")


def _remove_if_empty(cfg: DictConfig) -> None:
    """A single run that failed while setting up (a config, data or checkpoint error, before any
    training) leaves no directory behind: the error was printed and there is nothing to keep."""
    output_dir = OmegaConf.select(cfg, "paths.output_dir", throw_on_resolution_failure=False)
    if not output_dir:
        return
    run_dir = Path(output_dir)
    record = runs.read_status(run_dir)
    if rank_zero_only.rank != 0 or record.get("stage", "setup") != "setup":
        return
    if record.get("resumed_into") or record.get("resumes") or not run_dir.is_dir():
        return
    for handler in list(logging.getLogger().handlers):
        if (
            isinstance(handler, logging.FileHandler)
            and Path(handler.baseFilename).parent == run_dir
        ):
            handler.close()
            logging.getLogger().removeHandler(handler)
    shutil.rmtree(run_dir, ignore_errors=True)


def sweep_value(cfg: DictConfig, metrics: dict[str, float] | None) -> Any:
    """What the Hydra job returns: the metrics, or with ``optimized_metric`` set (an Optuna sweep,
    ``conf/hparams_search/``) that one value; NaN for a failed job, which Optuna records as a
    failed trial while the sweep goes on."""
    key = cfg.get("optimized_metric")
    if not key:
        return metrics
    if metrics is None:
        return float("nan")
    if key not in metrics:
        raise UserError(f"optimized_metric={key} is not a metric of this run: {sorted(metrics)}")
    return metrics[key]


def _say(message: str) -> None:
    print(f"error: {message}", file=sys.stderr, flush=True)
    if show_tracebacks():
        traceback.print_exc()


def main(cfg: DictConfig) -> Any:
    """Hydra entry: a user error is one line on stderr and exit status 1; a bug keeps its
    traceback. A signal (Ctrl-C, SIGTERM) records the run as interrupted and exits with 130 / 143,
    in a sweep too (the sweep stops). In a multirun a failed job is recorded and the sweep goes on
    (the summary at the end lists the failures and exits non-zero). Returns
    :func:`sweep_value`."""
    multirun = launch.is_multirun()
    try:
        try:
            if multirun:
                done = _continue_sweep_job(cfg)
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
        _record_failure(cfg, "interrupted", str(error))
        print(str(error), file=sys.stderr, flush=True)
        sys.exit(error.exit_code)
    except sweeps.SweepChanged as error:
        # the job's directory belongs to another attempt (or a live process): leave it alone
        _say(str(error))
        return sweep_value(cfg, None)
    except Requeued as error:
        _record_failure(cfg, "requeued", str(error))
        print(f"requeued: {error}", file=sys.stderr, flush=True)
        # this process ends here, in a sweep too, without a result: SLURM runs the job again
        # (submitit's job, or the sweep's own batch job, which resumes the sweep: sweep_id=)
        sys.exit(0)
    except (UserError, OSError) as error:
        if isinstance(error, OSError) and not isinstance(error, UserError):
            if not is_full_disk(error):
                return _bug(cfg, error, multirun)
            error = checkpoints.full_disk_error(
                error.filename or "a file of the run", error, "the last good checkpoint is kept"
            )
        _record_failure(cfg, "failed", str(error))
        _say(str(error))
        if multirun:
            return sweep_value(cfg, None)
        _remove_if_empty(cfg)
        sys.exit(1)
    except Exception as error:
        return _bug(cfg, error, multirun)


def _continue_sweep_job(cfg: DictConfig) -> dict[str, float] | None:
    """A sweep job that ran before (a resumed sweep): the metrics of a finished job, which is
    skipped; otherwise it resumes from its newest checkpoint, or runs again from the start."""
    job_dir = Path(cfg.paths.output_dir)
    follower = not launch.is_rank_zero()  # a DDP job's other ranks follow rank 0's record
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


def _bug(cfg: DictConfig, error: BaseException, multirun: bool) -> Any:
    details = traceback.format_exc()
    _record_failure(cfg, "failed", f"{type(error).__name__}: {error}", details)
    if multirun:
        print(details, file=sys.stderr, flush=True)
        return sweep_value(cfg, None)
    raise error
