"""Gated Recursive Cell (Shen et al., NeurIPS 2019, "Ordered Memory", section 3.2, eqs. 12-13).

The cell composes two vectors into one, like a Tree-LSTM node without a memory cell:

    [v; h; c; u] = W2 ReLU(W1 [left; right] + b1) + b2         eq. (12), (N, 4H)
    out          = LN(sigmoid(v) * left + sigmoid(h) * right + sigmoid(c) * u)   eq. (13)

``left`` is the vertical input (the candidate of the slot below, ``M_hat^{i-1}``), ``right`` the
horizontal one (the memory slot ``M^i``). As in the authors' code the feed-forward part is
``Dropout -> Linear(2H, 4H) -> ReLU -> Dropout -> Linear(4H, 4H)`` and the LayerNorm may be the
same module as the encoder's input LayerNorm (eq. 13: "LN shares the same parameters with the one
used in Eqn. 1"); pass it as ``layer_norm``.

Dropout: called plainly, the cell samples fresh masks per call (the authors' behaviour). The
Ordered Memory encoder instead samples one pair of masks per sequence (see
:meth:`GatedRecursiveCell.sample_dropout_masks`) and passes them in, so that the same masks are
shared by every slot and step; it also uses :meth:`split_first_layer` to project the ``right``
inputs of all slots in one matrix product. Both paths compute the same function. The encoder's
default (fused) path re-implements :meth:`GatedRecursiveCell.compose` inside
:func:`treernn.encoders.ordered_memory.slot_chain`, with a hand-written backward pass, and only
reads this module's parameters; its reference path (``fused=False``) calls ``compose``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from treernn.encoders.base import check_dropout

DropoutMasks = tuple[Tensor, Tensor]  # (B, 2H) on [left; right], (B, 4H) on the ReLU output


class GatedRecursiveCell(nn.Module):
    """``forward(left (N, H), right (N, H)) -> (N, H)``; see the module docstring."""

    def __init__(
        self, hidden_size: int, dropout: float = 0.0, layer_norm: nn.LayerNorm | None = None
    ) -> None:
        super().__init__()
        check_dropout("dropout", dropout)
        self.hidden_size = hidden_size
        self.dropout = dropout
        self.first_layer = nn.Linear(2 * hidden_size, 4 * hidden_size)  # W1, b1
        self.second_layer = nn.Linear(4 * hidden_size, 4 * hidden_size)  # W2, b2 -> v, h, c, u
        self.layer_norm = layer_norm if layer_norm is not None else nn.LayerNorm(hidden_size)
        if self.layer_norm.normalized_shape != (hidden_size,):
            raise ValueError(
                f"layer_norm normalises {tuple(self.layer_norm.normalized_shape)}, but the cell "
                f"has hidden_size={hidden_size}; pass nn.LayerNorm({hidden_size})"
            )

    def sample_dropout_masks(self, batch_size: int, like: Tensor) -> DropoutMasks | None:
        """One pair of inverted-dropout masks for a whole sequence, or None when not dropping."""
        if not self.training or self.dropout == 0.0:
            return None
        keep = 1.0 - self.dropout
        input_mask = like.new_empty(batch_size, 2 * self.hidden_size).bernoulli_(keep) / keep
        hidden_mask = like.new_empty(batch_size, 4 * self.hidden_size).bernoulli_(keep) / keep
        return input_mask, hidden_mask

    def split_first_layer(self) -> tuple[Tensor, Tensor, Tensor]:
        """W1 split by input: (4H, H) acting on ``left``, (4H, H) acting on ``right``, and b1."""
        weight = self.first_layer.weight  # (4H, 2H)
        return weight[:, : self.hidden_size], weight[:, self.hidden_size :], self.first_layer.bias

    def compose(
        self, left: Tensor, right: Tensor, first_layer_out: Tensor, hidden_mask: Tensor | None
    ) -> Tensor:
        """Everything after ``W1 [left; right] + b1`` (given as ``first_layer_out``, (N, 4H))."""
        hidden = F.relu(first_layer_out)  # (N, 4H)
        if hidden_mask is not None:
            hidden = hidden * hidden_mask
        elif self.training and self.dropout > 0.0:
            hidden = F.dropout(hidden, self.dropout, training=True)
        gate_logits, candidate = self.second_layer(hidden).split(
            (3 * self.hidden_size, self.hidden_size), dim=-1
        )
        vertical_gate, horizontal_gate, candidate_gate = torch.sigmoid(gate_logits).chunk(3, dim=-1)
        mixed = vertical_gate * left
        mixed = torch.addcmul(mixed, horizontal_gate, right)
        mixed = torch.addcmul(mixed, candidate_gate, candidate)
        return self.layer_norm(mixed)  # (N, H)

    def forward(
        self, left: Tensor, right: Tensor, dropout_masks: DropoutMasks | None = None
    ) -> Tensor:
        if left.shape != right.shape or left.size(-1) != self.hidden_size:
            raise ValueError(
                f"GatedRecursiveCell(hidden_size={self.hidden_size}) needs left and right of shape "
                f"(N, {self.hidden_size}); got {tuple(left.shape)} and {tuple(right.shape)}"
            )
        inputs = torch.cat([left, right], dim=-1)  # (N, 2H)
        if dropout_masks is not None:
            inputs = inputs * dropout_masks[0]
        elif self.training and self.dropout > 0.0:
            inputs = F.dropout(inputs, self.dropout, training=True)
        hidden_mask = dropout_masks[1] if dropout_masks is not None else None
        return self.compose(left, right, self.first_layer(inputs), hidden_mask)
