"""The comparison table sent to wandb as a ``wandb.Table`` (``report table --wandb``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from treernn.reporting.table import Table


def log_to_wandb(table: Table, directory: Path, project: str = "treernn") -> str:
    """The table as a ``wandb.Table`` in the summary of a run of its own (offline unless
    ``WANDB_MODE`` says otherwise); returns the run's directory."""
    import os

    import wandb

    columns = ["model", "kind", "n"]
    for column in table.columns:
        columns += [f"{column.key} mean", f"{column.key} std", f"{column.key} max"]
    data = []
    for row in table.rows:
        values: list[Any] = [row.label, row.kind, row.n if row.kind != "paper" else None]
        for column in table.columns:
            cell = row.cells.get(column.key)
            values += [cell.mean, cell.std, cell.max] if cell else [None, None, None]
        data.append(values)
    run = wandb.init(
        project=project,
        job_type="report",
        name=f"table-{table.task}",
        group=f"{table.task}-report",
        dir=str(directory),
        mode=os.environ.get("WANDB_MODE", "offline"),
    )
    try:
        run.summary["report/table"] = wandb.Table(columns=columns, data=data)
        # run.dir is the run's files/ folder; `wandb sync` takes the run folder above it
        return str(Path(run.dir).parent) if getattr(run, "dir", None) else str(directory)
    finally:
        wandb.finish()
