"""The optimised Ordered Memory recurrence (``OrderedMemoryEncoder(impl="fast")``, the default).

Read `treernn.encoders.ordered_memory` first: it has the paper's equations and the readable
Algorithm 1 (`treernn.encoders.ordered_memory.OrderedMemoryRecurrence.reference_forward`).
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
* The per-slot products of the chain run on the GEMM backend of `treernn.kernels.gemm`
  (``gemm_backend``: MKL's or oneDNN's packed GEMM on x86 CPUs in fp32, whichever is faster here,
  the weights packed once per forward; plain ``addmm`` / ``mm`` on aten otherwise).
* The cell's first layer is split into its ``left`` and ``right`` halves; the ``right`` half,
  which reads the memory, runs for all slots of a step as one matrix product.
* The chain of eqs. (6)-(7) over a step's slots, which must run slot after slot, is one autograd
  node (`slot_chain`) with a hand-written backward pass: the forward loop writes each slot's
  intermediates into preallocated buffers, the backward loop runs the slots in reverse with
  small, cache-resident operations, and the weight gradients of W_left, W2, b2 and the LayerNorm
  are computed once per step over all slots' rows (one matrix product each) instead of once per
  slot. `slot_chain_autograd` is the same chain with autograd's backward, the check on it.
* Between the chain's matrix products, the elementwise work of a slot (the ReLU layer, the gates,
  the mix, the LayerNorm and eq. 7 forward; their gradients backward) is one pass over each row
  in a compiled kernel (``csrc/om_chain.cpp``, built on first use by
  `treernn.kernels.cpp_ext`) instead of about ten torch ops forward and fifteen backward;
  float32 and float64 on the CPU. Under bf16 products the state and this elementwise work stay
  fp32, so the kernels run it there too, all but the ReLU layer, which is bf16 (as autocast's)
  and stays on torch ops. The torch-ops path stays for CUDA, machines without a compiler and
  ``TREERNN_CPP_EXT=0``; the tests run both.
* Dropout masks are sampled once per sequence (after sorting the rows), see the model file.

Precision: fp32 by default (exact). Deviation, only when asked for: under
``torch.autocast("cpu", dtype=torch.bfloat16)`` (Lightning's ``precision="bf16-mixed"``) the
recurrence's matrix products (input, query, key and cell projections) run in bf16, with the
weights cast once per forward, and the attention softmax, gates, LayerNorms, memory state and
outputs stay in fp32 (the outputs are fp32). As with autocast's linear layers, the cell's ReLU
layer and the right half of its first layer are bf16, and so is the cell's hidden dropout mask
(1 / keep rounded to bf16). Where bf16 products are not faster than fp32 ones on the machine (a
probe at the cell's shape, `treernn.kernels.gemm.product_dtype`: CPUs without bf16
instructions, where they are 50-100x slower, and CPUs whose bf16 instructions are no faster than
their fp32 FMA units) the recurrence keeps fp32 products under bf16-mixed (logged once): the
result is the fp32 one.

Names: ``gemm_dtype`` is the dtype of the matrix products (bf16 under bf16-mixed, else the
state's); ``*_gemm`` tensors are weights cast to it; ``window`` is the number of slots a step
works on and ``window_start = N - window`` the first of them; ``active`` the number of rows that
read a token at a step; in `slot_chain`, ``rows`` x ``width`` are those two counts.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from treernn.encoders.ordered_memory_state import (
    MASK_THRESHOLD,
    OrderedMemoryMasks,
    OrderedMemoryState,
    OrderedMemoryWeights,
    masked_attention,
)
from treernn.kernels import gemm
from treernn.kernels.ordered_memory_chain import (  # noqa: F401 (tests patch them here)
    chain_kernel,
    slot_chain,
    slot_chain_autograd,
    slot_chain_operands,
)

#: tokens of the loop that decides the products' precision (`precision_runs`)
PROBE_STEPS = 16


def ordered_memory_recurrence(
    recurrence: Any,
    x: Tensor,
    mask: Tensor,
    num_slots: int,
    state: OrderedMemoryState | None,
    authors_padding: bool = False,
) -> tuple[Tensor, Tensor, OrderedMemoryState]:
    """One direction of Ordered Memory over x (B, T, D) and mask (B, T), the fast way, from
    ``state`` (None: a fresh memory of ``num_slots`` slots): hidden (B, T, H), attention
    (B, T, N), final state, as `OrderedMemoryRecurrence.forward` returns them. ``recurrence``
    is that module: its ``start_state``, ``sample_dropout_masks``, ``kernel_weights``,
    ``hidden_size`` and ``gemm_backend`` are read, nothing else. The precision of the products
    is decided here, under bf16 autocast, by timing this loop (`precision_runs`); the
    recurrence's other work runs in fp32 with autocast off."""
    runs = partial(precision_runs, recurrence, mask, num_slots, torch.is_grad_enabled(), x.device)
    gemm_dtype = product_dtype(x, recurrence.hidden_size, runs)  # while autocast, if any, is on
    with torch.autocast(x.device.type, enabled=False):
        if x.dtype in (torch.float16, torch.bfloat16):
            x = x.float()  # the non-products run in fp32
        state = recurrence.start_state(state, x, num_slots)
        masks = recurrence.sample_dropout_masks(x.size(0), x)
        return fused_ordered_memory(
            x, mask, state, recurrence.kernel_weights(), masks, gemm_dtype,
            recurrence.gemm_backend, authors_padding,
        )  # fmt: skip


