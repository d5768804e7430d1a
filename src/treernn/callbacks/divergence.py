"""Stop a run that diverged, with one clear line and a non-zero exit, before it writes a checkpoint.

Three signs, each checked where it appears:
- a non-finite training loss (any step);
- a training loss far above where it started: above ``loss_factor`` times the mean of the first
  ``reference_steps`` losses for ``patience`` steps in a row (e.g. lr=1e6 with gradient clipping
  keeps the loss finite but around 6.6e3 on PTB, from 9.2);
- a non-finite validation metric, or (for a metric to minimise, such as perplexity) one above
  ``metric_factor`` times the best so far.
The check of the validation metric runs before any checkpoint callback (Lightning runs those last),
so nothing is saved from the diverged weights.
"""

from __future__ import annotations

import math
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback

from treernn.errors import ConfigValueError, DivergedError


class DivergenceMonitor(Callback):
    def __init__(
        self,
        monitor: str,
        mode: str = "min",
        loss_factor: float = 10.0,
        reference_steps: int = 10,
        patience: int = 10,
        metric_factor: float = 100.0,
    ) -> None:
        if mode not in ("min", "max"):
            raise ConfigValueError(f"mode={mode!r}: use 'min' or 'max'")
        self.monitor = monitor
        self.mode = mode
        self.loss_factor = loss_factor
        self.reference_steps = reference_steps
        self.patience = patience
        self.metric_factor = metric_factor
        self._first_losses: list[float] = []
        self._high_steps = 0
        self._best: float | None = None

    @property
    def reference_loss(self) -> float | None:
        if len(self._first_losses) < self.reference_steps:
            return None
        return sum(self._first_losses) / len(self._first_losses)

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch, batch_idx
    ) -> None:
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if loss is None:
            return
        value = float(loss.detach())
        where = f"epoch {trainer.current_epoch}, step {trainer.global_step}"
        if not math.isfinite(value):
            raise DivergedError(
                f"training diverged: the loss is {value} at {where}; lower the learning rate "
                "or clip gradients (trainer.gradient_clip_val). No checkpoint was written from "
                "the diverged weights"
            )
        reference = self.reference_loss
        if reference is None:
            self._first_losses.append(value)
            return
        if reference > 0 and value > self.loss_factor * reference:
            self._high_steps += 1
        else:
            self._high_steps = 0
        if self._high_steps >= self.patience:
            raise DivergedError(
                f"training diverged: the loss has been above {self.loss_factor:g}x its starting "
                f"value ({reference:.4g}) for {self.patience} steps, now {value:.4g} at {where}; "
                "lower the learning rate. No checkpoint was written from the diverged weights"
            )

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking or self.monitor not in trainer.callback_metrics:
            return
        value = float(trainer.callback_metrics[self.monitor])
        where = f"after epoch {trainer.current_epoch}"
        if not math.isfinite(value):
            raise DivergedError(
                f"training diverged: {self.monitor} is {value} {where}; lower the learning rate. "
                "No checkpoint was written from the diverged weights"
            )
        exploded = (
            self.mode == "min"
            and self._best is not None
            and self._best > 0
            and value > self.metric_factor * self._best
        )
        if exploded:
            raise DivergedError(
                f"training diverged: {self.monitor} rose to {value:.4g} {where}, over "
                f"{self.metric_factor:g}x its best ({self._best:.4g}); lower the learning "
                "rate. No checkpoint was written from the diverged weights"
            )
        better = self._best is None or (
            value < self._best if self.mode == "min" else value > self._best
        )
        if better:
            self._best = value

    def state_dict(self) -> dict[str, Any]:
        return {"first_losses": self._first_losses, "best": self._best}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._first_losses = list(state_dict.get("first_losses", []))
        self._best = state_dict.get("best")
