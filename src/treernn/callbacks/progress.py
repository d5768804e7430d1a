"""A progress bar that knows how long a streamed epoch is.

Lightning cannot know the length of an iterable loader (the PTB stream's batch count changes from
epoch to epoch with variable BPTT) and shows ``0/?``. A loader that can tell the coming epoch's
length (``epoch_length()``) gets a bar with its total.
"""

from __future__ import annotations

import math

from lightning.pytorch.callbacks import TQDMProgressBar


class ProgressBar(TQDMProgressBar):
    @property
    def total_train_batches(self) -> int | float:
        total = super().total_train_batches
        loader = self.trainer.train_dataloader
        if not math.isinf(total) or not hasattr(loader, "epoch_length"):
            return total
        length = loader.epoch_length()
        limit = self.trainer.limit_train_batches
        if isinstance(limit, int):
            return min(length, limit)
        return int(length * limit) if limit < 1.0 else length
