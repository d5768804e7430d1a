"""Logical inference data: parsing real lines, bad lines, the split rules and their sizes."""

from __future__ import annotations

import pytest

from treernn.data.classification import Collator, DataFormatError, parse_bracketed
from treernn.data.logic import (
    LOGIC_TOKENS,
    PAPER_TRAIN_SIZES,
    RELATIONS,
    LogicInferenceDataModule,
    count_operators,
    matches_pattern,
    parse_formula,
    read_logic_file,
)


def test_bracketed_formula_gives_tree_over_the_non_bracket_tokens():
    tokens, leaves, tree = parse_formula("( d ( and e ) )")
    assert tokens == ["(", "d", "(", "and", "e", ")", ")"]
    assert leaves == [1, 3, 4]
    assert tree == (0, (1, 2))
    # a real line of test12's premise side, nested four deep on the right
    _, _, tree = parse_formula("( not ( e ( or ( not c ) ) ) )")
    assert tree == (0, (1, (2, (3, 4))))
    assert parse_formula("d")[2] == 0


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("<\t( a ( and b ) )", "expected 3 tab-separated fields, found 2"),
        ("?\ta\tb", "unknown relation '?'"),
        ("<\t( a ( xor b ) )\ta", "unknown token 'xor'"),
        ("<\t( a ( and b )\ta", "unbalanced brackets"),
        ("<\ta ) (\ta", "unbalanced brackets"),
    ],
)
def test_malformed_lines_name_file_and_line(line, message, tmp_path):
    path = tmp_path / "train1"
    path.write_text("=\ta\ta\n" + line + "\n")
    with pytest.raises(DataFormatError, match=rf"{path}:2: .*{message}"):
        read_logic_file(path)


def test_exclusion_patterns_match_whole_tokens():
    assert matches_pattern("( f ( and ( not a ) ) )", "A")
    assert not matches_pattern("( f ( and ( not b ) ) )", "A")
    assert matches_pattern("( f ( and ( not b ) ) )", "B")
    assert matches_pattern("( c ( and ( not ( a ( or b ) ) ) ) )", "B")
    assert not matches_pattern("( c ( or ( not b ) ) )", "B")
    assert matches_pattern("( c ( or ( not b ) ) )", "C")
    # "( and ( not a ) )" needs the closing brackets right after a
    assert not matches_pattern("( f ( and ( not ( a ( or b ) ) ) ) )", "A")


def test_collate_stacks_premises_then_hypotheses(tmp_path):
    module = LogicInferenceDataModule(data_dir=tmp_path, download=False)
    first = module._example((0, module._formula("( a ( and b ) )"), module._formula("c")), 1, 0)
    second = module._example((3, module._formula("d"), module._formula("( not e )")), 1, 0)
    batch = Collator(module.vocab.pad_index)([first, second])
    assert batch.num_sentences == 2 and batch.tokens.shape == (4, 7)
    assert module.vocab.decode(batch.tokens[0]) == ["(", "a", "(", "and", "b", ")", ")"]
    assert module.vocab.decode(batch.tokens[1][:1]) == ["d"]
    assert module.vocab.decode(batch.tokens[3][:4]) == ["(", "not", "e", ")"]
    assert batch.mask.sum(1).tolist() == [7, 1, 1, 4]
    assert batch.leaf_mask.sum(1).tolist() == [3, 1, 1, 2]
    assert batch.trees == [(0, (1, 2)), 0, 0, (0, 1)]
    assert batch.labels.tolist() == [0, 3]
    # where each leaf sits among the bracketed tokens (0 at padding)
    assert batch.leaf_index.tolist() == [[1, 3, 4], [0, 0, 0], [0, 0, 0], [1, 2, 0]]
    assert parse_bracketed(["(", "a", ")"]) == ([1], 0)


def test_without_brackets_the_leaves_are_the_tokens(tmp_path):
    module = LogicInferenceDataModule(data_dir=tmp_path, download=False, feed_brackets=False)
    example = module._example((0, module._formula("( a ( and b ) )"), module._formula("c")), 1, 0)
    batch = Collator(module.vocab.pad_index)([example])
    assert module.vocab.decode(batch.tokens[0]) == ["a", "and", "b"]
    assert batch.leaf_index.tolist() == [[0, 1, 2], [0, 0, 0]]


@pytest.fixture(scope="module")
def logic_dir(data_dir):
    return data_dir


def test_real_files_parse_and_file_number_is_operator_count(logic_dir):
    folder = logic_dir / "propositional_logic"
    pairs = read_logic_file(folder / "test3")
    assert len(pairs) == 4104
    for label, (premise, _, _), (hypothesis, _, _) in pairs:
        assert RELATIONS[label] in "<>=^|#v"
        assert set(premise) | set(hypothesis) <= set(LOGIC_TOKENS)
        assert max(count_operators(premise), count_operators(hypothesis)) == 3
    # the first line of train3, read by hand: "|  ( not ( e ( or ( not c ) ) ) )  ( d ( and e ) )"
    label, premise, hypothesis = read_logic_file(folder / "train3")[0]
    assert RELATIONS[label] == "|"
    assert premise[2] == (0, (1, (2, (3, 4))))
    assert hypothesis[2] == (0, (1, 2))


@pytest.mark.parametrize("split", ["full", "A", "B", "C"])
def test_split_sizes_match_the_paper(split, logic_dir):
    module = LogicInferenceDataModule(data_dir=logic_dir, split=split, download=False)
    module.setup()
    assert module.train_pool_size == PAPER_TRAIN_SIZES[split]
    sizes = module.split_sizes()
    # every 10th pair of the running count is held out for validation
    assert sizes["val"] == PAPER_TRAIN_SIZES[split] // 10
    assert sizes["train"] + sizes["val"] == PAPER_TRAIN_SIZES[split]
    groups = module.group_sizes()
    assert groups["length"] == 37367
    if split != "full":
        # no training pair contains the excluded pattern; every sysgen test pair does
        train = module.splits["train"]
        assert not any(ex.group for ex in train)
        expected = {"A": 2472, "B": 17544, "C": 27232}[split]
        assert groups[f"sysgen_{split}"] == expected
    buckets = {ex.bucket for ex in module.splits["test"]}
    assert buckets == set(range(13))
    assert {ex.bucket for ex in module.splits["train"]} == set(range(7))


def test_tree_models_read_the_leaves_and_sequence_models_the_brackets(logic_dir):
    module = LogicInferenceDataModule(data_dir=logic_dir, max_train_ops=1, download=False)
    module.setup()
    batch = next(iter(module.val_dataloader()))
    vocab = module.vocab
    for row in range(batch.tokens.size(0)):
        tokens = vocab.decode(batch.tokens[row][batch.mask[row]])
        leaves = vocab.decode(batch.leaf_tokens[row][batch.leaf_mask[row]])
        assert leaves == [t for t in tokens if t not in ("(", ")")]


def test_checksum_failure_is_reported_and_file_not_used(tmp_path):
    folder = tmp_path / "propositional_logic"
    folder.mkdir()
    for name in [f"train{n}" for n in range(7)] + [f"test{n}" for n in range(13)]:
        (folder / name).write_text("=\ta\ta\n")
    module = LogicInferenceDataModule(data_dir=tmp_path, download=False)
    with pytest.raises(ValueError, match="fails its sha256 check"):
        module.prepare_data()
