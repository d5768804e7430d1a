"""A gold-tree model that composes with the Gated Recursive Cell of Ordered Memory (Shen et al.,
NeurIPS 2019, "Ordered Memory", section 3.2, eqs. 12-13), as a baseline that separates the cell from
Ordered Memory's learned structure: the same composition function, applied along the given tree.

Leaves: ``h_leaf = LayerNorm(W x + b)`` (eq. 1). Parents use
`treernn.encoders.ordered_memory.GatedRecursiveCell`: ``Dropout -> Linear(2H, 4H) -> ReLU
-> Dropout -> Linear(4H, 4H)`` gives three sigmoid gates and a candidate, and the output is
``LayerNorm(g_v * vertical + g_h * horizontal + g_c * candidate)`` (eqs. 12-13).

Which child is which follows Ordered Memory. There the cell composes ``M_hat^{i-1}_t`` (vertical
input, first in the concatenation: the subtree that ends with the newest token x_t, i.e. the right
constituent) with ``M^i_t`` (horizontal input: the older subtree to its left). So a parent here is
``cell(h_right_child, h_left_child)``: the cell's first argument (named ``left`` in ``grc.py``,
the vertical one) gets the right child. The tree model and Ordered Memory then apply the same
function to the same tree, and their cell weights are interchangeable.

As in Ordered Memory, one LayerNorm module normalises both the leaves and every cell output
(``share_layer_norm=True``); set it to False to give the cell its own. ``dropout`` is the cell's
dropout (fresh masks per call, i.e. per tree level). Composition is batched level by level over
the whole batch (see `treernn.encoders.tree_batch`).
"""

from __future__ import annotations

from torch import Tensor, nn

from treernn.encoders.ordered_memory import GatedRecursiveCell
from treernn.encoders.tree_batch import TreeEncoder


class GRCTreeEncoder(TreeEncoder):
    """``forward(x (B, T, D), mask, tree=TreeBatch)``: leaf states (B, T, H) and root (B, H)."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        dropout: float = 0.0,
        output_size: int | None = None,
        share_layer_norm: bool = True,
    ) -> None:
        super().__init__(input_size, hidden_size, num_layers, dropout, output_size)
        self.leaf = nn.Linear(input_size, hidden_size)
        self.layer_norm = nn.LayerNorm(hidden_size)
        self.cell = GatedRecursiveCell(
            hidden_size, dropout=dropout, layer_norm=self.layer_norm if share_layer_norm else None
        )

    def embed_leaves(self, x: Tensor) -> Tensor:
        return self.layer_norm(self.leaf(x))  # (N, D) -> (N, H)

    def compose(self, left: Tensor, right: Tensor) -> Tensor:
        return self.cell(right, left)  # (n, H); vertical input = right child, see docstring
