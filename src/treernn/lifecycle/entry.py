"""The run entry: `main` plans the invocation (`treernn.lifecycle.plan.plan_run`),
follows the plan (`treernn.lifecycle.execute.execute`) and turns how it ended into a status,
an exit code and the sweep's value (`treernn.lifecycle.outcomes.conclude`). ``train.py``
and ``treernn-train`` (`treernn.train_entry`) are thin Hydra entries around `main`;
the package's docstring (`treernn.lifecycle`) shows the whole flow.
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig

from treernn.lifecycle import launch, runs, signals
from treernn.lifecycle.execute import Attempt, execute
from treernn.lifecycle.identity import is_rank_zero
from treernn.lifecycle.outcomes import conclude
from treernn.lifecycle.plan import Plan, plan_run
from treernn.lifecycle.sweeps.summary import sweep_value


def train(cfg: DictConfig) -> dict[str, float]:
    """Fit and/or test as ``cfg.mode`` says; returns the final metrics."""
    return execute(_plan(cfg), Attempt(runs.output_dir_of(cfg)))


def _plan(cfg: DictConfig) -> Plan:
    """This invocation's plan, from the config and what Hydra and the launcher say."""
    multirun = launch.is_multirun()
    return plan_run(
        cfg,
        overrides=launch.job_overrides(),
        multirun=multirun,
        follower=not is_rank_zero(),
        stop_signal=signals.stop_requested() if multirun else None,
    )


def main(cfg: DictConfig) -> Any:
    """Hydra entry: a user error is one line on stderr and exit status 1; a bug keeps its
    traceback. A signal (Ctrl-C, SIGTERM) records the run as interrupted and exits with 130 / 143,
    in a sweep too (the sweep stops). In a multirun a failed job is recorded and the sweep goes on
    (the summary at the end lists the failures and exits non-zero). Returns
    `sweep_value`."""
    try:
        return _main(cfg)
    finally:
        if launch.is_multirun() and signals.in_worker_sweep():
            signals.guard_idle_worker()  # a joblib worker between two jobs


def _main(cfg: DictConfig) -> Any:
    multirun = launch.is_multirun()
    attempt = Attempt(runs.output_dir_of(cfg))  # the executor moves it to a run it continues
    try:
        return sweep_value(cfg, execute(_plan(cfg), attempt))
    except Exception as error:  # noqa: BLE001 - every ending, a bug's too, is recorded
        return conclude(cfg, error, attempt.record_dir, multirun)
