"""Bracket F1 (EVALB corpus-level and the authors' sentence average), label recall and depth on
hand-built trees with hand-computed answers."""

from __future__ import annotations

import pytest

from treernn.parsing.metrics import (
    BracketCounts,
    bracket_counts,
    corpus_f1,
    label_recall_counts,
    mean_depth_from_spans,
    score_spans,
    score_trees,
    sentence_f1,
    sentence_f1_one,
)
from treernn.parsing.trees import spans_and_depths, tree_spans

GOLD = ((0, 1), (2, 3))  # ((a b) (c d))
RIGHT = (0, (1, (2, 3)))  # (a (b (c d)))


def test_reference_example_corpus_and_sentence_level():
    # gold brackets {(0,4), (0,2), (2,4)}, predicted {(0,4), (1,4), (2,4)}: 2 of 3 match.
    assert bracket_counts(RIGHT, GOLD) == BracketCounts(matched=2, predicted=3, gold=3)
    assert 100 * corpus_f1([RIGHT], [GOLD]) == pytest.approx(66.6667, abs=1e-3)
    # without the whole sentence: {(0,2), (2,4)} vs {(1,4), (2,4)}: P = R = 1/2.
    assert 100 * sentence_f1([RIGHT], [GOLD]) == pytest.approx(50.0)


def test_corpus_f1_sums_counts_before_dividing():
    # sentence 1: the example above (2 / 3 / 3); sentence 2: 3 words, gold (a (b c)),
    # predicted ((a b) c): brackets {(0,3),(0,2)} vs {(0,3),(1,3)}, 1 match of 2 / 2.
    predicted = [RIGHT, ((0, 1), 2)]
    gold = [GOLD, (0, (1, 2))]
    # P = R = 3 / 5 -> F1 = 0.6 (the mean of per-sentence EVALB F1s would be (2/3 + 1/2) / 2).
    assert corpus_f1(predicted, gold) == pytest.approx(0.6)
    # sentence level: sentence 1 = 0.5, sentence 2 = {(0,2)} vs {(1,3)} = 0.0 -> 0.25.
    assert sentence_f1(predicted, gold) == pytest.approx(0.25)


def test_nary_gold_and_unequal_bracket_counts():
    # gold (a b c d) flat: one bracket; predicted right-branching: 3 brackets, 1 match.
    counts = bracket_counts(RIGHT, (0, 1, 2, 3))
    assert counts == BracketCounts(1, 3, 1)
    assert counts.precision == pytest.approx(1 / 3)
    assert counts.recall == pytest.approx(1.0)
    assert counts.f1 == pytest.approx(2 * (1 / 3) * 1 / (1 / 3 + 1))  # 0.5
    # a flat gold tree of 4 words has no span below the root: the authors' script gives recall 1 and
    # precision 0 / 2 against a binary tree -> 0.0 (it used to be 1.0 here, which was wrong) ...
    assert sentence_f1_one(RIGHT, (0, 1, 2, 3)) == 0.0
    # ... and 1.0 only against a prediction without any span below the root either
    assert sentence_f1_one((0, 1, 2, 3), (0, 1, 2, 3)) == 1.0
    assert sentence_f1_one((0, 1, 2), (0, 1, 2)) == 1.0
    assert sentence_f1_one(((0, 1), 2), (0, 1, 2)) == 0.0


def test_short_sentences():
    # one word: no bracket at all; two words: only the whole-sentence bracket, always right.
    assert bracket_counts(0, 0) == BracketCounts(0, 0, 0)
    assert bracket_counts((0, 1), (0, 1)) == BracketCounts(1, 1, 1)
    assert corpus_f1([0, (0, 1)], [0, (0, 1)]) == 1.0
    assert sentence_f1([0, (0, 1)], [0, (0, 1)]) == 1.0


def test_perfect_and_disjoint_trees():
    five_gold = ((0, 1), (2, (3, 4)))
    assert corpus_f1([five_gold], [five_gold]) == 1.0
    assert sentence_f1([five_gold], [five_gold]) == 1.0
    # (((0 1) 2) 3) vs (0 (1 (2 3))): only the whole sentence matches.
    assert bracket_counts((((0, 1), 2), 3), RIGHT) == BracketCounts(1, 3, 3)
    assert sentence_f1_one((((0, 1), 2), 3), RIGHT) == 0.0


def test_brackets_match_as_a_multiset():
    # a gold tree with a unary-looking duplicate bracket (not produced by our clean-up, but EVALB's
    # rule): gold ((0 1)) has (0,2) twice, predicted (0 1) once -> 1 match, 1 predicted, 2 gold.
    assert bracket_counts((0, 1), ((0, 1),)) == BracketCounts(1, 1, 2)


def test_mismatched_lengths_are_refused():
    with pytest.raises(ValueError, match="spans words"):
        bracket_counts((0, (1, 2)), GOLD)


def test_label_recall():
    labelled = [("NP", 0, 2), ("VP", 2, 4), ("NP", 2, 4), ("S", 0, 4), ("PP", 1, 3)]
    found = label_recall_counts(RIGHT, labelled, ["NP", "VP", "PP", "ADJP", "S"])
    # predicted brackets (0,4), (1,4), (2,4)
    assert found == {"NP": (1, 2), "VP": (1, 1), "PP": (0, 1), "ADJP": (0, 0), "S": (1, 1)}


