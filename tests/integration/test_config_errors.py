"""A mistake in the config is one line that names the fix, and the fix works: the checksum switch
of every dataset, the run's choices (``test_ckpt``, ``mode``, ...), the keys and choices of every
constructor, and an online wandb run without a network."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import hydra
import pytest

from tests.integration.helpers import (
    CONF_DIR,
    REPO_ROOT,
    compose_config,
    one_line_error,
    run_cli,
)

pytestmark = pytest.mark.usefixtures("data_dir")

TASKS = sorted(path.stem for path in Path(CONF_DIR, "task").glob("*.yaml"))


@pytest.mark.parametrize("task", TASKS)
def test_every_dataset_has_the_checksum_switch(task, tmp_path):
    cfg = compose_config([f"task={task}", "task.datamodule.verify_checksums=false"], tmp_path)
    datamodule = hydra.utils.instantiate(cfg.task.datamodule)
    attribute = getattr(datamodule, "verify_checksums", None)
    if attribute is None:
        attribute = datamodule.hparams.verify_checksums
    assert attribute is False


@pytest.mark.slow
def test_a_changed_listops_file_fails_its_check_and_the_named_switch_lets_it_through(
    tmp_path, data_dir
):
    copy = tmp_path / "data" / "listops"
    copy.mkdir(parents=True)
    shutil.copy(data_dir / "listops" / "test_d20s.tsv", copy / "test_d20s.tsv")
    with open(copy / "test_d20s.tsv", "a") as handle:
        handle.write("3\t[MAX 1 3 ]\n")
    args = [
        "task=listops",
        "model=lstm",
        "trainer=smoke",
        f"paths.data_dir={tmp_path / 'data'}",
        f"paths.log_dir={tmp_path / 'runs'}",
        "task.datamodule.train_source=generate",
        "task.datamodule.standin_size=300",
        "task.datamodule.test_limit=50",
        "model.hidden_size=16",
    ]
    failed = run_cli(args)
    one_line_error(failed, "test_d20s.tsv fails its sha256 check", "verify_checksums=false")
    passed = run_cli([*args, "task.datamodule.verify_checksums=false"])
    assert passed.returncode == 0, passed.stderr[-3000:]


@pytest.mark.parametrize(
    ("override", "needles"),
    [
        ("test_ckpt=bset", ("test_ckpt='bset' is not one of best, last", "test_ckpt=best?")),
        pytest.param(
            "mode=tset",
            ("mode='tset' is not one of fit+test, fit, test", "mode=test?"),
            marks=pytest.mark.slow,
        ),
        pytest.param(
            "task.mode=maxx", ("task.mode='maxx' is not one of min, max",), marks=pytest.mark.slow
        ),
        pytest.param(
            "requeue_signal=USR3",
            ("requeue_signal='USR3' is not a signal", "USR2"),
            marks=pytest.mark.slow,
        ),
        pytest.param(
            "checkpoint_minutes=0",
            ("checkpoint_minutes=0 must be a positive number", "checkpoint_minutes=10"),
            marks=pytest.mark.slow,
        ),
        pytest.param(
            "trainer.precision=bf61",
            ("trainer.precision='bf61' is not one of", "bf16-mixed"),
            marks=pytest.mark.slow,
        ),
        (
            "+task.datamodule.verify_checksum=false",
            (
                "task.datamodule.verify_checksum is not a setting of PTBDataModule",
                "verify_checksums?",
            ),
        ),
        (
            "+model.weight_dorp=0.3",
            ("model.weight_dorp is not a setting of ONLSTMEncoder", "model.weight_drop?"),
        ),
        (
            "+task.module.optimizer.lrr=1",
            ("task.module.optimizer.lrr is not a setting of SGD", "task.module.optimizer.lr?"),
        ),
        (
            "task.module.optimizer.lrr=1",  # Hydra's own answer: "+task.module.optimizer.lrr=1"
            ("task.module.optimizer.lrr is not a key of task=ptb", "task.module.optimizer.lr?"),
        ),
    ],
)
def test_a_wrong_choice_or_key_is_one_line_before_any_data(override, needles, tmp_path):
    result = run_cli(
        [override, f"paths.log_dir={tmp_path}", f"paths.data_dir={tmp_path / 'no-data'}"]
    )
    one_line_error(result, *needles)
    assert not list(tmp_path.glob("ptb/onlstm/*"))  # a run that failed in set-up leaves nothing


@pytest.mark.slow
def test_an_online_wandb_run_without_a_network_fails_fast_naming_the_offline_switch(tmp_path):
    started = time.monotonic()
    result = run_cli(
        [
            "trainer=smoke",
            "logger=wandb",
            "logger.wandb.offline=false",
            f"paths.log_dir={tmp_path}",
            f"paths.data_dir={tmp_path / 'no-data'}",  # the check comes before the data
        ],
        # a server that is not there (a closed port here: refused at once, as offline)
        env={"WANDB_MODE": "", "WANDB_BASE_URL": "http://127.0.0.1:9"},
    )
    one_line_error(result, "cannot be reached", "logger.wandb.offline=true", "wandb sync")
    assert time.monotonic() - started < 60


def test_a_choice_hydra_does_not_know_is_answered_before_torch_loads(tmp_path):
    """``model=onlstmm``: Hydra lists the valid choices, exit status 1, and neither torch nor
    Lightning was imported for it (their imports take seconds; ``train.py`` imports the run only
    once the config is composed)."""
    result = subprocess.run(
        [sys.executable, "-X", "importtime", str(REPO_ROOT / "train.py"), "model=onlstmm",
         f"paths.log_dir={tmp_path}"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 1
    assert "Could not find 'model/onlstmm'" in result.stderr
    assert "\tonlstm\n" in result.stderr  # the valid choices
    imported = {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines()}
    # the import log is there (train.py imports Hydra through importlib, whose imports
    # -X importtime does not list; its own modules it does)
    assert "treernn.train_entry" in imported
    assert not {"torch", "lightning", "treernn.lifecycle.entry"} & imported


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "test_ckpt=bset",
            "error: test_ckpt='bset' is not one of best, last; did you mean test_ckpt=best?",
        ),
        (
            "model.dropout=-1",
            "error: model.dropout=-1 must be a probability in [0, 1); e.g. model.dropout=0.3",
        ),
    ],
)
def test_a_wrong_switch_or_number_is_answered_before_torch_loads(override, message, tmp_path):
    """A run switch Hydra composes without complaint (``test_ckpt=bset``) or a number out of its
    range is checked before torch and Lightning load (12 s of a 13 s answer on a Zen 3 when it
    was checked after them): the same one line, exit status 1, no run directory left."""
    result = subprocess.run(
        [sys.executable, "-X", "importtime", str(REPO_ROOT / "train.py"), override,
         f"paths.log_dir={tmp_path}"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if not line.startswith("import time:")]
    assert errors == [message]
    imported = {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines()}
    assert "treernn.config_checks" in imported  # the import log is there
    assert not {"torch", "lightning", "treernn.lifecycle.entry"} & imported
    assert not list(tmp_path.glob("ptb/onlstm/*"))


def test_a_validation_interval_longer_than_an_epoch_is_one_line_naming_the_switch(tmp_path):
    """``trainer.val_check_interval=10`` with 3 training batches an epoch: Lightning refuses it
    with a ValueError from inside ``fit``; the run answers with one line that gives the number of
    batches and the switch that counts updates across epochs, and with that switch the same run
    trains and tests."""
    args = ["trainer=smoke", f"paths.log_dir={tmp_path}"]
    failed = run_cli([*args, "trainer.val_check_interval=10"])
    one_line_error(
        failed,
        "trainer.val_check_interval=10 is more than the 3 training batches of an epoch",
        "trainer.check_val_every_n_epoch=null",
    )
    every_two = ["trainer.val_check_interval=2", "trainer.check_val_every_n_epoch=null"]
    passed = run_cli([*args, *every_two])
    assert passed.returncode == 0, passed.stderr[-3000:]
    assert "test/ppl" in passed.stdout


def test_checkpoint_minutes_defaults_to_the_machines_environment(monkeypatch, tmp_path):
    """``checkpoint_minutes`` comes from ``TREERNN_CHECKPOINT_MINUTES`` where it is set (how a
    script turns it on for sweeps without adding an override to them); an override wins."""
    monkeypatch.delenv("TREERNN_CHECKPOINT_MINUTES", raising=False)
    assert compose_config([], tmp_path / "a").checkpoint_minutes is None
    monkeypatch.setenv("TREERNN_CHECKPOINT_MINUTES", "10")
    assert compose_config([], tmp_path / "b").checkpoint_minutes == 10
    assert compose_config(["checkpoint_minutes=2.5"], tmp_path / "c").checkpoint_minutes == 2.5
