"""Compose, instantiate, fit, test; ``train.py`` is a thin Hydra entry around :func:`train`."""

from __future__ import annotations

import csv
import json
import logging
import os
import shutil
import sys
import traceback
import warnings
from pathlib import Path
from typing import Any

import hydra
import lightning.pytorch as pl
import torch
from hydra.errors import InstantiationException
from lightning.fabric.utilities.rank_zero import rank_zero_only
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import CSVLogger
from omegaconf import DictConfig, OmegaConf, open_dict

from treernn import launch, runs
from treernn.callbacks.divergence import DivergenceMonitor
from treernn.callbacks.progress import ProgressBar
from treernn.config_checks import check_config
from treernn.data.vocab import Vocabulary
from treernn.errors import ConfigValueError, UserError, show_tracebacks

log = logging.getLogger("treernn")

#: keys of a model/task config that describe it rather than construct it (a model's ``recipe``:
#: its own optimiser settings, which the task configs read)
DESCRIPTIVE_KEYS = ("name", "recipe")

__all__ = ["UserError", "build_task", "load_task", "main", "train"]


def register_resolvers() -> None:
    launch.register_resolvers()
    if not OmegaConf.has_resolver("pid"):
        OmegaConf.register_new_resolver("pid", lambda: os.getpid())


def constructor_config(cfg: DictConfig) -> DictConfig:
    """A config node without its descriptive keys, ready for ``hydra.utils.instantiate``."""
    container = OmegaConf.to_container(cfg, resolve=True)
    for key in DESCRIPTIVE_KEYS:
        container.pop(key, None)
    return OmegaConf.create(container)


def _serialisable(value: Any) -> Any:
    if isinstance(value, Vocabulary):
        return {"__vocabulary__": value.state_dict()}
    return value


def _deserialise(value: Any) -> Any:
    if isinstance(value, dict) and "__vocabulary__" in value:
        return Vocabulary.from_state_dict(value["__vocabulary__"])
    return value


class RunInfo(Callback):
    """Puts what rebuilding the task needs (config, data kwargs, wandb id) in checkpoints."""

    def __init__(self, cfg: DictConfig, task_kwargs: dict[str, Any], wandb_id: str | None) -> None:
        self.cfg = OmegaConf.to_container(cfg, resolve=True)
        self.task_kwargs = {k: _serialisable(v) for k, v in task_kwargs.items()}
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
        if rng and trainer.state.fn == "fit":
            torch.set_rng_state(rng["torch"])


def build_task(cfg: DictConfig, task_kwargs: dict[str, Any]) -> pl.LightningModule:
    encoder = hydra.utils.instantiate(constructor_config(cfg.model))
    return hydra.utils.instantiate(cfg.task.module, encoder=encoder, **task_kwargs)


def load_task(ckpt_path: str | Path, averaged: bool = True) -> pl.LightningModule:
    """Rebuild a task from a treernn checkpoint, in eval mode (averaged NT-ASGD weights if any)."""
    path = Path(ckpt_path)
    runs.inspect_checkpoint(path)  # one line for a missing, damaged or foreign file
    checkpoint = torch.load(path, map_location="cpu", weights_only=False)
    info = checkpoint["treernn"]
    cfg = OmegaConf.create(info["config"])
    flush_denormals(bool(cfg.get("flush_denormal", True)))  # before the model's first operation
    task = build_task(cfg, {k: _deserialise(v) for k, v in info["task_kwargs"].items()})
    state = checkpoint.get("averaged_state_dict") if averaged else None
    task.load_state_dict(state or checkpoint["state_dict"])
    task.on_load_checkpoint(checkpoint)
    task.treernn_config = cfg
    return task.eval()


def resume_plan(cfg: DictConfig) -> runs.ResumePlan | None:
    """Which checkpoint (and run) ``ckpt_path`` names, checked before any data is loaded."""
    if cfg.ckpt_path in (None, ""):
        return None
    if cfg.ckpt_path == "last":
        max_epochs = cfg.trainer.get("max_epochs") if cfg.mode != "test" else None
        plan = runs.plan_last(
            Path(cfg.paths.log_dir),
            cfg.task.name,
            cfg.model.name,
            max_epochs,
            exclude=Path(cfg.paths.output_dir),
        )
    else:
        plan = runs.plan_path(cfg.ckpt_path)
    runs.check_task_and_model(plan.checkpoint, cfg.task.name, cfg.model.name)
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


def _route_lightning_logs() -> None:
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


def _continue_in(cfg: DictConfig, plan: runs.ResumePlan) -> Path:
    """Point this run's outputs at the run it resumes; this invocation's directory links there."""
    own_dir = Path(cfg.paths.output_dir)
    target = plan.run_dir
    if target is None or target.resolve() == own_dir.resolve():
        return own_dir
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
        handler = logging.FileHandler(target / "train.log", mode="a")
        handler.setFormatter(
            logging.Formatter("[%(asctime)s][%(name)s][%(levelname)s] - %(message)s")
        )
        logging.getLogger().addHandler(handler)
    with open_dict(cfg):
        cfg.paths.output_dir = str(target)
    return target


