"""Tree-RNN over gold binary trees (Bowman, Manning and Potts 2015, "Tree-structured composition in
neural networks without tree-structured architectures", section 3; the recursive model of Socher et
al. 2011 with a tanh layer). The gold-tree baseline of Ordered Memory Table 1.

Leaves: ``h_leaf = W_leaf x + b_leaf``, an affine map of the word embedding, no non-linearity.
Bowman et al. use the embedding itself as the leaf vector; a learned embedding followed by a
learned affine map spans the same leaf vectors, and the map lets the embedding size differ from
the hidden size.

Parents: ``h = tanh(W [h_left; h_right] + b)`` with W of shape (H, 2H). ``dropout`` is applied to
``[h_left; h_right]`` before W (as the Gated Recursive Cell drops its input). Composition is batched
level by level over the whole batch (see `treernn.encoders.tree_batch`).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from treernn.encoders.tree_batch import TreeEncoder


class TreeRNNEncoder(TreeEncoder):
    """``forward(x (B, T, D), mask, tree=TreeBatch)``: leaf states (B, T, H) and root (B, H)."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        dropout: float = 0.0,
        output_size: int | None = None,
    ) -> None:
        super().__init__(input_size, hidden_size, num_layers, dropout, output_size)
        self.leaf = nn.Linear(input_size, hidden_size)
        self.composition = nn.Linear(2 * hidden_size, hidden_size)
        self.dropout = nn.Dropout(dropout)

    def embed_leaves(self, x: Tensor) -> Tensor:
        return self.leaf(x)  # (N, D) -> (N, H)

    def compose(self, left: Tensor, right: Tensor) -> Tensor:
        children = self.dropout(torch.cat([left, right], dim=-1))  # (n, 2H)
        return torch.tanh(self.composition(children))  # (n, H)
