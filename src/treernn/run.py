"""Compose, instantiate, fit, test; ``train.py`` is a thin Hydra entry around :func:`train`."""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

import hydra
import lightning.pytorch as pl
import torch
from hydra.errors import InstantiationException
from lightning.pytorch.callbacks import Callback
from omegaconf import DictConfig, OmegaConf

from treernn.data.download import ChecksumError, DatasetNotFoundError
from treernn.data.vocab import Vocabulary
from treernn.tasks.language_model import NonFiniteLossError

log = logging.getLogger("treernn")

#: keys of a model/task config that describe it rather than construct it
DESCRIPTIVE_KEYS = ("name",)


class UserError(Exception):
    """A problem with the user's input: printed as one line, no stack trace."""


def register_resolvers() -> None:
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
    if not path.is_file():
        raise UserError(f"checkpoint {path} does not exist")
    checkpoint = torch.load(path, map_location="cpu", weights_only=False)
    info = checkpoint.get("treernn")
    if info is None:
        raise UserError(f"{path} is not a treernn checkpoint (no run information in it)")
    cfg = OmegaConf.create(info["config"])
    flush_denormals(bool(cfg.get("flush_denormal", True)))  # before the model's first operation
    task = build_task(cfg, {k: _deserialise(v) for k, v in info["task_kwargs"].items()})
    state = checkpoint.get("averaged_state_dict") if averaged else None
    task.load_state_dict(state or checkpoint["state_dict"])
    task.on_load_checkpoint(checkpoint)
    task.treernn_config = cfg
    return task.eval()


def resolve_ckpt_path(cfg: DictConfig) -> str | None:
    if cfg.ckpt_path in (None, ""):
        return None
    if cfg.ckpt_path == "last":
        runs = Path(cfg.paths.log_dir) / cfg.task.name / cfg.model.name
        candidates = sorted(runs.glob("*/checkpoints/last.ckpt"), key=lambda p: p.stat().st_mtime)
        if not candidates:
            raise UserError(f"ckpt_path=last: no checkpoints/last.ckpt under {runs}")
        return str(candidates[-1])
    if not Path(cfg.ckpt_path).is_file():
        raise UserError(f"ckpt_path={cfg.ckpt_path} does not exist")
    return str(cfg.ckpt_path)


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
            node = OmegaConf.merge(node, {"name": Path(cfg.paths.output_dir).name})
            if wandb_id:
                node = OmegaConf.merge(node, {"id": wandb_id, "resume": "allow"})
        loggers.append(hydra.utils.instantiate(node))
    return loggers


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


def train(cfg: DictConfig) -> dict[str, float]:
    """Fit and/or test as ``cfg.mode`` says; returns the final metrics."""
    flush_denormals(bool(cfg.get("flush_denormal", True)))
    if cfg.mode not in ("fit+test", "fit", "test"):
        raise UserError(f"mode={cfg.mode} is not one of fit+test, fit, test")
    pl.seed_everything(cfg.seed, workers=True, verbose=False)
    ckpt_path = resolve_ckpt_path(cfg)
    if cfg.mode == "test" and ckpt_path is None:
        raise UserError("mode=test needs ckpt_path=<checkpoint> (or ckpt_path=last)")

    datamodule = hydra.utils.instantiate(cfg.task.datamodule)
    datamodule.prepare_data()
    datamodule.setup("fit")
    task_kwargs = datamodule.task_kwargs()
    module = build_task(cfg, task_kwargs)

    wandb_id = None
    if ckpt_path:
        # mmap: only the run information is read here; Lightning loads the weights itself
        checkpoint = torch.load(ckpt_path, map_location="cpu", weights_only=False, mmap=True)
        wandb_id = checkpoint.get("treernn", {}).get("wandb_id")
    loggers = _loggers(cfg, wandb_id)
    try:
        callbacks = _instantiate_group(cfg.get("callbacks"))
        callbacks += _instantiate_group(cfg.task.get("callbacks"))
        callbacks.append(RunInfo(cfg, task_kwargs, _wandb_id(loggers)))
        trainer: pl.Trainer = hydra.utils.instantiate(
            cfg.trainer, callbacks=callbacks, logger=loggers or False
        )
        metrics: dict[str, float] = {}
        if cfg.mode in ("fit+test", "fit"):
            trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt_path)
            metrics.update(_floats(trainer.callback_metrics))
        if cfg.mode in ("fit+test", "test"):
            test_ckpt = ckpt_path if cfg.mode == "test" else _test_checkpoint(trainer, cfg)
            results = trainer.test(module, datamodule=datamodule, ckpt_path=test_ckpt)
            metrics.update(_floats(results[0] if results else {}))
        if trainer.is_global_zero:
            _report(cfg, metrics)
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
    print("\nfinal metrics (" + str(output_dir) + "):\n" + "\n".join(lines), flush=True)


def main(cfg: DictConfig) -> dict[str, float] | None:
    """Hydra entry: user errors become one line on stderr and exit status 1."""
    try:
        try:
            return train(cfg)
        except InstantiationException as error:
            # a constructor rejected its arguments: show the constructor's own message
            cause = error.__cause__
            raise (cause if isinstance(cause, (ValueError, TypeError)) else error) from None
    except (
        UserError,
        TypeError,
        DatasetNotFoundError,
        ChecksumError,
        NonFiniteLossError,
        ValueError,
    ) as error:
        print(f"error: {error}", file=sys.stderr, flush=True)
        sys.exit(1)
