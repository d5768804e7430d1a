"""The ON-LSTM encoder's layers on the fast recurrence, with every decision about how they run.

The encoder (`treernn.encoders.onlstm`) hands over a layer's parameters as `ONLSTMLayerWeights`
and reads the outputs back; what it does not decide is here: where a layer's input projection
runs (inside the step loop or over all steps first, `onlstm_projected.loop_placement`), the
precision of its products under bf16-mixed (`gemm.product_dtype`, timed on the loop that runs),
and whether an inference call runs each layer as one call of the compiled ``infer_projected``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from treernn.kernels import gemm
from treernn.kernels.onlstm import fused_kernel, precision_runs
from treernn.kernels.onlstm_projected import (
    IN_LOOP,
    fast_projected_recurrence,
    in_loop_bf16,
    infer_in_loop,
    loop_placement,
    loop_precision_runs,
)


@dataclass(frozen=True)
class ONLSTMLayerWeights:
    """One ON-LSTM layer as the fast recurrence reads it: the input projection (G, D) and its
    bias, the recurrent weight (G, H) (DropConnect-ed while training) times ``recurrent_scale``
    (DropConnect's 1 - p in eval, folded into the kernel's packing) and its bias, and the chunk
    size of the master gates; G = 4H + 2H / chunk_size."""

    input_weight: Tensor
    input_bias: Tensor | None
    recurrent_weight: Tensor
    recurrent_scale: float
    recurrent_bias: Tensor | None
    chunk_size: int

    @property
    def input_size(self) -> int:
        return self.input_weight.size(1)

    @property
    def hidden_size(self) -> int:
        return self.recurrent_weight.size(1)

    @property
    def num_gates(self) -> int:
        return self.recurrent_weight.size(0)


def onlstm_layer(
    layer_input: Tensor,
    weights: ONLSTMLayerWeights,
    h0: Tensor | None,
    c0: Tensor | None,
    step_mask: Tensor | None,
    gemm_backend: str = "auto",
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """One layer over ``layer_input`` (T, B, D) from h0, c0 (B, H) (None: zeros) with the steps
    ``step_mask`` (T, B) marks (None: all): outputs (T, B, H), h and c of the last step, the
    forget and input distances (T, B).

    Under autocast with bf16 (bf16-mixed) the input projection and the recurrence's products (per
    step, and its weight gradient) each run in bf16 with fp32 sums where a probe finds that
    faster here at their shapes, else in fp32; the gates, states, distances and the elementwise
    work stay fp32 either way, so the layer runs with autocast off on a float32 input."""
    if not torch.is_autocast_enabled(layer_input.device.type):
        return _fast_layer(layer_input, weights, h0, c0, step_mask, gemm_backend)
    steps, batch = layer_input.shape[:2]
    dtypes = _product_dtypes(weights, steps, batch, layer_input, gemm_backend)
    with torch.autocast(layer_input.device.type, enabled=False):
        if layer_input.dtype in (torch.float16, torch.bfloat16):
            layer_input = layer_input.float()
        return _fast_layer(layer_input, weights, h0, c0, step_mask, gemm_backend, *dtypes)


def onlstm_inference(
    x: Tensor,
    layers: Sequence[ONLSTMLayerWeights],
    state: Sequence[tuple[Tensor | None, Tensor | None]],
    step_mask: Tensor | None,
    gemm_backend: str = "auto",
) -> list[tuple[Tensor, Tensor, Tensor, Tensor]] | None:
    """Inference (eval, no autograd) of a stack of layers over ``x`` (B, T, D), each as one call
    of the compiled ``infer_projected`` with its projection inside the step loop, where every
    layer is placed so: per layer its outputs batch-first (B, T, H), h and c of the last step and
    the distances (T, B, 2) = (input, forget); None where that does not apply (then run the layers
    one by one with `onlstm_layer`, which gives the same numbers). Under bf16-mixed a layer runs
    so where both of its products are decided fp32, or both bf16 (`in_loop_bf16`). At one layer
    of 256 the layer-by-layer path's own torch ops and decisions took 3-4 % of an inference call
    (each runs from caches the step loop has just flushed)."""
    kernel = fused_kernel(x)
    if (
        kernel is None
        or x.dtype != layers[0].input_weight.dtype
        or x.stride(-1) != 1
        or x.size(0) * x.size(1) == 0
    ):
        return None
    batch, steps = x.shape[:2]
    autocast = torch.is_autocast_enabled(x.device.type)
    own_rows, in_bf16 = [], []
    for weights in layers:
        placement = loop_placement(
            batch, weights.input_size, weights.hidden_size, weights.chunk_size, x.dtype, x.device,
            gemm_backend, kernel,
        )  # fmt: skip
        if placement not in IN_LOOP:
            return None
        dtypes = (
            _product_dtypes(weights, steps, batch, x, gemm_backend) if autocast else (None, None)
        )
        bf16 = in_loop_bf16(x, *dtypes)
        if dtypes != (None, None) and not bf16:
            return None
        own_rows.append(placement == "rows")
        in_bf16.append(bf16)
    layer_input = x.transpose(0, 1)  # (T, B, D); eval: no dropout between the layers
    results = []
    for weights, (h0, c0), rows, bf16 in zip(layers, state, own_rows, in_bf16):
        output, h, c, distances = infer_in_loop(
            kernel, layer_input, weights.input_weight, weights.input_bias,
            weights.recurrent_weight, h0, c0, step_mask, weights.chunk_size, rows,
            weights.recurrent_scale, weights.recurrent_bias, bf16,
        )  # fmt: skip
        results.append((output, h, c, distances))
        layer_input = output.transpose(0, 1)
    return results


def _fast_layer(
    layer_input: Tensor,
    weights: ONLSTMLayerWeights,
    h0: Tensor | None,
    c0: Tensor | None,
    step_mask: Tensor | None,
    gemm_backend: str,
    projection_dtype: torch.dtype | None = None,
    step_dtype: torch.dtype | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Both biases are constant over time: they are added once, to the input projection."""
    return fast_projected_recurrence(
        layer_input, weights.input_weight, weights.input_bias, weights.recurrent_weight, h0, c0,
        step_mask, weights.chunk_size, gemm_backend, projection_dtype, step_dtype,
        weights.recurrent_scale, weights.recurrent_bias,
    )  # fmt: skip


