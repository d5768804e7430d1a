"""A refused resume changes nothing, through the real CLI: ``python train.py ... ckpt_path=...``
refused in one line (exit status 1) leaves the run it names byte for byte as it was, adds no
directory, and the run stays in ``report table``.

Each refusal itself is decided by the planner and tested there
(`tests/unit/lifecycle/test_plan.py`); these two replay what a user met: a finished run marked
failed by a refused differing seed, and Lightning's traceback for a budget below what an
interrupted run had trained.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.integration.helpers import one_line_error, run_cli, treernn_cli
from treernn.lifecycle import locks, records
from treernn.lifecycle.identity import process_identity

pytestmark = [pytest.mark.usefixtures("data_dir"), pytest.mark.slow]

#: a tiny logic classifier: 2 epochs of 2 updates each
TINY = [
    "task=logic",
    "model=lstm",
    "trainer=smoke",
    "model.hidden_size=8",
    "task.module.embedding_size=8",
    "trainer.max_steps=-1",
    "trainer.max_epochs=2",
    "trainer.limit_train_batches=2",
    "trainer.limit_val_batches=1",
    "trainer.limit_test_batches=1",
]


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A finished run of ``TINY`` (2 epochs, step 4)."""
    log_dir = tmp_path_factory.mktemp("finished")
    result = run_cli([*TINY, f"paths.log_dir={log_dir}"])
    assert result.returncode == 0, result.stderr[-3000:]
    (run_dir,) = [path.parent for path in log_dir.glob("logic/lstm/*/metrics.json")]
    return run_dir


def copied(run_dir: Path, log_dir: Path) -> Path:
    """``run_dir`` copied under ``log_dir`` (its records name their own path only in text)."""
    copy = log_dir / "logic" / "lstm" / run_dir.name
    shutil.copytree(run_dir, copy, symlinks=True)
    return copy


def contents(root: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(root)): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def test_a_differing_seed_leaves_the_finished_run_in_the_report(tmp_path, finished):
    run_dir = copied(finished, tmp_path)
    last = run_dir / "checkpoints" / "last.ckpt"
    before = contents(run_dir)
    overrides = records.read_status(run_dir)["overrides"]  # the run's own: no seed given
    assert not any(line.startswith("seed=") for line in overrides)
    result = run_cli(
        [*TINY, f"paths.log_dir={tmp_path}", "seed=2", "trainer.max_epochs=3", f"ckpt_path={last}"]
    )
    line = one_line_error(result, f"resuming {last}: seed=2 differs from the checkpoint's seed=")
    assert "drop the seed override" in line
    assert "Trainer" not in result.stderr  # refused before the trainer or the data
    assert contents(run_dir) == before
    assert [path.name for path in (tmp_path / "logic" / "lstm").iterdir()] == [run_dir.name]
    report = treernn_cli("report", "table", str(tmp_path))
    assert report.returncode == 0, report.stderr[-3000:]
    rows = [row for row in report.stdout.splitlines() if row.startswith("| lstm |")]
    assert len(rows) == 1 and rows[0].startswith("| lstm | 1 |"), report.stdout


def test_a_budget_below_what_an_interrupted_run_trained_is_one_line(tmp_path, finished):
    """Lightning answered ``trainer.max_epochs`` below the epochs trained with a traceback
    (``MisconfigurationException: You restored a checkpoint with current_epoch=2, but you have
    set Trainer(max_epochs=1)``), here for a run killed while training whose recorded pid an
    unrelated process holds now."""
    run_dir = copied(finished, tmp_path)
    unrelated = subprocess.Popen(["sleep", "120"])
    try:
        identity = process_identity(unrelated.pid)
        identity["pid_start"] -= 1  # the killed run's process started before this one
        records.write_status(run_dir, status="running", stage="fit+test", **identity)
        assert not locks.is_live(run_dir)
        before = contents(run_dir)
        result = run_cli(
            [*TINY, f"paths.log_dir={tmp_path}", "ckpt_path=last", "trainer.max_epochs=1"]
        )
    finally:
        unrelated.kill()
        unrelated.wait()
    last = run_dir / "checkpoints" / "last.ckpt"
    one_line_error(
        result,
        f"resuming {last}: trainer.max_epochs=1 is below the 2 epochs it has already trained "
        "(2 epochs, step 4); give trainer.max_epochs=2 to end it where it stands",
    )
    assert "Misconfiguration" not in result.stderr
    assert contents(run_dir) == before
    assert [path.name for path in (tmp_path / "logic" / "lstm").iterdir()] == [run_dir.name]
