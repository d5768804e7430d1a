"""Multi-layer LSTM baseline with AWD-LSTM weight drop (Merity et al. 2018).

Each layer is a ``torch.nn.LSTM`` (fused kernels on CPU and GPU). Weight drop is DropConnect on the
hidden-to-hidden matrix ``weight_hh``: one mask per forward call (one BPTT segment), shared over
time and batch, applied with ``F.dropout`` semantics (rescaled by 1/(1-p) in training, identity in
eval), as AWD-LSTM's ``WeightDrop`` does. Between layers, locked (variational) dropout as in
AWD-LSTM.

On CPU ``nn.LSTM`` runs oneDNN's LSTM primitive (its own packed GEMMs: the per-step products are
already on oneDNN, see `treernn.kernels.gemm`), on padded batches too (a packed sequence
would leave it for torch's step-by-step LSTM: see `run_by_lengths`). Under
``torch.autocast`` with bf16 (``precision=bf16-mixed``) it runs oneDNN's bf16 LSTM only where the
probe of `treernn.kernels.keeps_autocast` finds a bf16 layer faster than an fp32 one on
this machine at the layer's sizes and batch, timed forward only for inference and forward and
backward for training (each decided on its own); elsewhere the encoder runs in fp32 (logged
once). On CPUs without bf16 instructions (e.g. AVX2 only) oneDNN has no bf16 LSTM at all and
autocast would fail to create the primitive; on an Intel Xeon with AVX512-BF16 and no AMX it runs,
0.75x as fast as fp32.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
from torch import Tensor, nn
from torch.func import functional_call
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from treernn import kernels
from treernn.encoders.base import (
    Encoder,
    EncoderOutput,
    LockedDropout,
    check_dropout,
    last_real_step,
)
from treernn.errors import ConfigValueError

LSTMState = list[tuple[Tensor, Tensor]]  # per layer (h, c), each (B, H_l)


class LSTMEncoder(Encoder):
    """The state it returns is the one to carry into the next segment of a stream (a language
    model's batches, unpadded). A batch with padding returns ``state=None``: its rows end at
    different steps, and on the CPU the padded batch runs in one oneDNN call (see
    `run_by_lengths`), after which the state is not a padded row's; its outputs and pooled
    vector are each row's own."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        dropout: float = 0.0,
        weight_drop: float = 0.0,
        output_size: int | None = None,
    ) -> None:
        super().__init__()
        check_dropout("dropout", dropout)
        check_dropout("weight_drop", weight_drop)
        if num_layers < 1:
            raise ConfigValueError(f"num_layers={num_layers}: an LSTM needs at least one layer")
        self.input_size = input_size
        self.output_size = output_size or hidden_size
        self.weight_drop = weight_drop
        sizes = [input_size] + [hidden_size] * (num_layers - 1) + [self.output_size]
        self.layers = nn.ModuleList(
            nn.LSTM(sizes[i], sizes[i + 1], batch_first=True) for i in range(num_layers)
        )
        self.hidden_sizes = sizes[1:]
        self.lockdrop = LockedDropout(dropout)

    def init_state(self, batch_size: int, device=None, dtype=None) -> LSTMState:
        return [
            (
                torch.zeros(batch_size, h, device=device, dtype=dtype),
                torch.zeros(batch_size, h, device=device, dtype=dtype),
            )
            for h in self.hidden_sizes
        ]

    def _run_layer(
        self, layer: nn.LSTM, x: Tensor, state: tuple[Tensor, Tensor], lengths: Tensor | None
    ) -> tuple[Tensor, tuple[Tensor, Tensor] | None]:
        h0, c0 = (s.unsqueeze(0).contiguous() for s in state)  # (1, B, H)
        if self.weight_drop > 0 and self.training:
            raw = layer.weight_hh_l0
            weight = kernels.dropconnect(raw, self.weight_drop, rescale=True)  # F.dropout's scaling
            run = lambda inputs, hx: functional_call(layer, {"weight_hh_l0": weight}, (inputs, hx))  # noqa: E731
        else:
            run = layer
        if lengths is not None:
            return run_by_lengths(run, x, lengths, (h0, c0)), None
        out, (h, c) = run(x, (h0, c0))
        return out, (h.squeeze(0), c.squeeze(0))

    def forward(
        self, x: Tensor, mask: Tensor | None = None, state: LSTMState | None = None
    ) -> EncoderOutput:
        training = torch.is_grad_enabled()
        if not all(
            kernels.keeps_autocast(
                x.size(0), layer.hidden_size, 4 * layer.hidden_size, x.device, "LSTM",
                f"nn.LSTM layer, {'training' if training else 'inference'}",
                functools.partial(_probe, layer, x.size(0), x.device, training),
            )
            for layer in self.layers
        ):  # fmt: skip
            # bf16 products are not faster here: fp32 (see the module docstring)
            with torch.autocast(x.device.type, enabled=False):
                return self.forward(x.float(), mask, state)
        batch_size = x.size(0)
        if state is None:
            state = self.init_state(batch_size, x.device, x.dtype)
        lengths = None
        if mask is not None and not bool(mask.all()):
            lengths = mask.long().sum(1).clamp(min=1)
        layer_outputs, new_state = [], []
        for index, layer in enumerate(self.layers):
            out, layer_state = self._run_layer(layer, x, state[index], lengths)  # (B, T, H_l)
            layer_outputs.append(out)
            new_state.append(layer_state)
            x = self.lockdrop(out) if index < len(self.layers) - 1 else out
        x = x.contiguous()  # nn.LSTM's bf16 output is a transposed view; see ONLSTMEncoder
        return EncoderOutput(
            hidden=x,
            pooled=last_real_step(x, mask),
            state=new_state if lengths is None else None,  # see the class docstring
            layer_outputs=layer_outputs,
        )


