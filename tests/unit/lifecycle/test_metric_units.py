"""Accuracies are printed in % everywhere: torchmetrics logs them as fractions (``test/acc``),
the evaluations log theirs in % (``test/completion_acc``), and the printed summary of a run shows
both in %; ``metrics.json`` keeps what was logged."""

from __future__ import annotations

import json

from omegaconf import OmegaConf

from treernn.lifecycle.execute import _report
from treernn.lifecycle.records import is_fraction


def test_which_logged_metrics_are_fractions():
    for key in ("test/acc", "val/acc", "test/acc/ops7", "train/acc_epoch", "train/acc_step"):
        assert is_fraction(key), key
    for key in ("test/completion_acc", "test/rerank_uas", "test/ppl", "test/parse_f1/layer1"):
        assert not is_fraction(key), key
    assert not is_fraction("acc")


def test_the_final_summary_prints_accuracies_in_percent(tmp_path, capsys):
    cfg = OmegaConf.create({"paths": {"output_dir": str(tmp_path)}})
    metrics = {"test/acc": 0.61904, "test/acc/ops7": 0.5, "test/completion_acc": 41.45, "lr": 1.0}
    _report(cfg, metrics)
    printed = capsys.readouterr().out
    assert "test/acc                     61.90 %" in printed
    assert "test/acc/ops7                50.00 %" in printed
    assert "test/completion_acc          41.4500" in printed
    assert "lr" not in printed
    assert json.loads((tmp_path / "metrics.json").read_text())["test/acc"] == 0.61904
