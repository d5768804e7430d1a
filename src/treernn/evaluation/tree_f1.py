"""Induced trees of a classification batch against its gold trees (logic, ListOps): which rows
to score, the trees a task's evaluation pass induces, and the per-layer bracket F1 they add up to.

Used by :class:`~treernn.callbacks.tree_f1.TreeF1Callback` during training and by
``python -m treernn report tree-f1`` on a checkpoint. The tree work itself (induction from a tree
signal, spans, F1) is :mod:`treernn.parsing`'s; this module joins it to a task and a batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import lightning.pytorch as pl
import torch

from treernn.data.batch import EncodedBatch
from treernn.data.classification import ClassificationBatch
from treernn.metrics import BracketF1
from treernn.parsing.induce import BracketDistances, NoDistancesError, trees_from_signal
from treernn.parsing.metrics import counts_from_spans, sentence_f1_from_spans
from treernn.parsing.trees import Tree, tree_spans


def scored_rows(batch: ClassificationBatch, first_group_only: bool) -> list[int]:
    """Sentence rows (of the S*B stacked rows) to score: all, or those of group-0 examples."""
    num_examples = len(batch)
    rows = range(num_examples * batch.num_sentences)
    if not first_group_only:
        return list(rows)
    groups = batch.groups.tolist()
    return [row for row in rows if groups[row % num_examples] == 0]


@torch.no_grad()
def induce_batch_trees(
    task: pl.LightningModule,
    batch: ClassificationBatch,
    rows: Sequence[int] | None = None,
    bracket_distances: BracketDistances = "drop",
    encoded: EncodedBatch | None = None,
) -> tuple[list[list[Tree]], list[Tree]]:
    """Induced trees per layer (``trees[layer][i]``) and the gold trees of the sentence rows
    ``rows`` (default: all) of a classification batch. ``encoded`` is the task's evaluation pass
    on this batch when already computed (otherwise the task encodes the batch here)."""
    if encoded is None:
        encoded = task.encode_batch(batch)
    signal = encoded.output.tree_signal
    if signal is None:
        raise NoDistancesError(
            f"{type(task.encoder).__name__} induces no trees (no tree signal: neither syntactic "
            "distances nor Ordered Memory attention); induced trees need a model such as ON-LSTM "
            "or Ordered Memory"
        )
    rows = list(range(len(encoded.inputs))) if rows is None else list(rows)
    positions = batch.leaf_positions(encoded.inputs.view, rows)
    trees = trees_from_signal(signal, positions, encoded.inputs.mask, rows, bracket_distances)
    return trees, [batch.trees[row] for row in rows]


def update_bracket_f1(
    metrics: Sequence[BracketF1], trees: Sequence[Sequence[Tree]], gold: Sequence[Tree]
) -> None:
    """Add each layer's induced trees against the gold trees to that layer's metric."""
    gold_spans = [tree_spans(gold_tree) for gold_tree in gold]
    for metric, layer_trees in zip(metrics, trees, strict=True):
        for predicted, spans in zip(layer_trees, gold_spans, strict=True):
            predicted_spans = tree_spans(predicted)
            counts = counts_from_spans(predicted_spans, spans)
            metric.update(
                counts.matched,
                counts.predicted,
                counts.gold,
                sentence_f1_from_spans(predicted_spans, spans),
            )


def bracket_scores(metric: BracketF1) -> dict[str, Any]:
    """Corpus and sentence F1 (fractions) and the sentence count, summed over processes."""
    values = metric.compute()
    with metric.sync_context():  # the total, not this process's share
        sentences = int(metric.sentences)
    return {
        "corpus_f1": float(values["corpus_f1"]),
        "sentence_f1": float(values["sentence_f1"]),
        "sentences": sentences,
    }
