"""Launching beyond one process: torchrun, a submitit sweep, SLURM requeue, an Optuna search.

Everything runs on this machine: torchrun with 2 CPU processes, submitit's local executor, a SLURM
task faked by its environment variables (and an ``scontrol`` that only records the requeue).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.integration.helpers import (
    TINY_LM,
    TINY_PARSE,
    fake_slurm_env,
    run_cli,
    run_torchrun,
)
from tests.integration.test_ptb_cli import EXACT

pytestmark = [pytest.mark.usefixtures("data_dir"), pytest.mark.slow]


def _run_dirs(log_dir: Path) -> list[Path]:
    return sorted(p for p in log_dir.glob("ptb/onlstm/*") if p.is_dir())


@pytest.fixture(scope="module")
def one_process(tmp_path_factory) -> dict[str, float]:
    """The metrics of one uninterrupted single-process epoch of the EXACT setting."""
    log_dir = tmp_path_factory.mktemp("one_process")
    result = run_cli([*EXACT, "trainer.max_epochs=1", f"paths.log_dir={log_dir}"])
    assert result.returncode == 0, result.stderr[-3000:]
    (run_dir,) = _run_dirs(log_dir)
    return json.loads((run_dir / "metrics.json").read_text())


def test_torchrun_two_processes_share_one_run_directory_and_match_one_process(
    tmp_path, one_process
):
    # with last.ckpt written after every batch (checkpoint_minutes at once), by both ranks
    # through the save's barrier: the saves change nothing
    args = [*EXACT, "trainer=torchrun_cpu", "trainer.max_epochs=1", "checkpoint_minutes=1e-6"]
    result = run_torchrun([*args, f"paths.log_dir={tmp_path}"])
    assert result.returncode == 0, result.stderr[-3000:]
    (run_dir,) = _run_dirs(tmp_path)  # one job, one directory, whatever the ranks' clocks said
    assert (
        "Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/2"
        in (run_dir / "train.log").read_text()
    )
    assert sorted(p.name for p in run_dir.iterdir()) == [
        ".hydra",
        ".lock",  # held by rank 0 while the job runs: one writer per run
        "checkpoints",
        "csv",
        "metrics.json",
        "parse_eval.json",  # the test-time parse scoreboard, written by rank 0 only
        "status.json",
        "train.log",
    ]
    assert json.loads((run_dir / "status.json").read_text())["status"] == "finished"
    two = json.loads((run_dir / "metrics.json").read_text())
    assert two["val/ppl"] == pytest.approx(one_process["val/ppl"], rel=1e-4)
    assert two["test/ppl"] == pytest.approx(one_process["test/ppl"], rel=1e-4)


def test_slurm_requeue_saves_requeues_and_resumes_exactly(tmp_path, one_process):
    slurm = fake_slurm_env(tmp_path / "bin", job_id="4242")
    args = [
        *EXACT,
        "trainer.max_epochs=1",
        f"paths.log_dir={tmp_path / 'runs'}",
        "logger=many",
        # SLURM's notice before the time limit, sent to this process after step 3 of 6
        "+callbacks.preempt._target_=tests.integration.helpers.SendSignalAt",
        "+callbacks.preempt.step=3",
    ]
    first = run_cli(args, env=slurm)
    assert first.returncode == 0, first.stderr[-3000:]  # this attempt did what SLURM asked
    assert "requeued: requeued at epoch 0, step 3" in first.stderr
    assert (tmp_path / "bin" / "requeued").read_text().split() == ["requeue", "4242"]
    (run_dir,) = _run_dirs(tmp_path / "runs")
    assert run_dir.name == "slurm-4242-0"
    assert (run_dir / "checkpoints" / "last.ckpt").is_file()  # saved between two batches
    assert json.loads((run_dir / "status.json").read_text())["status"] == "requeued"

    # SLURM starts the same command again, with the same job id: same directory, restored state
    second = run_cli(args, env=slurm)
    assert second.returncode == 0, second.stderr[-3000:]
    assert _run_dirs(tmp_path / "runs") == [run_dir]
    assert "Restoring states from the checkpoint path at" in second.stdout + second.stderr
    resumed = json.loads((run_dir / "metrics.json").read_text())
    assert resumed["val/ppl"] == pytest.approx(one_process["val/ppl"], rel=1e-5)
    assert resumed["test/ppl"] == pytest.approx(one_process["test/ppl"], rel=1e-5)
    # the wandb run continues: two offline directories of one run id, synced in order by
    # `wandb sync <run>/wandb/offline-run-*`
    offline = sorted((run_dir / "wandb").glob("offline-run-*"))
    assert len(offline) == 2
    assert len({path.name.rsplit("-", 1)[1] for path in offline}) == 1


def test_submitit_local_sweep_runs_each_job_through_submitit(tmp_path):
    result = run_cli(
        [
            "-m",
            "hydra/launcher=submitit_local",
            "hydra.launcher.timeout_min=20",
            "model.dropout=0.3,0.4",
            "trainer=smoke",
            "logger=wandb",
            f"paths.log_dir={tmp_path}",
            *TINY_LM,
            *TINY_PARSE,
        ]
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "sweep finished: 2 jobs" in result.stdout
    (sweep_dir,) = tmp_path.glob("multirun/ptb/onlstm/*")
    assert len(list(sweep_dir.glob(".submitit/*/*_result.pkl"))) == 2
    for job, dropout in (("0", "0.3"), ("1", "0.4")):
        assert json.loads((sweep_dir / job / "status.json").read_text())["status"] == "finished"
        # offline, the run's name and group are in its record file: directory, seed, overrides
        (record,) = (sweep_dir / job / "wandb").glob("offline-run-*/run-*.wandb")
        data = record.read_bytes()
        assert f"{sweep_dir.name}/{job} seed=141 model.dropout={dropout}".encode() in data
        assert b"ptb-onlstm" in data


def test_optuna_sweep_returns_the_monitored_metric_and_summarises(tmp_path):
    result = run_cli(
        [
            "hparams_search=onlstm_ptb_optuna",
            "hydra.sweeper.n_trials=2",
            "trainer=smoke",
            f"paths.log_dir={tmp_path}",
            *TINY_LM,
            *TINY_PARSE,
        ]
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (summary,) = tmp_path.glob("multirun/ptb/onlstm/*/optimization_results.yaml")
    best = yaml.safe_load(summary.read_text())
    assert set(best["best_params"]) >= {"model.dropout", "task.module.optimizer.lr"}
    values = [
        json.loads(path.read_text())["val/ppl"] for path in summary.parent.glob("*/metrics.json")
    ]
    assert len(values) == 2
    assert best["best_value"] == pytest.approx(min(values))
