"""Unsupervised parse F1 during language-model training (ON-LSTM paper, Sec. 5.2 and Table 2).

Every ``every_n_epochs`` validation epochs the callback induces a tree per sentence of a WSJ split
from each layer's master-forget distances and logs the corpus-level (EVALB) unlabeled bracket F1 as
``val/parse_f1/layer{k}`` (k from 1), plus the authors' sentence-averaged F1 as
``val/parse_f1_sentence/layer{k}``. Under DDP the sentences are sharded over the processes and the
bracket counts are summed (a torchmetrics ``Metric`` with ``dist_reduce_fx="sum"``), so the number
is the one a single process would compute. With a wandb logger it also logs a table of a few
induced trees beside the gold ones.

``treebank="auto"`` uses the full WSJ when ``wsj_dir`` holds its trees, else the nltk sample below
``data_dir``; ``split="test"`` / ``"short"`` pick the WSJ-test / WSJ10 columns (or the sample's
``sample`` / ``sample10``). An encoder without distances (LSTM, Transformer) is skipped with one
warning.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor
from torchmetrics import Metric

from treernn.parsing.induce import induce_distances, trees_from_distances
from treernn.parsing.metrics import counts_from_spans, sentence_f1_from_spans
from treernn.parsing.trees import to_bracketed, tree_spans
from treernn.parsing.wsj import (
    GoldSentence,
    TreebankError,
    default_splits,
    load_split,
    resolve_treebank,
)

log = logging.getLogger(__name__)


class BracketF1(Metric):
    """EVALB's bracket counts (and the authors' per-sentence F1 sum), summed over processes."""

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


class ParseF1Callback(Callback):
    """Log unsupervised parse F1 per layer every ``every_n_epochs`` validation epochs."""

    def __init__(
        self,
        treebank: str = "auto",
        wsj_dir: str | Path | None = None,
        data_dir: str | Path | None = None,
        split: str = "test",
        every_n_epochs: int = 1,
        batch_size: int = 64,
        max_sentences: int | None = None,
        num_examples: int = 5,
    ) -> None:
        if every_n_epochs < 1:
            raise ValueError(f"every_n_epochs={every_n_epochs} must be at least 1")
        self.treebank = treebank
        self.wsj_dir = wsj_dir
        self.data_dir = data_dir
        self.split = split
        self.every_n_epochs = every_n_epochs
        self.batch_size = batch_size
        self.max_sentences = max_sentences
        self.num_examples = num_examples
        self._sentences: list[GoldSentence] | None = None
        self._split_name: str | None = None
        self._disabled = False

    # ------------------------------------------------------------------ set-up
    def _load(self) -> list[GoldSentence]:
        if self._sentences is None:
            kind = resolve_treebank(self.treebank, self.wsj_dir, self.data_dir)
            short, test = default_splits(kind)
            split = {"short": short, "test": test}.get(self.split, self.split)
            sentences = load_split(kind, split, wsj_dir=self.wsj_dir, data_dir=self.data_dir)
            if self.max_sentences is not None:
                sentences = sentences[: self.max_sentences]
            self._sentences, self._split_name = sentences, split
        return self._sentences

    def _usable(self, pl_module: pl.LightningModule) -> bool:
        if self._disabled:
            return False
        encoder = getattr(pl_module, "encoder", None)
        vocab = getattr(pl_module, "vocab", None)
        reason = None
        if encoder is None or not getattr(encoder, "has_distances", False):
            reason = f"{type(encoder).__name__} has no syntactic distances"
        elif vocab is None or "<eos>" not in vocab:
            reason = "the task has no vocabulary with <eos>"
        else:
            try:
                self._load()
            except TreebankError as error:
                reason = str(error)
        if reason is not None:
            rank_zero_warn(f"ParseF1Callback is skipped: {reason}.")
            self._disabled = True
            return False
        return True

    # ------------------------------------------------------------------ hooks
    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking or (trainer.current_epoch + 1) % self.every_n_epochs:
            return
        if not self._usable(pl_module):
            return
        sentences = self._load()
        shard = sentences[trainer.global_rank :: trainer.world_size]
        vocab = pl_module.vocab
        distances = (
            induce_distances(
                pl_module.embedding,
                pl_module.encoder,
                [vocab.encode(sentence.words) for sentence in shard],
                vocab.eos_index,
                self.batch_size,
            )
            if shard
            else []
        )
        trees = trees_from_distances(distances)  # [layer][sentence]
        num_layers = len(trees) if trees else self._num_layers(pl_module)
        for layer in range(num_layers):
            metric = BracketF1().to(pl_module.device)
            for index, sentence in enumerate(shard):
                predicted_spans = tree_spans(trees[layer][index])
                gold_spans = tree_spans(sentence.tree)
                counts = counts_from_spans(predicted_spans, gold_spans)
                metric.update(
                    counts.matched,
                    counts.predicted,
                    counts.gold,
                    sentence_f1_from_spans(predicted_spans, gold_spans),
                )
            values = metric.compute()  # summed over processes
            # the values are already reduced and equal on every process; sync_dist only keeps
            # Lightning from warning about unsynchronised epoch-level logging (mean of equals).
            for key, value in (("parse_f1", "corpus_f1"), ("parse_f1_sentence", "sentence_f1")):
                pl_module.log(f"val/{key}/layer{layer + 1}", values[value].float(), sync_dist=True)
        if trainer.is_global_zero and trees:
            self._log_examples(trainer, shard, trees)

    def _num_layers(self, pl_module: pl.LightningModule) -> int:
        # a process with no sentence must still join every layer's reduction
        encoder = pl_module.encoder
        return int(getattr(encoder, "num_layers", len(getattr(encoder, "layers", [])) or 1))

    def _log_examples(
        self, trainer: pl.Trainer, shard: list[GoldSentence], trees: list[list[Any]]
    ) -> None:
        wandb_loggers = [
            logger for logger in trainer.loggers if type(logger).__name__ == "WandbLogger"
        ]
        if not wandb_loggers or self.num_examples <= 0:
            return
        rows = []
        for index, sentence in enumerate(shard[: self.num_examples]):
            gold = to_bracketed(sentence.tree, sentence.words)
            for layer, layer_trees in enumerate(trees):
                induced = to_bracketed(layer_trees[index], sentence.words)
                rows.append([trainer.current_epoch, sentence.source, layer + 1, induced, gold])
        for logger in wandb_loggers:
            logger.log_table(
                key="val/parse_trees",
                columns=["epoch", "sentence", "layer", "induced", "gold"],
                data=rows,
            )
