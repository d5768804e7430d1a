"""Tree induction from Ordered Memory attention (Algorithm 2) on constructed attention patterns."""

from __future__ import annotations

import pytest
import torch

from treernn.encoders.ordered_memory import OrderedMemoryEncoder
from treernn.parsing.metrics import corpus_f1
from treernn.parsing.om_trees import (
    batch_bracket_counts,
    induce_trees,
    keep_positions,
    positions_without,
    split_depths,
    tree_from_depths,
)
from treernn.parsing.trees import leaves

N = 5  # slots


@pytest.mark.parametrize(
    ("depths", "tree"),
    [
        ([N], 0),
        ([N, N - 1], (0, 1)),
        ([N, N - 1, N - 2], (0, (1, 2))),  # every word pushed: right-branching
        ([N, N - 1, N - 1, N - 1], (((0, 1), 2), 3)),  # reduce once before each word: left
        ([N, N - 1, N - 1, N - 2], ((0, 1), (2, 3))),
        # word 3 reduces (1 2) and then (0 (1 2)) before being shifted
        ([N, N - 1, N - 2, N - 1, N - 2], ((0, (1, 2)), (3, 4))),
    ],
)
def test_tree_from_depths(depths, tree):
    assert tree_from_depths(depths) == tree


def test_reduces_are_clipped_to_the_stack():
    assert tree_from_depths([3, 2, 9]) == ((0, 1), 2)


def one_hot_attention(slots: list[int | None]) -> torch.Tensor:
    rows = [torch.zeros(N) if slot is None else torch.nn.functional.one_hot(torch.tensor(slot), N)
            for slot in slots]  # fmt: skip
    return torch.stack(rows).float()


def test_split_depths_first_word_gets_the_slot_count():
    attention = one_hot_attention([None, N - 1, N - 1, N - 2])
    attention[3] = torch.tensor([0.0, 0.1, 0.2, 0.6, 0.1])  # soft: argmax slot 3
    assert split_depths(attention) == [N, N - 1, N - 1, N - 2]


def test_induce_trees_for_a_left_padded_batch_and_keep_positions():
    first = one_hot_attention([None, N - 1, N - 1, N - 2])  # ((0 1) (2 3))
    second = torch.cat([torch.zeros(1, N), one_hot_attention([None, N - 1, N - 2])])
    attention = torch.stack([first, second])  # (2, 4, N)
    mask = torch.tensor([[True] * 4, [False, True, True, True]])
    assert induce_trees(attention, mask) == [((0, 1), (2, 3)), (0, (1, 2))]
    # dropping positions 0 and 3 (e.g. brackets) from ((0 1) (2 3)) leaves (0 1) renumbered
    assert induce_trees(attention, mask, keep=[{1, 2}, {0, 1, 2}]) == [(0, 1), (0, (1, 2))]
    assert keep_positions(((0, 1), (2, 3)), {0}) == 0
    assert keep_positions((0, 1), set()) is None


def test_f1_of_induced_trees_against_gold_through_shared_metrics():
    attention = torch.stack([one_hot_attention([None, N - 1, N - 1, N - 2])])
    predicted = induce_trees(attention)
    assert corpus_f1(predicted, [((0, 1), (2, 3))]) == 1.0
    # gold (0 (1 (2 3))): brackets {0-4, 2-4, 1-4} vs predicted {0-4, 0-2, 2-4}: 2 of 3 match
    assert corpus_f1(predicted, [(0, (1, (2, 3)))]) == pytest.approx(2 / 3)


def test_logic_brackets_are_removed_before_scoring():
    # "( a and b ) or c" read with brackets: ids 0 = "(", 1 = ")"; the model's tree over all 7
    # tokens is left-branching; without the brackets it is (((a and) b) or) c
    tokens = torch.tensor([[0, 5, 6, 7, 1, 8, 9, 3]])
    mask = torch.tensor([[True] * 7 + [False]])
    keep = positions_without(tokens, mask, {0, 1})
    assert keep == [{1, 2, 3, 5, 6}]
    attention = torch.stack([one_hot_attention([None] + [N - 1] * 6)])
    attention = torch.cat([attention, torch.zeros(1, 1, N)], dim=1)
    counts = batch_bracket_counts(attention, mask, [(((0, 1), 2), (3, 4))], keep)
    # predicted brackets 0-5, 0-4, 0-3, 0-2; gold 0-5, 0-3, 0-2, 3-5 -> 3 matched of 4 and 4
    assert (counts.matched, counts.predicted, counts.gold) == (3, 4, 4)


def test_trees_from_a_real_encoder_cover_every_word():
    encoder = OrderedMemoryEncoder(3, 4, memory_slots=3).eval()
    mask = torch.arange(8)[None] < torch.tensor([[8], [5], [1]])
    with torch.no_grad():
        attention = encoder(torch.randn(3, 8, 3), mask).tree_signal.values[0]  # (B, T, N)
    trees = induce_trees(attention, mask)
    assert [sorted(leaves(tree)) for tree in trees] == [list(range(8)), list(range(5)), [0]]


def test_bad_attention_shape():
    with pytest.raises(ValueError, match=r"\(T, N\)"):
        split_depths(torch.zeros(2, 3, 4))
