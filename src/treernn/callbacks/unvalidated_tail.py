"""Say when training ended with updates that no validation saw.

The test of a ``fit+test`` run takes the best validated checkpoint, so updates made after the last
validation are trained but never tested: with ``trainer.max_steps=3400`` on PTB (1,383 updates per
epoch, validation at each epoch's end) the last 646 updates are thrown away without a word. This
callback names the steps and the settings that make the budget end on a validation, in one warning
that the executor (``treernn.lifecycle.execute``) logs after ``fit`` when the run goes on to test
the best checkpoint. The step of the last validation is kept in the checkpoint, so a resumed run
knows it too.
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback


class UnvalidatedTail(Callback):
    def __init__(self) -> None:
        self.validated_step: int | None = None

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            self.validated_step = trainer.global_step

    def message(self, step: int) -> str | None:
        """The warning for training that ended at ``step``, or None when its last update was
        validated (or nothing was: the test then takes the final weights)."""
        if self.validated_step is None or step <= self.validated_step:
            return None
        untested = step - self.validated_step
        return (
            f"training ended at step {step}, {untested} update{'s' if untested > 1 else ''} "
            f"after the last validation (step {self.validated_step}): the test takes the best "
            "validated checkpoint, so those updates are not tested. For a budget that ends on a "
            "validation, give trainer.max_epochs, or trainer.max_steps a multiple of "
            "trainer.val_check_interval"
        )

    def state_dict(self) -> dict[str, Any]:
        return {"validated_step": self.validated_step}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.validated_step = state_dict.get("validated_step")
