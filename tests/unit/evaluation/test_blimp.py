"""BLiMP minimal pairs (treernn.evaluation.blimp): reading the jsonl schema and scoring pairs."""

from __future__ import annotations

import json

import pytest

from treernn.errors import ConfigValueError, DataError
from treernn.evaluation.blimp import evaluate_blimp, format_blimp, read_blimp

#: three lines in BLiMP's schema (the fields of its published files), two paradigms
LINES = [
    {
        "sentence_good": "Many teenagers were helping themselves.",
        "sentence_bad": "Many teenagers were helping herself.",
        "field": "morphology",
        "linguistics_term": "anaphor_agreement",
        "UID": "anaphor_number_agreement",
        "simple_LM_method": True,
        "one_prefix_method": False,
        "two_prefix_method": False,
        "lexically_identical": False,
        "pairID": "0",
    },
    {
        "sentence_good": "A man was helping himself.",
        "sentence_bad": "A man was helping themselves.",
        "field": "morphology",
        "linguistics_term": "anaphor_agreement",
        "UID": "anaphor_number_agreement",
        "simple_LM_method": True,
        "one_prefix_method": False,
        "two_prefix_method": False,
        "lexically_identical": False,
        "pairID": "1",
    },
    {
        "sentence_good": "Who has Tina seen?",
        "sentence_bad": "Who has Tina seen him?",
        "field": "syntax",
        "linguistics_term": "filler_gap_dependency",
        "UID": "wh_vs_that_no_gap",
        "simple_LM_method": True,
        "one_prefix_method": False,
        "two_prefix_method": False,
        "lexically_identical": False,
        "pairID": "0",
    },
]


@pytest.fixture
def blimp_file(tmp_path):
    path = tmp_path / "blimp.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in LINES))
    return path


def test_reads_the_pairs_and_keeps_their_fields(blimp_file):
    pairs = read_blimp([blimp_file])
    assert [pair.uid for pair in pairs] == ["anaphor_number_agreement"] * 2 + ["wh_vs_that_no_gap"]
    assert pairs[2].good == "Who has Tina seen?" and pairs[2].bad == "Who has Tina seen him?"
    assert pairs[0].fields["linguistics_term"] == "anaphor_agreement"
    assert pairs[1].fields["pairID"] == "1"


def sentence_scores(scores: dict[str, float]):
    """A scorer of whole sentences (the full method: empty prefixes) from a table by hand."""

    def score(prefixes, continuations, end):
        assert set(prefixes) == {""} and end is True
        return [scores[sentence] for sentence in continuations]

    return score


def test_a_pair_is_right_when_the_good_sentence_is_more_probable(blimp_file):
    # scores by hand: pair 1 right (-10 > -12), pair 2 a tie (wrong), pair 3 wrong (-9 < -8)
    scores = {
        LINES[0]["sentence_good"]: -10.0,
        LINES[0]["sentence_bad"]: -12.0,
        LINES[1]["sentence_good"]: -7.0,
        LINES[1]["sentence_bad"]: -7.0,
        LINES[2]["sentence_good"]: -9.0,
        LINES[2]["sentence_bad"]: -8.0,
    }
    result = evaluate_blimp(sentence_scores(scores), read_blimp([blimp_file]))
    assert result.accuracy == pytest.approx(1 / 3)
    assert (result.pairs, result.correct, result.ties, result.skipped) == (3, 1, 1, 0)
    assert result.paradigms["anaphor_number_agreement"] == {
        "pairs": 2,
        "correct": 1,
        "ties": 1,
        "accuracy": 0.5,
        "field": "morphology",
        "linguistics_term": "anaphor_agreement",
    }
    assert result.paradigms["wh_vs_that_no_gap"]["accuracy"] == 0.0
    # the same pairs grouped by phenomenon and by field, and every pair's scores
    assert result.phenomena == {
        "anaphor_agreement": {"pairs": 2, "correct": 1, "ties": 1, "accuracy": 0.5},
        "filler_gap_dependency": {"pairs": 1, "correct": 0, "ties": 0, "accuracy": 0.0},
    }
    assert set(result.fields) == {"morphology", "syntax"}
    assert [(i.pair_id, i.good, i.bad, i.correct, i.tie) for i in result.items] == [
        ("0", -10.0, -12.0, True, False),
        ("1", -7.0, -7.0, False, True),
        ("0", -9.0, -8.0, False, False),
    ]
    assert [item.source for item in result.tied] == [f"{blimp_file}:2"]
    table = format_blimp(result).splitlines()
    assert table[0] == "BLiMP, full method"
    assert table[-2].split() == ["all", "33.33%", "3", "1"]
    assert table[-1] == "tied (counted wrong): anaphor_number_agreement#1"
    record = result.as_dict()
    assert record["method"] == "full" and record["items"][1]["tie"] is True
    assert json.loads(json.dumps(record)) == record


