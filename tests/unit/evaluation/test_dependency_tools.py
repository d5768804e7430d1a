"""Reranking (UAS/LAS of the chosen candidate) and tree generation (edge labels, sampler)."""

from __future__ import annotations

import random
from functools import partial

import pytest
import torch

from tests.fixtures.dependency import FIGURE_2_HEADS, FIGURE_2_WORDS
from treernn.commands.generate import (
    ADD_LEFT,
    ADD_NX_LEFT,
    ADD_NX_RIGHT,
    ADD_RIGHT,
    edge_features,
    edge_labels,
    sample_tree,
    train_classifiers,
)
from treernn.data.dependency import DependencyTree, linearise
from treernn.encoders.td_treelstm import LdTreeLSTM
from treernn.errors import DataError
from treernn.evaluation.reranking import group_candidates, perturbed_candidates, rerank
from treernn.tasks.dependency_lm import DependencyLanguageModel

GOLD = DependencyTree(("a", "b", "c", "d"), (2, 0, 2, 3), ("det", "root", "obj", "punct"))


def candidate(heads, labels=GOLD.labels, sent_id="s1"):
    return DependencyTree(GOLD.words, heads, labels, metadata={"sent_id": sent_id})


def test_rerank_scores_the_chosen_first_and_oracle_candidates():
    wrong_two = candidate((2, 0, 2, 2))  # d attached to b: 3 of 4 heads right
    wrong_one = candidate((3, 0, 2, 2), ("det", "root", "nsubj", "punct"))  # 2 heads right
    groups = group_candidates([wrong_one, wrong_two, candidate(GOLD.heads)])
    assert [len(g) for g in groups] == [3]
    result = rerank([[-5.0, -1.0, -3.0]], groups, [GOLD])
    assert result["uas"] == 75.0 and result["las"] == 75.0  # wrong_two chosen
    assert result["first_uas"] == 50.0 and result["first_las"] == 25.0
    assert result["oracle_uas"] == 100.0
    # excluding punctuation: 3 scored words, wrong_two gets them all right
    assert rerank([[-5.0, -1.0, -3.0]], groups, [GOLD], exclude_labels=["punct"])["uas"] == 100.0


def test_rerank_rejects_misaligned_files():
    other = DependencyTree(("x", "b", "c", "d"), (2, 0, 2, 3), metadata={"sent_id": "s1"})
    with pytest.raises(DataError, match="words differ"):
        rerank([[0.0]], [[other]], [GOLD])
    with pytest.raises(DataError, match="without '# sent_id"):
        group_candidates([DependencyTree(("a",), (0,))])


def test_perturbed_candidates_contain_gold_once_and_stay_projective():
    gold = DependencyTree(tuple("abcdefgh"), (2, 0, 2, 5, 3, 5, 8, 6), metadata={"sent_id": "x"})
    trees = perturbed_candidates(gold, k=4, changes=2, rng=random.Random(0))
    assert len(trees) == 4
    assert sum(t.heads == gold.heads for t in trees) == 1
    assert len({t.heads for t in trees}) == 4
    assert {t.metadata["sent_id"] for t in trees} == {"x"}


def test_edge_labels_of_figure_2():
    words, heads = list(FIGURE_2_WORDS), FIGURE_2_HEADS
    tree = DependencyTree(tuple(words), heads)
    applies, labels = edge_labels(tree)
    steps = linearise(heads)
    name = {t: words[steps.word_index[t]] for t in range(1, 13)}
    left = {name[t] for t, v in zip(applies[ADD_LEFT], labels[ADD_LEFT]) if v}
    right = {name[t] for t, v in zip(applies[ADD_RIGHT], labels[ADD_RIGHT]) if v}
    assert left == {"sold", "year", "manufacturer", "cars", "U.S."}
    assert right == {"sold", "in"}
    # year is followed by manufacturer (NX-LEFT); auto by luxury, luxury by The; The ends the list
    nx_left = dict(zip((name[t] for t in applies[ADD_NX_LEFT]), labels[ADD_NX_LEFT]))
    assert nx_left == {
        "year": True, "manufacturer": False, "last": False, "auto": True, "luxury": True,
        "The": False, "1,214": False, "the": False,
    }  # fmt: skip
    nx_right = dict(zip((name[t] for t in applies[ADD_NX_RIGHT]), labels[ADD_NX_RIGHT]))
    assert nx_right == {"cars": True, "in": False, "U.S.": False}  # sold is ROOT's only child


def test_classifiers_train_and_sampler_builds_a_tree():
    vocab = ["<pad>", "<unk>", "<root>", "a", "b", "c", "d"]
    task = DependencyLanguageModel(
        partial(LdTreeLSTM, hidden_size=4), vocab_size=len(vocab), vocab=vocab, embedding_size=3
    ).eval()
    trees = [GOLD, DependencyTree(("c", "a"), (0, 1))] * 5
    features, labels = edge_features(task, trees)
    assert features[ADD_LEFT].shape == (30, 4 + 4)  # every word: [h_t ; Who[w_t]]
    assert labels[ADD_RIGHT].sum().item() == 15  # b and c in GOLD, c in the second tree
    classifiers = train_classifiers(features, labels, hidden_size=8, epochs=1)
    torch.manual_seed(0)
    words, heads = sample_tree(task, classifiers, max_nodes=6)
    assert 1 <= len(words) <= 6 and heads.count(0) == 1
    assert set(words) <= {"a", "b", "c", "d"}
    tree = DependencyTree(tuple(words), tuple(heads))
    assert linearise(tree.heads).word_index[0] == -1  # a well-formed tree
