"""The comparison table written out: its cells as text, Markdown, CSV and, for logic, the
accuracy-by-operators figure (``table.{md,csv,png}``)."""

from __future__ import annotations

import csv
import io
import math
import os
import re
from pathlib import Path
from typing import Any

from treernn.reporting.table import Cell, Table


# ----------------------------------------------------------------------------- output
def format_cell(cell: Cell | None, digits: int, n: int | None = None) -> str:
    """``mean ± std (max M)`` over several runs, the value of one, ``-`` for none; ``[n=k]``
    where the cell has fewer runs than its row."""
    if cell is None:
        return "-"
    text = f"{cell.mean:.{digits}f}"
    if cell.std is not None:
        text += f" ± {cell.std:.{digits}f}"
    if cell.max is not None and (cell.n is None or cell.n > 1) and cell.max != cell.mean:
        text += f" (max {cell.max:.{digits}f})"
    if n is not None and cell.n is not None and cell.n != n:
        text += f" [n={cell.n}]"
    return text


def _shown(path: str | Path, base: Path | None) -> str:
    """A run's directory as written: relative to ``base`` (the written file's directory) where
    one is given, so that a table kept with its runs (``results/``) reads the same from any
    checkout; as given otherwise (the printed table)."""
    if base is None:
        return str(path)
    return os.path.relpath(Path(path).absolute(), Path(base).absolute())


def to_markdown(table: Table, paths_from: Path | None = None) -> str:
    header = ["model", "n", *[column.label for column in table.columns]]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in table.rows:
        n = str(row.n) if row.kind == "run" else ("paper" if row.kind == "paper" else "-")
        cells = [format_cell(row.cells.get(c.key), c.digits, row.n or None) for c in table.columns]
        lines.append("| " + " | ".join([row.label, n, *cells]) + " |")
    notes = [f"task {table.task}; mean ± sample std (max) over seeds; accuracy and F1 in %"]
    if table.papers:
        notes.append("(paper) rows: " + ", ".join(_PAPER_SOURCES[p] for p in table.papers))
    lines += ["", *notes]
    if table.skipped:
        lines.append(f"left out ({len(table.skipped)} runs that did not finish cleanly):")
        lines += [f"- {_shown(path, paths_from)}: {reason}" for path, reason in table.skipped]
    for section in table.sections:
        lines += ["", section.rstrip("\n")]
    return "\n".join(lines) + "\n"


_PAPER_SOURCES = {
    "logic": "Ordered Memory Table 1",
    "sysgen": "Ordered Memory Table 1 (Sys. Gen.)",
    "listops": "Ordered Memory Fig. 3a",
    "sst2": "Ordered Memory Table 3 (SST-2)",
    "sst5": "Ordered Memory Table 3 (SST-5)",
    "parsing": "ON-LSTM Table 2 (WSJ test)",
    "ptb": "ON-LSTM Table 1",
}


def to_csv(table: Table, paths_from: Path | None = None) -> str:
    """One row per model: kind, n, each column's mean, std, max and n, and the row's runs
    (relative to ``paths_from`` where given)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    fields = [f"{c.key}_{stat}" for c in table.columns for stat in ("mean", "std", "max", "n")]
    writer.writerow(["model", "kind", "n", *fields, "runs"])
    for row in table.rows:
        values: list[Any] = [row.label, row.kind, row.n if row.kind != "paper" else ""]
        for column in table.columns:
            cell = row.cells.get(column.key)
            values += (
                [_number(cell.mean), _number(cell.std), _number(cell.max), _number(cell.n)]
                if cell
                else ["", "", "", ""]
            )
        writer.writerow([*values, " ".join(_shown(path, paths_from) for path in row.runs)])
    return out.getvalue()


def _number(value: float | int | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def operator_curves(
    table: Table,
) -> tuple[dict[str, dict[int, float]], dict[str, dict[int, float]]]:
    """Mean accuracy and std per number of operators of each run row (for the plot)."""
    curves, errors = {}, {}
    for row in table.rows:
        if row.kind != "run":
            continue
        points = {
            int(key[3:]): cell for key, cell in row.cells.items() if re.fullmatch(r"ops\d+", key)
        }
        if points:
            curves[row.label] = {k: cell.mean for k, cell in sorted(points.items())}
            errors[row.label] = {k: cell.std or 0.0 for k, cell in sorted(points.items())}
    return curves, errors


def write_table(table: Table, prefix: str | Path) -> list[Path]:
    """``<prefix>.md``, ``<prefix>.csv`` and, for accuracy by number of operators,
    ``<prefix>.png`` (ON-LSTM Fig. 3: mean over seeds, error bars = std)."""
    from treernn.reporting.accuracy import plot_accuracy_by_length

    prefix = Path(prefix)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    written = [prefix.with_name(prefix.name + ".md"), prefix.with_name(prefix.name + ".csv")]
    written[0].write_text(to_markdown(table, prefix.parent))
    written[1].write_text(to_csv(table, prefix.parent))
    curves, errors = operator_curves(table)
    if any(len(curve) > 1 for curve in curves.values()):
        written.append(
            plot_accuracy_by_length(
                curves,
                prefix.with_name(prefix.name + ".png"),
                with_paper="logic" in table.papers,
                errors=errors,
            )
        )
    return written
