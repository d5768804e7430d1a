"""Wall time of each training update, as a run takes it: ``callbacks=[default,step_timer]``.

The recurrence benchmarks (``scripts/benchmark_recurrence.py``, ``benchmark_ordered_memory.py``)
time the model alone. What a user asks for with ``trainer.precision=bf16-mixed`` is a whole
Lightning update: embedding, recurrence, decoder, loss, backward, clipping, optimizer. This
callback times that, from the batch's arrival (``on_train_batch_start``, after the loader has
made it) to the end of its optimizer step (on a GPU the device is synchronised at both ends, so
the time is the device's, not the launch queue's). When fitting ends it writes the times to a JSON
file with the machine, the run's precision and the precision each of treernn's products ran in
(as the task reports them).
``scripts/benchmark_training.py`` runs short fits in fp32 and bf16-mixed and compares them.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback

from treernn.files import atomic_write
from treernn.lifecycle import records
from treernn.reporting.timing import step_summary


class StepTimer(Callback):
    """``path``: where the times go (JSON); ``warmup``: leading updates left out of the summary
    (first calls build kernels, probe GEMM back ends and fill caches)."""

    def __init__(self, path: str, warmup: int = 5) -> None:
        if warmup < 0:
            raise ValueError(f"step_timer.warmup must be >= 0, got {warmup}")
        self.path = Path(path)
        self.warmup = warmup
        self.seconds: list[float] = []
        self._started: float | None = None

    @staticmethod
    def _synchronize(pl_module: pl.LightningModule) -> None:
        if pl_module.device.type == "cuda":
            torch.cuda.synchronize(pl_module.device)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._synchronize(pl_module)
        self._started = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self._started is None:
            return
        self._synchronize(pl_module)
        self.seconds.append(time.perf_counter() - self._started)
        self._started = None

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.is_global_zero:
            return
        record: dict[str, Any] = {
            "precision": str(trainer.precision),
            "device": pl_module.device.type,
            "machine": records.machine(),
            "warmup": self.warmup,
            "seconds": self.seconds,
            "summary": step_summary(self.seconds, self.warmup),
            # under bf16-mixed: each product's precision as the probes chose it in this process
            "products": _product_precisions(pl_module),
        }
        text = json.dumps(record, indent=1) + "\n"
        atomic_write(self.path, lambda handle: handle.write(text.encode("utf-8")))


def _product_precisions(pl_module: pl.LightningModule) -> list[list[str]]:
    """A treernn task's report of its products' precisions (`Task.product_precisions`); none
    for a module that keeps no such report."""
    report = getattr(pl_module, "product_precisions", None)
    return report() if report is not None else []
