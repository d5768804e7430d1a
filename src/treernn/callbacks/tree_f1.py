"""Induced trees against gold trees on the classification tasks (logical inference, ListOps).

ON-LSTM (Shen et al. 2019, Sec. 5.2, Eq. 15) reads a tree off its master-forget distances: split
before the word with the largest distance, recursively (:func:`treernn.parsing.trees.greedy_tree`).
On logic and ListOps the gold trees are known, so the induced trees of every layer can be scored
against them with the language-model issue's metrics (:mod:`treernn.parsing.metrics`): EVALB's
corpus-level unlabeled bracket F1 and the authors' sentence-averaged F1.

Ordered Memory (Shen et al., NeurIPS 2019, Algorithm 2) has no distances: its trees come from the
argmax slot of each step's attention (:mod:`treernn.parsing.om_trees`), one tree per sentence,
reported as ``layer1``. On logic, where it may read the brackets too, its tree over everything read
is restricted to the leaves (the bracket positions are dropped and unary nodes collapsed);
``bracket_distances`` does not apply to it.

Unlike the language-model evaluation (:mod:`treernn.parsing.induce`, which wraps each sentence in
``<eos>``), the model here reads each sentence exactly as the classifier does (eval mode, fresh
state, no extra tokens), so the trees are those of the model that made the predictions.

Which distance belongs to which leaf. The distance of a token is the one computed while reading it;
a large value there means the gate erased memory, i.e. a constituent ended just before that token.
On ListOps the model reads exactly the leaves (the parentheses are not fed to it). On logical
inference the sequence models read the brackets too, but the gold tree is over the other tokens:
``( d ( and e ) )`` has leaves ``d and e`` at token positions 1, 3 and 4. With
``bracket_distances="drop"`` (default) a leaf keeps the distance read at the leaf itself and the
brackets' distances are dropped, the same rule as for ``<eos>`` in the language-model setting.
``"max"`` instead gives each leaf the largest distance over the tokens since the previous leaf
(the brackets in between and the leaf), for a model that signals the boundary at a bracket.

:class:`TreeF1Callback` logs ``{val,test}/parse_f1/layer{k}`` (corpus) and
``{val,test}/parse_f1_sentence/layer{k}`` (k from 1, the same keys as the language-model
callback). Counts are summed across processes by the parsing package's
:class:`~treernn.callbacks.parse_f1.BracketF1`. At test time only the first evaluation group is
scored (the systematic-generalisation groups repeat its sentences), and the per-layer table is
printed and written to ``<output_dir>/tree_f1.json``. Encoders without distances are skipped with
one warning. From a checkpoint: ``python -m treernn.results trees --ckpt PATH``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor

from treernn.callbacks.parse_f1 import BracketF1
from treernn.data.classification import ClassificationBatch
from treernn.encoders.base import EncoderOutput
from treernn.parsing.induce import NoDistancesError, trees_from_distances
from treernn.parsing.metrics import counts_from_spans, sentence_f1_from_spans
from treernn.parsing.om_trees import induce_trees as attention_trees
from treernn.parsing.trees import Tree, tree_spans

BracketDistances = Literal["drop", "max"]
BRACKET_DISTANCES = ("drop", "max")


def leaf_distances(
    distances: Tensor, leaf_positions: Sequence[int], bracket_distances: BracketDistances = "drop"
) -> Tensor:
    """(L, T) per-token distances of one sentence -> (L, n) distances of its n leaves.

    ``drop``: the distance read at each leaf. ``max``: the largest distance over the tokens after
    the previous leaf up to and including this leaf (for the first leaf: from the first token).
    """
    if bracket_distances not in BRACKET_DISTANCES:
        raise ValueError(f"bracket_distances={bracket_distances!r}: use one of {BRACKET_DISTANCES}")
    positions = list(leaf_positions)
    if not positions:
        raise ValueError("a sentence without leaves has no tree")
    if bracket_distances == "drop":
        return distances[:, positions]
    starts = [0, *(position + 1 for position in positions[:-1])]
    gaps = [distances[:, start : end + 1].amax(1) for start, end in zip(starts, positions)]
    return torch.stack(gaps, dim=1)


@contextmanager
def deep_trees(limit: int = 20_000) -> Iterator[None]:
    """Room for :mod:`treernn.parsing.trees`' recursive walks: ListOps test trees reach ~940
    leaves and as many levels, near Python's default limit of 1000 frames."""
    previous = sys.getrecursionlimit()
    sys.setrecursionlimit(max(previous, limit))
    try:
        yield
    finally:
        sys.setrecursionlimit(previous)


