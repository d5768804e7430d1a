"""The plateau scheduler of every task steps once per epoch in which a validation ran: worked out
by hand for validation every N updates with N longer than an epoch (the tables' ListOps budget),
where Lightning alone stops at the first epoch end (no metric yet) or steps again on a stale one."""

from __future__ import annotations

import functools

import lightning.pytorch as pl
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from treernn.tasks.base import Task


class ConstantTask(Task):
    """A task whose validation metric never improves: with patience 0, every step of the plateau
    scheduler after its first halves the learning rate."""

    def __init__(self) -> None:
        super().__init__(
            optimizer=functools.partial(torch.optim.SGD, lr=0.8),
            scheduler=functools.partial(
                torch.optim.lr_scheduler.ReduceLROnPlateau, mode="max", factor=0.5, patience=0
            ),
            monitor="val/acc",
        )
        self.encoder = nn.Linear(2, 1)
        self.lr_at_validation: list[float] = []

    def training_step(self, batch, batch_idx):
        return self.encoder(batch[0]).pow(2).mean()

    def validation_step(self, batch, batch_idx):
        self.log("val/acc", 0.5)

    def on_validation_epoch_end(self) -> None:
        super().on_validation_epoch_end()  # the task counts its validations here
        if not self.trainer.sanity_checking:
            self.lr_at_validation.append(self.optimizers().param_groups[0]["lr"])


def fit(tmp_path, **trainer_args) -> ConstantTask:
    data = DataLoader(TensorDataset(torch.randn(20, 2)), batch_size=2)  # 10 updates an epoch
    task = ConstantTask()
    trainer = pl.Trainer(
        default_root_dir=tmp_path,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **trainer_args,
    )
    trainer.fit(task, data, data)
    return task


@pytest.mark.filterwarnings("ignore:.*ReduceLROnPlateau conditioned on metric")
def test_validation_every_15_updates_with_10_update_epochs(tmp_path):
    # validations after updates 15, 30, 45 and 60; epochs end after 10, 20, ..., 60. One step per
    # epoch with a new validation: epoch 2 (the first value, from update 15), 3 (halve: 0.4),
    # 5 (0.2), 6 (0.1); epochs 1 and 4 have none (stepping epoch 4 on update 30's value again
    # would end at 0.05)
    task = fit(tmp_path, max_steps=60, val_check_interval=15, check_val_every_n_epoch=None)
    assert task._validations == 4
    assert task.lr_at_validation == pytest.approx([0.8, 0.8, 0.4, 0.2])
    assert task.optimizers().param_groups[0]["lr"] == pytest.approx(0.1)


def test_validation_every_epoch_steps_every_epoch(tmp_path):
    # 4 epochs, 4 validations, each before its epoch's step: the first step sets the best value,
    # the next three each halve
    task = fit(tmp_path, max_epochs=4)
    assert task._validations == 4
    assert task.lr_at_validation == pytest.approx([0.8, 0.8, 0.4, 0.2])
    assert task.optimizers().param_groups[0]["lr"] == pytest.approx(0.1)
