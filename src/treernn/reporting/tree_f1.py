"""The induced-tree F1 table: one row per layer (or trivial-tree baseline), printed after testing
by `treernn.callbacks.tree_f1.TreeF1Callback` and by
``python -m treernn report tree-f1``."""

from __future__ import annotations

from typing import Any


def format_tree_f1(scores: dict[str, dict[str, Any]], title: str = "") -> str:
    """One row per layer (or baseline): corpus F1 and sentence F1 in %, and sentence count."""
    header = f"{'':<16}{'corpus F1':>11}{'sentence F1':>13}{'sentences':>11}"
    lines = [title] if title else []
    lines += [header, "-" * len(header)]
    for name, values in scores.items():
        lines.append(
            f"{name:<16}{100 * values['corpus_f1']:>11.2f}"
            f"{100 * values['sentence_f1']:>13.2f}{values['sentences']:>11}"
        )
    return "\n".join(lines)
