"""Logic and ListOps through the real CLI code path (in-process Hydra compose): what the tasks
do beyond what every model does on them (the model contract, test_model_contract.py, trains every
model on every task it reads): the systematic-generalisation test group, the ListOps stand-in's
cache, a falling training loss, and a bare task x model pair being a modest run.
"""

from __future__ import annotations

import csv
import json

import pytest

from tests.integration.helpers import compose_config, train_in_process

pytestmark = pytest.mark.usefixtures("data_dir")

#: trainer=smoke stops after 3 steps; a small one-layer LSTM
TINY = [
    "trainer=smoke",
    "model=lstm",
    "model.hidden_size=16",
    "model.num_layers=1",
    "model.weight_drop=0.0",
    "task.module.embedding_size=8",
]


def _logic() -> list[str]:
    return [
        "task=logic",
        *TINY,
        "task.datamodule.max_train_ops=2",
        "task.datamodule.batch_size=16",
        "task.datamodule.eval_batch_size=512",
        "trainer.limit_test_batches=2",
    ]


def test_logic_sysgen_split_adds_its_test_group(tmp_path):
    overrides = [*_logic(), "task.datamodule.split=A", "trainer.limit_test_batches=null"]
    metrics = train_in_process(overrides, tmp_path / "run")
    report = json.loads((tmp_path / "run" / "test_results.json").read_text())
    assert report["results"]["sysgen_A"]["count"] == 2472  # matching pairs of test0..12
    assert report["results"]["length"]["count"] == 37367
    assert metrics["test/sysgen_A/acc"] == pytest.approx(report["results"]["sysgen_A"]["acc"])
    assert "test/acc/ops12" in metrics


def test_listops_standin_is_generated_into_the_cache(tmp_path, data_cache):
    overrides = [
        "task=listops",
        *TINY,
        "task.datamodule.train_source=generate",
        "task.datamodule.standin_size=300",
        "task.datamodule.test_limit=200",
        "task.datamodule.batch_size=16",
        "trainer.limit_test_batches=null",
    ]
    metrics = train_in_process(overrides, tmp_path / "run")
    assert "test/acc/len1-50" in metrics
    report = json.loads((tmp_path / "run" / "test_results.json").read_text())
    assert report["results"]["test"]["count"] == 200
    assert (tmp_path / "run" / "cache" / "listops").exists() is False  # stand-in went to the cache
    assert list((data_cache / "listops").glob("standin_*.tsv"))


def test_logic_training_loss_falls(tmp_path):
    """Sixty steps of a small LSTM on short formulas: the training loss goes down."""
    overrides = [
        *_logic(),
        "trainer.max_steps=60",
        "trainer.limit_train_batches=60",
        "task.module.optimizer.lr=3e-3",
        "task.module.optimizer.betas=[0.9,0.999]",
        "model.hidden_size=32",
        "task.module.embedding_size=16",
        "trainer.limit_test_batches=2",
    ]
    train_in_process(overrides, tmp_path / "run")
    with open(tmp_path / "run" / "csv" / "metrics.csv") as handle:
        losses = [float(row["train/loss"]) for row in csv.DictReader(handle) if row["train/loss"]]
    assert len(losses) >= 50
    first, last = losses[:10], losses[-10:]
    assert sum(last) / len(last) < 0.9 * sum(first) / len(first)


def test_bare_logic_lstm_is_a_modest_run(tmp_path):
    """``task=logic model=lstm`` is a few epochs at a small size, not the 50-epoch paper run
    (experiment=onlstm/lstm_logic)."""
    bare = compose_config(["task=logic", "model=lstm"], tmp_path)
    paper = compose_config(["experiment=onlstm/lstm_logic"], tmp_path)
    assert bare.trainer.max_epochs <= 4 < paper.trainer.max_epochs
    assert bare.model.hidden_size < paper.model.hidden_size
