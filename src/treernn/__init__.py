"""treernn: Lightning + Hydra experiments for recurrent networks with a tree-structured bias.

``treernn.load(path)`` returns a trained model (`treernn.api`); it is imported on first use,
so that ``import treernn`` stays cheap (no torch, no Lightning).
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["load", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "load":
        from treernn.api import load

        return load
    raise AttributeError(f"module 'treernn' has no attribute {name!r}")
