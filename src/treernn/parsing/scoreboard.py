"""The unsupervised-parsing scoreboard: any system's trees and the trivial baselines scored against
one gold set by one exact protocol, as text, markdown or JSON. The gold sets and the alignment of
a tree file to them are `treernn.parsing.gold_sets`' (importable from here too).

Typical use (what a command line wraps)::

    gold = load_gold("sample10", data_dir="data")              # or a gold tree file
    predicted = align(read_trees("my_trees.txt"), gold)        # checks every sentence's words
    board = evaluate({"my system": predicted}, gold)
    print(to_text(board))                                      # to_markdown / to_json

Protocol (ON-LSTM Table 2; details in REFERENCE.md), see `Protocol` for the options:

- Words: keep a word only if its POS tag is a word tag (punctuation, traces, ``$``, ``#``, brackets
  and quotes dropped), lower-case it, replace digit runs by ``N``. ``punctuation="keep"`` keeps
  everything but traces.
- corpus F1: EVALB's unlabeled bracket F1 summed over the corpus (the whole-sentence bracket counts,
  single words do not; a unary chain is one bracket).
- sentence F1: the authors' per-sentence F1 averaged over sentences, on span sets without the
  whole-sentence span (``sentence_f1_whole_span=True`` keeps it); a gold tree without any span
  scores 1 only if the prediction has none either. This is the number the paper reports (the
  authors' script computes no other; `treernn.reporting.paper` gives the evidence).
- per-label recall: the fraction of gold constituents of a label (two or more words) that are
  predicted brackets. depth: the mean number of brackets above a word, averaged over sentences.
- Baselines: left- and right-branching, random (mean, std and max over seeds 0-4) and balanced in
  both conventions (see `treernn.parsing.baselines`).

Aligning predictions with gold (`align`): tree ``i`` of the file goes with gold sentence
``i``. Words are compared after lower-casing and turning digit runs into ``N`` (case-insensitive,
so ``N`` and ``1988`` agree). A predicted tree with POS preterminals is filtered by tag, as the
gold; one without is filtered against its gold sentence: a token of
`treernn.parsing.treefile.PUNCTUATION_TOKENS` is dropped unless it is the gold word expected
next. Predicted unary brackets are collapsed, like the gold's.

Gold files (`read_gold_file`): a tree file in any format of `treernn.parsing.treefile`.
With POS preterminals it is filtered exactly as the WSJ; without them (the words are taken to be
the sentence) only the tokens of ``PUNCTUATION_TOKENS`` are dropped, nothing under
``punctuation="keep"``. Labels, where the file has them, give the per-label recall. A gold tree
left without words is skipped (listed in `GoldSet.skipped`); the predicted file has no line
for it.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from treernn.errors import DataError
from treernn.parsing.baselines import (
    ALL_BASELINES,
    DEFAULT_SEEDS,
    DESCRIPTIONS,
    baseline_spans,
)
from treernn.parsing.gold_sets import (
    KNOWN_SPLITS,
    PUNCTUATION_CHOICES,
    GoldSet,
    TreeAlignmentError,
    align,
    load_gold,
    read_gold_file,
    word_key,
)
from treernn.parsing.induce import sentence_signals, trees_from_sentence_signals
from treernn.parsing.metrics import TABLE2_LABELS, ParseScores, score_spans
from treernn.parsing.treefile import read_trees
from treernn.parsing.trees import Span, Tree, tree_spans
from treernn.parsing.wsj import GoldSentence


@dataclass(frozen=True)
class Protocol:
    """The choices behind every number of a scoreboard (defaults: ON-LSTM's)."""

    punctuation: str = "drop"
    sentence_f1_whole_span: bool = False
    seeds: tuple[int, ...] = DEFAULT_SEEDS
    labels: tuple[str, ...] = TABLE2_LABELS
    baselines: tuple[str, ...] = ALL_BASELINES

    def __post_init__(self) -> None:
        if self.punctuation not in PUNCTUATION_CHOICES:
            raise ValueError(
                f"punctuation must be one of {PUNCTUATION_CHOICES}, not {self.punctuation!r}"
            )
        unknown = [name for name in self.baselines if name not in ALL_BASELINES]
        if unknown:
            raise ValueError(f"unknown baselines {unknown}; choose from {ALL_BASELINES}")
        if "random" in self.baselines and not self.seeds:
            raise ValueError("the random baseline needs at least one seed")

    @property
    def keep_punctuation(self) -> bool:
        return self.punctuation == "keep"

    def as_dict(self) -> dict[str, object]:
        words = (
            "every word but traces (-NONE-)"
            if self.keep_punctuation
            else "words with a word POS tag (punctuation, traces, $, #, brackets, quotes dropped)"
        )
        whole = "with" if self.sentence_f1_whole_span else "without"
        return {
            "words": words + "; lower-cased; digit runs -> N",
            "punctuation": self.punctuation,
            "corpus_f1": "EVALB unlabeled bracket F1 over corpus totals; whole-sentence bracket "
            "counted, single words not",
            "sentence_f1": f"mean over sentences of the per-sentence F1 on span sets {whole} the "
            "whole-sentence span (ON-LSTM script); a gold tree with no span scores 1 only if "
            "the prediction has none either",
            "sentence_f1_whole_span": self.sentence_f1_whole_span,
            "label_recall": "fraction of gold constituents (2+ words) of the label that are "
            "predicted brackets",
            "depth": "mean number of brackets above a word, averaged over sentences",
            "random_seeds": list(self.seeds),
            "labels": list(self.labels),
            "baselines": {name: DESCRIPTIONS[name] for name in self.baselines},
        }

    def summary(self) -> str:
        """One line naming the options, for the head of a table."""
        whole = "with" if self.sentence_f1_whole_span else "without"
        seeds = ",".join(str(seed) for seed in self.seeds)
        punctuation = "kept" if self.keep_punctuation else "dropped"
        return (
            f"punctuation {punctuation}; corpus F1 = EVALB (whole-sentence bracket counted); "
            f"sentence F1 {whole} the whole-sentence span (ON-LSTM script); random = mean over "
            f"seeds {seeds} (max in brackets)"
        )


# ----------------------------------------------------------------------------------------------
# Scoring


@dataclass
class Row:
    """One line of the scoreboard: a system (one run) or a baseline (one run per seed)."""

    name: str
    kind: str  # "system" or "baseline"
    description: str
    runs: list[ParseScores]

    def values(self, metric: str) -> list[float]:
        return [float(getattr(run, metric)) for run in self.runs]

    def mean(self, metric: str) -> float:
        return statistics.fmean(self.values(metric))

    def std(self, metric: str) -> float:
        return statistics.pstdev(self.values(metric)) if len(self.runs) > 1 else 0.0

    def max(self, metric: str) -> float:
        return max(self.values(metric))

    def label_recall(self) -> dict[str, float | None]:
        result: dict[str, float | None] = {}
        for label in self.runs[0].label_recall:
            known = [run.label_recall[label] for run in self.runs]
            values = [value for value in known if value is not None]
            result[label] = statistics.fmean(values) if values else None
        return result

    def as_dict(self) -> dict[str, object]:
        def stats(metric: str) -> dict[str, float]:
            return {"mean": self.mean(metric), "std": self.std(metric), "max": self.max(metric)}

        return {
            "name": self.name,
            "kind": self.kind,
            "description": self.description,
            "corpus_f1": stats("corpus_f1"),
            "sentence_f1": stats("sentence_f1"),
            "label_recall": self.label_recall(),
            "label_counts": {label: list(pair) for label, pair in self.runs[0].label_counts.items()}
            if len(self.runs) == 1
            else None,
            "depth": self.mean("depth"),
            "sentences": self.runs[0].sentences,
            "runs": len(self.runs),
            "brackets": {
                "matched": self.runs[0].counts.matched,
                "predicted": self.runs[0].counts.predicted,
                "gold": self.runs[0].counts.gold,
            }
            if len(self.runs) == 1
            else None,
        }


@dataclass
class Scoreboard:
    """Every row scored against one gold set under one protocol."""

    protocol: Protocol
    gold_name: str
    sentences: int
    rows: list[Row] = field(default_factory=list)
    skipped_gold: tuple[str, ...] = ()

    def row(self, name: str) -> Row:
        for row in self.rows:
            if row.name == name:
                return row
        raise KeyError(f"no row {name!r}; rows: {[row.name for row in self.rows]}")

    def as_dict(self) -> dict[str, object]:
        return {
            "gold": {
                "name": self.gold_name,
                "sentences": self.sentences,
                "skipped": list(self.skipped_gold),
            },
            "protocol": self.protocol.as_dict(),
            "rows": [row.as_dict() for row in self.rows],
        }


def evaluate(
    predicted: Mapping[str, Sequence[Tree]] | Sequence[Tree] | None,
    gold: GoldSet | Sequence[GoldSentence],
    *,
    protocol: Protocol | None = None,
    name: str = "predicted",
    descriptions: Mapping[str, str] | None = None,
) -> Scoreboard:
    """Score each system's trees (``{name: trees}``, one tree list, or None for baselines only)
    and the protocol's baselines against ``gold``. Trees are over the gold words' positions (from
    `align`, or a treernn model's induced trees)."""
    systems: Mapping[str, Sequence[Tree]]
    if predicted is None:
        systems = {}
    elif isinstance(predicted, Mapping):
        systems = predicted
    else:
        systems = {name: predicted}
    runs = {system: [trees] for system, trees in systems.items()}
    return evaluate_runs(runs, gold, protocol=protocol, descriptions=descriptions)


def evaluate_runs(
    systems: Mapping[str, Sequence[Sequence[Tree]]],
    gold: GoldSet | Sequence[GoldSentence],
    *,
    protocol: Protocol | None = None,
    descriptions: Mapping[str, str] | None = None,
) -> Scoreboard:
    """`evaluate` with several runs per system (``{name: [trees of run 1, ...]}``, e.g. one
    checkpoint per seed): the row gives the mean, std and max over runs, like the random
    baseline's over seeds."""
    protocol = protocol or Protocol()
    sentences = gold.sentences if isinstance(gold, GoldSet) else tuple(gold)
    if not sentences:
        raise ValueError("no gold sentence to score against")
    gold_spans = [tree_spans(sentence.tree) for sentence in sentences]
    labelled = [sentence.labelled_spans for sentence in sentences]

    def score(spans: Sequence[Sequence[Span]]) -> ParseScores:
        return score_spans(
            spans,
            gold_spans,
            labelled,
            protocol.labels,
            include_whole_sentence=protocol.sentence_f1_whole_span,
        )

    rows: list[Row] = []
    for system, runs in systems.items():
        if not runs:
            raise ValueError(f"{system}: no run to score")
        for trees in runs:
            if len(trees) != len(sentences):
                raise ValueError(
                    f"{system}: {len(trees)} trees for {len(sentences)} gold sentences"
                )
        description = (descriptions or {}).get(system, "predicted trees")
        scores = [score([tree_spans(tree) for tree in trees]) for trees in runs]
        rows.append(Row(system, "system", description, scores))
    lengths = [len(sentence.words) for sentence in sentences]
    for baseline in protocol.baselines:
        seeds = protocol.seeds if baseline == "random" else (0,)
        baseline_runs = [score(baseline_spans(baseline, lengths, seed)) for seed in seeds]
        rows.append(Row(baseline, "baseline", DESCRIPTIONS[baseline], baseline_runs))
    return Scoreboard(
        protocol,
        gold.name if isinstance(gold, GoldSet) else "gold",
        len(sentences),
        rows,
        gold.skipped if isinstance(gold, GoldSet) else (),
    )


def score_tree_file(
    path: str | Path,
    gold: GoldSet,
    *,
    format: str = "auto",
    protocol: Protocol | None = None,
    name: str | None = None,
) -> Scoreboard:
    """Read, align and score one tree file (with the baselines) against ``gold``."""
    protocol = protocol or Protocol()
    tree_file = read_trees(path, format)
    trees = align(tree_file, gold, punctuation=protocol.punctuation)
    return evaluate({name or Path(path).name: trees}, gold, protocol=protocol)


# ----------------------------------------------------------------------------------------------
# Output


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.2f}"


