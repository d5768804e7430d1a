"""Unlabeled bracket F1, per-label recall and tree depth for unsupervised constituency parsing.

Two F1 scores, both over the filtered words (ON-LSTM paper, Table 2; see REFERENCE.md):

- **corpus F1** (`corpus_f1`): EVALB's unlabeled bracket scoring summed over the corpus. Every
  internal node is a bracket, the whole-sentence bracket included; single words are not.
  Brackets match as a multiset per sentence (the trees read from the WSJ and from tree files are
  span sets: a unary chain, ``(S (VP ...))``, is one bracket, as unsupervised-parsing evaluation
  counts it; EVALB itself would count two); precision = matched / predicted, recall = matched /
  gold, F1 = 2PR / (P + R), all over corpus totals.
- **sentence-averaged F1** (`sentence_f1`, what the paper reports: the authors'
  ``test_phrase_grammar.py`` returns it and computes no other): per sentence over the set of
  spans without the whole-sentence span, averaged over sentences. Edge cases as the authors'
  script: a sentence whose gold tree has no span below the root (one or two words, or a flat
  gold tree) scores 1.0 only if the predicted tree has none either, and 0.0 otherwise (a flat
  gold tree of 3+ words against any binary tree).
  ``include_whole_sentence=True`` counts the whole-sentence span too (a common variant).

Gold ``((a b) (c d))`` against predicted ``(a (b (c d)))``: corpus F1 = 2/3 (66.67), sentence
F1 = 1/2.

Per-label recall: the fraction of gold constituents with that label (spans of two or more words)
that are brackets of the predicted tree. Depth: the mean number of brackets above a word, averaged
over sentences (the paper does not define its depth column; this definition ranks right-branching
far above balanced trees, as Table 2 does).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from treernn.parsing.trees import Span, Tree, tree_spans

#: The labels of Table 2's per-label columns.
TABLE2_LABELS: tuple[str, ...] = ("ADJP", "NP", "PP", "INTJ")


@dataclass(frozen=True)
class BracketCounts:
    """EVALB's three counts; add them over sentences (and processes) before taking F1."""

    matched: int = 0
    predicted: int = 0
    gold: int = 0

    def __add__(self, other: BracketCounts) -> BracketCounts:
        return BracketCounts(
            self.matched + other.matched, self.predicted + other.predicted, self.gold + other.gold
        )

    @property
    def precision(self) -> float:
        return self.matched / self.predicted if self.predicted else 0.0

    @property
    def recall(self) -> float:
        return self.matched / self.gold if self.gold else 0.0

    @property
    def f1(self) -> float:
        return f1_from_counts(self.matched, self.predicted, self.gold)


def f1_from_counts(matched: float, predicted: float, gold: float) -> float:
    """2PR / (P + R) = 2 matched / (predicted + gold); 0 when nothing matches."""
    return 2.0 * matched / (predicted + gold) if matched > 0 else 0.0


def bracket_counts(predicted: Tree, gold: Tree) -> BracketCounts:
    """EVALB's unlabeled counts for one sentence (whole-sentence bracket included, words not)."""
    return counts_from_spans(tree_spans(predicted), tree_spans(gold))


def counts_from_spans(predicted_spans: list[Span], gold_spans: list[Span]) -> BracketCounts:
    """`bracket_counts` from the two trees' `tree_spans` (whole sentence first)."""
    if predicted_spans and gold_spans and predicted_spans[0] != gold_spans[0]:
        raise ValueError(
            f"the predicted tree spans words {predicted_spans[0]} but the gold tree {gold_spans[0]}"
        )
    predicted_counter, gold_counter = Counter(predicted_spans), Counter(gold_spans)
    matched = sum((predicted_counter & gold_counter).values())
    return BracketCounts(matched, len(predicted_spans), len(gold_spans))


def corpus_f1(predicted: Sequence[Tree], gold: Sequence[Tree]) -> float:
    """Corpus-level unlabeled bracket F1 (EVALB), as a fraction in [0, 1]."""
    return sum_counts(bracket_counts(p, g) for p, g in zip(predicted, gold, strict=True)).f1


