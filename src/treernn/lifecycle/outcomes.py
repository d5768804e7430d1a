"""How a run ends, in one table: each ending (finished, interrupted by a signal, requeued, a user
error, a full disk, a diverged run, a bug, a sweep job not started or left alone) maps to the
state its record gets, the process's exit status, the message shown and what a sweep job returns.

`conclude` is `treernn.lifecycle.entry.main`'s one lookup: it records the ending in
the directory the attempt writes into, says it, and exits or returns the sweep's value.
"""

from __future__ import annotations

import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.errors import InstantiationException
from omegaconf import DictConfig

from treernn.errors import DivergedError, Requeued, RunInterrupted, UserError, say
from treernn.files import full_disk_error, is_full_disk
from treernn.lifecycle import records, signals
from treernn.lifecycle.records import RunState
from treernn.lifecycle.sweeps.layout import NotStarted, SweepChanged
from treernn.lifecycle.sweeps.summary import sweep_value


@dataclass(frozen=True)
class Outcome:
    """One way a run ends."""

    name: str
    #: what the run's ``status.json`` records (None: nothing; the directory is not this job's)
    state: RunState | None
    #: a single run's exit status (None: the signal's, ``128 + signum``; a bug keeps Python's own,
    #: with its traceback)
    exit_code: int | None
    #: how the message is shown on stderr: ``error``: ``error: <message>``; ``plain``: the message;
    #: ``requeued``: ``requeued: <message>``; ``traceback``: the traceback
    shown: str
    #: a sweep job that ends so: the sweep goes on (its value: the metrics, or None: NaN for
    #: Optuna), or the process exits as a single run does
    sweep_goes_on: bool
    #: a single run that failed while setting up leaves no directory behind
    remove_if_empty: bool = False


FINISHED = Outcome("finished", RunState.FINISHED, 0, "plain", True)
INTERRUPTED = Outcome("interrupted by a signal", RunState.INTERRUPTED, None, "plain", False)
# the process ends, in a sweep too, without a result: SLURM runs the job again (submitit's job, or
# the sweep's own batch job, which resumes the sweep: sweep_id=)
REQUEUED = Outcome("requeued", RunState.REQUEUED, 0, "requeued", False)
NOT_STARTED = Outcome("sweep job not started", None, 1, "plain", True)
# the job's directory belongs to another attempt (or a live process): left alone
LEFT_ALONE = Outcome("sweep job left alone", None, 1, "error", True)
USER_ERROR = Outcome("user error", RunState.FAILED, 1, "error", True, remove_if_empty=True)
FULL_DISK = Outcome("full disk", RunState.FAILED, 1, "error", True, remove_if_empty=True)
DIVERGED = Outcome("diverged", RunState.FAILED, 1, "error", True, remove_if_empty=True)
BUG = Outcome("bug", RunState.FAILED, None, "traceback", True)

#: the exception an ending is told by, most specific first
TABLE: tuple[tuple[type[BaseException], Outcome], ...] = (
    (RunInterrupted, INTERRUPTED),
    (Requeued, REQUEUED),
    (NotStarted, NOT_STARTED),
    (SweepChanged, LEFT_ALONE),
    (DivergedError, DIVERGED),
    (UserError, USER_ERROR),
)


def outcome_of(error: BaseException) -> tuple[Outcome, BaseException]:
    """The ending an exception stands for, and the exception as it is reported (a constructor's
    user error keeps its own one line; a full disk is said as one)."""
    if isinstance(error, InstantiationException) and isinstance(error.__cause__, UserError):
        error = error.__cause__
    for kind, outcome in TABLE:
        if isinstance(error, kind):
            return outcome, error
    if isinstance(error, OSError) and is_full_disk(error):
        what = error.filename or "a file of the run"
        return FULL_DISK, full_disk_error(what, error, "the last good checkpoint is kept")
    return BUG, error


def conclude(cfg: DictConfig, error: Exception, record_dir: Path | None, multirun: bool) -> Any:
    """Record, say and act on how the run ended with ``error`` (called while it is handled): a
    single run exits (a bug is raised again, with its traceback), a sweep job returns the sweep's
    value where the sweep goes on."""
    outcome, error = outcome_of(error)
    details = traceback.format_exc() if outcome is BUG else ""
    message = f"{type(error).__name__}: {error}" if outcome is BUG else str(error)
    if outcome.state is not None:
        records.record_failure(record_dir, outcome.state, message, details)
    if outcome.shown == "error":
        say(message)
    elif outcome.shown == "requeued":
        print(f"requeued: {message}", file=sys.stderr, flush=True)
    elif outcome.shown == "plain":
        print(message, file=sys.stderr, flush=True)
    elif multirun:  # a bug in a sweep job: its traceback, and the sweep goes on
        print(details, file=sys.stderr, flush=True)
    if outcome is INTERRUPTED and multirun and signals.in_worker_sweep():
        # a joblib worker: its exit would make joblib kill the other workers, which may be
        # saving their own checkpoints; the launching process ends the sweep (130 / 143).
        # A job run by the launching process itself (one worker) took the sweep's signal
        # with its own handler: the sweep stops as that signal asked
        if signals.in_launching_process():
            signals.request_stop(error.signum)
        return sweep_value(cfg, None)
    if multirun and outcome.sweep_goes_on:
        return sweep_value(cfg, None)
    if outcome is BUG:
        raise error
    if outcome.remove_if_empty:
        records.remove_if_empty(record_dir)
    sys.exit(error.exit_code if outcome.exit_code is None else outcome.exit_code)
