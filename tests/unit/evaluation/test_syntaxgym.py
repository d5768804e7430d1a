"""SyntaxGym as the ``syntaxgym`` package (0.6.0) defines it, on hand-worked cases: the formula
grammar and its tolerances, the regions' tokens and ``<eos>``, region aggregation by the suite's
metric, items with several predictions, the ``<unk>`` shares, the suite reader's one-line
refusals, Hu et al.'s scores and the CSV layout. A fake model gives every word a surprisal
worked out by hand, so each expected number below can be checked on paper."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from treernn.data.syntaxgym import (
    CIRCUITS,
    SuiteError,
    circuit_of,
    circuit_scores,
    in_sg_score,
    model_label,
    read_suite,
    read_suite_csv,
    sg_score,
    suite_from_dict,
)
from treernn.data.syntaxgym_formula import FormulaError, close, parse_formula, value_of
from treernn.evaluation.syntaxgym import (
    align,
    combine,
    evaluate_suites,
    format_items,
    format_table,
    read_suites,
    score_suite,
    syntaxgym_metrics,
)


# ----------------------------------------------------------------------------- a fake model
class Letters:
    """A model whose tokenizer is PTB-like (lower case, chunks without a letter dropped) and
    whose surprisal of a word is its number of letters, of ``<eos>`` 0.5; "zebra" is unknown."""

    def words(self, text: str) -> list[str]:
        return [chunk.lower() for chunk in text.split() if any(c.isalnum() for c in chunk)]

    def known(self, word: str) -> bool:
        return word != "zebra"

    def surprisals(self, sentences):
        return [[float(len(word)) for word in words] + [0.5] for words in sentences]


def suite_dict(items, formulas, metric="sum", regions=("a", "b", "c")):
    return {
        "meta": {"name": "toy", "metric": metric},
        "region_meta": {str(n): name for n, name in enumerate(regions, start=1)},
        "predictions": [{"type": "formula", "formula": formula} for formula in formulas],
        "items": [
            {
                "item_number": number,
                "conditions": [
                    {
                        "condition_name": name,
                        "regions": [
                            {"region_number": n, "content": content}
                            for n, content in enumerate(contents, start=1)
                        ],
                    }
                    for name, contents in conditions.items()
                ],
            }
            for number, conditions in enumerate(items, start=1)
        ],
    }


# ----------------------------------------------------------------------------- the grammar
VALUES = {("x", 1): 2.0, ("x", 2): 3.0, ("y", 1): 4.0, ("y", 2): 1.0}


@pytest.mark.parametrize(
    ("formula", "expected"),
    [
        ("(1;%x%) < (1;%y%)", True),  # 2 < 4
        ("(1;%x%) > (1;%y%)", False),
        ("[(1;%x%) + (2;%x%)] > [(1;%y%) + (2;%y%)]", False),  # 5 > 5: strict
        ("[(1;%x%) + (2;%x%)] = [(1;%y%) + (2;%y%)]", True),
        ("(1;%x%) + (2;%x%) - (2;%y%) = 4", True),  # left to right: (2 + 3) - 1
        ("(1;%x%) - (2;%x%) + (2;%y%) = 0", True),  # (2 - 3) + 1, not 2 - (3 + 1)
        ("(*;%x%) = 5", True),  # every region of x: 2 + 3
        ("(*;%x%) - (*;%y%) = 0", True),
        # & and | share one level, read left to right, as the package reads them: with A true,
        # B true, C false, "A | B & C" is (A | B) & C = false (not A | (B & C) = true)
        ("(1;%x%) < 3 | (1;%y%) > 3 & (2;%y%) > 3", False),
        ("(1;%x%) < 3 | [(1;%y%) > 3 & (2;%y%) > 3]", True),
        ("((1;%x%) < 3) & ((2;%y%) < 2)", True),  # the package's round brackets
        ("[[(1;%x%) - (1;%y%)] < 0] & [(2;%x%) > (2;%y%)]", True),
        ("(1;%x%) > -1", True),  # a signed number where a value is expected
        ("(1;%x%)-1 = 1", True),  # ... and a subtraction after a value
        ("(1;%x%) < 2.5e0", True),
        ("( 1 ;% x %) < .5e1", True),  # spaces around the parts of a region
    ],
)
def test_the_grammar_on_hand_worked_values(formula, expected):
    assert value_of(parse_formula(formula), VALUES) is expected


@pytest.mark.parametrize(
    ("formula", "message"),
    [
        ("(1;%x%) < (1;%y%) < 3", "a chain of comparisons at character 19"),
        ("(1;%x%) + (1;%y%)", "the formula is a value, not a prediction"),
        ("[(1;%x%) < 3] + 1 > 0", "adds values, but [(1;%x%) < 3] is a truth"),
        ("[(1;%x%) < 3] < 1", "compares values, but [(1;%x%) < 3] is a truth"),
        ("(1;%x%) & (1;%y%) < 2", "joins truths (comparisons), but (1;%x%) is a value"),
        ("[(1;%x%) < 3", "'[' at character 1 is not closed: ']' was expected at the end"),
        ("(1;%x%) < 3]", "unexpected at character 12 (']')"),
        ("(1; %x%) < 3", "unexpected ';' at character 3: a region is written (N;%condition%)"),
        ("(1;%x y%) < 3", "unexpected ';' at character 3: a region is written (N;%condition%)"),
        ("(1;%x%) < ", "a region (N;%condition%), a number or a bracket was expected"),
        ("(1;%x%) $ 3", "unexpected '$' at character 9"),
        ("  ", "the formula is empty"),
    ],
)
def test_a_formula_that_does_not_parse_says_where(formula, message):
    with pytest.raises(FormulaError) as error:
        parse_formula(formula)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_equality_uses_the_package_tolerances():
    # |a - b| <= 1e-3 + 1e-5 * |b|: at b = 10 the tolerance is 1.1e-3
    assert close(10.0009, 10.0) and close(10.0, 10.0011)
    assert not close(10.0012, 10.0)
    # the relative part scales with the right side only (numpy.isclose's rule): at 1e5 the
    # tolerance is 1.001 with the smaller value on the right, 1.00101001 with the larger
    assert close(1e5, 1e5 + 1.00101) and not close(1e5 + 1.00101, 1e5)
    assert not close(math.nan, math.nan) and close(math.inf, math.inf)
    assert not close(math.inf, -math.inf)
    # a comparison with a value that is not a number is false, whichever way
    values = {("x", 1): math.nan, ("x", 2): 1.0}
    for formula in ("(1;%x%) < (2;%x%)", "(1;%x%) > (2;%x%)", "(1;%x%) = (1;%x%)"):
        assert value_of(parse_formula(formula), values) is False


# ----------------------------------------------------------------------------- regions and <eos>
@pytest.mark.parametrize(
    ("contents", "words", "eos_region"),
    [
        (["The cat", "sat"], [["the", "cat"], ["sat"]], 1),  # the last region keeps <eos>
        (["The cat", "sat", "."], [["the", "cat"], ["sat"], []], 2),  # the final period's
        (["The cat", "sat ."], [["the", "cat"], ["sat"]], 1),  # the period follows in region
        (["The cat", "sat.", ""], [["the", "cat"], ["sat."], []], 1),
        # the last word ends its region: the next one, even empty, even before a period
        (["The cat", "sat", "", "."], [["the", "cat"], ["sat"], [], []], 2),
        (["The", "", "cat , sat"], [["the"], [], ["cat", "sat"]], 2),
        ([".", ""], [[], []], 0),  # no word at all: the first region
        ([" the cat", " sat"], [["the", "cat"], ["sat"]], 1),  # leading spaces as the package
    ],
)
def test_each_region_holds_its_own_words_and_eos_follows_the_last(contents, words, eos_region):
    suite = suite_from_dict(
        suite_dict(
            [{"c": contents}], ["(1;%c%) > 0"], regions=[f"r{i}" for i in range(len(contents))]
        )
    )
    condition = suite.items[0].conditions[0]
    assert align(condition, Letters()) == (words, eos_region)


def test_a_word_across_a_region_boundary_is_one_line():
    class Joining(Letters):  # a tokenizer that joins "ca" and "t" across the boundary
        def words(self, text):
            return ["cat"] if text == "ca t" else super().words(text)

    suite = suite_from_dict(suite_dict([{"c": ["ca", "t"]}], ["(1;%c%) > 0"], regions=["a", "b"]))
    with pytest.raises(SuiteError, match="condition c: the model's tokenizer makes 1 words"):
        align(suite.items[0].conditions[0], Joining())


# ----------------------------------------------------------------------------- aggregation
def test_sum_regions_an_empty_region_and_star_worked_by_hand():
    # region values (letters per word; <eos> 0.5):
    #   good: "The dog" 3+3=6 | "" 0 | "barks ." 5+0.5=5.5          (*) 11.5
    #   bad:  "The dog" 6     | "loudly" 6 | "barks" 5 + 0.5 = 5.5  (*) 17.5
    items = [{"good": ["The dog", "", "barks ."], "bad": ["The dog", "loudly", "barks"]}]
    formulas = [
        "(2;%good%) = 0",  # an empty region sums to 0
        "(3;%good%) = (3;%bad%)",
        "(*;%good%) + 6 = (*;%bad%)",
        "(*;%good%) = 11.5",
    ]
    score = score_suite(suite_from_dict(suite_dict(items, formulas)), Letters())
    (item,) = score.items
    assert item.predictions == [True, True, True, True] and item.correct
    good = item.regions["good"]
    assert [region.value for region in good] == [6.0, 0.0, 5.5]
    assert [region.tokens for region in good] == [["the", "dog"], [], ["barks", "<eos>"]]
    assert [region.value for region in item.regions["bad"]] == [6.0, 6.0, 5.5]


def test_a_mean_suite_with_two_predictions_worked_by_hand():
    # mean of the region's tokens: "a big dog" (1+3+3)/3 = 7/3; "runs" + <eos> (4+0.5)/2 = 2.25;
    # an empty region has no mean (not a number), so any comparison with it is false
    items = [
        {"x": ["a big dog", "", "runs"], "y": ["the dog", "", "runs"]},  # y: (3+3)/2 = 3
        {"x": ["a big dog", "", "runs"], "y": ["a dog", "", "runs"]},  # y: (1+3)/2 = 2
    ]
    formulas = ["(1;%x%) < (1;%y%)", "(3;%x%) = 2.25"]
    score = score_suite(suite_from_dict(suite_dict(items, formulas, metric="mean")), Letters())
    first, second = score.items
    assert first.regions["x"][0].value == pytest.approx(7 / 3)
    assert math.isnan(first.regions["x"][1].value)
    assert first.regions["x"][2].value == 2.25
    assert first.predictions == [True, True] and first.correct  # 7/3 < 3
    assert second.predictions == [False, True] and not second.correct  # 7/3 > 2: one fails
    assert score.correct == 1 and score.accuracy == 0.5
    nan_suite = suite_dict(items[:1], ["(2;%x%) < 100", "(2;%x%) = (2;%y%)"], metric="mean")
    (item,) = score_suite(suite_from_dict(nan_suite), Letters()).items
    assert item.predictions == [False, False]


@pytest.mark.parametrize(
    ("metric", "values", "expected"),
    [
        ("sum", [], 0.0),
        ("sum", [1.0, 2.5], 3.5),
        ("mean", [1.0, 2.5], 1.75),
        ("median", [3.0, 1.0, 2.0], 2.0),
        ("max", [3.0, 1.0], 3.0),
        ("min", [3.0, 1.0], 1.0),
        ("range", [3.0, 1.0, 2.0], 2.0),
    ],
)
def test_metrics_combine_a_regions_tokens(metric, values, expected):
    assert combine(metric, values) == expected
    if metric != "sum":
        assert math.isnan(combine(metric, []))


def test_a_tie_within_tolerance_is_equal_and_not_less():
    class Tied(Letters):  # "dog" and "cat" get surprisals 0.0005 apart
        def surprisals(self, sentences):
            table = {"dog": 3.0, "cat": 3.0005}
            return [[table.get(w, float(len(w))) for w in words] + [0.5] for words in sentences]

    items = [{"d": ["the", "dog"], "c": ["the", "cat"]}]
    formulas = ["(2;%d%) = (2;%c%)", "(2;%d%) < (2;%c%)", "(2;%c%) > (2;%d%)"]
    suite = suite_from_dict(suite_dict(items, formulas, regions=("det", "noun")))
    (item,) = score_suite(suite, Tied()).items
    assert item.predictions == [True, True, True]  # within 1e-3: equal; strictly: less
    exact = suite_from_dict(
        suite_dict(items, ["(1;%d%) < (1;%c%)", "(1;%d%) = (1;%c%)"], regions=("det", "noun"))
    )
    (item,) = score_suite(exact, Tied()).items
    assert item.predictions == [False, True]  # the same region ("the"): an exact tie


def test_unknown_words_in_critical_regions_are_counted_per_item():
    items = [
        {"a": ["the zebra", "sleeps"], "b": ["the cat", "sleep"]},  # <unk> in region 1 only
        {"a": ["the dog", "zebra"], "b": ["the cat", "sleep"]},  # <unk> in region 2 (critical)
    ]
    suite = suite_from_dict(suite_dict(items, ["(2;%a%) > (2;%b%)"], regions=("np", "verb")))
    score = score_suite(suite, Letters())
    assert [item.unknown_in_critical for item in score.items] == [False, True]
    assert score.items[0].regions["a"][0].tokens == ["the", "<unk>"]
    assert score.unknown_items == 1 and score.unknown_share == 0.5
    star = suite_from_dict(suite_dict(items, ["(*;%a%) > 0"], regions=("np", "verb")))
    assert [i.unknown_in_critical for i in score_suite(star, Letters()).items] == [True, True]


# ----------------------------------------------------------------------------- the reader
def write(tmp_path: Path, data, name="toy.json") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


GOOD = suite_dict([{"a": ["x", "y", "z"], "b": ["x", "y", "w"]}], ["(3;%a%) < (3;%b%)"])


def broken(change):
    data = json.loads(json.dumps(GOOD))
    change(data)
    return data


def _drop_region(data):
    data["items"][0]["conditions"][1]["regions"].pop(1)


def _unknown_region(data):
    data["predictions"][0]["formula"] = "(4;%a%) < (3;%b%)"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (broken(lambda d: d["meta"].update(metric="total")), "unknown metric 'total' in meta.m"),
        (
            broken(lambda d: d["predictions"][0].update(formula="(3;%a%) << 1")),
            "prediction 1: formula '(3;%a%) << 1': a region (N;%condition%), a number",
        ),
        (
            broken(_unknown_region),
            "names region 4, which the suite does not have (regions 1, 2, 3)",
        ),
        (
            broken(lambda d: d["predictions"][0].update(formula="(3;%c%) < 1")),
            "(3;%c%) names condition 'c', which the suite does not have (a, b)",
        ),
        (broken(_drop_region), "item 1, condition b: region 2 of region_meta is missing"),
        (broken(lambda d: d["items"].append(d["items"][0])), "item 1: a second item"),
        (broken(lambda d: d.update(predictions=[])), "no predictions"),
        (broken(lambda d: d["items"][0].update(item_number=True)), "'item_number' is a boolean"),
        (broken(lambda d: d.pop("region_meta")), "no 'region_meta'"),
        ([1, 2], "a JSON object was expected, not a list"),
        ('{"meta": ', "not valid JSON (Expecting value, line 1 column 10)"),
        ("[" * 100000 + "]" * 100000, "nested too deeply"),
    ],
)
def test_a_damaged_suite_is_one_line_naming_the_file(tmp_path, data, message):
    path = write(tmp_path, data)
    with pytest.raises(SuiteError) as error:
        read_suite(path)
    text = str(error.value)
    assert message in text and str(path) in text and "\n" not in text


def test_items_whose_conditions_differ_are_refused(tmp_path):
    data = suite_dict(
        [
            {"a": ["x", "y", "z"], "b": ["x", "y", "w"]},
            {"a": ["x", "y", "z"], "c": ["x", "y", "w"]},
        ],
        ["(3;%a%) < (3;%b%)"],
    )
    with pytest.raises(SuiteError, match=r"item 2: conditions a, c differ from the first item's"):
        read_suite(write(tmp_path, data))


def test_a_fifo_or_a_missing_suite_is_refused_unread(tmp_path):
    fifo = tmp_path / "suite.json"
    os.mkfifo(fifo)
    with pytest.raises(SuiteError, match="a FIFO"):
        read_suite(fifo)
    with pytest.raises(SuiteError, match="does not exist"):
        read_suite(tmp_path / "none.json")


def test_a_folder_without_suites_names_the_subfolder_that_holds_them(tmp_path):
    # SyntaxGym's layout, as in the shared data: the suites one level down, in suites/
    (tmp_path / "suites").mkdir()
    write(tmp_path / "suites", GOOD)
    (tmp_path / "results").mkdir()
    with pytest.raises(SuiteError) as error:
        read_suites([tmp_path])
    assert str(error.value) == (
        f"suite folder {tmp_path} holds no suite (*.json); suites are in {tmp_path / 'suites'}: "
        "pass that folder"
    )
    assert [suite.name for suite in read_suites([tmp_path / "suites"])] == ["toy"]
    with pytest.raises(SuiteError, match=r"holds no suite \(\*\.json\)$"):
        read_suites([tmp_path / "results"])
    # two subfolders of suites: both named, either (or both) to pass
    (tmp_path / "more").mkdir()
    write(tmp_path / "more", GOOD)
    with pytest.raises(SuiteError) as error:
        read_suites([tmp_path])
    assert str(error.value).endswith(
        f"suites are in {tmp_path / 'more'}, {tmp_path / 'suites'}: pass one or more of those "
        "folders"
    )
    assert len(read_suites([tmp_path / "more", tmp_path / "suites"])) == 2


def test_the_csv_layout_reads_as_the_same_suite(tmp_path):
    lines = ["item_number,condition_name,region_number,region_name,content"]
    for condition, last in (("a", "z"), ("b", "w")):
        for number, (name, content) in enumerate((("a", "x"), ("b", " y"), ("c", last)), start=1):
            lines.append(f"1,{condition},{number},{name},{content}")
    path = write(tmp_path, "\n".join(lines) + "\n", "toy.csv")
    from_csv = read_suite_csv(path, ["(3;%a%) = (3;%b%)", "(2;%a%) < 2"])
    from_json = suite_from_dict(GOOD)
    assert from_csv.sentences() == ["x y z", "x y w"] == from_json.sentences()
    assert from_csv.region_names == {1: "a", 2: "b", 3: "c"}
    # "z" and "w" are one letter and the last region: 1 + 0.5 each; " y": 1 letter
    assert score_suite(from_csv, Letters()).items[0].predictions == [True, True]
    bad = write(tmp_path, "item,condition\n1,a\n", "bad.csv")
    with pytest.raises(SuiteError, match="the first line must be the header item_number"):
        read_suite_csv(bad, ["(1;%a%) < 1"])


# ----------------------------------------------------------------------------- scores
def test_circuits_and_the_sg_score_follow_hu_et_al():
    assert circuit_of("npi_orc_any") == circuit_of("reflexive_src_fem") == "Licensing"
    assert circuit_of("fgd-embed3") == "Long-Distance Dependencies"
    assert circuit_of("center_embed_mod") == "Center Embedding" and circuit_of("nn-nv-rpl") is None
    assert not in_sg_score("fgd-embed4") and not in_sg_score("nn-nv-rpl")
    assert in_sg_score("fgd_hierarchy")
    accuracies = {"number_src": 0.5, "number_orc": 1.0, "fgd-embed3": 0.0, "cleft": 0.25}
    assert sg_score(accuracies) == pytest.approx((0.5 + 1.0 + 0.25) / 3)
    assert circuit_scores(accuracies) == {"Long-Distance Dependencies": 0.25, "Agreement": 0.75}
    assert list(CIRCUITS)[0] == "Licensing"


def test_metrics_the_table_and_the_csv_of_a_result():
    # suite "number_src" (Agreement): item 1 right, item 2 wrong; "fgd-embed3": right
    agreement = suite_dict(
        [
            {"s": ["the cat", "sleeps"], "p": ["the cats", "sleeps"]},
            {"s": ["a", "dog"], "p": ["a", "dogs"]},
        ],
        ["(2;%s%) = (2;%p%)"],
        regions=("np", "verb"),
    )
    agreement["meta"]["name"] = "number_src"
    embedded = suite_dict(
        [{"x": ["so", "it"], "y": ["so", "its"]}], ["(2;%x%) < (2;%y%)"], regions=("c", "v")
    )
    embedded["meta"]["name"] = "fgd-embed3"
    suites = [suite_from_dict(agreement), suite_from_dict(embedded)]
    result = evaluate_suites(suites, Letters(), model_label("on_lstm", "ptb", 3))
    assert result.model == "on-lstm_ptb_3"  # Hu et al. split the column at "_"
    metrics = syntaxgym_metrics(result)
    assert metrics["test/syntaxgym/sg_score"] == 50.0  # number_src only: 1 of 2
    assert metrics["test/syntaxgym/sg_score_all"] == 75.0  # (50 + 100) / 2
    assert metrics["test/syntaxgym/circuit/agreement"] == 50.0
    assert "test/syntaxgym/circuit/long_distance" not in metrics  # fgd-embed3 is left out
    assert metrics["test/syntaxgym_suite/fgd-embed3"] == 100.0
    assert result.csv_text().splitlines() == [
        "model,suite,item,correct",
        "on-lstm_ptb_3,number_src,0,True",
        "on-lstm_ptb_3,number_src,1,False",
        "on-lstm_ptb_3,fgd-embed3,0,True",
    ]
    table = format_table(result)
    assert "SG score (1 suites)                   50.0" in table
    assert "fgd-embed3" in table and "(not in the SG score)" in table
    assert "item   2: wrong   predictions F" in format_items(result)
    record = result.as_dict(regions=True)
    assert record["suites"][0]["item_results"][0]["regions"]["s"][1]["tokens"] == [
        "sleeps",
        "<eos>",
    ]
