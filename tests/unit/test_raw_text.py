"""Raw text read as the PTB language-modelling files write it (treernn.data.raw_text), and the
LM-Zoo surprisal table's layout (treernn.evaluation.surprisal)."""

from __future__ import annotations

import io
import math

from treernn.data.raw_text import formula_tokens, ptb_words
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
    # punctuation (quotes, dashes, commas) is dropped; words with digits stay words
    assert ptb_words('He said "don\'t" -- the investors\' 1950s AT&T cars.') == [
        "he", "said", "do", "n't", "the", "investors", "'", "1950s", "at", "&", "t", "cars",
    ]  # fmt: skip
    assert ptb_words("?! ...") == []


def test_a_period_inside_a_line_is_split_off_only_where_the_vocabulary_says_so():
    vocab = {"year", "u.s.", "he", "left", "the"}
    # "year." (not a word of the vocabulary, "year" is) loses its period; "u.s." is a word
    assert ptb_words("He left the U.S. that year. He left", vocab) == [
        "he", "left", "the", "u.s.", "that", "year", "he", "left",
    ]  # fmt: skip
    assert ptb_words("He left the U.S. that year. He left")[5] == "year."


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
