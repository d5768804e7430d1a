"""Non-monotonically triggered averaged SGD (NT-ASGD, Merity et al. 2018, Algorithm 1).

Training runs plain SGD. After each validation of an SGD epoch, once the validation loss is worse
than the best of all but the last ``nonmono`` validations, the run switches to averaged SGD: from
then on the callback keeps the running mean of the parameters after every optimizer step, and
validation, test and the exported weights use that mean.

AWD-LSTM switches to ``torch.optim.ASGD(lr, t0=0, lambd=0)``. With ``lambd=0`` its step is the plain
SGD step (the learning rate never decays) and with ``t0=0`` its average is the uniform mean of the
iterates since the switch, so keeping the SGD optimizer and averaging here is the same algorithm.

``finetune_epoch`` (the ON-LSTM script's ``--finetuning``, 500 there; off by default) builds a fresh
averaged optimiser at the start of that epoch: averaging starts over from the current weights,
whether or not the non-monotone trigger has fired.
"""

from __future__ import annotations

import math
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback


def should_switch(history: list[float], val_loss: float, nonmono: int) -> bool:
    """AWD-LSTM's rule: over ``nonmono`` past validations, and worse than the best before them."""
    return len(history) > nonmono and val_loss > min(history[:-nonmono])


class NTASGD(Callback):
    def __init__(
        self,
        nonmono: int = 5,
        monitor: str = "val/ppl",
        enabled: bool = True,
        finetune_epoch: int | None = None,
    ) -> None:
        self.nonmono, self.monitor, self.enabled = nonmono, monitor, enabled
        self.finetune_epoch = finetune_epoch
        self.history: list[float] = []  # validation losses of the SGD epochs
        self.averaging = False
        self.n_averaged = 0
        self.averaged: dict[str, torch.Tensor] = {}
        self._backup: dict[str, torch.Tensor] | None = None

    # --------------------------------------------------------------- averaging
    def start_averaging(self, pl_module: pl.LightningModule) -> None:
        self.averaging, self.n_averaged = True, 0
        self.averaged = {n: p.detach().clone() for n, p in pl_module.named_parameters()}

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if not self.averaging:
            return
        self.n_averaged += 1
        with torch.no_grad():
            for name, param in pl_module.named_parameters():
                average = self.averaged[name]
                average.add_(param.detach() - average, alpha=1.0 / self.n_averaged)

    def _swap_in(self, pl_module: pl.LightningModule) -> None:
        if self.averaging and self.n_averaged and self._backup is None:
            params = dict(pl_module.named_parameters())
            self._backup = {n: p.detach().clone() for n, p in params.items()}
            with torch.no_grad():
                for name, average in self.averaged.items():
                    params[name].copy_(average)

    def _swap_out(self, pl_module: pl.LightningModule) -> None:
        if self._backup is not None:
            with torch.no_grad():
                for name, param in pl_module.named_parameters():
                    param.copy_(self._backup[name])
            self._backup = None

    # --------------------------------------------------------------- hooks
    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.enabled and trainer.current_epoch == self.finetune_epoch:
            pl_module.print(
                f"NT-ASGD: fine-tuning from epoch {trainer.current_epoch}: averaging restarts"
            )
            self.start_averaging(pl_module)

    def on_validation_epoch_start(self, trainer, pl_module) -> None:
        self._swap_in(pl_module)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._swap_out(pl_module)
        if trainer.sanity_checking or not self.enabled or self.averaging:
            return
        value = trainer.callback_metrics.get(self.monitor)
        if value is None:
            return
        val_loss = math.log(float(value)) if self.monitor.endswith("ppl") else float(value)
        if should_switch(self.history, val_loss, self.nonmono):
            pl_module.print(
                f"NT-ASGD: validation loss {val_loss:.4f} is not improving, switching to ASGD"
            )
            self.start_averaging(pl_module)
        self.history.append(val_loss)

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        pl_module.log("train/asgd", float(self.averaging))

    def on_test_epoch_start(self, trainer, pl_module) -> None:
        self._swap_in(pl_module)

    def on_test_epoch_end(self, trainer, pl_module) -> None:
        self._swap_out(pl_module)

    # --------------------------------------------------------------- state
    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict[str, Any]) -> None:
        if self.averaging and self.n_averaged:
            # the weights evaluation should use, for loaders outside Lightning (tied weights
            # appear under several state-dict keys, so take the module's own state dict)
            swapped = self._backup is None
            self._swap_in(pl_module)
            checkpoint["averaged_state_dict"] = {
                k: v.detach().clone() for k, v in pl_module.state_dict().items()
            }
            if swapped:
                self._swap_out(pl_module)

    def state_dict(self) -> dict[str, Any]:
        return {
            "history": list(self.history),
            "averaging": self.averaging,
            "n_averaged": self.n_averaged,
            "averaged": {n: t.clone() for n, t in self.averaged.items()},
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.history = list(state_dict["history"])
        self.averaging = state_dict["averaging"]
        self.n_averaged = state_dict["n_averaged"]
        self.averaged = dict(state_dict["averaged"])
