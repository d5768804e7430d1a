"""The interface every encoder shares.

An encoder maps batch-first embedded inputs ``x`` of shape (B, T, D) and a padding mask of shape (B,
T) (True marks a real token) to an `EncoderOutput`. Encoders are torch-only: no Lightning, no
Hydra, no config objects. Tasks own embeddings, decoders and losses; encoders own the recurrence.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal

import torch
from torch import Tensor, nn

from treernn import kernels
from treernn.errors import ConfigValueError

#: What an encoder reads besides the embedded tokens (see ``Encoder.input_view``).
InputView = Literal["tokens", "constituency_tree", "dependency_tree"]
INPUT_VIEWS: tuple[str, ...] = ("tokens", "constituency_tree", "dependency_tree")

#: The kinds of tree signal an encoder can emit (see `TreeSignal`).
TreeSignalKind = Literal["distances", "attention"]
TREE_SIGNAL_KINDS: tuple[str, ...] = ("distances", "attention")


@dataclass
class TreeSignal:
    """What a model says about the tree it read; `treernn.parsing` turns it into trees.

    kind ``"distances"``: syntactic distances (L, B, T), one row per layer (ON-LSTM's
        master-forget distances, Eq. 15; a large value = a constituent ended before this token).
    kind ``"attention"``: memory attention (L, B, T, N) over N slots (Ordered Memory's pointer
        distributions p_t, Algorithm 2), L = 1.
    """

    kind: TreeSignalKind
    values: Tensor

    def __post_init__(self) -> None:
        if self.kind not in TREE_SIGNAL_KINDS:
            raise ValueError(f"TreeSignal kind={self.kind!r}: use one of {TREE_SIGNAL_KINDS}")
        expected = 3 if self.kind == "distances" else 4
        if self.values.dim() != expected:
            raise ValueError(
                f"TreeSignal({self.kind!r}) needs a {expected}-d tensor, "
                f"got shape {tuple(self.values.shape)}"
            )

    @property
    def num_layers(self) -> int:
        return self.values.size(0)


@dataclass
class EncoderOutput:
    """What an encoder returns.

    hidden: (B, T, H_out) outputs of the last layer, before any dropout the task applies.
    pooled: (B, H_out) one vector per sequence (the last real step for recurrent encoders).
    state: the carried state, to pass back as ``state=`` for the next segment (detach it first);
        None where there is none to carry (a Transformer; the LSTM's padded batches).
    layer_outputs: per-layer (B, T, H_l) outputs, for regularisers and analysis.
    tree_signal: the model's tree signal (`TreeSignal`) where it has one; None otherwise.
    extras: anything model-specific (e.g. ON-LSTM input distances, a backward Ordered Memory's
        attention).
    """

    hidden: Tensor
    pooled: Tensor
    state: Any = None
    layer_outputs: list[Tensor] = field(default_factory=list)
    tree_signal: TreeSignal | None = None
    extras: dict[str, Tensor] = field(default_factory=dict)


EvalStage = Literal["validation", "test"]


class Encoder(nn.Module):
    """Base class: subclasses set ``input_size``/``output_size`` and implement ``forward``.

    ``input_view`` declares what the encoder reads: ``"tokens"`` (the token sequence and its
    mask), ``"constituency_tree"`` (the leaves plus ``tree=`` a
    `treernn.encoders.tree_batch.TreeBatch`) or ``"dependency_tree"`` (breadth-first
    words plus ``tree=`` a dependency tree batch). The DataModule's batch carries every view its
    data has; the task hands the encoder the one it asks for. ``tree_signal_kind`` names the
    `TreeSignal` kind the encoder emits (None: none).
    """

    input_size: int
    output_size: int
    input_view: InputView = "tokens"
    tree_signal_kind: TreeSignalKind | None = None

    def forward(self, x: Tensor, mask: Tensor | None = None, state: Any = None) -> EncoderOutput:
        raise NotImplementedError(
            f"{type(self).__name__} defines no forward(x, mask=None, state=None) returning an "
            "EncoderOutput, which every encoder must (docs/how-to/new-model.md)"
        )

    def set_eval_stage(self, stage: EvalStage) -> None:
        """Which kind of evaluation the next eval-mode passes are: ``"validation"`` while the
        task's validation loop runs, ``"test"`` otherwise (test passes, and commands that load a
        checkpoint, which never call this). The task calls it; most encoders evaluate the same
        way in both and ignore it. Ordered Memory validates with its training slot count and
        tests with ``test_memory_slots``."""

    def head_linear(self, layer: nn.Linear, x: Tensor, model: str, product: str) -> Tensor:
        """``layer(x)`` for an output layer of the task over this encoder's outputs (a language
        model's decoder, a classifier's layers), ``model`` and ``product`` naming it in the
        precision's log line and record. Each encoder here decides the precision of its own
        products under bf16-mixed, and asks the same for its task's output layers: bf16 only
        where it pays on this machine (`treernn.kernels.decided_linear`; ``F.linear``, as
        ``nn.Linear`` computes it, without bf16 autocast). An encoder whose task's layers should
        follow autocast as plain ``nn.Linear`` does returns ``layer(x)``."""
        return kernels.decided_linear(x, layer.weight, layer.bias, model, product)

    def product_precisions(self) -> list[list[str]]:
        """What each product of this process ran in under bf16-mixed, as the probes chose it
        (this encoder's, its task's output layers' and any other model's in the process):
        ``[model, product, shape, dtype]``, sorted (`treernn.kernels.context.precisions`)."""
        return kernels.context.precisions()


def last_real_step(hidden: Tensor, mask: Tensor | None) -> Tensor:
    """(B, T, H) -> (B, H): the output at each row's last real token (right padding)."""
    if mask is None:
        return hidden[:, -1]
    lengths = mask.long().sum(1).clamp(min=1)  # (B,)
    index = (lengths - 1).view(-1, 1, 1).expand(-1, 1, hidden.size(-1))
    return hidden.gather(1, index).squeeze(1)


