"""Stop a run that diverged, with one clear line and a non-zero exit, before it writes a checkpoint.

Four signs, each checked where it appears:
- a non-finite training loss (any step);
- a training loss far above where it started: above ``loss_factor`` times the mean of the first
  ``reference_steps`` losses for ``patience`` steps in a row (e.g. lr=1e6 with gradient clipping
  keeps the loss finite but around 6.6e3 on PTB, from 9.2);
- a loss worse than knowing nothing: the task names the metrics that a model predicting the
  uniform distribution over its outputs would score (``Task.chance_levels``: ln V nats per word and
  a perplexity of V for a language model over V words, ln C per example for C classes). A training
  loss above that level by ``chance_margin`` (``max(chance_margin * level, min_chance_margin)``
  nats) for ``chance_patience`` steps in a row is a model that unlearned; so is a validation
  metric above it by the same margin while the training loss agrees (the mean of its last
  ``chance_patience`` values above the level: fewer updates are too few to judge; a task
  without a training level: after ``chance_patience`` updates). A fresh model starts at the level
  itself (its loss is ln V give or take a few hundredths), hence the margin, and a few noisy
  batches reset the count. A GRU on
  the PTB recipe at lr 30 went from 9.2 to 22.6 (validation perplexity 1.7e14), while its loss
  never rose to 10x its start and there was no earlier validation to compare with. The training
  loss must agree because a healthy model can validate worse than uniform for a moment: ON-LSTM
  on the PTB recipe validated at perplexity 9.6e5 after 3 updates of lr 30 (``trainer=smoke``)
  while its training loss fell from 9.2 to 7.9. The validation loss of a classifier is not
  checked: an overconfident classifier that still classifies well can score worse than ln C;
- a non-finite validation metric, or (for a metric to minimise, such as perplexity) one above
  ``metric_factor`` times the best so far.
The check of the validation metric runs before any checkpoint callback (Lightning runs those last),
so nothing is saved from the diverged weights.
"""

from __future__ import annotations

import math
from collections import deque
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
        chance_margin: float = 0.1,
        min_chance_margin: float = 0.25,
        chance_patience: int = 20,
    ) -> None:
        if mode not in ("min", "max"):
            raise ConfigValueError(f"mode={mode!r}: use 'min' or 'max'")
        self.monitor = monitor
        self.mode = mode
        self.loss_factor = loss_factor
        self.reference_steps = reference_steps
        self.patience = patience
        self.metric_factor = metric_factor
        self.chance_margin = chance_margin
        self.min_chance_margin = min_chance_margin
        self.chance_patience = chance_patience
        self._first_losses: list[float] = []
        self._high_steps = 0
        self._best: float | None = None
        #: metric key -> the uniform distribution's score in nats (from the task, at setup)
        self._chance: dict[str, float] = {}
        self._above_chance_steps = 0
        #: the last chance_patience values of each training metric with a level (nats)
        self._recent: dict[str, deque[float]] = {}

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        # a module that is not a treernn task (one a user brings) has no chance levels to check
        levels = pl_module.chance_levels() if hasattr(pl_module, "chance_levels") else {}
        self._chance = {key: _nats(key, level) for key, level in levels.items()}
        training = [key for key in self._chance if key.startswith("train/")]
        self._recent = {key: deque(maxlen=self.chance_patience) for key in training}

    def chance_threshold(self, key: str) -> float:
        """The score (nats) above which ``key`` is clearly worse than the uniform distribution."""
        level = self._chance[key]
        return level + max(self.chance_margin * level, self.min_chance_margin)

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
        self._check_training_chance(trainer, where)
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

    def _check_training_chance(self, trainer: pl.Trainer, where: str) -> None:
        values = {key: trainer.callback_metrics.get(key) for key in self._recent}
        for key, value in values.items():
            if value is not None:
                self._recent[key].append(_nats(key, float(value)))
        above = [
            key
            for key, value in values.items()
            if value is not None and _nats(key, float(value)) > self.chance_threshold(key)
        ]
        self._above_chance_steps = self._above_chance_steps + 1 if above else 0
        if self._above_chance_steps >= self.chance_patience:
            key = above[0]
            raise DivergedError(
                f"training diverged: {key} has been above {self.chance_threshold(key):.4g} for "
                f"{self.chance_patience} steps, now {float(values[key]):.4g} at {where}: worse "
                f"than predicting the uniform distribution ({self._chance[key]:.4g}); "
                f"{_LOWER_THE_RATE}"
            )

    def _training_agrees(self, trainer: pl.Trainer) -> bool:
        """The training loss is worse than uniform too (see the module docstring)."""
        if not self._recent:
            return trainer.global_step >= self.chance_patience
        return any(
            len(values) == self.chance_patience and sum(values) / len(values) > self._chance[key]
            for key, values in self._recent.items()
        )

    def _check_validation_chance(self, trainer: pl.Trainer, where: str) -> None:
        if not self._training_agrees(trainer):
            return
        for key in self._chance:
            value = trainer.callback_metrics.get(key)
            if not key.startswith("val/") or value is None or not math.isfinite(float(value)):
                continue  # a non-finite value has its own message (below)
            if _nats(key, float(value)) > self.chance_threshold(key):
                uniform = _from_nats(key, self._chance[key])
                raise DivergedError(
                    f"training diverged: {key} is {float(value):.4g} {where}, worse than "
                    f"predicting the uniform distribution ({uniform:.4g}), and so is the "
                    f"training loss; {_LOWER_THE_RATE}"
                )

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        self._check_validation_chance(trainer, f"after epoch {trainer.current_epoch}")
        if self.monitor not in trainer.callback_metrics:
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


_LOWER_THE_RATE = (
    "lower the learning rate (task.module.optimizer.lr, or the model's own: recipe.<task>.lr in "
    "conf/model/<model>.yaml). No checkpoint was written from the diverged weights"
)


def _nats(key: str, value: float) -> float:
    """A loss is in nats already; a perplexity (``*/ppl``) is exp(loss)."""
    if not key.endswith("ppl"):
        return value
    return math.log(value) if value > 0 else -math.inf


def _from_nats(key: str, nats: float) -> float:
    return math.exp(nats) if key.endswith("ppl") else nats
