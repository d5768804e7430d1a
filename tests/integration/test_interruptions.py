"""Runs that stop before their end: Ctrl-C and SIGTERM save a checkpoint and resume exactly, a
live run is never resumed by a second writer, a full disk is one line that keeps the last good
checkpoint, ``last.ckpt`` is the newest state, and ``ckpt_path=last`` passes over runs without a
checkpoint. Each test replays what a user did, through the real CLI."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.helpers import (
    REPO_ROOT,
    TINY_LM,
    TINY_PARSE,
    one_line_error,
    run_cli,
    tiny_logic,
)
from treernn import checkpoints
from treernn.lifecycle import records

pytestmark = [pytest.mark.usefixtures("data_dir"), pytest.mark.slow]

#: a tiny ON-LSTM LM with every dropout on: a resume is exact only if the random state is too
QUICK = [
    *TINY_LM,
    *TINY_PARSE,
    "trainer.limit_val_batches=2",
    "trainer.limit_test_batches=2",
    "trainer.num_sanity_val_steps=0",
    "trainer.enable_progress_bar=false",
]
#: a tiny logic classifier validated every 10 updates, budget in updates (as the tables run)
LOGIC = tiny_logic(validate_every=10, max_steps=40)

#: the same, 80 updates, the lr halved by every validation that does not improve on the best
PLATEAU = [
    *[arg for arg in LOGIC if not arg.startswith("trainer.max_steps=")],
    "trainer.max_steps=80",
    "task.module.scheduler.patience=0",
]


def _signal_at(step: int, name: str) -> list[str]:
    return [
        "+callbacks.stop._target_=tests.integration.helpers.SendSignalAt",
        f"+callbacks.stop.step={step}",
        f"+callbacks.stop.signal_name={name}",
    ]


def _run_dirs(log_dir: Path, task: str = "ptb", model: str = "onlstm") -> list[Path]:
    return sorted(p.parent for p in (log_dir / task / model).glob("*/.hydra"))


def _metrics(run_dir: Path) -> dict[str, float]:
    metrics = json.loads((run_dir / "metrics.json").read_text())
    return {k: v for k, v in metrics.items() if "tokens_per_sec" not in k and k[:3] != "lr-"}


def _csv(run_dir: Path) -> list[dict[str, str]]:
    import csv

    with open(run_dir / "csv" / "metrics.csv", newline="") as handle:
        return [
            {k: v for k, v in row.items() if v and "tokens_per_sec" not in k}
            for row in csv.DictReader(handle)
        ]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> dict[str, Path]:
    """The two settings run to their end without a stop, to compare resumed runs with."""
    found = {}
    for name, args, task, model in (
        ("ptb", [*QUICK, "trainer.max_epochs=2"], "ptb", "onlstm"),
        ("logic", LOGIC, "logic", "lstm"),
        ("plateau", PLATEAU, "logic", "lstm"),
    ):
        log_dir = tmp_path_factory.mktemp(name)
        result = run_cli([*args, f"paths.log_dir={log_dir}"])
        assert result.returncode == 0, result.stderr[-3000:]
        (found[name],) = _run_dirs(log_dir, task, model)
    return found


@pytest.mark.parametrize(
    ("setting", "signal_name", "code"),
    [("ptb", "SIGTERM", 143), ("logic", "SIGINT", 130), ("plateau", "SIGTERM", 143)],
)
def test_a_signal_saves_a_checkpoint_and_the_resumed_run_is_exact(
    setting, signal_name, code, tmp_path, uninterrupted
):
    args, task, model, step, epoch = {
        "ptb": ([*QUICK, "trainer.max_epochs=2"], "ptb", "onlstm", 20, 1),  # 2nd epoch, mid-way
        "logic": (LOGIC, "logic", "lstm", 23, 1),  # after the validation at 20, in epoch 2
        # after the validation at 40 and before epoch 3 ends at step 47, where the plateau
        # scheduler steps on that validation's metric (halving the lr: checked below)
        "plateau": (PLATEAU, "logic", "lstm", 42, 2),
    }[setting]
    stopped = run_cli([*args, f"paths.log_dir={tmp_path}", *_signal_at(step, signal_name)])
    assert stopped.returncode == code, stopped.stderr[-3000:]
    assert "Traceback" not in stopped.stderr
    (line,) = [line for line in stopped.stderr.splitlines() if line.startswith("interrupted by")]
    assert f"interrupted by {signal_name} at epoch {epoch}, step {step}" in line
    assert "resume with ckpt_path=last" in line
    (run_dir,) = _run_dirs(tmp_path, task, model)
    record = records.read_status(run_dir)
    assert record["status"] == "interrupted" and signal_name in record["error"]
    assert checkpoints.inspect_checkpoint(run_dir / "checkpoints" / "last.ckpt").global_step == step

    resumed = run_cli([*args, f"paths.log_dir={tmp_path}", "ckpt_path=last"])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert records.read_status(run_dir)["status"] == "finished"
    assert _metrics(run_dir) == _metrics(uninterrupted[setting])
    assert _csv(run_dir) == _csv(uninterrupted[setting])  # no row twice, none missing
    if setting == "plateau":  # the scheduler's step at 47 came from the first process's validation
        rates = [row["lr-Adam"] for row in _csv(run_dir) if "lr-Adam" in row]
        assert rates[:4] == ["0.001", "0.001", "0.001", "0.0005"]


def test_a_signal_just_before_a_validation_stops_after_it_and_resumes_exactly(
    tmp_path, uninterrupted
):
    """SIGTERM in the update after which the validation at 40 is due: the run validates first and
    stops after update 41. Saved at 40, before that validation, it resumed past it without running
    it (Lightning's restarted loop counts it as done): one validation fewer in the CSV and one
    plateau observation fewer, the learning rate then halved a validation late (a SLURM requeue
    test saw it once in a hundred requeues)."""
    stopped = run_cli([*PLATEAU, f"paths.log_dir={tmp_path}", *_signal_at(40, "SIGTERM")])
    assert stopped.returncode == 143, stopped.stderr[-3000:]
    assert "interrupted by SIGTERM at epoch 2, step 41" in stopped.stderr
    (run_dir,) = _run_dirs(tmp_path, "logic", "lstm")
    assert checkpoints.inspect_checkpoint(run_dir / "checkpoints" / "last.ckpt").global_step == 41
    resumed = run_cli([*PLATEAU, f"paths.log_dir={tmp_path}", "ckpt_path=last"])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert _metrics(run_dir) == _metrics(uninterrupted["plateau"])
    assert _csv(run_dir) == _csv(uninterrupted["plateau"])


@pytest.mark.parametrize(
    ("setting", "step", "checkpoint_step", "minutes"),
    [
        ("ptb", 16, 14, None),  # after the end of epoch 1
        ("logic", 33, 30, None),  # after the validation at 30
        # checkpoint_minutes: also saved at each batch's end once that long has passed since
        # the last save (here at once), but not at an epoch's end (logic's epoch 2 ends at 32)
        # nor before a due validation; the SIGKILL comes before the save of its own step
        ("ptb", 17, 16, 1e-6),
        ("logic", 34, 33, 1e-6),
        ("logic", 33, 31, 1e-6),
    ],
)
def test_a_killed_run_resumes_exactly_from_its_last_checkpoint(
    setting, step, checkpoint_step, minutes, tmp_path, uninterrupted
):
    args, task, model = {
        "ptb": ([*QUICK, "trainer.max_epochs=2"], "ptb", "onlstm"),
        "logic": (LOGIC, "logic", "lstm"),
    }[setting]
    if minutes is not None:
        args = [*args, f"checkpoint_minutes={minutes}"]
    killed = run_cli([*args, f"paths.log_dir={tmp_path}", *_signal_at(step, "SIGKILL")])
    assert killed.returncode == -9
    (run_dir,) = _run_dirs(tmp_path, task, model)
    assert records.read_status(run_dir)["status"] == "running"  # it could not say otherwise
    resumed = run_cli([*args, f"paths.log_dir={tmp_path}", "ckpt_path=last"])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"step {checkpoint_step})" in resumed.stdout + resumed.stderr
    assert _metrics(run_dir) == _metrics(uninterrupted[setting])
    assert _csv(run_dir) == _csv(uninterrupted[setting])


def test_a_live_run_is_not_resumed_into(tmp_path):
    args = [*QUICK, "trainer.max_epochs=200", f"paths.log_dir={tmp_path}"]
    env = {**os.environ, "WANDB_MODE": "offline", "PYTHONUNBUFFERED": "1"}
    live = subprocess.Popen(
        [sys.executable, str(REPO_ROOT / "train.py"), *args],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 300
        while not list(tmp_path.glob("ptb/onlstm/*/checkpoints/last.ckpt")):
            assert live.poll() is None, live.communicate()[1][-3000:]
            assert time.monotonic() < deadline
            time.sleep(0.5)
        (run_dir,) = _run_dirs(tmp_path)
        second = run_cli([*args, "ckpt_path=last"])
        one_line_error(second, "still running", f"pid {live.pid}", "kill -TERM")
        assert records.read_status(run_dir)["pid"] == live.pid  # its record is untouched
        assert not list(run_dir.glob("checkpoints/*-v1.ckpt"))
    finally:
        live.send_signal(signal.SIGTERM)
        _, stderr = live.communicate(timeout=300)
    assert live.returncode == 143, stderr[-3000:]
    assert records.read_status(run_dir)["status"] == "interrupted"


def test_last_checkpoint_is_the_newest_state_and_a_finished_run_is_refused(tmp_path):
    # task.mode=max on perplexity: the "best" is the first epoch, every later one is worse
    args = [*QUICK, "trainer.max_epochs=3", "task.mode=max", f"paths.log_dir={tmp_path}"]
    assert run_cli(args).returncode == 0
    (run_dir,) = _run_dirs(tmp_path)
    last = checkpoints.inspect_checkpoint(run_dir / "checkpoints" / "last.ckpt")
    (best_path,) = (run_dir / "checkpoints").glob("epoch*.ckpt")
    best = checkpoints.inspect_checkpoint(best_path)
    assert last.epochs_done == 3 and last.global_step > best.global_step
    refused = run_cli([*args, "ckpt_path=last"])
    one_line_error(refused, "finished (3 epochs", "trainer.max_epochs=6")
    more = run_cli([*args, "ckpt_path=last", "trainer.max_epochs=4"])
    assert more.returncode == 0, more.stderr[-3000:]
    resumed_from = f"from {run_dir / 'checkpoints' / 'last.ckpt'} (3 epochs done"
    assert resumed_from in more.stdout + more.stderr
    epochs = [row["epoch"] for row in _csv(run_dir) if "val/ppl" in row]
    assert epochs == ["0", "1", "2", "3"]  # each epoch validated once: none trained twice


def test_last_passes_over_runs_without_a_checkpoint(tmp_path):
    args = [*QUICK, "trainer=smoke", f"paths.log_dir={tmp_path}"]
    assert run_cli(args).returncode == 0
    (trained,) = _run_dirs(tmp_path)
    ckpt = trained / "checkpoints" / "last.ckpt"
    assert run_cli([*args, "mode=test", f"ckpt_path={ckpt}"]).returncode == 0
    # a run that failed while setting up keeps its directory only in a sweep; make one by hand
    failed = tmp_path / "ptb" / "onlstm" / "2099-01-01_00-00-00-000000_1"
    (failed / ".hydra").mkdir(parents=True)
    records.write_status(failed, status="failed", stage="setup", started="2099-01-01T00:00:00")
    resumed = run_cli([*args, "ckpt_path=last", "trainer.max_epochs=2", "trainer.max_steps=6"])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    output = resumed.stdout + resumed.stderr
    assert f"passed over {failed} (failed while setting up, no checkpoint)" in output
    assert "(a mode=test run, no checkpoint)" in output
    assert f"resuming {trained} from {ckpt}" in output


def _mount_tmpfs(path: Path, size: str) -> bool:
    if os.geteuid() != 0:
        return False
    path.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True
    )
    return result.returncode == 0


def test_a_full_disk_is_one_line_and_keeps_the_last_good_checkpoint(tmp_path):
    disk = tmp_path / "disk"
    if not _mount_tmpfs(disk, "16m"):
        pytest.skip("mounting a small tmpfs needs root (CI runs as root)")
    try:
        result = run_cli(
            [
                *QUICK,
                "trainer.max_epochs=3",
                f"paths.log_dir={disk / 'outputs'}",
                "+callbacks.fill._target_=tests.integration.helpers.FillDiskAt",
                "+callbacks.fill.step=16",  # in the second epoch, after epoch 1's checkpoints
                f"+callbacks.fill.path={disk / 'filler'}",
            ]
        )
        one_line_error(result, "No space left on device", "resume with ckpt_path=last")
        (run_dir,) = _run_dirs(disk / "outputs")
        record = records.read_status(run_dir)
        assert record["status"] == "failed" and "No space left" in record["error"]
        files = [p for p in run_dir.rglob("*") if p.is_file()]
        empty = [p.name for p in files if p.stat().st_size == 0]
        assert set(empty) <= {".lock", "train.log"}  # the lock is empty by design
        assert not [p for p in files if p.name.endswith(".tmp")]
        kept = checkpoints.inspect_checkpoint(run_dir / "checkpoints" / "last.ckpt")
        assert kept.epochs_done == 1  # the checkpoint of the first epoch, whole
    finally:
        subprocess.run(["umount", str(disk)], check=False)


def test_a_killed_run_moved_to_another_directory_resumes_with_its_best(tmp_path, uninterrupted):
    """A sweep job restored on another machine: the run directory, killed after the validation at
    30, is moved before it resumes. Its checkpoint callback keeps the best score and file under
    the new directory (Lightning's own forgets them there, with a "dirpath has changed"
    warning), so the resumed run validates, halves the lr and tests as the run never moved."""
    old_log = tmp_path / "old"
    killed = run_cli([*PLATEAU, f"paths.log_dir={old_log}", *_signal_at(33, "SIGKILL")])
    assert killed.returncode == -9
    (run_dir,) = _run_dirs(old_log, "logic", "lstm")
    new_log = tmp_path / "new"
    moved = new_log / run_dir.relative_to(old_log)
    shutil.copytree(run_dir, moved, symlinks=True)
    shutil.rmtree(old_log)
    resumed = run_cli([*PLATEAU, f"paths.log_dir={new_log}", "ckpt_path=last"])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "dirpath has changed" not in resumed.stdout + resumed.stderr
    assert _metrics(moved) == _metrics(uninterrupted["plateau"])
    assert _csv(moved) == _csv(uninterrupted["plateau"])


def _ranked_probes(fastest: list[str]) -> list[str]:
    return [
        "+callbacks.probes._target_=tests.fixtures.kernel_probes.RankedProbes",
        f"+callbacks.probes.fastest=[{','.join(fastest)}]",
    ]


def _cache_of_its_own(directory: Path) -> dict[str, str]:
    """A machine cache of the kernels' choices of its own (the compiled kernels shared with the
    test run's own cache: built again, they would take minutes)."""
    shared = Path(os.environ.get("TREERNN_CACHE_DIR", "~/.cache/treernn")).expanduser()
    directory.mkdir(parents=True)
    (directory / "cpp_ext").symlink_to(shared / "cpp_ext", target_is_directory=True)
    return {"TREERNN_CACHE_DIR": str(directory)}


def test_a_resumed_run_keeps_the_kernel_choices_it_started_with(tmp_path):
    """A killed run resumed on a loaded machine, in a process whose probes would choose other
    GEMM backends and loop placements than the first process's, ends where the uninterrupted run
    ends: it uses the choices recorded in its run directory (and, for the test's shapes, which
    the killed process never saw, those the machine kept from the uninterrupted run, probed
    under load). Before, a probe under load was kept by no one: the resumed ON-LSTM probed again
    and its metrics differed from the sixth significant digit on (on a loaded 2-core AMD Zen 3
    in CI, val/ppl 1052.2092 against 1052.2159)."""
    # (each run's aten loops are slower than the probed kernels: a longer timeout on a busy CPU)
    args = [*QUICK, "trainer.max_epochs=2"]
    first_choices = _ranked_probes(["aten", "separate"])  # then onednn for weight gradients
    other_choices = _ranked_probes(["treernn", "rows", "onednn"])
    machine = _cache_of_its_own(tmp_path / "machine")
    whole = run_cli(
        [*args, f"paths.log_dir={tmp_path / 'whole'}", *first_choices], env=machine, timeout=1200
    )
    assert whole.returncode == 0, whole.stderr[-3000:]
    (uninterrupted,) = _run_dirs(tmp_path / "whole")

    log_dir = f"paths.log_dir={tmp_path / 'killed'}"
    killed = run_cli(
        [*args, log_dir, *first_choices, *_signal_at(16, "SIGKILL")], env=machine, timeout=1200
    )
    assert killed.returncode == -9
    (run_dir,) = _run_dirs(tmp_path / "killed")
    resumed = run_cli([*args, log_dir, "ckpt_path=last", *other_choices], env=machine, timeout=1200)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "step 14)" in resumed.stdout + resumed.stderr
    assert _metrics(run_dir) == _metrics(uninterrupted)
    assert _csv(run_dir) == _csv(uninterrupted)
    # the choices recorded with the run: all of the first process's ranking
    record = json.loads((run_dir / ".hydra" / "kernel_choices.json").read_text())
    kept = set(record["choices"].values())
    assert "aten" in kept and kept <= {"aten", "separate", "onednn"}, record
