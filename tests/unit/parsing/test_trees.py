"""Tree utilities: the greedy top-down builder on hand-made distances, baseline shapes, spans,
depth, and trees drawn as text."""

from __future__ import annotations

import random

import pytest

from treernn.parsing.trees import (
    balanced,
    drawing,
    greedy_tree,
    leaf_depths,
    leaves,
    left_branching,
    max_depth,
    mean_leaf_depth,
    random_tree,
    right_branching,
    to_bracketed,
    tree_from_nested,
    tree_spans,
)


def test_greedy_splits_before_the_largest_distance_and_the_split_word_heads_the_right_part():
    # largest at word 2 -> ((0 1) (2 (3 4))); inside (0 1) nothing to choose; inside (3 4) neither.
    assert greedy_tree([0.1, 0.5, 0.9, 0.2, 0.3]) == ((0, 1), (2, (3, 4)))
    # largest at word 3 of 4: left part (0 1 2) split before 1 (0.8 > 0.3): (0, (1, 2)).
    assert greedy_tree([0.0, 0.8, 0.3, 0.9]) == ((0, (1, 2)), 3)
    # paper's ((x_<i), (x_i, (x_>i))) with i in the middle, recursing on both sides
    assert greedy_tree([0.2, 0.7, 0.1, 1.0, 0.4, 0.6, 0.3]) == (
        (0, (1, 2)),
        (3, (4, (5, 6))),
    )


def test_greedy_first_word_maximum_gives_word_then_rest():
    assert greedy_tree([5.0, 1.0, 2.0]) == (0, (1, 2))
    assert greedy_tree([5.0, 2.0, 1.0]) == (0, (1, 2))


def test_greedy_ties_go_to_the_first_maximum():
    assert greedy_tree([1.0, 1.0, 1.0, 1.0]) == right_branching(4)
    assert greedy_tree([0.0, 2.0, 0.0, 2.0]) == (0, (1, (2, 3)))
    # tie between 2 and 4 inside the right part: 2 wins, then (3 4) by first maximum.
    assert greedy_tree([0.0, 3.0, 1.0, 0.5, 1.0]) == (0, (1, (2, (3, 4))))


def test_greedy_single_word_and_empty():
    assert greedy_tree([0.3]) == 0
    with pytest.raises(ValueError, match="no words"):
        greedy_tree([])


def test_baseline_shapes():
    assert left_branching(4) == (((0, 1), 2), 3)
    assert right_branching(4) == (0, (1, (2, 3)))
    assert balanced(4) == ((0, 1), (2, 3))
    assert balanced(5) == ((0, 1), (2, (3, 4)))
    assert balanced(3) == (0, (1, 2))
    assert left_branching(1) == right_branching(1) == balanced(1) == 0
    with pytest.raises(ValueError, match="at least one word"):
        balanced(0)


def test_random_tree_is_a_binary_tree_over_all_words_and_depends_on_the_seed():
    trees = [random_tree(12, random.Random(seed)) for seed in range(5)]
    for tree in trees:
        assert leaves(tree) == list(range(12))
        assert tree_spans(tree)[0] == (0, 12)
        assert len(tree_spans(tree)) == 11  # a binary tree over n words has n - 1 brackets
    assert len(set(trees)) > 1
    assert random_tree(12, random.Random(3)) == trees[3]


def test_spans_include_the_whole_sentence_and_not_single_words():
    assert tree_spans(((0, 1), (2, 3))) == [(0, 4), (0, 2), (2, 4)]
    assert tree_spans((0, (1, (2, 3)))) == [(0, 4), (1, 4), (2, 4)]
    assert tree_spans((0, 1, 2)) == [(0, 3)]  # n-ary gold node
    assert tree_spans(0) == []


def test_depths():
    assert leaf_depths((0, (1, (2, 3)))) == [1, 2, 3, 3]
    assert mean_leaf_depth((0, (1, (2, 3)))) == pytest.approx(9 / 4)
    assert max_depth((0, (1, (2, 3)))) == 3
    assert leaf_depths(((0, 1), (2, 3))) == [2, 2, 2, 2]
    assert leaf_depths(0) == [0]


def test_bracketed_text_and_nested_helper():
    words = ["the", "cat", "sat", "down"]
    assert to_bracketed(((0, 1), (2, 3)), words) == "((the cat) (sat down))"
    assert tree_from_nested([["a", "b"], ["c", ["d"]]]) == ((0, 1), (2, 3))
    assert to_bracketed(0, ["alone"]) == "alone"


def test_a_drawn_tree_keeps_its_words_in_order_where_a_word_follows_a_subtree():
    # nltk's pretty_print of (X (X the (X cat (X sees the))) dog) draws "dog the cat sees the"
    # (a bug of nltk's printer); the drawing hangs each word from a stem of its own
    words = ["the", "cat", "sees", "the", "dog"]
    assert drawing(((0, (1, (2, 3))), 4), words).splitlines() == [
        "             X",
        "          ___|____________",
        "         X                |",
        "  _______|___             |",
        " |           X            |",
        " |    _______|____        |",
        " |   |            X       |",
        " |   |        ____|___    |",
        " |   |       |        |   |",
        "the cat     sees     the dog",
    ]
    for tree in (((0, 1), 2), (0, (1, 2)), ((0, (1, 2)), (3, 4))):
        shown = drawing(tree, words[: len(leaves(tree))]).splitlines()
        assert shown[-1].split() == words[: len(leaves(tree))]
    assert drawing(0, ["word"]).splitlines() == [" X", " |", " |", "word"]
