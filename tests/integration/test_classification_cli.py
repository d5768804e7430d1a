"""Logic and ListOps through the real CLI code path (in-process Hydra compose), every encoder.

Each task x encoder pair trains a few steps (trainer=smoke) on the real logic files or on a small
ListOps stand-in, then tests; the per-length table must come out as metrics, json and png. ON-LSTM
also scores its induced trees against the gold ones (the tree_f1 callback of conf/task/logic.yaml
and listops.yaml), in training and from its checkpoint (``python -m treernn report tree-f1``).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from tests.integration.helpers import compose_config, train_in_process
from treernn.commands import main as commands_main

pytestmark = pytest.mark.usefixtures("data_dir")

ENCODERS = ["lstm", "onlstm", "transformer", "tree_rnn", "tree_lstm", "grc_tree", "ordered_memory"]
#: tiny sizes so that a run takes seconds; the model-specific keys each encoder needs
TINY_MODEL = {
    "lstm": ["model.num_layers=1", "model.weight_drop=0.0"],
    "onlstm": ["model.num_layers=1", "model.chunk_size=4", "model.weight_drop=0.0"],
    "transformer": ["model.num_layers=1", "model.num_heads=2", "model.ff_size=32"],
    "tree_rnn": [],
    "tree_lstm": [],
    "grc_tree": [],
    "ordered_memory": ["model.memory_slots=4", "model.test_memory_slots=4"],
}
#: trainer=smoke stops after 3 steps
TINY = ["trainer=smoke", "model.hidden_size=16", "task.module.embedding_size=8"]


def _logic(model: str) -> list[str]:
    return [
        "task=logic",
        f"model={model}",
        *TINY,
        *TINY_MODEL[model],
        "task.datamodule.max_train_ops=2",
        "task.datamodule.batch_size=16",
        "task.datamodule.eval_batch_size=512",
        "trainer.limit_test_batches=2",
    ]


@pytest.mark.parametrize("model", ENCODERS)
def test_logic_trains_and_reports_per_operator_accuracy(model, tmp_path):
    metrics = train_in_process(_logic(model), tmp_path / "run")
    # the test batches are sorted by length, so the first two cover the short formulas
    assert "test/acc/ops1" in metrics and "test/acc/ops0" in metrics
    report = json.loads((tmp_path / "run" / "test_results.json").read_text())
    assert report["label"] == model
    assert report["results"]["length"]["buckets"]["ops1"]["count"] > 0
    _check_accuracy_report(metrics, report["results"]["length"], tmp_path / "run")
    assert (tmp_path / "run" / "accuracy_by_length.png").stat().st_size > 1000
    if model == "onlstm":
        _check_tree_f1(metrics, tmp_path / "run")


def _check_accuracy_report(metrics, result, run_dir: Path) -> None:
    """The overall test accuracy is the count-weighted mean of the per-length ones, and
    metrics.json holds the same number."""
    buckets = result["buckets"].values()
    assert sum(cell["count"] for cell in buckets) == result["count"] > 0
    weighted = sum(cell["acc"] * cell["count"] for cell in buckets) / result["count"]
    assert weighted == pytest.approx(result["acc"]) == pytest.approx(metrics["test/acc"])
    on_disk = json.loads((run_dir / "metrics.json").read_text())
    assert on_disk["test/acc"] == pytest.approx(metrics["test/acc"])


def _check_tree_f1(metrics, run_dir, with_examples: bool = False) -> None:
    """ON-LSTM's induced-tree F1: logged while training and testing, and from the checkpoint
    (whose printed examples need sentences of four leaves or more among the first 200)."""
    for key in ("val/parse_f1/layer1", "val/parse_f1_sentence/layer1", "test/parse_f1/layer1"):
        assert key in metrics  # in percent: compared with tree_f1.json's fractions below
    scores = json.loads((run_dir / "tree_f1.json").read_text())["test"]["layer1"]
    assert 100 * scores["corpus_f1"] == pytest.approx(metrics["test/parse_f1/layer1"], abs=1e-4)
    out = run_dir / "tree_f1_test.json"
    ckpt = str(run_dir / "checkpoints" / "last.ckpt")
    commands_main(
        ["report", "tree-f1", "--ckpt", ckpt, "--max-sentences", "200", "--out", str(out)]
    )
    result = json.loads(out.read_text())
    assert set(result["layers"]) == {"layer1"}
    assert 0.0 <= result["layers"]["layer1"]["corpus_f1"] <= 1.0
    assert set(result["baselines"]) == {"random", "balanced", "left_branching", "right_branching"}
    if with_examples:
        assert result["examples"] and set(result["examples"][0]) == {"gold", "layer1"}


def test_logic_sysgen_split_adds_its_test_group(tmp_path):
    overrides = [*_logic("lstm"), "task.datamodule.split=A", "trainer.limit_test_batches=null"]
    metrics = train_in_process(overrides, tmp_path / "run")
    report = json.loads((tmp_path / "run" / "test_results.json").read_text())
    assert report["results"]["sysgen_A"]["count"] == 2472  # matching pairs of test0..12
    assert report["results"]["length"]["count"] == 37367
    assert metrics["test/sysgen_A/acc"] == pytest.approx(report["results"]["sysgen_A"]["acc"])
    assert "test/acc/ops12" in metrics


@pytest.mark.parametrize("model", ENCODERS)
def test_listops_standin_trains_and_reports_per_length_accuracy(model, tmp_path, monkeypatch):
    monkeypatch.setenv("TREERNN_CACHE_DIR", str(tmp_path / "cache"))
    overrides = [
        "task=listops",
        f"model={model}",
        *TINY,
        *TINY_MODEL[model],
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
    _check_accuracy_report(metrics, report["results"]["test"], tmp_path / "run")
    assert (tmp_path / "run" / "cache" / "listops").exists() is False  # stand-in went to the cache
    assert list((tmp_path / "cache" / "listops").glob("standin_*.tsv"))
    if model == "onlstm":
        _check_tree_f1(metrics, tmp_path / "run", with_examples=True)


def test_logic_training_loss_falls(tmp_path):
    """Sixty steps of a small LSTM on short formulas: the training loss goes down."""
    overrides = [
        *_logic("lstm"),
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
