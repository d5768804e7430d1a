"""Raw text read as the PTB language-modelling files write it (treernn.data.raw_text), and the
LM-Zoo surprisal table's layout (treernn.evaluation.surprisal)."""

from __future__ import annotations

import io
import math

import pytest

from treernn.data.ptb import read_lines
from treernn.data.raw_text import formula_tokens, ptb_tokens, ptb_words, whitespace_tokens
from treernn.evaluation.surprisal import (
    read_surprisal_table,
    surprisal_rows,
    write_surprisal_table,
)


def test_numbers_and_percent_become_n_as_in_the_ptb_files():
    # the PTB files read "rose N N" for "rose 5%", and a sentence's last period is not a word
    assert ptb_words("Prices rose 5% in 1999.") == ["prices", "rose", "N", "N", "in", "N"]
    assert ptb_words("It cost $5.50, or 1,000 yen (1/2 off).") == [
        "it", "cost", "$", "N", "or", "N", "yen", "N", "off",
    ]  # fmt: skip


def test_treebank_tokenisation_and_kept_symbols():
    # contractions split as the treebank does; $ & # and the possessive ' are kept, other
    # punctuation (quotes, dashes, commas) is dropped; words with digits stay words; a & inside
    # a name stays in it, as the PTB files write at&t and s&p
    assert ptb_words('He said "don\'t" -- the investors\' 1950s AT&T cars.') == [
        "he", "said", "do", "n't", "the", "investors", "'", "1950s", "at&t", "cars",
    ]  # fmt: skip
    assert ptb_words("Tom & Jerry's R&D") == ["tom", "&", "jerry", "'s", "r&d"]
    assert ptb_words("?! ...") == []


def test_a_period_inside_a_line_is_split_off_only_where_the_vocabulary_says_so():
    vocab = {"year", "u.s.", "he", "left", "the"}
    # "year." (not a word of the vocabulary, "year" is) loses its period; "u.s." is a word
    assert ptb_words("He left the U.S. that year. He left", vocab) == [
        "he", "left", "the", "u.s.", "that", "year", "he", "left",
    ]  # fmt: skip
    assert ptb_words("He left the U.S. that year. He left")[5] == "year."


def test_text_already_in_ptb_form_keeps_its_words():
    # what the PTB files write comes back word for word: N stays the number (not n, which the
    # vocabulary lacks), <unk> stays whole, s&p and c$ are words, and a line's last word keeps
    # an abbreviation's period (the tokeniser splits a text's last period off)
    vocab = {"N", "<unk>", "s&p", "c$", "u.s.", "corp.", "corp", "rose", "in", "the", "of"}
    line = "the s&p rose N N in c$ N <unk> of the u.s."
    assert ptb_words(line, vocab) == line.split()
    assert ptb_words("shares of <unk> corp.", vocab)[-1] == "corp."
    assert ptb_words("shares of <unk> corp", vocab)[-1] == "corp"
    # raw text: a sentence's period after a word is dropped, an abbreviation's kept
    assert ptb_words("He lives in the U.S.", vocab)[-1] == "u.s."
    assert ptb_words("He works at Acme Corp.", vocab)[-1] == "corp."
    assert ptb_words("Prices rose in the year.", vocab)[-1] == "year"
    # without a vocabulary, a word with a period inside is an abbreviation
    assert ptb_words("He lives in the U.S.")[-1] == "u.s."


def test_the_ptb_test_file_reads_as_the_data_reader_reads_it(data_dir):
    # every line of PTB's own test file, through the normaliser with the run's vocabulary
    # (train, valid and test, as the DataModule builds it), is the reader's words exactly
    files = {split: data_dir / "ptb" / f"ptb.{split}.txt" for split in ("train", "valid", "test")}
    vocab = {word for path in files.values() for line in read_lines(path) for word in line}
    raw = files["test"].read_text(encoding="utf-8").split("\n")[: len(read_lines(files["test"]))]
    different = [
        (number, line)
        for number, (line, words) in enumerate(zip(raw, read_lines(files["test"])), start=1)
        if ptb_words(line, vocab) != words[:-1]  # the reader's words end with <eos>
    ]
    assert len(raw) == 3761 and different == []


def test_every_word_keeps_the_span_it_was_read_from():
    text = "AT&T's price rose 5% to $1,000 in the U.S."
    tokens = ptb_tokens(text, {"at&t", "'s", "u.s."})
    assert [(t.word, text[t.start : t.end]) for t in tokens] == [
        ("at&t", "AT&T"), ("'s", "'s"), ("price", "price"), ("rose", "rose"), ("N", "5"),
        ("N", "%"), ("to", "to"), ("$", "$"), ("N", "1,000"), ("in", "in"), ("the", "the"),
        ("u.s.", "U.S."),
    ]  # fmt: skip
    # a word that loses its period inside a line keeps the span of the word alone
    (year,) = [t for t in ptb_tokens("the year. then", {"year", "the", "then"}) if t.word == "year"]
    assert (year.start, year.end) == (4, 8)
    # text already tokenised: the words between spaces, as they are
    assert [tuple(t) for t in whitespace_tokens(" the  N\tu.s.")] == [
        ("the", 1, 4), ("N", 6, 7), ("u.s.", 8, 12),
    ]  # fmt: skip


@pytest.mark.parametrize("text", ['"', "''a", "a ''", "<unk", "x&", "&&y", "C$", "..", "''\"x"])
def test_odd_text_tokenises_without_error(text):
    for token in ptb_tokens(text):
        assert 0 <= token.start < token.end <= len(text)


def test_formula_brackets_need_no_spaces():
    assert formula_tokens("(not (a and b))") == ["(", "not", "(", "a", "and", "b", ")", ")"]
    assert formula_tokens("[MAX 2 [MIN 3 4 ] ]") == ["[MAX", "2", "[MIN", "3", "4", "]", "]"]


def test_surprisal_table_is_lm_zoos_layout_in_bits():
    # p = 1/2 is 1 bit, p = 1/8 is 3 bits; an unknown word is written <unk>; <eos> closes
    rows = [
        surprisal_rows(["the", "zyx"], [math.log(0.5), math.log(0.125), math.log(1.0)], [1, 0]),
        surprisal_rows(["a"], [math.log(0.25), math.log(0.5)], [True]),
    ]
    out = io.StringIO()
    write_surprisal_table(rows, out)
    assert out.getvalue() == (
        "sentence_id\ttoken_id\ttoken\tsurprisal\n"
        "1\t1\tthe\t1.0\n"
        "1\t2\t<unk>\t3.0\n"
        "1\t3\t<eos>\t0.0\n"
        "2\t1\ta\t2.0\n"
        "2\t2\t<eos>\t1.0\n"
    )


def test_surprisal_table_reads_back_exactly(tmp_path):
    rows = [[("the", 1 / 3), ("<eos>", 2.718281828459045)]]
    path = tmp_path / "table.tsv"
    with open(path, "w") as handle:
        write_surprisal_table(rows, handle)
    assert read_surprisal_table(path) == rows
