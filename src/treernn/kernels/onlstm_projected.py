"""The ON-LSTM recurrence with the input projection inside its step loop, on the ``treernn``
backend: per step one product over [x_t | h_t] with [W_ih | W_hh] packed as one weight
(``forward_sequence_projected`` and ``pack_projected`` in ``csrc/onlstm_step.cpp``), instead of
a (T, B, G) projection over all steps written to memory and read back by
`treernn.kernels.onlstm.fast_recurrence`. Same numbers (tested against the projection
followed by the recurrence, results and gradients, in float64); the outputs come back
batch-first as the kernel writes them.

Which is faster depends on the shape and the machine, and so does how the threads share the
loop (``loop``: each step's outputs split between them; ``rows``: each its own batch rows), so a
probe decides per layer shape (`projection_placement`). On a 2-core AMD Zen 4
(``scripts/benchmark_recurrence.py``, ratios to nn.LSTM in one run, medians of five) it took one
layer of 256 (batch 32, BPTT 35) from 0.74x to 0.93x in inference (0.95x with the encoder's
one call per layer, ``infer_projected``) and from 0.90x to 0.97x in training; at the paper's
middle layer (1150 -> 1150, batch 20) the projection over all steps
stays faster: [W_ih | W_hh] (4830 x 2300 floats) streams from memory at every step.
"""

from __future__ import annotations

import functools
import logging
import os
from types import ModuleType

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from treernn.errors import ConfigValueError
from treernn.kernels import cpp_ext, gemm
from treernn.kernels.gemm import input_gradient, weight_gradient
from treernn.kernels.onlstm import (
    fast_recurrence,
    forward_buffers,
    fused_kernel,
    gate_count,
    gate_gradients,
    precision_probe_steps,
    probe_steps,
    recurrence_backend,
    recurrent_weight_gradient,
)

log = logging.getLogger(__name__)

#: where ON-LSTM's input projection runs on the ``treernn`` backend: ``auto`` (unset) as a probe
#: finds faster here at the layer's shape; ``loop`` inside the step loop, the threads sharing
#: each step's outputs (two barriers a step); ``rows`` inside the loop, each thread running its
#: own batch rows through every step (no barrier; each reads the whole weight); ``separate`` as
#: one product over all steps first (read at each call; the benchmark's before-and-after switch)
ENV_VAR = "TREERNN_ONLSTM_PROJECTION"
PLACEMENTS = ("auto", "loop", "rows", "separate")
IN_LOOP = ("loop", "rows")
#: this process's probed placements (not those forced by `ENV_VAR`), (batch, depth,
#: hidden) -> one of loop, rows, separate (the benchmark prints them)
DECISIONS: dict[tuple[int, int, int], str] = {}
#: each placement in words
#: the projection leaves the loop only where that is at least 1 / this as fast: in fp32 the
#: placements of a paper-size layer often time within noise of each other, and the loop is
#: where bf16-mixed runs a layer fastest (one loop, one precision): on a 2-core AMD Zen 4 the
#: middle layer, timed 1.04x as fast over all steps first as in the loop, ran the paper's
#: bf16-mixed inference at 1.47x fp32 against 1.92x with it in the loop, fp32 alike
SEPARATE_MARGIN = 0.9

WHERE = {
    "loop": "inside the step loop, threads sharing each step",
    "rows": "inside the step loop, each thread its own batch rows",
    "separate": "over all steps first",
}


def projection_placement(
    batch: int, depth: int, hidden: int, chunk_size: int, kernel: ModuleType, dtype: torch.dtype
) -> str:
    """``"loop"``, ``"rows"`` or ``"separate"`` (`ENV_VAR`): where the input projection of a
    layer with these sizes runs on the ``treernn`` backend. ``TREERNN_ONLSTM_PROJECTION`` decides
    when set; otherwise float32 is probed once per shape and machine (kept like the GEMM
    choices). Float64 (the tests) takes the loop."""
    value = os.environ.get(ENV_VAR, "auto") or "auto"
    if value not in PLACEMENTS:
        raise ConfigValueError(f"{ENV_VAR}={value!r} is not one of {', '.join(PLACEMENTS)}.")
    if value != "auto":
        return value
    if dtype != torch.float32:
        return "loop"
    num_gates = gate_count(hidden, chunk_size)
    label = f"ON-LSTM input projection from {depth}"
    key = (batch, hidden, num_gates, label, torch.get_num_threads())
    # without a probe (the run's budget spent): the last, separate, as without the compiled loop
    value = gemm.kept_choice(
        key, ["loop", "rows", "separate"],
        lambda: _probe_placement(batch, depth, hidden, chunk_size, kernel),
    )  # fmt: skip
    DECISIONS[(batch, depth, hidden)] = value
    return value


