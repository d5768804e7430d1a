"""Transformer encoder baseline (Vaswani et al. 2017, "Attention Is All You Need", section 3),
the sequence baseline of ListOps in Ordered Memory (Fig. 3).

``x`` (B, T, D) is mapped to the model width H by a linear layer and positions are added: by
default the fixed sinusoids of section 3.5, which exist at any length (the logic test sentences
are longer than the training ones), or learned embeddings for up to ``max_length`` positions.
Then dropout and ``num_layers`` layers of ``torch.nn.TransformerEncoderLayer`` (``num_heads``
heads, feed-forward width ``ff_size``, default 4H; post-norm as in the paper unless
``norm_first``, which adds a final LayerNorm).

Padding never changes a result: padded tokens are excluded from attention by the key padding
mask, and a token's position counts real tokens only (``cumsum(mask) - 1``), so left and right
padding give the same numbers. ``pooled`` is the mean of the real tokens' outputs
(``pooling="mean"``) or the output of a learned [CLS] vector prepended to the sequence
(``pooling="cls"``; it gets no position). ``hidden`` is zero at padding.

Under bf16-mixed the layers, plain torch modules, would follow autocast wherever bf16 runs, fast
or not; the encoder runs them in bf16 only where a probe of its own forward (and backward) on the
batch finds bf16 at least 10% faster here (`treernn.encoders.base.in_decided_precision`).
"""

from __future__ import annotations

import math
from functools import partial
from typing import Literal

import torch
from torch import Tensor, nn

from treernn.encoders.base import Encoder, EncoderOutput, check_dropout, in_decided_precision
from treernn.errors import ConfigValueError


def sinusoidal_positions(positions: Tensor, size: int) -> Tensor:
    """Section 3.5: integer positions (...) -> (..., size), sin on even and cos on odd features."""
    pairs = (size + 1) // 2
    frequencies = torch.exp(
        -math.log(10000.0) * torch.arange(pairs, device=positions.device) * 2 / size
    )  # (pairs,)
    angles = positions.unsqueeze(-1).float() * frequencies  # (..., pairs)
    encoding = torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(-2)  # (..., 2 * pairs)
    return encoding[..., :size]


class TransformerEncoder(Encoder):
    """``forward(x (B, T, D), mask (B, T) | None)`` -> hidden (B, T, H_out), pooled (B, H_out)."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        dropout: float = 0.0,
        output_size: int | None = None,
        num_heads: int = 4,
        ff_size: int | None = None,
        positions: Literal["learned", "sinusoidal"] = "sinusoidal",
        pooling: Literal["mean", "cls"] = "mean",
        max_length: int = 1024,
        norm_first: bool = False,
    ) -> None:
        super().__init__()
        check_dropout("dropout", dropout)
        if num_layers < 1:
            raise ConfigValueError(
                f"num_layers={num_layers}: a Transformer needs at least one layer"
            )
        if hidden_size % num_heads != 0:
            raise ConfigValueError(
                f"hidden_size={hidden_size} is not divisible by num_heads={num_heads}; "
                "choose num_heads that divides hidden_size"
            )
        if positions not in ("learned", "sinusoidal"):
            raise ConfigValueError(f"positions={positions!r}: use 'learned' or 'sinusoidal'")
        if pooling not in ("mean", "cls"):
            raise ConfigValueError(f"pooling={pooling!r}: use 'mean' or 'cls'")
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.output_size = output_size or hidden_size
        self.positions = positions
        self.pooling = pooling
        self.max_length = max_length
        self.num_layers = num_layers
        self.ff_size = ff_size or 4 * hidden_size

        self.input_projection = nn.Linear(input_size, hidden_size)
        self.position_embedding = (
            nn.Embedding(max_length, hidden_size) if positions == "learned" else None
        )
        self.cls = nn.Parameter(torch.randn(hidden_size) * 0.02) if pooling == "cls" else None
        self.embedding_dropout = nn.Dropout(dropout)
        layer = nn.TransformerEncoderLayer(
            d_model=hidden_size,
            nhead=num_heads,
            dim_feedforward=self.ff_size,
            dropout=dropout,
            batch_first=True,
            norm_first=norm_first,
        )
        self.layers = nn.TransformerEncoder(
            layer,
            num_layers=num_layers,
            norm=nn.LayerNorm(hidden_size) if norm_first else None,
            enable_nested_tensor=False,
        )
        self.projection: nn.Module = (
            nn.Linear(hidden_size, self.output_size)
            if self.output_size != hidden_size
            else nn.Identity()
        )

    def forward(self, x: Tensor, mask: Tensor | None = None, state: None = None) -> EncoderOutput:
        if state is not None:
            raise ValueError("TransformerEncoder carries no state between batches: pass state=None")
        if x.dim() != 3 or x.size(-1) != self.input_size:
            raise ValueError(
                f"TransformerEncoder: x has shape {tuple(x.shape)}, "
                f"expected (B, T, {self.input_size})"
            )
        batch, length, _ = x.shape
        if mask is None:
            mask = torch.ones(batch, length, dtype=torch.bool, device=x.device)
        mask = mask.bool()
        if not bool(mask.any(1).all()):
            raise ValueError("TransformerEncoder: a sequence has no real token; drop empty rows")
        encode = partial(self._encode, mask=mask)
        flops = partial(self._flops, mask)
        return in_decided_precision(self, encode, x, self.hidden_size, flops, "transformer")

    def _flops(self, mask: Tensor) -> float:
        """About the products of one forward: per real token and layer, the four (H x H)
        attention projections, the feed-forward's two (H x F) and the attention over the
        sequence's T keys and values."""
        tokens, length, hidden = float(mask.sum()), mask.size(1), self.hidden_size
        per_layer = 4 * hidden**2 + 2 * hidden * self.ff_size + 2 * length * hidden
        return 2.0 * tokens * (self.input_size * hidden + self.num_layers * per_layer)

    def _encode(self, x: Tensor, mask: Tensor) -> EncoderOutput:
        batch, length, _ = x.shape
        position_ids = (mask.long().cumsum(1) - 1).clamp(min=0)  # (B, T), real tokens only
        if self.position_embedding is not None:
            if length > self.max_length:
                raise ValueError(
                    f"sequence of {length} tokens is longer than max_length={self.max_length} "
                    "learned positions; raise max_length or use positions=sinusoidal"
                )
            position = self.position_embedding(position_ids)  # (B, T, H)
        else:
            position = sinusoidal_positions(position_ids, self.hidden_size).to(x.dtype)
        tokens = self.embedding_dropout(self.input_projection(x) + position)  # (B, T, H)

        if self.cls is not None:
            tokens = torch.cat([self.cls.expand(batch, 1, -1), tokens], dim=1)  # (B, 1+T, H)
            mask = torch.cat([mask.new_ones(batch, 1), mask], dim=1)
        outputs = self.layers(tokens, src_key_padding_mask=~mask)  # (B, [1+]T, H)
        outputs = outputs * mask.unsqueeze(-1)

        if self.cls is not None:
            pooled, outputs, mask = outputs[:, 0], outputs[:, 1:], mask[:, 1:]
        else:
            pooled = outputs.sum(1) / mask.sum(1, keepdim=True)  # (B, H)
        hidden = self.projection(outputs) * mask.unsqueeze(-1)  # (B, T, H_out)
        return EncoderOutput(hidden=hidden, pooled=self.projection(pooled))
