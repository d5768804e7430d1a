"""The scoring surface of a loaded language model, as a researcher used to minicons' scorer
reaches for it (``token_score``, ``sequence_score``, ``conditional_score``), PTB text scored as
the run scored it, progress bars, DataFrames and trees as ``nltk.Tree``: on the small export
kept in ``tests/fixtures/exported_onlstm_lm`` (a 15-word vocabulary without ``<unk>``)."""

from __future__ import annotations

import math
import sys

import pytest
import torch

import treernn
from tests.paths import FIXTURES
from treernn.api import LanguageModel, TokenScore
from treernn.commands import main
from treernn.errors import ConfigValueError
from treernn.progress import MissingDependencyError

FIXTURE = FIXTURES / "exported_onlstm_lm"
SENTENCES = ["The cat sees a dog.", "A woman buys the company for $5.", "the man likes a cat"]
LN2 = math.log(2)


@pytest.fixture(scope="module")
def model() -> LanguageModel:
    return treernn.load(FIXTURE, device="cpu")


def by_hand(model: LanguageModel, words: list[str]) -> list[float]:
    """ln p of each word and of the closing <eos>, from the model's own logits after <eos>."""
    ids = torch.tensor([[model.vocab.eos_index, *model.vocab.encode(words)]])
    with torch.no_grad():
        logits, _, _ = model.module(ids)
    targets = [*model.vocab.encode(words), model.vocab.eos_index]
    return logits[0].log_softmax(-1)[torch.arange(len(targets)), targets].tolist()


# ----------------------------------------------------------------------------- PTB text
def test_text_in_ptb_form_scores_as_its_words(model):
    # PTB's own form: N the number, $ before it; read as raw text it was lower-cased to n
    # (outside the vocabulary) and scored as something else
    text = "a man sells the company for $ N N\nthe cat likes a dog\n"
    lines = [line.split() for line in text.splitlines()]
    expected = model.perplexity(lines)
    assert model.perplexity(text) == expected
    assert model.perplexity(text, tokenized=True) == expected
    assert model.log_probs(["a man sells $ N"]) == model.log_probs(
        [["a", "man", "sells", "$", "N"]]
    )


def test_tokenized_takes_the_words_between_spaces(model):
    assert model.words("The  cat\tN", tokenized=True) == ["The", "cat", "N"]
    with pytest.raises(ConfigValueError, match=r"'The' not in the model's vocabulary"):
        model.log_probs(["The cat"], tokenized=True)  # as given: not lower-cased


# ----------------------------------------------------------------------------- token_score
def test_token_score_gives_each_tokens_log_prob_and_where_it_came_from(model):
    text = SENTENCES[1]
    (tokens,) = model.token_score([text])
    words = ["a", "woman", "buys", "the", "company", "for", "$", "N"]
    assert [t.word for t in tokens] == [*words, "<eos>"]
    # the span of the input each token was read from; <eos> came from no character
    assert [None if t.start is None else text[t.start : t.end] for t in tokens] == [
        "A", "woman", "buys", "the", "company", "for", "$", "5", None,
    ]  # fmt: skip
    assert [t.log_prob for t in tokens] == pytest.approx(by_hand(model, words), abs=1e-5)
    # a surprisal is the same probability in bits, as surprisals() gives it
    assert [t.surprisal for t in tokens] == [-t.log_prob / LN2 for t in tokens]
    assert [t.surprisal for t in tokens] == [t.surprisal for t in model.surprisals([text])[0]]
    # without the end, and with text already tokenised (offsets of the words between spaces)
    (short,) = model.token_score(["the  cat sees"], include_end=False, tokenized=True)
    assert [(t.word, t.start, t.end) for t in short] == [
        ("the", 0, 3), ("cat", 5, 8), ("sees", 9, 13),
    ]  # fmt: skip
    (listed,) = model.token_score([["the", "cat"]])
    assert [(t.start, t.end) for t in listed] == [(None, None)] * 3


