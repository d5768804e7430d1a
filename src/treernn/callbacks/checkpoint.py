"""Checkpoints that only keep good states: a checkpoint is written only when its monitored metric is
finite, so ``best`` never points at an inf/NaN score and ``last.ckpt`` is never a diverged model.

Lightning writes each checkpoint to a temporary file and renames it into place, so a run killed
while saving leaves the previous file whole.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from lightning.pytorch.callbacks import ModelCheckpoint

log = logging.getLogger("treernn")


class FiniteModelCheckpoint(ModelCheckpoint):
    """``ModelCheckpoint`` that skips saving while the monitored metric is NaN or infinite."""

    def _monitored_is_finite(self, monitor_candidates: dict[str, Any]) -> bool:
        if self.monitor is None or self.monitor not in monitor_candidates:
            return True
        value = float(monitor_candidates[self.monitor])
        if math.isfinite(value):
            return True
        log.warning("not saving a checkpoint: %s is %s", self.monitor, value)
        return False

    def _save_topk_checkpoint(self, trainer, monitor_candidates) -> None:
        if self._monitored_is_finite(monitor_candidates):
            super()._save_topk_checkpoint(trainer, monitor_candidates)

    def _save_last_checkpoint(self, trainer, monitor_candidates) -> None:
        if self._monitored_is_finite(monitor_candidates):
            super()._save_last_checkpoint(trainer, monitor_candidates)