def loop_placement(
    batch: int,
    depth: int,
    hidden: int,
    chunk_size: int,
    dtype: torch.dtype,
    device: torch.device,
    gemm_backend: str,
    kernel: ModuleType,
    training: bool = False,
) -> str:
    """Where the input projection of a layer of these sizes runs (``loop``, ``rows`` or
    ``separate``, as `projection_placement`) when its products are the inputs' dtype:
    inside the loop only on the ``treernn`` backend (`recurrence_backend`, for
    ``training`` or inference). Decided once per process, shape, mode and environment
    (`gemm.remembered`): the forward calls of a model ask it at every step of training and
    inference."""
    env = tuple(os.environ.get(name) for name in (ENV_VAR, gemm.ENV_VAR, cpp_ext.ENV_VAR))
    key = ("ON-LSTM placement", batch, depth, hidden, chunk_size, dtype, device.type, gemm_backend)

    def decide() -> str:
        sizes = (batch, depth, hidden, chunk_size, dtype)
        return _decide_placement(*sizes, device, gemm_backend, kernel, training)

    return gemm.remembered((*key, training, torch.get_num_threads(), *env), decide)


def _decide_placement(
    batch, depth, hidden, chunk_size, dtype, device, gemm_backend, kernel, training
):
    if "treernn" not in gemm.candidates(device, dtype):
        return "separate"
    num_gates = gate_count(hidden, chunk_size)
    shape = torch.empty(0, batch, num_gates, dtype=dtype, device=device)  # what the probe reads
    backend = recurrence_backend(gemm_backend, shape, hidden, chunk_size, kernel, None, training)
    if backend != "treernn":
        return "separate"
    return projection_placement(batch, depth, hidden, chunk_size, kernel, dtype)


def _probe_data(batch: int, depth: int, hidden: int, num_gates: int, steps: int | None = None):
    """A probe's random problem of ``steps`` (default `probe_steps`) steps, from a generator of
    its own (probing draws nothing from the run's random streams): inputs (T, B, D), W_ih,
    W_hh, a zero bias and a zero state."""
    generator = torch.Generator().manual_seed(0)
    steps = steps or probe_steps(batch, hidden, num_gates)
    inputs = torch.randn(steps, batch, depth, generator=generator)
    input_weight = torch.randn(num_gates, depth, generator=generator) / depth**0.5
    recurrent_weight = torch.randn(num_gates, hidden, generator=generator) / hidden**0.5
    return (
        inputs,
        input_weight,
        recurrent_weight,
        torch.zeros(num_gates),
        torch.zeros(batch, hidden),
    )


def _placement_choice(seconds: dict[str, float]) -> str:
    """The fastest of the timed placements, but the faster in-loop one unless the projection over
    all steps first is at least 1 / `SEPARATE_MARGIN` times as fast."""
    in_loop = [name for name in IN_LOOP if name in seconds]
    if not in_loop:
        return min(seconds, key=seconds.get)
    fastest_in_loop = min(in_loop, key=seconds.get)
    separate = seconds.get("separate", float("inf"))
    return "separate" if separate < SEPARATE_MARGIN * seconds[fastest_in_loop] else fastest_in_loop


