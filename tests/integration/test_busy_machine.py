"""``python train.py`` on torch's thread count beside processes that keep every core busy says so,
on the console and in ``train.log``, and names the thread count that fits; the run goes on."""

from __future__ import annotations

import os

import pytest

from tests.fixtures.busy_cores import every_core_busy
from tests.integration.helpers import run_cli, tiny_logic


@pytest.mark.slow
def test_a_run_beside_busy_cores_is_told_which_threads_fit(tmp_path) -> None:
    cpus = os.cpu_count() or 1
    with every_core_busy():
        done = run_cli(
            [
                *tiny_logic(validate_every=2, max_steps=2),
                "threads=null",
                f"paths.log_dir={tmp_path}",
            ],
            # torch's default, one thread per core; the test workers set one each, and torch
            # takes MKL_NUM_THREADS over OMP_NUM_THREADS
            env={
                "OMP_NUM_THREADS": str(max(2, cpus)),
                "MKL_NUM_THREADS": str(max(2, cpus)),
                "TREERNN_PROBE_SECONDS": "0",
            },
        )
    assert done.returncode == 0, done.stderr[-2000:]
    expected = f"CPUs busy while this run set up, and it runs {max(2, cpus)} torch threads"
    assert expected in done.stdout and "threads=1 is likely faster" in done.stdout
    (log,) = tmp_path.rglob("train.log")
    assert log.read_text().count(expected) == 1