def test_any_iterable_streams(model):
    assert model.token_score(iter(SENTENCES)) == model.token_score(SENTENCES)
    assert model.sequence_score(s for s in SENTENCES) == model.sequence_score(SENTENCES)
    # a generator is read a slice at a time (batch_size * 16 sentences): a bad sentence stops
    # the call before the rest is read
    read = []

    def sentences():
        for number in range(1, 101):
            read.append(number)
            yield "the zebra" if number == 20 else "the cat"

    with pytest.raises(ConfigValueError, match=r"sentence 20 \('the zebra'\): 'zebra' not in"):
        model.token_score(sentences(), batch_size=1)
    assert len(read) == 32


# ----------------------------------------------------------------------------- sequence_score
def test_sequence_score_reductions(model):
    per_token = [[t.log_prob for t in s] for s in model.token_score(SENTENCES)]
    sums = [math.fsum(values) for values in per_token]
    assert model.sequence_score(SENTENCES, reduction="sum") == sums
    assert model.sequence_score(SENTENCES, reduction="sum") == pytest.approx(
        model.log_probs(SENTENCES), rel=1e-6
    )
    # the default, as minicons': the log-probability per token (6, 9 and 6 tokens)
    assert [len(values) for values in per_token] == [6, 9, 6]
    assert model.sequence_score(SENTENCES) == [s / n for s, n in zip(sums, [6, 9, 6])]
    # bits, and a function of the tokens' tensor, minicons-style (a surprisal in bits)
    assert model.sequence_score(SENTENCES, "sum", base_two=True) == pytest.approx(
        [s / LN2 for s in sums], rel=1e-12
    )
    surprisal = model.sequence_score(SENTENCES, lambda x: -x.sum(0).item(), base_two=True)
    assert surprisal == pytest.approx([-s / LN2 for s in sums], rel=1e-12)
    # the closing <eos> left out: the words' terms alone
    words_only = model.sequence_score(SENTENCES, "sum", include_end=False)
    assert words_only == pytest.approx([math.fsum(v[:-1]) for v in per_token], rel=1e-12)
    with pytest.raises(ConfigValueError, match="reduction='max': use 'sum', 'mean' or a function"):
        model.sequence_score(SENTENCES, "max")
    with pytest.raises(ConfigValueError, match=r"sentence 1 \('\.\.\.'\) has no token to score"):
        model.sequence_score(["..."], include_end=False)
    with pytest.raises(ConfigValueError, match="one string is one sentence"):
        model.sequence_score("the cat")


# ----------------------------------------------------------------------------- conditional
def test_conditional_score_is_the_continuation_given_the_prefix(model):
    # ln p(sees a dog | <eos> the cat): the full sentence's last three word terms
    full = by_hand(model, ["the", "cat", "sees", "a", "dog"])
    (score,) = model.conditional_score(["The cat"], ["sees a dog."], reduction="sum")
    assert score == pytest.approx(sum(full[2:5]), abs=1e-5)
    (mean,) = model.conditional_score(["The cat"], ["sees a dog."])
    assert mean == pytest.approx(sum(full[2:5]) / 3, abs=1e-5)
    (ended,) = model.conditional_score(["the cat"], ["sees a dog"], "sum", include_end=True)
    assert ended == pytest.approx(sum(full[2:]), abs=1e-5)
    # an empty prefix scores the continuation as a sentence
    assert model.conditional_score([""], ["the cat"], "sum", include_end=True) == (
        model.sequence_score(["the cat"], "sum")
    )
    with pytest.raises(ConfigValueError, match="2 prefixes and 1 continuations"):
        model.conditional_score(["the", "a"], ["cat"])
    with pytest.raises(ConfigValueError, match=r"continuation 2 \('\.'\) has no token to score"):
        model.conditional_score(["the", "the"], ["cat", "."])
    # an unknown word is named where it is, in the prefix
    with pytest.raises(ConfigValueError, match=r"^prefix 1 \('the zebra'\): 'zebra' not in"):
        model.conditional_score(["the zebra"], ["sees"])


