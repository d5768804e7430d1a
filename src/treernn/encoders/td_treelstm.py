"""Top-down Tree LSTM and LdTreeLSTM (Zhang, Lu and Lapata, NAACL 2016, Sections 2.3-2.4).

A sentence's dependency tree is generated top-down and breadth-first (see
``treernn.data.dependency.linearise``; the schedule and the edge types are in
``treernn.encoders.top_down_tree``). Step t generates word w_t from a predecessor step t' along
an edge of type z_t in {LEFT, RIGHT, NX_LEFT, NX_RIGHT}; each edge type has its own (deep) LSTM and
all four share the hidden states H (Eq. 2):

    x_t = We e(w_t')                      (2a)   the predecessor's word embedding (ROOT: <root>)
    h_t = LSTM_{z_t}(x_t, H[:, t'])       (2b)   one LSTM step from the predecessor's (h, c)
    y_t = Who h_t                         (2d)   (the task owns Who and the softmax, Eq. 3)

Layer l of LSTM_z reads the layer below at the same step and its own layer at the predecessor (Eq.
4-5): a standard LSTM cell per (edge type, layer). ROOT's state H[:, 0] is the constant 0.01 (hidden
and cell, every layer). LdTreeLSTM (Eq. 6-7) adds a fifth LSTM that reads the head's left dependents
farthest first; its last state q_K is concatenated to the GEN-R input of the head's first right
dependent (a zero vector when the head has no left dependent).

Two implementations compute the same numbers (``impl``):

* ``impl="reference"``: `TopDownTreeLSTM.reference_forward`, Eq. 2-7 one node at a time,
  in generation order, with ``nn.LSTMCell`` calls. Read this one.
* ``impl="fast"`` (default): all steps of one generation level, across all trees of the batch,
  at once (`treernn.kernels.td_treelstm`, tested equal to the reference). Dropout
  between layers draws its masks in a different order, so the two agree in eval mode (and in
  training only without dropout).

Parameters are initialised uniformly in [-0.1, 0.1] as in the paper.
"""

from __future__ import annotations

from functools import partial
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from treernn import kernels
from treernn.encoders.base import Encoder, EncoderOutput, check_dropout, in_decided_precision
from treernn.encoders.lstm import run_by_lengths
from treernn.encoders.top_down_tree import RIGHT, LayerStates, TopDownTree, lstm_cell
from treernn.errors import ConfigValueError

GENERATORS = ("GEN-L", "GEN-R", "GEN-NX-L", "GEN-NX-R")


