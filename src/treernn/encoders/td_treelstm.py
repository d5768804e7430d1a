"""Top-down Tree LSTM and LdTreeLSTM (Zhang, Lu and Lapata, NAACL 2016, Sections 2.3-2.4).

A sentence's dependency tree is generated top-down and breadth-first (see
``treernn.data.dependency.linearise``). Step t generates word w_t from a predecessor step t' along
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

Batching: a step's predecessor always lies on the previous generation level, so all steps of one
level, across all trees of the batch, run together. Per level and layer, one matrix product with the
four LSTMs' stacked weights gives every type's pre-activations and each step keeps its own type's
(4x the recurrent arithmetic, far fewer kernel launches). The first layer's input projections (and
the LD summaries) do not depend on the recurrence and are computed for all steps beforehand.
Parameters are initialised uniformly in [-0.1, 0.1] as in the paper.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence

from treernn.encoders.base import Encoder, EncoderOutput, check_dropout

LEFT, RIGHT, NX_LEFT, NX_RIGHT = 0, 1, 2, 3
EDGE_TYPES = ("LEFT", "RIGHT", "NX_LEFT", "NX_RIGHT")
GENERATORS = ("GEN-L", "GEN-R", "GEN-NX-L", "GEN-NX-R")

LayerStates = list[tuple[Tensor, Tensor]]  # per layer (h, c), each (N, H_l)


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


def lstm_cell(gates: Tensor, cell: Tensor) -> tuple[Tensor, Tensor]:
    """Eq. 4-5 from pre-activations (N, 4H) in ``nn.LSTMCell`` order (i, f, u, o)."""
    input_gate, forget_gate, update, output_gate = gates.chunk(4, dim=-1)
    cell = torch.sigmoid(forget_gate) * cell + torch.sigmoid(input_gate) * torch.tanh(update)
    return torch.sigmoid(output_gate) * torch.tanh(cell), cell


class TopDownTreeLSTM(Encoder):
    """TreeLSTM of Zhang et al. (2016); ``left_dependents=True`` gives LdTreeLSTM.

    forward(x (B, T, D), mask (B, T), tree=TopDownTree) -> hidden (B, T, H): ``x[:, t]`` is the
    embedding of the word generated at step t (``x[:, 0]`` the ROOT embedding); ``hidden[:, t]`` is
    h_t, the state that predicts the word of step t (``hidden[:, 0]`` is ROOT's constant state).
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
    ) -> None:
        super().__init__()
        check_dropout("dropout", dropout)
        if num_layers < 1:
            raise ValueError(f"num_layers={num_layers}: a tree LSTM needs at least one layer")
        self.input_size = input_size
        self.output_size = output_size or hidden_size
        self.num_layers = num_layers
        self.hidden_sizes = [hidden_size] * (num_layers - 1) + [self.output_size]
        self.root_value = root_value
        self.uses_left_dependents = left_dependents
        self.left_dependent_size = (left_dependent_size or hidden_size) if left_dependents else 0
        first_inputs = [input_size] * 4
        first_inputs[RIGHT] += self.left_dependent_size  # Eq. 7a: r_t = [We e(w_t'); q_K]
        # cells[z][l]: the layer-l cell of LSTM_z (GEN-L, GEN-R, GEN-NX-L, GEN-NX-R).
        self.cells = nn.ModuleList(
            nn.ModuleList(
                nn.LSTMCell(first_inputs[z] if l == 0 else self.hidden_sizes[l - 1], size)
                for l, size in enumerate(self.hidden_sizes)
            )
            for z in range(4)
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
        packed = pack_padded_sequence(
            sequences[rows], lengths[rows].cpu(), batch_first=True, enforce_sorted=False
        )
        _, (last_hidden, _) = self.left_dependent_lstm(packed)  # (1, N', H_ld)
        return summary.index_copy(0, rows, last_hidden[0])

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

    # ------------------------------------------------------------------ batched forward

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
        device = x.device
        flat_x = x.reshape(batch * width, -1)  # (B*T, D)
        row_offset = torch.arange(batch, device=device).unsqueeze(1) * width  # (B, 1)

        # Schedule: real steps sorted by generation level; ROOT steps (level 0) first.
        real = mask.reshape(-1).nonzero().squeeze(1)  # (N,) flat step ids
        level = tree.level.reshape(-1)[real]
        level = torch.where((real % width) == 0, torch.zeros_like(level), level.clamp(min=1))
        level, permutation = torch.sort(level, stable=True)
        order = real[permutation]  # (N,) flat ids in schedule order
        edge = tree.edge_type.reshape(-1)[order]  # (N,)
        level_sizes = torch.bincount(level).tolist()
        if 0 in level_sizes:
            raise ValueError("tree.level skips a level: check the linearisation")
        level_starts = [sum(level_sizes[:i]) for i in range(len(level_sizes))]

        schedule_position = torch.full((batch * width,), -1, dtype=torch.long, device=device)
        schedule_position[order] = torch.arange(order.numel(), device=device)
        level_start_of = torch.tensor(level_starts, device=device)[level]  # (N,)
        position_in_level = torch.full_like(schedule_position, -1)
        position_in_level[order] = schedule_position[order] - level_start_of
        predecessor_flat = (tree.predecessor + row_offset).reshape(-1)[order]  # (N,)
        predecessor_in_level = position_in_level[predecessor_flat]  # (N,)
        if bool((predecessor_in_level[level_sizes[0] :] < 0).any()):
            raise ValueError("a step's predecessor is padding: check tree.predecessor and mask")

        # Layer-1 input projections of all steps at once (Eq. 2a / 7a), one product per edge type.
        predecessor_words = flat_x[predecessor_flat]  # (N, D)
        first_layer = x.new_zeros(order.numel(), 4 * self.hidden_sizes[0])  # (N, 4H)
        generated = torch.arange(order.numel(), device=device) >= level_sizes[0]
        for z in range(4):
            selected = ((edge == z) & generated).nonzero().squeeze(1)
            if selected.numel() == 0:
                continue
            inputs = predecessor_words[selected]
            if z == RIGHT and self.uses_left_dependents:
                steps = order[selected]
                deps = tree.left_dependents.reshape(batch * width, -1)[steps]  # (N_R, K)
                lengths = tree.left_dependents_length.reshape(-1)[steps]  # (N_R,)
                deps_flat = deps + (steps // width * width).unsqueeze(1)
                summary = self.summarise_left_dependents(flat_x[deps_flat], lengths)
                inputs = torch.cat([inputs, summary], dim=-1)
            cell = self.cells[z][0]
            first_layer = first_layer.index_copy(
                0, selected, F.linear(inputs, cell.weight_ih, cell.bias_ih)
            )

        # All four LSTMs' recurrent (and upper-layer input) weights stacked: one product per level
        # and layer gives every edge type's pre-activations; each step keeps its own type's.
        recurrent_weights = [
            (
                torch.cat([self.cells[z][l].weight_hh for z in range(4)]),  # (4*4H, H)
                torch.cat([self.cells[z][l].bias_hh for z in range(4)]),
            )
            for l in range(self.num_layers)
        ]
        input_weights = [
            (
                torch.cat([self.cells[z][l].weight_ih for z in range(4)]),
                torch.cat([self.cells[z][l].bias_ih for z in range(4)]),
            )
            for l in range(1, self.num_layers)
        ]

        def own_type(all_types: Tensor, types: Tensor) -> Tensor:
            """(n, 4 * 4H) pre-activations of the 4 LSTMs -> (n, 4H) of each step's own type."""
            rows = all_types.view(all_types.size(0), 4, -1)
            return rows[torch.arange(rows.size(0), device=device), types]

        previous = self.root_state(level_sizes[0], device, x.dtype)
        level_outputs: list[list[Tensor]] = [[h for h, _ in previous]]  # per level, per layer
        for lvl in range(1, len(level_sizes)):
            start, end = level_starts[lvl], level_starts[lvl] + level_sizes[lvl]
            predecessor_index = predecessor_in_level[start:end]
            types = edge[start:end]
            new_state: LayerStates = []
            below: Tensor | None = None
            for layer in range(self.num_layers):
                hidden_prev = previous[layer][0][predecessor_index]  # (n, H)
                cell_prev = previous[layer][1][predecessor_index]
                recurrent = own_type(F.linear(hidden_prev, *recurrent_weights[layer]), types)
                if layer == 0:
                    pre = first_layer[start:end]
                else:
                    weight, bias = input_weights[layer - 1]
                    pre = own_type(F.linear(self.dropout(below), weight, bias), types)
                hidden, memory = lstm_cell(pre + recurrent, cell_prev)
                new_state.append((hidden, memory))
                below = hidden
            previous = new_state
            level_outputs.append([h for h, _ in previous])

        layer_outputs = []
        for layer, size in enumerate(self.hidden_sizes):
            scheduled = torch.cat([outputs[layer] for outputs in level_outputs])  # (N, H_l)
            dense = scheduled.new_zeros(batch * width, size).index_copy(0, order, scheduled)
            layer_outputs.append(dense.view(batch, width, size))
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
        )
