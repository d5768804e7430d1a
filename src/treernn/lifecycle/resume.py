"""Resuming a run, once the plan (`treernn.lifecycle.plan`) has chosen the checkpoint: the
overrides a resume refuses (those the restored state would silently undo) or applies to the
restored optimizer and scheduler, and ``mode=test``'s task rebuilt as its checkpoint trained it.
"""

from __future__ import annotations

import logging
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback
from omegaconf import DictConfig

from treernn import checkpoints
from treernn.checkpoints import CheckpointInfo, build_task
from treernn.errors import UserError
from treernn.lifecycle import launch
from treernn.lifecycle.plan import APPLIED_ON_RESUME, describe, differing_keys, flatten

log = logging.getLogger("treernn")


# ---------------------------------------------------------------- what a resume may change
def check_resume_config(
    info: CheckpointInfo, config: dict[str, Any], module_shapes: dict[str, tuple[int, ...]]
) -> None:
    """Refuse overrides that the restored state would silently undo (the keys whose new values
    are applied to the restored optimizer / scheduler are the plan's ``apply_on_resume``)."""
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


class ResumeOverrides(Callback):
    """Applies the new optimizer / scheduler settings to the state restored from a checkpoint."""

    def __init__(self, config: dict[str, Any], keys: list[str]) -> None:
        self.config = config
        self.keys = keys

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        applied = apply_resumed_overrides(trainer, self.config, self.keys)
        if applied and trainer.is_global_zero:
            log.info("resumed with new settings applied: %s", ", ".join(applied))


# ----------------------------------------------------------------------------- mode=test
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
