"""Tree files: the three formats and their detection, POS preterminals, filtering and unary
collapse, one clear error per malformed line, writing and reading back, and very deep trees."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from treernn.parsing.treefile import (
    TreeFileError,
    format_tree,
    parse_tree_lines,
    prepare,
    read_trees,
    tree_from_spans,
    write_trees,
)
from treernn.parsing.trees import tree_spans


def one(line: str, format: str = "auto"):
    tree_file = parse_tree_lines([line], format=format, path="t.txt")
    return tree_file, prepare(tree_file.trees[0])


@pytest.mark.parametrize(
    ("line", "expected_format"),
    [
        ("((the cat) sat)", "bracketed"),
        ('[["the", "cat"], "sat"]', "json"),
        ("(S (NP the cat) (VP sat))", "labelled"),
        ("( (S (NP the cat) (VP sat)) )", "labelled"),
    ],
)
def test_formats_give_the_same_tree(line: str, expected_format: str):
    tree_file, prepared = one(line)
    assert tree_file.format == expected_format
    assert tree_file.detected
    assert prepared.words == ("the", "cat", "sat")
    assert prepared.tree == ((0, 1), 2)  # (VP sat) is a bracket over one word: not a bracket


def test_labels_give_labelled_spans_with_base_labels():
    _, prepared = one("(S (NP-SBJ-1 (NP the cat)) (VP sat (PP on (NP the mat))))")
    assert prepared.tree == ((0, 1), (2, (3, (4, 5))))
    # the unary NP chain gives one NP span; base labels; S covers the sentence
    assert set(prepared.labelled_spans) == {
        ("S", 0, 6),
        ("NP", 0, 2),
        ("VP", 2, 6),
        ("PP", 3, 6),
        ("NP", 4, 6),
    }
    assert len(prepared.labelled_spans) == 5


def test_right_branching_lower_case_is_not_read_as_labelled():
    # every '(' is followed by a word here, but words are lower case, so no labels
    tree_file, prepared = one("(a (b (c d)))")
    assert tree_file.format == "bracketed"
    assert prepared.tree == (0, (1, (2, 3)))
    # ... while asking for labels reads 'a', 'b', 'c' as labels over the single word d
    labelled_file, labelled = one("(a (b (c d)))", format="labelled")
    assert labelled_file.format == "labelled" and not labelled_file.detected
    assert labelled.words == ("d",)


def test_numbers_written_as_N_are_words_not_labels():
    tree_file, prepared = one("(N (N million))")
    assert tree_file.format == "bracketed"
    assert prepared.words == ("n", "n", "million")


def test_pos_preterminals_are_tags():
    tree_file, prepared = one("( (S (NP-SBJ (DT The) (NN cat)) (VP (VBD sat)) (. .)) )")
    assert tree_file.format == "labelled" and tree_file.has_pos
    raw = tree_file.trees[0]
    assert raw.tags == ("DT", "NN", "VBD", ".")
    assert raw.words == ("The", "cat", "sat", ".")
    # without filtering, every word is kept, lower-cased
    assert prepared.words == ("the", "cat", "sat", ".")
    # dropping the '.' empties its bracket and makes S's only other children the sentence
    dropped = prepare(raw, [True, True, True, False])
    assert dropped.words == ("the", "cat", "sat")
    assert dropped.tree == ((0, 1), 2)
    assert set(dropped.labelled_spans) == {("S", 0, 3), ("NP", 0, 2)}


def test_a_file_is_tagged_only_if_every_word_is():
    lines = ["(S (NP (DT the) (NN cat)) (VP (VBD sat)))", "(S (NP the dog) (VP (VBD ran)))"]
    tree_file = parse_tree_lines(lines)
    assert tree_file.format == "labelled"
    assert not tree_file.has_pos
    assert all(tree.tags is None for tree in tree_file.trees)


def test_filtering_drops_empty_brackets_and_collapses_unary_nodes():
    _, prepared = one("((a (b)) ((c)) d)")
    assert prepared.tree == ((0, 1), 2, 3)
    raw = parse_tree_lines(["((a b) (c d))"]).trees[0]
    assert prepare(raw, [False, False, True, True]).tree == (0, 1)
    assert prepare(raw, [False, True, True, False]).tree == (0, 1)
    assert prepare(raw, [False, False, False, True]).tree == 0
    assert prepare(raw, [False] * 4) is None


def test_digits_and_case_are_normalised():
    _, prepared = one("((The 1.5 %) (rose in 1988))")
    assert prepared.words == ("the", "N.N", "%", "rose", "in", "N")


@pytest.mark.parametrize("line", ["word", "(word)", '["word"]', '"word"', "((word))"])
def test_one_word_trees(line: str):
    _, prepared = one(line)
    assert prepared.words == ("word",)
    assert prepared.tree == 0


def test_blank_lines_are_skipped_and_line_numbers_kept(tmp_path: Path):
    path = tmp_path / "trees.txt"
    path.write_text("((a b) c)\n\n   \n(d e)\n")
    tree_file = read_trees(path)
    assert [tree.line for tree in tree_file.trees] == [1, 4]
    assert [prepare(tree).tree for tree in tree_file.trees] == [((0, 1), 2), (0, 1)]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("((a b) c", "1 '(' never closed"),
        ("(a b))", "')' number 5 closes nothing"),
        ("(a b) (c d)", "a second tree starts"),
        ("(a () b)", "empty bracket"),
        ("a (b c)", "text before the first bracket: 'a'"),
        ("a b c", "text before the first bracket"),
        ('[["a", "b"], ]', "',' before ']'"),
        ('["a" "b"]', "missing ','"),
        ('[[], "a"]', "empty list"),
        ('["a"]]', "text after the tree closed"),
        ('[["a", "b"]', "1 '[' never closed"),
        ("[a, b]", "unexpected 'a'"),
        ('["a", 3]', "unexpected '3'"),
    ],
)
def test_malformed_lines_give_one_error_naming_file_and_line(
    tmp_path: Path, line: str, message: str
):
    path = tmp_path / "bad.txt"
    first = '["x", "y"]' if line.startswith("[") else "(x y)"
    path.write_text(f"{first}\n\n{line}\n{first}\n")
    with pytest.raises(TreeFileError) as caught:
        read_trees(path)
    assert str(caught.value).startswith(f"{path}:3: ")
    assert message in str(caught.value)
    assert caught.value.line == 3


def test_labelled_bracket_without_words_is_an_error():
    with pytest.raises(TreeFileError, match=r"t.txt:1: the bracket labelled 'NP' has no words"):
        parse_tree_lines(["(S (NP) (VP sat))"], format="labelled", path="t.txt")


def test_missing_file_and_unknown_format(tmp_path: Path):
    with pytest.raises(TreeFileError, match="no such tree file"):
        read_trees(tmp_path / "missing.txt")
    (tmp_path / "empty.txt").write_text("\n\n")
    with pytest.raises(TreeFileError, match="no tree"):
        read_trees(tmp_path / "empty.txt")
    with pytest.raises(TreeFileError, match="unknown tree format 'xml'"):
        read_trees(tmp_path / "empty.txt", format="xml")


def test_a_tree_per_newline_whatever_other_breaks_a_line_holds(tmp_path: Path):
    """Lines end at \\n only: a form feed or U+2028 between words (splitlines broke the first
    tree in two and shifted every later tree against its gold sentence) is a space."""
    path = tmp_path / "trees.txt"
    path.write_bytes("((the cat)\x0c(sat down))\n((a\u2028dog) ran)\n".encode())
    trees = read_trees(path)
    assert [tree.words for tree in trees.trees] == [
        ("the", "cat", "sat", "down"),
        ("a", "dog", "ran"),
    ]


def test_a_fifo_is_refused_without_waiting(tmp_path: Path):
    fifo = tmp_path / "trees.fifo"
    os.mkfifo(fifo)  # no writer: reading it would block for ever
    with pytest.raises(TreeFileError, match=r"trees.fifo: is a FIFO \(named pipe\), not a regular"):
        read_trees(fifo)


def test_format_tree():
    words = ["the", "cat", "sat", "down"]
    tree = ((0, 1), (2, 3))
    assert format_tree(tree, words) == "((the cat) (sat down))"
    assert format_tree(tree, words, "json") == '[["the", "cat"], ["sat", "down"]]'
    assert format_tree(0, ["one"]) == "(one)"
    assert format_tree(0, ["one"], "json") == '["one"]'
    assert format_tree((0, 1, 2), ["(", "a", ")"]) == "(-LRB- a -RRB-)"
    with pytest.raises(ValueError, match="whitespace"):
        format_tree((0, 1), ["a b", "c"])


@pytest.mark.parametrize("format", ["bracketed", "json"])
def test_write_then_read_gives_the_same_trees(tmp_path: Path, format: str):
    trees = [((0, 1), (2, 3)), 0, (0, 1), (0, (1, (2, 3))), (((0, 1), 2), 3, 4)]
    words = [["The", "cat", "sat", "down"], ["yes"], ["N", "dollars"], list("abcd"), list("vwxyz")]
    path = write_trees(tmp_path / f"trees.{format}", trees, words, format)
    tree_file = read_trees(path)
    assert tree_file.format == format
    prepared = [prepare(tree) for tree in tree_file.trees]
    assert [item.tree for item in prepared] == trees
    assert [list(item.words) for item in prepared] == [[w.lower() for w in s] for s in words]


def test_very_deep_trees_need_no_recursion(tmp_path: Path):
    depth = 5000  # far beyond Python's default recursion limit of 1000
    tree = 0
    for position in range(1, depth + 1):
        tree = (tree, position)  # left-branching over depth + 1 words
    words = [f"w{position}" for position in range(depth + 1)]
    for format in ("bracketed", "json"):
        path = write_trees(tmp_path / f"deep.{format}", [tree], [words], format)
        prepared = prepare(read_trees(path).trees[0])
        assert len(prepared.words) == depth + 1
        spans = tree_spans(prepared.tree)
        assert spans == [(0, end) for end in range(depth + 1, 1, -1)]


def test_tree_from_spans():
    assert tree_from_spans(4, [(0, 2), (2, 4)]) == ((0, 1), (2, 3))
    assert tree_from_spans(4, [(1, 4), (2, 4), (0, 4)]) == (0, (1, (2, 3)))
    assert tree_from_spans(3, []) == (0, 1, 2)
    assert tree_from_spans(1, []) == 0
    with pytest.raises(ValueError, match="crosses"):
        tree_from_spans(4, [(0, 2), (1, 3)])
