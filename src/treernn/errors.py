"""The one error type for a user's mistake, and its kinds.

A `UserError` is printed as one line (``error: ...``) and the program exits with status 1: a
bad config value, a missing or damaged data file, an unusable checkpoint, a run that diverged.
Anything else is a bug and keeps its full traceback. ``TREERNN_DEBUG=1`` or ``HYDRA_FULL_ERROR=1``
shows the traceback of user errors too.

This module imports nothing from treernn, so every layer (encoders included) can raise these.
"""

from __future__ import annotations

import os
import sys
import traceback


class UserError(Exception):
    """A problem with the user's input or run, reported as one line without a stack trace."""


class ConfigValueError(UserError, ValueError):
    """A config value has the wrong type or is out of range; the message names the key."""


class DataError(UserError):
    """A data file cannot be read; the message names the file (and line where there is one)."""


class CheckpointError(UserError):
    """A checkpoint is missing, damaged, or belongs to another task or model."""


class DivergedError(UserError, FloatingPointError):
    """Training diverged: a non-finite or exploding loss or validation metric."""


class StorageError(UserError, OSError):
    """A file could not be written because the disk (or quota) is full; the message names the
    file and what was kept."""


class OutputError(UserError, OSError):
    """A result or a model cannot be written where the user asked (a read-only folder, a path
    under a file, a folder that is not empty); the message names the path and what to give
    instead."""


class RunInterrupted(Exception):
    """A signal (Ctrl-C, SIGTERM from ``kill``, ``scancel`` or a preemption) stopped the run.

    Not a user error and not a bug: the run records itself as ``interrupted`` and the process
    exits with the shell's status for the signal (130 for SIGINT, 143 for SIGTERM).
    """

    def __init__(self, message: str, signum: int) -> None:
        super().__init__(message)
        self.signum = signum

    def __reduce__(self):  # picklable (a submitit job's result may hold it)
        return type(self), (str(self), self.signum)

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class Requeued(Exception):
    """The SLURM job saved its state and asked to be requeued; this attempt ends here (and SLURM
    starts the job again, same id and directory)."""


def show_tracebacks() -> bool:
    """True when the user asked for full tracebacks of user errors too."""
    return any(
        os.environ.get(name, "") not in ("", "0") for name in ("TREERNN_DEBUG", "HYDRA_FULL_ERROR")
    )


def say(error: BaseException | str) -> None:
    """A user error as its one line on stderr (``error: ...``), with the traceback of the
    exception being handled where `show_tracebacks` asks for it."""
    print(f"error: {error}", file=sys.stderr, flush=True)
    if show_tracebacks():
        traceback.print_exc()
