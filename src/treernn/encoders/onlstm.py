"""ON-LSTM: Ordered Neurons LSTM (Shen et al., ICLR 2019, "Ordered Neurons: Integrating Tree
Structures into Recurrent Neural Networks"), section 4, equations (1)-(14).

One layer, with hidden size H split into ``n_chunk = H / chunk_size`` chunks, computes per step

    gates     = W_ih x_t + b_ih + W_hh h_{t-1} + b_hh           (B, 2 n_chunk + 4H)
    master_input  = 1 - cumax(gates[master-input logits])        eq. (9), decreasing
    master_forget = cumax(gates[master-forget logits])           eq. (8), increasing
    overlap   = master_forget * master_input                     eq. (10)
    f_hat     = f * overlap + (master_forget - overlap)          eq. (11)
    i_hat     = i * overlap + (master_input - overlap)           eq. (12)
    c_t       = f_hat * c_{t-1} + i_hat * tanh(candidate)        eq. (13)
    h_t       = o * tanh(c_t)                                    eq. (6)

with ``cumax(x) = cumsum(softmax(x))`` (eq. 7) and each master unit shared by the chunk_size
neurons of its chunk. The projection layout (master input, master forget, output gate, candidate,
input gate, forget gate) and the two per-step distances (forget distance
``1 - sum(master_forget) / n_chunk``, used for parsing, eq. 15; input distance
``sum(master_input) / n_chunk``) follow the authors' code, as does DropConnect on the recurrent
weight: one Bernoulli mask per forward call shared over time and batch, no rescaling while
training, weights times (1 - p) in eval (see ``REFERENCE.md``).

Two implementations of the recurrence compute the same numbers:

* ``impl="reference"``: `onlstm_step` applied step by step with autograd. Read this one.
* ``impl="fast"`` (default): the same recurrence as one hand-written autograd node per layer
  (`treernn.kernels.onlstm_layer`, tested equal to the reference), which decides where each
  layer's input projection runs (inside the step loop or over all steps first) and, under
  bf16-mixed, its products' precision; the products run on the GEMM backend ``gemm_backend``
  (`treernn.kernels.gemm`).
"""

from __future__ import annotations

from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from treernn import kernels
from treernn.encoders.base import (
    Encoder,
    EncoderOutput,
    LockedDropout,
    TreeSignal,
    check_dropout,
    last_real_step,
)
from treernn.errors import ConfigValueError
from treernn.kernels import GemmBackend, ONLSTMLayerWeights, check_backend, dropconnect


def cumax(logits: Tensor, dim: int = -1) -> Tensor:
    """Cumulative softmax (eq. 7): monotonically increasing from softmax[0] to 1 along ``dim``."""
    return torch.cumsum(torch.softmax(logits, dim=dim), dim=dim)


