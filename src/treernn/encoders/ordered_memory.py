"""Ordered Memory (Shen, Tan, Hosseini, Lin, Sordoni, Courville, NeurIPS 2019), section 3.

A stack-like memory of N slots, each of size H, written through a cumulative attention pointer and
composed slot by slot with the Gated Recursive Cell (section 3.2, below). Slot N - 1 (the
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

Gated Recursive Cell (section 3.2), which composes two vectors into one, like a Tree-LSTM node
without a memory cell:

    [v; h; c; u] = W2 ReLU(W1 [left; right] + b1) + b2                              eq. (12)
    out          = LN(sigmoid(v) * left + sigmoid(h) * right + sigmoid(c) * u)      eq. (13)

``left`` is the vertical input (the candidate of the slot below, M_hat^{i-1}), ``right`` the
horizontal one (the memory slot M^i). As in the authors' code the feed-forward part is
``Dropout -> Linear(2H, 4H) -> ReLU -> Dropout -> Linear(4H, 4H)``.

Dropouts, where the authors put them (REFERENCE.md; the config names of their scripts in brackets):
``dropout`` [dropout]: the cell's two dropouts, on [left; right] and on its ReLU layer.
``memory_dropout`` [dropoutm]: the three dropouts of the attention (query, keys, scores).
``input_dropout`` [dropouti]: on the encoder input before the projection of eq. (1); ``locked`` (one
mask per sequence, shared over time) for SST as the authors' sentiment model does.
``output_dropout`` [dropouto]: on the returned outputs (hidden and pooled), before the task's head.
Deviation, for speed: every dropout mask inside the recurrence is sampled once per sequence and
shared by all steps and slots, where the authors' modules sample a fresh mask at every call (this is
variational dropout; eval-mode outputs are identical). Both implementations draw the same masks
from the same seed, but the fast one hands them to rows sorted by length, so in training with
dropout the two agree only in distribution.

Two implementations compute the same function (``impl``):

* ``impl="reference"``: `OrderedMemoryRecurrence.reference_forward`, Algorithm 1 as written:
  every step, every slot, all rows together, with `GatedRecursiveCell` calls. Read this
  one. It runs in fp32 whatever autocast asks for.
* ``impl="fast"`` (default): `treernn.kernels.ordered_memory`, which computes only the
  slots that can be pointed at, skips padding, and runs each step's chain of cells as one
  autograd node with a hand-written backward pass (bf16 matrix products under bf16-mixed). Tests
  compare it with the reference in float64.

More slots at test time: ``test_memory_slots`` (e.g. 12 in training, 24 at test time for logical
inference); no parameter depends on N. As in the authors' code, validation uses the training count
``memory_slots``: the encoder cannot tell a validation pass from a test pass, so the task says
which it runs (``encoder.set_eval_stage("validation")`` around its validation loop, ``"test"``
after it); otherwise eval mode (test passes, and the
commands that load a checkpoint) uses ``test_memory_slots``. Sequences longer than N tokens are
handled as in the paper: the stack holds at most N sub-trees, and once it is full the last slot
stays attendable, so the model keeps composing; nothing is rejected.

Padding (``padding_mode``). Default ``invariant``: padding never changes a row's results. A padded
step leaves the row's state as it was, and a row's first real token gets the first-step treatment
(no attention, every candidate slot x_1) wherever it sits. Deviation from the authors' ListOps
code, which left-pads and gives that treatment only at the batch's first step. There a left-padded
row's pad steps keep its zero initial state, and its first real token x_1 is an ordinary step
over that state: the previous pointer is 0, so only the last slot is allowed and
p = cp = (0, ..., 0, 1), rcp = 1 everywhere, M_t = M_hat_{t-1} = 0, and the candidate is x_1 in
every slot but the last, which gets ``cell(x_1, 0)`` (the step's output). Its next step starts
from cp^{N-1} = 1, so two slots can be attended at the second token where the invariant treatment
allows one, and every later output of the row depends on whether it was padded (not on how much:
pad steps change nothing). ``authors_left`` reproduces that: a row shorter than the batch is read
as if left-padded to the batch's width, whichever side its padding is on, and a row that fills the
batch as before. It applies to the forward direction only (reversed, a left-padded row reads its
pads last, which changes nothing).
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from treernn import kernels
from treernn.encoders.base import (
    Encoder,
    EncoderOutput,
    EvalStage,
    TreeSignal,
    check_dropout,
)
from treernn.encoders.ordered_memory_state import (
    OrderedMemoryMasks,
    OrderedMemoryState,
    OrderedMemoryWeights,
    masked_attention,
)
from treernn.errors import ConfigValueError
from treernn.kernels import GemmBackend, check_backend

# ----------------------------------------------------------------------------- the cell (3.2)
DropoutMasks = tuple[Tensor, Tensor]  # (B, 2H) on [left; right], (B, 4H) on the ReLU output


class GatedRecursiveCell(nn.Module):
    """``forward(left (N, H), right (N, H)) -> (N, H)``, eqs. (12)-(13).

    ``layer_norm``: pass the encoder's input LayerNorm to share it (eq. 13: "LN shares the same
    parameters with the one used in Eqn. 1"). Called plainly, the cell samples fresh dropout masks
    per call (the authors' behaviour); Ordered Memory passes one pair per sequence instead
    (`sample_dropout_masks`). The fast path re-implements `compose` in
    `treernn.kernels.ordered_memory.slot_chain` and only reads these parameters.
    """

    def __init__(
        self, hidden_size: int, dropout: float = 0.0, layer_norm: nn.LayerNorm | None = None
    ) -> None:
        super().__init__()
        check_dropout("dropout", dropout)
        self.hidden_size = hidden_size
        self.dropout = dropout
        self.first_layer = nn.Linear(2 * hidden_size, 4 * hidden_size)  # W1, b1
        self.second_layer = nn.Linear(4 * hidden_size, 4 * hidden_size)  # W2, b2 -> v, h, c, u
        self.layer_norm = layer_norm if layer_norm is not None else nn.LayerNorm(hidden_size)
        if self.layer_norm.normalized_shape != (hidden_size,):
            raise ConfigValueError(
                f"layer_norm normalises {tuple(self.layer_norm.normalized_shape)}, but the cell "
                f"has hidden_size={hidden_size}; pass nn.LayerNorm({hidden_size})"
            )

    def sample_dropout_masks(self, batch_size: int, like: Tensor) -> DropoutMasks | None:
        """One pair of inverted-dropout masks for a whole sequence, or None when not dropping."""
        if not self.training or self.dropout == 0.0:
            return None
        keep = 1.0 - self.dropout
        input_mask = like.new_empty(batch_size, 2 * self.hidden_size).bernoulli_(keep) / keep
        hidden_mask = like.new_empty(batch_size, 4 * self.hidden_size).bernoulli_(keep) / keep
        return input_mask, hidden_mask

    def split_first_layer(self) -> tuple[Tensor, Tensor, Tensor]:
        """W1 split by input: (4H, H) acting on ``left``, (4H, H) acting on ``right``, and b1."""
        weight = self.first_layer.weight  # (4H, 2H)
        return weight[:, : self.hidden_size], weight[:, self.hidden_size :], self.first_layer.bias

    def compose(
        self, left: Tensor, right: Tensor, first_layer_out: Tensor, hidden_mask: Tensor | None
    ) -> Tensor:
        """Everything after ``W1 [left; right] + b1`` (given as ``first_layer_out``, (N, 4H))."""
        hidden = F.relu(first_layer_out)  # (N, 4H)
        if hidden_mask is not None:
            hidden = hidden * hidden_mask
        elif self.training and self.dropout > 0.0:
            hidden = F.dropout(hidden, self.dropout, training=True)
        gate_logits, candidate = self.second_layer(hidden).split(
            (3 * self.hidden_size, self.hidden_size), dim=-1
        )
        vertical_gate, horizontal_gate, candidate_gate = torch.sigmoid(gate_logits).chunk(3, dim=-1)
        mixed = vertical_gate * left
        mixed = torch.addcmul(mixed, horizontal_gate, right)
        mixed = torch.addcmul(mixed, candidate_gate, candidate)
        return self.layer_norm(mixed)  # (N, H)

    def forward(
        self, left: Tensor, right: Tensor, dropout_masks: DropoutMasks | None = None
    ) -> Tensor:
        if left.shape != right.shape or left.size(-1) != self.hidden_size:
            raise ValueError(
                f"GatedRecursiveCell(hidden_size={self.hidden_size}) needs left and right of shape "
                f"(N, {self.hidden_size}); got {tuple(left.shape)} and {tuple(right.shape)}"
            )
        inputs = torch.cat([left, right], dim=-1)  # (N, 2H)
        if dropout_masks is not None:
            inputs = inputs * dropout_masks[0]
        elif self.training and self.dropout > 0.0:
            inputs = F.dropout(inputs, self.dropout, training=True)
        hidden_mask = dropout_masks[1] if dropout_masks is not None else None
        return self.compose(left, right, self.first_layer(inputs), hidden_mask)


# ----------------------------------------------------------------------------- the memory (3.1)
class OrderedMemoryRecurrence(nn.Module):
    """One direction of Ordered Memory over a batch of sequences (Algorithm 1)."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        dropout: float = 0.0,
        memory_dropout: float = 0.0,
        impl: Literal["fast", "reference"] = "fast",
        gemm_backend: str = "auto",
    ) -> None:
        super().__init__()
        self.hidden_size = hidden_size
        self.impl = impl
        self.gemm_backend = check_backend(gemm_backend)
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
            like.new_zeros(batch_size, num_slots),
            zeros,
            zeros,
            torch.zeros(batch_size, dtype=torch.long, device=like.device),
        )

    def start_state(
        self, state: OrderedMemoryState | None, like: Tensor, num_slots: int
    ) -> OrderedMemoryState:
        """The carried state, or a fresh one (zeros, no token seen) when ``state`` is None."""
        if state is None:
            return self.initial_state(like.size(0), num_slots, like)
        if state.num_slots != num_slots:
            raise ValueError(
                f"the carried state has {state.num_slots} slots but this pass uses {num_slots} "
                "(train and test slot counts differ): start from state=None"
            )
        return state

    def attention_dropout_masks(self, batch_size: int, like: Tensor) -> list[Tensor | None]:
        """Query, key and score dropout masks, (B, 1, H) each, one per sequence."""
        if not self.training or self.memory_dropout == 0.0:
            return [None, None, None]
        keep = 1.0 - self.memory_dropout
        return [
            like.new_empty(batch_size, 1, self.hidden_size).bernoulli_(keep) / keep
            for _ in range(3)
        ]

    def forward(
        self,
        x: Tensor,
        mask: Tensor,
        num_slots: int,
        state: OrderedMemoryState | None = None,
        authors_padding: bool = False,
    ) -> tuple[Tensor, Tensor, OrderedMemoryState]:
        """x (B, T, D), mask (B, T) bool -> hidden (B, T, H) (zeros at padding),
        attention (B, T, N) (zeros at padding and first tokens), final state.
        ``authors_padding``: rows shorter than T start as the authors' left-padded rows do (see
        ``padding_mode`` in the module docstring)."""
        if self.impl == "fast":  # the products' precision is decided there, under autocast
            return kernels.ordered_memory_recurrence(
                self, x, mask, num_slots, state, authors_padding
            )
        with torch.autocast(x.device.type, enabled=False):
            if x.dtype in (torch.float16, torch.bfloat16):
                x = x.float()  # the reference runs in fp32
            state = self.start_state(state, x, num_slots)
            return self.reference_forward(x, mask, state, authors_padding)

    def sample_dropout_masks(self, batch_size: int, like: Tensor) -> OrderedMemoryMasks:
        """The fast path's masks, drawn in the reference's order (attention, then the cell)."""
        query, key, score = self.attention_dropout_masks(batch_size, like)
        cell_masks = self.cell.sample_dropout_masks(batch_size, like)
        cell_input, cell_hidden = cell_masks if cell_masks is not None else (None, None)
        return OrderedMemoryMasks(query, key, score, cell_input, cell_hidden)

    def kernel_weights(self) -> OrderedMemoryWeights:
        """This direction's parameters for `treernn.kernels.ordered_memory`."""

        def norm(module: nn.LayerNorm) -> tuple[Tensor, Tensor, float]:
            return module.weight, module.bias, module.eps

        first_left, first_right, first_bias = self.cell.split_first_layer()
        return OrderedMemoryWeights(
            input_weight=self.input_projection.weight,
            input_bias=self.input_projection.bias,
            layer_norm=norm(self.layer_norm),
            query_weight=self.query_projection.weight,
            query_bias=self.query_projection.bias,
            query_norm=norm(self.query_norm),
            key_weight=self.key_projection.weight,
            key_bias=self.key_projection.bias,
            key_norm=norm(self.key_norm),
            score_weight=self.score.weight,
            score_bias=self.score.bias,
            first_left=first_left,
            first_right=first_right,
            first_bias=first_bias,
            second_weight=self.cell.second_layer.weight,
            second_bias=self.cell.second_layer.bias,
        )

    def reference_forward(
        self, x: Tensor, mask: Tensor, state: OrderedMemoryState, authors_padding: bool = False
    ) -> tuple[Tensor, Tensor, OrderedMemoryState]:
        """Algorithm 1 as written: every step, every slot, all rows at once. A padded step leaves
        a row's state as it was and outputs zeros."""
        batch_size, steps, _ = x.shape
        num_slots, hidden_size = state.num_slots, self.hidden_size
        query_mask, key_mask, score_mask = self.attention_dropout_masks(batch_size, x)
        cell_masks = self.cell.sample_dropout_masks(batch_size, x)  # shared by all steps, slots
        inputs = self.layer_norm(self.input_projection(x))  # eq. (1), (B, T, H)
        pointer, memory, candidate = state.cumulative_pointer, state.memory, state.candidate
        tokens_seen = state.tokens_seen
        # which rows get the first-token treatment at their first token: all of them, or with
        # the authors' left padding only those that fill the batch (no padding before them)
        fresh_start = mask.all(1) if authors_padding else torch.ones_like(tokens_seen, dtype=bool)
        outputs, attentions = [], []
        for t in range(steps):
            x_t = inputs[:, t]  # (B, H)
            # eqs. (8)-(11): attend from x_t over the previous candidates M_hat_{t-1}
            query = x_t if query_mask is None else x_t * query_mask[:, 0]
            query = self.query_norm(self.query_projection(query))  # (B, H)
            keys = candidate if key_mask is None else candidate * key_mask
            keys = self.key_norm(self.key_projection(keys))  # (B, N, H)
            features = torch.relu(query.unsqueeze(1) + keys)
            if score_mask is not None:
                features = features * score_mask
            scores = self.score(features).squeeze(-1) / math.sqrt(hidden_size)  # (B, N)
            # cp_{t-1}^{i+1}, with cp^N = 1 (eq. 10)
            allowed = torch.cat([pointer[:, 1:], pointer.new_ones(batch_size, 1)], dim=1)
            attention = masked_attention(scores, allowed)  # p_t, eq. (2)
            cumulative = attention.cumsum(dim=1)  # cp_t, eq. (3)
            reverse_cumulative = attention.flip(1).cumsum(dim=1).flip(1)  # rcp_t, eq. (4)
            # a row's first token: no attention, cp = 0 and rcp = 1
            first = ((tokens_seen == 0) & fresh_start).unsqueeze(1)  # (B, 1)
            attention = attention.masked_fill(first, 0.0)
            cumulative = cumulative.masked_fill(first, 0.0)
            reverse_cumulative = reverse_cumulative.masked_fill(first, 1.0)
            # eq. (5): M_t = M_{t-1} (1 - rcp) + M_hat_{t-1} rcp
            erase = reverse_cumulative.unsqueeze(-1)  # (B, N, 1)
            new_memory = memory * (1.0 - erase) + candidate * erase
            # eqs. (6)-(7), slot by slot from the top: M_hat^i = x_t (1 - cp^i) + o^i cp^i
            below = x_t  # M_hat_t^{-1}
            new_candidate = []
            for slot in range(num_slots):
                composed = self.cell(below, new_memory[:, slot], cell_masks)  # o_t^i
                write = cumulative[:, slot : slot + 1]  # (B, 1)
                below = x_t * (1.0 - write) + composed * write
                new_candidate.append(below)
            # padded steps keep the row's state
            real = mask[:, t].unsqueeze(1)  # (B, 1)
            pointer = torch.where(real, cumulative, pointer)
            memory = torch.where(real.unsqueeze(-1), new_memory, memory)
            candidate = torch.where(real.unsqueeze(-1), torch.stack(new_candidate, 1), candidate)
            tokens_seen = tokens_seen + mask[:, t].long()
            outputs.append(below.masked_fill(~real, 0.0))  # output_t = M_hat_t^{N-1}
            attentions.append(attention.masked_fill(~real, 0.0))
        hidden = torch.stack(outputs, 1) if steps else x.new_zeros(batch_size, 0, hidden_size)
        attention = torch.stack(attentions, 1) if steps else x.new_zeros(batch_size, 0, num_slots)
        return hidden, attention, OrderedMemoryState(pointer, memory, candidate, tokens_seen)


