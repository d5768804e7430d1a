"""The scoreboard: hand-worked scores for every metric and edge case, both balanced conventions,
random baselines under a seed, alignment errors, gold files, the protocol options, the three output
forms, and a round trip through tree files on the real nltk sample."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from treernn.parsing.baselines import baseline_spans, baseline_trees
from treernn.parsing.metrics import score_trees
from treernn.parsing.scoreboard import (
    GoldSet,
    Protocol,
    TreeAlignmentError,
    align,
    evaluate,
    load_gold,
    read_gold_file,
    score_tree_file,
    to_json,
    to_markdown,
    to_text,
)
from treernn.parsing.treefile import TreeFileError, parse_tree_lines, write_trees
from treernn.parsing.trees import balanced, balanced_bottom_up, tree_spans
from treernn.parsing.wsj import GoldSentence


def gold_sentence(tree, words: str, labelled=()) -> GoldSentence:
    return GoldSentence(tuple(words.split()), tree, tuple(labelled), "hand", -1)


REFERENCE_GOLD = GoldSet("hand", (gold_sentence(((0, 1), (2, 3)), "a b c d"),))
RIGHT_4 = (0, (1, (2, 3)))


def test_reference_example():
    # gold ((a b) (c d)), predicted (a (b (c d))): 2 of 3 brackets match -> 66.67; without the
    # whole sentence {(0,2),(2,4)} vs {(1,4),(2,4)} -> P = R = 1/2 -> 50.0
    board = evaluate([RIGHT_4], REFERENCE_GOLD, protocol=Protocol(baselines=()))
    row = board.row("predicted")
    assert 100 * row.mean("corpus_f1") == pytest.approx(200 / 3)
    assert 100 * row.mean("sentence_f1") == pytest.approx(50.0)
    assert row.runs[0].counts.matched == 2
    assert board.sentences == 1
    # depth: brackets above a, b, c, d = 1, 2, 3, 3
    assert row.mean("depth") == pytest.approx(9 / 4)


def test_sentence_f1_with_the_whole_sentence_span():
    # with the whole sentence, {(0,4),(0,2),(2,4)} vs {(0,4),(1,4),(2,4)}: P = R = 2/3
    protocol = Protocol(baselines=(), sentence_f1_whole_span=True)
    row = evaluate([RIGHT_4], REFERENCE_GOLD, protocol=protocol).row("predicted")
    assert row.mean("sentence_f1") == pytest.approx(2 / 3)
    assert row.mean("corpus_f1") == pytest.approx(2 / 3)  # unchanged


def test_short_and_flat_gold_trees():
    gold = GoldSet(
        "hand",
        (
            gold_sentence(0, "yes"),  # one word: no bracket anywhere
            gold_sentence((0, 1), "go home"),  # two words: only the whole sentence
            gold_sentence((0, 1, 2), "x y z"),  # flat gold tree of three words
        ),
    )
    binary = [0, (0, 1), (0, (1, 2))]
    row = evaluate(binary, gold, protocol=Protocol(baselines=())).row("predicted")
    # sentence F1: 1.0, 1.0, and 0.0 for the flat gold tree against a binary prediction
    assert row.mean("sentence_f1") == pytest.approx(2 / 3)
    # corpus: brackets 0 + 1 + 2 predicted, 0 + 1 + 1 gold, 0 + 1 + 1 matched -> 2 * 2 / 5
    assert row.runs[0].counts.predicted == 3
    assert row.runs[0].counts.gold == 2
    assert row.mean("corpus_f1") == pytest.approx(0.8)
    # a flat prediction of the flat gold tree scores 1.0 on it
    flat = evaluate([0, (0, 1), (0, 1, 2)], gold, protocol=Protocol(baselines=()))
    assert flat.row("predicted").mean("sentence_f1") == pytest.approx(1.0)
    assert flat.row("predicted").mean("corpus_f1") == pytest.approx(1.0)


def test_label_recall_and_depth_by_hand(tmp_path: Path):
    lines = ["(S (NP the cat) (VP sat (PP on (NP the mat))))"]
    gold = read_gold_file_from_lines(lines, tmp_path)
    right = [(0, (1, (2, (3, (4, 5)))))]  # brackets (0,6) (1,6) (2,6) (3,6) (4,6)
    row = evaluate(right, gold, protocol=Protocol(baselines=())).row("predicted")
    # NP (0,2) missed, NP (4,6) found; PP (3,6) found; no ADJP or INTJ in the gold tree
    assert row.label_recall() == {"ADJP": None, "NP": 0.5, "PP": 1.0, "INTJ": None}
    assert row.runs[0].label_counts["NP"] == (1, 2)
    assert row.mean("depth") == pytest.approx((1 + 2 + 3 + 4 + 5 + 5) / 6)


def read_gold_file_from_lines(lines: list[str], directory: Path, **kwargs) -> GoldSet:
    path = directory / "gold.txt"
    path.write_text("\n".join(lines) + "\n")
    return read_gold_file(path, **kwargs)


# Both balanced conventions, written by hand.
BALANCED_BY_HAND = {
    ("balanced", 5): ((0, 1), (2, (3, 4))),
    ("balanced", 6): ((0, (1, 2)), (3, (4, 5))),
    ("balanced_bottom_up", 5): (((0, 1), (2, 3)), 4),
    ("balanced_bottom_up", 6): (((0, 1), (2, 3)), (4, 5)),
}


@pytest.mark.parametrize(("name", "length"), list(BALANCED_BY_HAND))
def test_balanced_conventions(name: str, length: int):
    expected = BALANCED_BY_HAND[(name, length)]
    builder = balanced if name == "balanced" else balanced_bottom_up
    assert builder(length) == expected
    assert baseline_trees(name, [length]) == [expected]
    # the same brackets, the whole sentence first
    (spans,) = baseline_spans(name, [length])
    assert spans[0] == (0, length)
    assert sorted(spans) == sorted(tree_spans(expected))


def test_the_two_balanced_conventions_differ_in_score():
    gold = GoldSet("hand", (gold_sentence(((0, 1), (2, (3, 4))), "a b c d e"),))
    board = evaluate(None, gold, protocol=Protocol(baselines=("balanced", "balanced_bottom_up")))
    assert board.row("balanced").mean("corpus_f1") == pytest.approx(1.0)
    # (((a b) (c d)) e): brackets (0,5) (0,4) (0,2) (2,4) vs gold (0,5) (0,2) (2,5) (3,5)
    assert board.row("balanced_bottom_up").mean("corpus_f1") == pytest.approx(2 * 2 / 8)


def test_random_baseline_is_deterministic_under_a_seed():
    lengths = [3, 7, 12, 20, 1, 2]
    assert baseline_trees("random", lengths, 3) == baseline_trees("random", lengths, 3)
    assert baseline_trees("random", lengths, 3) != baseline_trees("random", lengths, 4)
    spans = baseline_spans("random", lengths, 3)
    assert [sorted(item) for item in spans] == [
        sorted(tree_spans(tree)) for tree in baseline_trees("random", lengths, 3)
    ]
    gold = GoldSet(
        "hand",
        tuple(
            gold_sentence(tree, " ".join("w" * (index + 1) for index in range(length)))
            for tree, length in zip(baseline_trees("balanced", lengths), lengths)
        ),
    )
    protocol = Protocol(baselines=("random",), seeds=(0, 1, 2))
    first = evaluate(None, gold, protocol=protocol).row("random")
    second = evaluate(None, gold, protocol=protocol).row("random")
    assert first.values("corpus_f1") == second.values("corpus_f1")
    assert len(first.runs) == 3
    # each run is the plain score of that seed's trees; max and mean follow from them
    by_seed = [
        score_trees(baseline_trees("random", lengths, seed), [s.tree for s in gold.sentences])
        for seed in (0, 1, 2)
    ]
    assert first.values("corpus_f1") == pytest.approx([run.corpus_f1 for run in by_seed])
    assert first.max("corpus_f1") == max(run.corpus_f1 for run in by_seed)
    assert first.mean("corpus_f1") == pytest.approx(sum(r.corpus_f1 for r in by_seed) / 3)


def test_alignment_drops_punctuation_and_checks_words():
    gold = GoldSet("hand", (gold_sentence(((0, 1), 2), "the N cats"),))
    # punctuation tokens in an untagged prediction are dropped; case and digits do not matter
    tree_file = parse_tree_lines(["((The 1,000 cats) .)"], path="p.txt")
    # '1,000' normalises to N,N: a different word
    with pytest.raises(TreeAlignmentError) as caught:
        align(tree_file, gold)
    message = str(caught.value)
    assert message.startswith("p.txt:1: the words differ from gold sentence 1 (hand)")
    assert "predicted ['the', 'N,N', 'cats'], gold ['the', 'N', 'cats']" in message
    trees = align(parse_tree_lines(["(`` (The (1988 cats)) .)"]), gold)
    assert trees == [(0, (1, 2))]


def test_alignment_keeps_a_punctuation_token_the_gold_sentence_has():
    # "'" is a word (possessive, tag POS) in the gold sentence; the quotes are not
    gold = GoldSet("hand", (gold_sentence((0, (1, 2)), "investors ' money"),))
    trees = align(parse_tree_lines(["(`` (investors (' (money ''))))"]), gold)
    assert trees == [(0, (1, 2))]


def test_alignment_by_pos_tags():
    gold = GoldSet("hand", (gold_sentence(((0, 1), 2), "the cat sat"),))
    tree_file = parse_tree_lines(["(S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .))"])
    assert align(tree_file, gold) == [((0, 1), 2)]
    # punctuation kept: the '.' is a word too
    kept = GoldSet("hand", (gold_sentence(((0, 1), 2, 3), "the cat sat ."),))
    assert align(tree_file, kept, punctuation="keep") == [((0, 1), 2, 3)]


def test_count_mismatch_names_both_counts():
    tree_file = parse_tree_lines(["(a b)", "(c d)"], path="p.txt")
    with pytest.raises(TreeAlignmentError, match=r"p.txt: 2 trees, but the gold hand has 1 "):
        align(tree_file, GoldSet("hand", (gold_sentence((0, 1), "a b"),)))


def test_labelled_misdetection_gets_a_hint():
    tree_file = parse_tree_lines(["(I (SAW IT))"], path="p.txt")
    assert tree_file.format == "labelled"
    gold = GoldSet("hand", (gold_sentence((0, (1, 2)), "i saw it"),))
    with pytest.raises(TreeAlignmentError, match="format='bracketed'"):
        align(tree_file, gold)
    assert align(parse_tree_lines(["(I (SAW IT))"], format="bracketed"), gold) == [(0, (1, 2))]


def test_alignment_errors_are_tree_file_errors():
    assert issubclass(TreeAlignmentError, TreeFileError)
    assert issubclass(TreeFileError, ValueError)


def test_gold_file_with_pos_is_filtered_like_the_wsj(tmp_path: Path):
    lines = [
        "( (S (NP-SBJ (DT The) (NN dollar)) (VP (VBD fell) (NP-EXT (CD 1.5) (NN %))) (. .)) )",
        "( (S (`` ``) (INTJ (UH Yes)) (, ,) ('' '') (NP-SBJ (-NONE- *)) (. .)) )",
        "( (. .) )",
    ]
    gold = read_gold_file_from_lines(lines, tmp_path)
    assert [s.words for s in gold.sentences] == [
        ("the", "dollar", "fell", "N.N", "%"),
        ("yes",),
    ]
    assert gold.sentences[0].tree == ((0, 1), (2, (3, 4)))
    assert set(gold.sentences[0].labelled_spans) == {
        ("S", 0, 5),
        ("NP", 0, 2),
        ("VP", 2, 5),
        ("NP", 3, 5),
    }
    assert gold.skipped == ("gold.txt:3",)
    # keeping punctuation keeps '.' and the quotes, never the trace
    kept = read_gold_file_from_lines(lines, tmp_path, punctuation="keep")
    assert kept.sentences[1].words == ("``", "yes", ",", "''", ".")
    # the root's unary wrapper "( (S ...) )" collapses; S has three children now
    assert kept.sentences[0].tree == ((0, 1), (2, (3, 4)), 5)


def test_gold_file_without_pos_drops_punctuation_tokens(tmp_path: Path):
    gold = read_gold_file_from_lines(["((The cat) (sat .))", "((Yes) !)"], tmp_path)
    assert [s.words for s in gold.sentences] == [("the", "cat", "sat"), ("yes",)]
    assert gold.sentences[0].tree == ((0, 1), 2)
    kept = read_gold_file_from_lines(["((The cat) (sat .))"], tmp_path, punctuation="keep")
    assert kept.sentences[0].tree == ((0, 1), (2, 3))


def test_outputs_name_the_protocol_and_every_row():
    board = evaluate({"mine": [RIGHT_4]}, REFERENCE_GOLD)
    names = [row.name for row in board.rows]
    assert names == [
        "mine",
        "left_branching",
        "right_branching",
        "random",
        "balanced",
        "balanced_bottom_up",
    ]
    text = to_text(board)
    assert text.splitlines()[0] == "gold: hand (1 sentences)"
    assert "sentence F1 without the whole-sentence span" in text.splitlines()[1]
    assert "punctuation dropped" in text.splitlines()[1]
    mine = next(line for line in text.splitlines() if line.startswith("mine"))
    assert mine.split() == ["mine", "66.67", "50.00", "-", "-", "-", "-", "2.25"]
    assert "(max " in next(line for line in text.splitlines() if line.startswith("random"))
    markdown = to_markdown(board)
    assert "| mine | 66.67 | 50.00 | - | - | - | - | 2.25 |" in markdown
    assert "|---|---:|---:|---:|---:|---:|---:|---:|" in markdown
    data = json.loads(json.dumps(to_json(board)))
    assert data["protocol"]["punctuation"] == "drop"
    assert data["protocol"]["sentence_f1_whole_span"] is False
    assert data["protocol"]["random_seeds"] == [0, 1, 2, 3, 4]
    assert set(data["protocol"]["baselines"]) == set(names[1:])
    assert data["rows"][0]["corpus_f1"]["mean"] == pytest.approx(2 / 3)
    assert data["rows"][0]["brackets"] == {"matched": 2, "predicted": 3, "gold": 3}
    assert data["rows"][3]["runs"] == 5
    assert data["gold"] == {"name": "hand", "sentences": 1, "skipped": []}


def test_protocol_rejects_unknown_options():
    with pytest.raises(ValueError, match="punctuation"):
        Protocol(punctuation="some")
    with pytest.raises(ValueError, match="unknown baselines"):
        Protocol(baselines=("middle",))
    with pytest.raises(ValueError, match="3 trees for 1 gold"):
        evaluate([0, 0, 0], REFERENCE_GOLD)


# ---- real data: the nltk WSJ sample ------------------------------------------------------------


@pytest.fixture(scope="module")
def sample10(data_dir: Path) -> GoldSet:
    return load_gold("sample10", data_dir=data_dir)


def test_written_trees_score_exactly_like_the_trees(sample10: GoldSet, tmp_path: Path):
    lengths = [len(s.words) for s in sample10.sentences]
    trees = baseline_trees("random", lengths, seed=7)
    words = [s.words for s in sample10.sentences]
    protocol = Protocol(baselines=("right_branching",))
    direct = evaluate({"random7": trees}, sample10, protocol=protocol)
    for format in ("bracketed", "json"):
        path = write_trees(tmp_path / f"random7.{format}", trees, words, format)
        from_file = score_tree_file(path, sample10, protocol=protocol, name="random7")
        assert to_json(from_file) == to_json(direct)


def test_right_branching_file_matches_the_baseline_on_the_sample(data_dir: Path, tmp_path: Path):
    gold = load_gold("sample", data_dir=data_dir)
    assert len(gold) == 3914
    right = baseline_trees("right_branching", [len(s.words) for s in gold.sentences])
    path = write_trees(tmp_path / "right.txt", right, [s.words for s in gold.sentences])
    board = score_tree_file(path, gold)
    mine, baseline = board.row("right.txt"), board.row("right_branching")
    assert mine.as_dict()["corpus_f1"] == baseline.as_dict()["corpus_f1"]
    assert 100 * mine.mean("corpus_f1") == pytest.approx(39.41, abs=0.01)  # as parsing/test_wsj.py
    assert 100 * board.row("balanced").mean("corpus_f1") == pytest.approx(25.07, abs=0.01)


def test_sample_word_mismatch_names_line_and_words(sample10: GoldSet, tmp_path: Path):
    words = [list(s.words) for s in sample10.sentences]
    words[4][0] = "banana"
    lengths = [len(w) for w in words]
    path = write_trees(tmp_path / "bad.txt", baseline_trees("left_branching", lengths), words)
    with pytest.raises(TreeAlignmentError) as caught:
        score_tree_file(path, sample10)
    message = str(caught.value)
    assert message.startswith(f"{path}:5: the words differ from gold sentence 5")
    assert str(["banana", *sample10.sentences[4].words[1:]]) in message
    assert str(list(sample10.sentences[4].words)) in message


def test_scoring_the_sample_is_fast(data_dir: Path):
    import time

    gold = load_gold("sample", data_dir=data_dir)
    right = baseline_trees("right_branching", [len(s.words) for s in gold.sentences])
    start = time.perf_counter()
    evaluate({"right": right}, gold)
    # about 2 s on one idle core; the bound leaves room for a loaded machine
    assert time.perf_counter() - start < 30
