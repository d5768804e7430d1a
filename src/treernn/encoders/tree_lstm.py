"""Binary (constituency) Tree-LSTM over gold trees: the N-ary Tree-LSTM of Tai, Socher and Manning
2015, "Improved Semantic Representations From Tree-Structured Long Short-Term Memory Networks",
section 3.2 (N-ary Tree-LSTM) with N = 2.

A parent j with children (h_1, c_1) = left and (h_2, c_2) = right computes, with U_l the weights
for child l and one forget gate per child (f_jk sees both children through U^(f)_kl):

    i_j  = sigmoid(U^(i)_1 h_1 + U^(i)_2 h_2 + b^(i))
    f_jk = sigmoid(U^(f)_k1 h_1 + U^(f)_k2 h_2 + b^(f)),  k = 1, 2
    o_j  = sigmoid(U^(o)_1 h_1 + U^(o)_2 h_2 + b^(o))
    u_j  = tanh(U^(u)_1 h_1 + U^(u)_2 h_2 + b^(u))
    c_j  = i_j * u_j + f_j1 * c_1 + f_j2 * c_2
    h_j  = o_j * tanh(c_j)

In a constituency tree only leaves read a word, so internal nodes have no ``W x_j`` term; all five
blocks are one ``Linear(2H, 5H)`` of ``[h_1; h_2]``, laid out (i, f_1, f_2, o, u).

Leaves use the same equations with no children (the child sums are empty):
``i, o, u = sigmoid/sigmoid/tanh(W x + b)``, ``c = i * u``, ``h = o * tanh(c)``, one
``Linear(D, 3H)`` laid out (i, o, u).

``dropout`` is applied to the children's ``[h_1; h_2]`` before the parent's linear map (cells c are
never dropped). Composition is batched level by level (see `treernn.encoders.tree_batch`); a
node's state in the buffer is ``[h; c]`` of width 2H and ``hidden``/``pooled`` expose h.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from treernn.encoders.tree_batch import TreeEncoder


class TreeLSTMEncoder(TreeEncoder):
    """``forward(x (B, T, D), mask, tree=TreeBatch)``: leaf h (B, T, H) and root h (B, H)."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        dropout: float = 0.0,
        output_size: int | None = None,
    ) -> None:
        super().__init__(input_size, hidden_size, num_layers, dropout, output_size)
        self.leaf = nn.Linear(input_size, 3 * hidden_size)
        self.composition = nn.Linear(2 * hidden_size, 5 * hidden_size)
        self.dropout = nn.Dropout(dropout)

    def embed_leaves(self, x: Tensor) -> Tensor:
        input_gate, output_gate, candidate = self.leaf(x).chunk(3, dim=-1)  # (N, H) each
        cell = torch.sigmoid(input_gate) * torch.tanh(candidate)
        hidden = torch.sigmoid(output_gate) * torch.tanh(cell)
        return torch.cat([hidden, cell], dim=-1)  # (N, 2H)

    def compose(self, left: Tensor, right: Tensor) -> Tensor:
        left_hidden, left_cell = left.chunk(2, dim=-1)  # (n, H) each
        right_hidden, right_cell = right.chunk(2, dim=-1)
        children = self.dropout(torch.cat([left_hidden, right_hidden], dim=-1))  # (n, 2H)
        gates = self.composition(children)  # (n, 5H)
        input_gate, forget_left, forget_right, output_gate, candidate = gates.chunk(5, dim=-1)
        cell = (
            torch.sigmoid(input_gate) * torch.tanh(candidate)
            + torch.sigmoid(forget_left) * left_cell
            + torch.sigmoid(forget_right) * right_cell
        )
        hidden = torch.sigmoid(output_gate) * torch.tanh(cell)
        return torch.cat([hidden, cell], dim=-1)  # (n, 2H)

    def node_output(self, states: Tensor) -> Tensor:
        return states[:, : self.hidden_size]  # h of [h; c]
