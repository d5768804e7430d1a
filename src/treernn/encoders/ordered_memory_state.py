"""What Ordered Memory's readable recurrence (``treernn.encoders.ordered_memory``) and its fast
kernel (``treernn.kernels.ordered_memory``) share: the carried state, the masked attention of
eqs. (10)-(11), and the parameters and dropout masks the model hands the kernel.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class OrderedMemoryState:
    """The recurrent state after a step (one direction)."""

    cumulative_pointer: Tensor  # (B, N) cp_t
    memory: Tensor  # (B, N, H) M_t
    candidate: Tensor  # (B, N, H) M_hat_t
    tokens_seen: Tensor  # (B,) long: real tokens read so far (0 means the next one is the first)

    @property
    def num_slots(self) -> int:
        return self.cumulative_pointer.size(1)

    def index_select(self, index: Tensor) -> OrderedMemoryState:
        return OrderedMemoryState(
            self.cumulative_pointer[index],
            self.memory[index],
            self.candidate[index],
            self.tokens_seen[index],
        )


#: Mask values below this count as 0 (the authors' ``process_softmax``): such slots get exactly
#: zero attention, and no gradient flows into their mask value.
MASK_THRESHOLD = 1e-5


def masked_attention(scores: Tensor, allowed: Tensor) -> Tensor:
    """Eqs. (10)-(11): softmax of ``scores`` (B, S) multiplied by the soft mask ``allowed`` (B, S)
    in [0, 1], renormalised. Mask values below `MASK_THRESHOLD` are set to 0 first, as the
    authors' code does; slots with a zero mask get exactly 0. Every row needs one allowed slot
    (the last slot always is)."""
    allowed = allowed.masked_fill(allowed < MASK_THRESHOLD, 0.0)
    masked = scores.masked_fill(allowed <= 0, float("-inf"))
    shift = masked.amax(dim=1, keepdim=True).detach()  # any shift gives the same distribution
    weights = torch.exp(masked - shift) * allowed  # (B, S)
    return weights / weights.sum(dim=1, keepdim=True)


LayerNormParameters = tuple[Tensor, Tensor, float]  # weight (H,), bias (H,), eps


@dataclass
class OrderedMemoryWeights:
    """The parameters of one direction, as the fast kernel reads them (the model's own tensors,
    not copies, so gradients reach the model)."""

    input_weight: Tensor  # (H, D) W of eq. (1)
    input_bias: Tensor  # (H,)
    layer_norm: LayerNormParameters  # LN of eq. (1), shared with the cell (eq. 13)
    query_weight: Tensor  # (H, H)
    query_bias: Tensor
    query_norm: LayerNormParameters
    key_weight: Tensor  # (H, H)
    key_bias: Tensor
    key_norm: LayerNormParameters
    score_weight: Tensor  # (1, H)
    score_bias: Tensor  # (1,)
    first_left: Tensor  # (4H, H) the half of W1 acting on the vertical input (left)
    first_right: Tensor  # (4H, H) the half acting on the memory slot (right)
    first_bias: Tensor  # (4H,) b1
    second_weight: Tensor  # (4H, 4H) W2
    second_bias: Tensor  # (4H,) b2


@dataclass
class OrderedMemoryMasks:
    """The dropout masks of one sequence batch, shared by all steps and slots (None: no dropout).
    Drawn by the model, in the order the reference draws them, so both paths get the same ones."""

    query: Tensor | None  # (B, 1, H)
    key: Tensor | None  # (B, 1, H)
    score: Tensor | None  # (B, 1, H)
    cell_input: Tensor | None  # (B, 2H) on the cell's [left; right]
    cell_hidden: Tensor | None  # (B, 4H) on the cell's ReLU layer
