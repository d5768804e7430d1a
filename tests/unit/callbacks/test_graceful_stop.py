"""GracefulStop's signal handlers around a SLURM requeue: after the attempt has asked to be
requeued, the SIGTERM that SLURM answers with stays ignored through the exception that ends the
attempt; any other exception puts back the handlers that were there before training."""

from __future__ import annotations

import signal

import pytest

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
