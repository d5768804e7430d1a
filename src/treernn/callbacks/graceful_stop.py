"""Stop on a signal between two training batches, with a checkpoint to resume from.

- SIGINT (Ctrl-C) and SIGTERM (``kill``, ``scancel``, a preemption): at the end of the current
  training batch ``last.ckpt`` is written and the run stops with
  :class:`~treernn.errors.RunInterrupted`; ``treernn.run`` records it as ``interrupted`` and exits
  with 130 / 143. ``ckpt_path=last`` continues it exactly. A second signal stops at once, without
  a checkpoint (the previous ``last.ckpt`` stays).
- SLURM's requeue signal (``requeue_signal``, USR2 by default: ``#SBATCH --signal=USR2@120``
  before the time limit, or a preemption notice): at the end of the current batch ``last.ckpt`` is
  written and ``scontrol requeue`` puts the job back in the queue; this attempt ends with
  :class:`~treernn.errors.Requeued`, and the job, started again with the same id and directory,
  resumes from that checkpoint. A requeue signal that arrives while the job is still setting up is
  remembered (:func:`install_immediate_handlers`) and acted on after the first batch.

A signal is acted on at a batch's end, but not at the end of an epoch or of a batch after which a
validation is due: that validation runs first and the run stops after the next batch (saved
before a due validation, the run would resume past it without running it; Lightning's restarted
loop counts it as done).

Lightning would act on a signal where it lands: Ctrl-C mid-step ends in ``sys.exit(1)`` with no
checkpoint, SIGTERM exits with status 0, and its requeue handler saves in the middle of an
optimizer step. Here a signal only sets a flag; the save happens where the weights, the loop
state and the data position agree. Every rank of a DDP job agrees on the batch to stop at.
"""

from __future__ import annotations

import logging
import signal
import subprocess
from collections.abc import Callable
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer

from treernn.callbacks.checkpoint import LastCheckpoint, ends_epoch, validates_after
from treernn.errors import Requeued, RunInterrupted

log = logging.getLogger("treernn")

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


#: a requeue signal received before training could act on it
_EARLY_REQUEUE: list[int] = []


def raise_interrupted(signum: int, frame: Any = None) -> None:
    """A signal handler for the stages with nothing to save (setting up, testing): stop now."""
    name = signal.Signals(signum).name
    raise RunInterrupted(f"stopped by {name} before training started or after it ended", signum)


def remember_requeue(signum: int, frame: Any = None) -> None:
    """The requeue signal while the job sets up: kept for :class:`GracefulStop`."""
    _EARLY_REQUEUE.append(signum)


def install_immediate_handlers(requeue_signal: int | None = None) -> dict[int, Any]:
    """SIGINT and SIGTERM stop the process at once with :class:`RunInterrupted`; the requeue
    signal is remembered until training can act on it (main thread only). Returns the handlers
    they replace, for :func:`restore_handlers` when the run is over."""
    previous = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    for signum in STOP_SIGNALS:
        signal.signal(signum, raise_interrupted)
    if requeue_signal is not None:
        previous[requeue_signal] = signal.getsignal(requeue_signal)
        signal.signal(requeue_signal, remember_requeue)
    return previous


def restore_handlers(previous: dict[int, Any]) -> None:
    for signum, handler in previous.items():
        signal.signal(signum, handler)


def requeue_job(job_id: str) -> None:
    """``scontrol requeue``: SLURM ends this attempt and starts the job again, same id."""
    result = subprocess.run(
        ["scontrol", "requeue", job_id], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise RunInterrupted(
            f"the requeue signal came, but scontrol requeue {job_id} failed "
            f"({result.stderr.strip() or result.returncode}); resume with ckpt_path=last",
            signal.SIGTERM,
        )


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
        #: (a joblib sweep's stop file, ``treernn.sweeps.stop_requested``), or None
        self.poll = poll
        self.requeue_signal = requeue_signal
        self.job_id = job_id
        self.pending: int | None = None  # the signal that asked to stop
        self._waited_for_validation = False
        self._previous: dict[int, Any] = {}

    # ---------------------------------------------------------------------------- handlers
    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        # Lightning has registered its SIGTERM handler by now: take the signals over
        signals = list(STOP_SIGNALS)
        if self.requeue_signal is not None:
            signals.append(self.requeue_signal)
            if _EARLY_REQUEUE:
                self.pending = self.requeue_signal
                _EARLY_REQUEUE.clear()
        for signum in signals:
            self._previous[signum] = signal.getsignal(signum)
            signal.signal(signum, self._flag)

    def _flag(self, signum: int, frame: Any) -> None:
        if self.pending == self.requeue_signal and self.pending is not None:
            return  # requeueing: SLURM ends this attempt (SIGTERM) and starts the job again
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
        if isinstance(error, Requeued):
            # SLURM answers the requeue with SIGTERM, which may come after this: keep ignoring
            # it. Lightning's handler, put back here, passed it on to the set-up stage's handler
            # and the requeued attempt ended recorded as "interrupted by SIGTERM".
            for signum in STOP_SIGNALS:
                self._previous.pop(signum, None)
        self._restore()

    # ---------------------------------------------------------------------------- stopping
    def on_train_batch_end(self, trainer: Trainer, *args: Any) -> None:
        if self.pending is None and self.poll is not None:
            self.pending = self.poll()
        # every rank gets a signal from srun or scancel, not necessarily within the same batch;
        # one that arrives on any rank stops all of them here
        if not trainer.strategy.reduce_boolean_decision(self.pending is not None, all=False):
            return
        if ends_epoch(trainer):
            # the epoch's validation and checkpoints come after this batch: let them run and
            # stop after the next batch (or, if training ends here, before testing: treernn.run)
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
            for stop in STOP_SIGNALS:
                signal.signal(stop, signal.SIG_IGN)
            if trainer.is_global_zero:
                requeue_job(self.job_id)
            raise Requeued(
                f"requeued at {where} (SLURM job {self.job_id}): it starts again in this run "
                f"directory and resumes from {path}"
            )
        name = signal.Signals(signum).name
        if self.last is None:  # trainer.enable_checkpointing=false
            raise RunInterrupted(f"interrupted by {name} at {where} (checkpointing off)", signum)
        path = self.last.save(trainer)
        raise RunInterrupted(
            f"interrupted by {name} at {where}; saved {path}; resume with ckpt_path=last",
            signum,
        )
