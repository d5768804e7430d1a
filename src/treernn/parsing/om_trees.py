"""Trees induced by Ordered Memory's attention (Shen et al., NeurIPS 2019, section 3.3 and
Algorithm 2 of its appendix; REFERENCE.md "Tree induction").

At step t the pointer p_t attends on slot y_t of the candidate memory (slots 0..N-1, the last one
the bottom of the stack). Read as a shift-reduce parser, the model has just combined the previous
word with the sub-trees in slots y_{t-1}..y_t: ``y_t - y_{t-1} + 1`` reduce steps, then it shifts
word t. The first word has no attention; its split depth is N, which makes the second word (always
pointed at slot N - 1) reduce nothing. At the end everything left on the stack is reduced into one
tree. With split depths ``[N, N-1, N-2]`` (three words, each pushing) the tree is ``(0, (1, 2))``;
with ``[N, N-1, N-1]`` it is ``((0, 1), 2)``.

Trees are nested tuples of positions (see CONTRIBUTING.md); score them against gold trees with
`treernn.parsing.metrics` (``corpus_f1``, ``score_trees``).
"""

from __future__ import annotations

from collections.abc import Collection, Container, Sequence

from torch import Tensor

from treernn.parsing.metrics import BracketCounts, bracket_counts, sum_counts
from treernn.parsing.trees import Tree


def split_depths(attention: Tensor, length: int | None = None) -> list[int]:
    """(T, N) attention of one sequence (real steps only) -> split depth per word.

    Depth of word t > 0 is the argmax slot of p_t (0-based); the first word gets N.
    """
    if attention.dim() != 2:
        raise ValueError(
            f"split_depths needs a (T, N) attention matrix; got {tuple(attention.shape)}"
        )
    steps, num_slots = attention.shape
    length = steps if length is None else length
    if length == 0:
        return []
    depths = attention[1:length].argmax(dim=-1).tolist()
    return [num_slots, *depths]


def tree_from_depths(depths: Sequence[int]) -> Tree:
    """Algorithm 2: the shift-reduce tree of a sentence from its split depths.

    For each word after the first, reduce ``depth_t - depth_{t-1} + 1`` times (clipped to what the
    stack holds), then shift the word; finally reduce to one tree. A reduce pops the top two
    sub-trees ``a`` (below) and ``b`` (top) and pushes ``(a, b)``.
    """
    if not depths:
        raise ValueError("tree_from_depths needs at least one word")
    stack: list[Tree] = [0]
    for position in range(1, len(depths)):
        reduces = min(max(depths[position] - depths[position - 1] + 1, 0), len(stack) - 1)
        for _ in range(reduces):
            top = stack.pop()
            stack[-1] = (stack[-1], top)
        stack.append(position)
    while len(stack) > 1:
        top = stack.pop()
        stack[-1] = (stack[-1], top)
    return stack[0]


def keep_positions(tree: Tree, keep: Container[int]) -> Tree | None:
    """The tree over the kept leaves only, renumbered 0..k-1 in order, unary nodes collapsed.

    Used to score a tree over everything the model read (e.g. logic formulas with brackets) against
    a gold tree over the words. Returns None when no leaf is kept.
    """
    kept = 0  # leaves kept so far: the next kept leaf's new position
    results: list[Tree | None] = []
    # (node, number of results before its children, expanded?)
    stack: list[tuple[Tree, int, bool]] = [(tree, 0, False)]
    while stack:
        node, first_child, expanded = stack.pop()
        if isinstance(node, int):
            if node in keep:
                results.append(kept)
                kept += 1
            else:
                results.append(None)
        elif expanded:
            children = [child for child in results[first_child:] if child is not None]
            del results[first_child:]
            if not children:
                results.append(None)
            else:
                results.append(children[0] if len(children) == 1 else tuple(children))
        else:
            stack.append((node, len(results), True))
            stack.extend((child, 0, False) for child in reversed(node))
    return results[0]


def induce_trees(
    attention: Tensor,
    mask: Tensor | None = None,
    keep: Sequence[Container[int]] | None = None,
) -> list[Tree]:
    """Trees for a batch from the attention (B, T, N) and the padding mask (B, T); the attention is
    ``values[0]`` of Ordered Memory's ``TreeSignal("attention", ...)`` (see
    `treernn.parsing.induce.trees_from_signal`, the entry point for any tree signal).

    Positions count the real tokens of each row (left or right padding alike). ``keep`` (one
    container of positions per row) restricts each tree to those positions, see
    `keep_positions`; a row with no token gives the empty tree ``()``.
    """
    attention = attention.detach().float().cpu()
    if mask is None:
        rows = [attention[b] for b in range(attention.size(0))]
    else:
        mask = mask.detach().bool().cpu()
        rows = [attention[b][mask[b]] for b in range(attention.size(0))]
    trees: list[Tree] = []
    for index, row in enumerate(rows):
        if row.size(0) == 0:
            trees.append(())
            continue
        tree = tree_from_depths(split_depths(row))
        if keep is not None:
            tree = keep_positions(tree, keep[index])
            tree = () if tree is None else tree
        trees.append(tree)
    return trees


def positions_without(
    tokens: Tensor, mask: Tensor | None, drop_ids: Collection[int]
) -> list[set[int]]:
    """Per row, the positions (counting real tokens only) whose id is not in ``drop_ids``: the
    ``keep`` of `induce_trees` for logic formulas, whose brackets the model reads but the
    gold trees do not contain."""
    tokens = tokens.detach().cpu()
    rows = (
        tokens.tolist() if mask is None else [row[m].tolist() for row, m in zip(tokens, mask.cpu())]
    )
    return [{i for i, token in enumerate(row) if token not in drop_ids} for row in rows]


def batch_bracket_counts(
    attention: Tensor,
    mask: Tensor | None,
    gold_trees: Sequence[Tree],
    keep: Sequence[Container[int]] | None = None,
) -> BracketCounts:
    """EVALB counts of a batch's induced trees against its gold trees; add them over batches (and
    processes) and take ``.f1``, as the ON-LSTM parse F1 does."""
    predicted = induce_trees(attention, mask, keep)
    return sum_counts(
        bracket_counts(tree, gold) for tree, gold in zip(predicted, gold_trees, strict=True)
    )
