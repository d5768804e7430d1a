"""``last.ckpt``: the newest state of a run, written after every validation (and at the end of
every epoch when validation runs by epochs), whatever the monitored metric did, and, with
``checkpoint_minutes`` set, also at the first training batch's end after that many minutes
without a save: a run killed without warning (SIGKILL, a lost node, a machine taken back) loses
at most those minutes, however far apart its validations are.

Lightning's ``ModelCheckpoint(save_last=True)`` writes ``last.ckpt`` only beside a new top-k file,
so a run whose monitored metric stopped improving kept a stale ``last.ckpt``, and a resume
retrained finished epochs. Here ``ModelCheckpoint`` keeps the best checkpoint (by the task's
monitor) and this callback keeps the last one. Both write through the trainer's checkpoint IO
(`treernn.checkpoints.AtomicCheckpointIO`): a temporary file in the same directory, then a
rename. Nothing is saved from diverged weights: `treernn.callbacks.divergence.
DivergenceMonitor` stops the run before any checkpoint callback runs (Lightning runs checkpoint
callbacks last).

`BestCheckpoint` is Lightning's ``ModelCheckpoint`` for a run that moves: a job resumed in
another directory (a sweep restored from its archive on another machine, or from another
worktree) keeps its best score and its best file, where Lightning's own callback, seeing another
``dirpath``, forgets the score and reloads a ``best_model_path`` that names the old directory.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import Checkpoint, ModelCheckpoint
from lightning.pytorch.utilities import rank_zero_warn

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
    def __init__(self, dirpath: str | Path, every_minutes: float | None = None) -> None:
        self.dirpath = Path(dirpath)
        if every_minutes is not None and not every_minutes > 0:
            raise ValueError(f"every_minutes={every_minutes}: a positive number of minutes")
        self.every_s = None if every_minutes is None else 60.0 * every_minutes
        self._saved_at = time.monotonic()

    @property
    def path(self) -> Path:
        return self.dirpath / LAST_NAME

    def save(self, trainer: Trainer) -> Path:
        """Write ``last.ckpt`` now (every rank calls this; rank 0 writes)."""
        trainer.save_checkpoint(self.path, weights_only=False)
        self._saved_at = time.monotonic()
        return self.path

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._saved_at = time.monotonic()  # setting up (data, kernel probes) is not training

    def on_train_batch_end(self, trainer: Trainer, *args: Any) -> None:
        if self.every_s is None:
            return
        # not at an epoch's end (Lightning resumes from there one batch off) nor before a due
        # validation (resumed past it, the run would never run it): the next batch's end then
        if ends_epoch(trainer) or validates_after(trainer):
            return
        due = time.monotonic() - self._saved_at >= self.every_s
        # the ranks of a DDP job save together: any rank's clock decides for all of them
        if trainer.strategy.reduce_boolean_decision(due, all=False):
            # the loggers' buffered rows first (the CSV logger writes every 100 steps): killed
            # after this save, the run resumes here with the rows logged before it on disk
            # (the epoch's learning rate, logged at its start, was lost otherwise)
            for logger in trainer.loggers:
                logger.save()
            self.save(trainer)

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


class BestCheckpoint(ModelCheckpoint):
    """``ModelCheckpoint`` whose state follows the run to another directory.

    Restored with another ``dirpath`` than it was saved with, the paths it keeps (best, k-th
    best, last, the top k) are read as the same file names in this ``dirpath``, and the scores
    are kept: a later validation replaces the best only if it is better, and a test of the
    "best" checkpoint reads the best before the move. A best file that the new directory lacks
    (a copy that kept only the newest checkpoint) is not taken for a checkpoint: the score is
    forgotten with a warning, so that the next validation writes a best file again.
    """

    def _generate_state_key(self, **kwargs: Any) -> str:
        # Lightning's own name: checkpoints written with either callback restore into the other
        return f"ModelCheckpoint{kwargs!r}"

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        saved_dir = state_dict.get("dirpath", self.dirpath)
        if saved_dir and self.dirpath and saved_dir != self.dirpath:
            state_dict = _moved(state_dict, Path(saved_dir), Path(self.dirpath))
            state_dict["dirpath"] = self.dirpath
        super().load_state_dict(state_dict)
        best = self.best_model_path
        if best and not Path(best).is_file():
            score = (
                "none" if self.best_model_score is None else f"{float(self.best_model_score):.6g}"
            )
            rank_zero_warn(
                f"the best checkpoint {best} (score {score}) is not in {self.dirpath}: the best "
                "of the validations from here on is kept instead"
            )
            self.best_model_score, self.best_model_path = None, ""
            self.best_k_models, self.kth_best_model_path = {}, ""
            self.kth_value = torch.tensor(torch.inf if self.mode == "min" else -torch.inf)


def _moved(state: dict[str, Any], old: Path, new: Path) -> dict[str, Any]:
    """``state`` with every path under ``old`` named under ``new`` instead."""

    def move(path: Any) -> Any:
        if not path:
            return path
        try:
            return str(new / Path(path).relative_to(old))
        except ValueError:  # not under the old directory: kept as it is
            return path

    moved = dict(state)
    for key in ("best_model_path", "kth_best_model_path", "last_model_path"):
        if key in moved:
            moved[key] = move(moved[key])
    if moved.get("best_k_models"):
        moved["best_k_models"] = {move(k): v for k, v in moved["best_k_models"].items()}
    return moved
