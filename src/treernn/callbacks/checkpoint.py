"""``last.ckpt``: the newest state of a run, written after every validation (and at the end of
every epoch when validation runs by epochs), whatever the monitored metric did.

Lightning's ``ModelCheckpoint(save_last=True)`` writes ``last.ckpt`` only beside a new top-k file,
so a run whose monitored metric stopped improving kept a stale ``last.ckpt``, and a resume
retrained finished epochs. Here ``ModelCheckpoint`` keeps the best checkpoint (by the task's
monitor) and this callback keeps the last one. Both write through the trainer's checkpoint IO
(:class:`treernn.checkpoints.AtomicCheckpointIO`): a temporary file in the same directory, then a
rename. Nothing is saved from diverged weights: :class:`~treernn.callbacks.divergence.
DivergenceMonitor` stops the run before any checkpoint callback runs (Lightning runs checkpoint
callbacks last).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import Checkpoint

LAST_NAME = "last.ckpt"


def ends_epoch(trainer: Trainer) -> bool:
    """True at the last training batch of an epoch (or of the run's ``max_steps``)."""
    last_step = 0 < trainer.max_steps <= trainer.global_step
    return last_step or bool(trainer.is_last_batch)


def validates_after(trainer: Trainer) -> bool:
    """True where a validation runs right after this training batch (Lightning's own test, asked
    at the batch's end). A checkpoint taken there, before that validation, resumes past it:
    Lightning's restarted loop counts the validation as done and never runs it (the run then has
    one validation fewer, and its plateau scheduler one observation fewer, than without the
    stop)."""
    loop = trainer.fit_loop
    return bool(loop.epoch_loop._should_check_val_fx(loop._data_fetcher))


def validates_by_epochs(trainer: Trainer) -> bool:
    """True when validation runs at the end of epochs (not every N updates)."""
    return trainer.check_val_every_n_epoch is not None and trainer.val_check_interval == 1.0


class LastCheckpoint(Checkpoint):
    def __init__(self, dirpath: str | Path) -> None:
        self.dirpath = Path(dirpath)

    @property
    def path(self) -> Path:
        return self.dirpath / LAST_NAME

    def save(self, trainer: Trainer) -> Path:
        """Write ``last.ckpt`` now (every rank calls this; rank 0 writes)."""
        trainer.save_checkpoint(self.path, weights_only=False)
        return self.path

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.sanity_checking or trainer.state.fn != "fit":
            return
        # validation by epochs: the save at the epoch's end waits for on_train_epoch_end, where
        # Lightning counts the epoch as done
        if not (validates_by_epochs(trainer) and ends_epoch(trainer)):
            self.save(trainer)

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        # validation by updates (the tables): checkpoints at validations only. Lightning resumes
        # from the end of an epoch that had no validation one batch off (it trains a batch of
        # the next epoch as the last of this one), so no checkpoint is taken there
        if validates_by_epochs(trainer):
            self.save(trainer)

    def state_dict(self) -> dict[str, Any]:
        return {"path": str(self.path)}