def scored_rows(batch: ClassificationBatch, first_group_only: bool) -> list[int]:
    """Sentence rows (of the S*B stacked rows) to score: all, or those of group-0 examples."""
    num_examples = len(batch)
    rows = range(num_examples * batch.num_sentences)
    if not first_group_only:
        return list(rows)
    groups = batch.groups.tolist()
    return [row for row in rows if groups[row % num_examples] == 0]


TreeSource = Literal["distances", "attention"]


def tree_source(task: pl.LightningModule) -> TreeSource | None:
    """Where the task's encoder induces trees from: ON-LSTM-style ``distances``, Ordered Memory's
    ``attention``, or None (no induced trees, e.g. a model given the gold trees)."""
    encoder = getattr(task, "encoder", None)
    if getattr(task, "needs_tree", False):
        return None
    if getattr(encoder, "has_distances", False):
        return "distances"
    if getattr(encoder, "has_attention_trees", False):
        return "attention"
    return None


@torch.no_grad()
def induce_batch_trees(
    task: pl.LightningModule,
    batch: ClassificationBatch,
    rows: Sequence[int] | None = None,
    bracket_distances: BracketDistances = "drop",
    output: EncoderOutput | None = None,
) -> tuple[list[list[Tree]], list[Tree]]:
    """Induced trees per layer (``trees[layer][i]``) and the gold trees of the sentence rows
    ``rows`` (default: all) of a classification batch. ``output`` is the task's evaluation
    output on this batch when already computed (otherwise the encoder runs here)."""
    encoder = task.encoder
    source = tree_source(task)
    if source is None:
        raise NoDistancesError(
            f"{type(encoder).__name__} induces no trees (neither syntactic distances nor "
            "Ordered Memory attention); induced trees need a model such as ON-LSTM or "
            "Ordered Memory"
        )
    rows = list(range(batch.tokens.size(0))) if rows is None else list(rows)
    if output is None:
        output = task.encoder_output(batch)
    leaf_index = batch.leaf_index
    lengths = batch.leaf_mask.sum(1).tolist()
    # where each sentence's leaves are among the tokens the model read
    positions = [
        leaf_index[row, : lengths[row]].tolist() if leaf_index is not None
        else list(range(lengths[row]))
        for row in rows
    ]  # fmt: skip
    gold = [batch.trees[row] for row in rows]
    if source == "attention":
        attention = output.extras.get("attention")
        if attention is None:
            raise NoDistancesError(f"{type(encoder).__name__} returned no attention")
        index = torch.tensor(rows, device=attention.device)
        with deep_trees():
            trees = attention_trees(
                attention[index], batch.mask[index], keep=[set(p) for p in positions]
            )
        return [trees], gold
    if output.distances is None:
        raise NoDistancesError(f"{type(encoder).__name__} returned no distances")
    distances = output.distances.float().cpu()  # (L, S*B, T)
    per_sentence = [
        leaf_distances(distances[:, row], row_positions, bracket_distances)
        for row, row_positions in zip(rows, positions)
    ]
    with deep_trees():
        trees = trees_from_distances(per_sentence)
    return trees, gold


