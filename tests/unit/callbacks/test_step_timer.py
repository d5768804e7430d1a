"""The step timer: its summary against numbers worked out by hand, and a real fit's record."""

from __future__ import annotations

import json
import time

import lightning.pytorch as pl
import pytest
import torch
from torch import nn

from treernn.callbacks.step_timer import StepTimer
from treernn.encoders.lstm import LSTMEncoder
from treernn.kernels import gemm
from treernn.reporting.timing import step_summary
from treernn.tasks.base import Task


def test_summary_leaves_out_the_warmup_and_interpolates_the_deciles():
    # after the warm-up: 0.2 0.5 0.4 1.0 0.7 s, sorted 0.2 0.4 0.5 0.7 1.0; median 0.5 s;
    # p10 at rank 0.4: 0.2 + 0.4 * 0.2 = 0.28 s; p90 at rank 3.6: 0.7 + 0.6 * 0.3 = 0.88 s
    summary = step_summary([9.0, 9.0, 0.2, 0.5, 0.4, 1.0, 0.7], warmup=2)
    assert summary["steps"] == 5
    assert summary["median_ms"] == pytest.approx(500.0)
    assert summary["p10_ms"] == pytest.approx(280.0)
    assert summary["p90_ms"] == pytest.approx(880.0)


def test_summary_of_one_step_and_of_none():
    assert step_summary([1.0, 0.25], warmup=1) == {
        "steps": 1, "median_ms": 250.0, "p10_ms": 250.0, "p90_ms": 250.0
    }  # fmt: skip
    assert step_summary([1.0, 0.25], warmup=2) is None


class SlowUpdate(pl.LightningModule):
    """Each update sleeps ``sleep`` seconds in its optimizer step, the part a timer that stopped
    at the end of the forward would miss."""

    def __init__(self, sleep: float):
        super().__init__()
        self.layer = nn.Linear(4, 1)
        self.sleep = sleep

    def training_step(self, batch, batch_idx):
        return self.layer(batch[0]).pow(2).mean()

    def configure_optimizers(self):
        sleep = self.sleep

        class SlowSGD(torch.optim.SGD):
            def step(self, closure=None):
                loss = super().step(closure)
                time.sleep(sleep)
                return loss

        return SlowSGD(self.parameters(), lr=0.1)

    def train_dataloader(self):
        data = torch.utils.data.TensorDataset(torch.randn(64, 4))
        return torch.utils.data.DataLoader(data, batch_size=4)


def test_a_fit_records_every_update_up_to_its_optimizer_step(tmp_path, monkeypatch):
    decided = {("ON-LSTM", "recurrent steps", "(20 x 400) @ (400 x 1680)"): "bfloat16"}
    monkeypatch.setattr(gemm, "DECISIONS", decided)  # the process's decisions, not other tests'
    path = tmp_path / "run" / "step_times.json"
    trainer = pl.Trainer(
        max_steps=6, accelerator="cpu", logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False,
        callbacks=[StepTimer(str(path), warmup=2)],
    )  # fmt: skip
    trainer.fit(SlowTask(sleep=0.03))
    record = json.loads(path.read_text())
    assert len(record["seconds"]) == 6
    assert min(record["seconds"]) >= 0.03
    assert record["summary"]["steps"] == 4 and record["summary"]["median_ms"] >= 30.0
    assert record["precision"] == "32-true" and record["device"] == "cpu"
    assert record["machine"]["cpus"] >= 1
    assert record["products"] == [
        ["ON-LSTM", "recurrent steps", "(20 x 400) @ (400 x 1680)", "bfloat16"]
    ]


class SlowTask(SlowUpdate):
    """`SlowUpdate` with an encoder, reporting its products' precisions as a treernn task does
    (from its encoder, which has them from the kernels)."""

    product_precisions = Task.product_precisions

    def __init__(self, sleep: float):
        super().__init__(sleep)
        self.encoder = LSTMEncoder(4, 4)


def test_a_module_that_reports_no_precisions_records_none(tmp_path):
    path = tmp_path / "step_times.json"
    trainer = pl.Trainer(
        max_steps=2, accelerator="cpu", logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False,
        callbacks=[StepTimer(str(path), warmup=0)],
    )  # fmt: skip
    trainer.fit(SlowUpdate(sleep=0.0))
    record = json.loads(path.read_text())
    assert len(record["seconds"]) == 2 and record["products"] == []


def test_a_negative_warmup_is_refused():
    with pytest.raises(ValueError, match="step_timer.warmup must be >= 0"):
        StepTimer("times.json", warmup=-1)
