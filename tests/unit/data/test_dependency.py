"""Dependency data: CoNLL reading and its error reports, projectivity, linearisation, vocabulary."""

from __future__ import annotations

import pytest
import torch

from tests.fixtures.dependency import FIGURE_2_HEADS, FIGURE_2_WORDS
from treernn.data.dependency import (
    DependencyFormatError,
    build_vocabulary,
    collate_trees,
    encode_tree,
    is_projective,
    linearise,
    read_dependency_file,
    read_dependency_text,
)
from treernn.encoders.top_down_tree import LEFT, NX_LEFT, NX_RIGHT, RIGHT


def conllu(rows: list[tuple[str, int | str]], comments: tuple[str, ...] = ()) -> list[str]:
    lines = [f"# {c}" for c in comments]
    for index, (word, head) in enumerate(rows, start=1):
        lines.append(f"{index}\t{word}\t_\t_\t_\t_\t{head}\tdep\t_\t_")
    return lines + [""]


def test_figure_2_breadth_first_order_edges_and_predecessors():
    steps = linearise(FIGURE_2_HEADS)
    words = ["ROOT"] + [FIGURE_2_WORDS[i] for i in steps.word_index[1:]]
    # the subscripts of the paper's Figure 2
    assert words == [
        "ROOT", "sold", "year", "manufacturer", "cars", "in", "last", "auto", "luxury", "The",
        "1,214", "U.S.", "the",
    ]  # fmt: skip
    assert steps.edge_type[1:] == (
        RIGHT, LEFT, NX_LEFT, RIGHT, NX_RIGHT, LEFT, LEFT, NX_LEFT, NX_LEFT, LEFT, RIGHT, LEFT,
    )  # fmt: skip
    # D(year) = D(sold) + <sold, LEFT>; D(manufacturer) = D(year) + <year, NX-LEFT>;
    # D(cars) = D(sold) + <sold, RIGHT>; D(in) = D(cars) + <cars, NX-RIGHT>
    assert steps.predecessor == (0, 0, 1, 2, 1, 4, 2, 3, 7, 8, 4, 5, 11)
    assert steps.level == (0, 1, 2, 3, 2, 3, 3, 4, 5, 6, 3, 4, 5)
    # LdTreeLSTM: cars (first right dependent of sold) sees sold's left dependents farthest first:
    # manufacturer (step 3), then year (step 2). ROOT has no left dependent.
    assert steps.left_dependents[4] == (3, 2)
    assert steps.left_dependents[1] == ()
    assert all(steps.left_dependents[t] == () for t in range(13) if t != 4 and t != 1)
    # U.S. is the first right dependent of "in", which has no left dependent
    assert steps.edge_type[11] == RIGHT and steps.left_dependents[11] == ()


def test_every_predecessor_is_on_the_previous_level():
    steps = linearise(FIGURE_2_HEADS)
    for t in range(1, len(steps.level)):
        assert steps.level[t] == steps.level[steps.predecessor[t]] + 1


def test_several_dependents_on_both_sides():
    # a b c H d e : a, b, c and d, e all depend on H (word 4)
    steps = linearise((4, 4, 4, 0, 4, 4))
    assert steps.word_index == (-1, 3, 2, 1, 0, 4, 5)
    assert steps.edge_type[1:] == (RIGHT, LEFT, NX_LEFT, NX_LEFT, RIGHT, NX_RIGHT)
    assert steps.predecessor == (0, 0, 1, 2, 3, 1, 5)
    assert steps.left_dependents[5] == (4, 3, 2)  # a, b, c


def test_projectivity():
    assert is_projective(FIGURE_2_HEADS)
    assert is_projective((2, 0, 2))
    # 1 -> 3 crosses 2 -> 4
    assert not is_projective((3, 4, 0, 3))
    # an arc over the root word crosses the ROOT arc
    assert not is_projective((3, 0, 2))


def test_reader_reports_each_problem_with_file_and_line():
    lines = (
        conllu([("a", 2), ("b", 0)], comments=("sent_id = ok",))
        + conllu([("x", 3), ("y", 4), ("z", 0), ("w", 3)])  # non-projective
        + conllu([("c", 2), ("d", 1)])  # cycle
        + conllu([("e", "_"), ("f", 0)])  # missing head
        + conllu([("g", 7), ("h", 0)])  # head out of range
        + ["1\tbroken\t_\t0\troot", ""]  # 5 columns
        + ["1-2\tdon't\t_\t_\t_\t_\t_\t_\t_\t_"]
        + conllu([("do", 0), ("n't", 1)])
    )
    trees, report = read_dependency_text(lines, path="toy.conllu")
    assert [t.words for t in trees] == [("a", "b"), ("do", "n't")]
    assert trees[0].metadata == {"sent_id": "ok"} and trees[0].source == "toy.conllu:2"
    assert report.sentences == 7 and report.kept == 2
    assert report.skipped == {
        "non-projective": 1, "cyclic": 1, "missing head": 1, "bad head": 1, "malformed line": 1,
    }  # fmt: skip
    assert report.problems == [
        "toy.conllu:5: non-projective tree (crossing arcs)",
        "toy.conllu:10: word 1 is on a cycle (never reaches ROOT)",
        "toy.conllu:13: word 1 has no head ('_')",
        "toy.conllu:16: head 7 of word 1 is not a word of the sentence",
        "toy.conllu:19: expected 10 tab-separated columns, found 5; fix the line or read with "
        "on_error='skip'",
    ]
    assert "skipped 1 bad head" in report.summary()


