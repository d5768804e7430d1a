"""Resuming a run, once the plan (`treernn.lifecycle.plan`) has chosen the checkpoint and
decided what it refuses: the data checked against the checkpoint's once it is read, and the new
optimizer and scheduler values applied to the restored state.
"""

from __future__ import annotations

import logging
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback

from treernn.checkpoints import CheckpointInfo
from treernn.errors import DataError, UserError
from treernn.lifecycle.plan import describe, differing_keys, flatten

log = logging.getLogger("treernn")


# ----------------------------------------------------------------------------- the data
def check_data_as_trained(
    info: CheckpointInfo,
    trained_kwargs: dict[str, Any],
    task_kwargs: dict[str, Any],
    module_shapes: dict[str, tuple[int, ...]],
    config: dict[str, Any],
) -> None:
    """The data a resume reads must give the task the sizes its checkpoint was trained with
    (``trained_kwargs``: the task arguments the checkpoint stored; ``task_kwargs``: the data's;
    ``module_shapes``: the task built with them; ``config``: the resolved config). The model's
    own settings were checked by the planner; the data's sizes are known only once it is read,
    and are checked before the run resumed is written."""
    if module_shapes == info.state_shapes:
        return
    sizes = [
        f"{key} {value} (checkpoint {trained_kwargs.get(key)})"
        for key, value in sorted(task_kwargs.items())
        if isinstance(value, int) and value != trained_kwargs.get(key)
    ]
    changed = differing_keys(info.config, config, ("task.datamodule.",))
    settings = f"these differ: {describe(changed, info.config, config)}" if changed else ""
    raise DataError(
        f"resuming {info.path}: the data gives the model other sizes than its checkpoint was "
        f"trained with ({', '.join(sizes) or 'other task arguments'}); give the run's data "
        f"settings (task.datamodule.*{'; ' + settings if settings else ''}), or start a new run"
    )


# ---------------------------------------------------------------- what a resume changes
def apply_resumed_overrides(trainer: Any, config: dict[str, Any], keys: list[str]) -> list[str]:
    """Set the new optimizer / scheduler values on the state Lightning restored; returns what was
    applied, as ``key=value`` strings. The planner refused what the checkpoint's state cannot
    take (`treernn.lifecycle.plan.check_applicable`); the checks here guard the same rule."""
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