# ----------------------------------------------------------------------------- the encoder
class OrderedMemoryEncoder(Encoder):
    """Ordered Memory as a sequence encoder (see the module docstring).

    ``hidden`` (B, T, H) holds each step's output (the last slot of the candidate memory; zeros at
    padding), ``pooled`` (B, H) the output after a row's last real token, and
    ``tree_signal`` (kind "attention", values (1, B, T, N)) the pointer distributions p_t used for
    tree induction (zeros at a row's first token and at padding). Bidirectional: a second Ordered
    Memory with its own parameters reads each row right to left; outputs are concatenated (2H) and
    its attention is ``extras["attention_backward"]`` (in reading order, i.e. over reversed
    positions).
    ``impl="fast"`` (default) runs `treernn.kernels.ordered_memory` (only the slots
    that can be pointed at, the hand-written backward pass of the slot chain, bf16 matrix products
    under autocast); ``"reference"`` runs the readable reference, Algorithm 1 as written (fp32).
    ``gemm_backend`` (fast path only): the library of the slot chain's per-slot products
    (`treernn.kernels.gemm`; ``auto`` probes MKL, oneDNN and aten once per shape).
    ``padding_mode``: ``invariant`` (default) or ``authors_left`` (module docstring).
    `set_eval_stage`: the task says when it validates, where eval mode uses ``memory_slots``.
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
        impl: Literal["fast", "reference"] = "fast",
        gemm_backend: GemmBackend = "auto",
        padding_mode: Literal["invariant", "authors_left"] = "invariant",
    ) -> None:
        super().__init__()
        if num_layers != 1:
            raise ConfigValueError(
                f"num_layers={num_layers}: Ordered Memory has one layer (depth comes from its "
                "memory slots); set num_layers=1 and use memory_slots for capacity"
            )
        dropouts = {
            "dropout": dropout,
            "memory_dropout": memory_dropout,
            "input_dropout": input_dropout,
            "output_dropout": output_dropout,
        }
        for name, value in dropouts.items():
            check_dropout(name, value)
        if memory_slots < 1 or (test_memory_slots is not None and test_memory_slots < 1):
            raise ConfigValueError(
                f"memory_slots={memory_slots}, test_memory_slots={test_memory_slots}: "
                "slot counts must be positive integers (the paper uses 12-24)"
            )
        if padding_side not in ("right", "left"):
            raise ConfigValueError(f"padding_side={padding_side!r} must be 'right' or 'left'")
        if padding_mode not in ("invariant", "authors_left"):
            raise ConfigValueError(
                f"padding_mode={padding_mode!r} must be 'invariant' (padding never changes "
                "results) or 'authors_left' (the authors' left-padded ListOps behaviour)"
            )
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.memory_slots = memory_slots
        self.test_memory_slots = test_memory_slots or memory_slots
        self.padding_side = padding_side
        self.padding_mode = padding_mode
        if impl not in ("fast", "reference"):
            raise ConfigValueError(f"impl={impl!r} is not one of 'fast', 'reference'.")
        self.impl = impl
        self.eval_stage: EvalStage = "test"  # set_eval_stage; validation uses memory_slots
        self.input_dropout = input_dropout
        self.locked_input_dropout = locked_input_dropout
        self.output_dropout = output_dropout
        self.bidirectional = bidirectional
        self.forward_memory = OrderedMemoryRecurrence(
            input_size, hidden_size, dropout, memory_dropout, impl, gemm_backend
        )
        self.backward_memory = (
            OrderedMemoryRecurrence(
                input_size, hidden_size, dropout, memory_dropout, impl, gemm_backend
            )
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
        """Slots used by the next forward pass: the training count in training and validation,
        the test count otherwise in eval mode."""
        if self.training or self.eval_stage == "validation":
            return self.memory_slots
        return self.test_memory_slots

    def set_eval_stage(self, stage: EvalStage) -> None:
        self.eval_stage = stage

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
        authors_padding = self.padding_mode == "authors_left"
        hidden, attention, final = self.forward_memory(x, mask, num_slots, state, authors_padding)
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