def in_decided_precision(
    module: nn.Module,
    encode: Callable[[Tensor], EncoderOutput],
    x: Tensor,
    width: int,
    flops: Callable[[], float],
    product: str = "encoder",
) -> EncoderOutput:
    """``encode(x)``, under bf16-mixed only where bf16 pays for this encoder here.

    For encoders whose products follow autocast (plain torch modules), under a bf16 autocast:
    `kernels.keeps_autocast` times ``encode`` on the batch being read, in fp32 and under bf16
    autocast, forward and (in training) backward to ``module``'s parameters, and where bf16 is
    not at least 10% faster the encoder runs as with precision=32 (autocast off, fp32 input;
    logged once). Their row counts (a tree level's nodes, a batch's words) change from batch to
    batch, so a product timed alone does not tell: on an Intel Xeon with AMX the Tree-LSTM's
    ListOps update ran at 0.49x fp32 in bf16. The decision is kept per (batch, ``width``) like the
    GEMM backends'; ``flops()`` (about one forward's products) is for the log line only."""
    training = torch.is_grad_enabled()
    label = f"{product}, {'training' if training else 'inference'}"
    probe = partial(_probe, module, encode, x, training, flops)
    name = type(module).__name__
    if kernels.keeps_autocast(x.size(0), width, width, x.device, name, label, probe):
        return encode(x)
    with torch.autocast(x.device.type, enabled=False):
        return encode(x.float())


def _probe(
    module: nn.Module,
    encode: Callable[[Tensor], EncoderOutput],
    x: Tensor,
    training: bool,
    flops: Callable[[], float],
) -> tuple[Callable[[], None], float]:
    """The run `in_decided_precision` has timed, and its FLOPs: gradients returned rather than
    accumulated in ``.grad``."""
    inputs = x.detach()
    parameters = [p for p in module.parameters() if p.requires_grad]

    def run() -> None:
        with torch.set_grad_enabled(training):
            out = encode(inputs)
            if training and parameters:
                loss = out.hidden.float().sum() + out.pooled.float().sum()
                torch.autograd.grad(loss, parameters, allow_unused=True)

    return run, flops() * (3 if training else 1)


def check_dropout(name: str, p: float) -> None:
    if not 0.0 <= float(p) < 1.0:
        raise ConfigValueError(f"{name}={p} is not a probability in [0, 1); set it to e.g. 0.3.")


class LockedDropout(nn.Module):
    """Variational dropout (Gal and Ghahramani 2016): one mask per sequence, shared over time.

    Input (B, T, H); the mask has shape (B, 1, H) and is rescaled by 1/(1-p).
    """

    def __init__(self, p: float = 0.0) -> None:
        super().__init__()
        check_dropout("dropout", p)
        self.p = p

    def forward(self, x: Tensor, p: float | None = None) -> Tensor:
        p = self.p if p is None else p
        if not self.training or p == 0.0:
            return x
        mask = x.new_empty(x.size(0), 1, x.size(2)).bernoulli_(1 - p) / (1 - p)
        return x * mask
