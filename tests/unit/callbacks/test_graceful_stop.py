"""GracefulStop's signal handlers: around a SLURM requeue, after the attempt has asked to be
requeued, the SIGTERM that SLURM answers with stays ignored through the exception that ends the
attempt, and any other exception puts back the handlers that were there before training; a signal
that lands while a sweep job reads its stop file is kept."""

from __future__ import annotations

import signal
from types import SimpleNamespace

import pytest
import torch

from treernn.callbacks.graceful_stop import GracefulStop
from treernn.errors import Requeued, RunInterrupted
from treernn.lifecycle.signals import STOP_SIGNALS


@pytest.fixture
def handlers():
    """Stand-ins for the handlers that training takes over (Lightning's), restored after."""
    saved = {signum: signal.getsignal(signum) for signum in (*STOP_SIGNALS, signal.SIGUSR2)}

    def before(signum, frame):  # what was installed before training started
        raise AssertionError("the handler from before training ran")

    for signum in saved:
        signal.signal(signum, before)
    yield before
    for signum, handler in saved.items():
        signal.signal(signum, handler)


def _requeued_attempt(stop: GracefulStop) -> None:
    stop.on_train_start(None, None)
    for signum in STOP_SIGNALS:  # as on_train_batch_end's requeue path does
        signal.signal(signum, signal.SIG_IGN)


def test_after_a_requeue_sigterm_stays_ignored(handlers) -> None:
    stop = GracefulStop(last=None, requeue_signal=signal.SIGUSR2, job_id="7")
    _requeued_attempt(stop)
    stop.on_exception(None, None, Requeued("requeued at step 3"))
    for signum in STOP_SIGNALS:
        assert signal.getsignal(signum) is signal.SIG_IGN
    assert signal.getsignal(signal.SIGUSR2) is handlers  # the requeue signal's is put back


def test_any_other_exception_puts_the_handlers_back(handlers) -> None:
    stop = GracefulStop(last=None, requeue_signal=signal.SIGUSR2, job_id="7")
    _requeued_attempt(stop)
    stop.on_exception(None, None, RunInterrupted("stopped", signal.SIGTERM))
    for signum in (*STOP_SIGNALS, signal.SIGUSR2):
        assert signal.getsignal(signum) is handlers


def _trainer_between_validations() -> SimpleNamespace:
    """A one-process trainer after a batch that neither ends the epoch nor precedes a validation."""
    return SimpleNamespace(
        strategy=SimpleNamespace(
            reduce_boolean_decision=lambda decision, all: decision,
            reduce=lambda tensor, reduce_op: tensor,
            root_device=torch.device("cpu"),
        ),
        max_steps=100,
        global_step=5,
        current_epoch=0,
        is_last_batch=False,
        fit_loop=SimpleNamespace(
            _data_fetcher=None,
            epoch_loop=SimpleNamespace(_should_check_val_fx=lambda fetcher: False),
        ),
    )


def test_a_signal_that_lands_while_the_stop_file_is_read_stops_the_run(handlers) -> None:
    """Ctrl-C arriving while a sweep job read its (absent) stop file: the read's None replaced the
    flag the handler had just set, the signal was lost and the sweep ran its jobs to the end."""

    def poll_interrupted_by_ctrl_c() -> None:
        signal.raise_signal(signal.SIGINT)  # the handler runs here, before the read returns
        return None

    stop = GracefulStop(last=None, poll=poll_interrupted_by_ctrl_c)
    stop.on_train_start(None, None)
    try:
        with pytest.raises(RunInterrupted, match="interrupted by SIGINT at epoch 0, step 5"):
            stop.on_train_batch_end(_trainer_between_validations())
    finally:
        stop.on_train_end(None, None)
