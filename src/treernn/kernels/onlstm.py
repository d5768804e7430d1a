"""The fast ON-LSTM recurrence (``ONLSTMEncoder(impl="fast")``, the default): the same numbers as
`treernn.encoders.onlstm.reference_recurrence`, one autograd node per layer and call.

Read `treernn.encoders.onlstm` first: it has the equations and the readable cell. This module
only makes them fast:

* the input projection (with both biases, which are constant over time) is one product for the
  whole sequence, done by the caller;
* the forward loop writes every step into preallocated buffers;
* the per-step products run on the GEMM backend of `treernn.kernels.gemm` (on x86 CPUs
  MKL's or oneDNN's packed GEMM, whichever is faster here at the shape; the weight is packed once
  per call), ``aten`` elsewhere (CUDA, float64);
* on CPU in float32 and float64 all the elementwise work of a step (softmaxes and cumsums of the
  master gates, gate nonlinearities, the new cell and hidden state, the step mask; in the
  backward pass everything from the incoming gradients to the pre-activation gradients) is one
  call of a compiled kernel (``csrc/onlstm_step.cpp``, built on first use by
  `treernn.kernels.cpp_ext`) instead of about twenty small torch ops, whose dispatch cost
  more than their arithmetic. Elsewhere (CUDA, bf16), without a compiler, or with
  ``TREERNN_CPP_EXT=0``, the torch-ops steps run; they are tested equal. In float32 the kernel's
  exp and tanh are its own (within a few ulp of torch's), so the two paths agree to float32
  rounding, not bit for bit;
* the backward pass (`ONLSTMRecurrence`, written by hand) walks the steps once in reverse
  and computes the recurrent weight gradient as one (G, T*B) x (T*B, H) product instead of one
  rank-B update per step. The torch-ops path first computes everything that does not depend on
  the incoming gradient for all steps at once; the kernel recomputes it per step from the saved
  gates (less memory traffic).

Without autograd (``torch.no_grad``, parsing, evaluation) the forward loop saves nothing. On the
``treernn`` backend the encoder runs the input projection inside the loop instead
(`treernn.kernels.onlstm_projected`), which shares this module's buffers and backward walk.
"""

from __future__ import annotations

import functools
import logging
from types import ModuleType

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from treernn.kernels import cuda_graphs, gemm
from treernn.kernels.cpp_ext import load_extension
from treernn.kernels.gemm import PackedLinear, weight_gradient

log = logging.getLogger(__name__)


