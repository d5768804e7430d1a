"""Every signal handler of a run and of a sweep, in one module.

- While a run sets up or tests (`install_immediate_handlers`): SIGINT and SIGTERM stop it at
  once with `treernn.errors.RunInterrupted` (there is nothing to save); SLURM's requeue
  signal is remembered until training can act on it.
- While it trains (`PendingStop`, installed by the
  `treernn.callbacks.graceful_stop.GracefulStop` callback): a signal only sets a flag, and
  the callback stops between two batches with a checkpoint; a second SIGINT / SIGTERM stops at
  once. The requeue signal asks SLURM to requeue the job (`requeue_job`).
- A sweep whose launcher runs its jobs in worker processes (joblib): the launching process's
  SIGINT / SIGTERM writes the sweep's stop file (`StopSweep`), which every job reads at its
  batches' ends and before it starts (`stop_requested`); a worker between two jobs ignores
  SIGINT (`guard_idle_worker`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from treernn.errors import RunInterrupted

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


# ----------------------------------------------------------------------------- the requeue signal
def signal_number(name: str | None) -> int | None:
    """``USR2`` (or ``SIGUSR2``) -> its number; None for None."""
    if not name:
        return None
    return int(signal.Signals[f"SIG{str(name).upper().removeprefix('SIG')}"])


def requeue_signum(requeue_signal: str | None) -> int | None:
    """The signal number of ``requeue_signal`` (``USR1``, ``USR2``) for a SLURM task; None
    outside SLURM or when requeueing is off (``requeue_signal=null``)."""
    if "SLURM_JOB_ID" not in os.environ:
        return None
    return signal_number(requeue_signal)


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


# ----------------------------------------------------------------------------- setting up, testing
#: a requeue signal received before training could act on it
_EARLY_REQUEUE: list[int] = []


def raise_interrupted(signum: int, frame: Any = None) -> None:
    """A signal handler for the stages with nothing to save (setting up, testing): stop now."""
    name = signal.Signals(signum).name
    raise RunInterrupted(f"stopped by {name} before training started or after it ended", signum)


def remember_requeue(signum: int, frame: Any = None) -> None:
    """The requeue signal while the job sets up: kept for `PendingStop`."""
    _EARLY_REQUEUE.append(signum)


def install_immediate_handlers(requeue_signal: int | None = None) -> dict[int, Any]:
    """SIGINT and SIGTERM stop the process at once with `RunInterrupted`; the requeue
    signal is remembered until training can act on it (main thread only). Returns the handlers
    they replace, for `restore_handlers` when the run is over."""
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


# ----------------------------------------------------------------------------- training
class PendingStop:
    """The handlers while training: a signal sets `signum`, which the training loop acts on
    between two batches; a second SIGINT / SIGTERM stops at once (the previous checkpoint stays).

    Lightning would act on a signal where it lands: Ctrl-C mid-step ends in ``sys.exit(1)`` with
    no checkpoint, SIGTERM exits with status 0, and its requeue handler saves in the middle of an
    optimizer step."""

    def __init__(self, requeue_signal: int | None = None) -> None:
        self.requeue_signal = requeue_signal
        self.signum: int | None = None  # the signal that asked to stop
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        """Take the signals over (Lightning has registered its SIGTERM handler by now); a
        requeue signal remembered while setting up is pending at once."""
        signums = list(STOP_SIGNALS)
        if self.requeue_signal is not None:
            signums.append(self.requeue_signal)
            if _EARLY_REQUEUE:
                self.signum = self.requeue_signal
                _EARLY_REQUEUE.clear()
        for signum in signums:
            self._previous[signum] = signal.getsignal(signum)
            signal.signal(signum, self._flag)

    def _flag(self, signum: int, frame: Any) -> None:
        if self.signum == self.requeue_signal and self.signum is not None:
            return  # requeueing: SLURM ends this attempt (SIGTERM) and starts the job again
        if self.signum is not None and signum in STOP_SIGNALS:
            name = signal.Signals(signum).name
            raise RunInterrupted(
                f"stopped at once by a second signal ({name}); the previous checkpoint stays "
                "(resume with ckpt_path=last)",
                signum,
            )
        self.signum = signum
        if signum in STOP_SIGNALS:
            name = signal.Signals(signum).name
            print(
                f"\n{name} received: stopping after this training batch with a checkpoint "
                "(send it again to stop at once)",
                flush=True,
            )

    def ignore_stop_signals(self) -> None:
        """Requeueing: SLURM answers the requeue with SIGTERM to this attempt; nothing is left to
        do then."""
        for signum in STOP_SIGNALS:
            signal.signal(signum, signal.SIG_IGN)

    def restore(self, keep_stop_signals_ignored: bool = False) -> None:
        """Put back the handlers from before training. ``keep_stop_signals_ignored``: the attempt
        asked to be requeued; SLURM's SIGTERM may come after this and must stay ignored
        (Lightning's handler, put back, passed it on to the set-up stage's handler and the
        requeued attempt ended recorded as "interrupted by SIGTERM")."""
        if keep_stop_signals_ignored:
            for signum in STOP_SIGNALS:
                self._previous.pop(signum, None)
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}


# ----------------------------------------------------------------------------- a sweep's stop file
#: where the jobs of a sweep whose launcher runs them in worker processes (joblib) find that the
#: sweep was asked to stop: the file's path, set by the process that launches them
STOP_FILE_ENV = "TREERNN_SWEEP_STOP_FILE"

#: the process that launched this sweep's jobs (set there; None in a worker process)
_LAUNCHING_PID: int | None = None


def in_worker_sweep() -> bool:
    """True in a job of a sweep whose jobs run in worker processes (the stop file is set)."""
    return bool(os.environ.get(STOP_FILE_ENV))


def in_launching_process() -> bool:
    """True in the process that launched a joblib sweep: with ``n_jobs=1`` joblib runs the jobs
    there, one after another, and a job's own signal handler takes the sweep's Ctrl-C."""
    return os.getpid() == _LAUNCHING_PID


def request_stop(signum: int) -> None:
    """Write the sweep's stop file (once): no job starts after this, and the sweep exits
    ``128 + signum`` once its running jobs have returned."""
    path = os.environ.get(STOP_FILE_ENV)
    if path and not Path(path).exists():
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(str(int(signum)))


def stop_requested() -> int | None:
    """The signal that asked this job's sweep to stop (a job of a joblib sweep), or None."""
    path = os.environ.get(STOP_FILE_ENV)
    if not path:
        return None
    try:
        return int(Path(path).read_text() or signal.SIGINT)
    except (FileNotFoundError, ValueError):
        return None


