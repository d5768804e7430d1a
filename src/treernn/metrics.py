"""torchmetrics metrics shared by the tasks; their states are sums, so they reduce across ranks."""

from __future__ import annotations

import torch
from torch import Tensor
from torchmetrics import Metric


class Perplexity(Metric):
    """exp(total NLL / total tokens) over a whole epoch: the papers' corpus perplexity."""

    full_state_update = False
    higher_is_better = False

    def __init__(self) -> None:
        super().__init__()
        self.add_state("total_nll", torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("total_tokens", torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, mean_nll: Tensor, tokens: int) -> None:
        self.total_nll += mean_nll.detach().double() * tokens
        self.total_tokens += tokens

    def compute(self) -> Tensor:
        return torch.exp(self.total_nll / self.total_tokens.clamp(min=1)).float()
