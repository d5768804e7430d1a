"""Runs that never lie: resume by record, overrides on resume, divergence, errors, run records.

Each test re-plays one way a run went wrong for a user (short PTB runs through the real CLI) and
checks the behaviour that replaced it.
"""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.integration.helpers import REPO_ROOT, TINY_LM, TINY_PARSE, compose_config, run_cli
from treernn import checkpoints
from treernn.errors import CheckpointError
from treernn.lifecycle import entry, records

pytestmark = [pytest.mark.usefixtures("data_dir"), pytest.mark.slow]

QUICK = [
    *TINY_LM,
    *TINY_PARSE,
    "trainer.limit_train_batches=4",
    "trainer.limit_val_batches=2",
    "trainer.limit_test_batches=2",
    "trainer.num_sanity_val_steps=0",
    "trainer.enable_progress_bar=false",
]


def _cli(log_dir: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    if env is None:
        return run_cli([*QUICK, f"paths.log_dir={log_dir}", *args])
    return subprocess.run(
        [sys.executable, str(REPO_ROOT / "train.py"), *QUICK, f"paths.log_dir={log_dir}", *args],
        cwd=REPO_ROOT,
        env={**os.environ, "WANDB_MODE": "offline", **env},
        capture_output=True,
        text=True,
        timeout=600,
    )


def _runs(log_dir: Path) -> list[Path]:
    return sorted(p.parent for p in (log_dir / "ptb" / "onlstm").glob("*/.hydra"))


def _csv_rows(run_dir: Path) -> list[dict[str, str]]:
    with open(run_dir / "csv" / "metrics.csv", newline="") as handle:
        return list(csv.DictReader(handle))


def _error_lines(result: subprocess.CompletedProcess) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("error:")]


def _one_line_error(result: subprocess.CompletedProcess, *needles: str) -> str:
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    (line,) = _error_lines(result)
    for needle in needles:
        assert needle in line, line
    return line


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory) -> tuple[Path, Path, Path]:
    """An older finished run of 1 epoch, then a newer run of 2 epochs killed after writing its
    epoch-1 checkpoint but before ``last.ckpt`` (simulated: last.ckpt deleted, status running)."""
    log_dir = tmp_path_factory.mktemp("resume")
    assert _cli(log_dir, "trainer.max_epochs=1").returncode == 0
    result = _cli(log_dir, "trainer.max_epochs=2")
    assert result.returncode == 0, result.stderr[-3000:]
    older, newer = _runs(log_dir)
    (newer / "checkpoints" / "last.ckpt").unlink()
    records.write_status(newer, status="running", stage="fit+test")
    # the older run's last.ckpt is now the newest last.ckpt by file time: it must not be chosen
    (older / "checkpoints" / "last.ckpt").touch()
    return log_dir, older, newer


def test_last_resumes_the_killed_run_from_its_epoch_checkpoint(two_runs):
    log_dir, older, newer = two_runs
    result = _cli(log_dir, "ckpt_path=last", "mode=fit", "trainer.max_epochs=3")
    assert result.returncode == 0, result.stderr[-3000:]
    output = result.stdout + result.stderr
    assert f"resuming {newer} from {newer / 'checkpoints' / 'epoch001.ckpt'}" in output
    # the history continues in the killed run's directory
    assert checkpoints.inspect_checkpoint(newer / "checkpoints" / "last.ckpt").epochs_done == 3
    record = records.read_status(newer)
    assert record["status"] == "finished" and len(record["resumes"]) == 1
    epochs = {row["epoch"] for row in _csv_rows(newer)}
    assert {"0", "1", "2"} <= epochs  # the rows before the resume are still there
    invocation = Path(record["resumes"][0]["invocation_dir"])
    assert (invocation / "run").resolve() == newer.resolve()
    assert not (older / "checkpoints" / "epoch001.ckpt").exists()

    # now finished at 3 epochs: asking for 3 again is refused, asking for 4 trains on
    refused = _cli(log_dir, "ckpt_path=last", "mode=fit", "trainer.max_epochs=3")
    _one_line_error(refused, "finished (3 epochs", "trainer.max_epochs=")


