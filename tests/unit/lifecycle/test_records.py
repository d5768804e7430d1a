"""Checkpoint writing, run records and locks: atomic files, a full disk, one writer per run, and
the last checkpoint that never holds diverged weights."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch import nn
from torch.utils.data import DataLoader

from treernn import checkpoints, files
from treernn.callbacks.checkpoint import LastCheckpoint
from treernn.callbacks.divergence import DivergenceMonitor
from treernn.errors import DivergedError, StorageError, UserError
from treernn.lifecycle import locks, loggers, records, runs
from treernn.lifecycle.identity import process_identity
from treernn.lifecycle.plan import plan_sweep_job
from treernn.lifecycle.sweeps import layout


def _no_room(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_atomic_write_on_a_full_disk_keeps_the_old_file_and_leaves_no_partial_one(
    tmp_path, monkeypatch
):
    target = tmp_path / "last.ckpt"
    checkpoints.AtomicCheckpointIO().save_checkpoint({"x": torch.ones(3)}, target)
    before = target.read_bytes()
    monkeypatch.setattr(files.os, "fsync", _no_room)
    with pytest.raises(StorageError, match="cannot write .*last.ckpt: No space left on device"):
        checkpoints.AtomicCheckpointIO().save_checkpoint({"x": torch.zeros(3)}, target)
    assert target.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt"]


def test_status_is_rewritten_in_place_when_the_disk_is_full(tmp_path, monkeypatch):
    records.write_status(tmp_path, status="running", stage="fit")
    monkeypatch.setattr(files.os, "fsync", _no_room)
    records.write_status(tmp_path, status="failed", error="No space left on device")
    assert records.read_status(tmp_path)["status"] == "failed"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["status.json"]


def test_a_run_directory_has_one_writer(tmp_path):
    lock = locks.RunLock(tmp_path)
    lock.acquire()
    try:
        records.write_status(tmp_path, status="running", **process_identity())
        # another process sees the lock held
        probe = "from treernn.lifecycle import locks; import sys; print(locks.is_live(sys.argv[1]))"
        held = subprocess.run(
            [sys.executable, "-c", probe, str(tmp_path)], capture_output=True, text=True
        )
        assert held.stdout.strip() == "True", held.stderr
        with pytest.raises(UserError, match=f"still running \\(pid {os.getpid()} on"):
            locks.RunLock(tmp_path).acquire()
    finally:
        lock.release()
    records.write_status(tmp_path, status="running", pid=2**22 + 7, pid_start=1)  # a dead process
    assert not locks.is_live(tmp_path)


def test_metrics_rows_after_the_resumed_step_are_dropped(tmp_path):
    """Resumed from the checkpoint of update 20: the validation after update 20 (step 19) is
    kept; the rows of step 20 and later were logged after that checkpoint."""
    path = tmp_path / "metrics.csv"
    path.write_text("epoch,step,val/ppl\n0,9,120\n0,13,110\n1,19,105\n1,20,100\n1,27,90\n")
    header, rows = loggers.csv_rows_up_to(path, 20)
    assert header == ["epoch", "step", "val/ppl"]
    assert [row[1] for row in rows] == ["9", "13", "19"]


class _NaNValidation(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(2, 1)

    def training_step(self, batch, batch_idx):
        return self.layer(batch).pow(2).mean()

    def validation_step(self, batch, batch_idx):
        self.log("val/ppl", float("nan"))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self):
        return DataLoader(torch.randn(8, 2), batch_size=4)

    def val_dataloader(self):
        return DataLoader(torch.randn(4, 2), batch_size=4)


def test_no_checkpoint_is_written_from_a_non_finite_validation(tmp_path):
    trainer = pl.Trainer(
        max_epochs=2,
        callbacks=[
            DivergenceMonitor("val/ppl", "min"),
            ModelCheckpoint(dirpath=tmp_path, monitor="val/ppl", save_top_k=1),
            LastCheckpoint(tmp_path),
        ],
        plugins=[checkpoints.AtomicCheckpointIO()],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    with pytest.raises(DivergedError, match="val/ppl is nan"):
        trainer.fit(_NaNValidation())
    assert not list(Path(tmp_path).iterdir())


def test_other_ranks_of_a_job_follow_the_record_rank_zero_is_writing(tmp_path, monkeypatch):
    """srun starts every task of a DDP sweep job at once: rank 0 takes the job's lock and marks it
    running, and rank 1, planning a moment later, found "still running" and left rank 0 waiting
    for it for ever. A follower takes rank 0's decision from the same record instead."""
    overrides = ["seed=1"]
    lock = locks.RunLock(tmp_path)
    lock.acquire()  # held as another process would hold it (a second open file)
    try:
        records.write_status(tmp_path, status="running", overrides=overrides, **process_identity())
        with pytest.raises(layout.SweepChanged, match="still running"):
            plan_sweep_job(tmp_path, overrides)
        assert plan_sweep_job(tmp_path, overrides, follower=True).action == "run"
        # the same when rank 0 is resuming: both ranks resume from the newest checkpoint
        found = tmp_path / "checkpoints" / "last.ckpt"
        newest = SimpleNamespace(path=found)
        monkeypatch.setattr(runs, "newest_complete_checkpoint", lambda run_dir: (newest, None))
        plan = plan_sweep_job(tmp_path, overrides, follower=True)
        assert (plan.action, plan.checkpoint) == ("resume", found)
    finally:
        lock.release()