def test_score_trees_collects_everything():
    labelled = [[("NP", 0, 2), ("VP", 2, 4)], [("NP", 1, 3)]]
    scores = score_trees([RIGHT, ((0, 1), 2)], [GOLD, (0, (1, 2))], labelled, ["NP", "VP", "INTJ"])
    assert scores.counts == BracketCounts(3, 5, 5)
    assert scores.corpus_f1 == pytest.approx(0.6)
    assert scores.sentence_f1 == pytest.approx(0.25)
    # NP: (0,2) not in sentence 1's brackets, (1,3) not in sentence 2's -> 0 of 2; VP (2,4) found.
    assert scores.label_recall == {"NP": 0.0, "VP": 1.0, "INTJ": None}
    assert scores.label_counts["NP"] == (0, 2)
    # mean leaf depths: (1 + 2 + 3 + 3) / 4 = 2.25 and (2 + 2 + 1) / 3 = 5/3
    assert scores.depth == pytest.approx((2.25 + 5 / 3) / 2)
    assert scores.sentences == 2
    assert scores.as_dict()["matched"] == 3


def test_sentence_f1_edge_cases_of_the_authors_script():
    # one word: no span anywhere -> 1.0; two words: only the whole sentence, dropped -> 1.0
    assert sentence_f1_one(0, 0) == 1.0
    assert sentence_f1_one((0, 1), (0, 1)) == 1.0
    # flat gold of 3+ words: 0.0 against any binary tree, 1.0 against a flat prediction
    assert sentence_f1([RIGHT, (0, 1, 2, 3)], [(0, 1, 2, 3)] * 2) == pytest.approx(0.5)
    # with the whole-sentence span counted, the reference example gives P = R = 2/3
    assert sentence_f1_one(RIGHT, GOLD, include_whole_sentence=True) == pytest.approx(2 / 3)
    # ... and the flat gold tree scores P = 1/3, R = 1 -> 0.5 against right-branching
    assert sentence_f1_one(RIGHT, (0, 1, 2, 3), include_whole_sentence=True) == pytest.approx(0.5)
    scores = score_trees([RIGHT], [GOLD], include_whole_sentence=True)
    assert scores.sentence_f1 == pytest.approx(2 / 3)
    assert scores.corpus_f1 == pytest.approx(2 / 3)


def _recursive_spans_and_depths(tree, depth=0, start=0, spans=None, depths=None):
    """The plain recursive walk, as a reference for the iterative one."""
    spans = [] if spans is None else spans
    depths = [] if depths is None else depths
    if isinstance(tree, int):
        depths.append(depth)
        return start + 1, spans, depths
    slot = len(spans)
    spans.append(None)
    end = start
    for child in tree:
        end, _, _ = _recursive_spans_and_depths(child, depth + 1, end, spans, depths)
    spans[slot] = (start, end)
    return end, spans, depths


def test_iterative_spans_and_depths_match_the_recursive_ones():
    import random

    from treernn.parsing.trees import random_tree

    for length in range(1, 40):
        for seed in range(3):
            tree = random_tree(length, random.Random(seed))
            assert spans_and_depths(tree) == _recursive_spans_and_depths(tree)[1:]
    nary = (0, (1, 2, 3), ((4, 5), 6))
    assert spans_and_depths(nary) == ([(0, 7), (1, 4), (4, 7), (4, 6)], [1, 2, 2, 2, 3, 3, 2])
    # 3000 levels: far past the recursion limit
    deep = 0
    for position in range(1, 3001):
        deep = (deep, position)
    spans, depths = spans_and_depths(deep)
    assert spans[0] == (0, 3001) and spans[-1] == (0, 2)
    assert depths[0] == 3000 and depths[-1] == 1
    assert tree_spans(deep) == spans


def test_mean_depth_from_spans():
    # brackets above a, b, c, d in (a (b (c d))): 1, 2, 3, 3
    assert mean_depth_from_spans(tree_spans(RIGHT)) == pytest.approx(9 / 4)
    assert mean_depth_from_spans(tree_spans(GOLD)) == pytest.approx(2.0)
    assert mean_depth_from_spans([]) == 0.0


def test_score_spans_equals_score_trees_and_keeps_the_multiset_rule():
    labelled = [[("NP", 0, 2), ("VP", 2, 4)], [("NP", 1, 3)]]
    predicted, gold = [RIGHT, ((0, 1), 2)], [GOLD, (0, (1, 2))]
    by_trees = score_trees(predicted, gold, labelled, ["NP", "VP"])
    by_spans = score_spans(
        [tree_spans(t) for t in predicted], [tree_spans(t) for t in gold], labelled, ["NP", "VP"]
    )
    assert by_spans == by_trees
    # a duplicated gold bracket (unary chain) counts twice on the gold side, as in EVALB
    assert score_spans([[(0, 2)]], [[(0, 2), (0, 2)]]).counts == BracketCounts(1, 1, 2)
    with pytest.raises(ValueError, match="sentence 0: the predicted tree spans words"):
        score_spans([[(0, 3)]], [[(0, 4)]])