class StopSweep:
    """The launching process's SIGINT / SIGTERM while joblib's workers run the jobs.

    Raised there at once (Python's default), the interrupt made joblib kill its workers, and a
    job that had printed "stopping after this training batch with a checkpoint" was killed before
    it saved (Ctrl-C of a table lost every running job's updates since its last validation, seen
    2026-12-01). Here the first signal writes the stop file instead: each running job stops after
    its training batch with a checkpoint (whether the signal reached it or not), no other job
    starts, and the sweep exits with 130 / 143 once the jobs have returned. A second signal stops
    at once, as before."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
        for sig in self.previous:
            signal.signal(sig, self)

    @classmethod
    def start(cls, path: Path) -> StopSweep:
        """In the launching process, before the workers start: the stop file at ``path`` (one
        left by a sweep stopped at once is removed) and the handlers that write it."""
        global _LAUNCHING_PID
        path.unlink(missing_ok=True)
        os.environ[STOP_FILE_ENV] = str(path.resolve())  # the workers start after this
        _LAUNCHING_PID = os.getpid()
        return cls(path)

    def __call__(self, signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if self.path.exists():
            self.restore()
            print(f"\n{name} again: the sweep stops at once", file=sys.stderr, flush=True)
            if signum == signal.SIGINT:
                raise KeyboardInterrupt
            sys.exit(128 + signum)
        request_stop(signum)
        print(
            f"\n{name} received: the sweep stops; each running job saves a checkpoint after its "
            "training batch and no other job starts (send it again to stop at once)",
            file=sys.stderr,
            flush=True,
        )

    def restore(self) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)


def guard_idle_worker() -> None:
    """A joblib worker between two jobs ignores SIGINT: Ctrl-C of the sweep's process group
    reached an idle worker as KeyboardInterrupt in its wait for work, joblib took its pool for
    broken and killed the busy workers before they saved (a traceback, and the running job's
    updates since its last checkpoint lost, seen 2026-12-02). The stop file tells the jobs; the
    next job here installs its own handlers (and puts this one back)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