def test_each_attempt_of_a_run_records_the_machine_it_ran_on(tmp_path):
    """A table's jobs can continue on another node after a requeue: the record keeps one entry
    per attempt, with the CPU's model (what speed figures must name)."""
    records.record_machine(tmp_path)
    records.record_machine(tmp_path)
    seen = records.read_status(tmp_path)["machines"]
    assert len(seen) == 2
    cpuinfo = Path("/proc/cpuinfo").read_text().splitlines()
    model = next(line for line in cpuinfo if line.startswith("model name"))
    family = next(line for line in cpuinfo if line.startswith("cpu family"))
    assert seen[0]["cpu"].startswith(model.split(":", 1)[1].strip())
    assert f"family {family.split(':', 1)[1].strip()} model " in seen[0]["cpu"]
    flags = next(line for line in cpuinfo if line.startswith("flags")).split()
    assert ("avx2" in seen[0]["isa"]) == ("avx2" in flags)
    assert seen[0]["threads"] == torch.get_num_threads() and seen[0]["cpus"] == os.cpu_count()


def test_an_attempt_records_the_cpu_time_it_used_and_a_run_sums_its_attempts(tmp_path):
    """From its `record_machine` on, each status write of an attempt's process brings that
    attempt's CPU time up to date: half a second of busy loop adds about half a second. Earlier
    attempts' entries, and runs the process has no attempt in, are left as they are; `cpu_hours`
    sums a run's attempts and counts those that recorded none."""
    run = tmp_path / "run"
    records.write_status(run, machines=[{"host": "a", "cpu_seconds": 1800.0}, {"host": "b"}])
    records.record_machine(run)
    before = records.read_status(run)["machines"][-1]["cpu_seconds"]
    start = time.process_time()
    while time.process_time() - start < 0.5:
        pass
    records.write_status(run, stage="fit")
    seen = records.read_status(run)["machines"]
    assert seen[0] == {"host": "a", "cpu_seconds": 1800.0} and "cpu_seconds" not in seen[1]
    assert 0.45 <= seen[2]["cpu_seconds"] - before <= 1.5
    hours, missing = records.cpu_hours(records.read_status(run))
    assert missing == 1 and hours == pytest.approx((1800.0 + seen[2]["cpu_seconds"]) / 3600)
    other = tmp_path / "other"
    records.write_status(other, machines=[{"host": "c"}])
    records.write_status(other, stage="fit")
    assert records.read_status(other)["machines"] == [{"host": "c"}]
    assert records.cpu_hours({}) == (0.0, 0)


def test_a_run_records_the_commit_of_the_code_it_ran(tmp_path):
    """Which code ran, beside the machine: the checkout's commit, ``+changes`` where tracked
    files differ from it; None outside a git checkout (an installed package)."""
    assert records.code_version(tmp_path) is None
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    (tmp_path / "a.py").write_text("x = 1\n")
    subprocess.run([*git, "add", "a.py"], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    assert records.code_version(tmp_path) == head[:12]
    (tmp_path / "notes.txt").write_text("untracked files are not the code\n")
    assert records.code_version(tmp_path) == head[:12]
    (tmp_path / "a.py").write_text("x = 2\n")
    assert records.code_version(tmp_path) == head[:12] + "+changes"


def test_the_commit_is_read_from_the_checkout_that_runs():
    """The checkout of the running package, not a folder inside it: runs from a checkout
    recorded no commit, and every model card said "commit unknown"."""
    root = Path(records.__file__).resolve().parents[3]
    if not (root / ".git").exists():
        pytest.skip("treernn runs from an installed package here, not from a git checkout")
    head = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout
    assert records.code_version() in (head[:12], head[:12] + "+changes")


def test_the_machine_entry_holds_the_commit_where_there_is_one(monkeypatch):
    monkeypatch.setattr(records, "code_version", lambda: "0123456789ab+changes")
    assert records.machine()["commit"] == "0123456789ab+changes"
    monkeypatch.setattr(records, "code_version", lambda: None)
    assert "commit" not in records.machine()


def test_hydra_writes_its_files_into_a_run_that_has_not_finished_and_in_rank_zero_only(
    tmp_path, monkeypatch
):
    from treernn.lifecycle.resolvers import unless_finished

    for name in ("RANK", "SLURM_PROCID", "LOCAL_RANK", "NODE_RANK", "GROUP_RANK"):
        monkeypatch.delenv(name, raising=False)
    run_dir = str(tmp_path)
    assert unless_finished(".hydra", run_dir) == ".hydra"  # a new run
    records.write_status(tmp_path, status="finished")
    assert unless_finished(".hydra", run_dir) == ".hydra"  # no final metrics: not finished
    (tmp_path / "metrics.json").write_text("{}")
    assert unless_finished(".hydra", run_dir) is None
    assert unless_finished("train.log", run_dir, "/dev/null") == "/dev/null"
    records.write_status(tmp_path, status="interrupted")  # resumed: Hydra writes its files again
    assert unless_finished(".hydra", run_dir) == ".hydra"
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert unless_finished(".hydra", run_dir, "/dev/null") == "/dev/null"