def test_optimizer_override_on_resume_takes_effect(tmp_path):
    assert _cli(tmp_path, "trainer.max_epochs=1").returncode == 0
    (first,) = _runs(tmp_path)
    ckpt = first / "checkpoints" / "last.ckpt"
    result = _cli(
        tmp_path, f"ckpt_path={ckpt}", "trainer.max_epochs=2", "task.module.optimizer.lr=1.0"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "task.module.optimizer.lr=1.0" in result.stdout + result.stderr
    rates = [float(row["lr-SGD"]) for row in _csv_rows(first) if row.get("lr-SGD")]
    assert rates[0] == 30.0 and rates[-1] == 1.0  # epoch 0 at the old rate, epoch 1 at the new
    saved = torch.load(first / "checkpoints" / "last.ckpt", weights_only=False, mmap=True)
    assert saved["treernn"]["config"]["task"]["module"]["optimizer"]["lr"] == 1.0
    assert saved["optimizer_states"][0]["param_groups"][0]["base_lr"] == 1.0


def test_architecture_override_on_resume_is_refused(tmp_path):
    """Refused by the plan: the run it names is left byte for byte as it was (the refusal came
    after the attempt was recorded there, and marked the finished run failed)."""
    assert _cli(tmp_path, "trainer.max_epochs=1").returncode == 0
    (first,) = _runs(tmp_path)
    before = {path: path.read_bytes() for path in first.rglob("*") if path.is_file()}
    result = _cli(
        tmp_path,
        f"ckpt_path={first / 'checkpoints' / 'last.ckpt'}",
        "model.hidden_size=50",
        "trainer.max_epochs=2",
    )
    _one_line_error(result, "model.hidden_size (checkpoint 40, now 50)")
    assert {path: path.read_bytes() for path in first.rglob("*") if path.is_file()} == before
    assert _runs(tmp_path) == [first]  # and no directory of its own is left


@pytest.mark.parametrize("clip", ["0.25", "null"])
def test_divergence_stops_the_run_and_keeps_no_checkpoint(clip, tmp_path):
    result = _cli(
        tmp_path,
        "task.module.optimizer.lr=1e6",
        f"trainer.gradient_clip_val={clip}",
        "trainer.max_epochs=2",
    )
    _one_line_error(result, "diverged")
    assert not list(tmp_path.rglob("*.ckpt"))
    (run_dir,) = _runs(tmp_path)
    record = records.read_status(run_dir)
    assert record["status"] == "failed" and "diverged" in record["error"]
    assert "diverged" in (run_dir / "train.log").read_text()


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("model.num_layers=2.5", "model.num_layers=2.5 must be a positive integer"),
        ("trainer.max_epochs=abc", "trainer.max_epochs='abc' must be an integer"),
        ("model.hidden_size=0", "model.hidden_size=0 must be a positive integer"),
    ],
)
def test_bad_numeric_values_are_one_line_naming_the_key(override, needle, tmp_path):
    result = _cli(tmp_path, override)
    _one_line_error(result, needle)
    assert not _runs(tmp_path)  # a run that failed in set-up leaves no directory


def test_debug_switch_shows_the_traceback_of_a_user_error(tmp_path):
    result = _cli(tmp_path, "model.num_layers=2.5", env={"TREERNN_DEBUG": "1"})
    assert result.returncode == 1
    assert "Traceback" in result.stderr and "ConfigValueError" in result.stderr