def _product_dtypes(
    weights: ONLSTMLayerWeights, steps: int, batch: int, x: Tensor, gemm_backend: str
) -> tuple[torch.dtype | None, torch.dtype | None]:
    """Under bf16 autocast, the dtypes of a layer's input projection and recurrent products
    (`gemm.product_dtype`: bf16 where a probe finds it faster here, else None). Where the
    projection runs inside the step loop (fp32 placement, `loop_placement`, and ``treernn``'s
    bf16 kernels here) the loop is one product per step and its precision one decision, timed on
    that loop in this mode (`loop_precision_runs`); elsewhere the projection over all steps and
    the recurrent products are decided apart."""
    input_size, hidden, chunk = weights.input_size, weights.hidden_size, weights.chunk_size
    kernel, training = fused_kernel(x), torch.is_grad_enabled()
    if (
        kernel is not None
        and x.dtype == torch.float32
        and gemm.bf16_requested(x.device)
        and gemm.treernn_available(torch.bfloat16)
    ):
        placement = loop_placement(
            batch, input_size, hidden, chunk, x.dtype, x.device, gemm_backend, kernel, training
        )
        if placement in IN_LOOP:
            mode = "training" if training else "inference"
            dtype = gemm.product_dtype(
                batch, input_size + hidden, weights.num_gates, x.device, "ON-LSTM",
                f"projection + steps in one loop, {mode}",
                loop_precision_runs(batch, input_size, hidden, chunk, kernel, placement, training),
            )  # fmt: skip
            return dtype, dtype
    projection_dtype = gemm.product_dtype(
        gemm.rows_bucket(steps * batch), input_size, weights.num_gates, x.device, "ON-LSTM",
        "input projection",
    )  # fmt: skip
    # the loop is timed as it runs, forward and backward in training
    steps_name = "recurrent steps, training" if training else "recurrent steps, inference"
    step_dtype = gemm.product_dtype(
        batch, hidden, weights.num_gates, x.device, "ON-LSTM", steps_name,
        precision_runs(batch, hidden, chunk, kernel, x.device, training),
    )  # fmt: skip
    return projection_dtype, step_dtype