def _cells(row: Row, labels: Sequence[str]) -> list[str]:
    def f1(metric: str) -> str:
        if len(row.runs) == 1:
            return _percent(row.mean(metric))
        return f"{_percent(row.mean(metric))} (max {_percent(row.max(metric))})"

    recall = row.label_recall()
    return [
        row.name,
        f1("corpus_f1"),
        f1("sentence_f1"),
        *(_percent(recall.get(label)) for label in labels),
        f"{row.mean('depth'):.2f}",
    ]


def _header(board: Scoreboard) -> list[str]:
    return ["", "corpus F1", "sentence F1", *board.protocol.labels, "depth"]


def _title(board: Scoreboard) -> list[str]:
    skipped = f", {len(board.skipped_gold)} empty gold trees skipped" if board.skipped_gold else ""
    return [
        f"gold: {board.gold_name} ({board.sentences} sentences{skipped})",
        f"protocol: {board.protocol.summary()}",
    ]


def to_text(board: Scoreboard) -> str:
    """A plain-text table with the gold set and the protocol on top."""
    table = [_header(board)] + [_cells(row, board.protocol.labels) for row in board.rows]
    widths = [max(len(line[column]) for line in table) for column in range(len(table[0]))]
    lines = _title(board)
    for line in table:
        first = line[0].ljust(widths[0])
        rest = [cell.rjust(width) for cell, width in zip(line[1:], widths[1:])]
        lines.append("  ".join([first, *rest]).rstrip())
    return "\n".join(lines) + "\n"