def _probe_placement(batch: int, depth: int, hidden: int, chunk_size: int, kernel) -> str:
    """Times the placements on random data (forward loops of `probe_steps` steps, the
    weights packed per call as in training) and returns the fastest (`_placement_choice`)."""
    num_gates = gate_count(hidden, chunk_size)
    inputs, input_weight, recurrent_weight, bias, state = _probe_data(
        batch, depth, hidden, num_gates
    )

    def in_loop(placement):
        packed = _pack(kernel, input_weight, recurrent_weight, 1.0)
        return _projected_forward(
            kernel, inputs, packed, bias, state, state, None, chunk_size, placement == "rows"
        )

    def separate():
        gates = gemm.linear(inputs, input_weight, bias)
        return fast_recurrence(gates, recurrent_weight, state, state, None, chunk_size, "treernn")

    flops = 2.0 * inputs.size(0) * batch * (depth + hidden) * num_gates
    runs = {"loop": lambda: in_loop("loop"), "rows": lambda: in_loop("rows"), "separate": separate}
    seconds = gemm.time_in_turns(runs, flops)
    choice = _placement_choice(seconds)
    log.info(
        "ON-LSTM input projection for batch %d, %d -> %d (chunk %d), %d threads: %s "
        "(GFLOP/s, loop included: %s)",
        batch,
        depth,
        hidden,
        chunk_size,
        torch.get_num_threads(),
        WHERE[choice],
        ", ".join(f"{name} {flops / value / 1e9:.0f}" for name, value in seconds.items()),
    )
    return choice


def loop_precision_runs(
    batch: int,
    depth: int,
    hidden: int,
    chunk_size: int,
    kernel: ModuleType,
    placement: str,
    training: bool,
):
    """For `gemm.product_dtype`: a layer's loop with the projection inside it at
    ``placement`` (``loop`` or ``rows``), over `precision_probe_steps` steps of random data, with
    fp32 and with bf16 products, as it runs in the mode: the one-call inference
    (`infer_in_loop`), or for ``training`` the autograd node's forward and backward
    (`ONLSTMProjectedRecurrence`, gradients of the inputs and both weights). Where the
    projection runs inside the loop it is no product of its own, so the layer's precision is
    decided once, on this loop: deciding the two products apart could ask one in bf16 and the
    other in fp32, which sends the layer down the slower separate path (a 2-core AMD Zen 4, one
    layer of 256: 1.13x fp32 in training and 1.03x in inference, against 1.56x and 1.67x with
    both in bf16 inside the loop). The data come from a generator of the probe's own and the
    gradients are returned, not accumulated, so a run does not depend on whether the choice was
    already kept."""

    def runs():
        num_gates = gate_count(hidden, chunk_size)
        steps = precision_probe_steps(batch, hidden, num_gates)
        data = _probe_data(batch, depth, hidden, num_gates, steps)
        inputs, input_weight, recurrent_weight, bias, state = data
        own_rows = placement == "rows"

        def infer(bf16: bool):
            return infer_in_loop(
                kernel, inputs, input_weight, bias, recurrent_weight, None, None, None,
                chunk_size, own_rows, bf16=bf16,
            )  # fmt: skip

        def train(bf16: bool):
            leaves = [t.clone().requires_grad_() for t in (inputs, input_weight, recurrent_weight)]
            outputs = ONLSTMProjectedRecurrence.apply(
                leaves[0], leaves[1], bias, leaves[2], state, state, None, chunk_size, "auto",
                1.0, own_rows, torch.bfloat16 if bf16 else None,
            )[0]  # fmt: skip
            return torch.autograd.grad(outputs.sum(), leaves)

        def run(bf16: bool):  # as the layer runs it: autocast off inside, autograd as the mode
            with torch.autocast("cpu", enabled=False), torch.set_grad_enabled(training):
                return (train if training else infer)(bf16)

        loops = {"float32": functools.partial(run, False)}
        if gemm.treernn_available(torch.bfloat16):
            loops["bfloat16"] = functools.partial(run, True)
        passes = 3 if training else 1  # the backward pass's products: twice the forward's
        return loops, passes * 2.0 * inputs.size(0) * batch * (depth + hidden) * num_gates

    return runs


