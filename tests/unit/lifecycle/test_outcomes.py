"""How a run ends, from one table: the state its record gets, the exit status, the line on stderr
and what a sweep job returns, for each ending."""

from __future__ import annotations

import errno
import signal

import pytest
from hydra.errors import InstantiationException
from omegaconf import OmegaConf

from treernn.errors import DivergedError, Requeued, RunInterrupted, UserError
from treernn.lifecycle import outcomes, records
from treernn.lifecycle.records import RunState
from treernn.lifecycle.sweeps.layout import NotStarted, SweepChanged

CFG = OmegaConf.create({})  # no optimized_metric: a sweep job's value is its metrics (None)


def end(error: Exception, run_dir, multirun: bool = False):
    """`outcomes.conclude` as ``run.main`` calls it, while ``error`` is handled."""
    try:
        raise error
    except Exception as caught:  # noqa: BLE001 - the ending under test
        return outcomes.conclude(CFG, caught, run_dir, multirun)


@pytest.fixture
def run_dir(tmp_path):
    path = tmp_path / "outputs" / "run"
    records.write_status(path, status=RunState.RUNNING, stage="fit")
    return path


@pytest.mark.parametrize(
    ("error", "outcome"),
    [
        (RunInterrupted("stopped", signal.SIGTERM), outcomes.INTERRUPTED),
        (Requeued("requeued at step 3"), outcomes.REQUEUED),
        (NotStarted("job 1: the sweep is stopping"), outcomes.NOT_STARTED),
        (SweepChanged("job 1 ran with other overrides"), outcomes.LEFT_ALONE),
        (DivergedError("val/ppl is nan"), outcomes.DIVERGED),
        (UserError("bad value"), outcomes.USER_ERROR),
        (OSError(errno.ENOSPC, "No space left on device", "x.ckpt"), outcomes.FULL_DISK),
        (OSError(errno.EACCES, "Permission denied", "x.ckpt"), outcomes.BUG),
        (ValueError("a bug"), outcomes.BUG),
    ],
)
def test_each_ending_has_one_row(error, outcome):
    assert outcomes.outcome_of(error)[0] is outcome


def test_a_constructor_s_user_error_is_the_user_error_it_wraps():
    cause = UserError("hidden_size must be positive")
    wrapped = InstantiationException("Error in call to target")
    wrapped.__cause__ = cause
    assert outcomes.outcome_of(wrapped) == (outcomes.USER_ERROR, cause)


def test_a_signal_records_interrupted_and_exits_with_the_shell_s_status(run_dir, capsys):
    with pytest.raises(SystemExit) as exited:
        end(RunInterrupted("interrupted by SIGTERM at step 3", signal.SIGTERM), run_dir)
    assert exited.value.code == 143
    assert records.read_status(run_dir)["status"] == "interrupted"
    assert capsys.readouterr().err == "interrupted by SIGTERM at step 3\n"


def test_a_requeue_exits_0_in_a_sweep_too(run_dir, capsys):
    with pytest.raises(SystemExit) as exited:
        end(Requeued("at step 3"), run_dir, multirun=True)
    assert exited.value.code == 0
    assert records.read_status(run_dir)["status"] == "requeued"
    assert capsys.readouterr().err == "requeued: at step 3\n"


def test_a_user_error_is_one_line_exit_1_and_a_sweep_goes_on(run_dir, capsys):
    assert end(UserError("bad value"), run_dir, multirun=True) is None
    record = records.read_status(run_dir)
    assert (record["status"], record["error"]) == ("failed", "bad value")
    assert capsys.readouterr().err == "error: bad value\n"
    with pytest.raises(SystemExit) as exited:
        end(UserError("bad value"), run_dir)
    assert exited.value.code == 1
    assert run_dir.is_dir()  # it trained (stage fit): kept


def test_a_run_that_failed_while_setting_up_leaves_no_directory(tmp_path):
    run_dir = tmp_path / "outputs" / "run"
    records.write_status(run_dir, status=RunState.RUNNING, stage="setup")
    with pytest.raises(SystemExit):
        end(UserError("bad value"), run_dir)
    assert not run_dir.exists()


def test_a_full_disk_is_one_line(run_dir, capsys):
    with pytest.raises(SystemExit) as exited:
        end(OSError(errno.ENOSPC, "No space left on device", "x.ckpt"), run_dir)
    assert exited.value.code == 1
    line = capsys.readouterr().err
    assert line.startswith("error: ") and "x.ckpt" in line and line.count("\n") == 1
    assert records.read_status(run_dir)["status"] == "failed"


def test_a_bug_keeps_its_traceback_and_is_recorded(run_dir, capsys):
    with pytest.raises(ValueError, match="a bug"):
        end(ValueError("a bug"), run_dir)
    assert records.read_status(run_dir)["error"] == "ValueError: a bug"
    assert end(ValueError("a bug"), run_dir, multirun=True) is None
    assert "Traceback" in capsys.readouterr().err


def test_a_sweep_job_not_started_or_left_alone_records_nothing(run_dir, capsys):
    assert end(NotStarted("job 1: the sweep is stopping; not started"), run_dir, True) is None
    assert end(SweepChanged("job 1 ran with [seed=1]"), run_dir, True) is None
    assert records.read_status(run_dir)["status"] == "running"
    err = capsys.readouterr().err
    assert err == "job 1: the sweep is stopping; not started\nerror: job 1 ran with [seed=1]\n"


def test_finished_is_a_row_too():
    row = outcomes.FINISHED
    assert (row.state, row.exit_code, row.sweep_goes_on) == (RunState.FINISHED, 0, True)
