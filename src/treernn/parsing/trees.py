"""Binary trees over leaf positions: the greedy top-down builder, the baseline shapes, spans, depth.

A tree is a nested tuple of leaf positions, e.g. ``((0, 1), (2, 3))``; a one-word sentence is the
bare leaf ``0``. Spans are half-open ``(start, end)`` intervals of leaf positions.

The greedy builder is the top-down parser of Shen et al. (2018, PRPN) as the ON-LSTM paper
(Shen et al. 2019, Sec. 5.2) applies it to the master-forget distances of Eq. (15): split before the
word with the largest distance (the first one on ties), that word heads the right part as
``(w_i, rest)``, and recurse on both sides: ``((x_<i), (x_i, (x_>i)))``.

Every walk here uses an explicit stack: ListOps trees reach ~940 levels and trees read from files
thousands, so nothing depends on Python's recursion limit.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, Literal, TypeAlias

Tree: TypeAlias = int | tuple["Tree", ...]
Span: TypeAlias = tuple[int, int]
#: how a leaf's distance is read where tokens that are not leaves (ListOps' closing brackets, the
#: sentence's <eos>) lie between leaves: "drop" reads it at the leaf, "max" takes the largest
#: since the previous leaf (`treernn.parsing.induce.leaf_distances`)
BracketDistances: TypeAlias = Literal["drop", "max"]
BRACKET_DISTANCES = ("drop", "max")


def greedy_tree(distances: Sequence[float]) -> Tree:
    """The ON-LSTM top-down tree from per-word distances (one value per word, at least one word).

    Distances ``[0, 3, 1, 2]`` split before word 1 and then before word 3:
    ``(0, (1, (2, 3)))``. Ties go to the first maximum, so equal distances give the right-branching
    tree.
    """
    values = [float(value) for value in distances]
    if not values:
        raise ValueError("greedy_tree needs at least one distance: the sentence has no words")
    results: list[Tree] = []  # finished subtrees, left before right
    tasks: list[tuple[int, int, int]] = [(0, len(values), -1)]  # (start, end, split or -1)
    while tasks:
        start, end, split_point = tasks.pop()
        if split_point < 0:  # first visit: choose the split, build the parts, then come back
            if end - start == 1:
                results.append(start)
                continue
            split_point = start
            for position in range(start + 1, end):
                if values[position] > values[split_point]:  # strict: the first maximum wins ties
                    split_point = position
            tasks.append((start, end, split_point))
            if split_point + 1 < end:
                tasks.append((split_point + 1, end, -1))
            if split_point > start:
                tasks.append((start, split_point, -1))
            continue
        right: Tree = split_point if split_point + 1 == end else (split_point, results.pop())
        results.append((results.pop(), right) if split_point > start else right)
    return results[0]


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
    """Top-down halving: a span of ``m`` words splits after its first ``floor(m / 2)`` words;
    ``((0, 1), (2, 3))`` for four words, ``(0, (1, 2))`` for three, ``((0, 1), (2, (3, 4)))`` for
    five."""
    _check_length(length)
    results: list[Tree] = []
    tasks: list[tuple[int, int, bool]] = [(0, length, False)]  # (start, end, children done)
    while tasks:
        start, end, children_done = tasks.pop()
        if end - start == 1:
            results.append(start)
        elif children_done:
            right = results.pop()
            results.append((results.pop(), right))
        else:
            middle = start + (end - start) // 2
            tasks.extend([(start, end, True), (middle, end, False), (start, middle, False)])
    return results[0]


def balanced_bottom_up(length: int) -> Tree:
    """Bottom-up pairing: adjacent nodes paired level by level, an odd node out carried up on the
    right; ``(((0, 1), (2, 3)), 4)`` for five words."""
    _check_length(length)
    row: list[Tree] = list(range(length))
    while len(row) > 1:
        paired: list[Tree] = [(row[index], row[index + 1]) for index in range(0, len(row) - 1, 2)]
        if len(row) % 2:
            paired.append(row[-1])
        row = paired
    return row[0]


def random_tree(length: int, rng: random.Random) -> Tree:
    """The greedy tree of i.i.d. uniform distances: the random baseline of PRPN and ON-LSTM."""
    _check_length(length)
    return greedy_tree([rng.random() for _ in range(length)])


def _check_length(length: int) -> None:
    if length < 1:
        raise ValueError(f"a tree needs at least one word, got length {length}")


def leaves(tree: Tree) -> list[int]:
    """Leaf positions from left to right."""
    found: list[int] = []
    stack: list[Tree] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, int):
            found.append(node)
        else:
            stack.extend(reversed(node))
    return found


def spans_and_depths(tree: Tree) -> tuple[list[Span], list[int]]:
    """Internal-node spans (parents before children, the whole sentence first) and the number of
    brackets above each word, left to right. Leaves must be numbered left to right without gaps;
    the first span starts at the first leaf."""
    spans: list[Span] = []
    depths: list[int] = []
    if isinstance(tree, int):
        return spans, [0]
    position = _first_leaf(tree)
    # (node, depth, span slot): a slot is filled in once the node's last leaf has been seen.
    stack: list[tuple[Tree, int, int]] = [(tree, 0, -1)]
    while stack:
        node, depth, slot = stack.pop()
        if slot >= 0:  # closing marker: every leaf below the node has been counted
            spans[slot] = (spans[slot][0], position)
            continue
        if isinstance(node, int):
            depths.append(depth)
            position += 1
            continue
        slot = len(spans)
        spans.append((position, position))
        stack.append((node, depth, slot))
        for child in reversed(node):
            stack.append((child, depth + 1, -1))
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
    """Bracketed text with words at the leaves, e.g. ``((the cat) (sat down))``; a one-word
    sentence is the bare word."""
    parts: list[str] = []
    stack: list[Tree | None] = [tree]  # None closes a bracket
    for_separator = False  # whether the next item follows another item of the same bracket
    while stack:
        node = stack.pop()
        if node is None:
            parts.append(")")
            for_separator = True
            continue
        if for_separator:
            parts.append(" ")
        if isinstance(node, int):
            parts.append(words[node])
            for_separator = True
        else:
            parts.append("(")
            for_separator = False
            stack.append(None)
            stack.extend(reversed(node))
    return "".join(parts)


#: every bracket's label in a drawing: nltk draws an unlabeled node as a stem that ends in
#: nothing, so that the drawing would not show where a constituent begins
DRAWN_LABEL = "X"


def drawing(tree: Tree, words: Sequence[str], label: str = DRAWN_LABEL) -> str:
    """The tree over ``words`` drawn as text by nltk's tree printer (``Tree.pretty_print``), every
    bracket labeled ``label``, trailing spaces cut. Each word hangs from a stem of its own: nltk
    draws a word that follows a subtree before that subtree (a bug of nltk's printer since 2018:
    ``((the cat) sat)`` would read "sat the cat"), and places nodes, not words, in order."""
    import io

    from nltk import Tree as NltkTree

    drawn = to_nltk(tree, [NltkTree("", [word]) for word in words], label)
    out = io.StringIO()
    drawn.pretty_print(stream=out)
    # an unlabeled stem's label is a line of spaces
    return "\n".join(line.rstrip() for line in out.getvalue().splitlines() if line.strip())


def to_nltk(tree: Tree, words: Sequence[str], label: str = "") -> Any:
    """The tree as an ``nltk.Tree`` with ``words`` at its leaves and ``label`` on every bracket
    (default: none, an unlabeled tree); a one-word sentence is one bracket around the word.
    ``nltk.Tree.fromstring`` reads back what ``str`` of it writes only when ``label`` is given
    (unlabeled, it takes each bracket's first word for its label)."""
    from nltk import Tree as NltkTree

    if isinstance(tree, int):
        return NltkTree(label, [words[tree]])
    built: list[Any] = []
    # (node, number of results before its children, expanded?)
    stack: list[tuple[Tree, int, bool]] = [(tree, 0, False)]
    while stack:
        node, first_child, expanded = stack.pop()
        if isinstance(node, int):
            built.append(words[node])
        elif expanded:
            children = built[first_child:]
            del built[first_child:]
            built.append(NltkTree(label, children))
        else:
            stack.append((node, len(built), True))
            stack.extend((child, 0, False) for child in reversed(node))
    return built[0]


def tree_from_nested(nested: object) -> Tree:
    """A tree of positions from nested lists/tuples of anything (leaves numbered left to right),
    e.g. ``[["a", "b"], ["c", "d"]] -> ((0, 1), (2, 3))``; a bracket with one child is that
    child. For writing trees in tests."""
    position = 0
    results: list[Tree] = []
    # (node, number of results before its children, expanded?)
    stack: list[tuple[object, int, bool]] = [(nested, 0, False)]
    while stack:
        node, first_child, expanded = stack.pop()
        if not isinstance(node, list | tuple):
            results.append(position)
            position += 1
        elif expanded:
            children = tuple(results[first_child:])
            del results[first_child:]
            results.append(children[0] if len(children) == 1 else children)
        else:
            if not node:
                raise ValueError("an empty bracket has no leaves")
            stack.append((node, len(results), True))
            stack.extend((child, 0, False) for child in reversed(node))
    return results[0]
