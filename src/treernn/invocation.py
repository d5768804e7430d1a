"""How the running program was typed, for its help texts: ``treernn`` or ``python -m treernn``,
``treernn-train`` or ``python train.py``. A usage line then shows the command the user can type
again, not the module that happens to implement it."""

from __future__ import annotations

import os
import sys


def program_name(script: str, module: str, files: tuple[str, ...] = ()) -> str:
    """The program as typed: ``python -m <module>`` when run that way, ``script`` (a console
    script) when ``sys.argv[0]`` names it, ``python <path as typed>`` for one of ``files`` (a
    script of a checkout, e.g. ``train.py``); ``script`` where it cannot be told (another program
    calling ours in its own process: a test, a notebook)."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name in (module, f"{module}.__main__"):
        return f"python -m {module}"
    typed = sys.argv[0] if sys.argv else ""
    name = os.path.basename(typed)
    if name.removesuffix(".exe") == script:
        return script
    if name in files:
        return f"python {typed}"
    return script


def trainer_name() -> str:
    """The training program as typed: ``treernn-train``, ``python train.py`` (a checkout)."""
    return program_name("treernn-train", "treernn.train_entry", files=("train.py",))


def commands_name() -> str:
    """The commands' program as typed: ``treernn`` or ``python -m treernn``."""
    return program_name("treernn", "treernn")
