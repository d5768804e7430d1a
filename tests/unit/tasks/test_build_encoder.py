"""A model's config completed by the task: a key its encoder does not take, or one it needs and
nobody set, is one line naming the key (not a TypeError from deep inside the task)."""

from __future__ import annotations

from functools import partial

import pytest
import torch

from tests.fixtures.example_model.gru import GRUEncoder
from treernn.encoders.lstm import LSTMEncoder
from treernn.errors import ConfigValueError
from treernn.tasks.base import build_encoder
from treernn.tasks.classification import ClassificationTask


def test_the_tasks_sizes_complete_the_models_keys():
    encoder = build_encoder(partial(LSTMEncoder, hidden_size=6, weight_drop=0.1), input_size=4)
    assert (encoder.input_size, encoder.output_size, encoder.weight_drop) == (4, 6, 0.1)


def test_a_key_of_another_model_is_one_line_naming_it():
    """model=gru on a preset written for the LSTM (om/lstm_sst2 sets model.weight_drop)."""
    factory = partial(GRUEncoder, hidden_size=6, num_layers=1, weight_drop=0.0)
    with pytest.raises(ConfigValueError) as error:
        build_encoder(factory, input_size=4)
    message = str(error.value)
    assert message.startswith("model.weight_drop: GRUEncoder takes no keyword 'weight_drop'")
    assert "~model.weight_drop" in message and "\n" not in message


def test_a_missing_key_is_one_line_naming_it():
    with pytest.raises(ConfigValueError, match=r"^model.hidden_size is missing: GRUEncoder"):
        build_encoder(partial(GRUEncoder, num_layers=1), input_size=4)


def test_the_task_reports_it_when_it_builds_the_encoder():
    with pytest.raises(ConfigValueError, match="model.chunk_size: LSTMEncoder takes no keyword"):
        ClassificationTask(
            partial(LSTMEncoder, hidden_size=4, chunk_size=2), vocab_size=9, num_classes=2
        )


class NoOutputSize(LSTMEncoder):
    def __init__(self, **sizes) -> None:
        super().__init__(**sizes)
        del self.output_size


class NotAnEncoder(torch.nn.Module):
    def __init__(self, input_size: int) -> None:
        super().__init__()
        self.input_size = self.output_size = input_size


def test_an_encoder_that_breaks_the_contract_is_named_with_what_it_lacks():
    # each was an AttributeError from inside the task ("'NoOutputSize' object has no attribute")
    with pytest.raises(TypeError, match=r"^NoOutputSize sets no output_size \(an int\)"):
        build_encoder(partial(NoOutputSize, hidden_size=6), input_size=4)
    with pytest.raises(TypeError, match=r"^NotAnEncoder is not a treernn.encoders.base.Encoder"):
        build_encoder(NotAnEncoder, input_size=4)