def onlstm_step(
    input_gates: Tensor,
    h_prev: Tensor,
    c_prev: Tensor,
    recurrent_weight: Tensor,
    recurrent_bias: Tensor,
    chunk_size: int,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """One ON-LSTM step, written to be read.

    input_gates: (B, 2n + 4H) the input projection W_ih x_t + b_ih of this step.
    h_prev, c_prev: (B, H). recurrent_weight: (2n + 4H, H), already DropConnect-ed.
    Returns h (B, H), c (B, H), forget distance (B,), input distance (B,).
    """
    batch, hidden = h_prev.shape
    n_chunk = hidden // chunk_size
    gates = input_gates + F.linear(h_prev, recurrent_weight, recurrent_bias)  # (B, 2n + 4H)

    master_input = 1.0 - cumax(gates[:, :n_chunk])  # (B, n) decreasing
    master_forget = cumax(gates[:, n_chunk : 2 * n_chunk])  # (B, n) increasing
    forget_distance = 1.0 - master_forget.sum(-1) / n_chunk  # (B,)
    input_distance = master_input.sum(-1) / n_chunk  # (B,)

    # The 4H neuron gates, neuron j sitting in chunk j // chunk_size.
    out_gate, candidate, input_gate, forget_gate = (
        gates[:, 2 * n_chunk :].view(batch, 4, n_chunk, chunk_size).unbind(1)
    )  # each (B, n, C)
    out_gate = torch.sigmoid(out_gate)
    candidate = torch.tanh(candidate)
    input_gate = torch.sigmoid(input_gate)
    forget_gate = torch.sigmoid(forget_gate)

    master_input = master_input.unsqueeze(-1)  # (B, n, 1): shared by the chunk's neurons
    master_forget = master_forget.unsqueeze(-1)
    overlap = master_forget * master_input
    forget_hat = forget_gate * overlap + (master_forget - overlap)
    input_hat = input_gate * overlap + (master_input - overlap)
    c_prev = c_prev.view(batch, n_chunk, chunk_size)
    cell = forget_hat * c_prev + input_hat * candidate  # (B, n, C)
    hidden_out = out_gate * torch.tanh(cell)
    return (
        hidden_out.reshape(batch, hidden),
        cell.reshape(batch, hidden),
        forget_distance,
        input_distance,
    )


def reference_recurrence(
    input_gates: Tensor,
    recurrent_weight: Tensor,
    recurrent_bias: Tensor,
    h0: Tensor,
    c0: Tensor,
    step_mask: Tensor | None,
    chunk_size: int,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Run `onlstm_step` over time.

    input_gates: (T, B, G); step_mask: (T, B) bool (True = real step) or None.
    At a padded step the state is carried unchanged and the output and distances are 0.
    Returns outputs (T, B, H), h_last, c_last (B, H), forget and input distances (T, B).
    """
    h, c = h0, c0
    outputs, forget_distances, input_distances = [], [], []
    # unbind once: indexing input_gates[t] per step would make autograd zero-fill a full-size
    # gradient per step (the authors' cell spent most of its backward pass doing that).
    step_masks = [None] * input_gates.size(0) if step_mask is None else step_mask.unbind(0)
    for gates_t, mask_t in zip(input_gates.unbind(0), step_masks):
        h_new, c_new, forget_distance, input_distance = onlstm_step(
            gates_t, h, c, recurrent_weight, recurrent_bias, chunk_size
        )
        if mask_t is None:
            h, c = h_new, c_new
        else:
            real = mask_t.unsqueeze(1)  # (B, 1)
            h = torch.where(real, h_new, h)
            c = torch.where(real, c_new, c)
            keep = mask_t.to(h_new.dtype)
            h_new = h_new * keep.unsqueeze(1)
            forget_distance = forget_distance * keep
            input_distance = input_distance * keep
        outputs.append(h_new)
        forget_distances.append(forget_distance)
        input_distances.append(input_distance)
    return (
        torch.stack(outputs),
        h,
        c,
        torch.stack(forget_distances),
        torch.stack(input_distances),
    )


class ONLSTMLayer(nn.Module):
    """The parameters of one ON-LSTM layer: ``ih`` and ``hh`` projections to 2n + 4H gates,
    each with a bias, default ``nn.Linear`` initialisation, DropConnect on ``hh.weight``."""

    def __init__(
        self, input_size: int, hidden_size: int, chunk_size: int, weight_drop: float = 0.0
    ) -> None:
        super().__init__()
        if chunk_size <= 0 or hidden_size % chunk_size != 0:
            raise ConfigValueError(
                f"ON-LSTM hidden size {hidden_size} is not divisible by chunk_size={chunk_size}; "
                "choose multiples of the chunk size (e.g. 1150 and 400 with chunk 10)."
            )
        check_dropout("weight_drop", weight_drop)
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.chunk_size = chunk_size
        self.n_chunk = hidden_size // chunk_size
        self.weight_drop = weight_drop
        num_gates = 4 * hidden_size + 2 * self.n_chunk
        self.ih = nn.Linear(input_size, num_gates)
        self.hh = nn.Linear(hidden_size, num_gates)

    def recurrent_weight(self) -> Tensor:
        """The hh weight for one forward call: a fresh Bernoulli(1 - p) keep mask while training
        (no rescaling), the weight times (1 - p) in eval (the authors' DropConnect)."""
        weight, scale = self.scaled_recurrent_weight()
        return weight if scale == 1.0 else weight * scale

    def scaled_recurrent_weight(self) -> tuple[Tensor, float]:
        """(weight, scale) with `recurrent_weight` = weight * scale: in eval the parameter
        itself and 1 - p (the fast kernel folds the scale into its packing of the weight instead
        of copying a scaled weight first), while training the DropConnect-ed weight and 1."""
        weight = self.hh.weight
        if self.weight_drop == 0.0:
            return weight, 1.0
        if self.training:
            return dropconnect(weight, self.weight_drop, rescale=False), 1.0
        return weight, 1.0 - self.weight_drop

    def extra_repr(self) -> str:
        return f"chunk_size={self.chunk_size}, weight_drop={self.weight_drop}"


class ONLSTMEncoder(Encoder):
    """A stack of ON-LSTM layers input_size -> hidden_size -> ... -> output_size.

    Locked (variational) dropout ``dropout`` is applied to every layer's output except the last,
    as in the authors' ``ONLSTMStack``; ``weight_drop`` is DropConnect on the recurrent weights.
    ``impl`` picks the recurrence: ``"fast"`` (default) or the step-by-step ``"reference"``;
    ``gemm_backend`` the library of the fast recurrence's per-step products and input projection
    (`treernn.kernels.gemm`: ``auto`` probes MKL, oneDNN and aten once per shape).
    """

    tree_signal_kind = "distances"

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 3,
        chunk_size: int = 10,
        dropout: float = 0.0,
        weight_drop: float = 0.0,
        output_size: int | None = None,
        impl: Literal["fast", "reference"] = "fast",
        gemm_backend: GemmBackend = "auto",
    ) -> None:
        super().__init__()
        if num_layers < 1:
            raise ConfigValueError(f"num_layers={num_layers} must be at least 1.")
        if impl not in ("fast", "reference"):
            raise ConfigValueError(f"impl={impl!r} is not one of 'fast', 'reference'.")
        check_dropout("dropout", dropout)
        check_dropout("weight_drop", weight_drop)
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.output_size = hidden_size if output_size is None else output_size
        self.num_layers = num_layers
        self.chunk_size = chunk_size
        self.impl = impl
        self.gemm_backend = check_backend(gemm_backend)
        sizes = [input_size] + [hidden_size] * (num_layers - 1) + [self.output_size]
        self.layers = nn.ModuleList(
            ONLSTMLayer(sizes[i], sizes[i + 1], chunk_size, weight_drop) for i in range(num_layers)
        )
        self.locked_dropout = LockedDropout(dropout)

    def _kernel_weights(self, layer: ONLSTMLayer) -> ONLSTMLayerWeights:
        """The layer's parameters for the fast recurrence (`treernn.kernels.onlstm_layer`), with
        one DropConnect mask for the whole call (in eval: the weight and its scale)."""
        weight, scale = layer.scaled_recurrent_weight()
        return ONLSTMLayerWeights(
            layer.ih.weight, layer.ih.bias, weight, scale, layer.hh.bias, layer.chunk_size
        )

    def _infer(self, x: Tensor, mask: Tensor | None, step_mask: Tensor | None, state: list):
        """Inference as one compiled call per layer (`treernn.kernels.onlstm_inference`), the
        outputs as `forward` gives them; None where that does not apply."""
        layers = [self._kernel_weights(layer) for layer in self.layers]
        results = kernels.onlstm_inference(x, layers, state, step_mask, self.gemm_backend)
        if results is None:
            return None
        outputs = [output for output, _, _, _ in results]  # (B, T, H) contiguous
        return EncoderOutput(
            hidden=outputs[-1],
            pooled=last_real_step(outputs[-1], mask),
            state=[(h, c) for _, h, c, _ in results],
            layer_outputs=outputs,
            tree_signal=TreeSignal(  # (L, B, T)
                "distances", torch.stack([d[..., 1].t() for _, _, _, d in results])
            ),
            extras={"input_distances": torch.stack([d[..., 0].t() for _, _, _, d in results])},
        )

    def forward(
        self, x: Tensor, mask: Tensor | None = None, state: Any = None, **kwargs: Any
    ) -> EncoderOutput:
        if x.dim() != 3 or x.size(-1) != self.input_size:
            raise ValueError(
                f"ONLSTMEncoder expects x of shape (B, T, {self.input_size}), got {tuple(x.shape)}."
            )
        batch, steps, _ = x.shape
        if mask is not None and mask.shape != (batch, steps):
            raise ValueError(
                f"mask has shape {tuple(mask.shape)}; expected (B, T) = {(batch, steps)}."
            )
        if state is None:  # zero states (the fast kernel makes its own)
            state = [(None, None)] * self.num_layers
        elif len(state) != self.num_layers:
            raise ValueError(f"state has {len(state)} layers; this encoder has {self.num_layers}.")
        step_mask = None if mask is None else mask.t().bool()  # (T, B)
        if self.impl == "fast" and not self.training and not torch.is_grad_enabled():
            inferred = self._infer(x, mask, step_mask, state)
            if inferred is not None:
                return inferred

        layer_input = x.transpose(0, 1)  # (T, B, D): time-major inside
        layer_outputs, new_state, forget_distances, input_distances = [], [], [], []
        for index, (layer, (h0, c0)) in enumerate(zip(self.layers, state)):
            if self.impl == "fast":
                outputs, h, c, forget_distance, input_distance = kernels.onlstm_layer(
                    layer_input, self._kernel_weights(layer), h0, c0, step_mask, self.gemm_backend
                )
            else:
                weight = layer.recurrent_weight()  # one DropConnect mask for the whole call
                if h0 is None:
                    h0, c0 = (layer_input.new_zeros(batch, layer.hidden_size) for _ in range(2))
                input_gates = F.linear(layer_input, layer.ih.weight, layer.ih.bias)  # (T, B, G)
                outputs, h, c, forget_distance, input_distance = reference_recurrence(
                    input_gates, weight, layer.hh.bias, h0, c0, step_mask, layer.chunk_size
                )
            layer_outputs.append(outputs.transpose(0, 1))  # (B, T, H_l), undropped
            new_state.append((h, c))
            forget_distances.append(forget_distance.t())  # (B, T)
            input_distances.append(input_distance.t())
            if index < self.num_layers - 1:
                # LockedDropout is batch-first: its (B, 1, H) mask is shared over time.
                layer_input = self.locked_dropout(outputs.transpose(0, 1)).transpose(0, 1)

        # contiguous (B, T, H): a decoder's linear then folds into one product; on a transposed
        # view under bf16 autocast in inference mode torch's matmul expands its weight per batch
        # row and multiplies with bmm instead (3x slower LM inference at 1 x 256, measured)
        hidden = layer_outputs[-1].contiguous()
        return EncoderOutput(
            hidden=hidden,
            pooled=last_real_step(hidden, mask),
            state=new_state,
            layer_outputs=layer_outputs,
            tree_signal=TreeSignal("distances", torch.stack(forget_distances)),  # (L, B, T)
            extras={"input_distances": torch.stack(input_distances)},
        )