def test_what_is_not_a_sentence_or_a_size_is_one_line(model):
    for sentences, shown in (([1, 2], "1"), ([None], "None"), ([["the", 3]], r"\['the', 3\]")):
        for method in (model.log_probs, model.sequence_score, model.token_score):
            with pytest.raises(ConfigValueError, match=rf"^{shown} is not a sentence: give each"):
                method(sentences)
    # a batch of 0 read no sentence: token_score returned [] and log_probs failed in range()
    for size in (0, -1, "8", 2.0, True):
        for method in (model.log_probs, model.token_score, model.surprisals):
            with pytest.raises(ConfigValueError, match=rf"^batch_size={size!r}: give a whole"):
                method(SENTENCES, batch_size=size)
    with pytest.raises(ConfigValueError, match=r"^bptt=0: give a whole number of words"):
        model.perplexity("the cat sees a dog", bptt=0)
    assert model.log_probs([("the", "cat")], batch_size=1) == model.log_probs(["the cat"])


# ----------------------------------------------------------------------------- DataFrames
def test_dataframes(model):
    # pandas is optional for users and a dev dependency: the test runs wherever the tests do
    frame = model.token_score(SENTENCES[:2], as_dataframe=True)
    assert list(frame.columns) == ["sentence_id", "token_id", *TokenScore.__dataclass_fields__]
    assert len(frame) == 6 + 9 and frame["sentence_id"].tolist() == [1] * 6 + [2] * 9
    assert frame["token_id"].tolist()[:6] == [1, 2, 3, 4, 5, 6]
    assert str(frame["start"].dtype) == "Int64" and frame["start"].isna().sum() == 2
    sequences = model.sequence_score(SENTENCES, "sum", as_dataframe=True)
    assert sequences["score"].tolist() == model.sequence_score(SENTENCES, "sum")
    assert sequences["tokens"].tolist() == [6, 9, 6]
    pairs = model.conditional_score(["the cat"], ["sees"], "sum", as_dataframe=True)
    assert list(pairs.columns) == ["item_id", "prefix", "continuation", "score", "tokens"]


def test_a_dataframe_without_pandas_is_one_line(model, monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)  # what an install without pandas sees
    with pytest.raises(MissingDependencyError) as error:
        model.sequence_score(SENTENCES, as_dataframe=True)
    assert str(error.value) == (
        "sequence_score(as_dataframe=True) needs pandas, which is not installed: pip install pandas"
    )


# ----------------------------------------------------------------------------- progress
def test_long_calls_show_progress_on_stderr_only(model, capsys):
    model.perplexity("\n".join(SENTENCES), bptt=5, progress=True)
    model.token_score(SENTENCES, progress=True)
    out, err = capsys.readouterr()
    assert out == ""
    assert "perplexity" in err and "token_score" in err
    # by default a bar is shown only to a person watching (not here: stderr is captured)
    model.perplexity("\n".join(SENTENCES))
    model.token_score(SENTENCES)
    assert capsys.readouterr() == ("", "")


# ----------------------------------------------------------------------------- trees
def test_trees_as_nltk_trees(model):
    from nltk import Tree

    (result,) = model.trees(["The cat sees a dog."])
    assert result.trees[1] == "(the (cat (sees (a dog))))"
    # nltk misreads the unlabeled brackets: their first words become labels
    assert Tree.fromstring(result.trees[1]).leaves() != result.words
    unlabeled = result.nltk_trees()
    assert [tree.leaves() for tree in unlabeled] == [result.words] * 2
    assert unlabeled[1] == Tree(
        "", ["the", Tree("", ["cat", Tree("", ["sees", Tree("", ["a", "dog"])])])]
    )
    labeled = result.nltk_trees(label="X")
    assert str(labeled[1]) == "(X the (X cat (X sees (X a dog))))"
    assert Tree.fromstring(str(labeled[1])) == labeled[1]


