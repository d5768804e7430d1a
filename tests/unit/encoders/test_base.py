"""The encoder base class: what a plug-in encoder that forgot its ``forward`` is told."""

from __future__ import annotations

import pytest
import torch

from treernn.encoders.base import Encoder


class Forwardless(Encoder):
    def __init__(self) -> None:
        super().__init__()
        self.input_size = self.output_size = 4


def test_an_encoder_without_forward_says_what_it_must_define():
    # the base class ended it in a bare NotImplementedError
    with pytest.raises(NotImplementedError, match=r"^Forwardless defines no forward\(x, mask="):
        Forwardless()(torch.zeros(1, 2, 4))
