"""Stop on a signal between two training batches, with a checkpoint to resume from.

- SIGINT (Ctrl-C) and SIGTERM (``kill``, ``scancel``, a preemption): at the end of the current
  training batch ``last.ckpt`` is written and the run stops with
  `treernn.errors.RunInterrupted`; the run entry (``treernn.lifecycle``) records it as
  ``interrupted`` and exits with 130 / 143. ``ckpt_path=last`` continues it exactly. A second signal
  stops at once, without a checkpoint (the previous ``last.ckpt`` stays).
- SLURM's requeue signal (``requeue_signal``, USR2 by default: ``#SBATCH --signal=USR2@120``
  before the time limit, or a preemption notice): at the end of the current batch ``last.ckpt`` is
  written and ``scontrol requeue`` puts the job back in the queue; this attempt ends with
  `treernn.errors.Requeued`, and the job, started again with the same id and directory,
  resumes from that checkpoint. A requeue signal that arrives while the job is still setting up is
  remembered (`treernn.lifecycle.signals.install_immediate_handlers`) and acted on after the
  first batch.

A signal is acted on at a batch's end, but not at the end of an epoch or of a batch after which a
validation is due: that validation runs first and the run stops after the next batch (saved
before a due validation, the run would resume past it without running it; Lightning's restarted
loop counts it as done).

Lightning would act on a signal where it lands: Ctrl-C mid-step ends in ``sys.exit(1)`` with no
checkpoint, SIGTERM exits with status 0, and its requeue handler saves in the middle of an
optimizer step. Here a signal only sets a flag (the handlers: `treernn.lifecycle.signals`);
the save happens where the weights, the loop state and the data position agree. Every rank of a
DDP job agrees on the batch to stop at.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from signal import Signals
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer

from treernn.callbacks.checkpoint import LastCheckpoint, ends_epoch, validates_after
from treernn.errors import Requeued, RunInterrupted
from treernn.lifecycle.signals import PendingStop, requeue_job

log = logging.getLogger("treernn")


class GracefulStop(Callback):
    def __init__(
        self,
        last: LastCheckpoint | None,
        requeue_signal: int | None = None,
        job_id: str | None = None,
        poll: Callable[[], int | None] | None = None,
    ) -> None:
        self.last = last
        #: asked at each batch's end: a signal sent to the run's sweep rather than to the run
        #: (a joblib sweep's stop file, ``treernn.lifecycle.signals.stop_requested``), or None
        self.poll = poll
        self.requeue_signal = requeue_signal
        self.job_id = job_id
        self.signals = PendingStop(requeue_signal)
        self._waited_for_validation = False

    # ---------------------------------------------------------------------------- handlers
    @property
    def pending(self) -> int | None:
        """The signal that asked to stop (its handlers: `PendingStop`)."""
        return self.signals.signum

    @pending.setter
    def pending(self, signum: int | None) -> None:
        self.signals.signum = signum

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.signals.install()

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.signals.restore()

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, error: BaseException):
        # requeued: SLURM answers the requeue with SIGTERM, which may come after this
        self.signals.restore(keep_stop_signals_ignored=isinstance(error, Requeued))

    # ---------------------------------------------------------------------------- stopping
    def on_train_batch_end(self, trainer: Trainer, *args: Any) -> None:
        if self.pending is None and self.poll is not None:
            requested = self.poll()
            # only a request is stored: a signal that landed while the stop file was read has
            # set `pending` meanwhile, and storing the read's None over it lost that signal (a
            # one-worker sweep, whose jobs run in the launching process, then ran on to its end)
            if requested is not None:
                self.pending = requested
        # every rank gets a signal from srun or scancel, not necessarily within the same batch;
        # one that arrives on any rank stops all of them here
        if not trainer.strategy.reduce_boolean_decision(self.pending is not None, all=False):
            return
        if ends_epoch(trainer):
            # the epoch's validation and checkpoints come after this batch: let them run and
            # stop after the next batch (or, if training ends here, before testing: the executor,
            # treernn.lifecycle.execute)
            return
        if validates_after(trainer) and not self._waited_for_validation:
            # saved before the validation due after this batch, the run would resume past it
            # without running it: let it run and stop after the next batch (once: a run that
            # validates after every update stops there anyway)
            self._waited_for_validation = True
            return
        pending = torch.tensor(float(self.pending or 0), device=trainer.strategy.root_device)
        signum = int(trainer.strategy.reduce(pending, reduce_op="max"))
        self.pending = None
        where = f"epoch {trainer.current_epoch}, step {trainer.global_step}"
        if signum == self.requeue_signal and self.job_id is not None:
            log.info("requeue signal received: saving a checkpoint and requeueing the SLURM job")
            path = self.last.save(trainer) if self.last is not None else None
            # SLURM answers the requeue with SIGTERM to this attempt: nothing left to do then
            self.signals.ignore_stop_signals()
            if trainer.is_global_zero:
                requeue_job(self.job_id)
            raise Requeued(
                f"requeued at {where} (SLURM job {self.job_id}): it starts again in this run "
                f"directory and resumes from {path}"
            )
        name = Signals(signum).name
        if self.last is None:  # trainer.enable_checkpointing=false
            raise RunInterrupted(f"interrupted by {name} at {where} (checkpointing off)", signum)
        path = self.last.save(trainer)
        raise RunInterrupted(
            f"interrupted by {name} at {where}; saved {path}; resume with ckpt_path=last",
            signum,
        )
