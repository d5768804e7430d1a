"""Stop on a signal between two training batches, with a checkpoint to resume from.

- SIGINT (Ctrl-C) and SIGTERM (``kill``, ``scancel``, a preemption): at the end of the current
  training batch ``last.ckpt`` is written and the run stops with
  :class:`~treernn.errors.RunInterrupted`; ``treernn.run`` records it as ``interrupted`` and exits
  with 130 / 143. ``ckpt_path=last`` continues it exactly. A second signal stops at once, without
  a checkpoint (the previous ``last.ckpt`` stays).
- SLURM's requeue signal (``requeue_signal``, USR2 by default, when Lightning's SLURM environment
  has auto-requeue): at the end of the current batch Lightning's own handler saves
  ``hpc_ckpt_N.ckpt`` and runs ``scontrol requeue``; this attempt ends with :class:`Requeued`.

Lightning would act on a signal where it lands: Ctrl-C mid-step ends in ``sys.exit(1)`` with no
checkpoint, SIGTERM exits with status 0, and its requeue handler saves in the middle of an
optimizer step. Here a signal only sets a flag; the save happens where the weights, the loop
state and the data position agree. Every rank of a DDP job agrees on the batch to stop at.
"""

from __future__ import annotations

import logging
import signal
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer

from treernn.callbacks.checkpoint import LastCheckpoint, ends_epoch
from treernn.errors import RunInterrupted

log = logging.getLogger("treernn")

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Requeued(Exception):
    """The SLURM job saved its state and asked to be requeued; this attempt ends here."""


def raise_interrupted(signum: int, frame: Any = None) -> None:
    """A signal handler for the stages with nothing to save (setting up, testing): stop now."""
    name = signal.Signals(signum).name
    raise RunInterrupted(f"stopped by {name} before training started or after it ended", signum)


def install_immediate_handlers() -> None:
    """SIGINT and SIGTERM stop the process at once with :class:`RunInterrupted` (main thread)."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, raise_interrupted)


class GracefulStop(Callback):
    def __init__(self, last: LastCheckpoint | None, requeue_signal: int | None = None) -> None:
        self.last = last
        self.requeue_signal = requeue_signal
        self.pending: int | None = None  # the signal that asked to stop
        self._previous: dict[int, Any] = {}
        self._lightning_requeue: Any = None

    # ---------------------------------------------------------------------------- handlers
    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        # Lightning has registered its handlers by now (SIGTERM, and the requeue signal under
        # SLURM); keep its requeue handler to call between batches, and take the signals over
        signals = list(STOP_SIGNALS)
        if self.requeue_signal is not None:
            self._lightning_requeue = signal.getsignal(self.requeue_signal)
            signals.append(self.requeue_signal)
        for signum in signals:
            self._previous[signum] = signal.getsignal(signum)
            signal.signal(signum, self._flag)

    def _flag(self, signum: int, frame: Any) -> None:
        if self.pending is not None and signum in STOP_SIGNALS:
            name = signal.Signals(signum).name
            raise RunInterrupted(
                f"stopped at once by a second signal ({name}); the previous checkpoint stays "
                "(resume with ckpt_path=last)",
                signum,
            )
        self.pending = signum
        if signum in STOP_SIGNALS:
            name = signal.Signals(signum).name
            print(
                f"\n{name} received: stopping after this training batch with a checkpoint "
                "(send it again to stop at once)",
                flush=True,
            )

    def _restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._restore()

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, error: BaseException):
        self._restore()

    # ---------------------------------------------------------------------------- stopping
    def on_train_batch_end(self, trainer: Trainer, *args: Any) -> None:
        # every rank gets a signal from srun or scancel, not necessarily within the same batch;
        # one that arrives on any rank stops all of them here
        if not trainer.strategy.reduce_boolean_decision(self.pending is not None, all=False):
            return
        if ends_epoch(trainer) and self.pending in STOP_SIGNALS:
            # the epoch's validation and checkpoints come after this batch: let them run and
            # stop after the next batch (or, if training ends here, before testing: treernn.run)
            return
        pending = torch.tensor(float(self.pending or 0), device=trainer.strategy.root_device)
        signum = int(trainer.strategy.reduce(pending, reduce_op="max"))
        self.pending = None
        where = f"epoch {trainer.current_epoch}, step {trainer.global_step}"
        if signum == self.requeue_signal and callable(self._lightning_requeue):
            log.info("requeue signal received: saving a checkpoint and requeueing the SLURM job")
            self._lightning_requeue(signum, None)
            # SLURM ends this job now. Stop before anything else is written: the epoch's end
            # would save last.ckpt and validate a half-trained epoch
            raise Requeued(
                f"requeued at {where}: the requeued job continues in this run directory from "
                "its hpc_ckpt_*.ckpt"
            )
        name = signal.Signals(signum).name
        if self.last is None:  # trainer.enable_checkpointing=false
            raise RunInterrupted(f"interrupted by {name} at {where} (checkpointing off)", signum)
        path = self.last.save(trainer)
        raise RunInterrupted(
            f"interrupted by {name} at {where}; saved {path}; resume with ckpt_path=last",
            signum,
        )
