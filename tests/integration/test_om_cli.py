"""Ordered Memory through the real CLI code path (in-process Hydra compose): a few steps of the
small presets on logic, ListOps (generated stand-in) and SST-2, and the paper presets' settings."""

from __future__ import annotations

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


def test_logic_small_preset_runs(tmp_path):
    overrides = [
        "experiment=om_logic_small",
        *TINY,
        "model.test_memory_slots=8",
        "task.datamodule.max_train_ops=2",
        "task.datamodule.eval_batch_size=256",
        "trainer.limit_test_batches=4",
    ]
    metrics = train_in_process(overrides, tmp_path / "run")
    assert 0.0 <= metrics["val/acc"] <= 1.0 and 0.0 <= metrics["test/acc"] <= 1.0


def test_listops_small_preset_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("TREERNN_CACHE_DIR", str(tmp_path / "cache"))
    overrides = [
        "experiment=om_listops_small",
        *TINY,
        "task.datamodule.standin_size=300",
        "task.datamodule.test_limit=100",
    ]
    metrics = train_in_process(overrides, tmp_path / "run")
    assert 0.0 <= metrics["test/acc"] <= 1.0


def test_sst2_small_preset_runs(tmp_path):
    overrides = ["experiment=om_sst2_small", *TINY, "task.datamodule.train_limit=200"]
    metrics = train_in_process(overrides, tmp_path / "run")
    assert 0.0 <= metrics["val/acc"] <= 1.0 and 0.0 <= metrics["test/acc"] <= 1.0


def test_paper_presets_compose_to_the_paper_settings(tmp_path):
    logic = compose_config(["experiment=om_logic_paper"], tmp_path)
    assert (logic.model.memory_slots, logic.model.test_memory_slots) == (12, 24)
    assert (logic.model.hidden_size, logic.task.module.embedding_size) == (200, 200)
    listops = compose_config(["experiment=om_listops_paper"], tmp_path)
    assert (listops.model.memory_slots, listops.model.memory_dropout) == (21, 0.3)
    sst5 = compose_config(
        ["experiment=om_sst5_paper", "task.datamodule.glove_path=g.txt"], tmp_path
    )
    assert sst5.task.datamodule.num_classes == 5 and sst5.model.memory_slots == 15
    assert sst5.model.locked_input_dropout and sst5.task.datamodule.embedding_size == 300