def sum_counts(counts: Iterable[BracketCounts]) -> BracketCounts:
    total = BracketCounts()
    for count in counts:
        total = total + count
    return total


def sentence_f1_one(predicted: Tree, gold: Tree, *, include_whole_sentence: bool = False) -> float:
    """The authors' per-sentence F1 over span sets (see `sentence_f1_from_spans`)."""
    return sentence_f1_from_spans(
        tree_spans(predicted), tree_spans(gold), include_whole_sentence=include_whole_sentence
    )


def sentence_f1_from_spans(
    predicted_spans: list[Span], gold_spans: list[Span], *, include_whole_sentence: bool = False
) -> float:
    """`sentence_f1_one` from the two trees' `tree_spans` (whole sentence first).

    Sets of spans, without the whole-sentence span unless ``include_whole_sentence``. As the
    authors' script: with no gold span, recall is 1 and precision is 1 only if the prediction has
    no span either, so a one- or two-word sentence scores 1.0 and a flat gold tree of 3+ words
    scores 0.0 against any binary tree. Their ``1e-8`` guards are left out (they move a score by
    at most 1e-8).
    """
    skip = 0 if include_whole_sentence else 1  # tree_spans lists the whole sentence first
    return _sentence_f1_sets(set(predicted_spans[skip:]), set(gold_spans[skip:]))


def sentence_f1(
    predicted: Sequence[Tree], gold: Sequence[Tree], *, include_whole_sentence: bool = False
) -> float:
    """The authors' sentence-averaged F1 (not EVALB's), as a fraction in [0, 1]."""
    scores = [
        sentence_f1_one(p, g, include_whole_sentence=include_whole_sentence)
        for p, g in zip(predicted, gold, strict=True)
    ]
    return sum(scores) / len(scores) if scores else 0.0


def label_recall_counts(
    predicted: Tree, labelled_spans: Iterable[tuple[str, int, int]], labels: Iterable[str]
) -> dict[str, tuple[int, int]]:
    """``label -> (found, total)``: gold constituents of that label found among the predicted
    brackets."""
    return _label_counts(set(tree_spans(predicted)), labelled_spans, tuple(labels))


def _label_counts(
    predicted_spans: set[Span],
    labelled_spans: Iterable[tuple[str, int, int]],
    labels: tuple[str, ...],
) -> dict[str, tuple[int, int]]:
    counts = {label: [0, 0] for label in labels}
    for label, start, end in labelled_spans:
        if label in counts:
            counts[label][1] += 1
            counts[label][0] += (start, end) in predicted_spans
    return {label: (found, total) for label, (found, total) in counts.items()}


@dataclass
class ParseScores:
    """Scores of predicted trees against gold trees (fractions in [0, 1], depth in brackets)."""

    corpus_f1: float
    sentence_f1: float
    counts: BracketCounts
    depth: float
    label_recall: dict[str, float | None] = field(default_factory=dict)  # None: no gold constituent
    label_counts: dict[str, tuple[int, int]] = field(default_factory=dict)
    sentences: int = 0

    def as_dict(self) -> dict[str, object]:
        return {
            "corpus_f1": self.corpus_f1,
            "sentence_f1": self.sentence_f1,
            "matched": self.counts.matched,
            "predicted": self.counts.predicted,
            "gold": self.counts.gold,
            "depth": self.depth,
            "label_recall": dict(self.label_recall),
            "label_counts": {label: list(pair) for label, pair in self.label_counts.items()},
            "sentences": self.sentences,
        }


def score_trees(
    predicted: Sequence[Tree],
    gold: Sequence[Tree],
    labelled_spans: Sequence[Iterable[tuple[str, int, int]]] | None = None,
    labels: Iterable[str] = TABLE2_LABELS,
    *,
    include_whole_sentence: bool = False,
) -> ParseScores:
    """All Table 2 scores of ``predicted`` against ``gold`` (one tree per sentence in each);
    ``include_whole_sentence`` is passed on to `sentence_f1_from_spans`."""
    if len(predicted) != len(gold):
        raise ValueError(f"{len(predicted)} predicted trees for {len(gold)} gold trees")
    return score_spans(
        [tree_spans(tree) for tree in predicted],
        [tree_spans(tree) for tree in gold],
        labelled_spans,
        labels,
        include_whole_sentence=include_whole_sentence,
    )


