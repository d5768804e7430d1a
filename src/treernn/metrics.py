"""torchmetrics metrics shared by the tasks; their states are sums, so they reduce across ranks."""

from __future__ import annotations

from typing import Any

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


class BracketF1(Metric):
    """EVALB's bracket counts (and the authors' per-sentence F1 sum), summed over processes.

    ``compute()`` gives the corpus-level unlabeled bracket F1 (``corpus_f1``) and the mean of the
    sentences' F1 (``sentence_f1``), both over every process's sentences.
    """

    full_state_update = False

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        for name in ("matched", "predicted", "gold", "sentences"):
            self.add_state(name, default=torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")
        self.add_state(
            "sentence_f1_sum", default=torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum"
        )

    def update(self, matched: int, predicted: int, gold: int, sentence_f1: float) -> None:
        self.matched += matched
        self.predicted += predicted
        self.gold += gold
        self.sentences += 1
        self.sentence_f1_sum += sentence_f1

    def compute(self) -> dict[str, Tensor]:
        denominator = (self.predicted + self.gold).double()
        corpus = torch.where(
            self.matched > 0, 2.0 * self.matched.double() / denominator.clamp(min=1), 0.0
        )
        sentence = self.sentence_f1_sum / self.sentences.clamp(min=1)
        return {"corpus_f1": corpus, "sentence_f1": sentence}