def _instantiate_group(group: DictConfig | None, **kwargs) -> list[Any]:
    if not group:
        return []
    return [
        hydra.utils.instantiate(node, **kwargs)
        for node in group.values()
        if isinstance(node, DictConfig) and "_target_" in node
    ]


def _loggers(cfg: DictConfig, wandb_id: str | None) -> list[Any]:
    loggers = []
    for key, node in (cfg.get("logger") or {}).items():
        if "wandb" in key:
            name, config = launch.wandb_naming(cfg, Path(cfg.paths.output_dir))
            node = OmegaConf.create(OmegaConf.to_container(node, resolve=True))
            node = OmegaConf.merge(node, {"name": name, "config": config, "_convert_": "all"})
            if wandb_id:
                node = OmegaConf.merge(node, {"id": wandb_id, "resume": "allow"})
        loggers.append(hydra.utils.instantiate(node))
    return loggers


def _keep_csv_history(loggers: list[Any]) -> None:
    """A resumed run appends to its ``metrics.csv``. Lightning's CSV writer deletes an existing
    file when it starts; put the earlier rows back and tell the writer their columns, so that it
    appends (and rewrites the header if new columns appear)."""
    for logger in loggers:
        if not isinstance(logger, CSVLogger) or rank_zero_only.rank != 0:
            continue
        path = Path(logger.log_dir) / "metrics.csv"
        if not path.is_file():
            continue
        history = path.read_text()
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*exists and is not empty.*")
            writer = logger.experiment
        path.write_text(history)
        with open(path, newline="") as handle:
            writer.metrics_keys = sorted(next(csv.reader(handle), []))


def _wandb_id(loggers: list[Any]) -> str | None:
    for logger in loggers:
        if type(logger).__name__ == "WandbLogger":
            return logger.experiment.id
    return None


def _finish_wandb(loggers: list[Any]) -> None:
    if any(type(logger).__name__ == "WandbLogger" for logger in loggers):
        import wandb

        wandb.finish()


def flush_denormals(enabled: bool = True) -> None:
    """Treat subnormal floats as zero on the CPU (see ``flush_denormal`` in conf/config.yaml).

    The flag lives in each thread's floating-point control register; threads started afterwards
    (torch's intra-op OpenMP pool) inherit it, so call this before the first parallel operation.
    """
    torch.set_flush_denormal(enabled)


def set_threads(threads: Any) -> None:
    """``threads``: torch's intra-op thread count for this run (null: torch's default, one per
    core). Parallel sweeps (``table=...``, two jobs at once) give each job one thread: on a busy
    machine two OpenMP threads of one job wait for each other."""
    if threads is None:
        return
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ConfigValueError(
            f"threads={threads!r} must be a positive integer or null; e.g. threads=1"
        )
    torch.set_num_threads(threads)


class RunInterrupted(Exception):
    """The run was stopped (Ctrl-C, SIGTERM) before it finished."""


def train(cfg: DictConfig) -> dict[str, float]:
    """Fit and/or test as ``cfg.mode`` says; returns the final metrics."""
    flush_denormals(bool(cfg.get("flush_denormal", True)))
    set_threads(cfg.get("threads"))
    _route_lightning_logs()
    if cfg.mode not in ("fit+test", "fit", "test"):
        raise UserError(f"mode={cfg.mode} is not one of fit+test, fit, test")
    check_config(cfg)
    plan = resume_plan(cfg)  # a bad checkpoint stops here, before any data is loaded
    if cfg.mode == "test" and plan is None:
        raise UserError("mode=test needs ckpt_path=<checkpoint> (or ckpt_path=last)")
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
            pid=os.getpid(),
            command=" ".join(sys.argv),
        )
    pl.seed_everything(cfg.seed, workers=True, verbose=False)

    datamodule = hydra.utils.instantiate(cfg.task.datamodule)
    datamodule.prepare_data()
    datamodule.setup("fit")
    task_kwargs = datamodule.task_kwargs()
    module = build_task(cfg, task_kwargs)

    wandb_id = None
    requeued = None
    apply_keys: list[str] = []
    if plan is not None:
        config = OmegaConf.to_container(cfg, resolve=True)
        if cfg.mode != "test":
            shapes = {key: tuple(value.shape) for key, value in module.state_dict().items()}
            apply_keys = runs.check_resume_config(plan.checkpoint, config, shapes)
        wandb_id = plan.checkpoint.wandb_id  # read when the checkpoint was checked
    elif (requeued := launch.requeued_checkpoint(run_dir)) is not None and cfg.mode != "test":
        # a requeued SLURM job: Lightning restores hpc_ckpt_N.ckpt itself; keep its wandb run
        wandb_id = runs.inspect_checkpoint(requeued).wandb_id
        log.info("requeued job: Lightning resumes from %s", requeued)
    loggers = _loggers(cfg, wandb_id)
    if (plan is not None or requeued is not None) and cfg.mode != "test":
        _keep_csv_history(loggers)
    try:
        callbacks = _instantiate_group(cfg.get("callbacks"))
        callbacks += _instantiate_group(cfg.task.get("callbacks"))
        callbacks.append(DivergenceMonitor(cfg.task.monitor, cfg.task.mode))
        if cfg.trainer.get("enable_progress_bar", True):
            callbacks.append(ProgressBar())
        callbacks.append(RunInfo(cfg, task_kwargs, _wandb_id(loggers)))
        if apply_keys:
            callbacks.append(ResumeOverrides(OmegaConf.to_container(cfg, resolve=True), apply_keys))
        callbacks += [launch.ProcessGroupTeardown(), launch.RequeueAtBatchEnd()]
        trainer: pl.Trainer = hydra.utils.instantiate(
            cfg.trainer,
            callbacks=callbacks,
            logger=loggers or False,
            plugins=launch.slurm_plugins(cfg.get("requeue_signal")) or None,
        )
        metrics: dict[str, float] = {}
        if trainer.is_global_zero:
            runs.write_status(run_dir, stage=cfg.mode)
        if cfg.mode in ("fit+test", "fit"):
            trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt_path)
            if trainer.interrupted:
                raise RunInterrupted(
                    f"training was interrupted at epoch {trainer.current_epoch}, step "
                    f"{trainer.global_step}; resume with ckpt_path=last"
                )
            metrics.update(_floats(trainer.callback_metrics))
        if cfg.mode in ("fit+test", "test"):
            test_ckpt = ckpt_path if cfg.mode == "test" else _test_checkpoint(trainer, cfg)
            results = trainer.test(module, datamodule=datamodule, ckpt_path=test_ckpt)
            metrics.update(_floats(results[0] if results else {}))
        if trainer.is_global_zero:
            _report(cfg, metrics)
            runs.write_status(run_dir, status="finished", ended=runs.now())
        return metrics
    finally:
        _finish_wandb(loggers)