def mean_depth_from_spans(spans: Sequence[Span]) -> float:
    """The mean number of brackets above a word, from a tree's `tree_spans`: a word's depth
    is the number of brackets covering it, so the depths sum to the brackets' total width."""
    if not spans:
        return 0.0  # a one-word sentence
    start, end = spans[0]
    return sum(span_end - span_start for span_start, span_end in spans) / (end - start)


def score_spans(
    predicted_spans: Sequence[Sequence[Span]],
    gold_spans: Sequence[Sequence[Span]],
    labelled_spans: Sequence[Iterable[tuple[str, int, int]]] | None = None,
    labels: Iterable[str] = TABLE2_LABELS,
    *,
    include_whole_sentence: bool = False,
) -> ParseScores:
    """`score_trees` from each tree's `tree_spans` (the whole sentence first): what the
    scoreboard calls, so that gold spans are computed once and baselines never build trees."""
    if len(predicted_spans) != len(gold_spans):
        raise ValueError(f"{len(predicted_spans)} predicted trees for {len(gold_spans)} gold trees")
    if labelled_spans is not None and len(labelled_spans) != len(gold_spans):
        raise ValueError(
            f"{len(labelled_spans)} labelled-span lists for {len(gold_spans)} gold trees"
        )
    labels = tuple(dict.fromkeys(labels))
    matched = predicted_total = gold_total = 0
    sentence_total = 0.0
    depth_total = 0.0
    label_found = dict.fromkeys(labels, 0)
    label_total = dict.fromkeys(labels, 0)
    skip = 0 if include_whole_sentence else 1
    for index, (predicted, gold) in enumerate(zip(predicted_spans, gold_spans)):
        if predicted and gold and predicted[0] != gold[0]:
            raise ValueError(
                f"sentence {index}: the predicted tree spans words {predicted[0]} but the gold "
                f"tree {gold[0]}"
            )
        predicted_set, gold_set = set(predicted), set(gold)
        if len(predicted_set) == len(predicted) and len(gold_set) == len(gold):
            matched += len(predicted_set & gold_set)
        else:  # duplicate brackets (unary chains): EVALB matches a multiset
            matched += sum((Counter(predicted) & Counter(gold)).values())
        predicted_total += len(predicted)
        gold_total += len(gold)
        sentence_total += _sentence_f1_sets(set(predicted[skip:]), set(gold[skip:]))
        depth_total += mean_depth_from_spans(predicted)
        if labelled_spans is not None:
            for label, start, end in labelled_spans[index]:
                if label in label_total:
                    label_total[label] += 1
                    label_found[label] += (start, end) in predicted_set
    count = len(predicted_spans)
    counts = BracketCounts(matched, predicted_total, gold_total)
    label_counts = {label: (label_found[label], label_total[label]) for label in labels}
    return ParseScores(
        corpus_f1=counts.f1,
        sentence_f1=sentence_total / count if count else 0.0,
        counts=counts,
        depth=depth_total / count if count else 0.0,
        label_recall={
            label: (found / total if total else None)
            for label, (found, total) in label_counts.items()
        },
        label_counts=label_counts,
        sentences=count,
    )


def _sentence_f1_sets(predicted_set: set[Span], gold_set: set[Span]) -> float:
    """The body of `sentence_f1_from_spans` on span sets already without the root."""
    if not gold_set:
        return 0.0 if predicted_set else 1.0
    overlap = len(predicted_set & gold_set)
    if overlap == 0:
        return 0.0
    precision = overlap / len(predicted_set)
    recall = overlap / len(gold_set)
    return 2.0 * precision * recall / (precision + recall)