def to_markdown(board: Scoreboard) -> str:
    """A markdown table (F1 and recall in %, depth in brackets) with the protocol above it."""
    header = _header(board)
    header[0] = "trees"
    lines = [f"{text}  " for text in _title(board)] + [""]
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|")
    for row in board.rows:
        lines.append("| " + " | ".join(_cells(row, board.protocol.labels)) + " |")
    return "\n".join(lines) + "\n"


def to_json(board: Scoreboard) -> dict[str, object]:
    """Everything as plain data (fractions in [0, 1]), for ``json.dumps``."""
    return board.as_dict()


__all__ = [
    "KNOWN_SPLITS",
    "PUNCTUATION_CHOICES",
    "GoldSet",
    "Protocol",
    "Row",
    "Scoreboard",
    "TreeAlignmentError",
    "align",
    "evaluate",
    "evaluate_runs",
    "load_gold",
    "read_gold_file",
    "score_tree_file",
    "to_json",
    "to_markdown",
    "to_text",
    "word_key",
]


def model_trees(task: Any, gold: GoldSet, batch_size: int = 64) -> tuple[list[list[Tree]], float]:
    """``trees[layer][sentence]`` of a treernn language model (a task with ``embedding``,
    ``encoder`` with a tree signal, and ``vocab``) over the gold sentences, each read alone
    as ``<eos> w_1 .. w_n <eos>``, and the fraction of their words it reads as ``<unk>``. The
    trees come from the tree signal (`treernn.parsing.induce.trees_from_signal`): a greedy
    tree per layer from syntactic distances, one tree from Ordered Memory's attention."""
    vocab = task.vocab
    unk = vocab.stoi.get("<unk>")
    if unk is None:  # a vocabulary without <unk> (a toy model's) cannot read an unknown word
        for sentence in gold.sentences:
            unknown_words = [word for word in sentence.words if word not in vocab]
            if unknown_words:
                raise DataError(
                    f"{sentence.source}: {', '.join(map(repr, unknown_words))} not in the "
                    "model's vocabulary, which has no <unk> to read unknown words as"
                )
    ids = [vocab.encode(sentence.words) for sentence in gold.sentences]
    signals = sentence_signals(
        task.embedding,
        task.encoder,
        ids,
        vocab.eos_index,
        batch_size,
        names=[sentence.source for sentence in gold.sentences],
    )
    words = sum(len(row) for row in ids)
    unknown = sum(token == unk for row in ids for token in row) if unk is not None else 0
    return trees_from_sentence_signals(signals), unknown / max(words, 1)


def model_name(tasks: Sequence[Any]) -> str:
    """The encoders' names for a scoreboard row ("ONLSTM")."""
    return "/".join(sorted({type(task.encoder).__name__.removesuffix("Encoder") for task in tasks}))


def score_layers(
    per_model: Sequence[Sequence[Sequence[Tree]]],
    gold: GoldSet,
    model: str,
    source: str,
    protocol: Protocol | None = None,
) -> Scoreboard:
    """One row per layer (``"<model> layer <k>"``) over several models' trees
    (``per_model[model][layer][sentence]``, e.g. one model per seed: mean, std and max), beside the
    trivial trees. ``source`` names where the trees come from (checkpoint names)."""
    layers = min(len(trees) for trees in per_model)
    runs = {
        f"{model} layer {layer}": [trees[layer - 1] for trees in per_model]
        for layer in range(1, layers + 1)
    }
    descriptions = {
        row: f"trees of layer {row.rsplit(' ', 1)[1]}'s tree signal ({source})" for row in runs
    }
    return evaluate_runs(runs, gold, protocol=protocol, descriptions=descriptions)
