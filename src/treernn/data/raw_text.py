"""Raw English text into the words of the Penn Treebank language-modelling data (Mikolov et al.
2010, the files `treernn.data.ptb` reads), so that a sentence typed by a user meets the
vocabulary the model was trained on.

The PTB files were made from the WSJ treebank: Penn Treebank tokenisation (``don't`` -> ``do n't``,
``5%`` -> ``5 %``, ``$5`` -> ``$ 5``), lower-cased, every number written ``N`` (so is ``%``: the
files read ``rose N N`` for "rose 5%"), and punctuation removed except ``$``, ``&``, ``#`` and the
possessive ``'``. `ptb_words` applies the same steps to raw text:

1. Treebank word tokenisation (nltk's ``TreebankWordTokenizer``, the treebank's own rules);
2. lower-case;
3. a token made only of digits and ``. , : / -`` (with at least one digit: ``1999``, ``5.50``,
   ``1,000``, ``1/2``) becomes ``N``, and so does ``%``; a word with digits in it (``1950s``,
   ``30-day``) is kept, as the files keep it;
4. tokens without a letter or digit are dropped, except ``$ & # '``;
5. with a vocabulary: a word ending in ``.`` that the vocabulary lacks while it has the word
   without the period (``year.`` in the middle of a line, where the tokeniser splits only the
   line's last period) loses the period.
"""

from __future__ import annotations

import re
from collections.abc import Container

#: symbols the PTB language-modelling files keep (every other punctuation token was removed)
KEPT_SYMBOLS = frozenset({"$", "&", "#", "'"})
NUMBER = re.compile(r"[0-9.,:/\-]*[0-9][0-9.,:/\-]*")


def ptb_words(text: str, vocab: Container[str] | None = None) -> list[str]:
    """The words of one sentence of raw text as the PTB language-modelling data writes them
    (the module docstring lists the steps): ``"Prices rose 5% in 1999."`` ->
    ``["prices", "rose", "N", "N", "in", "N"]``."""
    from nltk.tokenize import TreebankWordTokenizer

    words = []
    for token in TreebankWordTokenizer().tokenize(text):
        word = token.lower()
        if word == "%" or NUMBER.fullmatch(word):
            words.append("N")
            continue
        if not any(character.isalnum() for character in word) and word not in KEPT_SYMBOLS:
            continue
        if (
            vocab is not None
            and word.endswith(".")
            and len(word) > 1
            and word not in vocab
            and word[:-1] in vocab
        ):
            word = word[:-1]
        words.append(word)
    return words


def formula_tokens(text: str) -> list[str]:
    """A logic formula or ListOps expression: its whitespace-separated tokens, round brackets
    spaced out first so that ``(not a)`` reads as ``( not a )`` (ListOps' ``[MAX`` and ``]``
    are tokens of their own already)."""
    return text.replace("(", " ( ").replace(")", " ) ").split()
