"""The signal handlers of a run and of a sweep, from the one module that owns them: a joblib
sweep's stop file (first signal: the file, second: at once), the set-up stage's handlers, and the
training flag (a second SIGINT stops at once)."""

from __future__ import annotations

import os
import signal

import pytest

from treernn.errors import RunInterrupted
from treernn.lifecycle import signals


@pytest.fixture
def saved_handlers(monkeypatch):
    """The handlers and stop-file variable as they were, put back after the test. The variable
    is set by the code under test, not by monkeypatch (whose delenv of an unset variable records
    nothing to undo): it is removed here, else every later run of this test process, and the
    subprocesses it starts, read the sweep as stopping."""
    before = os.environ.pop(signals.STOP_FILE_ENV, None)
    monkeypatch.setattr(signals, "_LAUNCHING_PID", None)
    saved = {signum: signal.getsignal(signum) for signum in signals.STOP_SIGNALS}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)
    os.environ.pop(signals.STOP_FILE_ENV, None)
    if before is not None:
        os.environ[signals.STOP_FILE_ENV] = before


def test_a_sweep_s_first_signal_writes_the_stop_file_and_the_second_stops_at_once(
    tmp_path, saved_handlers, capsys
):
    path = tmp_path / ".stopping"
    path.write_text("")  # left by a sweep stopped at once: removed
    stop = signals.StopSweep.start(path)
    assert not path.exists() and signals.in_worker_sweep() and signals.in_launching_process()
    assert os.environ[signals.STOP_FILE_ENV] == str(path.resolve())
    assert signals.stop_requested() is None
    stop(signal.SIGTERM, None)
    assert path.read_text() == str(int(signal.SIGTERM))
    assert signals.stop_requested() == signal.SIGTERM
    assert "SIGTERM received: the sweep stops" in capsys.readouterr().err
    signals.request_stop(signal.SIGINT)  # written once: the first signal stays
    assert signals.stop_requested() == signal.SIGTERM
    with pytest.raises(KeyboardInterrupt):
        stop(signal.SIGINT, None)
    assert signal.getsignal(signal.SIGINT) is stop.previous[signal.SIGINT]  # restored


def test_setting_up_stops_at_once_and_remembers_a_requeue(saved_handlers):
    previous = signals.install_immediate_handlers(signal.SIGUSR2)
    try:
        handler = signal.getsignal(signal.SIGTERM)
        with pytest.raises(RunInterrupted, match="stopped by SIGTERM before training") as stopped:
            handler(signal.SIGTERM, None)
        assert stopped.value.exit_code == 143
        signal.getsignal(signal.SIGUSR2)(signal.SIGUSR2, None)  # remembered, not raised
        flag = signals.PendingStop(signal.SIGUSR2)
        flag.install()
        assert flag.signum == signal.SIGUSR2  # acted on after the first batch
        flag.restore()
    finally:
        signals.restore_handlers(previous)


def test_while_training_a_signal_is_a_flag_and_a_second_one_stops_at_once(saved_handlers):
    flag = signals.PendingStop()
    flag.install()
    try:
        signal.getsignal(signal.SIGINT)(signal.SIGINT, None)
        assert flag.signum == signal.SIGINT
        with pytest.raises(RunInterrupted, match="stopped at once by a second signal"):
            signal.getsignal(signal.SIGTERM)(signal.SIGTERM, None)
    finally:
        flag.restore()
