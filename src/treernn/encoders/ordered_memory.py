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
padding give the same results. The chain of eqs. (6)-(7) over a step's slots, which must run slot
after slot, is one autograd node (:func:`slot_chain`, ``fused=True``, the default) with a
hand-written backward pass: the forward loop writes each slot's intermediates into preallocated
buffers, the backward loop runs the slots in reverse with small cache-resident operations, and the
weight gradients of W_left, W2, b2 and the LayerNorm are computed once per step over all slots'
rows (one matrix product each) instead of once per slot. ``fused=False`` keeps the plain autograd
loop as a reference; both compute the same function (tests compare them in float64).

Precision: fp32 by default (exact). Deviation, only when asked for: under
``torch.autocast("cpu", dtype=torch.bfloat16)`` (Lightning's ``precision="bf16-mixed"``) the fused
path runs the recurrence's matrix products (input, query, key and cell projections) in bf16, with
the weights cast once per forward, and keeps the attention softmax, gates, LayerNorms, memory state
and outputs in fp32 (the outputs are fp32). As with autocast's linear layers, the cell's ReLU layer
and the right half of its first layer are bf16, and so is the cell's hidden dropout mask (1 / keep
rounded to bf16). The reference path ignores autocast (fp32).

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

from treernn.encoders.base import Encoder, EncoderOutput, TreeSignal, check_dropout
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
        self,
        input_size: int,
        hidden_size: int,
        dropout: float = 0.0,
        memory_dropout: float = 0.0,
        fused: bool = True,
    ) -> None:
        super().__init__()
        self.hidden_size = hidden_size
        self.fused = fused
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
        attention (B, T, N) (zeros at padding and first tokens), final state.

        Under ``torch.autocast`` (bf16-mixed) the fused path multiplies matrices in the autocast
        dtype and does everything else in fp32; the reference path (``fused=False``) ignores
        autocast and runs in fp32."""
        low = _autocast_dtype(x.device) if self.fused else None
        with torch.autocast(x.device.type, enabled=False):
            if x.dtype in (torch.float16, torch.bfloat16):
                x = x.float()
            return self._forward(x, mask, num_slots, state, low)

    def _forward(
        self,
        x: Tensor,
        mask: Tensor,
        num_slots: int,
        state: OrderedMemoryState | None,
        gemm_dtype: torch.dtype | None,
    ) -> tuple[Tensor, Tensor, OrderedMemoryState]:
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

        # bf16-mixed: every matrix the recurrence multiplies by, cast once per forward
        cell = self.cell
        weight_left, weight_right, first_bias = cell.split_first_layer()
        inputs, query, key = self.input_projection, self.query_projection, self.key_projection
        input_low, query_low, key_low, right_low = (
            None if gemm_dtype is None else weight.to(gemm_dtype)
            for weight in (inputs.weight, query.weight, key.weight, weight_right)
        )
        projected = self.layer_norm(_linear(x, inputs.weight, inputs.bias, input_low))  # eq. (1)
        query_mask, key_mask, score_mask = self._attention_masks(batch_size, x)
        queries = projected if query_mask is None else projected * query_mask
        queries = self.query_norm(_linear(queries, query.weight, query.bias, query_low))  # (B,T,H)
        cell_masks = self.cell.sample_dropout_masks(batch_size, x)
        left_mask = right_mask = hidden_mask = None
        if cell_masks is not None:
            left_mask, right_mask = cell_masks[0].split(hidden_size, dim=-1)  # (B, H) each
            hidden_mask = cell_masks[1]  # (B, 4H)
        norm = self.layer_norm
        if self.fused:
            operands = slot_chain_operands(
                weight_left, cell.second_layer.weight, cell.second_layer.bias,
                gemm_dtype or x.dtype,
            )  # fmt: skip
        else:
            weight_left_t = weight_left.t().contiguous()  # (H, 4H); strided weights slow MKL

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
                keys = self.key_norm(_linear(keys, key.weight, key.bias, key_low))  # (n, w, H)
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
                right_projected = _linear(  # bf16 under bf16-mixed, like autocast's
                    right.transpose(0, 1), weight_right, first_bias, right_low, True
                )  # (w, n, 4H)
                step_hidden_mask = None if hidden_mask is None else hidden_mask[:active]
                step_left_mask = None if left_mask is None else left_mask[:active]
                if self.fused:
                    slots = slot_chain(
                        x_t, memory_window, right_projected, cumulative, weight_left,
                        cell.second_layer.weight, cell.second_layer.bias, norm.weight,
                        norm.bias, step_left_mask, step_hidden_mask, norm.eps, operands,
                    )  # fmt: skip
                else:
                    slots = self._slot_loop(
                        x_t, memory_window, right_projected, cumulative, weight_left_t,
                        step_left_mask, step_hidden_mask,
                    )  # fmt: skip
                output = slots[:, -1]  # slots (n, w, H); the output is the last, (n, H)
                if low == 0:  # the window is the whole memory: nothing to copy around it
                    new_pointer, new_memory, new_candidate = cumulative, memory_window, slots
                else:
                    zeros = x.new_zeros(active, low)
                    new_pointer = torch.cat([zeros, cumulative], dim=1)  # (n, N)
                    new_memory = torch.cat([memory[:active, :low], memory_window], dim=1)
                    new_candidate = torch.cat(
                        [x_t.unsqueeze(1).expand(active, low, hidden_size), slots],
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

    def _slot_loop(
        self,
        x_t: Tensor,
        memory_window: Tensor,
        right_projected: Tensor,
        cumulative: Tensor,
        weight_left_t: Tensor,
        left_mask: Tensor | None,
        hidden_mask: Tensor | None,
    ) -> Tensor:
        """The reference path of :func:`slot_chain`: eqs. (6)-(7) slot by slot with autograd."""
        right_slots = right_projected.unbind(0)  # w x (n, 4H)
        memory_slots = memory_window.unbind(1)  # w x (n, H)
        write_slots = cumulative.unsqueeze(-1).unbind(1)  # w x (n, 1)
        below = x_t  # M_hat_t^{i-1}, starting from x_t
        slots = []
        for k in range(len(right_slots)):
            left = below if left_mask is None else below * left_mask
            first_layer_out = torch.addmm(right_slots[k], left, weight_left_t)
            composed = self.cell.compose(below, memory_slots[k], first_layer_out, hidden_mask)
            below = torch.lerp(x_t, composed, write_slots[k])  # x_t where cp = 0
            slots.append(below)
        return torch.stack(slots, 1)  # (n, w, H)


# ----------------------------------------------------------------------------- fused slot chain
def _autocast_dtype(device: torch.device) -> torch.dtype | None:
    """The lower-precision dtype the caller asked for with ``torch.autocast``, else None."""
    if device.type != "cpu" or not torch.is_autocast_enabled("cpu"):
        return None
    dtype = torch.get_autocast_dtype("cpu")
    return dtype if dtype != torch.float32 else None


def _linear(
    x: Tensor, weight: Tensor, bias: Tensor | None, low: Tensor | None = None, keep_low=False
) -> Tensor:
    """``F.linear`` in the input's precision, or with ``low`` (``weight`` cast to bf16 once per
    forward): the product in bf16 and, unless ``keep_low``, the bias added in fp32 (fp32 out)."""
    if low is None:
        return F.linear(x, weight, bias)
    if keep_low:
        return F.linear(x.to(low.dtype), low, None if bias is None else bias.to(low.dtype))
    out = F.linear(x.to(low.dtype), low).float()
    return out if bias is None else out + bias


def slot_chain_operands(
    weight_left: Tensor, weight_second: Tensor, bias_second: Tensor, dtype: torch.dtype
) -> tuple:
    """What :func:`slot_chain` multiplies by, detached and cast to ``dtype`` once: W_left^T, W2^T
    and b2 for the forward, W2 and W_left for the backward. Their dtype sets the precision of the
    matrix products."""
    weight_left, weight_second = weight_left.detach(), weight_second.detach()
    return tuple(
        w.to(dtype).contiguous()
        for w in (weight_left.t(), weight_second.t(), bias_second.detach(), weight_second,
                  weight_left)
    )  # fmt: skip


def slot_chain(
    x_t: Tensor,
    memory: Tensor,
    right_projected: Tensor,
    cumulative: Tensor,
    weight_left: Tensor,
    weight_second: Tensor,
    bias_second: Tensor,
    norm_weight: Tensor,
    norm_bias: Tensor,
    left_mask: Tensor | None = None,
    hidden_mask: Tensor | None = None,
    eps: float = 1e-5,
    operands: tuple | None = None,
) -> Tensor:
    """Eqs. (6)-(7) for the slots k = 0..w-1 of one step, all candidates at once.

    x_t (n, H); ``memory`` (n, w, H) the window M_t; ``right_projected`` (w, n, 4H) the right half
    of the cell's first layer on the (dropped-out) memory, b1 included; ``cumulative`` (n, w) cp_t;
    ``weight_left`` (4H, H) the left half of W1; ``weight_second`` (4H, 4H) and ``bias_second`` W2,
    b2; ``norm_weight``/``norm_bias`` the shared LayerNorm; ``left_mask`` (n, H) and
    ``hidden_mask`` (n, 4H) the cell's dropout masks (non-negative), or None. Returns the
    candidates M_hat_t^k, (n, w, H). ``operands`` (:func:`slot_chain_operands`, made once per
    forward) set the precision of the matrix products: with bf16 operands the products, the ReLU
    layer and ``right_projected`` are bf16 (as autocast's linear layers are); the gates, the
    LayerNorm, the state and the output stay in the precision of ``x_t``.

    The backward pass is written by hand (:class:`_SlotChain`): one loop over the slots in
    reverse with small, cache-resident operations, then the weight gradients as one matrix
    product over all w * n rows.
    """
    if operands is None:
        operands = slot_chain_operands(weight_left, weight_second, bias_second, x_t.dtype)
    inputs = (x_t, memory, right_projected, cumulative, weight_left, weight_second, bias_second,
              norm_weight, norm_bias)  # fmt: skip
    if torch.is_grad_enabled() and any(t.requires_grad for t in inputs):
        return _SlotChain.apply(*inputs, left_mask, hidden_mask, eps, operands)
    return _slot_chain_forward(
        x_t, memory, right_projected, cumulative, norm_weight, norm_bias, left_mask, hidden_mask,
        eps, operands, save=False,
    )[0]  # fmt: skip


def _slot_chain_forward(
    x_t, memory, right_projected, cumulative, norm_weight, norm_bias, left_mask, hidden_mask, eps,
    operands, save,
):  # fmt: skip
    """The forward loop; returns the candidates (n, w, H) and, if ``save``, what the backward
    pass needs."""
    left_t, second_t, second_bias = operands[:3]
    low = left_t.dtype
    n, w, size = memory.shape
    right = right_projected.to(low)
    hidden_scale = None if hidden_mask is None else hidden_mask.to(low)
    out = x_t.new_empty(n, w, size)
    # per slot: the cell's left input (after dropout), ReLU layer (after dropout),
    # [sigmoid(v, h, c), u] and the LayerNorm's input; one slot's worth when not saving.
    # Per-slot views are made once (unbind), as Python-side indexing costs as much as small ops.
    slots = w if save else 1
    lefts = x_t.new_empty(slots, n, size, dtype=low)
    hiddens = x_t.new_empty(slots, n, 4 * size, dtype=low)
    seconds = x_t.new_empty(slots, n, 4 * size)
    mixeds = x_t.new_empty(slots, n, size)
    views = [
        t.unbind(0)
        for t in (lefts, hiddens, seconds, mixeds, seconds[..., : 3 * size],
                  seconds[..., :size], seconds[..., size : 2 * size],
                  seconds[..., 2 * size : 3 * size], seconds[..., 3 * size :])
    ]  # fmt: skip
    rights, memories = right.unbind(0), memory.unbind(1)
    writes, outs = cumulative.unsqueeze(-1).unbind(1), out.unbind(1)
    normed, means, rstds = [], [], []
    same = low == x_t.dtype
    below = x_t
    for k in range(w):
        j = k if save else 0
        left, hidden, second, mixed, gates, vertical, horizontal, candidate_gate, candidate = (
            v[j] for v in views
        )
        if left_mask is None:
            left.copy_(below)
        else:
            torch.mul(below, left_mask, out=left)
        torch.addmm(rights[k], left, left_t, out=hidden)
        if hidden_scale is not None:  # relu(a) * m == relu(a * m) for m >= 0
            hidden.mul_(hidden_scale)
        hidden.relu_()
        if same:
            torch.addmm(second_bias, hidden, second_t, out=second)
        else:
            second.copy_(torch.addmm(second_bias, hidden, second_t))
        gates.sigmoid_()
        torch.mul(vertical, below, out=mixed)
        mixed.addcmul_(horizontal, memories[k]).addcmul_(candidate_gate, candidate)
        composed, mean, rstd = torch.ops.aten.native_layer_norm(
            mixed, [size], norm_weight, norm_bias, eps
        )
        below = torch.lerp(x_t, composed, writes[k], out=outs[k])
        if save:
            normed.append(composed)
            means.append(mean)
            rstds.append(rstd)
    if not save:
        return out, None
    saved = (lefts, hiddens, seconds, mixeds, torch.stack(normed), torch.stack(means),
             torch.stack(rstds), hidden_scale)  # fmt: skip
    return out, saved


class _SlotChain(torch.autograd.Function):
    """:func:`slot_chain` with a hand-written backward pass."""

    @staticmethod
    def forward(
        ctx, x_t, memory, right_projected, cumulative, weight_left, weight_second, bias_second,
        norm_weight, norm_bias, left_mask, hidden_mask, eps, operands,
    ):  # fmt: skip
        out, saved = _slot_chain_forward(
            x_t, memory, right_projected, cumulative, norm_weight, norm_bias, left_mask,
            hidden_mask, eps, operands, save=True,
        )  # fmt: skip
        *saved, hidden_scale = saved
        ctx.save_for_backward(x_t, memory, cumulative, norm_weight, out, *saved)
        ctx.constants = (left_mask, hidden_scale, operands, right_projected.dtype)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        with torch.autocast("cpu", enabled=False):
            return _SlotChain._backward(ctx, grad_out)

    @staticmethod
    def _backward(ctx, grad_out):
        x_t, memory, cumulative, norm_weight, out, *saved = ctx.saved_tensors
        lefts, hiddens, seconds, mixeds, normed, means, rstds = saved
        left_mask, hidden_scale, operands, right_dtype = ctx.constants
        second_w, left_w = operands[3], operands[4]
        low = second_w.dtype
        same = low == x_t.dtype
        n, w, size = memory.shape
        grad_below = x_t.new_empty(w, n, size)  # d loss / d M_hat^k (all paths)
        grad_normed = x_t.new_empty(w, n, size)  # d loss / d LN output
        grad_second = x_t.new_empty(w, n, 4 * size, dtype=low)  # d / d [v, h, c, u]
        grad_first = x_t.new_empty(w, n, 4 * size, dtype=low)  # d / d (W1 [l; r] + b1)
        # d / d [v, h, c, u], written in the state's precision (then cast if need be)
        target = grad_second if same else x_t.new_empty(1, n, 4 * size)
        d_seconds = [
            t.unbind(0)
            for t in (target, target[..., :size], target[..., size : 2 * size],
                      target[..., 2 * size : 3 * size], target[..., 3 * size :],
                      target[..., : 3 * size])
        ]  # fmt: skip
        gates = [
            t.unbind(0)
            for t in (seconds[..., : 3 * size], seconds[..., :size],
                      seconds[..., 2 * size : 3 * size], seconds[..., 3 * size :])
        ]  # fmt: skip
        grad_belows, grad_normeds = grad_below.unbind(0), grad_normed.unbind(0)
        grad_seconds, grad_firsts = grad_second.unbind(0), grad_first.unbind(0)
        grad_outs, memories = grad_out.unbind(1), memory.unbind(1)
        writes, belows = cumulative.unsqueeze(-1).unbind(1), (x_t, *out.unbind(1))
        mixed_k, mean_k, rstd_k = mixeds.unbind(0), means.unbind(0), rstds.unbind(0)
        hidden_k = hiddens.unbind(0)
        grad_mixed = []
        carry = None
        for k in range(w - 1, -1, -1):
            if carry is None:
                grad_belows[k].copy_(grad_outs[k])
            else:
                torch.add(grad_outs[k], carry, out=grad_belows[k])
            torch.mul(grad_belows[k], writes[k], out=grad_normeds[k])  # lerp's o cp
            d_mixed = torch.ops.aten.native_layer_norm_backward(
                grad_normeds[k], mixed_k[k], [size], mean_k[k], rstd_k[k], norm_weight, None,
                [True, False, False],
            )[0]  # fmt: skip
            grad_mixed.append(d_mixed)
            j = k if same else 0
            d_second, d_vertical, d_horizontal, d_candidate_gate, d_candidate, d_gates = (
                v[j] for v in d_seconds
            )
            gate, vertical, candidate_gate, candidate = (v[k] for v in gates)
            torch.mul(d_mixed, belows[k], out=d_vertical)
            torch.mul(d_mixed, memories[k], out=d_horizontal)
            torch.mul(d_mixed, candidate, out=d_candidate_gate)
            torch.ops.aten.sigmoid_backward.grad_input(d_gates, gate, grad_input=d_gates)
            torch.mul(d_mixed, candidate_gate, out=d_candidate)
            if not same:
                grad_seconds[k].copy_(d_second)
            d_hidden = torch.mm(grad_seconds[k], second_w)  # (n, 4H)
            torch.ops.aten.threshold_backward.grad_input(
                d_hidden, hidden_k[k], 0, grad_input=grad_firsts[k]
            )
            if hidden_scale is not None:
                grad_firsts[k].mul_(hidden_scale)
            d_left = torch.mm(grad_firsts[k], left_w)  # (n, H)
            carry = d_mixed * vertical
            carry = carry.addcmul_(d_left, left_mask) if left_mask is not None else carry + d_left
        grad_mixed = torch.stack(grad_mixed[::-1])  # (w, n, H)
        cumulative_t = cumulative.t().unsqueeze(-1)  # (w, n, 1)
        needs = ctx.needs_input_grad
        grad_x = None
        if needs[0]:  # lerp: x_t (1 - cp) + o cp, and the first slot's left input
            grad_x = (grad_below * (1.0 - cumulative_t)).sum(0).add_(carry)
        grad_memory = None
        if needs[1]:
            grad_memory = (grad_mixed * seconds[:, :, size : 2 * size]).transpose(0, 1)
        grad_right = grad_first.to(right_dtype) if needs[2] else None
        grad_cumulative = None
        if needs[3]:
            grad_cumulative = (grad_below * (normed - x_t)).sum(-1).t()
        flat_second = grad_second.view(w * n, 4 * size)
        grad_weight_left = grad_weight_second = grad_bias_second = None
        if needs[4]:
            flat_first = grad_first.view(w * n, 4 * size)
            grad_weight_left = (flat_first.t() @ lefts.view(w * n, size)).to(x_t.dtype)
        if needs[5]:
            grad_weight_second = (flat_second.t() @ hiddens.view(w * n, -1)).to(x_t.dtype)
        if needs[6]:
            ones = flat_second.new_ones(1, w * n)  # a matrix product sums faster than sum(0)
            grad_bias_second = (ones @ flat_second).to(x_t.dtype).view(-1)
        grad_norm_weight = grad_norm_bias = None
        if needs[7]:
            grad_norm_weight = (grad_normed * (mixeds - means) * rstds).sum((0, 1))
        if needs[8]:
            grad_norm_bias = grad_normed.sum((0, 1))
        return (grad_x, grad_memory, grad_right, grad_cumulative, grad_weight_left,
                grad_weight_second, grad_bias_second, grad_norm_weight, grad_norm_bias,
                None, None, None, None)  # fmt: skip


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
    ``fused`` (default True) selects the hand-written backward pass of the slot chain and bf16
    matrix products under autocast; False runs the plain autograd reference path.
    """

    tree_signal_kind = "attention"  # trees by Algorithm 2

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
        fused: bool = True,
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
            input_size, hidden_size, dropout, memory_dropout, fused
        )
        self.backward_memory = (
            OrderedMemoryRecurrence(input_size, hidden_size, dropout, memory_dropout, fused)
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
        extras: dict[str, Tensor] = {}
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
            hidden=hidden,
            pooled=pooled,
            state=final,
            layer_outputs=[hidden],
            tree_signal=TreeSignal("attention", attention.unsqueeze(0)),  # (1, B, T, N)
            extras=extras,
        )