#: BLiMP's prefix keys, as its files give them where a paradigm suits a prefix method
ONE_PREFIX = {
    "sentence_good": "The sketch of those trucks hasn't hurt Alan.",
    "sentence_bad": "The sketch of those trucks haven't hurt Alan.",
    "one_prefix_prefix": "The sketch of those trucks",
    "one_prefix_word_good": "hasn't",
    "one_prefix_word_bad": "haven't",
    "field": "morphology",
    "linguistics_term": "subject_verb_agreement",
    "UID": "distractor_agreement_relational_noun",
    "simple_LM_method": True,
    "one_prefix_method": True,
    "two_prefix_method": False,
    "lexically_identical": False,
    "pairID": "1",
}
TWO_PREFIX = {
    "sentence_good": "Only Bill would ever complain.",
    "sentence_bad": "Even Bill would ever complain.",
    "two_prefix_prefix_good": "Only Bill would",
    "two_prefix_prefix_bad": "Even Bill would",
    "two_prefix_word": "ever",
    "field": "semantics",
    "linguistics_term": "npi_licensing",
    "UID": "only_npi_licensor_present",
    "simple_LM_method": True,
    "one_prefix_method": False,
    "two_prefix_method": True,
    "lexically_identical": False,
    "pairID": "0",
}


def conditional_table(table: dict[tuple[str, str], float], calls: list):
    def score(prefixes, continuations, end):
        calls.append((list(prefixes), list(continuations), end))
        return [table[pair] for pair in zip(prefixes, continuations)]

    return score


def test_the_one_prefix_method_compares_the_words_given_the_shared_prefix(tmp_path):
    path = tmp_path / "mixed.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in [ONE_PREFIX, TWO_PREFIX]))
    calls: list = []
    table = {
        ("The sketch of those trucks", "hasn't"): -3.0,
        ("The sketch of those trucks", "haven't"): -2.5,
    }
    result = evaluate_blimp(conditional_table(table, calls), read_blimp([path]), "one_prefix")
    # only the pair whose paradigm suits the method is scored; no <eos> is counted
    assert calls == [
        (["The sketch of those trucks"] * 2, ["hasn't", "haven't"], False),
    ]
    assert (result.pairs, result.correct, result.skipped, result.accuracy) == (1, 0, 1, 0.0)
    assert result.phenomena["subject_verb_agreement"]["pairs"] == 1
    assert format_blimp(result).splitlines()[-1] == (
        "skipped: 1 pairs without the one_prefix method's keys"
    )


def test_the_two_prefix_method_compares_the_word_given_each_prefix(tmp_path):
    path = tmp_path / "mixed.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in [ONE_PREFIX, TWO_PREFIX]))
    calls: list = []
    table = {("Only Bill would", "ever"): -4.0, ("Even Bill would", "ever"): -6.5}
    result = evaluate_blimp(
        conditional_table(table, calls), read_blimp([path]), "two_prefix", include_end=True
    )
    assert calls == [(["Only Bill would", "Even Bill would"], ["ever", "ever"], False)]
    assert (result.pairs, result.correct, result.accuracy) == (1, 1, 1.0)
    assert result.fields == {"semantics": {"pairs": 1, "correct": 1, "ties": 0, "accuracy": 1.0}}
    assert [(i.good, i.bad) for i in result.items] == [(-4.0, -6.5)]


def test_prefix_methods_need_their_keys(tmp_path, blimp_file):
    with pytest.raises(DataError, match="no pair suits the two_prefix method: none of the 3"):
        evaluate_blimp(conditional_table({}, []), read_blimp([blimp_file]), "two_prefix")
    broken = dict(ONE_PREFIX)
    del broken["one_prefix_word_bad"]
    path = tmp_path / "broken.jsonl"
    path.write_text(json.dumps(broken) + "\n")
    with pytest.raises(DataError, match=r"broken.jsonl:1: one_prefix_method is true but the line"):
        evaluate_blimp(conditional_table({}, []), read_blimp([path]), "one_prefix")
    with pytest.raises(ConfigValueError, match="method='three_prefix': use one of full"):
        evaluate_blimp(conditional_table({}, []), read_blimp([path]), "three_prefix")


def test_a_malformed_line_names_its_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(LINES[0]) + "\n" + json.dumps({"sentence_good": "x"}) + "\n")
    with pytest.raises(DataError, match=r"bad.jsonl:2: a BLiMP line needs sentence_good"):
        read_blimp([path])
    with pytest.raises(DataError, match="does not exist"):
        read_blimp([tmp_path / "missing.jsonl"])


def test_a_pair_per_newline_and_text_that_is_not_utf8_is_one_line(tmp_path):
    # a U+2028 kept raw in a sentence (JSON allows it; json.dumps(ensure_ascii=False) writes
    # it): splitlines cut the line in two, and the pair was "not JSON"
    path = tmp_path / "raw.jsonl"
    first = dict(LINES[0], sentence_good="Many teenagers\u2028were helping themselves.")
    path.write_text(
        "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in [first, *LINES[1:]]),
        encoding="utf-8",
    )
    pairs = read_blimp([path])
    assert len(pairs) == 3 and pairs[0].good == "Many teenagers\u2028were helping themselves."
    latin1 = tmp_path / "latin1.jsonl"
    latin1.write_bytes(
        json.dumps(LINES[0]).encode() + b"\n" + '{"sentence_good": "caf\xe9"'.encode("latin-1")
    )
    offset = len(json.dumps(LINES[0])) + 1 + len('{"sentence_good": "caf')
    with pytest.raises(DataError) as error:
        read_blimp([latin1])
    assert str(error.value) == (
        f"{latin1}: not UTF-8 text (byte {offset} is 0xe9, on line 2); save it as UTF-8"
    )
