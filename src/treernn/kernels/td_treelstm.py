"""The level-batched TD-TreeLSTM forward pass (``TopDownTreeLSTM(impl="fast")``, the default).

Read `treernn.encoders.td_treelstm` first: it has the equations and the readable node-at-a-time
reference. This module computes the same numbers faster:

* A step's predecessor always lies on the previous generation level, so all steps of one level,
  across all trees of the batch, run together ("the schedule": real steps sorted by level).
* Per level and layer, one matrix product with the four LSTMs' stacked weights gives every edge
  type's pre-activations and each step keeps its own type's (4x the recurrent arithmetic, far
  fewer kernel launches).
* The first layer's input projections (and the LdTreeLSTM summaries of Eq. 6) do not depend on the
  recurrence and are computed for all steps beforehand, one product per edge type.
* Under bf16 autocast on the CPU the products run on rows rounded up to a multiple of 16
  (`treernn.kernels.gemm.rounded_rows_linear`): a level's node count changes from level to
  level and batch to batch, and oneDNN would build a kernel for each new count.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn

from treernn.encoders.top_down_tree import RIGHT, LayerStates, TopDownTree, lstm_cell
from treernn.kernels.gemm import autocast_row_multiple, rounded_rows_linear


def td_treelstm_recurrence(
    x: Tensor,
    mask: Tensor,
    tree: TopDownTree,
    cells: Sequence[Sequence[nn.LSTMCell]],
    root_state: Callable[..., LayerStates],
    dropout: Callable[[Tensor], Tensor],
    summarise_left_dependents: Callable[[Tensor, Tensor], Tensor] | None = None,
) -> list[Tensor]:
    """x (B, T, D), mask (B, T) -> per-layer hidden states (B, T, H_l), zeros at padding.

    cells[edge_type][layer]: the four LSTMs' cells (the model's parameters); root_state(count,
    device, dtype): ROOT's constant state; dropout: between layers; summarise_left_dependents
    ((N, K, D) farthest first, (N,) lengths -> q_K, Eq. 6): LdTreeLSTM only, None for TreeLSTM.
    """
    batch, width, _ = x.shape
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
    first_layer = x.new_zeros(order.numel(), 4 * cells[0][0].hidden_size)  # (N, 4H)
    generated = torch.arange(order.numel(), device=device) >= level_sizes[0]
    for edge_type in range(4):
        selected = ((edge == edge_type) & generated).nonzero().squeeze(1)
        if selected.numel() == 0:
            continue
        inputs = predecessor_words[selected]
        if edge_type == RIGHT and summarise_left_dependents is not None:
            steps = order[selected]
            dependents = tree.left_dependents.reshape(batch * width, -1)[steps]  # (N_R, K)
            lengths = tree.left_dependents_length.reshape(-1)[steps]  # (N_R,)
            dependents_flat = dependents + (steps // width * width).unsqueeze(1)
            # fp32 under bf16-mixed on the CPU: the rows and the steps of a call change from
            # batch to batch, and oneDNN would build a bf16 kernel for each new shape (see
            # `rounded_rows_linear`)
            in_fp32 = autocast_row_multiple(device) > 1
            with torch.autocast("cpu", enabled=False) if in_fp32 else contextlib.nullcontext():
                summary = summarise_left_dependents(flat_x[dependents_flat], lengths)
            inputs = torch.cat([inputs, summary], dim=-1)
        cell = cells[edge_type][0]
        # bf16 under autocast; index_copy needs one dtype (CPU autocast promotes it to the
        # widest, CUDA autocast does not: the GPU run failed here before the cast)
        projected = rounded_rows_linear(inputs, cell.weight_ih, cell.bias_ih)
        first_layer = first_layer.index_copy(0, selected, projected.to(first_layer.dtype))

    # All four LSTMs' recurrent (and upper-layer input) weights stacked: one product per level
    # and layer gives every edge type's pre-activations; each step keeps its own type's.
    num_layers = len(cells[0])
    recurrent_weights = [
        (
            torch.cat([cells[edge_type][layer].weight_hh for edge_type in range(4)]),  # (4*4H, H)
            torch.cat([cells[edge_type][layer].bias_hh for edge_type in range(4)]),
        )
        for layer in range(num_layers)
    ]
    input_weights = [
        (
            torch.cat([cells[edge_type][layer].weight_ih for edge_type in range(4)]),
            torch.cat([cells[edge_type][layer].bias_ih for edge_type in range(4)]),
        )
        for layer in range(1, num_layers)
    ]

    def own_type(all_types: Tensor, types: Tensor) -> Tensor:
        """(n, 4 * 4H) pre-activations of the 4 LSTMs -> (n, 4H) of each step's own type."""
        rows = all_types.view(all_types.size(0), 4, -1)
        return rows[torch.arange(rows.size(0), device=device), types]

    previous: LayerStates = root_state(level_sizes[0], device, x.dtype)
    level_outputs: list[list[Tensor]] = [[h for h, _ in previous]]  # per level, per layer
    for level_index in range(1, len(level_sizes)):
        start = level_starts[level_index]
        end = start + level_sizes[level_index]
        predecessor_index = predecessor_in_level[start:end]
        types = edge[start:end]
        new_state: LayerStates = []
        below: Tensor | None = None
        for layer in range(num_layers):
            hidden_prev = previous[layer][0][predecessor_index]  # (n, H)
            cell_prev = previous[layer][1][predecessor_index]
            recurrent = own_type(rounded_rows_linear(hidden_prev, *recurrent_weights[layer]), types)
            if layer == 0:
                pre = first_layer[start:end]
            else:
                weight, bias = input_weights[layer - 1]
                pre = own_type(rounded_rows_linear(dropout(below), weight, bias), types)
            hidden, memory = lstm_cell(pre + recurrent, cell_prev)
            new_state.append((hidden, memory))
            below = hidden
        previous = new_state
        level_outputs.append([h for h, _ in previous])

    layer_outputs = []
    for layer, size in enumerate(cell.hidden_size for cell in cells[0]):
        scheduled = torch.cat([outputs[layer] for outputs in level_outputs])  # (N, H_l)
        dense = scheduled.new_zeros(batch * width, size).index_copy(0, order, scheduled)
        layer_outputs.append(dense.view(batch, width, size))
    return layer_outputs
