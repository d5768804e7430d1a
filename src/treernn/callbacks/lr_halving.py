"""Learning-rate halving on a validation plateau (Mikolov et al. 2010), as Zhang et al. 2016 do.

Top-down Tree LSTM, Section 3.1: start at lr 1.0; once the validation log-likelihood improves by
less than ``min_relative_improvement`` (0.01% relative) in an epoch, halve the learning rate after
every epoch from then on; stop training at the next epoch that again misses the threshold.

The monitored value is a loss-like quantity (``mode="min"``). With ``log_of_monitor=True`` the
callback compares log(value): monitoring ``val/ppl`` then compares the per-word negative
log-likelihood, which is what the paper's criterion is about.

Its state (best value, halving, and whether it stopped training) is in the checkpoints: a run
interrupted after the rule stopped it (while it tests the best weights) stops again at once when
it is resumed, instead of training on.
"""

from __future__ import annotations

import logging
import math

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback

from treernn.errors import ConfigValueError

log = logging.getLogger(__name__)


class LearningRateHalving(Callback):
    def __init__(
        self,
        monitor: str = "val/ppl",
        min_relative_improvement: float = 1e-4,
        factor: float = 0.5,
        log_of_monitor: bool = True,
        stop: bool = True,
    ) -> None:
        if not 0.0 < factor < 1.0:
            raise ConfigValueError(f"factor={factor}: the learning rate must shrink, e.g. 0.5")
        self.monitor = monitor
        self.min_relative_improvement = min_relative_improvement
        self.factor = factor
        self.log_of_monitor = log_of_monitor
        self.stop = stop
        self.best: float | None = None
        self.halving = False
        self.stopped = False

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.stopped:  # resumed from a checkpoint taken after the rule stopped training
            log.info("%s had stopped training before this resume: stopping again", self.monitor)
            trainer.should_stop = True

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking or self.monitor not in trainer.callback_metrics:
            return
        value = float(trainer.callback_metrics[self.monitor])
        if self.log_of_monitor:
            value = math.log(max(value, 1e-12))
        improved = self.best is None or (
            self.best - value > self.min_relative_improvement * abs(self.best)
        )
        if self.best is None or value < self.best:
            self.best = value
        if not improved:
            if self.halving and self.stop:
                log.info("%s missed the threshold again: stopping", self.monitor)
                trainer.should_stop = self.stopped = True
                return
            self.halving = True
        if self.halving:
            for optimizer in trainer.optimizers:
                for group in optimizer.param_groups:
                    group["lr"] *= self.factor
            log.info("learning rate halved to %s", trainer.optimizers[0].param_groups[0]["lr"])

    def state_dict(self) -> dict:
        return {"best": self.best, "halving": self.halving, "stopped": self.stopped}

    def load_state_dict(self, state_dict: dict) -> None:
        self.best = state_dict["best"]
        self.halving = state_dict["halving"]
        self.stopped = state_dict.get("stopped", False)  # checkpoints before 2026-11-27