def gate_count(hidden: int, chunk_size: int) -> int:
    """G = 2n + 4H pre-activations per step: two master gates over n = H / chunk_size chunks,
    then the output, candidate, input and forget gates."""
    return 4 * hidden + 2 * (hidden // chunk_size)


def fused_kernel(like: Tensor) -> ModuleType | None:
    """The compiled per-step kernel (``csrc/onlstm_step.cpp``) where it can run tensors like
    ``like`` (CPU, float32 or float64) and the extension is built; None otherwise (the torch-ops
    path then runs: CUDA, bf16, no compiler, or ``TREERNN_CPP_EXT=0``)."""
    if like.device.type != "cpu" or like.dtype not in (torch.float32, torch.float64):
        return None
    return load_extension("onlstm_step")


def _torch_forward_steps(
    input_gates: Tensor,
    recurrent: PackedLinear,
    hs: Tensor,
    cs: Tensor,
    outputs: Tensor,
    cumaxes: Tensor,
    activations: Tensor | None,
    tanh_cells: Tensor | None,
    gates_buffer: Tensor | None,
    step_mask: Tensor | None,
    chunk_size: int,
) -> None:
    """The steps of `_fast_forward` in torch ops (any device and dtype), writing into its
    buffers: hs, cs (T + 1, B, H), outputs (T, B, H), cumaxes (T, B, 2, n), and activations
    (T, B, G) and tanh_cells (T, B, H) when saving for backward, else the (B, G) gates_buffer."""
    steps, batch, _ = input_gates.shape
    hidden = hs.size(-1)
    n_chunk = hidden // chunk_size
    shape = (batch, n_chunk, chunk_size)
    save_for_backward = activations is not None
    for t in range(steps):
        act = activations[t] if save_for_backward else gates_buffer  # (B, G)
        recurrent.addmm(input_gates[t], hs[t], out=act)
        # Both master gates in one softmax and one cumsum over (B, 2, n).
        softmax = torch.softmax(act[:, : 2 * n_chunk].view(batch, 2, n_chunk), dim=-1)
        cumsum = torch.cumsum(softmax, dim=-1, out=cumaxes[t])
        gates = act[:, 2 * n_chunk :].view(batch, 4, n_chunk, chunk_size)
        gates[:, 0].sigmoid_()
        gates[:, 1].tanh_()
        gates[:, 2:].sigmoid_()
        out_gate, candidate, input_gate, forget_gate = gates.unbind(1)  # (B, n, C)
        master_input = (1.0 - cumsum[:, 0]).unsqueeze(-1)  # (B, n, 1)
        master_forget = cumsum[:, 1].unsqueeze(-1)
        overlap = master_forget * master_input
        forget_hat = torch.addcmul(master_forget - overlap, forget_gate, overlap)
        input_hat = torch.addcmul(master_input - overlap, input_gate, overlap)
        c_new = forget_hat * cs[t].view(shape)
        c_new = torch.addcmul(
            c_new, input_hat, candidate, out=cs[t + 1].view(shape) if step_mask is None else None
        )
        tanh_c = torch.tanh(c_new, out=tanh_cells[t].view(shape) if save_for_backward else None)
        if step_mask is None:
            torch.mul(out_gate, tanh_c, out=hs[t + 1].view(shape))
        else:
            h_new = (out_gate * tanh_c).view(batch, hidden)
            real = step_mask[t].unsqueeze(1)  # (B, 1) bool
            keep = real.to(h_new.dtype)
            torch.mul(h_new, keep, out=outputs[t])
            torch.where(real, h_new, hs[t], out=hs[t + 1])
            torch.where(real, c_new.view(batch, hidden), cs[t], out=cs[t + 1])


def _graphed_forward_steps(
    input_gates: Tensor,
    weight: Tensor,
    buffers: tuple[Tensor | None, ...],
    step_mask: Tensor | None,
    chunk_size: int,
    gemm_backend: str,
    product_dtype: torch.dtype | None,
) -> None:
    """`_torch_forward_steps` replayed from a CUDA graph (`cuda_graphs`), writing the
    same buffers."""
    hs, cs, outputs, cumaxes, activations, tanh_cells, gates_buffer = buffers
    batch = input_gates.size(1)
    masked = step_mask is not None

    def loop(input_gates, weight, hs, cs, outputs, cumaxes, activations, tanh_cells,
             gates_buffer, step_mask):  # fmt: skip
        recurrent = PackedLinear(weight, batch, gemm_backend, product_dtype)
        outputs = outputs if masked else hs[1:]
        _torch_forward_steps(input_gates, recurrent, hs, cs, outputs, cumaxes, activations,
                             tanh_cells, gates_buffer, step_mask, chunk_size)  # fmt: skip

    # without a step mask the outputs are a view of hs, which is copied back
    tensors = [input_gates, weight, hs, cs, outputs if masked else None, cumaxes, activations,
               tanh_cells, gates_buffer, step_mask]  # fmt: skip
    written = [index for index in range(2, 8) if tensors[index] is not None]
    options = (chunk_size, gemm_backend, product_dtype)
    cuda_graphs.run("ON-LSTM forward steps", loop, tensors, written, options)


def _graphed_backward_steps(
    buffers: tuple[Tensor, ...],
    gradients: tuple[Tensor | None, ...],
    weight: Tensor,
    step_mask: Tensor | None,
    chunk_size: int,
    gemm_backend: str,
    product_dtype: torch.dtype | None,
) -> tuple[Tensor, Tensor]:
    """`_torch_backward_steps` replayed from a CUDA graph (`cuda_graphs`): fills
    grad_gates (the last of ``gradients``) and returns the gradients of h0 and c0."""
    batch = buffers[0].size(1)

    def loop(activations, cumaxes, tanh_cells, cs, grad_outputs, distance_grads, grad_h,
             grad_c, grad_gates, weight, step_mask):  # fmt: skip
        to_hidden = PackedLinear(weight.t(), batch, gemm_backend, product_dtype)
        return _torch_backward_steps(activations, cumaxes, tanh_cells, cs, grad_outputs,
                                     distance_grads, grad_h, grad_c, grad_gates, to_hidden,
                                     step_mask, chunk_size)  # fmt: skip

    tensors = [*buffers, *gradients, weight, step_mask]
    options = (chunk_size, gemm_backend, product_dtype)
    grad_h, grad_c = cuda_graphs.run("ON-LSTM backward steps", loop, tensors, [8], options)
    return grad_h, grad_c


def _fused_forward_steps(
    kernel: ModuleType,
    input_gates: Tensor,
    recurrent: PackedLinear,
    hs: Tensor,
    cs: Tensor,
    outputs: Tensor,
    cumaxes: Tensor,
    activations: Tensor | None,
    tanh_cells: Tensor | None,
    gates_buffer: Tensor | None,
    step_mask: Tensor | None,
    chunk_size: int,
) -> None:
    """`_torch_forward_steps` with each step's elementwise work in one call of the compiled
    kernel (CPU, float32 or float64; the same buffers written with the same values)."""
    # Views unbound once: indexing per step would cost a view each time.
    gate_inputs, h_steps, c_steps, cumax_steps = (
        t.unbind(0) for t in (input_gates, hs, cs, cumaxes)
    )
    acts = [gates_buffer] * len(gate_inputs) if activations is None else activations.unbind(0)
    tanh_steps = [None] * len(gate_inputs) if tanh_cells is None else tanh_cells.unbind(0)
    if step_mask is None:
        masks = output_steps = [None] * len(gate_inputs)  # the outputs are hs[1:]
    else:
        masks, output_steps = step_mask.contiguous().unbind(0), outputs.unbind(0)
    for t, act in enumerate(acts):
        if recurrent.backend == "aten" and not recurrent.casts:
            recurrent.addmm(gate_inputs[t], h_steps[t], out=act)  # the add is inside the GEMM
            product = added = None
        else:  # the kernel adds the packed GEMM's product to the input projection
            product, added = recurrent.mm(h_steps[t]), gate_inputs[t]
        kernel.forward_step(
            act,
            product,
            added,
            cumax_steps[t],
            c_steps[t],
            h_steps[t],
            c_steps[t + 1],
            h_steps[t + 1],
            output_steps[t],
            tanh_steps[t],
            masks[t],
            chunk_size,
        )


def _fast_forward(
    input_gates: Tensor,
    weight: Tensor,
    h0: Tensor,
    c0: Tensor,
    step_mask: Tensor | None,
    chunk_size: int,
    save_for_backward: bool,
    gemm_backend: str = "auto",
    kernel: ModuleType | None = None,
    product_dtype: torch.dtype | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor, dict[str, Tensor]]:
    """The forward loop of `ONLSTMRecurrence`, writing every step into preallocated buffers.

    input_gates: (T, B, G) already holding both biases; weight: (G, H); ``kernel`` the fused
    per-step kernel (`fused_kernel`) or None for the torch-ops steps; ``product_dtype`` the
    dtype of the per-step products (bf16 under bf16-mixed; None: the inputs').
    Returns outputs (T, B, H), h_last, c_last (B, H), distances (T, B, 2) = (input, forget) and,
    when ``save_for_backward``, what the backward pass needs.
    """
    steps, batch, num_gates = input_gates.shape
    buffers = forward_buffers(input_gates, steps, num_gates, h0, c0, step_mask, chunk_size,
                               save_for_backward)  # fmt: skip
    hs, cs, outputs, cumaxes, activations, tanh_cells, gates_buffer = buffers
    graphed = kernel is None and cuda_graphs.enabled(input_gates)
    # h (B, H) -> h @ weight.T (B, G); a graphed loop packs its own copy of the weight
    recurrent = None if graphed else PackedLinear(weight, batch, gemm_backend, product_dtype)
    if graphed:
        _graphed_forward_steps(
            input_gates, weight, buffers, step_mask, chunk_size, gemm_backend, product_dtype
        )
    elif kernel is None:
        _torch_forward_steps(input_gates, recurrent, *buffers, step_mask, chunk_size)
    elif recurrent.backend == "treernn":
        # every step in one C++ call: products on the packed panels, elementwise work between
        masked_outputs = None if step_mask is None else outputs
        kernel.forward_sequence(
            input_gates, recurrent.packed, hs, cs, masked_outputs, cumaxes, activations,
            tanh_cells, gates_buffer, None if step_mask is None else step_mask.contiguous(),
            chunk_size,
        )  # fmt: skip
    else:
        _fused_forward_steps(kernel, input_gates, recurrent, *buffers, step_mask, chunk_size)
    distances = cumax_distances(cumaxes, step_mask)
    saved = {}
    if save_for_backward:
        saved = dict(
            activations=activations,
            cumaxes=cumaxes,
            tanh_cells=tanh_cells,
            hs=hs,
            cs=cs,
        )
    return outputs, hs[steps], cs[steps], distances, saved


def forward_buffers(
    like: Tensor,
    steps: int,
    num_gates: int,
    h0: Tensor,
    c0: Tensor,
    step_mask: Tensor | None,
    chunk_size: int,
    save_for_backward: bool,
) -> tuple[Tensor, ...]:
    """The buffers a forward loop writes, with ``like``'s dtype and device: hs, cs (T + 1, B, H)
    holding h0 and c0 first, outputs (T, B, H) (a view of hs[1:] without a step mask), cumaxes
    (T, B, 2, n), and activations (T, B, G) and tanh_cells (T, B, H) when saving for backward,
    else one (B, G) gates buffer (None in the other slots)."""
    batch, hidden = h0.shape
    n_chunk = hidden // chunk_size
    # Carried states: hs[t] and cs[t] are the state before step t, hs[T] and cs[T] the last one.
    hs = like.new_empty(steps + 1, batch, hidden)
    cs = like.new_empty(steps + 1, batch, hidden)
    hs[0] = h0
    cs[0] = c0
    outputs = hs[1:] if step_mask is None else like.new_empty(steps, batch, hidden)
    cumaxes = like.new_empty(steps, batch, 2, n_chunk)  # (cumsum_in, master_forget)
    # the gates after their nonlinearities (the master-gate logits are kept as they are) and
    # tanh(c), kept for the backward pass; without it one (B, G) buffer serves every step
    activations = like.new_empty(steps, batch, num_gates) if save_for_backward else None
    tanh_cells = like.new_empty(steps, batch, hidden) if save_for_backward else None
    gates_buffer = None if save_for_backward else like.new_empty(batch, num_gates)
    return hs, cs, outputs, cumaxes, activations, tanh_cells, gates_buffer


def cumax_distances(cumaxes: Tensor, step_mask: Tensor | None) -> Tensor:
    """(T, B, 2) = (input, forget) distances from the cumaxes (T, B, 2, n), zero at padded steps:
    input distance = sum(1 - cumsum_in) / n = 1 - sum(cumsum_in) / n; forget likewise."""
    distances = 1.0 - cumaxes.sum(-1) / cumaxes.size(-1)
    if step_mask is not None:
        distances *= step_mask.unsqueeze(-1)
    return distances


class ONLSTMRecurrence(torch.autograd.Function):
    """The ON-LSTM recurrence of one layer as one autograd node (the same numbers as
    `reference_recurrence`).

    Inputs: input_gates (T, B, G) holding W_ih x + b_ih + b_hh, weight (G, H) the DropConnect-ed
    recurrent weight, h0 and c0 (B, H), step_mask (T, B) bool or None, then chunk_size,
    gemm_backend (the per-step products' backend, `treernn.kernels.gemm`) and product_dtype
    (bf16 under bf16-mixed, else None).
    Outputs: outputs (T, B, H), h_last, c_last (B, H), distances (T, B, 2) = (input, forget).
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx, input_gates, weight, h0, c0, step_mask, chunk_size, gemm_backend="auto",
        product_dtype=None,
    ):  # fmt: skip
        kernel = fused_kernel(input_gates)
        gemm_backend = recurrence_backend(
            gemm_backend, input_gates, weight.size(1), chunk_size, kernel, product_dtype, True
        )
        inputs = (input_gates, weight, h0, c0, step_mask, chunk_size)
        outputs, h_last, c_last, distances, saved = _fast_forward(
            *inputs, True, gemm_backend, kernel, product_dtype
        )
        ctx.chunk_size = chunk_size
        ctx.gemm_backend = gemm_backend
        ctx.product_dtype = product_dtype
        ctx.kernel = kernel  # the backward pass takes the same path
        ctx.save_for_backward(weight, step_mask, *saved.values())
        # Outputs must not be views of the saved buffers (an in-place change would corrupt them).
        if step_mask is None:
            outputs = outputs.clone()
        return outputs, h_last.clone(), c_last.clone(), distances

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_outputs, grad_h_last, grad_c_last, grad_distances):  # type: ignore[override]
        weight, step_mask, activations, cumaxes, tanh_cells, hs, cs = ctx.saved_tensors
        saved = (activations, cumaxes, tanh_cells, hs, cs)
        grad_gates, grad_h, grad_c, _ = gate_gradients(
            ctx, weight, step_mask, saved, grad_outputs, grad_h_last, grad_c_last, grad_distances
        )
        grad_weight = None
        if ctx.needs_input_grad[1]:
            grad_weight = recurrent_weight_gradient(ctx, grad_gates, hs)
        return (
            grad_gates if ctx.needs_input_grad[0] else None,
            grad_weight,
            grad_h if ctx.needs_input_grad[2] else None,
            grad_c if ctx.needs_input_grad[3] else None,
            None,
            None,
            None,
            None,
        )


def gate_gradients(
    ctx,
    weight: Tensor,
    step_mask: Tensor | None,
    saved: tuple[Tensor, ...],
    grad_outputs: Tensor,
    grad_h_last: Tensor | None,
    grad_c_last: Tensor | None,
    grad_distances: Tensor | None,
    bias_gradient: bool = False,
) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
    """The reverse walk both recurrences' backward passes share: from the gradients of the
    outputs, the last state and the distances to the pre-activation gradients grad_gates
    (T, B, G), the gradients of h0 and c0, and with ``bias_gradient`` the sum of grad_gates over
    steps and rows (a bias's gradient; the one-call kernel adds it up while the rows are in cache)
    or else None. ``weight`` is the recurrent weight the forward loop multiplied by; ``saved`` =
    (activations, cumaxes, tanh_cells, hs, cs); ``ctx`` carries chunk_size, gemm_backend,
    product_dtype and the kernel."""
    activations, cumaxes, tanh_cells, hs, cs = saved
    batch = activations.size(1)
    n_chunk = weight.size(1) // ctx.chunk_size
    graphed = ctx.kernel is None and cuda_graphs.enabled(activations)
    # (B, G) -> (B, H): grad_row @ weight; a graphed loop packs its own copy of the weight
    to_hidden = None
    if not graphed:
        to_hidden = PackedLinear(weight.t(), batch, ctx.gemm_backend, ctx.product_dtype)
    distance_grads = None
    if grad_distances is not None:
        # both distances are 1 - sum(cumsum) / n (zeroed at padded steps)
        distance_grads = grad_distances / -n_chunk  # (T, B, 2)
        if step_mask is not None:
            distance_grads = distance_grads * step_mask.unsqueeze(-1)
    grad_gates = torch.empty_like(activations)  # (T, B, G), also the input_gates gradient
    # the gradients reaching the last state, updated step by step in reverse
    grad_h = torch.zeros_like(hs[0]) if grad_h_last is None else grad_h_last.contiguous().clone()
    grad_c = torch.zeros_like(cs[0]) if grad_c_last is None else grad_c_last.contiguous().clone()
    buffers = (activations, cumaxes, tanh_cells, cs)
    gradients = (grad_outputs, distance_grads, grad_h, grad_c, grad_gates)
    grad_bias = None
    if graphed:
        grad_h, grad_c = _graphed_backward_steps(
            buffers, gradients, weight, step_mask, ctx.chunk_size, ctx.gemm_backend,
            ctx.product_dtype,
        )  # fmt: skip
    elif ctx.kernel is not None and to_hidden.backend == "treernn":
        # every step in one C++ call; grad_h and grad_c updated in place
        grad_bias = grad_gates.new_empty(grad_gates.size(-1)) if bias_gradient else None
        ctx.kernel.backward_sequence(
            to_hidden.packed, activations, cumaxes, tanh_cells, cs,
            grad_outputs.contiguous(),
            None if distance_grads is None else distance_grads.contiguous(),
            grad_h, grad_c, grad_gates,
            None if step_mask is None else step_mask.contiguous(), ctx.chunk_size, grad_bias,
        )  # fmt: skip
    elif ctx.kernel is None:
        grad_h, grad_c = _torch_backward_steps(
            *buffers, *gradients, to_hidden, step_mask, ctx.chunk_size
        )
    else:
        grad_h, grad_c = _fused_backward_steps(
            ctx.kernel, *buffers, *gradients, to_hidden, step_mask, ctx.chunk_size
        )
    if bias_gradient and grad_bias is None:
        grad_bias = grad_gates.sum((0, 1))
    return grad_gates, grad_h, grad_c, grad_bias


def recurrent_weight_gradient(ctx, grad_gates: Tensor, hs: Tensor) -> Tensor:
    """The recurrent weight's gradient: one (G, T*B) x (T*B, H) product instead of T rank-B
    updates."""
    num_gates, hidden = grad_gates.size(-1), hs.size(-1)
    return weight_gradient(
        grad_gates.view(-1, num_gates),
        hs[:-1].reshape(-1, hidden),
        ctx.gemm_backend,
        ctx.product_dtype,
    )


def _torch_backward_steps(
    activations: Tensor,
    cumaxes: Tensor,
    tanh_cells: Tensor,
    cs: Tensor,
    grad_outputs: Tensor,
    distance_grads: Tensor | None,
    grad_h: Tensor,
    grad_c: Tensor,
    grad_gates: Tensor,
    to_hidden: PackedLinear,
    step_mask: Tensor | None,
    chunk_size: int,
) -> tuple[Tensor, Tensor]:
    """The reverse walk of `ONLSTMRecurrence.backward` in torch ops (any device and dtype):
    fills grad_gates (T, B, G) and returns the gradients of h0 and c0, from the saved buffers,
    the output gradients, the distance gradients (T, B, 2) or None, and the gradients grad_h,
    grad_c (B, H) reaching the last state."""
    steps, batch, _ = activations.shape
    hidden = cs.size(-1)
    n_chunk = hidden // chunk_size
    shape = (batch, n_chunk, chunk_size)
    full = (steps, batch, n_chunk, chunk_size)

    # Everything that does not depend on the incoming gradient, for all steps at once (large
    # vectorised ops instead of many small ones inside the loop).
    gates = activations[:, :, 2 * n_chunk :].view(steps, batch, 4, n_chunk, chunk_size)
    out_gate, candidate, input_gate, forget_gate = gates.unbind(2)  # (T, B, n, C)
    logits = activations[:, :, : 2 * n_chunk].view(steps, batch, 2, n_chunk)
    softmaxes = torch.softmax(logits, dim=-1)  # as in the forward pass, all steps at once
    master_input = (1.0 - cumaxes[:, :, 0]).unsqueeze(-1)  # (T, B, n, 1)
    master_forget = cumaxes[:, :, 1].unsqueeze(-1)
    overlap = master_forget * master_input
    forget_hat = torch.addcmul(master_forget - overlap, forget_gate, overlap)
    input_hat = torch.addcmul(master_input - overlap, input_gate, overlap)
    c_prev = cs[:-1].view(full)
    tanh_c = tanh_cells.view(full)
    # d h_new -> d c_new (through tanh) and -> d output-gate pre-activation
    h_to_cell = out_gate * (1.0 - tanh_c * tanh_c)
    h_to_out_gate = tanh_c * out_gate * (1.0 - out_gate)
    # d c_new -> d (candidate, input gate, forget gate) pre-activations
    cell_to_neurons = torch.stack(
        (
            input_hat * (1.0 - candidate * candidate),
            candidate * overlap * input_gate * (1.0 - input_gate),
            c_prev * overlap * forget_gate * (1.0 - forget_gate),
        ),
        dim=2,
    )  # (T, B, 3, n, C)
    # d c_new -> d cumsum_in (master_input = 1 - cumsum_in), d master_forget, d overlap,
    # each still to be summed over the chunk.
    cell_to_masters = torch.stack(
        (
            -candidate,
            c_prev,
            torch.addcmul(c_prev * (forget_gate - 1.0), candidate, input_gate - 1.0),
        ),
        dim=2,
    )  # (T, B, 3, n, C)
    # d overlap -> d cumsum_in (overlap = (1 - cumsum_in) * cumsum_f) and d cumsum_f
    overlap_to_cumax = torch.stack(
        (-master_forget.squeeze(-1), master_input.squeeze(-1)), dim=2
    )  # (T, B, 2, n)
    if distance_grads is not None:
        distance_grads = distance_grads.unsqueeze(-1)  # (T, B, 2, 1)
    # The gradient of a cumsum is the reverse cumsum: g @ lower-triangular ones.
    reverse_cumsum = torch.ones(n_chunk, n_chunk, dtype=cs.dtype, device=cs.device).tril()
    if step_mask is not None:
        keeps = step_mask.unsqueeze(-1).to(cs.dtype)  # (T, B, 1)
    del gates, out_gate, candidate, input_gate, forget_gate, overlap, input_hat

    for t in range(steps - 1, -1, -1):
        # Gradients reaching this step's new h and c (zero at a padded step, where the
        # carried state passes straight through to the previous step).
        grad_h_new = grad_h + grad_outputs[t]
        grad_c_new = grad_c
        if step_mask is not None:
            grad_h_new = grad_h_new * keeps[t]
            grad_c_new = grad_c * keeps[t]
        grad_h_new = grad_h_new.view(shape)
        grad_cell = torch.addcmul(grad_c_new.view(shape), grad_h_new, h_to_cell[t])

        # Pre-activation gradients, written straight into this step's row of grad_gates.
        grad_row = grad_gates[t]
        grad_neurons = grad_row[:, 2 * n_chunk :].view(batch, 4, n_chunk, chunk_size)
        torch.mul(grad_h_new, h_to_out_gate[t], out=grad_neurons[:, 0])
        torch.mul(grad_cell.unsqueeze(1), cell_to_neurons[t], out=grad_neurons[:, 1:])
        # Master gates: gradients w.r.t. the two cumsums (B, 2, n), then cumsum, softmax.
        chunk_sums = (grad_cell.unsqueeze(1) * cell_to_masters[t]).sum(-1)  # (B, 3, n)
        grad_cumax = torch.addcmul(chunk_sums[:, :2], chunk_sums[:, 2:], overlap_to_cumax[t])
        if distance_grads is not None:
            grad_cumax += distance_grads[t]
        grad_softmax = grad_cumax @ reverse_cumsum  # (B, 2, n)
        softmax = softmaxes[t]
        grad_softmax -= (grad_softmax * softmax).sum(-1, keepdim=True)
        torch.mul(softmax, grad_softmax, out=grad_row[:, : 2 * n_chunk].view(batch, 2, n_chunk))

        grad_c_prev = (grad_cell * forget_hat[t]).view(batch, hidden)
        if step_mask is not None:
            skip = 1.0 - keeps[t]
            grad_c_prev = torch.addcmul(grad_c_prev, grad_c, skip)
            grad_h = to_hidden.addmm(grad_h * skip, grad_row)
        else:
            grad_h = to_hidden.mm(grad_row)  # (B, H)
        grad_c = grad_c_prev
    return grad_h, grad_c


def _fused_backward_steps(
    kernel: ModuleType,
    activations: Tensor,
    cumaxes: Tensor,
    tanh_cells: Tensor,
    cs: Tensor,
    grad_outputs: Tensor,
    distance_grads: Tensor | None,
    grad_h: Tensor,
    grad_c: Tensor,
    grad_gates: Tensor,
    to_hidden: PackedLinear,
    step_mask: Tensor | None,
    chunk_size: int,
) -> tuple[Tensor, Tensor]:
    """`_torch_backward_steps` with each step's elementwise work in one call of the
    compiled kernel, which recomputes per step what the torch-ops path precomputes for all steps
    (less memory traffic). grad_h and grad_c are updated in place."""
    steps = activations.size(0)
    step_views = [t.unbind(0) for t in (activations, cumaxes, tanh_cells, cs, grad_gates)]
    acts, cumax_steps, tanh_steps, c_steps, grad_rows = step_views
    grad_output_steps = grad_outputs.contiguous().unbind(0)
    no_steps = [None] * steps
    distance_steps = no_steps if distance_grads is None else distance_grads.contiguous().unbind(0)
    masks = no_steps if step_mask is None else step_mask.contiguous().unbind(0)
    for t in range(steps - 1, -1, -1):
        kernel.backward_step(
            acts[t],
            cumax_steps[t],
            tanh_steps[t],
            c_steps[t],
            grad_output_steps[t],
            distance_steps[t],
            grad_h,
            grad_c,
            grad_rows[t],
            masks[t],
            chunk_size,
        )
        if step_mask is None:
            grad_h = to_hidden.mm(grad_rows[t])  # (B, H)
        else:
            # at a padded step the kernel has left grad_h as the part that skips the step
            grad_h = to_hidden.addmm(grad_h, grad_rows[t])
    return grad_h, grad_c


def fast_recurrence(
    input_gates: Tensor,
    recurrent_weight: Tensor,
    h0: Tensor,
    c0: Tensor,
    step_mask: Tensor | None,
    chunk_size: int,
    gemm_backend: str = "auto",
    product_dtype: torch.dtype | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """The results of `reference_recurrence`, computed by `ONLSTMRecurrence` (or by
    its forward loop alone when no gradient is needed). ``input_gates`` (T, B, G) already holds
    the recurrent bias too (it is constant over time, so it folds into the input projection).
    ``gemm_backend`` names the per-step products' backend (`treernn.kernels.gemm`);
    ``product_dtype`` (bf16 under bf16-mixed) the dtype they run in, everything else staying in
    the inputs' dtype (fp32)."""
    needs_grad = torch.is_grad_enabled() and any(
        tensor.requires_grad for tensor in (input_gates, recurrent_weight, h0, c0)
    )
    if needs_grad:
        inputs = (input_gates.contiguous(), recurrent_weight, h0, c0, step_mask)
        outputs, h, c, distances = ONLSTMRecurrence.apply(
            *inputs, chunk_size, gemm_backend, product_dtype
        )
    else:
        kernel = fused_kernel(input_gates)
        hidden = recurrent_weight.size(1)
        with torch.no_grad():
            outputs, h, c, distances, _ = _fast_forward(
                input_gates.contiguous(),
                recurrent_weight,
                h0,
                c0,
                step_mask,
                chunk_size,
                False,
                recurrence_backend(
                    gemm_backend, input_gates, hidden, chunk_size, kernel, product_dtype
                ),
                kernel,
                product_dtype,
            )
    return outputs, h, c, distances[..., 1], distances[..., 0]


def recurrence_backend(
    requested: str,
    input_gates: Tensor,
    hidden: int,
    chunk_size: int,
    kernel: ModuleType | None,
    product_dtype: torch.dtype | None,
    training: bool = False,
) -> str:
    """The GEMM backend of the per-step products. ``"auto"`` with the compiled kernel on CPU in
    float32: the fastest here of `gemm.candidates`, timed as the recurrence runs them (a
    loop of a few steps: the ``treernn`` backend loops in C++, the others in Python with one
    product and one kernel call per step; forward only for inference, forward and backward for
    ``training``, each decided on its own: on an AMD Zen 5 at the paper's 1150 oneDNN's products
    win the forward loop and lose the training step), probed once per shape and kept like the
    GEMM choices. Otherwise ``requested`` as it is (``"auto"``: `PackedLinear` resolves it
    per product shape)."""
    requested = gemm.requested_backend(requested)
    steps, batch, num_gates = input_gates.shape
    if requested != "auto" or kernel is None or input_gates.dtype != torch.float32 or batch == 0:
        return requested
    dtype = product_dtype or input_gates.dtype
    usable = gemm.candidates(input_gates.device, dtype)
    if len(usable) == 1:
        return usable[0]
    label = f"ON-LSTM recurrence {str(dtype).replace('torch.', '')}"
    label += ", training" if training else ""
    key = (batch, hidden, num_gates, label, torch.get_num_threads())
    sizes = (batch, hidden, chunk_size, kernel, dtype, training)
    probe = functools.partial(_probe_recurrence, usable, *sizes)
    # without a probe (the run's probing budget spent): the compiled loop, no Python per step
    return gemm.kept_choice(key, usable, probe, default="treernn")


#: steps of the loops the probes time (about a BPTT segment: the weight is packed once per call)
PROBE_STEPS = 32
#: fewer steps where a step's products exceed this many FLOPs over `PROBE_STEPS` (but at
#: least `MIN_PROBE_STEPS`): at the paper's 1150 (batch 20) a probe of 32 training steps
#: took 21 GFLOP a call, seconds on 2 cores, and the packing the steps share is then small
#: beside one step's products
PROBE_FLOPS = 5e8
MIN_PROBE_STEPS = 4


#: the fewest steps a precision probe's loop times: a loop converts its weights to bf16 and
#: makes their transposes once per call, and over fewer steps that set-up hides what bf16 saves
#: per step. On a 2-core AMD Zen 4
#: (AVX512-BF16, no AMX), the paper-size training loop with the projection inside, (20 x 2300)
#: @ (2300 x 4830): bf16 0.69x fp32 over 4 steps, 1.27x over 16, 1.52x over 70 (a BPTT
#: segment); over 4 steps the probe kept fp32, and ON-LSTM trained under bf16-mixed at 1.05x
#: fp32, against 1.65x with its loops in bf16. The placement probe keeps `probe_steps`: at 16
#: steps it moved two of the paper's layers' projections out of the loop, as fast in fp32 and
#: 0.70x as fast in bf16 inference, where the loop's bf16 products pay most
PRECISION_PROBE_STEPS = 16


def probe_steps(batch: int, hidden: int, num_gates: int) -> int:
    """The steps of a probe's loop at these sizes (`PROBE_STEPS` but for large shapes)."""
    per_step = 2.0 * batch * hidden * num_gates
    return max(MIN_PROBE_STEPS, min(PROBE_STEPS, int(PROBE_FLOPS / max(per_step, 1.0))))


def precision_probe_steps(batch: int, hidden: int, num_gates: int) -> int:
    """The steps of a precision probe's loop: `probe_steps`, but at least
    `PRECISION_PROBE_STEPS`."""
    return max(PRECISION_PROBE_STEPS, probe_steps(batch, hidden, num_gates))


def _probe_loop(
    batch,
    hidden,
    chunk_size,
    kernel,
    backend,
    product_dtype,
    training=False,
    device=gemm.CPU,
    steps=None,
):
    """A forward loop of ``steps`` (default `probe_steps`) steps on random data (a closure) and
    its FLOPs;
    ``training``: the recurrence's autograd node forward and backward (the gradients of the
    inputs and of the weight: three products per step's worth of FLOPs). The data come from a
    generator of their own: probing draws nothing from the run's random streams. The probes
    time it through `gemm.time_in_turns`, with autocast off, as the layer runs it (a probe
    asked inside a bf16-mixed forward would otherwise run the backward pass's products in bf16,
    and the compiled step refuse their state)."""
    num_gates = gate_count(hidden, chunk_size)
    steps = steps or probe_steps(batch, hidden, num_gates)
    generator = torch.Generator().manual_seed(0)
    gates = torch.randn(steps, batch, num_gates, generator=generator).to(device)
    weight = (torch.randn(num_gates, hidden, generator=generator) / hidden**0.5).to(device)
    state = torch.zeros(batch, hidden, device=device)
    flops = 2.0 * steps * batch * hidden * num_gates
    if training:
        gates.requires_grad_(True)
        weight.requires_grad_(True)

        def step() -> None:
            with torch.enable_grad():
                outputs = ONLSTMRecurrence.apply(
                    gates, weight, state, state, None, chunk_size, backend, product_dtype
                )[0]
                torch.autograd.grad(outputs.sum(), (gates, weight))

        return step, 3 * flops
    arguments = (gates, weight, state, state, None, chunk_size, False, backend, kernel)
    return functools.partial(_fast_forward, *arguments, product_dtype), flops


def precision_runs(
    batch: int,
    hidden: int,
    chunk_size: int,
    kernel: ModuleType | None,
    device: torch.device = gemm.CPU,
    training: bool = False,
):
    """For `gemm.product_dtype`: the recurrence's loop with fp32 and with bf16 products, each
    on its own fastest backend (`recurrence_backend`), over `precision_probe_steps` steps, to be
    timed against each other: forward
    and backward for ``training``, where bf16 runs the backward pass's products too (timed
    forward only, the paper-size ON-LSTM kept its recurrent products fp32 on an AMX Xeon and
    trained at 1.22x fp32 under bf16-mixed, against 1.57x with them in bf16). Off the CPU (a
    GPU, no compiled kernel): the torch-ops recurrence on ``device`` as it will run, forward
    and backward for ``training``: at these sizes a GPU recurrence is
    bound by its kernel launches, and bf16 products add a cast per step each way, so that a
    product faster alone made a whole training step slower (an H100, paper size: bf16 products
    chosen by the products alone, training 0.80x fp32). None on a CPU without the compiled
    kernel (the products alone are probed then)."""
    if kernel is None and device.type != "cpu":
        return functools.partial(_own_loops, batch, hidden, chunk_size, device, training)
    if kernel is None:
        return None

    steps = precision_probe_steps(batch, hidden, gate_count(hidden, chunk_size))

    def runs():
        loops = {}
        for name, dtype in (("float32", None), ("bfloat16", torch.bfloat16)):
            gates = torch.zeros(1, batch, gate_count(hidden, chunk_size))
            backend = recurrence_backend("auto", gates, hidden, chunk_size, kernel, dtype, training)
            loops[name], flops = _probe_loop(
                batch, hidden, chunk_size, kernel, backend, dtype, training, steps=steps
            )
        return loops, flops

    return runs


def _own_loops(batch, hidden, chunk_size, device, training):
    """The torch-ops recurrence's loop on ``device`` with fp32 and with bf16 products, and the
    FLOPs of one (see `precision_runs`)."""
    loops = {}
    for name, dtype in (("float32", None), ("bfloat16", torch.bfloat16)):
        loops[name], flops = _probe_loop(
            batch, hidden, chunk_size, None, "auto", dtype, training, device
        )
    return loops, flops


def _probe_recurrence(usable, batch, hidden, chunk_size, kernel, dtype, training=False) -> str:
    product_dtype = None if dtype == torch.float32 else dtype
    loops = {}
    for name in usable:
        loops[name], flops = _probe_loop(
            batch, hidden, chunk_size, kernel, name, product_dtype, training
        )
    seconds = gemm.time_in_turns(loops, flops)
    choice = min(seconds, key=seconds.get)
    log.info(
        "ON-LSTM recurrence backend for batch %d, hidden %d (chunk %d), %s products%s, "
        "%d threads: %s (GFLOP/s of its products, loop included: %s)",
        batch,
        hidden,
        chunk_size,
        str(dtype).replace("torch.", ""),
        ", training" if training else "",
        torch.get_num_threads(),
        choice,
        ", ".join(f"{name} {flops / value / 1e9:.0f}" for name, value in seconds.items()),
    )
    return choice
