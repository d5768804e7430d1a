"""The optimised Ordered Memory recurrence (``OrderedMemoryEncoder(fused=True)``, the default).

Read :mod:`treernn.encoders.ordered_memory` first: it has the paper's equations and the readable
Algorithm 1 (:meth:`~treernn.encoders.ordered_memory.OrderedMemoryRecurrence.reference_forward`).
This module computes the same function (tests compare the two in float64) faster:

* Only the slots that can be pointed at are computed. At the k-th token of a row at most
  min(N, k - 1) slots can have a non-zero pointer (the mask of eq. 10 admits one new slot per
  step), so a step works on the window of the last ``window`` slots; the slots below it hold x_t
  exactly. (Their *memory* M_t is left as it was, where eq. (5) would copy M_hat_{t-1} into it:
  those slots are never read before the window reaches them and overwrites them, so outputs,
  attention and candidates are the same; only ``state.memory`` of never-attended slots differs.)
  The window also leaves out the slots that no row can attend: the mask of eq. (10) is
  cp_{t-1}^{i+1}, and where it is below the authors' threshold (1e-5) for every row, p_t^i = 0
  exactly, hence cp_t^i = 0 and M_hat_t^i = x_t with no composition. Sharp attention leaves many
  such slots (in the ListOps setting, about 15% of the slot compositions at initialisation).
* Rows are processed longest first, so the rows still reading tokens (right padding) or already
  reading them (left padding) are a prefix of the batch and padded rows cost nothing; a padded
  step never changes a row's state, so left and right padding give the same results (with
  ``padding_mode=authors_left`` a shorter row's first token is scheduled as an ordinary step).
* The per-slot products of the chain run on the GEMM backend of :mod:`treernn.kernels.gemm`
  (``gemm_backend``: MKL's or oneDNN's packed GEMM on x86 CPUs in fp32, whichever is faster here,
  the weights packed once per forward; plain ``addmm`` / ``mm`` on aten otherwise).
* The cell's first layer is split into its ``left`` and ``right`` halves; the ``right`` half,
  which reads the memory, runs for all slots of a step as one matrix product.
* The chain of eqs. (6)-(7) over a step's slots, which must run slot after slot, is one autograd
  node (:func:`slot_chain`) with a hand-written backward pass: the forward loop writes each slot's
  intermediates into preallocated buffers, the backward loop runs the slots in reverse with
  small, cache-resident operations, and the weight gradients of W_left, W2, b2 and the LayerNorm
  are computed once per step over all slots' rows (one matrix product each) instead of once per
  slot. :func:`slot_chain_autograd` is the same chain with autograd's backward, the check on it.
* Between the chain's matrix products, the elementwise work of a slot (the ReLU layer, the gates,
  the mix, the LayerNorm and eq. 7 forward; their gradients backward) is one pass over each row
  in a compiled kernel (``csrc/om_chain.cpp``, built on first use by
  :mod:`treernn.kernels.cpp_ext`) instead of about ten torch ops forward and fifteen backward;
  float32 and float64 on the CPU. The torch-ops path stays for CUDA, bf16 products, machines
  without a compiler and ``TREERNN_CPP_EXT=0``; the tests run both.
* Dropout masks are sampled once per sequence (after sorting the rows), see the model file.

Precision: fp32 by default (exact). Deviation, only when asked for: under
``torch.autocast("cpu", dtype=torch.bfloat16)`` (Lightning's ``precision="bf16-mixed"``) the
recurrence's matrix products (input, query, key and cell projections) run in bf16, with the
weights cast once per forward, and the attention softmax, gates, LayerNorms, memory state and
outputs stay in fp32 (the outputs are fp32). As with autocast's linear layers, the cell's ReLU
layer and the right half of its first layer are bf16, and so is the cell's hidden dropout mask
(1 / keep rounded to bf16). Where bf16 products are not faster than fp32 ones on the machine (a
probe at the cell's shape, :func:`treernn.kernels.gemm.product_dtype`: CPUs without bf16
instructions, where they are 50-100x slower, and CPUs whose bf16 instructions are no faster than
their fp32 FMA units) the recurrence keeps fp32 products under bf16-mixed (logged once): the
result is the fp32 one.

Names: ``gemm_dtype`` is the dtype of the matrix products (bf16 under bf16-mixed, else the
state's); ``*_gemm`` tensors are weights cast to it; ``window`` is the number of slots a step
works on and ``window_start = N - window`` the first of them; ``active`` the number of rows that
read a token at a step; in :func:`slot_chain`, ``rows`` x ``width`` are those two counts.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor

from treernn.kernels import gemm
from treernn.kernels.cpp_ext import load_extension

if TYPE_CHECKING:  # the model file imports this module; no import cycle at run time
    from treernn.encoders.ordered_memory import OrderedMemoryRecurrence, OrderedMemoryState


def fused_ordered_memory(
    recurrence: OrderedMemoryRecurrence,
    x: Tensor,
    mask: Tensor,
    num_slots: int,
    state: OrderedMemoryState | None,
    authors_padding: bool = False,
) -> tuple[Tensor, Tensor, OrderedMemoryState]:
    """What :meth:`OrderedMemoryRecurrence.forward` returns, computed the fast way: hidden
    (B, T, H), attention (B, T, N), final state. Under ``torch.autocast`` with bf16
    (bf16-mixed) the matrix products run in bf16 where a probe finds that faster on this machine
    at the cell's largest product, (B, 4H) x (4H, 4H) (:func:`gemm.product_dtype`), and
    everything else in fp32."""
    width = 4 * recurrence.hidden_size
    gemm_dtype = gemm.product_dtype(
        x.size(0), width, width, x.device, "Ordered Memory", "cell and projections"
    )
    with torch.autocast(x.device.type, enabled=False):
        if x.dtype in (torch.float16, torch.bfloat16):
            x = x.float()
        state = recurrence.start_state(state, x, num_slots)
        return _scheduled_forward(recurrence, x, mask, state, gemm_dtype, authors_padding)


class _Schedule:
    """What each step of a sorted batch computes, worked out once on the CPU (no per-step sync)."""

    def __init__(
        self, mask: Tensor, tokens_seen: Tensor, num_slots: int, authors_padding: bool = False
    ) -> None:
        mask_cpu = mask.cpu()
        batch_size = mask_cpu.size(0)
        active = mask_cpu.sum(0)  # (T,)
        prefix = torch.arange(batch_size).unsqueeze(1) < active.unsqueeze(0)  # (B, T)
        if not torch.equal(prefix, mask_cpu):
            raise ValueError(
                "OrderedMemoryEncoder: each mask row must be one run of real tokens, padded on "
                "the left or on the right (True = real token); got a row with a gap in it"
            )
        seen = tokens_seen.cpu()
        if authors_padding:  # a row shorter than T starts as if one token had been read
            seen = seen + ((seen == 0) & ~mask_cpu.all(1)).long()
        seen_before = seen.unsqueeze(1) + mask_cpu.long().cumsum(1) - mask_cpu.long()
        first = mask_cpu & (seen_before == 0)  # (B, T) the row's first token ever
        window = (seen_before * mask_cpu).amax(0).clamp(max=num_slots) if batch_size else active
        self.active: list[int] = active.tolist()
        self.window: list[int] = window.tolist()
        self.has_first: list[bool] = first.any(0).tolist()
        self.first = first.to(mask.device)


def _scheduled_forward(
    recurrence: OrderedMemoryRecurrence,
    x: Tensor,
    mask: Tensor,
    state: OrderedMemoryState,
    gemm_dtype: torch.dtype | None,
    authors_padding: bool = False,
) -> tuple[Tensor, Tensor, OrderedMemoryState]:
    """The windowed, longest-rows-first loop over steps; see the module docstring."""
    from treernn.encoders.ordered_memory import (
        MASK_THRESHOLD,
        OrderedMemoryState,
        masked_attention,
    )

    batch_size, steps, _ = x.shape
    hidden_size = recurrence.hidden_size
    num_slots = state.num_slots

    # Longest rows first: with left or right padding, the rows reading a token are a prefix.
    lengths = mask.sum(1)  # (B,)
    order = torch.argsort(lengths, descending=True, stable=True)
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(batch_size, device=order.device)
    x, mask, state = x[order], mask[order], state.index_select(order)
    schedule = _Schedule(mask, state.tokens_seen, num_slots, authors_padding)

    # bf16-mixed: every matrix the recurrence multiplies by, cast once per forward
    cell = recurrence.cell
    weight_left, weight_right, first_bias = cell.split_first_layer()
    inputs, query, key = (
        recurrence.input_projection,
        recurrence.query_projection,
        recurrence.key_projection,
    )
    input_weight_gemm, query_weight_gemm, key_weight_gemm, right_weight_gemm = (
        None if gemm_dtype is None else weight.to(gemm_dtype)
        for weight in (inputs.weight, query.weight, key.weight, weight_right)
    )
    projected = recurrence.layer_norm(
        _linear(x, inputs.weight, inputs.bias, input_weight_gemm)
    )  # eq. (1)
    query_mask, key_mask, score_mask = recurrence.attention_dropout_masks(batch_size, x)
    queries = projected if query_mask is None else projected * query_mask
    queries = recurrence.query_norm(
        _linear(queries, query.weight, query.bias, query_weight_gemm)
    )  # (B,T,H)
    cell_masks = recurrence.cell.sample_dropout_masks(batch_size, x)
    left_mask = right_mask = hidden_mask = None
    if cell_masks is not None:
        left_mask, right_mask = cell_masks[0].split(hidden_size, dim=-1)  # (B, H) each
        hidden_mask = cell_masks[1]  # (B, 4H)
    norm = recurrence.layer_norm
    operands = slot_chain_operands(
        weight_left,
        cell.second_layer.weight,
        cell.second_layer.bias,
        gemm_dtype or x.dtype,
        batch=batch_size,
        gemm_backend=getattr(recurrence, "gemm_backend", "auto"),
    )

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
        x_t = projected_steps[t][:active]  # (active, H)
        window = schedule.window[t]  # slots [N - window, N) can be pointed at
        if window > 1:  # fewer where the mask of eq. (10) is below the threshold for every row
            window = _reachable_window(pointer[:active, num_slots - window + 1 :], MASK_THRESHOLD)
        window_start = num_slots - window
        if window == 0:  # every active row is at its first token: cp = 0, rcp = 1
            new_pointer = x.new_zeros(active, num_slots)
            new_memory = candidate[:active]
            new_candidate = x_t.unsqueeze(1).expand(active, num_slots, hidden_size)
            attention = x.new_zeros(active, num_slots)
            output = x_t
        else:
            previous = candidate[:active, window_start:]  # (active, window, H) M_hat_{t-1}
            keys = previous if key_mask is None else previous * key_mask[:active]
            keys = recurrence.key_norm(
                _linear(keys, key.weight, key.bias, key_weight_gemm)
            )  # (active, window, H)
            features = F.relu(query_steps[t][:active].unsqueeze(1) + keys)  # (active, window, H)
            if score_mask is not None:
                features = features * score_mask[:active]
            scores = recurrence.score(features).squeeze(-1) / math.sqrt(
                hidden_size
            )  # (active, window)
            allowed = torch.cat(  # cp_{t-1}^{i+1}, with cp^N = 1 (eq. 10)
                [pointer[:active, window_start + 1 :], x.new_ones(active, 1)], dim=1
            )
            attention = masked_attention(scores, allowed)  # (active, window) p_t
            cumulative = attention.cumsum(dim=1)  # cp_t, eq. (3)
            # rcp_t = 1 - sum_{j < i} p^j (eq. 4); written so that it is exactly 1 below p
            reverse_cumulative = 1.0 - cumulative + attention
            if schedule.has_first[t]:
                first = schedule.first[:active, t, None]  # (active, 1)
                attention = attention.masked_fill(first, 0.0)
                cumulative = cumulative.masked_fill(first, 0.0)
                reverse_cumulative = reverse_cumulative.masked_fill(first, 1.0)
            # eq. (5); slots below the window are never read before being overwritten
            erase = reverse_cumulative.unsqueeze(-1)  # (active, window, 1)
            memory_window = memory[:active, window_start:] * (1.0 - erase) + previous * erase
            # eqs. (6)-(7) slot by slot; the cell's first layer on M_t for all slots at once
            right = (
                memory_window if right_mask is None else memory_window * right_mask[:active, None]
            )
            # slot-major, so that each slot's rows are contiguous for addmm
            right_projected = _linear(  # bf16 under bf16-mixed, like autocast's
                right.transpose(0, 1), weight_right, first_bias, right_weight_gemm, True
            )  # (window, active, 4H)
            step_hidden_mask = None if hidden_mask is None else hidden_mask[:active]
            step_left_mask = None if left_mask is None else left_mask[:active]
            slots = slot_chain(
                x_t,
                memory_window,
                right_projected,
                cumulative,
                weight_left,
                cell.second_layer.weight,
                cell.second_layer.bias,
                norm.weight,
                norm.bias,
                step_left_mask,
                step_hidden_mask,
                norm.eps,
                operands,
                overwrite_right=True,  # right_projected is read nowhere else
            )
            output = slots[:, -1]  # slots (active, window, H); the output is the last, (active, H)
            if window_start == 0:  # the window is the whole memory: nothing to copy around it
                new_pointer, new_memory, new_candidate = cumulative, memory_window, slots
            else:
                zeros = x.new_zeros(active, window_start)
                new_pointer = torch.cat([zeros, cumulative], dim=1)  # (active, N)
                new_memory = torch.cat([memory[:active, :window_start], memory_window], dim=1)
                new_candidate = torch.cat(
                    [x_t.unsqueeze(1).expand(active, window_start, hidden_size), slots],
                    dim=1,
                )  # (active, N, H)
                attention = torch.cat([zeros, attention], dim=1)  # (active, N)
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
    attention = torch.stack(attentions, dim=1) if steps else x.new_zeros(batch_size, 0, num_slots)
    final = OrderedMemoryState(pointer, memory, candidate, state.tokens_seen + lengths[order])
    return hidden[inverse], attention[inverse], final.index_select(inverse)


def _reachable_window(mask_pointer: Tensor, threshold: float) -> int:
    """How many of the last slots some row can attend: ``mask_pointer`` (rows, window - 1) is
    cp_{t-1}^{i+1} for all but the last slot of a window; slot i gets p_t^i = 0 exactly where that
    is below ``threshold`` (:func:`~treernn.encoders.ordered_memory.masked_attention`), and so
    cp_t^i = 0, M_hat_t^i = x_t and no composition, for every slot below the first one that some
    row can attend. cp_{t-1} grows with i, so that first slot is where any row reaches the
    threshold. One sync per step (free on the CPU)."""
    reachable = (mask_pointer >= threshold).any(0)  # (window - 1,)
    first = int(reachable.int().argmax()) if bool(reachable.any()) else reachable.numel()
    return reachable.numel() + 1 - first


# ----------------------------------------------------------------------------- precision
def _linear(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    gemm_weight: Tensor | None = None,
    keep_gemm_dtype: bool = False,
) -> Tensor:
    """``F.linear`` in the input's precision, or with ``gemm_weight`` (``weight`` cast to bf16 once
    per forward): the product in bf16 and, unless ``keep_gemm_dtype``, the bias added in fp32 (fp32
    out)."""
    if gemm_weight is None:
        return F.linear(x, weight, bias)
    gemm_dtype = gemm_weight.dtype
    if keep_gemm_dtype:
        return F.linear(
            x.to(gemm_dtype), gemm_weight, None if bias is None else bias.to(gemm_dtype)
        )
    out = F.linear(x.to(gemm_dtype), gemm_weight).float()
    return out if bias is None else out + bias


# ----------------------------------------------------------------------------- the slot chain
def chain_kernel(like: Tensor):
    """The compiled elementwise kernels of the chain (``csrc/om_chain.cpp``) where they can run
    tensors like ``like`` (CPU, float32 or float64) and the extension is built; None otherwise
    (the torch-ops path then runs: CUDA, bf16 products, no compiler, or ``TREERNN_CPP_EXT=0``)."""
    if like.device.type != "cpu" or like.dtype not in (torch.float32, torch.float64):
        return None
    return load_extension("om_chain")


def slot_chain_operands(
    weight_left: Tensor,
    weight_second: Tensor,
    bias_second: Tensor,
    dtype: torch.dtype,
    batch: int = 0,
    gemm_backend: str = "auto",
) -> tuple:
    """What :func:`slot_chain` multiplies by, detached and cast to ``dtype`` once: W_left^T, W2^T
    and b2 for the forward, W2 and W_left for the backward. Their dtype sets the precision of the
    matrix products. The last entry holds the four per-slot products packed for a packed-GEMM
    backend (:mod:`treernn.kernels.gemm`, chosen at ``batch`` rows; rows may be fewer), or None
    where the backend is aten (then the products are ``torch.addmm`` / ``torch.mm``)."""
    weight_left, weight_second = weight_left.detach(), weight_second.detach()
    operands = tuple(
        matrix.to(dtype).contiguous()
        for matrix in (
            weight_left.t(),
            weight_second.t(),
            bias_second.detach(),
            weight_second,
            weight_left,
        )
    )
    left_t, second_t, _, second, left = operands
    width = second.size(0)
    backend = gemm.resolve(gemm_backend, batch, width, width, second.device, second.dtype)
    packed = None
    if backend != "aten":
        packed = tuple(  # left @ W_left^T, hidden @ W2^T; backward: grad @ W2, grad @ W_left
            gemm.PackedLinear(matrix, batch, backend) for matrix in (left, second, second_t, left_t)
        )
    return (*operands, packed)


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
    overwrite_right: bool = False,
) -> Tensor:
    """Eqs. (6)-(7) for the slots k = 0..width-1 of one step, all candidates at once.

    x_t (rows, H); ``memory`` (rows, width, H) the window M_t; ``right_projected``
    (width, rows, 4H) the right half of the cell's first layer on the (dropped-out) memory, b1
    included; ``cumulative`` (rows, width) cp_t;
    ``weight_left`` (4H, H) the left half of W1; ``weight_second`` (4H, 4H) and ``bias_second`` W2,
    b2; ``norm_weight``/``norm_bias`` the shared LayerNorm; ``left_mask`` (rows, H) and
    ``hidden_mask`` (rows, 4H) the cell's dropout masks (non-negative), or None. Returns the
    candidates M_hat_t^k, (rows, width, H). ``operands`` (:func:`slot_chain_operands`, made once
    per forward) set the precision of the matrix products: with bf16 operands the products, the ReLU
    layer and ``right_projected`` are bf16 (as autocast's linear layers are); the gates, the
    LayerNorm, the state and the output stay in the precision of ``x_t``. ``overwrite_right``: the
    caller hands ``right_projected`` over (nothing reads it afterwards, and autograd saved it
    nowhere): the ReLU layers are computed in it, saving a copy per slot.

    The backward pass is written by hand (:class:`_SlotChain`): one loop over the slots in
    reverse with small, cache-resident operations, then the weight gradients as one matrix
    product over all width * rows rows of the step.
    """
    if operands is None:
        operands = slot_chain_operands(weight_left, weight_second, bias_second, x_t.dtype)
    inputs = (
        x_t,
        memory,
        right_projected,
        cumulative,
        weight_left,
        weight_second,
        bias_second,
        norm_weight,
        norm_bias,
    )
    if torch.is_grad_enabled() and any(t.requires_grad for t in inputs):
        return _SlotChain.apply(*inputs, left_mask, hidden_mask, eps, operands, overwrite_right)
    return _slot_chain_forward(
        x_t,
        memory,
        right_projected,
        cumulative,
        norm_weight,
        norm_bias,
        left_mask,
        hidden_mask,
        eps,
        operands,
        save=False,
        overwrite_right=overwrite_right,
    )[0]


def slot_chain_autograd(
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
    overwrite_right: bool = False,
) -> Tensor:
    """:func:`slot_chain` with plain autograd ops (same arguments; ``operands`` and
    ``overwrite_right`` are ignored and the products run in the precision of ``x_t``): the check
    on the hand-written backward."""
    size = x_t.size(-1)
    below = x_t  # M_hat_t^{k-1}, starting from x_t
    slots = []
    for k in range(memory.size(1)):
        left = below if left_mask is None else below * left_mask
        hidden = F.relu(right_projected[k] + left @ weight_left.t())  # eq. (12), first layer
        if hidden_mask is not None:
            hidden = hidden * hidden_mask
        gate_logits, candidate = F.linear(hidden, weight_second, bias_second).split(
            (3 * size, size), dim=-1
        )
        vertical_gate, horizontal_gate, candidate_gate = torch.sigmoid(gate_logits).chunk(3, -1)
        mixed = vertical_gate * below + horizontal_gate * memory[:, k] + candidate_gate * candidate
        composed = F.layer_norm(mixed, (size,), norm_weight, norm_bias, eps)  # eq. (13)
        below = torch.lerp(x_t, composed, cumulative[:, k : k + 1])  # eq. (7)
        slots.append(below)
    return torch.stack(slots, 1)  # (rows, width, H)


def _slot_chain_forward(
    x_t,
    memory,
    right_projected,
    cumulative,
    norm_weight,
    norm_bias,
    left_mask,
    hidden_mask,
    eps,
    operands,
    save,
    overwrite_right=False,
):
    """The forward loop; returns the candidates (rows, width, H) and, if ``save``, what the
    backward pass needs."""
    left_t, second_t, second_bias = operands[:3]
    packed = operands[5]
    gemm_dtype = left_t.dtype
    rows, width, size = memory.shape
    right = right_projected.to(gemm_dtype)
    hidden_scale = None if hidden_mask is None else hidden_mask.to(gemm_dtype)
    out = x_t.new_empty(rows, width, size)
    # per slot: the cell's left input (after dropout), ReLU layer (after dropout),
    # [sigmoid(v, h, c), u] and the LayerNorm's input; one slot's worth when not saving.
    # Per-slot views are made once (unbind), as Python-side indexing costs as much as small ops.
    slots = width if save else 1
    lefts = x_t.new_empty(slots, rows, size, dtype=gemm_dtype)
    # the ReLU layers: in ``right`` itself where the caller hands it over (addmm then adds the
    # product in place instead of copying ``right`` into another buffer first)
    in_place = overwrite_right and right is right_projected and right.is_contiguous()
    hiddens = right if in_place else x_t.new_empty(slots, rows, 4 * size, dtype=gemm_dtype)
    seconds = x_t.new_empty(slots, rows, 4 * size)
    mixeds = x_t.new_empty(slots, rows, size)
    rights, memories = right.unbind(0), memory.unbind(1)
    hidden_views = rights if in_place else hiddens.unbind(0)
    views = [
        t.unbind(0)
        for t in (
            lefts,
            seconds,
            mixeds,
            seconds[..., : 3 * size],
            seconds[..., :size],
            seconds[..., size : 2 * size],
            seconds[..., 2 * size : 3 * size],
            seconds[..., 3 * size :],
        )
    ]
    writes, outs = cumulative.unsqueeze(-1).unbind(1), out.unbind(1)
    gemm_in_state_dtype = gemm_dtype == x_t.dtype
    kernel = chain_kernel(x_t) if gemm_in_state_dtype else None
    if kernel is None:
        normed, means, rstds = [], [], []
    else:  # the kernel writes the LayerNorm's output and statistics into these
        normed_buffer, stats = x_t.new_empty(slots, rows, size), x_t.new_empty(2, slots, rows, 1)
        normed, means, rstds = normed_buffer.unbind(0), *(t.unbind(0) for t in stats)
    below = x_t
    for k in range(width):
        buffer_slot = k if save else 0
        left, second, mixed, gates, vertical, horizontal, candidate_gate, candidate = (
            view[buffer_slot] for view in views
        )
        hidden = hidden_views[k if in_place else buffer_slot]
        if k == 0 or kernel is None:  # with the kernel, the slot below wrote this slot's left
            if left_mask is None:
                left.copy_(below)
            else:
                torch.mul(below, left_mask, out=left)
        if packed is None:
            torch.addmm(rights[k], left, left_t, out=hidden)
        else:
            packed[0].addmm(rights[k], left, out=hidden)
        if kernel is not None:
            kernel.relu_scale(hidden, hidden_scale)
        else:
            if hidden_scale is not None:  # relu(a) * m == relu(a * m) for m >= 0
                hidden.mul_(hidden_scale)
            hidden.relu_()
        if packed is not None:
            packed[1].addmm(second_bias.expand(rows, -1), hidden, out=second)
        elif gemm_in_state_dtype:
            torch.addmm(second_bias, hidden, second_t, out=second)
        else:
            second.copy_(torch.addmm(second_bias, hidden, second_t))
        if kernel is not None:
            last = k == width - 1
            kernel.compose_forward(
                second,
                below,
                memories[k],
                x_t,
                writes[k],
                norm_weight,
                norm_bias,
                eps,
                mixed,
                normed[buffer_slot],
                means[buffer_slot],
                rstds[buffer_slot],
                outs[k],
                None if last else views[0][k + 1 if save else 0],
                None if last else left_mask,
            )
            below = outs[k]
            continue
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
    if kernel is None:
        normed_buffer, stats = torch.stack(normed), (torch.stack(means), torch.stack(rstds))
    saved = (lefts, hiddens, seconds, mixeds, normed_buffer, *stats, hidden_scale)
    return out, saved


def _left_carry(d_mixed: Tensor, vertical: Tensor, d_left: Tensor, left_mask: Tensor | None):
    """d loss / d M_hat^{k-1} through slot k: its vertical gate's product and its left input
    (after that input's dropout mask)."""
    carry = d_mixed * vertical
    return carry.addcmul_(d_left, left_mask) if left_mask is not None else carry + d_left


class _SlotChain(torch.autograd.Function):
    """:func:`slot_chain` with a hand-written backward pass."""

    @staticmethod
    def forward(
        ctx,
        x_t,
        memory,
        right_projected,
        cumulative,
        weight_left,
        weight_second,
        bias_second,
        norm_weight,
        norm_bias,
        left_mask,
        hidden_mask,
        eps,
        operands,
        overwrite_right,
    ):
        out, saved = _slot_chain_forward(
            x_t,
            memory,
            right_projected,
            cumulative,
            norm_weight,
            norm_bias,
            left_mask,
            hidden_mask,
            eps,
            operands,
            save=True,
            overwrite_right=overwrite_right,
        )
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
        weight_second_gemm, weight_left_gemm, packed = operands[3:6]
        gemm_dtype = weight_second_gemm.dtype
        gemm_in_state_dtype = gemm_dtype == x_t.dtype
        rows, width, size = memory.shape
        grad_below = x_t.new_empty(width, rows, size)  # d loss / d M_hat^k (all paths)
        grad_normed = x_t.new_empty(width, rows, size)  # d loss / d LN output
        # d / d [v, h, c, u] and d / d (W1 [l; r] + b1)
        grad_second = x_t.new_empty(width, rows, 4 * size, dtype=gemm_dtype)
        grad_first = x_t.new_empty(width, rows, 4 * size, dtype=gemm_dtype)
        # d / d [v, h, c, u], written in the state's precision (then cast if need be)
        target = grad_second if gemm_in_state_dtype else x_t.new_empty(1, rows, 4 * size)
        d_seconds = [
            t.unbind(0)
            for t in (
                target,
                target[..., :size],
                target[..., size : 2 * size],
                target[..., 2 * size : 3 * size],
                target[..., 3 * size :],
                target[..., : 3 * size],
            )
        ]
        gates = [
            t.unbind(0)
            for t in (
                seconds[..., : 3 * size],
                seconds[..., :size],
                seconds[..., 2 * size : 3 * size],
                seconds[..., 3 * size :],
            )
        ]
        grad_belows, grad_normeds = grad_below.unbind(0), grad_normed.unbind(0)
        grad_seconds, grad_firsts = grad_second.unbind(0), grad_first.unbind(0)
        grad_outs, memories = grad_out.unbind(1), memory.unbind(1)
        writes, belows = cumulative.unsqueeze(-1).unbind(1), (x_t, *out.unbind(1))
        mixed_k, mean_k, rstd_k = mixeds.unbind(0), means.unbind(0), rstds.unbind(0)
        hidden_k = hiddens.unbind(0)
        kernel = chain_kernel(x_t) if gemm_in_state_dtype else None
        if kernel is not None:
            grad_mixed = x_t.new_empty(width, rows, size)  # d loss / d LN input, per slot
            d_mixeds, verticals = grad_mixed.unbind(0), gates[1]
        else:
            grad_mixed = []
        carry = d_left = None
        for k in range(width - 1, -1, -1):
            # from d loss / d M_hat^k to d loss / d [v, h, c, u] (grad_seconds[k])
            if kernel is not None:
                above = k < width - 1
                kernel.compose_backward(
                    grad_outs[k],
                    d_mixeds[k + 1] if above else None,
                    verticals[k + 1] if above else None,
                    d_left if above else None,
                    left_mask if above else None,
                    writes[k],
                    mixed_k[k],
                    mean_k[k],
                    rstd_k[k],
                    norm_weight,
                    seconds[k],
                    belows[k],
                    memories[k],
                    grad_belows[k],
                    grad_normeds[k],
                    d_mixeds[k],
                    grad_seconds[k],
                )
            else:
                if carry is None:
                    grad_belows[k].copy_(grad_outs[k])
                else:
                    torch.add(grad_outs[k], carry, out=grad_belows[k])
                torch.mul(grad_belows[k], writes[k], out=grad_normeds[k])  # lerp's o cp
                d_mixed = torch.ops.aten.native_layer_norm_backward(
                    grad_normeds[k],
                    mixed_k[k],
                    [size],
                    mean_k[k],
                    rstd_k[k],
                    norm_weight,
                    None,
                    [True, False, False],
                )[0]
                grad_mixed.append(d_mixed)
                buffer_slot = k if gemm_in_state_dtype else 0
                d_second, d_vertical, d_horizontal, d_candidate_gate, d_candidate, d_gates = (
                    view[buffer_slot] for view in d_seconds
                )
                gate, vertical, candidate_gate, candidate = (v[k] for v in gates)
                torch.mul(d_mixed, belows[k], out=d_vertical)
                torch.mul(d_mixed, memories[k], out=d_horizontal)
                torch.mul(d_mixed, candidate, out=d_candidate_gate)
                torch.ops.aten.sigmoid_backward.grad_input(d_gates, gate, grad_input=d_gates)
                torch.mul(d_mixed, candidate_gate, out=d_candidate)
                if not gemm_in_state_dtype:
                    grad_seconds[k].copy_(d_second)
            if packed is None:
                d_hidden = torch.mm(grad_seconds[k], weight_second_gemm)  # (rows, 4H)
            else:
                d_hidden = packed[2].mm(grad_seconds[k])
            if kernel is not None:
                kernel.relu_backward(d_hidden, hidden_k[k], hidden_scale, grad_firsts[k])
            else:
                torch.ops.aten.threshold_backward.grad_input(
                    d_hidden, hidden_k[k], 0, grad_input=grad_firsts[k]
                )
                if hidden_scale is not None:
                    grad_firsts[k].mul_(hidden_scale)
            if packed is None:
                d_left = torch.mm(grad_firsts[k], weight_left_gemm)  # (rows, H)
            else:
                d_left = packed[3].mm(grad_firsts[k])
            if kernel is None:  # the kernel adds this into the next slot's pass itself
                carry = _left_carry(d_mixed, vertical, d_left, left_mask)
        if kernel is not None:  # what the first slot sends back to x_t through its left input
            carry = _left_carry(d_mixeds[0], verticals[0], d_left, left_mask)
        else:
            grad_mixed = torch.stack(grad_mixed[::-1])  # (width, rows, H)
        cumulative_t = cumulative.t().unsqueeze(-1)  # (width, rows, 1)
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
        flat_second = grad_second.view(width * rows, 4 * size)
        grad_weight_left = grad_weight_second = grad_bias_second = None
        if needs[4]:
            flat_first = grad_first.view(width * rows, 4 * size)
            grad_weight_left = (flat_first.t() @ lefts.view(width * rows, size)).to(x_t.dtype)
        if needs[5]:
            grad_weight_second = (flat_second.t() @ hiddens.view(width * rows, -1)).to(x_t.dtype)
        if needs[6]:
            # a matrix product sums faster than sum(0)
            ones = flat_second.new_ones(1, width * rows)
            grad_bias_second = (ones @ flat_second).to(x_t.dtype).view(-1)
        grad_norm_weight = grad_norm_bias = None
        if needs[7]:
            grad_norm_weight = (grad_normed * (mixeds - means) * rstds).sum((0, 1))
        if needs[8]:
            grad_norm_bias = grad_normed.sum((0, 1))
        return (
            grad_x,
            grad_memory,
            grad_right,
            grad_cumulative,
            grad_weight_left,
            grad_weight_second,
            grad_bias_second,
            grad_norm_weight,
            grad_norm_bias,
            None,
            None,
            None,
            None,
            None,
        )