def run_by_lengths(
    run: Callable[..., tuple[Tensor, tuple[Tensor, Tensor]]],
    x: Tensor,
    lengths: Tensor,
    hx: tuple[Tensor, Tensor] | None = None,
) -> Tensor:
    """A one-direction, batch-first ``nn.LSTM`` (``run``: the module, or a call of it with other
    weights) over right-padded rows of ``lengths`` (B,) real steps: its outputs (B, T, H), zero
    past each row's length, as for the packed sequence padded back. No state: the rows end at
    different steps (see `LSTMEncoder`).

    On CUDA the packed sequence (cuDNN runs variable lengths). On the CPU a packed sequence
    leaves oneDNN's LSTM primitive for torch's step-by-step LSTM, whose backward fills a
    gradient the size of the whole input at every step; there the padded batch runs in one
    oneDNN call and the steps past each row's length are zeroed (the LSTM reads left to right,
    so they change nothing before them). Padded steps cost their products, which bucketed
    batches keep few: whole training updates of ``table=logic``'s LSTM (80 units, 256 rows a
    batch, 39 % of them padding) ran 1.39x as fast (1.36-1.47 over 5 alternating rounds; AMD Zen
    3, one thread), the EWT language model's LSTM 1.03-1.08x (its softmax dominates). Running the
    batch in segments between its distinct lengths, which would give each row's state, was no
    faster than the packed sequence: oneDNN's forward lost what its backward won."""
    if x.device.type != "cpu":
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, _ = run(packed, hx)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=x.size(1))
        return out
    out, _ = run(x, hx)
    steps = torch.arange(x.size(1), device=x.device)
    return out * (steps < lengths.unsqueeze(1)).unsqueeze(-1).to(out.dtype)


def _probe(layer: nn.LSTM, batch: int, device: torch.device, training: bool):
    """For `kernels.keeps_autocast`: a layer of ``layer``'s sizes over 16 steps of ``batch``
    rows, forward only or, ``training``, forward and backward, and its products' FLOPs. What
    runs under bf16-mixed is oneDNN's bf16 LSTM primitive, whose speed the products alone do not
    tell, and its backward can lose where its forward wins (an AMD Zen 5: bf16 2.5x fp32 in
    inference, 0.75x in training at the paper's 1150)."""
    steps = 16
    probe = nn.LSTM(layer.input_size, layer.hidden_size, batch_first=True).to(device)
    x = torch.randn(batch, steps, layer.input_size, device=device, requires_grad=training)

    def run() -> None:
        with torch.set_grad_enabled(training):
            out, _ = probe(x)
            if training:
                out.float().sum().backward()

    products = 3 if training else 1  # backward: the input and the weight gradients
    flops = 2.0 * products * steps * batch * (layer.input_size + layer.hidden_size)
    return run, flops * 4 * layer.hidden_size
