"""The lifecycle's one hook into the kernels: the run's kernel context.

A run's kernel choices (GEMM backend, loop placement, precision per shape) are part of the run:
the planner checks that a resumed or tested run's record of them can be read before anything is
recorded, and the executor opens the context once the attempt is recorded, so the choices are
written with the run, reused on resume and by the sweep's other jobs, and read from the tested
run by ``mode=test``; as the fit starts, `PlannedUpdates` tells the kernels how long it plans to
be (a long fit may probe longer). Nothing else in the lifecycle imports `treernn.kernels`.
"""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as pl

from treernn import kernels


def check(run_dir: Path | None) -> None:
    """Refuse, in one line, a resumed or tested run whose recorded choices cannot be read (a
    FIFO, a link, a damaged file), before the attempt is recorded."""
    kernels.context.check(run_dir)


def open_for_run(
    run_dir: Path, sweep_dir: Path | None, trained_in: Path | None, *, write: bool
) -> None:
    """Attach this process's kernels to the run: reuse the choices recorded in ``run_dir``, else
    those of ``trained_in`` (the run a test or resume reads), else the sweep's; record them in
    ``run_dir`` where ``write`` (rank 0)."""
    kernels.context.attach(run_dir, sweep_dir, trained_in, write=write)


class PlannedUpdates(pl.Callback):
    """Tells the kernels, as the fit starts (before its sanity check, whose products are the
    first probed), how many updates it plans (`kernels.context.plan_updates`)."""

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        kernels.context.plan_updates(trainer.estimated_stepping_batches)
