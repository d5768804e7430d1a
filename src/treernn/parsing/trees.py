"""Binary trees over leaf positions: the greedy top-down builder, the baseline shapes, spans, depth.

A tree is a nested tuple of leaf positions, e.g. ``((0, 1), (2, 3))``; a one-word sentence is the
bare leaf ``0``. Spans are half-open ``(start, end)`` intervals of leaf positions.

The greedy builder is the top-down parser of Shen et al. (2018, PRPN) as the ON-LSTM paper
(Shen et al. 2019, Sec. 5.2) applies it to the master-forget distances of Eq. (15): split before the
word with the largest distance (the first one on ties), that word heads the right part as
``(w_i, rest)``, and recurse on both sides: ``((x_<i), (x_i, (x_>i)))``.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TypeAlias

Tree: TypeAlias = int | tuple["Tree", ...]
Span: TypeAlias = tuple[int, int]


def greedy_tree(distances: Sequence[float]) -> Tree:
    """The ON-LSTM top-down tree from per-word distances (one value per word, at least one word).

    Distances ``[0, 3, 1, 2]`` split before word 1 and then before word 3:
    ``(0, (1, (2, 3)))``. Ties go to the first maximum, so equal distances give the right-branching
    tree.
    """
    values = [float(value) for value in distances]
    if not values:
        raise ValueError("greedy_tree needs at least one distance: the sentence has no words")

    def build(start: int, end: int) -> Tree:
        if end - start == 1:
            return start
        split_point = start
        for position in range(start + 1, end):
            if values[position] > values[split_point]:  # strict: the first maximum wins ties
                split_point = position
        right: Tree = (
            split_point if split_point + 1 == end else (split_point, build(split_point + 1, end))
        )
        return right if split_point == start else (build(start, split_point), right)

    return build(0, len(values))


def left_branching(length: int) -> Tree:
    """``(((0, 1), 2), 3)`` for four words."""
    _check_length(length)
    tree: Tree = 0
    for position in range(1, length):
        tree = (tree, position)
    return tree


def right_branching(length: int) -> Tree:
    """``(0, (1, (2, 3)))`` for four words."""
    _check_length(length)
    tree: Tree = length - 1
    for position in range(length - 2, -1, -1):
        tree = (position, tree)
    return tree


def balanced(length: int) -> Tree:
    """Split each span in the middle (the left half gets the smaller part on odd lengths):
    ``((0, 1), (2, 3))`` for four words, ``(0, (1, 2))`` for three."""
    _check_length(length)

    def build(start: int, end: int) -> Tree:
        if end - start == 1:
            return start
        middle = start + (end - start) // 2
        return (build(start, middle), build(middle, end))

    return build(0, length)


def random_tree(length: int, rng: random.Random) -> Tree:
    """The greedy tree of i.i.d. uniform distances: the random baseline of PRPN and ON-LSTM."""
    _check_length(length)
    return greedy_tree([rng.random() for _ in range(length)])


def _check_length(length: int) -> None:
    if length < 1:
        raise ValueError(f"a tree needs at least one word, got length {length}")


def leaves(tree: Tree) -> list[int]:
    """Leaf positions from left to right."""
    if isinstance(tree, int):
        return [tree]
    return [leaf for child in tree for leaf in leaves(child)]


def spans_and_depths(tree: Tree) -> tuple[list[Span], list[int]]:
    """Internal-node spans (parents before children) and the depth of each leaf, left to right."""
    spans: list[Span] = []
    depths: list[int] = []

    def visit(node: Tree, depth: int, start: int) -> int:
        if isinstance(node, int):
            depths.append(depth)
            return start + 1
        slot = len(spans)
        spans.append((start, start))  # placeholder until the end is known
        end = start
        for child in node:
            end = visit(child, depth + 1, end)
        spans[slot] = (start, end)
        return end

    visit(tree, 0, _first_leaf(tree))
    return spans, depths


def _first_leaf(tree: Tree) -> int:
    while not isinstance(tree, int):
        tree = tree[0]
    return tree


def tree_spans(tree: Tree) -> list[Span]:
    """Every bracket EVALB would count on this tree: all internal nodes, the whole sentence first,
    no single words. A list, since EVALB matches brackets as a multiset. Leaves must be numbered
    left to right without gaps from the first one."""
    return spans_and_depths(tree)[0]


def leaf_depths(tree: Tree) -> list[int]:
    """Number of brackets above each word, left to right (0 for a one-word sentence)."""
    return spans_and_depths(tree)[1]


def max_depth(tree: Tree) -> int:
    return max(leaf_depths(tree))


def mean_leaf_depth(tree: Tree) -> float:
    depths = leaf_depths(tree)
    return sum(depths) / len(depths)


def to_bracketed(tree: Tree, words: Sequence[str]) -> str:
    """Bracketed text with words at the leaves, e.g. ``((the cat) (sat down))``."""
    if isinstance(tree, int):
        return words[tree]
    return "(" + " ".join(to_bracketed(child, words) for child in tree) + ")"


def tree_from_nested(nested: object) -> Tree:
    """A tree of positions from nested lists/tuples of anything (leaves numbered left to right),
    e.g. ``[["a", "b"], ["c", "d"]] -> ((0, 1), (2, 3))``; for writing trees in tests."""
    counter = iter(range(10**9))

    def build(node: object) -> Tree:
        if isinstance(node, list | tuple):
            if not node:
                raise ValueError("an empty bracket has no leaves")
            children = tuple(build(child) for child in node)
            return children[0] if len(children) == 1 else children
        return next(counter)

    return build(nested)