def fast_projected_recurrence(
    inputs: Tensor,
    input_weight: Tensor,
    bias: Tensor,
    recurrent_weight: Tensor,
    h0: Tensor | None,
    c0: Tensor | None,
    step_mask: Tensor | None,
    chunk_size: int,
    gemm_backend: str = "auto",
    projection_dtype: torch.dtype | None = None,
    product_dtype: torch.dtype | None = None,
    recurrent_scale: float = 1.0,
    recurrent_bias: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """`fast_recurrence` of the input projection ``inputs @ input_weight.T + bias``
    (inputs (T, B, D), any strides; bias (G,), plus ``recurrent_bias`` if given) with the
    recurrent weight ``recurrent_weight * recurrent_scale`` (DropConnect in eval), from h0 and c0
    (B, H) (None: zeros), the same results.

    Where the per-step products run in fp32 (or float64) on the ``treernn`` backend with the
    compiled kernel (`recurrence_backend` picks it on CPUs where it is the fastest), the
    projection runs inside the step loop: one product per step over [x_t | h_t] with
    [W_ih | W_hh] packed as one weight, so that no (T, B, G) projection is written and read back,
    and a batch-first input is read where it lies; with gradients to compute as the autograd node
    `ONLSTMProjectedRecurrence`. So too where both products are asked in bf16
    (`in_loop_bf16`), at the place the fp32 probe chose. Otherwise (one product in bf16,
    another backend, CUDA) the projection is one product over all steps (`gemm.linear`, in
    ``projection_dtype``) and `fast_recurrence` runs on it.

    Inference (nothing to differentiate) inside the loop is one call of the compiled
    ``infer_projected``: biases added, weights packed, zero states and buffers made there, only
    the last state kept. At the small sizes the dozen small torch ops it replaces cost as much as
    the packing, each run from caches the step loop has just flushed.
    """
    steps, batch, _ = inputs.shape
    hidden = recurrent_weight.size(1)
    kernel = fused_kernel(inputs)
    tensors = (inputs, input_weight, bias, recurrent_weight, h0, c0, recurrent_bias)
    needs_grad = torch.is_grad_enabled() and any(
        tensor is not None and tensor.requires_grad for tensor in tensors
    )
    placement = "separate"
    bf16 = in_loop_bf16(inputs, projection_dtype, product_dtype)
    if (
        kernel is not None
        and (bf16 or (projection_dtype is None and product_dtype is None))
        and steps * batch > 0
        and inputs.stride(-1) == 1
    ):
        placement = loop_placement(
            batch, inputs.size(-1), hidden, chunk_size, inputs.dtype, inputs.device, gemm_backend,
            kernel, needs_grad,
        )  # fmt: skip
    own_rows = placement == "rows"
    if placement in IN_LOOP and not needs_grad:
        batch_first, h, c, distances = infer_in_loop(
            kernel, inputs, input_weight, bias, recurrent_weight, h0, c0, step_mask, chunk_size,
            own_rows, recurrent_scale, recurrent_bias, bf16,
        )  # fmt: skip
        return batch_first.transpose(0, 1), h, c, distances[..., 1], distances[..., 0]
    h0 = inputs.new_zeros(batch, hidden) if h0 is None else h0
    c0 = inputs.new_zeros(batch, hidden) if c0 is None else c0
    if recurrent_bias is not None:
        bias = bias + recurrent_bias
    if placement in IN_LOOP:
        outputs, h, c, distances = ONLSTMProjectedRecurrence.apply(
            inputs, input_weight, bias, recurrent_weight, h0, c0, step_mask, chunk_size,
            gemm_backend, recurrent_scale, own_rows, torch.bfloat16 if bf16 else None,
        )  # fmt: skip
        return outputs, h, c, distances[..., 1], distances[..., 0]
    if recurrent_scale != 1.0:
        recurrent_weight = recurrent_weight * recurrent_scale
    input_gates = gemm.linear(inputs, input_weight, bias, gemm_backend, projection_dtype)
    return fast_recurrence(
        input_gates, recurrent_weight, h0, c0, step_mask, chunk_size, gemm_backend, product_dtype
    )


def in_loop_bf16(
    inputs: Tensor, projection_dtype: torch.dtype | None, product_dtype: torch.dtype | None
) -> bool:
    """Whether the loop with the projection inside it runs its products in bf16: both products
    asked in bf16 (under bf16-mixed, where the probes found bf16 faster), float32 inputs, and
    ``treernn``'s bf16 kernels on this CPU (AVX512-BF16; AMX's tiles where it has them). Its
    products then read the bf16 weight and the states and inputs rounded to bf16, with float32
    sums, as the separate projection's and the recurrence's bf16 products do; everything else
    stays float32."""
    return (
        projection_dtype == torch.bfloat16
        and product_dtype == torch.bfloat16
        and inputs.dtype == torch.float32
        and gemm.treernn_available(torch.bfloat16)
    )


def infer_in_loop(
    kernel: ModuleType,
    inputs: Tensor,
    input_weight: Tensor,
    bias: Tensor,
    recurrent_weight: Tensor,
    h0: Tensor | None,
    c0: Tensor | None,
    step_mask: Tensor | None,
    chunk_size: int,
    own_rows: bool,
    recurrent_scale: float = 1.0,
    recurrent_bias: Tensor | None = None,
    bf16: bool = False,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Inference with the projection inside the loop in one call of the compiled
    ``infer_projected`` (arguments as `fast_projected_recurrence`'s; ``bf16``: its products
    in bf16, see `in_loop_bf16`). Returns the outputs batch-first (B, T, H), h_last, c_last
    (B, H) and the distances (T, B, 2) = (input, forget)."""
    return kernel.infer_projected(
        inputs, input_weight, recurrent_weight, recurrent_scale, bias, recurrent_bias, h0, c0,
        None if step_mask is None else step_mask.contiguous(), chunk_size, own_rows, bf16=bf16,
    )  # fmt: skip


def _pack(
    kernel: ModuleType,
    input_weight: Tensor,
    recurrent_weight: Tensor,
    scale: float,
    bf16: bool = False,
) -> Tensor:
    """[W_ih | scale * W_hh] packed as one weight (``pack_projected``; as bf16 pairs with
    ``bf16``), once per call: in training DropConnect gives each call its own recurrent weight,
    and a packing kept across eval calls could go stale silently (a ``.data`` write does not
    bump the version counter)."""
    weights = (input_weight.detach().contiguous(), recurrent_weight.detach().contiguous())
    return kernel.pack_projected(*weights, scale, bf16)


def _projected_forward(
    kernel: ModuleType,
    inputs: Tensor,
    packed: Tensor,
    bias: Tensor,
    h0: Tensor,
    c0: Tensor,
    step_mask: Tensor | None,
    chunk_size: int,
    own_rows: bool = False,
    save_for_backward: bool = False,
) -> tuple[Tensor, Tensor, Tensor, Tensor, tuple[Tensor, ...]]:
    """The forward loop of `fast_projected_recurrence` in one call of the compiled kernel
    (``forward_sequence_projected``) with the packed [W_ih | W_hh] (`_pack`); with
    ``own_rows`` each thread runs its own batch rows (the ``rows`` placement).
    Returns outputs (T, B, H), h_last, c_last (B, H), the distances (T, B, 2) = (input, forget)
    and the buffers of `forward_buffers` (what the backward pass reads when saving)."""
    steps, batch, _ = inputs.shape
    num_gates, hidden = bias.size(0), h0.size(1)
    buffers = forward_buffers(
        inputs, steps, num_gates, h0, c0, step_mask, chunk_size, save_for_backward
    )
    hs, cs, outputs, cumaxes, activations, tanh_cells, gates_buffer = buffers
    # the outputs written batch-first as well (a batch-first caller then copies nothing), and the
    # distances, by the kernel while each row is in its cache
    batch_first = inputs.new_empty(batch, steps, hidden)
    distances = inputs.new_empty(steps, batch, 2)
    kernel.forward_sequence_projected(
        inputs, bias.to(inputs.dtype).contiguous(), packed, hs, cs,
        None if step_mask is None else outputs, cumaxes, activations, tanh_cells, gates_buffer,
        None if step_mask is None else step_mask.contiguous(), chunk_size, batch_first, distances,
        own_rows,
    )  # fmt: skip
    return batch_first.transpose(0, 1), hs[steps], cs[steps], distances, buffers


class ONLSTMProjectedRecurrence(torch.autograd.Function):
    """`ONLSTMRecurrence` with the input projection inside its forward loop (the training
    path of `fast_projected_recurrence`): one product per step over [x_t | h_t] with
    [W_ih | scale * W_hh] packed as one weight, the outputs written batch-first by the kernel.
    The backward pass walks the steps as ONLSTMRecurrence's does, then turns the pre-activation
    gradients into those of the inputs, W_ih and the bias with three products over all steps.

    Inputs: inputs (T, B, D) (any strides, contiguous rows), input_weight (G, D), bias (G,)
    (both biases), recurrent_weight (G, H), h0, c0 (B, H), step_mask (T, B) or None, then
    chunk_size, gemm_backend (the products of the backward pass), recurrent_scale (the weight
    multiplied is recurrent_weight * recurrent_scale), own_rows (the ``rows`` placement) and
    product_dtype (bf16: every product of both passes in bf16 with float32 sums, as the
    separate projection and `ONLSTMRecurrence` run them under bf16-mixed).
    Outputs: outputs (T, B, H), h_last, c_last (B, H), distances (T, B, 2) = (input, forget).
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx, inputs, input_weight, bias, recurrent_weight, h0, c0, step_mask, chunk_size,
        gemm_backend="auto", recurrent_scale=1.0, own_rows=False, product_dtype=None,
    ):  # fmt: skip
        kernel = fused_kernel(inputs)
        bf16 = product_dtype == torch.bfloat16
        packed = _pack(kernel, input_weight, recurrent_weight, recurrent_scale, bf16)
        outputs, h_last, c_last, distances, buffers = _projected_forward(
            kernel, inputs, packed, bias, h0, c0, step_mask, chunk_size, own_rows, True
        )
        hs, cs, _, cumaxes, activations, tanh_cells, _ = buffers
        # what gate_gradients reads from ctx, and the scale of the recurrent weight
        ctx.chunk_size, ctx.gemm_backend, ctx.kernel = chunk_size, gemm_backend, kernel
        ctx.product_dtype, ctx.recurrent_scale = product_dtype, recurrent_scale
        ctx.save_for_backward(
            inputs, input_weight, recurrent_weight, step_mask, activations, cumaxes, tanh_cells,
            hs, cs,
        )  # fmt: skip
        # the outputs are not views of the saved buffers; the last state is (hs[T], cs[T])
        return outputs, h_last.clone(), c_last.clone(), distances

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_outputs, grad_h_last, grad_c_last, grad_distances):  # type: ignore[override]
        inputs, input_weight, recurrent_weight, step_mask, *saved = ctx.saved_tensors
        hs = saved[3]  # saved = (activations, cumaxes, tanh_cells, hs, cs)
        scale = ctx.recurrent_scale
        weight = recurrent_weight if scale == 1.0 else recurrent_weight * scale
        grad_gates, grad_h, grad_c, grad_bias = gate_gradients(
            ctx, weight, step_mask, tuple(saved), grad_outputs, grad_h_last, grad_c_last,
            grad_distances, bias_gradient=ctx.needs_input_grad[2],
        )  # fmt: skip
        steps, batch, num_gates = grad_gates.shape
        depth = inputs.size(-1)
        rows = grad_gates.view(-1, num_gates)
        grad_inputs = grad_input_weight = grad_weight = None
        if ctx.needs_input_grad[0]:
            grad_inputs = input_gradient(rows, input_weight, ctx.gemm_backend, ctx.product_dtype)
            grad_inputs = grad_inputs.view(steps, batch, depth)
        if ctx.needs_input_grad[1]:
            flat_inputs = inputs.reshape(-1, depth)  # (T * B, D) in the order of the rows
            grad_input_weight = weight_gradient(
                rows, flat_inputs, ctx.gemm_backend, ctx.product_dtype
            )
        if ctx.needs_input_grad[3]:
            grad_weight = recurrent_weight_gradient(ctx, grad_gates, hs)
            if scale != 1.0:
                grad_weight = grad_weight * scale
        return (
            grad_inputs,
            grad_input_weight,
            grad_bias,
            grad_weight,
            grad_h if ctx.needs_input_grad[4] else None,
            grad_c if ctx.needs_input_grad[5] else None,
            None,
            None,
            None,
            None,
            None,
            None,
        )