def precision_runs(
    recurrence: Any, mask: Tensor, num_slots: int, training: bool, device: torch.device
) -> tuple[dict[str, Callable[[], None]], float]:
    """For `product_dtype`: ``recurrence``'s fast path over a batch shaped like the one being
    read (``mask`` (B, T)): as many random rows, of the batch's lengths scaled to at most
    `PROBE_STEPS` tokens, with fp32 and with bf16 products, forward and, ``training``, backward
    to the parameters, with the module's dropout; and the FLOPs of one loop's largest products.

    A product faster alone does not make the step faster: on a GPU the recurrence is bound
    by its kernel launches at these sizes and bf16 products add casts (an H100, logic
    setting: bf16 products chosen by the product alone, training 0.91x fp32). Nor does a
    loop of full rows where the batch's rows are of many lengths: a step works on the rows
    still reading a token, fewer and fewer, where bf16 products gain less than their casts
    cost. On an Intel Xeon with AMX, logic setting (batch 256, hidden 64), the loop ran 1.14x
    faster in bf16 with every row 16 tokens long and 0.91-0.97x with rows of 2-16 tokens,
    and the preset's update at 0.85x fp32 in bf16 (100-update fits); in the ListOps setting
    (batch 128, hidden 128, 50 tokens, full rows) bf16 ran 1.65x fp32. Random data, and
    dropout masks drawn with the caller's random state restored afterwards (probing draws
    nothing from the run's random streams); the gradients are returned, not accumulated into
    the parameters' ``.grad``."""
    batch_size = mask.size(0)
    steps = min(mask.size(1), PROBE_STEPS)
    tokens = max(mask.size(1), 1)
    lengths = (mask.sum(1).cpu() * steps + tokens - 1).div(tokens, rounding_mode="floor")
    generator = torch.Generator().manual_seed(0)
    size = (batch_size, steps, recurrence.input_projection.in_features)
    x = torch.randn(size, generator=generator).to(device)
    mask = (torch.arange(steps)[None] < lengths[:, None]).to(device)
    parameters = [p for p in recurrence.parameters() if p.requires_grad]

    def run(dtype: torch.dtype | None) -> None:
        with (
            gemm.random_state_kept(device),
            torch.set_grad_enabled(training),
            torch.autocast(device.type, enabled=False),
        ):
            state = recurrence.start_state(None, x, num_slots)
            masks = recurrence.sample_dropout_masks(batch_size, x)
            hidden, _, _ = fused_ordered_memory(
                x, mask, state, recurrence.kernel_weights(), masks, dtype, recurrence.gemm_backend
            )
            if training:
                torch.autograd.grad(hidden.sum(), parameters, allow_unused=True)

    width = 4 * recurrence.hidden_size
    flops = 2.0 * float(lengths.sum()) * width * width * (3 if training else 1)
    runs = {"float32": partial(run, None)}
    if gemm.bf16_kernels(device):  # else torch's reference loop (0.1 GFLOP/s on an AMD Zen 3)
        runs["bfloat16"] = partial(run, torch.bfloat16)
    return runs, flops


