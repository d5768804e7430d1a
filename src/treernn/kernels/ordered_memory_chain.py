"""Ordered Memory's slot chain, eqs. (6)-(7) of one step for every slot of the window at once,
as one autograd node with a hand-written backward pass (`slot_chain`), beside its plain
autograd twin (`slot_chain_autograd`, the check on the backward pass).

The step loop that calls it is `treernn.kernels.ordered_memory`; the readable equations are
`treernn.encoders.ordered_memory.GatedRecursiveCell` and
`treernn.encoders.ordered_memory.OrderedMemoryRecurrence.reference_forward`. The elementwise
work runs in the compiled kernels of ``csrc/om_chain.cpp`` where they build (CPU, float32 and
float64), the per-slot products on the GEMM backend of `treernn.kernels.gemm`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from treernn.kernels import gemm
from treernn.kernels.cpp_ext import load_extension


# ----------------------------------------------------------------------------- the slot chain
def chain_kernel(like: Tensor):
    """The compiled elementwise kernels of the chain (``csrc/om_chain.cpp``) where they can run
    states like ``like`` (CPU, float32 or float64) and the extension is built; None otherwise
    (the torch-ops path then runs: CUDA, no compiler, or ``TREERNN_CPP_EXT=0``). Under bf16
    products the state stays fp32 and the kernels run all of it but the bf16 ReLU layer."""
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
    """What `slot_chain` multiplies by, detached and cast to ``dtype`` once: W_left^T, W2^T
    and b2 for the forward, W2 and W_left for the backward. Their dtype sets the precision of the
    matrix products. The last entry holds the four per-slot products packed for a packed-GEMM
    backend (`treernn.kernels.gemm`, chosen at ``batch`` rows; rows may be fewer), or None
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
    candidates M_hat_t^k, (rows, width, H). ``operands`` (`slot_chain_operands`, made once
    per forward) set the precision of the matrix products: with bf16 operands the products, the ReLU
    layer and ``right_projected`` are bf16 (as autocast's linear layers are); the gates, the
    LayerNorm, the state and the output stay in the precision of ``x_t``. ``overwrite_right``: the
    caller hands ``right_projected`` over (nothing reads it afterwards, and autograd saved it
    nowhere): the ReLU layers are computed in it, saving a copy per slot.

    The backward pass is written by hand (`_SlotChain`): one loop over the slots in
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
    """`slot_chain` with plain autograd ops (same arguments; ``operands`` and
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
    # the elementwise work runs in the state's precision, so the kernels run it under bf16
    # products too; only the ReLU layer (bf16 there, like autocast's) stays on torch ops, and
    # the kernel writes the next slot's left input in fp32 here, cast into ``lefts`` after it
    kernel = chain_kernel(x_t)
    left_fp32 = None if gemm_in_state_dtype or kernel is None else x_t.new_empty(rows, size)
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
        if kernel is not None and gemm_in_state_dtype:
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
            next_left = None if last else views[0][k + 1 if save else 0]
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
                next_left if left_fp32 is None or last else left_fp32,
                None if last else left_mask,
            )
            if left_fp32 is not None and not last:
                next_left.copy_(left_fp32)
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
    """`slot_chain` with a hand-written backward pass."""

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
        kernel = chain_kernel(x_t)  # under bf16 products too, as in the forward pass
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
                    grad_seconds[k] if gemm_in_state_dtype else target[0],
                )
                if not gemm_in_state_dtype:
                    grad_seconds[k].copy_(target[0])
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
            if kernel is not None and gemm_in_state_dtype:
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
            if kernel is not None:  # the kernel reads it in the state's precision
                d_left = d_left.to(x_t.dtype)
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