def _test_checkpoint(trainer: pl.Trainer, cfg: DictConfig) -> str | None:
    callback = trainer.checkpoint_callback
    if callback is None:
        return None
    path = callback.best_model_path if cfg.test_ckpt == "best" else callback.last_model_path
    return path or None


def _floats(metrics: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in metrics.items() if getattr(v, "numel", lambda: 1)() == 1}


def _report(cfg: DictConfig, metrics: dict[str, float]) -> None:
    output_dir = Path(cfg.paths.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / "metrics.json").write_text(json.dumps(metrics, indent=2, sort_keys=True))
    keys = [k for k in sorted(metrics) if k.startswith(("val/", "test/"))]
    lines = [f"  {k:<28} {metrics[k]:.4f}" for k in keys]
    text = "final metrics (" + str(output_dir) + "):\n" + "\n".join(lines)
    print("\n" + text, flush=True)
    if logging.getLogger().handlers:  # under Hydra: into train.log too
        _quietly(log.info, text)


def _quietly(emit, *args) -> None:
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


def _is_multirun() -> bool:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def _record_failure(cfg: DictConfig, status: str, message: str, details: str = "") -> None:
    """Say in the run directory why it stopped: ``status.json`` and train.log."""
    if rank_zero_only.rank != 0:
        return
    output_dir = OmegaConf.select(cfg, "paths.output_dir", throw_on_resolution_failure=False)
    run_dir = Path(output_dir) if output_dir else None
    if run_dir is None or not run_dir.is_dir():
        return
    runs.write_status(run_dir, status=status, error=message, ended=runs.now())
    if logging.getLogger().handlers:
        _quietly(log.error, "%s: %s%s", status, message, "\n" + details if details else "")


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


def main(cfg: DictConfig) -> Any:
    """Hydra entry: a user error is one line on stderr and exit status 1; a bug keeps its
    traceback. In a multirun a failed job is recorded and the sweep goes on (the summary at the
    end lists the failures and exits non-zero). Returns :func:`sweep_value`."""
    multirun = _is_multirun()
    try:
        try:
            return sweep_value(cfg, train(cfg))
        except InstantiationException as error:
            # a constructor rejected its arguments: a user error keeps its own one-line message
            cause = error.__cause__
            if isinstance(cause, UserError):
                raise cause from None
            raise
    except (UserError, RunInterrupted, launch.Requeued) as error:
        status = "failed" if isinstance(error, UserError) else "interrupted"
        _record_failure(cfg, status, str(error))
        print(f"error: {error}", file=sys.stderr, flush=True)
        if show_tracebacks():
            traceback.print_exc()
        if multirun:
            return sweep_value(cfg, None)
        if status == "failed":
            _remove_if_empty(cfg)
        sys.exit(1)
    except KeyboardInterrupt:
        _record_failure(cfg, "interrupted", "KeyboardInterrupt")
        raise
    except Exception as error:
        details = traceback.format_exc()
        _record_failure(cfg, "failed", f"{type(error).__name__}: {error}", details)
        if multirun:
            print(details, file=sys.stderr, flush=True)
            return sweep_value(cfg, None)
        raise
