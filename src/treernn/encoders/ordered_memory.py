"""Ordered Memory (Shen, Tan, Hosseini, Lin, Sordoni, Courville, NeurIPS 2019), section 3.

A stack-like memory of N slots, each of size H, written through a cumulative attention pointer and
composed slot by slot with the Gated Recursive Cell (:mod:`treernn.encoders.grc`). Slot N - 1 (the
last) is the bottom of the stack and its candidate is the step's output. Per step t (Algorithm 1):

    x_t       = LN(W x_t + b)                                               eq. (1)
    p_t       = Att(x_t, M_hat_{t-1}, cp_{t-1})                             eq. (2), (8)-(11)
    cp_t^i    = sum_{j <= i} p_t^j,      rcp_t^i = sum_{j >= i} p_t^j       eq. (3), (4)
    M_t^i     = M_{t-1}^i (1 - rcp_t^i) + M_hat_{t-1}^i rcp_t^i             eq. (5)
    o_t^i     = cell(M_hat_t^{i-1}, M_t^i),   M_hat_t^{-1} = x_t            eq. (6)
    M_hat_t^i = x_t (1 - cp_t^i) + o_t^i cp_t^i                             eq. (7)
    output_t  = M_hat_t^{N-1}

Attention (section 3.1, as the authors' code writes it): query ``LN(Linear(Dropout(x_t)))``, keys
``LN(Linear(Dropout(M_hat_{t-1})))``, score ``Linear(Dropout(ReLU(query + key))) / sqrt(H)``, then
the softmax masked by the previous pointer shifted by one slot, ``cp_{t-1}^{i+1}`` with
``cp^N = 1`` (eq. 10): only existing stack slots, the one just above them, and the last slot can be
attended. At a sequence's first token there is no attention: cp = 0 and rcp = 1, so every
candidate slot becomes x_1. The LayerNorm of eq. (1) is the same module as the cell's (eq. 13).

Dropouts, where the authors put them (REFERENCE.md; the config names of their scripts in brackets):
``dropout`` [dropout]: the cell's two dropouts, on [left; right] and on its ReLU layer.
``memory_dropout`` [dropoutm]: the three dropouts of the attention (query, keys, scores).
``input_dropout`` [dropouti]: on the encoder input before the projection of eq. (1); ``locked`` (one
mask per sequence, shared over time) for SST as the authors' sentiment model does.
``output_dropout`` [dropouto]: on the returned outputs (hidden and pooled), before the task's head.
Deviation, for speed: every dropout mask inside the recurrence is sampled once per sequence and
shared by all steps and slots, where the authors' modules sample a fresh mask at every call (this is
variational dropout; eval-mode outputs are identical).

Speed, with the same numbers as the plain algorithm: at the k-th token of a row at most
min(N, k - 1) slots can have a non-zero pointer (the mask admits one new slot per step), so only
those slots get keys, memory updates and cell calls; the others hold x_t exactly. The cell's first
layer is split into its ``left`` and ``right`` halves; the ``right`` half, which reads the memory,
runs for all slots of a step as one matrix product. Rows are processed longest first, so the rows
still reading tokens (right padding) or already reading them (left padding) are a prefix of the
batch and padded rows cost nothing; a padded step never changes a row's state, so left and right
padding give the same results.

More slots at test time: ``test_memory_slots`` (e.g. 12 in training, 24 at test time for logical
inference); no parameter depends on N. Sequences longer than N tokens are handled as in the paper:
the stack holds at most N sub-trees, and once it is full the last slot stays attendable, so the
model keeps composing; nothing is rejected.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from treernn.encoders.base import Encoder, EncoderOutput, check_dropout
from treernn.encoders.grc import GatedRecursiveCell


@dataclass
class OrderedMemoryState:
    """The recurrent state after a step (one direction)."""

    cumulative_pointer: Tensor  # (B, N) cp_t
    memory: Tensor  # (B, N, H) M_t
    candidate: Tensor  # (B, N, H) M_hat_t
    tokens_seen: Tensor  # (B,) long: real tokens read so far (0 means the next one is the first)

    @property
    def num_slots(self) -> int:
        return self.cumulative_pointer.size(1)

    def index_select(self, index: Tensor) -> OrderedMemoryState:
        return OrderedMemoryState(
            self.cumulative_pointer[index], self.memory[index], self.candidate[index],
            self.tokens_seen[index],
        )  # fmt: skip


def masked_attention(scores: Tensor, allowed: Tensor) -> Tensor:
    """Eqs. (10)-(11): softmax of ``scores`` (B, S) multiplied by the soft mask ``allowed`` (B, S)
    in [0, 1], renormalised. Slots with ``allowed == 0`` get exactly 0. Every row needs one
    allowed slot (the last slot always is)."""
    masked = scores.masked_fill(allowed <= 0, float("-inf"))
    shift = masked.amax(dim=1, keepdim=True).detach()  # any shift gives the same distribution
    weights = torch.exp(masked - shift) * allowed  # (B, S)
    return weights / weights.sum(dim=1, keepdim=True)


class OrderedMemoryRecurrence(nn.Module):
    """One direction of Ordered Memory over a batch of sequences (Algorithm 1)."""

    def __init__(
        self, input_size: int, hidden_size: int, dropout: float = 0.0, memory_dropout: float = 0.0
    ) -> None:
        super().__init__()
        self.hidden_size = hidden_size
        self.memory_dropout = memory_dropout
        self.input_projection = nn.Linear(input_size, hidden_size)  # W, b of eq. (1)
        self.layer_norm = nn.LayerNorm(hidden_size)  # LN of eq. (1), shared with the cell
        self.query_projection = nn.Linear(hidden_size, hidden_size)
        self.query_norm = nn.LayerNorm(hidden_size)
        self.key_projection = nn.Linear(hidden_size, hidden_size)
        self.key_norm = nn.LayerNorm(hidden_size)
        self.score = nn.Linear(hidden_size, 1)
        self.cell = GatedRecursiveCell(hidden_size, dropout, layer_norm=self.layer_norm)

    def initial_state(self, batch_size: int, num_slots: int, like: Tensor) -> OrderedMemoryState:
        zeros = like.new_zeros(batch_size, num_slots, self.hidden_size)
        return OrderedMemoryState(
            like.new_zeros(batch_size, num_slots), zeros, zeros,
            torch.zeros(batch_size, dtype=torch.long, device=like.device),
        )  # fmt: skip

    def _attention_masks(self, batch_size: int, like: Tensor) -> list[Tensor | None]:
        """Query, key and score dropout masks, (B, 1, H) each, one per sequence."""
        if not self.training or self.memory_dropout == 0.0:
            return [None, None, None]
        keep = 1.0 - self.memory_dropout
        return [
            like.new_empty(batch_size, 1, self.hidden_size).bernoulli_(keep) / keep
            for _ in range(3)
        ]

    def forward(
        self, x: Tensor, mask: Tensor, num_slots: int, state: OrderedMemoryState | None = None
    ) -> tuple[Tensor, Tensor, OrderedMemoryState]:
        """x (B, T, D), mask (B, T) bool -> hidden (B, T, H) (zeros at padding),
        attention (B, T, N) (zeros at padding and first tokens), final state."""
        batch_size, steps, _ = x.shape
        hidden_size = self.hidden_size
        if state is None:
            state = self.initial_state(batch_size, num_slots, x)
        elif state.num_slots != num_slots:
            raise ValueError(
                f"the carried state has {state.num_slots} slots but this pass uses {num_slots} "
                "(train and test slot counts differ): start from state=None"
            )

        # Longest rows first: with left or right padding, the rows reading a token are a prefix.
        lengths = mask.sum(1)  # (B,)
        order = torch.argsort(lengths, descending=True, stable=True)
        inverse = torch.empty_like(order)
        inverse[order] = torch.arange(batch_size, device=order.device)
        x, mask, state = x[order], mask[order], state.index_select(order)
        schedule = _Schedule(mask, state.tokens_seen, num_slots)

        projected = self.layer_norm(self.input_projection(x))  # (B, T, H), eq. (1)
        query_mask, key_mask, score_mask = self._attention_masks(batch_size, x)
        queries = projected if query_mask is None else projected * query_mask
        queries = self.query_norm(self.query_projection(queries))  # (B, T, H)
        cell_masks = self.cell.sample_dropout_masks(batch_size, x)
        left_mask = right_mask = hidden_mask = None
        if cell_masks is not None:
            left_mask, right_mask = cell_masks[0].split(hidden_size, dim=-1)  # (B, H) each
            hidden_mask = cell_masks[1]  # (B, 4H)
        weight_left, weight_right, first_bias = self.cell.split_first_layer()
        weight_left_t = weight_left.t().contiguous()  # (H, 4H); strided weights slow MKL down

        # Indexing a tensor step by step makes autograd write a full-size zero gradient per index
        # (REFERENCE.md, ON-LSTM "Speed"): split once with unbind instead.
        projected_steps, query_steps = projected.unbind(1), queries.unbind(1)  # T x (B, H)
        pointer, memory, candidate = state.cumulative_pointer, state.memory, state.candidate
        outputs, attentions = [], []
        for t in range(steps):
            active = schedule.active[t]  # rows [0, active) read a token at step t
            if active == 0:
                outputs.append(x.new_zeros(batch_size, hidden_size))
                attentions.append(x.new_zeros(batch_size, num_slots))
                continue
            x_t = projected_steps[t][:active]  # (n, H)
            window = schedule.window[t]  # slots [N - window, N) can be pointed at
            low = num_slots - window
            if window == 0:  # every active row is at its first token: cp = 0, rcp = 1
                new_pointer = x.new_zeros(active, num_slots)
                new_memory = candidate[:active]
                new_candidate = x_t.unsqueeze(1).expand(active, num_slots, hidden_size)
                attention = x.new_zeros(active, num_slots)
                output = x_t
            else:
                previous = candidate[:active, low:]  # (n, w, H) M_hat_{t-1}
                keys = previous if key_mask is None else previous * key_mask[:active]
                keys = self.key_norm(self.key_projection(keys))  # (n, w, H)
                features = F.relu(query_steps[t][:active].unsqueeze(1) + keys)  # (n, w, H)
                if score_mask is not None:
                    features = features * score_mask[:active]
                scores = self.score(features).squeeze(-1) / math.sqrt(hidden_size)  # (n, w)
                allowed = torch.cat(  # cp_{t-1}^{i+1}, with cp^N = 1 (eq. 10)
                    [pointer[:active, low + 1 :], x.new_ones(active, 1)], dim=1
                )
                attention = masked_attention(scores, allowed)  # (n, w) p_t
                cumulative = attention.cumsum(dim=1)  # cp_t, eq. (3)
                # rcp_t = 1 - sum_{j < i} p^j (eq. 4); written so that it is exactly 1 below p
                reverse_cumulative = 1.0 - cumulative + attention
                if schedule.has_first[t]:
                    first = schedule.first[:active, t, None]  # (n, 1)
                    attention = attention.masked_fill(first, 0.0)
                    cumulative = cumulative.masked_fill(first, 0.0)
                    reverse_cumulative = reverse_cumulative.masked_fill(first, 1.0)
                # eq. (5); slots below the window are never read before being overwritten
                erase = reverse_cumulative.unsqueeze(-1)  # (n, w, 1)
                memory_window = memory[:active, low:] * (1.0 - erase) + previous * erase
                # eqs. (6)-(7) slot by slot; the cell's first layer on M_t for all slots at once
                right = (
                    memory_window
                    if right_mask is None
                    else memory_window * right_mask[:active, None]
                )
                # slot-major, so that each slot's rows are contiguous for addmm
                right_projected = F.linear(right.transpose(0, 1), weight_right, first_bias)
                right_slots = right_projected.unbind(0)  # w x (n, 4H)
                memory_slots = memory_window.unbind(1)  # w x (n, H)
                write_slots = cumulative.unsqueeze(-1).unbind(1)  # w x (n, 1)
                step_hidden_mask = None if hidden_mask is None else hidden_mask[:active]
                step_left_mask = None if left_mask is None else left_mask[:active]
                below = x_t  # M_hat_t^{i-1}, starting from x_t
                slots = []
                for k in range(window):
                    left = below if step_left_mask is None else below * step_left_mask
                    first_layer_out = torch.addmm(right_slots[k], left, weight_left_t)
                    composed = self.cell.compose(
                        below, memory_slots[k], first_layer_out, step_hidden_mask
                    )  # (n, H)
                    below = torch.lerp(x_t, composed, write_slots[k])  # x_t where cp = 0
                    slots.append(below)
                output = below
                zeros = x.new_zeros(active, low)
                new_pointer = torch.cat([zeros, cumulative], dim=1)  # (n, N)
                new_memory = torch.cat([memory[:active, :low], memory_window], dim=1)
                new_candidate = torch.cat(
                    [x_t.unsqueeze(1).expand(active, low, hidden_size), torch.stack(slots, 1)],
                    dim=1,
                )  # (n, N, H)
                attention = torch.cat([zeros, attention], dim=1)  # (n, N)
            if active < batch_size:  # rows not reading a token keep their state
                new_pointer = torch.cat([new_pointer, pointer[active:]])
                new_memory = torch.cat([new_memory, memory[active:]])
                new_candidate = torch.cat([new_candidate, candidate[active:]])
                output = F.pad(output, (0, 0, 0, batch_size - active))
                attention = F.pad(attention, (0, 0, 0, batch_size - active))
            pointer, memory, candidate = new_pointer, new_memory, new_candidate
            outputs.append(output)
            attentions.append(attention)

        hidden = torch.stack(outputs, dim=1) if steps else x.new_zeros(batch_size, 0, hidden_size)
        attention = (
            torch.stack(attentions, dim=1) if steps else x.new_zeros(batch_size, 0, num_slots)
        )
        final = OrderedMemoryState(pointer, memory, candidate, state.tokens_seen + lengths[order])
        return hidden[inverse], attention[inverse], final.index_select(inverse)


class _Schedule:
    """What each step of a sorted batch computes, worked out once on the CPU (no per-step sync)."""

    def __init__(self, mask: Tensor, tokens_seen: Tensor, num_slots: int) -> None:
        mask_cpu = mask.cpu()
        batch_size = mask_cpu.size(0)
        active = mask_cpu.sum(0)  # (T,)
        prefix = torch.arange(batch_size).unsqueeze(1) < active.unsqueeze(0)  # (B, T)
        if not torch.equal(prefix, mask_cpu):
            raise ValueError(
                "OrderedMemoryEncoder: each mask row must be one run of real tokens, padded on "
                "the left or on the right (True = real token); got a row with a gap in it"
            )
        seen_before = tokens_seen.cpu().unsqueeze(1) + mask_cpu.long().cumsum(1) - mask_cpu.long()
        first = mask_cpu & (seen_before == 0)  # (B, T) the row's first token ever
        window = (seen_before * mask_cpu).amax(0).clamp(max=num_slots) if batch_size else active
        self.active: list[int] = active.tolist()
        self.window: list[int] = window.tolist()
        self.has_first: list[bool] = first.any(0).tolist()
        self.first = first.to(mask.device)


class OrderedMemoryEncoder(Encoder):
    """Ordered Memory as a sequence encoder (see the module docstring).

    ``hidden`` (B, T, H) holds each step's output (the last slot of the candidate memory; zeros at
    padding), ``pooled`` (B, H) the output after a row's last real token, and
    ``extras["attention"]`` (B, T, N) the pointer distributions p_t used for tree induction
    (zeros at a row's first token and at padding). Bidirectional: a second Ordered Memory with its
    own parameters reads each row right to left; outputs are concatenated (2H) and its attention is
    ``extras["attention_backward"]`` (in reading order, i.e. over reversed positions).
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        dropout: float = 0.0,
        output_size: int | None = None,
        memory_slots: int = 12,
        test_memory_slots: int | None = None,
        memory_dropout: float = 0.0,
        input_dropout: float = 0.0,
        output_dropout: float = 0.0,
        locked_input_dropout: bool = False,
        bidirectional: bool = False,
        padding_side: Literal["right", "left"] = "right",
    ) -> None:
        super().__init__()
        if num_layers != 1:
            raise ValueError(
                f"num_layers={num_layers}: Ordered Memory has one layer (depth comes from its "
                "memory slots); set num_layers=1 and use memory_slots for capacity"
            )
        for name, value in (
            ("dropout", dropout), ("memory_dropout", memory_dropout),
            ("input_dropout", input_dropout), ("output_dropout", output_dropout),
        ):  # fmt: skip
            check_dropout(name, value)
        if memory_slots < 1 or (test_memory_slots is not None and test_memory_slots < 1):
            raise ValueError(
                f"memory_slots={memory_slots}, test_memory_slots={test_memory_slots}: "
                "slot counts must be positive integers (the paper uses 12-24)"
            )
        if padding_side not in ("right", "left"):
            raise ValueError(f"padding_side={padding_side!r} must be 'right' or 'left'")
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.memory_slots = memory_slots
        self.test_memory_slots = test_memory_slots or memory_slots
        self.padding_side = padding_side
        self.input_dropout = input_dropout
        self.locked_input_dropout = locked_input_dropout
        self.output_dropout = output_dropout
        self.bidirectional = bidirectional
        self.forward_memory = OrderedMemoryRecurrence(
            input_size, hidden_size, dropout, memory_dropout
        )
        self.backward_memory = (
            OrderedMemoryRecurrence(input_size, hidden_size, dropout, memory_dropout)
            if bidirectional
            else None
        )
        natural_size = hidden_size * (2 if bidirectional else 1)
        # Not in the paper: a linear map for tasks that need another output width.
        self.output_projection = (
            nn.Linear(natural_size, output_size)
            if output_size is not None and output_size != natural_size
            else None
        )
        self.output_size = output_size or natural_size

    @property
    def num_slots(self) -> int:
        """Slots used by the next forward pass (training or test count)."""
        return self.memory_slots if self.training else self.test_memory_slots

    def _check_mask(self, mask: Tensor) -> None:
        """A left-padded batch given as right-padded (or the reverse) is a data bug: say so."""
        lengths = mask.sum(1, keepdim=True)  # (B, 1)
        positions = torch.arange(mask.size(1), device=mask.device).unsqueeze(0)  # (1, T)
        if self.padding_side == "right":
            expected = positions < lengths
        else:
            expected = positions >= mask.size(1) - lengths
        if not torch.equal(expected, mask):
            raise ValueError(
                f"OrderedMemoryEncoder(padding_side={self.padding_side!r}) got a mask that is not "
                f"{self.padding_side}-padded; set model.padding_side to match the DataModule"
            )

    def _drop_input(self, x: Tensor) -> Tensor:
        if not self.training or self.input_dropout == 0.0:
            return x
        if not self.locked_input_dropout:
            return F.dropout(x, self.input_dropout, training=True)
        keep = 1.0 - self.input_dropout
        return x * (x.new_empty(x.size(0), 1, x.size(2)).bernoulli_(keep) / keep)

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None = None,
        state: OrderedMemoryState | None = None,
        **kwargs,
    ) -> EncoderOutput:
        if x.dim() != 3 or x.size(-1) != self.input_size:
            raise ValueError(
                f"OrderedMemoryEncoder(input_size={self.input_size}) needs x of shape "
                f"(B, T, {self.input_size}); got {tuple(x.shape)}"
            )
        batch_size, steps, _ = x.shape
        if mask is None:
            mask = torch.ones(batch_size, steps, dtype=torch.bool, device=x.device)
        else:
            mask = mask.to(torch.bool)
            self._check_mask(mask)
        if state is not None and self.bidirectional:
            raise ValueError("a bidirectional Ordered Memory cannot carry state between segments")
        x = self._drop_input(x)
        num_slots = self.num_slots
        hidden, attention, final = self.forward_memory(x, mask, num_slots, state)
        pooled = final.candidate[:, -1]  # (B, H) M_hat^{N-1} after the last real token
        extras = {"attention": attention}
        if self.backward_memory is not None:
            back_hidden, back_attention, back_final = self.backward_memory(
                x.flip(1), mask.flip(1), num_slots
            )
            hidden = torch.cat([hidden, back_hidden.flip(1)], dim=-1)  # (B, T, 2H)
            pooled = torch.cat([pooled, back_final.candidate[:, -1]], dim=-1)  # (B, 2H)
            extras["attention_backward"] = back_attention
        if self.output_projection is not None:
            hidden, pooled = self.output_projection(hidden), self.output_projection(pooled)
        if self.training and self.output_dropout > 0.0:
            hidden = F.dropout(hidden, self.output_dropout, training=True)
            pooled = F.dropout(pooled, self.output_dropout, training=True)
        return EncoderOutput(
            hidden=hidden, pooled=pooled, state=final, layer_outputs=[hidden], extras=extras
        )