def test_a_genuine_bug_keeps_its_traceback(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise TypeError("a bug in our own code")

    from treernn.lifecycle import execute

    monkeypatch.setattr(execute, "build_task", broken)  # where the executor builds the task
    cfg = compose_config([*QUICK, "trainer=smoke"], tmp_path / "run")
    with pytest.raises(TypeError, match="a bug in our own code"):
        entry.main(cfg)
    record = records.read_status(tmp_path / "run")
    assert record["status"] == "failed" and "TypeError" in record["error"]


def test_damaged_or_foreign_checkpoints_fail_before_any_data_is_loaded(tmp_path, monkeypatch):
    assert _cli(tmp_path / "lm", "trainer=smoke").returncode == 0
    (lm_run,) = _runs(tmp_path / "lm")
    good = lm_run / "checkpoints" / "last.ckpt"
    truncated = tmp_path / "truncated.ckpt"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])

    import treernn.data.logic as logic

    def no_data(*args, **kwargs):
        raise AssertionError("data was loaded before the checkpoint was checked")

    monkeypatch.setattr(logic.LogicInferenceDataModule, "__init__", no_data)
    for ckpt, needle in ((good, "written by task=ptb model=onlstm"), (truncated, "truncated")):
        cfg = compose_config(["task=logic", "model=lstm", f"ckpt_path={ckpt}"], tmp_path / "x")
        with pytest.raises(CheckpointError, match=needle):
            entry.train(cfg)

    result = _cli(tmp_path / "cli", "mode=test", f"ckpt_path={truncated}")
    _one_line_error(result, str(truncated), "truncated")
    evaluate = subprocess.run(
        [sys.executable, "-m", "treernn", "parse", "--ckpt", str(truncated)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    assert evaluate.returncode != 0 and "Traceback" not in evaluate.stderr
    assert "truncated" in evaluate.stderr


def _ptb_copy(tmp_path: Path, data_dir: Path) -> Path:
    copy = tmp_path / "data"
    shutil.copytree(data_dir / "ptb", copy / "ptb")
    return copy


def test_a_changed_local_file_fails_its_checksum(tmp_path, data_dir):
    copy = _ptb_copy(tmp_path, data_dir)
    train = copy / "ptb" / "ptb.train.txt"
    train.write_bytes(train.read_bytes().replace(b" the ", b" teh ", 1))
    result = _cli(tmp_path / "runs", f"paths.data_dir={copy}", "trainer=smoke")
    _one_line_error(result, str(train), "sha256")


def test_invalid_utf8_names_the_file_and_line(tmp_path, data_dir):
    copy = _ptb_copy(tmp_path, data_dir)
    train = copy / "ptb" / "ptb.train.txt"
    lines = train.read_bytes().split(b"\n")
    lines[36] = lines[36][:5] + b"\xff" + lines[36][5:]
    train.write_bytes(b"\n".join(lines))
    result = _cli(
        tmp_path / "runs",
        f"paths.data_dir={copy}",
        "task.datamodule.verify_checksums=false",
        "trainer=smoke",
    )
    _one_line_error(result, f"{train}:37", "UTF-8", "0xff")


def test_a_sweep_goes_on_after_a_failed_job(tmp_path):
    result = run_cli(
        ["-m", "trainer=smoke", "model.dropout=1.5,0.1", f"paths.log_dir={tmp_path}", *QUICK]
    )
    assert result.returncode == 1
    assert "model.dropout=1.5" in result.stderr  # the failed job, named in the summary
    finished = list(tmp_path.glob("multirun/ptb/onlstm/*/*/metrics.json"))
    assert len(finished) == 1
    assert "model.dropout=0.1" in (finished[0].parent / ".hydra" / "overrides.yaml").read_text()
    failed = [
        p.parent
        for p in tmp_path.glob("multirun/ptb/onlstm/*/*/status.json")
        if records.read_status(p.parent)["status"] == "failed"
    ]
    assert len(failed) == 1 and "dropout=1.5" in records.read_status(failed[0])["error"]


def test_a_finished_run_records_its_log_and_status(tmp_path):
    result = _cli(tmp_path, "trainer=smoke")
    assert result.returncode == 0, result.stderr[-3000:]
    (run_dir,) = _runs(tmp_path)
    assert records.read_status(run_dir)["status"] == "finished"
    log_text = (run_dir / "train.log").read_text()
    assert "final metrics" in log_text and "Trainer.fit" in log_text


def test_a_finished_run_is_named_one_way_whatever_names_it(tmp_path):
    """``ckpt_path=last`` refused a finished run ("ask for a larger budget"), while
    ``ckpt_path=<its last.ckpt>`` exited 0 having trained nothing and tested it again. Now both
    refuse, and with a larger budget both train it further in its own directory."""
    logic = ["task=logic", "model=lstm", "trainer=smoke", f"paths.log_dir={tmp_path}"]
    first = run_cli(logic)
    assert first.returncode == 0, first.stderr[-3000:]
    (run_dir,) = [p.parent for p in tmp_path.glob("logic/lstm/*/metrics.json")]
    last = run_dir / "checkpoints" / "last.ckpt"
    before = (run_dir / "metrics.json").read_text()
    for named in ("last", str(last)):
        result = run_cli([*logic, f"ckpt_path={named}"])
        assert result.returncode == 1, named
        (line,) = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
        assert line.startswith(f"error: ckpt_path={named}: ")
        assert "finished (1 epochs, step 3; " in line and "trainer.max_steps=6" in line
        assert "Traceback" not in result.stderr
    assert (run_dir / "metrics.json").read_text() == before  # nothing tested again
    assert records.read_status(run_dir)["status"] == "finished"
    budget = ["trainer.max_epochs=2", "trainer.max_steps=5"]
    further = run_cli([*logic, f"ckpt_path={last}", *budget])
    assert further.returncode == 0, further.stderr[-3000:]
    said = further.stdout + further.stderr
    assert f"ckpt_path={last}: resuming run {run_dir} (finished, step 3)" in said
    record = records.read_status(run_dir)
    assert record["status"] == "finished" and len(record["resumes"]) == 1
