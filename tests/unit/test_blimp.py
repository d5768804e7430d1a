"""BLiMP minimal pairs (treernn.evaluation.blimp): reading the jsonl schema and scoring pairs."""

from __future__ import annotations

import json

import pytest

from treernn.errors import DataError
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
    result = evaluate_blimp(
        lambda sentences: [scores[s] for s in sentences], read_blimp([blimp_file])
    )
    assert result["accuracy"] == pytest.approx(1 / 3)
    assert result["pairs"] == 3 and result["ties"] == 1
    assert result["paradigms"]["anaphor_number_agreement"] == {
        "pairs": 2,
        "correct": 1,
        "ties": 1,
        "accuracy": 0.5,
    }
    assert result["paradigms"]["wh_vs_that_no_gap"]["accuracy"] == 0.0
    assert format_blimp(result).splitlines()[-1].split() == ["all", "33.33%", "3", "1"]


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
