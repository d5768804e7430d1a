"""Trivial-tree baselines of the ON-LSTM paper's Table 2: left-branching, right-branching, balanced
and random trees, scored like a model's trees.

Random trees are greedy trees of i.i.d. uniform distances (a uniformly random split order), one
``random.Random(seed)`` per seed; the table gives their mean, (population) standard deviation and
maximum over seeds ``0..4``. The deterministic shapes have one run each (std 0).

"Balanced" has two conventions in the literature, both here under their own names:

- ``balanced`` (top-down halving, `treernn.parsing.trees.balanced`): a span of ``m`` words
  splits into a left part of ``floor(m / 2)`` words and a right part of ``ceil(m / 2)``,
  recursively. Five words: ``((0 1) (2 (3 4)))``; six: ``((0 (1 2)) (3 (4 5)))``. This is what
  treernn has always reported.
- ``balanced_bottom_up`` (`treernn.parsing.trees.balanced_bottom_up`): the complete binary
  tree built bottom-up. Start from the words as a row of nodes; repeatedly replace the row by its
  adjacent pairs ``(row[0] row[1]) (row[2] row[3]) ...``, an odd node out at the right end being
  carried up
  unchanged, until one node is left. Every left subtree is a perfect binary tree of ``2^k`` words;
  the leftover words hang on the right, high in the tree. Five words: ``(((0 1) (2 3)) 4)``; six:
  ``(((0 1) (2 3)) (4 5))``. The ON-LSTM repository itself ships no balanced-tree code (its
  ``test_phrase_grammar.py`` has only the greedy parser); this bottom-up pairing is the other
  variant found in later unsupervised-parsing code, named here after what it does.

The tree builders live in `treernn.parsing.trees`; the span builders here skip the trees.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from treernn.parsing.metrics import TABLE2_LABELS, ParseScores, score_trees
from treernn.parsing.trees import (
    Span,
    Tree,
    balanced,
    balanced_bottom_up,
    left_branching,
    random_tree,
    right_branching,
)
from treernn.parsing.wsj import GoldSentence

#: The four baselines of Table 2, as treernn's training-time callbacks report them.
BASELINES: tuple[str, ...] = ("random", "balanced", "left_branching", "right_branching")
#: Every baseline the scoreboard reports, in its order.
ALL_BASELINES: tuple[str, ...] = (
    "left_branching",
    "right_branching",
    "random",
    "balanced",
    "balanced_bottom_up",
)
DEFAULT_SEEDS: tuple[int, ...] = (0, 1, 2, 3, 4)

#: One line per baseline for tables and JSON.
DESCRIPTIONS: dict[str, str] = {
    "left_branching": "left-branching: (((w0 w1) w2) w3)",
    "right_branching": "right-branching: (w0 (w1 (w2 w3)))",
    "random": "random: greedy tree of i.i.d. uniform distances, one random.Random(seed) per seed",
    "balanced": "balanced, top-down halving: the left part gets floor(m/2) of m words",
    "balanced_bottom_up": (
        "balanced, bottom-up pairing: adjacent nodes paired level by level, odd one out carried "
        "up on the right"
    ),
}


DETERMINISTIC: dict[str, Callable[[int], Tree]] = {
    "balanced": balanced,
    "balanced_bottom_up": balanced_bottom_up,
    "left_branching": left_branching,
    "right_branching": right_branching,
}


@dataclass
class RunSummary:
    """Scores over runs (seeds): mean / std / max of each F1, and the mean of every other score."""

    runs: list[ParseScores]

    def _values(self, name: str) -> list[float]:
        return [float(getattr(run, name)) for run in self.runs]

    def mean(self, name: str) -> float:
        return statistics.fmean(self._values(name))

    def std(self, name: str) -> float:
        return statistics.pstdev(self._values(name)) if len(self.runs) > 1 else 0.0

    def max(self, name: str) -> float:
        return max(self._values(name))

    def mean_label_recall(self) -> dict[str, float | None]:
        labels = self.runs[0].label_recall
        result: dict[str, float | None] = {}
        for label in labels:
            values = [run.label_recall[label] for run in self.runs]
            known = [value for value in values if value is not None]
            result[label] = statistics.fmean(known) if known else None
        return result

    def as_dict(self) -> dict[str, object]:
        return {
            "corpus_f1": {
                "mean": self.mean("corpus_f1"),
                "std": self.std("corpus_f1"),
                "max": self.max("corpus_f1"),
            },
            "sentence_f1": {
                "mean": self.mean("sentence_f1"),
                "std": self.std("sentence_f1"),
                "max": self.max("sentence_f1"),
            },
            "depth": self.mean("depth"),
            "label_recall": self.mean_label_recall(),
            "runs": len(self.runs),
        }


def baseline_trees(name: str, lengths: Sequence[int], seed: int = 0) -> list[Tree]:
    """The trees of one baseline for sentences of the given lengths."""
    if name == "random":
        rng = random.Random(seed)
        return [random_tree(length, rng) for length in lengths]
    if name not in DETERMINISTIC:
        raise ValueError(f"unknown baseline {name!r}; choose one of {', '.join(ALL_BASELINES)}")
    return [DETERMINISTIC[name](length) for length in lengths]


def baseline_spans(name: str, lengths: Sequence[int], seed: int = 0) -> list[list[Span]]:
    """The brackets of `baseline_trees` (as `treernn.parsing.metrics.tree_spans`
    lists them: the whole sentence first), built without building the trees: what the
    scoreboard scores, since the trivial trees of a whole treebank are scored ten times over."""
    if name == "random":
        rng = random.Random(seed)
        return [_greedy_spans([rng.random() for _ in range(length)]) for length in lengths]
    builders: dict[str, Callable[[int], list[Span]]] = {
        "left_branching": lambda n: [(0, end) for end in range(n, 1, -1)],
        "right_branching": lambda n: [(start, n) for start in range(0, n - 1)],
        "balanced": _top_down_spans,
        "balanced_bottom_up": _bottom_up_spans,
    }
    if name not in builders:
        raise ValueError(f"unknown baseline {name!r}; choose one of {', '.join(ALL_BASELINES)}")
    for length in lengths:
        if length < 1:
            raise ValueError(f"a tree needs at least one word, got length {length}")
    return [builders[name](length) for length in lengths]


def _top_down_spans(length: int) -> list[Span]:
    spans: list[Span] = []
    pending = [(0, length)]
    while pending:
        start, end = pending.pop()
        if end - start < 2:
            continue
        spans.append((start, end))
        middle = start + (end - start) // 2
        pending.extend([(middle, end), (start, middle)])
    return spans


def _bottom_up_spans(length: int) -> list[Span]:
    spans: list[Span] = []
    row = [(position, position + 1) for position in range(length)]
    while len(row) > 1:
        paired = [(row[index][0], row[index + 1][1]) for index in range(0, len(row) - 1, 2)]
        spans.extend(paired)
        if len(row) % 2:
            paired.append(row[-1])
        row = paired
    spans.reverse()  # the whole sentence first
    return spans


def _greedy_spans(values: list[float]) -> list[Span]:
    """The brackets of `treernn.parsing.trees.greedy_tree`: a span split before its first
    maximum ``k`` is ``(left, (w_k, right))``, so it has the bracket ``[k, end)`` too unless ``k``
    is its first or last word."""
    spans: list[Span] = []
    pending = [(0, len(values))]
    while pending:
        start, end = pending.pop()
        if end - start < 2:
            continue
        segment = values[start:end]
        split_point = start + segment.index(max(segment))  # the first maximum
        spans.append((start, end))
        if start < split_point < end - 1:
            spans.append((split_point, end))
        pending.extend([(split_point + 1, end), (start, split_point)])
    return spans


def score_baselines(
    sentences: Sequence[GoldSentence],
    seeds: Sequence[int] = DEFAULT_SEEDS,
    labels: Sequence[str] = TABLE2_LABELS,
    names: Sequence[str] = BASELINES,
    *,
    include_whole_sentence: bool = False,
) -> dict[str, RunSummary]:
    """``baseline name -> RunSummary`` on the given gold sentences (``names`` from
    `ALL_BASELINES`; the default is Table 2's four)."""
    lengths = [len(sentence.words) for sentence in sentences]
    gold = [sentence.tree for sentence in sentences]
    spans = [sentence.labelled_spans for sentence in sentences]
    summaries: dict[str, RunSummary] = {}
    for name in names:
        run_seeds = seeds if name == "random" else (0,)
        summaries[name] = RunSummary(
            [
                score_trees(
                    baseline_trees(name, lengths, seed),
                    gold,
                    spans,
                    labels,
                    include_whole_sentence=include_whole_sentence,
                )
                for seed in run_seeds
            ]
        )
    return summaries
