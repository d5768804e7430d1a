"""Dependency-tree language modelling (Zhang, Lu and Lapata, NAACL 2016, Sections 2.2 and 2.5).

The same module trains a tree language model (TreeLSTM / LdTreeLSTM, encoders reading the
``"dependency_tree"`` view) or a sequential LSTM language model on the same sentences (the
``"tokens"`` view): the batch hands out the view's inputs and the words it predicts
(`treernn.data.dependency.DependencyBatch`). The tree model predicts the words in
breadth-first order, P(S|T) = prod_t P(w_t | D(w_t))
(Eq. 1); the sequential model predicts them left to right from a begin-of-sentence token (the ROOT
token). Neither predicts an end-of-sentence token, so both perplexities are over the same words.

Losses: ``nll``, the exact softmax (Eq. 3, 8); ``nce``, noise-contrastive estimation (Section 2.5):
P_d(w) = P^(w) / (P^(w) + k P_n(w)) with P^(w) = exp(Who[w] h + b_w - ln Z), k noise words per
target drawn from the unigram distribution raised to 0.75, ln Z learned from 9. Validation and test
always use the exact softmax with the same output weights (ln Z unused). Losses are averaged per
word (Eq. 8 averages per sentence; the scale is absorbed by the learning rate and gradient
clipping).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from treernn.data.dependency import DependencyBatch
from treernn.data.vocab import Vocabulary
from treernn.encoders.base import Encoder
from treernn.errors import ConfigValueError
from treernn.metrics import Perplexity
from treernn.tasks.base import Task, build_encoder


def unigram_noise_log_probs(counts: Sequence[int], power: float = 0.75) -> Tensor:
    """log P_n(w), P_n proportional to count^power (Mikolov et al. 2013b)."""
    weights = torch.tensor(counts, dtype=torch.float64).clamp(min=0) ** power
    if float(weights.sum()) <= 0:
        raise ValueError("unigram counts are all zero; NCE needs training-word counts")
    return (weights / weights.sum()).log().float()


def nce_loss(
    hidden: Tensor,
    targets: Tensor,
    weight: Tensor,
    bias: Tensor,
    log_z: Tensor,
    noise_log_probs: Tensor,
    noise: Tensor,
) -> Tensor:
    """Mean NCE loss over N targets (Section 2.5, Mnih and Teh 2012).

    hidden (N, H), targets (N,), weight (V, H), bias (V,), log_z scalar, noise_log_probs (V,),
    noise (N, k) noise word ids. With s(w) = weight[w] h + bias[w] - ln Z and
    delta(w) = s(w) - ln(k P_n(w)):
    loss = -log sigmoid(delta(w_t)) - sum_j log sigmoid(-delta(w~_j)).
    """
    k = noise.size(1)
    log_k = math.log(k)
    target_score = (hidden * weight[targets]).sum(-1) + bias[targets] - log_z  # (N,)
    noise_score = torch.einsum("nh,nkh->nk", hidden, weight[noise]) + bias[noise] - log_z  # (N, k)
    target_delta = target_score - (log_k + noise_log_probs[targets])
    noise_delta = noise_score - (log_k + noise_log_probs[noise])
    loss = -(F.logsigmoid(target_delta) + F.logsigmoid(-noise_delta).sum(-1))
    return loss.mean()


class DependencyLanguageModel(Task):
    """Embedding -> encoder -> Who (Eq. 2-3), trained with NLL or NCE.

    ``encoder`` is a partial completed with ``input_size=embedding_size``. ``vocab``,
    ``unigram_counts``, ``lowercase`` and ``replace_numbers`` come from the DataModule's
    ``task_kwargs()`` and are saved with the checkpoint, so that ``python -m treernn msr``
    and ``python -m treernn rerank`` can encode new sentences the same way.
    """

    def __init__(
        self,
        encoder: Callable[..., Encoder],
        vocab_size: int,
        vocab: Vocabulary | list[str] | None = None,
        unigram_counts: list[int] | None = None,
        pad_index: int = 0,
        lowercase: bool = True,
        replace_numbers: bool = False,
        embedding_size: int = 200,
        dropout: float = 0.0,
        loss: Literal["nll", "nce"] = "nll",
        noise_samples: int = 20,
        noise_power: float = 0.75,
        log_z_init: float = 9.0,
        init_range: float = 0.1,
        optimizer: Callable[..., torch.optim.Optimizer] | None = None,
        scheduler: Callable[..., Any] | None = None,
    ) -> None:
        super().__init__(
            optimizer,
            scheduler,
            default_optimizer=lambda params: torch.optim.SGD(params, lr=1.0),  # the paper's
        )
        if loss not in ("nll", "nce"):
            raise ConfigValueError(f"loss={loss!r}: use 'nll' (exact softmax) or 'nce'")
        # Partials and data-dependent lists (vocab, counts) are not hyper-parameters: the run
        # (treernn.lifecycle.execute) stores the config and task_kwargs in the checkpoint and
        # rebuilds the task from them (treernn.models.load.load_trained).
        self.save_hyperparameters(
            ignore=["encoder", "vocab", "unigram_counts", "optimizer", "scheduler"]
        )
        if isinstance(vocab, Vocabulary):
            vocab = vocab.itos
        self.vocab: list[str] | None = list(vocab) if vocab is not None else None
        self.embedding = nn.Embedding(vocab_size, embedding_size)
        self.encoder = build_encoder(encoder, input_size=embedding_size)
        self.output_dropout = nn.Dropout(dropout)
        self.input_dropout = nn.Dropout(dropout)
        self.decoder = nn.Linear(self.encoder.output_size, vocab_size)  # Who (Eq. 2d)
        for parameter in (self.embedding.weight, self.decoder.weight, self.decoder.bias):
            nn.init.uniform_(parameter, -init_range, init_range)
        self.log_z = nn.Parameter(torch.tensor(float(log_z_init)), requires_grad=loss == "nce")
        if loss == "nce":
            if not unigram_counts:
                raise ConfigValueError("loss='nce' needs unigram_counts (from the DataModule)")
            self.register_buffer(
                "noise_log_probs", unigram_noise_log_probs(unigram_counts, noise_power)
            )
        self.metrics = nn.ModuleDict(
            {stage: Perplexity() for stage in ("train_ppl", "val_ppl", "test_ppl")}
        )

    def chance_levels(self) -> dict[str, float]:
        """A uniform guess over the V words: perplexity V (validation always uses the exact
        softmax), and ln V per word for the ``nll`` training loss (the NCE loss has no such
        level)."""
        words = self.decoder.out_features
        levels = {"val/ppl": float(words)}
        if self.hparams.loss == "nll":
            levels["train/loss"] = math.log(words)
        return levels

    # ------------------------------------------------------------------ model

    def hidden_and_targets(self, batch: DependencyBatch) -> tuple[Tensor, Tensor, Tensor]:
        """(B, T, H) states, (B, T) target ids, (B, T) bool mask of the words to predict."""
        encoded = self.encode_batch(batch)
        inputs = encoded.inputs
        hidden = encoded.output.hidden[:, inputs.first_predicting_step :]  # states that predict
        return self.output_dropout(hidden), inputs.targets, inputs.target_mask

    def token_nll(self, batch: DependencyBatch) -> tuple[Tensor, Tensor]:
        """Exact-softmax negative log-likelihood of each word (B, T) and the word mask (B, T)."""
        hidden, targets, mask = self.hidden_and_targets(batch)
        # (B, T, V); T changes from batch to batch (rows rounded under bf16, see there)
        logits = self.encoder.head_linear(self.decoder, hidden, "dependency LM", "decoder")
        nll = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")
        return nll * mask, mask

    @torch.no_grad()
    def sentence_log_probs(self, batch: DependencyBatch) -> Tensor:
        """log P(S|T) (tree models) or log P(S) (sequential) of each sentence, (B,)."""
        nll, _ = self.token_nll(batch)
        return -nll.sum(1)

    def forward(self, batch: DependencyBatch) -> Tensor:
        return self.sentence_log_probs(batch)

    # ------------------------------------------------------------------ Lightning

    def training_step(self, batch: DependencyBatch, batch_idx: int) -> Tensor:
        if self.hparams.loss == "nll":
            nll, mask = self.token_nll(batch)
            loss = nll.sum() / mask.sum().clamp(min=1)
            self.metrics["train_ppl"](loss.detach(), int(mask.sum()))
            self.log(
                "train/ppl",
                self.metrics["train_ppl"],
                on_step=False,
                on_epoch=True,
                batch_size=len(batch),
            )
        else:
            hidden, targets, mask = self.hidden_and_targets(batch)
            hidden, targets = hidden[mask], targets[mask]  # (N, H), (N,)
            noise = torch.multinomial(
                self.noise_log_probs.exp(),
                targets.numel() * self.hparams.noise_samples,
                replacement=True,
            ).view(targets.numel(), -1)
            loss = nce_loss(
                hidden,
                targets,
                self.decoder.weight,
                self.decoder.bias,
                self.log_z,
                self.noise_log_probs,
                noise,
            )
            self.log("train/log_z", self.log_z.detach(), on_step=True, on_epoch=False)
        self.log("train/loss", loss, prog_bar=True, batch_size=len(batch))
        return loss

    def _evaluate(self, batch: DependencyBatch, stage: str) -> None:
        nll, mask = self.token_nll(batch)
        metric = self.metrics[f"{stage}_ppl"]
        size = len(batch)
        loss = nll.sum() / mask.sum().clamp(min=1)
        metric(loss, int(mask.sum()))
        self.log(f"{stage}/nll", loss, batch_size=size, prog_bar=stage == "val")
        self.log(
            f"{stage}/ppl", metric, on_step=False, on_epoch=True, prog_bar=True, batch_size=size
        )

    def validation_step(self, batch: DependencyBatch, batch_idx: int) -> None:
        self._evaluate(batch, "val")

    def test_step(self, batch: DependencyBatch, batch_idx: int) -> None:
        self._evaluate(batch, "test")
