"""Progress bars for long calls, and the optional packages a call may ask for (pandas for a
DataFrame, tqdm for a bar) with the one line that says how to install them.

A bar is tqdm's, written to standard error (never standard output, which may carry a table).
``progress``: ``True`` shows it, ``False`` never does, ``None`` (the default) shows it in
interactive use (standard error a terminal, or a Jupyter kernel) once a call has run
`DELAY_S` seconds, so that short calls and scripts whose output is a log stay silent.
"""

from __future__ import annotations

import sys
from typing import Any

from treernn.errors import UserError

#: how long a call runs before a default (``progress=None``) bar appears
DELAY_S = 2.0


class MissingDependencyError(UserError, ImportError):
    """An optional package a call asked for is not installed (one line: what to install)."""


def optional_module(name: str, purpose: str) -> Any:
    """The module ``name``, imported now; one line naming ``purpose`` and ``pip install name``
    where it is not installed."""
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError:
        raise MissingDependencyError(
            f"{purpose} needs {name}, which is not installed: pip install {name}"
        ) from None


def interactive() -> bool:
    """Whether a person is watching standard error: a terminal, or a Jupyter kernel's stream."""
    stream = sys.stderr
    if stream is None:
        return False
    if type(stream).__module__.startswith("ipykernel"):
        return True
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


class Progress:
    """A bar over ``total`` units (None: unknown) that `advance` moves; a no-op when off."""

    def __init__(self, bar: Any = None):
        self._bar = bar

    def advance(self, count: int = 1) -> None:
        if self._bar is not None:
            self._bar.update(count)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def progress_bar(
    progress: bool | None, total: int | None, description: str, unit: str = "it"
) -> Progress:
    """A `Progress` as the module docstring says (``progress`` True, False or None)."""
    if progress is False or (progress is None and not interactive()):
        return Progress()
    if progress is None:
        try:
            from tqdm import tqdm
        except ImportError:  # a default bar is a nicety: without tqdm there is none
            return Progress()
        delay = DELAY_S
    else:
        tqdm = optional_module("tqdm", "progress=True").tqdm
        delay = 0.0
    return Progress(
        tqdm(
            total=total,
            desc=description,
            unit=unit,
            file=sys.stderr,
            delay=delay,
            dynamic_ncols=True,
            leave=False,
        )
    )