class TopDownTreeLSTM(Encoder):
    """TreeLSTM of Zhang et al. (2016); ``left_dependents=True`` gives LdTreeLSTM.

    forward(x (B, T, D), mask (B, T), tree=TopDownTree) -> hidden (B, T, H): ``x[:, t]`` is the
    embedding of the word generated at step t (``x[:, 0]`` the ROOT embedding); ``hidden[:, t]`` is
    h_t, the state that predicts the word of step t (``hidden[:, 0]`` is ROOT's constant state).
    ``impl`` picks the implementation: ``"fast"`` (default, level-batched) or the node-at-a-time
    ``"reference"`` (see the module docstring).
    """

    input_view = "dependency_tree"

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        dropout: float = 0.0,
        output_size: int | None = None,
        left_dependents: bool = False,
        left_dependent_size: int | None = None,
        root_value: float = 0.01,
        init_range: float = 0.1,
        impl: Literal["fast", "reference"] = "fast",
    ) -> None:
        super().__init__()
        check_dropout("dropout", dropout)
        if impl not in ("fast", "reference"):
            raise ConfigValueError(f"impl={impl!r} is not one of 'fast', 'reference'.")
        self.impl = impl
        if num_layers < 1:
            raise ConfigValueError(f"num_layers={num_layers}: a tree LSTM needs at least one layer")
        self.input_size = input_size
        self.output_size = output_size or hidden_size
        self.num_layers = num_layers
        self.hidden_sizes = [hidden_size] * (num_layers - 1) + [self.output_size]
        self.root_value = root_value
        self.uses_left_dependents = left_dependents
        self.left_dependent_size = (left_dependent_size or hidden_size) if left_dependents else 0
        first_inputs = [input_size] * 4
        first_inputs[RIGHT] += self.left_dependent_size  # Eq. 7a: r_t = [We e(w_t'); q_K]
        # cells[edge_type][layer]: one layer of LSTM_z (GEN-L, GEN-R, GEN-NX-L, GEN-NX-R).
        layer_inputs = [
            [first_inputs[edge_type]] + self.hidden_sizes[:-1] for edge_type in range(4)
        ]
        self.cells = nn.ModuleList(
            nn.ModuleList(
                nn.LSTMCell(cell_input, size)
                for cell_input, size in zip(layer_inputs[edge_type], self.hidden_sizes)
            )
            for edge_type in range(4)
        )
        self.left_dependent_lstm = (
            nn.LSTM(input_size, self.left_dependent_size, batch_first=True)
            if left_dependents
            else None
        )
        self.dropout = nn.Dropout(dropout)
        self.reset_parameters(init_range)

    def reset_parameters(self, init_range: float = 0.1) -> None:
        for parameter in self.parameters():
            nn.init.uniform_(parameter, -init_range, init_range)

    # ------------------------------------------------------------------ building blocks

    def root_state(self, count: int, device=None, dtype=None) -> LayerStates:
        """ROOT's state H[:, 0]: the constant ``root_value`` for h and c of every layer."""
        return [
            (
                torch.full((count, size), self.root_value, device=device, dtype=dtype),
                torch.full((count, size), self.root_value, device=device, dtype=dtype),
            )
            for size in self.hidden_sizes
        ]

    def summarise_left_dependents(self, sequences: Tensor, lengths: Tensor) -> Tensor:
        """Eq. 6: (N, K, D) left dependents farthest first, (N,) lengths -> q_K (N, H_ld)."""
        assert self.left_dependent_lstm is not None
        summary = sequences.new_zeros(sequences.size(0), self.left_dependent_size)
        has_any = lengths > 0
        if sequences.size(1) == 0 or not bool(has_any.any()):
            return summary
        rows = has_any.nonzero().squeeze(1)
        row_lengths = lengths[rows]
        outputs = run_by_lengths(self.left_dependent_lstm, sequences[rows], row_lengths)
        last = outputs[torch.arange(rows.numel(), device=rows.device), row_lengths - 1]
        return summary.index_copy(0, rows, last.to(summary.dtype))  # (N', H_ld) at q_K

    def step(self, edge_type: int, inputs: Tensor, predecessor_state: LayerStates) -> LayerStates:
        """One generation step of LSTM_z for N nodes of one edge type (used by the tree sampler).

        inputs: (N, D) predecessor word embeddings (for RIGHT, (N, D + H_ld) with q_K appended).
        """
        new_state: LayerStates = []
        below = inputs
        for layer, cell in enumerate(self.cells[edge_type]):
            if layer > 0:
                below = self.dropout(below)
            hidden, memory = cell(below, predecessor_state[layer])
            new_state.append((hidden, memory))
            below = hidden
        return new_state

    # ------------------------------------------------------------------ the reference

    def reference_forward(self, x: Tensor, mask: Tensor, tree: TopDownTree) -> list[Tensor]:
        """Eq. 2-7 one node at a time: x (B, T, D), mask (B, T) -> per-layer hidden (B, T, H_l).

        Steps are visited in generation (breadth-first) order, so a step's predecessor
        ``tree.predecessor[row, t] < t`` always has its state already.
        """
        batch, width, _ = x.shape
        layer_outputs = [x.new_zeros(batch, width, size) for size in self.hidden_sizes]
        for row in range(batch):
            length = int(mask[row].sum())
            states = {0: self.root_state(1, x.device, x.dtype)}  # step -> per-layer (h, c)
            for t in range(1, length):
                edge_type = int(tree.edge_type[row, t])
                predecessor = int(tree.predecessor[row, t])
                inputs = x[row, predecessor].unsqueeze(0)  # (1, D), Eq. 2a
                if edge_type == RIGHT and self.uses_left_dependents:  # Eq. 7a: [x; q_K]
                    count = int(tree.left_dependents_length[row, t])
                    dependents = tree.left_dependents[row, t, :count]  # farthest first
                    summary = self.left_dependent_summary(x[row, dependents])
                    inputs = torch.cat([inputs, summary], dim=-1)
                states[t] = self.step(edge_type, inputs, states[predecessor])  # Eq. 2b, 4-5
            for t, state in states.items():
                for layer, (hidden, _) in enumerate(state):
                    layer_outputs[layer][row, t] = hidden[0]
        return layer_outputs

    def left_dependent_summary(self, dependents: Tensor) -> Tensor:
        """Eq. 6 one dependent at a time: (K, D) farthest first -> q_K (1, H_ld), 0 when K = 0."""
        lstm = self.left_dependent_lstm
        assert lstm is not None
        hidden = dependents.new_zeros(1, self.left_dependent_size)
        cell = dependents.new_zeros(1, self.left_dependent_size)
        for dependent in dependents:
            gates = F.linear(dependent[None], lstm.weight_ih_l0, lstm.bias_ih_l0)
            gates = gates + F.linear(hidden, lstm.weight_hh_l0, lstm.bias_hh_l0)
            hidden, cell = lstm_cell(gates, cell)
        return hidden

    # ------------------------------------------------------------------ forward

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None = None,
        state: object = None,
        tree: TopDownTree | None = None,
        **kwargs,
    ) -> EncoderOutput:
        if tree is None:
            raise ValueError("TopDownTreeLSTM needs tree=TopDownTree(...) (dependency batches)")
        batch, width, _ = x.shape
        if mask is None:
            mask = torch.ones(batch, width, dtype=torch.bool, device=x.device)
        if not bool(mask[:, 0].all()):
            raise ValueError("every row needs ROOT at step 0 (mask[:, 0] must be True)")
        encode = partial(self._encode, mask=mask, tree=tree)
        width = self.hidden_sizes[0]
        return in_decided_precision(self, encode, x, width, partial(self._flops, mask))

    def _flops(self, mask: Tensor) -> float:
        """About the products of one forward: each word through one LSTM a layer, (2H x 4H)."""
        return 2.0 * float(mask.sum()) * sum(8 * size**2 for size in self.hidden_sizes)

    def _encode(self, x: Tensor, mask: Tensor, tree: TopDownTree) -> EncoderOutput:
        if self.impl == "fast":
            layer_outputs = kernels.td_treelstm_recurrence(
                x,
                mask,
                tree,
                cells=self.cells,
                root_state=self.root_state,
                dropout=self.dropout,
                summarise_left_dependents=(
                    self.summarise_left_dependents if self.uses_left_dependents else None
                ),
            )
        else:
            layer_outputs = self.reference_forward(x, mask, tree)
        hidden = layer_outputs[-1]
        weights = mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1)
        return EncoderOutput(hidden=hidden, pooled=pooled, layer_outputs=layer_outputs)


class LdTreeLSTM(TopDownTreeLSTM):
    """LdTreeLSTM (Section 2.4): TreeLSTM plus the left-dependent LSTM feeding GEN-R."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        dropout: float = 0.0,
        output_size: int | None = None,
        left_dependent_size: int | None = None,
        root_value: float = 0.01,
        init_range: float = 0.1,
        impl: Literal["fast", "reference"] = "fast",
    ) -> None:
        super().__init__(
            input_size,
            hidden_size,
            num_layers,
            dropout,
            output_size,
            left_dependents=True,
            left_dependent_size=left_dependent_size,
            root_value=root_value,
            init_range=init_range,
            impl=impl,
        )
