"""The top-down generation schedule of a dependency tree (Zhang, Lu and Lapata, NAACL 2016).

Shared by the data that builds it (``treernn.data.dependency``), the model that reads it
(``treernn.encoders.td_treelstm``), its fast kernel (``treernn.kernels.td_treelstm``) and the
sampler (``python -m treernn generate``); the model and its kernel also share the cell of Eq.
4-5 (`lstm_cell`) and the layers' states (`LayerStates`). It lives beside the encoders because
encoders never import from ``data/``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

#: Edge types z_t of Eq. 2: step t hangs from its predecessor t' as a left or right dependent
#: (LEFT, RIGHT), or as the next left or right sibling (NX_LEFT, NX_RIGHT).
LEFT, RIGHT, NX_LEFT, NX_RIGHT = 0, 1, 2, 3
EDGE_TYPES = ("LEFT", "RIGHT", "NX_LEFT", "NX_RIGHT")

LayerStates = list[tuple[Tensor, Tensor]]  # per layer (h, c), each (N, H_l)


def lstm_cell(gates: Tensor, cell: Tensor) -> tuple[Tensor, Tensor]:
    """Eq. 4-5 from pre-activations (N, 4H) in ``nn.LSTMCell`` order (i, f, u, o): (h, c)."""
    input_gate, forget_gate, update, output_gate = gates.chunk(4, dim=-1)
    cell = torch.sigmoid(forget_gate) * cell + torch.sigmoid(input_gate) * torch.tanh(update)
    return torch.sigmoid(output_gate) * torch.tanh(cell), cell


@dataclass
class TopDownTree:
    """Breadth-first generation schedule of a batch; step 0 of every row is ROOT.

    predecessor: (B, T) step index t' of each step (ROOT and padding: 0).
    edge_type: (B, T) LEFT/RIGHT/NX_LEFT/NX_RIGHT (ROOT and padding: 0, never read).
    level: (B, T) generation depth, level[t] = level[t'] + 1, ROOT 0.
    left_dependents: (B, T, K) for RIGHT steps, steps of the head's left dependents, farthest first.
    left_dependents_length: (B, T) how many of them (0 elsewhere).
    """

    predecessor: Tensor
    edge_type: Tensor
    level: Tensor
    left_dependents: Tensor
    left_dependents_length: Tensor