def test_trees_command_draws(capsys):
    assert main(["trees", "--ckpt", str(FIXTURE), "--layer", "2", "--draw", "the cat sees"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[:2] == ["sentence 1: the cat sees", "  layer 2: (the (cat sees))"]
    # every node drawn with a label: nltk draws an unlabeled one as a stem ending in nothing
    assert lines[2:] == [
        "         X",
        "      ___|___",
        "     |       X",
        "     |    ___|___",
        "     |   |       |",
        "    the cat     sees",
    ]
    (result,) = treernn.load(FIXTURE).trees(["the cat sees"], layer=2)
    assert result.drawings() == ["\n".join(line[4:] for line in lines[2:])]


# ----------------------------------------------------------------------------- BLiMP
#: pairs in BLiMP's keys over the fixture's words; the last one's two sides read the same
PAIRS = [
    {
        "sentence_good": "The man sells a dog.",
        "sentence_bad": "The man sells a man.",
        "one_prefix_prefix": "The man",
        "one_prefix_word_good": "sells",
        "one_prefix_word_bad": "buys",
        "field": "morphology",
        "linguistics_term": "made_up",
        "UID": "one",
        "pairID": "0",
    },
    {
        "sentence_good": "The man sells a dog.",
        "sentence_bad": "A company sells a dog.",
        "two_prefix_prefix_good": "the man",
        "two_prefix_prefix_bad": "a company",
        "two_prefix_word": "sells",
        "field": "syntax",
        "linguistics_term": "made_up",
        "UID": "two",
        "pairID": "0",
    },
    {
        "sentence_good": "the cat likes a dog",
        "sentence_bad": "The cat likes a dog.",
        "one_prefix_prefix": "the cat",
        "one_prefix_word_good": "likes",
        "one_prefix_word_bad": "Likes!",
        "field": "syntax",
        "linguistics_term": "made_up",
        "UID": "one",
        "pairID": "1",
    },
]


def test_blimp_by_each_method(model, tmp_path, capsys):
    import json

    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(pair) + "\n" for pair in PAIRS))
    # by hand: ln p of the compared words after <eos> and the prefix
    sells, buys = (by_hand(model, ["the", "man", w])[2] for w in ("sells", "buys"))
    after_company = by_hand(model, ["a", "company", "sells"])[2]
    one = model.blimp(path, "one_prefix")
    assert [(i.uid, i.pair_id) for i in one.items] == [("one", "0"), ("one", "1")]
    assert one.items[0].good == pytest.approx(sells, abs=1e-5)
    assert one.items[0].bad == pytest.approx(buys, abs=1e-5)
    assert one.items[0].correct == (sells > buys) and one.items[1].tie
    assert (one.pairs, one.skipped, one.ties) == (2, 1, 1)
    two = model.blimp(str(path), "two_prefix")
    assert [(i.good, i.bad) for i in two.items] == [pytest.approx((sells, after_company), abs=1e-5)]
    full = model.blimp([path])
    good, bad = model.sequence_score([PAIRS[0]["sentence_good"], PAIRS[0]["sentence_bad"]], "sum")
    assert (full.items[0].good, full.items[0].bad) == (good, bad)
    assert full.pairs == 3 and full.items[2].tie and full.phenomena["made_up"]["pairs"] == 3
    # the command prints the table and writes every pair's scores where --out says
    out = tmp_path / "one.json"
    argv = ["syneval", "--ckpt", str(FIXTURE), "--blimp", str(path), "--method", "one_prefix"]
    assert main([*argv, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert (
        printed.startswith("BLiMP, one_prefix method") and "tied (counted wrong): one#1" in printed
    )
    record = json.loads(out.read_text())
    assert record["method"] == "one_prefix" and record["skipped"] == 1
    assert [item["good"] for item in record["items"]] == [item.good for item in one.items]
