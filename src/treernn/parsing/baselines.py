"""Trivial-tree baselines of the ON-LSTM paper's Table 2: left-branching, right-branching, balanced
and random trees, scored like a model's trees.

Random trees are greedy trees of i.i.d. uniform distances (a uniformly random split order), one
``random.Random(seed)`` per seed; the table gives their mean, (population) standard deviation and
maximum over seeds ``0..4``. The deterministic shapes have one run each (std 0).
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from treernn.parsing.metrics import TABLE2_LABELS, ParseScores, score_trees
from treernn.parsing.trees import Tree, balanced, left_branching, random_tree, right_branching
from treernn.parsing.wsj import GoldSentence

BASELINES: tuple[str, ...] = ("random", "balanced", "left_branching", "right_branching")
DETERMINISTIC: dict[str, Callable[[int], Tree]] = {
    "balanced": balanced,
    "left_branching": left_branching,
    "right_branching": right_branching,
}
DEFAULT_SEEDS: tuple[int, ...] = (0, 1, 2, 3, 4)


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
        raise ValueError(f"unknown baseline {name!r}; choose one of {', '.join(BASELINES)}")
    return [DETERMINISTIC[name](length) for length in lengths]


def score_baselines(
    sentences: Sequence[GoldSentence],
    seeds: Sequence[int] = DEFAULT_SEEDS,
    labels: Sequence[str] = TABLE2_LABELS,
) -> dict[str, RunSummary]:
    """``baseline name -> RunSummary`` on the given gold sentences."""
    lengths = [len(sentence.words) for sentence in sentences]
    gold = [sentence.tree for sentence in sentences]
    spans = [sentence.labelled_spans for sentence in sentences]
    summaries: dict[str, RunSummary] = {}
    for name in BASELINES:
        run_seeds = seeds if name == "random" else (0,)
        summaries[name] = RunSummary(
            [
                score_trees(baseline_trees(name, lengths, seed), gold, spans, labels)
                for seed in run_seeds
            ]
        )
    return summaries
