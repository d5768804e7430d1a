"""Ordered Memory through the real CLI code path (in-process Hydra compose): a few steps of the
small presets on logic, ListOps (generated stand-in) and SST-2, and the paper presets' settings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.helpers import compose_config, train_in_process

pytestmark = pytest.mark.usefixtures("data_dir")

#: tiny sizes so that a run takes seconds
TINY = [
    "trainer=smoke",
    "model.hidden_size=16",
    "model.memory_slots=4",
    "task.module.embedding_size=8",
    "task.datamodule.batch_size=16",
]


def _check_report(metrics: dict[str, float], run_dir: Path, group: str) -> dict:
    """metrics.json holds the returned metrics, and the test accuracy is the count-weighted mean
    of the per-length accuracies in test_results.json."""
    on_disk = json.loads((run_dir / "metrics.json").read_text())
    assert on_disk["test/acc"] == pytest.approx(metrics["test/acc"])
    result = json.loads((run_dir / "test_results.json").read_text())["results"][group]
    buckets = result["buckets"].values()
    assert sum(cell["count"] for cell in buckets) == result["count"] > 0
    weighted = sum(cell["acc"] * cell["count"] for cell in buckets) / result["count"]
    assert weighted == pytest.approx(result["acc"]) == pytest.approx(metrics["test/acc"])
    return result


def _check_tree_f1(metrics: dict[str, float], run_dir: Path) -> None:
    """Ordered Memory has a tree signal: its induced trees are scored (tree_f1 from the task)."""
    scores = json.loads((run_dir / "tree_f1.json").read_text())["test"]["layer1"]
    assert 100 * scores["corpus_f1"] == pytest.approx(metrics["test/parse_f1/layer1"], abs=1e-4)


@pytest.mark.slow
def test_logic_small_preset_runs(tmp_path):
    overrides = [
        "experiment=om/ordered_memory_logic_small",
        *TINY,
        "model.test_memory_slots=8",
        "task.datamodule.max_train_ops=2",
        "task.datamodule.eval_batch_size=256",
        "trainer.limit_test_batches=4",
    ]
    metrics = train_in_process(overrides, tmp_path / "run")
    result = _check_report(metrics, tmp_path / "run", "length")
    assert result["count"] == 4 * 256  # four full test batches
    _check_tree_f1(metrics, tmp_path / "run")


def test_listops_small_preset_runs(tmp_path, data_cache):
    overrides = [
        "experiment=om/ordered_memory_listops_small",
        *TINY,
        "task.datamodule.standin_size=300",
        "task.datamodule.test_limit=100",
    ]
    metrics = train_in_process(overrides, tmp_path / "run")
    result = _check_report(metrics, tmp_path / "run", "test")
    assert result["count"] == 100  # test_limit
    _check_tree_f1(metrics, tmp_path / "run")


def test_sst2_small_preset_runs(tmp_path):
    overrides = [
        "experiment=om/ordered_memory_sst2_small",
        *TINY,
        "task.datamodule.train_limit=200",
    ]
    metrics = train_in_process(overrides, tmp_path / "run")
    on_disk = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert on_disk["test/acc"] == pytest.approx(metrics["test/acc"])
    assert {"val/acc", "test/acc", "val/loss"} <= set(on_disk)


def test_paper_presets_build_on_each_other(tmp_path):
    """The small presets change only the budget and sizes of the paper presets they build on."""
    for paper, small, kept in [
        (
            "ordered_memory_logic",
            "ordered_memory_logic_small",
            {"memory_slots", "test_memory_slots"},
        ),
        ("ordered_memory_listops", "ordered_memory_listops_small", {"memory_slots"}),
        (
            "ordered_memory_sst2",
            "ordered_memory_sst2_small",
            {"memory_slots", "locked_input_dropout"},
        ),
    ]:
        big = compose_config([f"experiment=om/{paper}"], tmp_path)
        quick = compose_config([f"experiment=om/{small}"], tmp_path)
        assert quick.model.name == big.model.name == "ordered_memory"
        for key in kept:  # the model's shape is the paper's
            assert quick.model[key] == big.model[key]
        assert quick.trainer.max_epochs < big.trainer.max_epochs
        assert quick.model.hidden_size < big.model.hidden_size
    sst5 = compose_config(["experiment=om/ordered_memory_sst5"], tmp_path)
    sst2 = compose_config(["experiment=om/ordered_memory_sst2"], tmp_path)
    assert sst5.task.datamodule.num_classes == 5 and sst2.task.datamodule.num_classes == 2
    sst5.task.datamodule.num_classes = 2
    sst5.tags = sst2.tags
    assert sst5 == sst2  # SST-5 is the SST-2 setting with five classes
