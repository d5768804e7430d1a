"""Induced trees of a classification batch against its gold trees (logic, ListOps): which rows
to score, the trees a task's evaluation pass induces, and the per-layer bracket F1 they add up to.

Used by `treernn.callbacks.tree_f1.TreeF1Callback` during training, and
`tree_f1_from_checkpoint` scores a checkpoint for ``python -m treernn report tree-f1``.
The tree work itself (induction from a tree signal, spans, F1) is `treernn.parsing`'s; this
module joins it to a task and a batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch

from treernn.data.batch import EncodedBatch
from treernn.data.classification import ClassificationBatch
from treernn.errors import ConfigValueError
from treernn.metrics import BracketF1
from treernn.parsing.baselines import BASELINES, baseline_trees
from treernn.parsing.induce import NoDistancesError, trees_from_signal
from treernn.parsing.metrics import counts_from_spans, score_trees, sentence_f1_from_spans
from treernn.parsing.trees import BracketDistances, Tree, leaves, to_bracketed, tree_spans


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


def tree_f1_from_checkpoint(
    ckpt: str | Path,
    split: str = "test",
    data_dir: str | Path | None = None,
    bracket_distances: BracketDistances = "drop",
    batch_size: int | None = None,
    max_sentences: int | None = None,
    num_examples: int = 3,
) -> dict[str, Any]:
    """Parse F1 per layer of a classification checkpoint's induced trees on its val/test data.

    The data are rebuilt from the run's own datamodule config (``data_dir`` replaces its data
    directory); at test time only the first evaluation group is scored, as in the callback.
    """
    from omegaconf import open_dict

    from treernn.datamodules import prepared_datamodule
    from treernn.models.load import load

    if split not in ("val", "test"):
        raise ConfigValueError(f"--split {split}: use val or test")
    trained = load(ckpt, "cpu", kind="classifier", command="report tree-f1", needs_config=True)
    task = trained.module
    config = trained.config.task.datamodule
    with open_dict(config):
        if data_dir is not None:
            config.data_dir = str(data_dir)
        if batch_size is not None:
            config.eval_batch_size = batch_size
    datamodule = prepared_datamodule(config, "test")
    loader = datamodule.val_dataloader() if split == "val" else datamodule.test_dataloader()

    predicted: list[list[Tree]] = []
    gold: list[Tree] = []
    words: list[tuple[int, list[str]]] = []  # (index in gold, leaves)
    for batch in loader:
        rows = scored_rows(batch, first_group_only=split == "test")
        if max_sentences is not None:
            rows = rows[: max_sentences - len(gold)]
        if not rows:
            continue
        trees, batch_gold = induce_batch_trees(task, batch, rows, bracket_distances)
        predicted = predicted or [[] for _ in trees]
        for layer, layer_trees in enumerate(trees):
            predicted[layer].extend(layer_trees)
        gold.extend(batch_gold)
        lengths = batch.leaf_mask.sum(1).tolist()
        for index, row in enumerate(rows):
            # examples worth reading: four leaves or more (the test data come shortest first)
            if len(words) < num_examples and lengths[row] >= 4:
                sentence = task.vocab.decode(batch.leaf_tokens[row, : lengths[row]].tolist())
                words.append((len(gold) - len(rows) + index, sentence))
        if max_sentences is not None and len(gold) >= max_sentences:
            break
    if not gold:
        raise ConfigValueError(f"{ckpt}: the {split} split has no sentence to score")

    def summary(trees: Sequence[Tree]) -> dict[str, Any]:
        scores = score_trees(trees, gold, labels=())
        return {
            "corpus_f1": scores.corpus_f1,
            "sentence_f1": scores.sentence_f1,
            "depth": scores.depth,
            "sentences": scores.sentences,
        }

    lengths = [len(leaves(tree)) for tree in gold]
    layers = {f"layer{k}": summary(trees) for k, trees in enumerate(predicted, start=1)}
    baselines = {name: summary(baseline_trees(name, lengths)) for name in BASELINES}
    examples = [
        {
            "gold": to_bracketed(gold[index], sentence),
            **{
                f"layer{k}": to_bracketed(trees[index], sentence)
                for k, trees in enumerate(predicted, start=1)
            },
        }
        for index, sentence in words
    ]
    return {
        "checkpoint": str(ckpt),
        "split": split,
        "bracket_distances": bracket_distances,
        "layers": layers,
        "baselines": baselines,
        "examples": examples,
    }
