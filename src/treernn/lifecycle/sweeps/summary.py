"""The start and the end of a multirun (a Hydra callback, registered in
``conf/hydra/default.yaml``), and a job's return value.

At the start, before any job runs: the launcher's settings, links in the sweep's directories, and
a command that would change a resumed sweep are refused; a joblib sweep gets its stop file.
`treernn.lifecycle.entry.main` records a failed job in its ``status.json`` and lets the
sweep go on, returning `sweep_value` (NaN for an Optuna trial that failed). At the end this
callback reads those records: when at least one job finished it hands the finished sweep to its
``report`` (``conf/hydra/default.yaml`` names `treernn.reporting.sweep_report.report_sweep`:
the papers' comparison table printed and ``table.{md,csv,png}`` and the learning curves
``curves.{md,png}`` written into the sweep directory); then one line per job that did not
finish, and a non-zero exit if any did not.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from treernn.config_checks import warn_doubtful
from treernn.errors import UserError
from treernn.lifecycle import signals
from treernn.lifecycle.records import RunState, status_for_listing
from treernn.lifecycle.sweeps.layout import (
    check_same_sweep,
    jobs_in,
    overrides_line,
    refuse_links,
    sweep_failures,
    sweep_job_dirs,
    sweep_size,
)


# ----------------------------------------------------------------------------- a job's value
def sweep_value(cfg: DictConfig, metrics: dict[str, float] | None) -> Any:
    """What the Hydra job returns: the metrics, or with ``optimized_metric`` set (an Optuna sweep,
    ``conf/hparams_search/``) that one value; NaN for a failed job, which Optuna records as a
    failed trial while the sweep goes on."""
    key = cfg.get("optimized_metric")
    if not key:
        return metrics
    if metrics is None:
        return float("nan")
    if key not in metrics:
        raise UserError(f"optimized_metric={key} is not a metric of this run: {sorted(metrics)}")
    return metrics[key]


# ----------------------------------------------------------------------------- stopping
#: launchers whose jobs run in worker processes of the launching one (a Ctrl-C of the sweep
#: reaches them through its stop file: `treernn.lifecycle.signals`)
WORKER_LAUNCHERS = ("hydra_plugins.hydra_joblib_launcher.",)


def runs_in_workers(config: DictConfig) -> bool:
    target = str(OmegaConf.select(config, "hydra.launcher._target_", default="") or "")
    return target.startswith(WORKER_LAUNCHERS)


def _no_idle_workers(config: DictConfig) -> None:
    """No more joblib workers than jobs: a worker that never gets one waits for work through the
    whole sweep, where Ctrl-C of the sweep's process group reaches it as KeyboardInterrupt,
    joblib takes its pool for broken and kills the busy workers before they save (a worker that
    has run a job ignores SIGINT afterwards: `treernn.lifecycle.signals.guard_idle_worker`).
    The launcher is built from this config after this callback."""
    n_jobs = OmegaConf.select(config, "hydra.launcher.n_jobs")
    size = jobs_in(config)
    if isinstance(n_jobs, int) and size is not None and 0 < size < n_jobs:
        with read_write(config.hydra.launcher), open_dict(config.hydra.launcher):
            config.hydra.launcher.n_jobs = size


def check_launcher(config: DictConfig) -> None:
    """The launcher's job count, which joblib would answer with its own traceback after the
    sweep's directory is made: an integer other than 0 (-1: one per CPU)."""
    n_jobs = OmegaConf.select(config, "hydra.launcher.n_jobs", default=None)
    if n_jobs is None:
        return
    if not isinstance(n_jobs, int) or isinstance(n_jobs, bool) or n_jobs == 0:
        raise UserError(
            f"hydra.launcher.n_jobs={n_jobs!r} must be a number of jobs run at once: a positive "
            "integer, or -1 for one per CPU; e.g. hydra.launcher.n_jobs=2"
        )


#: a sweep's report: (its job directories, the sweep directory) -> False if the report itself
#: failed with a bug (its traceback printed), which makes the sweep's exit non-zero
SweepReport = Callable[[list[Path], Path], bool]


class SweepSummary(Callback):
    def __init__(self, report: SweepReport | None = None) -> None:
        #: given by the config (``hydra.callbacks.sweep_summary.report``); None: no report
        self.report = report
        self._stop: signals.StopSweep | None = None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            check_launcher(config)
            jobs_in(config)  # a command of more than MAX_JOBS jobs, before Hydra lists them
            for path in [Path(config.hydra.sweep.dir), *sweep_job_dirs(config)]:
                refuse_links(path, "sweep")  # before Hydra opens a job's train.log
            check_same_sweep(config)
        except UserError as error:
            print(f"error: {error}", file=sys.stderr, flush=True)
            sys.exit(1)  # before the sweep's directory is made
        warn_doubtful(config)
        if runs_in_workers(config):
            _no_idle_workers(config)
            self._stop = signals.StopSweep.start(Path(config.hydra.sweep.dir) / ".stopping")

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        stopped_by = None
        if self._stop is not None:
            self._stop.restore()
            stopped_by = signals.stop_requested()
            self._stop.path.unlink(missing_ok=True)
        jobs = sweep_job_dirs(config)
        finished = [
            job for job in jobs if status_for_listing(job).get("status") == RunState.FINISHED
        ]
        # the table first: the summary stays the last thing printed, whatever the report says
        reported = self.report(jobs, sweep_dir) if finished and self.report else True
        failures = sweep_failures(jobs)
        if not failures:
            print(f"sweep finished: {len(jobs)} jobs in {sweep_dir}", flush=True)
        else:
            lines = [f"sweep: {len(failures)} of {len(jobs)} jobs did not finish ({sweep_dir}):"]
            for job_dir, record in failures:
                error = f": {record['error']}" if record.get("error") else ""
                lines.append(
                    f"  job {job_dir.name} [{overrides_line(job_dir, record)}]: "
                    f"{record.get('status', 'not started')}{error}"
                )
            lines.append(
                f"resume it (finished jobs are skipped, interrupted ones continue, failed ones run "
                f"again): python -m treernn sweep resume {sweep_dir}"
            )
            print("\n".join(lines), file=sys.stderr, flush=True)
        if stopped_by is not None:
            size = sweep_size(sweep_dir)
            if size is not None and size > len(jobs):
                print(f"  {size - len(jobs)} jobs not started", file=sys.stderr, flush=True)
            sys.exit(128 + stopped_by)
        if failures or not reported:
            sys.exit(1)
