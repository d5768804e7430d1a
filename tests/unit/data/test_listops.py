"""ListOps: parsing, the evaluator against every released test label, the stand-in generator."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from treernn.data.classification import DataFormatError
from treernn.data.download import DatasetNotFoundError
from treernn.data.listops import ListOpsDataModule, parse_expression, read_listops_file
from treernn.data.listops_generator import (
    MAX_DEPTH,
    OPERATORS,
    Node,
    apply_operator,
    evaluate_listops,
    generate_examples,
    generate_tree,
    render,
    tree_value,
    write_examples,
)


def test_parentheses_give_the_left_branching_tree_and_are_not_tokens():
    tokens, positions, tree = parse_expression("( ( ( ( ( [SM 6 ) 5 ) 9 ) 0 ) ] )")
    assert tokens == ["[SM", "6", "5", "9", "0", "]"]
    assert positions == (5, 6, 8, 10, 12, 14)
    assert tree == (((((0, 1), 2), 3), 4), 5)
    assert evaluate_listops(tokens) == 0  # (6 + 5 + 9 + 0) mod 10
    assert parse_expression("9") == (["9"], (0,), 0)


@pytest.mark.parametrize(
    ("operator", "values", "expected"),
    [
        ("[MIN", [4, 7, 2], 2),
        ("[MAX", [4, 7, 2], 7),
        ("[SM", [9, 8, 7], 4),
        ("[MED", [1, 9, 4], 4),
        ("[MED", [1, 2, 5, 9], 3),  # mean of 2 and 5 = 3.5, truncated
        ("[MED", [4, 7], 5),  # 5.5 -> 5
    ],
)
def test_operators(operator, values, expected):
    assert apply_operator(operator, values) == expected


def test_evaluator_on_the_papers_example():
    assert evaluate_listops(["[MAX", "2", "9", "[MIN", "4", "7", "]", "0", "]"]) == 9


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("3", "expected 2 tab-separated fields, found 1"),
        ("x\t( ( [SM 3 ) ] )", "label 'x' is not a digit"),
        ("3\t( ( [SUM 3 ) ] )", "unknown token '\\[SUM'"),
        ("3\t( ( [SM 3 ) ] ", "unbalanced brackets"),
        ("4\t( ( [SM 3 ) ] )", "label 4 but the expression evaluates to 3"),
    ],
)
def test_malformed_lines_name_file_and_line(line, message, tmp_path):
    path = tmp_path / "test.tsv"
    path.write_text("5\t5\n" + line + "\n")
    with pytest.raises(DataFormatError, match=rf"{path}:2: {message}"):
        read_listops_file(path)


def test_evaluator_reproduces_every_released_test_label(data_dir):
    path = data_dir / "listops" / "test_d20s.tsv"
    labels = Counter()
    count = 0
    with open(path) as handle:
        for line in handle:
            label, expression = line.rstrip("\n").split("\t")
            assert evaluate_listops(expression.split()) == int(label), line
            labels[label] += 1
            count += 1
    assert count == 10_000
    assert labels["0"] == 1127 and labels["9"] == 1141  # SOURCE.md's label counts


def test_released_test_file_loads_with_length_buckets(data_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("TREERNN_CACHE_DIR", str(tmp_path))
    module = ListOpsDataModule(
        data_dir=data_dir, train_source="generate", standin_size=200, download=False
    )
    module.prepare_data()
    module.setup()
    test = module.splits["test"]
    assert len(test) == 10_000
    lengths = [len(ex.sentences[0].token_ids) for ex in test]
    assert max(lengths) == 939 and min(lengths) == 1
    for example, length in zip(test, lengths):
        assert module.bucket_names[example.bucket] == _bucket(length)
    assert all(len(ex.sentences[0].token_ids) <= 50 for ex in module.splits["train"])
    assert len(module.splits["val"]) == 20  # every 10th of the 200 generated examples


def _bucket(length: int) -> str:
    for low, high in ((1, 50), (51, 100), (101, 200), (201, 400)):
        if low <= length <= high:
            return f"len{low}-{high}"
    return "len401+"


def test_render_is_the_released_format():
    tree = Node("[SM", (6, 5, Node("[MIN", (4, 7)), 0))
    assert render(tree) == ("( ( ( ( ( [SM 6 ) 5 ) ( ( ( [MIN 4 ) 7 ) ] ) ) 0 ) ] )")
    assert tree_value(tree) == (6 + 5 + 4 + 0) % 10


def test_generator_is_seeded():
    assert generate_examples(50, seed=3) == generate_examples(50, seed=3)
    assert generate_examples(50, seed=3) != generate_examples(50, seed=4)


def _nodes(tree):
    stack = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        yield node, depth
        if isinstance(node, Node):
            stack.extend((child, depth + 1) for child in node.children)


def test_generator_distribution_follows_the_rules():
    rng = random.Random(0)
    trees = [generate_tree(rng) for _ in range(4000)]
    # the root is a bare digit with probability 1 - VALUE_P = 0.75 (sd 0.007 over 4000 draws)
    bare = sum(isinstance(tree, int) for tree in trees) / len(trees)
    assert abs(bare - 0.75) < 0.03
    arguments, operators, digits, deepest = Counter(), Counter(), Counter(), 0
    for tree in trees:
        for node, depth in _nodes(tree):
            if isinstance(node, Node):
                arguments[len(node.children)] += 1
                operators[node.operator] += 1
                deepest = max(deepest, depth)
            else:
                digits[node] += 1
    assert set(arguments) == {2, 3, 4, 5} and set(operators) == set(OPERATORS)
    total = sum(arguments.values())
    assert all(abs(arguments[n] / total - 0.25) < 0.05 for n in arguments)
    assert all(abs(operators[o] / total - 0.25) < 0.05 for o in operators)
    assert set(digits) == set(range(10))
    assert deepest < MAX_DEPTH  # a node at depth MAX_DEPTH is always a digit


def test_generated_labels_agree_with_the_evaluator_and_lines_are_unique():
    examples = generate_examples(300, seed=1, max_tokens=60)
    assert len({text for _, text in examples}) == 300
    for label, text in examples:
        tokens, _, _ = parse_expression(text)
        assert evaluate_listops(tokens) == label
        assert len(tokens) <= 60


def test_without_the_training_file_the_error_names_the_generate_switch(tmp_path, monkeypatch):
    """Offline (download=False here) and without train_d20s.tsv: one line that says where to put
    the file and how to train on the stand-in instead."""
    monkeypatch.setenv("TREERNN_CACHE_DIR", str(tmp_path / "cache"))
    module = ListOpsDataModule(data_dir=tmp_path / "data", download=False)
    with pytest.raises(DatasetNotFoundError) as error:
        module._train_path()
    message = str(error.value)
    assert "train_d20s.tsv" in message and "\n" not in message
    assert message.endswith("with task.datamodule.train_source=generate.")


def test_writing_a_standin_leaves_another_writers_temporary_file_alone(tmp_path):
    """Two jobs of a sweep generate the same stand-in at once: each writes through a temporary
    file of its own (the old shared ``.tsv.tmp`` name made one job's rename fail)."""
    path = tmp_path / "standin.tsv"
    other = tmp_path / "standin.tsv.tmp"  # another process's temporary file, mid-write
    other.write_text("partial")
    write_examples(path, [(3, "( [MAX 1 3 )"), (1, "1")])
    assert path.read_text(encoding="utf-8") == "3\t( [MAX 1 3 )\n1\t1\n"
    assert other.read_text() == "partial"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["standin.tsv", "standin.tsv.tmp"]