def test_reader_raise_mode_and_options():
    lines = conllu([("x", 3), ("y", 4), ("z", 0), ("w", 3)])
    with pytest.raises(DependencyFormatError, match=r"toy.conllu:1: non-projective"):
        read_dependency_text(lines, path="toy.conllu", on_error="raise")
    trees, report = read_dependency_text(lines, projective_only=False)
    assert len(trees) == 1 and not report.skipped
    trees, report = read_dependency_text(lines, projective_only=False, max_length=3)
    assert trees == [] and report.skipped == {"too long": 1}


def test_conllx_with_spaces_reads_like_tabs():
    lines = ["1 The _ DT DT _ 2 NMOD _ _", "2 dog _ NN NN _ 0 ROOT _ _", ""]
    trees, _ = read_dependency_text(lines)
    assert trees[0].heads == (2, 0) and trees[0].labels == ("NMOD", "ROOT")


def test_vocabulary_cutoff_lowercase_and_counts():
    sentences = [["a", "b", "a"], ["a", "c", "b"]]
    vocab, counts = build_vocabulary(sentences, unk_threshold=1)
    assert vocab.itos == ["<pad>", "<unk>", "<root>", "a", "b"]
    assert counts == [0, 1, 0, 3, 2]  # <unk> stands for the one "c"
    trees, _ = read_dependency_text(conllu([("The", 2), ("A", 0)]))
    encoded = encode_tree(trees[0], vocab, lowercase=True)
    assert encoded.tokens == [2, 3, 1]  # ROOT, "a" (the head, generated first), "the" -> <unk>
    assert encoded.sequence_tokens == [2, 1, 3]


def test_collate_pads_and_offsets():
    vocab, _ = build_vocabulary([list(FIGURE_2_WORDS)], unk_threshold=0)
    trees, _ = read_dependency_text(
        conllu(list(zip(FIGURE_2_WORDS, FIGURE_2_HEADS))) + conllu([("sold", 0)])
    )
    batch = collate_trees([encode_tree(t, vocab) for t in trees])
    assert batch.tokens.shape == (2, 13)
    assert batch.mask.sum(1).tolist() == [13, 2]
    tree = batch.tree
    assert tree.left_dependents.shape == (2, 13, 2)
    assert tree.left_dependents[0, 4].tolist() == [3, 2]
    assert tree.left_dependents_length[0].tolist() == [0, 0, 0, 0, 2] + [0] * 8
    assert batch.word_index[1].tolist() == [-1, 0] + [-1] * 11
    assert torch.equal(tree.predecessor[1, :2], torch.tensor([0, 0]))
    # "sold" alone: ROOT (edge type -1 in the linearisation, 0 in the batch) and one RIGHT step
    # on level 1; padding 0 everywhere past the mask, the pad index in both token views
    assert tree.edge_type[1].tolist() == [0, RIGHT] + [0] * 11
    assert tree.level[1].tolist() == [0, 1] + [0] * 11
    assert batch.sequence_tokens[1, 2:].tolist() == batch.tokens[1, 2:].tolist() == [0] * 11
    assert tree.left_dependents[1].abs().sum() == 0 and tree.left_dependents_length[1].sum() == 0


def test_ewt_reads_with_projective_count(data_dir):
    trees, report = read_dependency_file(data_dir / "ud_english_ewt/en_ewt-ud-dev.conllu")
    assert report.sentences == 2001
    assert report.kept == len(trees) == 2001 - report.skipped["non-projective"]
    assert 0 < report.skipped["non-projective"] < 100
    assert set(report.skipped) == {"non-projective"}


def test_tags_are_kept_and_written_back(tmp_path):
    from dataclasses import replace

    from treernn.data.dependency import write_conllu

    lines = ["1 The _ DET DT _ 2 det _ _", "2 dog _ NOUN NN _ 0 root _ _", ""]
    trees, _ = read_dependency_text(lines)
    assert trees[0].upos == ("DET", "NOUN") and trees[0].xpos == ("DT", "NN")
    write_conllu(trees, tmp_path / "out.conllu")
    again, _ = read_dependency_file(tmp_path / "out.conllu")
    assert (again[0].upos, again[0].xpos) == (trees[0].upos, trees[0].xpos)
    # tags take no part in a tree's identity (candidate trees compare by words, heads, labels)
    assert replace(trees[0], upos=("X", "X"), xpos=()) == trees[0]
