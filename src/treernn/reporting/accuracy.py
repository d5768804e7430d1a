"""Accuracy per length (logic, ListOps): the text table, ``test_results.json`` and a plot like
ON-LSTM's Fig. 3 (test accuracy against number of operators, trained on <= 6 operators).

Used by the `treernn.callbacks.accuracy_report.AccuracyReport` callback after testing and
by ``python -m treernn report accuracy`` / ``report table``, which draw several runs' files in one
figure with the same functions.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from treernn.reporting.paper import (  # Ordered Memory Table 1: 7..12 ops, Sys. Gen.
    PAPER_LENGTH_ACCURACY,
    PAPER_SYSGEN_ACCURACY,
)

TRAINED_UP_TO = 6


def bucket_number(name: str) -> int | None:
    """``ops7`` -> 7; names without a number (length ranges) give None."""
    match = re.fullmatch(r"ops(\d+)", name)
    return int(match.group(1)) if match else None


def accuracy_table(results: Mapping[str, Any], title: str = "") -> str:
    """Text table: one row per length bucket, one column per evaluation group (acc %, count)."""
    groups = list(results)
    buckets: list[str] = []
    for summary in results.values():
        buckets += [name for name in summary["buckets"] if name not in buckets]
    header = f"{'bucket':<12}" + "".join(f"{group:>22}" for group in groups)
    lines = [title] if title else []
    lines += [header, "-" * len(header)]
    for bucket in buckets:
        row = f"{bucket:<12}"
        for group in groups:
            cell = results[group]["buckets"].get(bucket)
            row += f"{100 * cell['acc']:>14.2f} ({cell['count']:>5})" if cell else f"{'-':>22}"
        lines.append(row)
    overall = f"{'all':<12}"
    for group in groups:
        summary = results[group]
        accuracy = summary["acc"]
        text = "-" if math.isnan(accuracy) else f"{100 * accuracy:.2f}"
        overall += f"{text:>14} ({summary['count']:>5})"
    lines += ["-" * len(header), overall]
    return "\n".join(lines)


def length_curve(results: Mapping[str, Any], group: str | None = None) -> dict[int, float]:
    """{number of operators: accuracy %} of one group (the first by default)."""
    summary = results[group or next(iter(results))]
    curve = {}
    for name, cell in summary["buckets"].items():
        number = bucket_number(name)
        if number is not None:
            curve[number] = 100 * cell["acc"]
    return dict(sorted(curve.items()))


def plot_accuracy_by_length(
    curves: Mapping[str, Mapping[int, float]],
    path: str | Path,
    with_paper: bool = True,
    first: int = 1,
    errors: Mapping[str, Mapping[int, float]] | None = None,
) -> Path:
    """ON-LSTM Fig. 3 style: accuracy (%) against number of operators, one line per model.

    ``errors``: per model, the error bar at each number of operators (the std over seeds in
    ``python -m treernn report table``); the trained lengths are shaded.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(6, 4))
    for label, curve in curves.items():
        xs = [n for n in sorted(curve) if n >= first]
        bars = (errors or {}).get(label)
        if bars:
            axis.errorbar(
                xs,
                [curve[n] for n in xs],
                yerr=[bars.get(n, 0.0) for n in xs],
                marker="o",
                capsize=3,
                label=label,
            )
        else:
            axis.plot(xs, [curve[n] for n in xs], marker="o", label=label)
    if with_paper:
        for label, curve in PAPER_LENGTH_ACCURACY.items():
            xs = sorted(curve)
            axis.plot(xs, [curve[n] for n in xs], linestyle="--", alpha=0.6, label=label)
    axis.axvspan(
        first - 0.5, TRAINED_UP_TO + 0.5, color="grey", alpha=0.1, label="seen in training"
    )
    axis.set_xlabel("number of operators")
    axis.set_ylabel("test accuracy (%)")
    axis.grid(alpha=0.3)
    return save_figure(figure, path)


def plot_accuracy_by_bucket(results: Mapping[str, Any], path: str | Path, label: str) -> Path:
    """Bar chart of accuracy per length bucket (ListOps-style named buckets)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary = results[next(iter(results))]
    names = list(summary["buckets"])
    figure, axis = plt.subplots(figsize=(6, 4))
    axis.bar(names, [100 * summary["buckets"][n]["acc"] for n in names], label=label)
    axis.set_xlabel("length bucket (tokens)")
    axis.set_ylabel("test accuracy (%)")
    return save_figure(figure, path)


def save_figure(figure: Any, path: str | Path) -> Path:
    """Tight layout, the legend beside the axes (inside, it covered curves and bands of the
    many-series plots), ``path`` written at 120 dpi (its folder made), figure closed."""
    import matplotlib.pyplot as plt

    figure.tight_layout()  # before the legend, so that the axes keep their size
    figure.axes[0].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1), borderaxespad=0)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120, bbox_inches="tight")  # the figure grows to hold the legend
    plt.close(figure)
    return path


def write_report(results: Mapping[str, Any], output_dir: str | Path, label: str) -> list[Path]:
    """``test_results.json`` and ``accuracy_by_length.png`` in ``output_dir``."""
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    json_path = output_dir / "test_results.json"
    json_path.write_text(json.dumps({"label": label, "results": results}, indent=2))
    png_path = output_dir / "accuracy_by_length.png"
    curve = length_curve(results)
    if curve:
        plot_accuracy_by_length({label: curve}, png_path)
    else:
        plot_accuracy_by_bucket(results, png_path, label)
    return [json_path, png_path]


def sysgen_table(runs: Mapping[str, Mapping[str, float]]) -> str:
    """Systematic generalisation: rows = models, columns = partitions A/B/C (accuracy %)."""
    splits = ["A", "B", "C"]
    rows = {**{k: dict(v) for k, v in runs.items()}, **PAPER_SYSGEN_ACCURACY}
    lines = [f"{'model':<26}" + "".join(f"{s:>8}" for s in splits)]
    for model, values in rows.items():
        cells = "".join(f"{values[s]:>8.1f}" if s in values else f"{'-':>8}" for s in splits)
        lines.append(f"{model:<26}{cells}")
    return "\n".join(lines)
