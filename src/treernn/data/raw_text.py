"""Raw English text into the words of the Penn Treebank language-modelling data (Mikolov et al.
2010, the files `treernn.data.ptb` reads), so that a sentence typed by a user meets the
vocabulary the model was trained on; text already in that form (a line of ``ptb.test.txt``)
comes out as the data reader splits it, word for word.

The PTB files were made from the WSJ treebank: Penn Treebank tokenisation (``don't`` -> ``do n't``,
``5%`` -> ``5 %``, ``$5`` -> ``$ 5``), lower-cased, every number written ``N`` (so is ``%``: the
files read ``rose N N`` for "rose 5%"), and punctuation removed except ``$``, ``&``, ``#`` and the
possessive ``'``. `ptb_tokens` applies the same steps to raw text:

1. Treebank word tokenisation (nltk's ``TreebankWordTokenizer``, the treebank's own rules), with
   the pieces the treebank keeps whole put back together: ``&`` between letters or digits
   (``AT&T``, ``s&p``), a currency's letters before ``$`` (``C$``, ``us$``), ``<unk>``, and
   the period of an abbreviation that ends the text (``U.S.``, ``Corp.``: the tokeniser splits
   a final period off; the treebank keeps an abbreviation's; with a vocabulary, an abbreviation
   is a word it holds with the period, without one a word with a period inside, ``u.s``);
2. lower-case, except ``N``, which is already the files' number;
3. a token made only of digits and ``. , : / -`` (with at least one digit: ``1999``, ``5.50``,
   ``1,000``, ``1/2``) becomes ``N``, and so does ``%``; a word with digits in it (``1950s``,
   ``30-day``) is kept, as the files keep it;
4. tokens without a letter or digit are dropped, except ``$ & # '`` and those the vocabulary
   holds (PTB's ``\\*``);
5. with a vocabulary: a word ending in ``.`` that the vocabulary lacks while it has the word
   without the period (``year.`` in the middle of a line, where the tokeniser splits only the
   line's last period) loses the period.

Every token keeps the span of the text it was read from (``text[start:end]``): ``N`` the
number's or the ``%``'s characters, a word that lost its period the characters before it.
`ptb_words` is the words alone; `whitespace_tokens` reads text already tokenised (words
between spaces, taken as they are).
"""

from __future__ import annotations

import re
from collections.abc import Container
from typing import NamedTuple

#: symbols the PTB language-modelling files keep (every other punctuation token was removed)
KEPT_SYMBOLS = frozenset({"$", "&", "#", "'"})
NUMBER = re.compile(r"[0-9.,:/\-]*[0-9][0-9.,:/\-]*")
#: what may follow a sentence's last period, as the Treebank tokeniser allows
_CLOSING = frozenset({"]", ")", "}", ">", '"', "'", "''"})


class Token(NamedTuple):
    """One word as the model reads it and the span of the input it was read from."""

    word: str
    start: int
    end: int


def ptb_words(text: str, vocab: Container[str] | None = None) -> list[str]:
    """The words of one sentence of raw text as the PTB language-modelling data writes them
    (the module docstring lists the steps): ``"Prices rose 5% in 1999."`` ->
    ``["prices", "rose", "N", "N", "in", "N"]``; a line of PTB's own files is its words."""
    return [token.word for token in ptb_tokens(text, vocab)]


def ptb_tokens(text: str, vocab: Container[str] | None = None) -> list[Token]:
    """`ptb_words` with the span of ``text`` each word was read from."""
    from nltk.tokenize import TreebankWordTokenizer

    pieces = [
        Token(text[start:end], start, end)
        for start, end in TreebankWordTokenizer().span_tokenize(text)
    ]
    tokens = []
    for piece in _joined(pieces, vocab):
        word = piece.word if piece.word == "N" else piece.word.lower()
        if word == "%" or NUMBER.fullmatch(word):
            tokens.append(Token("N", piece.start, piece.end))
            continue
        known = vocab is not None and word in vocab
        if not known and not any(c.isalnum() for c in word) and word not in KEPT_SYMBOLS:
            continue
        if (
            vocab is not None
            and not known
            and word.endswith(".")
            and len(word) > 1
            and word[:-1] in vocab
        ):
            tokens.append(Token(word[:-1], piece.start, piece.end - 1))
            continue
        tokens.append(Token(word, piece.start, piece.end))
    return tokens


def whitespace_tokens(text: str) -> list[Token]:
    """Text already tokenised: its words between whitespace, as they are, with their spans (how
    `treernn.data.ptb` reads a line of the PTB files)."""
    return [Token(match.group(), match.start(), match.end()) for match in re.finditer(r"\S+", text)]


def formula_tokens(text: str) -> list[str]:
    """A logic formula or ListOps expression: its whitespace-separated tokens, round brackets
    spaced out first so that ``(not a)`` reads as ``( not a )`` (ListOps' ``[MAX`` and ``]``
    are tokens of their own already)."""
    return text.replace("(", " ( ").replace(")", " ) ").split()


def _joined(pieces: list[Token], vocab: Container[str] | None) -> list[Token]:
    """The tokeniser's pieces with those the treebank keeps whole put back together (step 1)."""
    joined: list[Token] = []
    for index, piece in enumerate(pieces):
        previous = joined[-1] if joined else None
        touching = previous is not None and previous.end == piece.start
        if touching and _joins(previous.word, piece.word, pieces, index, vocab):
            joined[-1] = Token(previous.word + piece.word, previous.start, piece.end)
        else:
            joined.append(piece)
    # <unk> written in the text: the tokeniser splits it into < unk >
    result: list[Token] = []
    for piece in joined:
        if (
            piece.word == ">"
            and len(result) >= 2
            and result[-1].word == "unk"
            and result[-2].word == "<"
            and result[-2].end == result[-1].start
            and result[-1].end == piece.start
        ):
            result[-2:] = [Token("<unk>", result[-2].start, piece.end)]
        else:
            result.append(piece)
    return result


def _joins(
    before: str, piece: str, pieces: list[Token], index: int, vocab: Container[str] | None
) -> bool:
    following = pieces[index + 1] if index + 1 < len(pieces) else None
    if piece == "&":
        # a & between letters or digits, with nothing between: AT&T, s&p
        return (
            before[-1:].isalnum()
            and following is not None
            and following.start == pieces[index].end
            and following.word[:1].isalnum()
        )
    if before.endswith("&") and len(before) > 1:
        return True  # the word after a & joined to the one before it (the check above)
    if piece == "$":
        return before.isalpha()  # a currency's letters: C$, US$, HK$
    if piece == "." and all(p.word in _CLOSING for p in pieces[index + 1 :]):
        # the text's last period, split off by the tokeniser: an abbreviation's own
        word = before.lower() + "."
        if vocab is not None:
            return word in vocab
        return "." in before
    return False