def product_dtype(x: Tensor, hidden_size: int, runs=None) -> torch.dtype | None:
    """The dtype of the recurrence's matrix products: bf16 under ``torch.autocast`` with bf16
    (bf16-mixed) where a probe finds that faster on this machine at the cell's largest product,
    (B, 4H) x (4H, 4H) (`gemm.product_dtype`), or, given ``runs`` (what the encoder
    gives: the recurrence's own loop in both precisions,
    `precision_runs`), where that loop runs faster in bf16; None (the
    state's dtype) otherwise. Call it while autocast, if any, is still on."""
    width = 4 * hidden_size
    product = "cell and projections"
    if runs is not None:
        product += ", training" if torch.is_grad_enabled() else ", inference"
    return gemm.product_dtype(x.size(0), width, width, x.device, "Ordered Memory", product, runs)


def fused_ordered_memory(
    x: Tensor,
    mask: Tensor,
    state: OrderedMemoryState,
    weights: OrderedMemoryWeights,
    masks: OrderedMemoryMasks,
    gemm_dtype: torch.dtype | None,
    gemm_backend: str = "auto",
    authors_padding: bool = False,
) -> tuple[Tensor, Tensor, OrderedMemoryState]:
    """What `OrderedMemoryRecurrence.forward` returns, computed the fast way: hidden
    (B, T, H), attention (B, T, N), final state. x (B, T, D) fp32 or fp64 and ``state`` (the
    carried or a fresh one) as the model prepared them, with autocast off; ``gemm_dtype`` from
    `product_dtype`; ``masks`` the dropout masks the model drew for this batch."""
    return _scheduled_forward(
        x, mask, state, weights, masks, gemm_dtype, gemm_backend, authors_padding
    )


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
    x: Tensor,
    mask: Tensor,
    state: OrderedMemoryState,
    weights: OrderedMemoryWeights,
    masks: OrderedMemoryMasks,
    gemm_dtype: torch.dtype | None,
    gemm_backend: str = "auto",
    authors_padding: bool = False,
) -> tuple[Tensor, Tensor, OrderedMemoryState]:
    """The windowed, longest-rows-first loop over steps; see the module docstring."""
    batch_size, steps, _ = x.shape
    hidden_size = weights.input_weight.size(0)
    num_slots = state.num_slots

    # Longest rows first: with left or right padding, the rows reading a token are a prefix.
    lengths = mask.sum(1)  # (B,)
    order = torch.argsort(lengths, descending=True, stable=True)
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(batch_size, device=order.device)
    x, mask, state = x[order], mask[order], state.index_select(order)
    schedule = _Schedule(mask, state.tokens_seen, num_slots, authors_padding)

    # bf16-mixed: every matrix the recurrence multiplies by, cast once per forward
    weight_left, weight_right, first_bias = (
        weights.first_left,
        weights.first_right,
        weights.first_bias,
    )
    input_weight_gemm, query_weight_gemm, key_weight_gemm, right_weight_gemm = (
        None if gemm_dtype is None else weight.to(gemm_dtype)
        for weight in (
            weights.input_weight,
            weights.query_weight,
            weights.key_weight,
            weight_right,
        )
    )
    projected = _layer_norm(
        _linear(x, weights.input_weight, weights.input_bias, input_weight_gemm), weights.layer_norm
    )  # eq. (1)
    # the masks go to the sorted rows as drawn (row i of the sorted batch gets mask i)
    query_mask, key_mask, score_mask = masks.query, masks.key, masks.score
    queries = projected if query_mask is None else projected * query_mask
    queries = _layer_norm(
        _linear(queries, weights.query_weight, weights.query_bias, query_weight_gemm),
        weights.query_norm,
    )  # (B,T,H)
    left_mask = right_mask = hidden_mask = None
    if masks.cell_input is not None:
        left_mask, right_mask = masks.cell_input.split(hidden_size, dim=-1)  # (B, H) each
        hidden_mask = masks.cell_hidden  # (B, 4H)
    norm_weight, norm_bias, norm_eps = weights.layer_norm
    operands = slot_chain_operands(
        weight_left,
        weights.second_weight,
        weights.second_bias,
        gemm_dtype or x.dtype,
        batch=batch_size,
        gemm_backend=gemm_backend,
    )

    # Indexing a tensor step by step makes autograd write a full-size zero gradient per index
    # (REFERENCE.md, ON-LSTM "Speed"): split once with unbind instead.
    projected_steps, query_steps = projected.unbind(1), queries.unbind(1)  # T x (B, H)
    pointer, memory, candidate = state.cumulative_pointer, state.memory, state.candidate
    multiple = row_multiple(x.device, gemm_dtype, operands)
    outputs, attentions = [], []
    for t in range(steps):
        active = schedule.active[t]  # rows [0, active) read a token at step t
        if active == 0:
            outputs.append(x.new_zeros(batch_size, hidden_size))
            attentions.append(x.new_zeros(batch_size, num_slots))
            continue
        window = schedule.window[t]  # slots [N - window, N) can be pointed at
        if window > 1:  # fewer where the mask of eq. (10) is below the threshold for every row
            window = _reachable_window(pointer[:active, num_slots - window + 1 :], MASK_THRESHOLD)
        window_start = num_slots - window
        # the step computes `rows` >= active rows (see row_multiple) and keeps the first active
        rows = active if window == 0 else min(batch_size, -(-active // multiple) * multiple)
        x_t = projected_steps[t][:rows]  # (rows, H)
        if window == 0:  # every active row is at its first token: cp = 0, rcp = 1
            new_pointer = x.new_zeros(active, num_slots)
            new_memory = candidate[:active]
            new_candidate = x_t.unsqueeze(1).expand(active, num_slots, hidden_size)
            attention = x.new_zeros(active, num_slots)
            output = x_t
        else:  # on `rows` rows: (active, ...) below reads (rows, ...) where rows > active
            previous = candidate[:rows, window_start:]  # (active, window, H) M_hat_{t-1}
            keys = previous if key_mask is None else previous * key_mask[:rows]
            keys = _layer_norm(
                _linear(keys, weights.key_weight, weights.key_bias, key_weight_gemm),
                weights.key_norm,
            )  # (active, window, H)
            features = F.relu(query_steps[t][:rows].unsqueeze(1) + keys)  # (active, window, H)
            if score_mask is not None:
                features = features * score_mask[:rows]
            scores = F.linear(features, weights.score_weight, weights.score_bias).squeeze(
                -1
            ) / math.sqrt(hidden_size)  # (active, window)
            allowed = torch.cat(  # cp_{t-1}^{i+1}, with cp^N = 1 (eq. 10)
                [pointer[:rows, window_start + 1 :], x.new_ones(rows, 1)], dim=1
            )
            attention = masked_attention(scores, allowed)  # (active, window) p_t
            cumulative = attention.cumsum(dim=1)  # cp_t, eq. (3)
            # rcp_t = 1 - sum_{j < i} p^j (eq. 4); written so that it is exactly 1 below p
            reverse_cumulative = 1.0 - cumulative + attention
            if schedule.has_first[t]:
                first = schedule.first[:rows, t, None]  # (active, 1)
                attention = attention.masked_fill(first, 0.0)
                cumulative = cumulative.masked_fill(first, 0.0)
                reverse_cumulative = reverse_cumulative.masked_fill(first, 1.0)
            # eq. (5); slots below the window are never read before being overwritten
            erase = reverse_cumulative.unsqueeze(-1)  # (active, window, 1)
            memory_window = memory[:rows, window_start:] * (1.0 - erase) + previous * erase
            # eqs. (6)-(7) slot by slot; the cell's first layer on M_t for all slots at once
            right = memory_window if right_mask is None else memory_window * right_mask[:rows, None]
            # slot-major, so that each slot's rows are contiguous for addmm
            right_projected = _linear(  # bf16 under bf16-mixed, like autocast's
                right.transpose(0, 1), weight_right, first_bias, right_weight_gemm, True
            )  # (window, active, 4H)
            step_hidden_mask = None if hidden_mask is None else hidden_mask[:rows]
            step_left_mask = None if left_mask is None else left_mask[:rows]
            slots = slot_chain(
                x_t,
                memory_window,
                right_projected,
                cumulative,
                weight_left,
                weights.second_weight,
                weights.second_bias,
                norm_weight,
                norm_bias,
                step_left_mask,
                step_hidden_mask,
                norm_eps,
                operands,
                overwrite_right=True,  # right_projected is read nowhere else
            )
            if rows > active:  # the extra rows' results are dropped (no gradient reaches them)
                slots, cumulative, memory_window = (
                    slots[:active],
                    cumulative[:active],
                    memory_window[:active],
                )
                attention, x_t = attention[:active], x_t[:active]
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


#: where each new product shape builds a kernel, a step computes its rows in multiples of this
ROW_MULTIPLE = gemm.ROW_MULTIPLE


def row_multiple(device: torch.device, gemm_dtype: torch.dtype | None, operands: tuple) -> int:
    """How many rows a step computes in multiples of: `ROW_MULTIPLE` where the step's
    products run on oneDNN (bf16 products on the CPU, or the slot chain's ``onednn`` backend),
    else 1 (every step exactly its ``active`` rows).

    oneDNN builds (JIT-compiles) a kernel for each new product shape, about 1-3 ms on an Intel
    Xeon with AMX, and keeps the last 1,024 it built. A step's row count is the number of rows
    still reading a token, so products of ``active`` rows and weight gradients over
    ``active * window`` rows came in new shapes all through a run: 70-150 new shapes an update in
    the logic preset, 160-240 ms of its update, and bf16-mixed ran at 0.4-0.6x fp32. Rounded up
    to a multiple of 16 the shapes are few and come back (the extra rows are computed and
    dropped; they cost at most 15 rows a step). MKL, the ``treernn`` backend and GPUs' libraries
    build nothing per shape."""
    if device.type != "cpu":
        return 1
    packed = operands[-1]
    on_onednn = gemm_dtype == torch.bfloat16 or (
        packed is not None and packed[0].backend == "onednn"
    )
    return ROW_MULTIPLE if on_onednn else 1


def _reachable_window(mask_pointer: Tensor, threshold: float) -> int:
    """How many of the last slots some row can attend: ``mask_pointer`` (rows, window - 1) is
    cp_{t-1}^{i+1} for all but the last slot of a window; slot i gets p_t^i = 0 exactly where that
    is below ``threshold`` (`treernn.encoders.ordered_memory.masked_attention`), and so
    cp_t^i = 0, M_hat_t^i = x_t and no composition, for every slot below the first one that some
    row can attend. cp_{t-1} grows with i, so that first slot is where any row reaches the
    threshold. One sync per step (free on the CPU)."""
    reachable = (mask_pointer >= threshold).any(0)  # (window - 1,)
    first = int(reachable.int().argmax()) if bool(reachable.any()) else reachable.numel()
    return reachable.numel() + 1 - first


# ----------------------------------------------------------------------------- precision
def _layer_norm(x: Tensor, parameters: tuple[Tensor, Tensor, float]) -> Tensor:
    """``nn.LayerNorm`` over the last dimension, from its (weight, bias, eps)."""
    weight, bias, eps = parameters
    return F.layer_norm(x, weight.shape, weight, bias, eps)


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
