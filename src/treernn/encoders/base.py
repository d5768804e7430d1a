"""The interface every encoder shares.

An encoder maps batch-first embedded inputs ``x`` of shape (B, T, D) and a padding mask of shape (B,
T) (True marks a real token) to an :class:`EncoderOutput`. Encoders are torch-only: no Lightning, no
Hydra, no config objects. Tasks own embeddings, decoders and losses; encoders own the recurrence.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from torch import Tensor, nn


@dataclass
class EncoderOutput:
    """What an encoder returns.

    hidden: (B, T, H_out) outputs of the last layer, before any dropout the task applies.
    pooled: (B, H_out) one vector per sequence (the last real step for recurrent encoders).
    state: the carried state, to pass back as ``state=`` for the next segment (detach it first).
    layer_outputs: per-layer (B, T, H_l) outputs, for regularisers and analysis.
    distances: (L, B, T) per-layer tree signal where the model has one (ON-LSTM master-forget
        distances, used for parsing); None otherwise.
    extras: anything model-specific (e.g. ON-LSTM input distances, Ordered Memory attention).
    """

    hidden: Tensor
    pooled: Tensor
    state: Any = None
    layer_outputs: list[Tensor] = field(default_factory=list)
    distances: Tensor | None = None
    extras: dict[str, Tensor] = field(default_factory=dict)


class Encoder(nn.Module):
    """Base class: subclasses set ``input_size``/``output_size`` and implement ``forward``."""

    input_size: int
    output_size: int
    #: True when the encoder returns ``distances`` usable for unsupervised parsing.
    has_distances: bool = False
    #: True when ``extras["attention"]`` holds Ordered Memory pointers (trees by Algorithm 2).
    has_attention_trees: bool = False

    def forward(
        self, x: Tensor, mask: Tensor | None = None, state: Any = None
    ) -> EncoderOutput:  # pragma: no cover - interface
        raise NotImplementedError


def last_real_step(hidden: Tensor, mask: Tensor | None) -> Tensor:
    """(B, T, H) -> (B, H): the output at each row's last real token (right padding)."""
    if mask is None:
        return hidden[:, -1]
    lengths = mask.long().sum(1).clamp(min=1)  # (B,)
    index = (lengths - 1).view(-1, 1, 1).expand(-1, 1, hidden.size(-1))
    return hidden.gather(1, index).squeeze(1)


def check_dropout(name: str, p: float) -> None:
    if not 0.0 <= float(p) < 1.0:
        raise ValueError(f"{name}={p} is not a probability in [0, 1); set it to e.g. 0.3.")


class LockedDropout(nn.Module):
    """Variational dropout (Gal and Ghahramani 2016): one mask per sequence, shared over time.

    Input (B, T, H); the mask has shape (B, 1, H) and is rescaled by 1/(1-p).
    """

    def __init__(self, p: float = 0.0) -> None:
        super().__init__()
        check_dropout("dropout", p)
        self.p = p

    def forward(self, x: Tensor, p: float | None = None) -> Tensor:
        p = self.p if p is None else p
        if not self.training or p == 0.0:
            return x
        mask = x.new_empty(x.size(0), 1, x.size(2)).bernoulli_(1 - p) / (1 - p)
        return x * mask