class TreeF1Callback(Callback):
    """Parse F1 per layer of the induced trees against the gold trees, on validation and test.

    Args:
        stages: where to score: ``val`` (every validation epoch) and/or ``test``.
        bracket_distances: ``drop`` or ``max`` (see the module docstring).
        output_dir: where ``tree_f1.json`` goes after testing (None: not written).
    """

    def __init__(
        self,
        stages: Sequence[str] = ("val", "test"),
        bracket_distances: BracketDistances = "drop",
        output_dir: str | Path | None = None,
    ) -> None:
        unknown = set(stages) - {"val", "test"}
        if unknown:
            raise ValueError(f"stages={list(stages)}: use 'val' and/or 'test'")
        if bracket_distances not in BRACKET_DISTANCES:
            raise ValueError(
                f"bracket_distances={bracket_distances!r}: use one of {BRACKET_DISTANCES}"
            )
        self.stages = tuple(stages)
        self.bracket_distances = bracket_distances
        self.output_dir = Path(output_dir) if output_dir else None
        self._metrics: list[BracketF1] = []
        self._disabled = False
        #: the last scores per stage: {stage: {"layer1": {"corpus_f1": .., ...}, ...}}
        self.results: dict[str, dict[str, dict[str, float]]] = {}

    # ------------------------------------------------------------------ helpers
    def _usable(self, pl_module: pl.LightningModule) -> bool:
        if self._disabled:
            return False
        if tree_source(pl_module) is None:
            encoder = getattr(pl_module, "encoder", None)
            rank_zero_warn(
                f"TreeF1Callback is skipped: {type(encoder).__name__} induces no trees (no "
                "syntactic distances or Ordered Memory attention)."
            )
            self._disabled = True
            return False
        return True

    def _start(self, stage: str, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._metrics = []
        if stage in self.stages and not trainer.sanity_checking and self._usable(pl_module):
            num_layers = (
                int(getattr(pl_module.encoder, "num_layers", 1))
                if tree_source(pl_module) == "distances"
                else 1  # one attention-induced tree per sentence
            )
            self._metrics = [BracketF1().to(pl_module.device) for _ in range(num_layers)]
            pl_module.keep_eval_output = True  # reuse the step's forward pass

    def _update(self, pl_module: pl.LightningModule, batch: Any, first_group_only: bool) -> None:
        if not self._metrics:
            return
        output = pl_module.pop_kept_output() if hasattr(pl_module, "pop_kept_output") else None
        rows = scored_rows(batch, first_group_only)
        if not rows:
            return
        trees, gold = induce_batch_trees(pl_module, batch, rows, self.bracket_distances, output)
        with deep_trees():
            gold_spans = [tree_spans(gold_tree) for gold_tree in gold]
            for layer, layer_trees in enumerate(trees):
                metric = self._metrics[layer]
                for predicted, spans in zip(layer_trees, gold_spans):
                    predicted_spans = tree_spans(predicted)
                    counts = counts_from_spans(predicted_spans, spans)
                    metric.update(
                        counts.matched,
                        counts.predicted,
                        counts.gold,
                        sentence_f1_from_spans(predicted_spans, spans),
                    )

    def _finish(self, stage: str, pl_module: pl.LightningModule) -> None:
        if hasattr(pl_module, "keep_eval_output"):
            pl_module.keep_eval_output = False
            pl_module.kept_output = None
        if not self._metrics:
            return
        scores: dict[str, dict[str, float]] = {}
        for layer, metric in enumerate(self._metrics, start=1):
            values = metric.compute()  # summed over processes
            with metric.sync_context():  # the total, not this process's share
                sentences = int(metric.sentences)
            scores[f"layer{layer}"] = {
                "corpus_f1": float(values["corpus_f1"]),
                "sentence_f1": float(values["sentence_f1"]),
                "sentences": sentences,
            }
            # already reduced and equal on every process; sync_dist keeps Lightning quiet
            for key, name in (("parse_f1", "corpus_f1"), ("parse_f1_sentence", "sentence_f1")):
                pl_module.log(f"{stage}/{key}/layer{layer}", values[name].float(), sync_dist=True)
        self.results[stage] = scores
        self._metrics = []

    # ------------------------------------------------------------------ hooks
    def on_validation_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._start("val", trainer, pl_module)

    def on_validation_batch_end(
        self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0
    ) -> None:
        self._update(pl_module, batch, first_group_only=False)

    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._finish("val", pl_module)

    def on_test_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._start("test", trainer, pl_module)

    def on_test_batch_end(
        self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0
    ) -> None:
        self._update(pl_module, batch, first_group_only=True)

    def on_test_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._finish("test", pl_module)
        scores = self.results.get("test")
        if not scores or not trainer.is_global_zero:
            return
        print("\n" + format_tree_f1(scores, "induced trees vs gold trees (test)"), flush=True)
        if self.output_dir is not None:
            self.output_dir.mkdir(parents=True, exist_ok=True)
            path = self.output_dir / "tree_f1.json"
            data = {"bracket_distances": self.bracket_distances, "test": scores}
            path.write_text(json.dumps(data, indent=2))


def format_tree_f1(scores: dict[str, dict[str, Any]], title: str = "") -> str:
    """One row per layer (or baseline): corpus F1 and sentence F1 in %, and sentence count."""
    header = f"{'':<16}{'corpus F1':>11}{'sentence F1':>13}{'sentences':>11}"
    lines = [title] if title else []
    lines += [header, "-" * len(header)]
    for name, values in scores.items():
        lines.append(
            f"{name:<16}{100 * values['corpus_f1']:>11.2f}"
            f"{100 * values['sentence_f1']:>13.2f}{values['sentences']:>11}"
        )
    return "\n".join(lines)
