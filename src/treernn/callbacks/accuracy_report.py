"""Accuracy per length after testing (logic, ListOps): the text tables, ``test_results.json`` and a
plot like ON-LSTM's Fig. 3 (test accuracy against number of operators, trained on <= 6 operators).

`AccuracyReport` (in ``conf/task/{logic,listops}.yaml``) prints the per-length table after
testing and writes ``test_results.json`` and ``accuracy_by_length.png`` into the run directory
(and to wandb when a wandb logger is attached). ``python -m treernn report accuracy`` draws several
runs' files in one figure with the same functions.
"""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback

from treernn.reporting.accuracy import accuracy_table, write_report


class AccuracyReport(Callback):
    """After testing: print the per-length table, write json + png, log them to wandb."""

    def __init__(self, output_dir: str | Path, label: str = "model") -> None:
        self.output_dir = Path(output_dir)
        self.label = label

    def on_test_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        results = getattr(pl_module, "test_results", None)
        if not results or not trainer.is_global_zero:
            return
        print(
            "\n" + accuracy_table(results, title=f"test accuracy (%) of {self.label}"), flush=True
        )
        json_path, png_path = write_report(results, self.output_dir, self.label)
        for logger in trainer.loggers:
            if type(logger).__name__ == "WandbLogger":
                import wandb

                logger.experiment.log({"test/accuracy_by_length": wandb.Image(str(png_path))})
                logger.experiment.save(str(json_path), base_path=str(self.output_dir))
