"""Learning curves of a sweep over seeds: ``python -m treernn report curves``.

Where a table's claim does not show at its budget, the curves say whether a model is still
improving and at what rate. Each finished run's csv logger file (``csv/**/metrics.csv``) gives a
validation metric by update; runs are grouped into rows as in `treernn.reporting.table` (the
overrides that differ, seed aside; a systematic-generalisation partition is part of the row here,
since each partition validates on its own data), and each logged update gets the mean, sample std
and max over the row's runs. Accuracies are printed in %, as in the tables.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from treernn.errors import UserError
from treernn.lifecycle.records import is_fraction, read_metrics_csv
from treernn.reporting.run_records import Run, load_runs
from treernn.reporting.table import Cell, group_runs, row_keys
from treernn.reporting.table_output import format_cell

#: the metric of ``--metric auto``, the first that the runs logged
AUTO_METRICS = ("val/acc", "val/ppl", "val/loss")


@dataclass
class Curves:
    metric: str
    steps: list[int]
    #: row label -> update -> the metric over the row's runs
    rows: dict[str, dict[int, Cell]]
    #: row label -> number of runs
    sizes: dict[str, int]


def run_curve(run_dir: Path, metric: str) -> dict[int, float]:
    """``metric`` by update (the logger's ``step``) from a run's csv logger files."""
    curve: dict[int, float] = {}
    for csv_path in sorted(run_dir.glob("csv/**/metrics.csv")):
        for row in read_metrics_csv(csv_path):
            if metric in row and "step" in row:
                curve[int(row["step"])] = row[metric]
    return curve


def _percent(metric: str) -> bool:
    return is_fraction(metric)


def learning_curves(paths: Iterable[str | Path], metric: str = "auto") -> Curves:
    """The curves of the finished runs below ``paths`` (see the module docstring)."""
    runs, _ = load_runs(paths)
    for chosen in AUTO_METRICS if metric == "auto" else (metric,):
        curves = {run.path: run_curve(run.path, chosen) for run in runs}
        if any(curves.values()):
            break
    else:
        wanted = ", ".join(AUTO_METRICS) if metric == "auto" else metric
        raise UserError(
            f"no run logged {wanted} to its csv logger (csv/**/metrics.csv): give --metric one of "
            "the columns those files have, e.g. val/acc or val/ppl"
        )
    scale = 100.0 if _percent(chosen) else 1.0
    keys = row_keys(runs)
    splits = {run.split for run in runs}
    rows: dict[str, dict[int, Cell]] = {}
    sizes: dict[str, int] = {}
    for label, members in _rows(runs, keys, len(splits) > 1).items():
        steps = sorted({step for run in members for step in curves[run.path]})
        rows[label] = {
            step: Cell.of([scale * curves[r.path][step] for r in members if step in curves[r.path]])
            for step in steps
        }
        sizes[label] = len(members)
    steps = sorted({step for row in rows.values() for step in row})
    return Curves(chosen, steps, rows, sizes)


def _rows(runs: list[Run], keys: list[str], by_split: bool) -> dict[str, list[Run]]:
    if not by_split:
        return group_runs(runs, keys)
    groups: dict[str, list[Run]] = {}
    for label, members in group_runs(runs, keys).items():
        for run in members:
            groups.setdefault(f"{label} split={run.split}", []).append(run)
    return groups


def to_markdown(curves: Curves) -> str:
    """One row per setting, one column per validated update (the update as the logger counts
    it, from 0)."""
    digits = 2 if "ppl" in curves.metric else 1
    header = ["model", "n", *[str(step) for step in curves.steps]]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for label, row in curves.rows.items():
        n = curves.sizes[label]
        cells = [format_cell(row.get(step), digits, n) for step in curves.steps]
        lines.append("| " + " | ".join([label, str(n), *cells]) + " |")
    unit = " (%)" if _percent(curves.metric) else ""
    lines += ["", f"{curves.metric}{unit} by update; mean ± sample std (max) over seeds"]
    return "\n".join(lines) + "\n"


def split_at_fewer_seeds(row: dict[int, Cell], size: int) -> tuple[list[int], list[int]]:
    """A row's updates up to the last one where every one of its ``size`` runs logged, and
    those after it (starting with that last one, so that the two lines join), where the mean is
    over fewer runs: a run that stopped earlier (a recipe's own stopping rule) has left it, so
    that the mean can move without any run improving."""
    steps = sorted(row)
    full = [step for step in steps if row[step].n == size]
    if not full:
        return [], steps
    last = full[-1]
    after = [step for step in steps if step > last]
    return [step for step in steps if step <= last], [last, *after] if after else []


def plot(curves: Curves, path: str | Path) -> Path:
    """The mean curve of each row with a band of one std; dashed, without markers, where the
    mean is over fewer of the row's runs (the markdown's ``[n=k]``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from treernn.reporting.accuracy import save_figure

    figure, axis = plt.subplots(figsize=(6, 4))
    fewer = False
    for label, row in curves.rows.items():
        full, partial = split_at_fewer_seeds(row, curves.sizes[label])
        color = None
        if full:
            (line,) = axis.plot(full, [row[s].mean for s in full], marker="o", label=label)
            color = line.get_color()
        if partial:
            fewer = fewer or bool(full)
            axis.plot(
                partial,
                [row[s].mean for s in partial],
                linestyle="--",
                color=color,
                label=None if full else f"{label} (fewer seeds)",
            )
        steps = sorted(row)
        means = [row[s].mean for s in steps]
        spread = [row[s].std or 0.0 for s in steps]
        low = [mean - std for mean, std in zip(means, spread)]
        high = [mean + std for mean, std in zip(means, spread)]
        axis.fill_between(steps, low, high, alpha=0.2, color=color)
    if fewer:
        axis.plot([], [], linestyle="--", color="grey", label="fewer seeds (some stopped)")
    axis.set_xlabel("update")
    axis.set_ylabel(curves.metric + (" (%)" if _percent(curves.metric) else ""))
    axis.grid(alpha=0.3)
    return save_figure(figure, path)


def write_curves(curves: Curves, prefix: str | Path) -> list[Path]:
    """``<prefix>.md`` and ``<prefix>.png``."""
    prefix = Path(prefix)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    markdown = prefix.with_name(prefix.name + ".md")
    markdown.write_text(to_markdown(curves))
    return [markdown, plot(curves, prefix.with_name(prefix.name + ".png"))]
