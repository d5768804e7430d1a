"""Tree files: read any system's trees, one per line, and write treernn's in the same formats.

Formats (``format=``; ``auto`` decides once per file):

- ``bracketed``: unlabelled brackets, ``((the cat) sat)``. A bare word alone on a line is a one-word
  tree; ``(the)`` is one too.
- ``labelled``: Penn-Treebank style, the first token after ``(`` is a label,
  ``(S (NP the cat) (VP sat))`` or with POS preterminals ``(S (NP (DT the) (NN cat)) (VP (VBD
  sat)))``. A bracket opening straight onto another bracket has no label (PTB's ``( (S ...) )``).
- ``json``: nested JSON lists of strings, ``[["the", "cat"], "sat"]``; a one-word tree is
  ``"the"`` or ``["the"]``.

``auto``: ``json`` when the first tree starts with ``[`` or ``"``; otherwise ``labelled`` when every
bracket of the file reads as ``(LABEL child ...)`` (or opens onto another bracket), no label has a
lower-case letter and at least one label has an upper-case letter other than ``N`` (treernn writes
numbers as ``N``); otherwise ``bracketed``. A right-branching tree of upper-case words such as
``(I (SAW IT))`` is therefore read as labelled: pass ``format="bracketed"`` for such files.

A labelled file has POS tags when every word of the file is the only child of a labelled bracket
(``(DT the)``); those words carry the tag, and the scoreboard filters words by tag as it does the
WSJ. Blank lines are skipped (line numbers in messages count them). Unary brackets and brackets
over one word are kept in `RawTree`; `prepare` collapses them, so a tree is the set of
its spans of two or more words.

Everything here walks trees with explicit stacks: trees thousands of levels deep (ListOps) need no
recursion limit. A malformed line raises one `TreeFileError` that names the file, the line
and what is wrong.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeAlias

from treernn.errors import DataError
from treernn.files import (
    INPUT_TEXT_LIMIT,
    RefusedFile,
    read_limited,
    text_lines,
    write_result_text,
)
from treernn.parsing.trees import Span, Tree
from treernn.parsing.wsj import LabelledSpans, base_label

TreeFormat = Literal["auto", "bracketed", "labelled", "json"]
FORMATS: tuple[str, ...] = ("auto", "bracketed", "labelled", "json")
WRITE_FORMATS: tuple[str, ...] = ("bracketed", "json")

#: A bracket as read: ``(label or None, start, end)`` over word positions (half-open).
Bracket: TypeAlias = tuple[str | None, int, int]

#: Tokens that are never words under the default protocol when a file has no POS tags: the Penn
#: Treebank's punctuation and symbol tokens whose tags are outside ``WORD_TAGS``. ``'`` is not here:
#: in the WSJ it is a possessive (tag POS, a word) as often as a closing quote.
PUNCTUATION_TOKENS: frozenset[str] = frozenset(
    [".", ",", ":", ";", "?", "!", "--", "-", "...", "``", "''", "`", '"']
    + ["-LRB-", "-RRB-", "-LCB-", "-RCB-", "-LSB-", "-RSB-", "(", ")", "{", "}", "[", "]"]
    + ["$", "#", "C$", "A$", "US$", "HK$", "NZ$", "S$", "M$"]
)

_BRACKET_TOKEN = re.compile(r"\(|\)|[^\s()]+")
_JSON_TOKEN = re.compile(r'\s*(?:(\[)|(\])|(,)|("(?:[^"\\]|\\.)*")|(\S))')
_LOWER = re.compile(r"[a-z]")
_DIGITS = re.compile(r"[0-9]+")
_UPPER_NOT_N = re.compile(r"[A-MO-Z]")


class TreeFileError(DataError, ValueError):
    """A tree file (or a tree in it) that cannot be used; the message names the file and line."""

    def __init__(self, path: str | Path, line: int | None, message: str) -> None:
        self.path = str(path)
        self.line = line
        self.reason = message
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {message}")


@dataclass(frozen=True)
class RawTree:
    """One tree as written in its file.

    words: the words as written. brackets: every bracket, parents before children, as
    ``(label, start, end)``; labels are None in unlabelled formats. tags: the POS tag of each word
    when the file has POS preterminals, else None. line: 1-based line number in the file.
    """

    words: tuple[str, ...]
    brackets: tuple[Bracket, ...]
    line: int
    tags: tuple[str, ...] | None = None


@dataclass(frozen=True)
class TreeFile:
    """The trees of one file, in order; ``format`` is the one used (never ``auto``)."""

    path: str
    format: str
    trees: tuple[RawTree, ...]
    has_pos: bool = False
    detected: bool = False  # True when ``format`` was chosen by ``auto``


@dataclass(frozen=True)
class PreparedTree:
    """A tree after word filtering: normalised words, the tree over their positions, and the
    labelled spans of two or more words (each ``(label, start, end)`` once)."""

    words: tuple[str, ...]
    tree: Tree
    labelled_spans: LabelledSpans


# ----------------------------------------------------------------------------------------------
# Reading


def read_trees(path: str | Path, format: str = "auto") -> TreeFile:
    """Read one tree per non-blank line of ``path`` in ``format`` (see the module docstring);
    lines end at ``\\n`` only (a form feed or U+2028 inside a line stays in it, as in the
    treebank's own readers). The file is read as a regular file (never a FIFO or a device) of at
    most `INPUT_TEXT_LIMIT` bytes."""
    if format not in FORMATS:
        raise TreeFileError(path, None, f"unknown tree format {format!r}; choose one of {FORMATS}")
    source = Path(path).expanduser()
    if not source.exists():
        raise TreeFileError(source, None, "no such tree file")
    try:
        data = read_limited(source, INPUT_TEXT_LIMIT, follow_links=True)
    except RefusedFile as refused:
        raise TreeFileError(source, None, f"{refused.what}; give a tree file") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise TreeFileError(
            source,
            line,
            f"not UTF-8 text (byte {data[error.start]:#04x}); a tree file is text, one tree per "
            "line (brackets or JSON lists)",
        ) from None
    return parse_tree_lines(text_lines(text), format=format, path=str(source))


def parse_tree_lines(lines: Iterable[str], format: str = "auto", path: str = "<trees>") -> TreeFile:
    """`read_trees` on lines already in memory (``path`` only names them in messages)."""
    numbered = [(number, line.strip()) for number, line in enumerate(lines, 1) if line.strip()]
    if not numbered:
        raise TreeFileError(path, None, "the file has no tree (every line is blank)")
    detected = format == "auto"
    if format == "auto":
        first = numbered[0][1]
        format = "json" if first[0] in '["' else "bracketed"
    if format == "json":
        trees = tuple(_json_tree(text, number, path) for number, text in numbered)
        return TreeFile(path, "json", trees, False, detected)
    tokenised = [(number, _bracket_tokens(text, number, path)) for number, text in numbered]
    if detected:
        format = (
            "labelled"
            if _looks_labelled(token_list for _, token_list in tokenised)
            else ("bracketed")
        )
    labelled = format == "labelled"
    trees = tuple(_bracket_tree(tokens, number, path, labelled) for number, tokens in tokenised)
    has_pos = labelled and all(tree.tags is not None for tree in trees)
    if not has_pos:
        trees = tuple(
            RawTree(tree.words, tree.brackets, tree.line) if tree.tags else tree for tree in trees
        )
    return TreeFile(path, format, trees, has_pos, detected)


def _bracket_tokens(text: str, number: int, path: str) -> list[str]:
    tokens = _BRACKET_TOKEN.findall(text)
    if len(tokens) > 1 and tokens[0] != "(":
        raise TreeFileError(
            path, number, f"text before the first bracket: {tokens[0]!r} (one tree per line)"
        )
    depth = 0
    for index, token in enumerate(tokens):
        if token == "(":
            if depth == 0 and index > 0:
                raise TreeFileError(
                    path, number, "a second tree starts after the first one closed (one per line)"
                )
            depth += 1
        elif token == ")":
            depth -= 1
            if depth < 0:
                raise TreeFileError(
                    path, number, f"unbalanced brackets: ')' number {index + 1} closes nothing"
                )
            if tokens[index - 1] == "(":
                raise TreeFileError(path, number, "an empty bracket '()' has no words")
        elif depth == 0 and index > 0:
            raise TreeFileError(path, number, f"text after the tree closed: {token!r}")
    if depth > 0:
        raise TreeFileError(path, number, f"unbalanced brackets: {depth} '(' never closed")
    return tokens


def _looks_labelled(token_lists: Iterable[list[str]]) -> bool:
    """Whether every bracket of the file reads as ``(LABEL child ...)`` with label-like labels."""
    strong = False
    for tokens in token_lists:
        for index, token in enumerate(tokens[:-1]):
            if token != "(":
                continue
            label = tokens[index + 1]
            if label == "(":
                continue  # a bracket opening onto a bracket has no label
            if label == ")" or tokens[index + 2] == ")" or _LOWER.search(label):
                return False
            strong = strong or bool(_UPPER_NOT_N.search(label))
    return strong


def _bracket_tree(tokens: list[str], number: int, path: str, labelled: bool) -> RawTree:
    if len(tokens) == 1:  # a bare word
        return RawTree((tokens[0],), ((None, 0, 1),), number)
    words: list[str] = []
    tags: list[str] = []
    all_tagged = True
    brackets: list[Bracket] = []
    open_slots: list[int] = []  # index in brackets of each open bracket
    index = 0
    while index < len(tokens):
        token = tokens[index]
        if token == "(":
            label = None
            if labelled and tokens[index + 1] != "(":
                label = tokens[index + 1]
                index += 1
                if tokens[index + 1] == ")":
                    raise TreeFileError(
                        path, number, f"the bracket labelled {label!r} has no words in it"
                    )
            open_slots.append(len(brackets))
            brackets.append((label, len(words), len(words)))
        elif token == ")":
            slot = open_slots.pop()
            label, start, _ = brackets[slot]
            brackets[slot] = (label, start, len(words))
        else:
            if labelled:
                # a word is tagged when it is the only child of a labelled bracket: ( TAG word )
                parent_label = brackets[open_slots[-1]][0]
                tagged = tokens[index - 2] == "(" and tokens[index + 1] == ")"
                if tagged and parent_label is not None:
                    tags.append(parent_label)
                else:
                    all_tagged = False
            words.append(token)
        index += 1
    return RawTree(
        tuple(words), tuple(brackets), number, tuple(tags) if labelled and all_tagged else None
    )


def _json_tree(text: str, number: int, path: str) -> RawTree:
    words: list[str] = []
    brackets: list[Bracket] = []
    open_slots: list[int] = []
    previous = ""  # the previous token: "[", "]", ",", "word" or "" at the start
    for match in _JSON_TOKEN.finditer(text):
        open_token, close_token, comma, string, other = match.groups()
        where = f"at character {match.end()}"
        if previous in ("]", "word") and not open_slots:
            raise TreeFileError(path, number, f"text after the tree closed {where}")
        if other is not None:
            raise TreeFileError(
                path,
                number,
                f"unexpected {other!r} {where}: a JSON tree is nested lists of strings, "
                'e.g. [["the", "cat"], "sat"]',
            )
        expects_value = previous in ("", "[", ",")
        if open_token or string is not None:
            if not expects_value:
                raise TreeFileError(path, number, f"missing ',' before the item {where}")
            if open_token:
                open_slots.append(len(brackets))
                brackets.append((None, len(words), len(words)))
                previous = "["
            else:
                words.append(json.loads(string))
                previous = "word"
        elif close_token:
            if not open_slots:
                raise TreeFileError(
                    path, number, f"unbalanced brackets: ']' {where} closes nothing"
                )
            if previous in ("[", ","):
                what = "an empty list '[]' has no words" if previous == "[" else "',' before ']'"
                raise TreeFileError(path, number, f"{what} {where}")
            slot = open_slots.pop()
            brackets[slot] = (None, brackets[slot][1], len(words))
            previous = "]"
        else:
            if expects_value:
                raise TreeFileError(path, number, f"unexpected ',' {where}")
            previous = ","
    if open_slots:
        raise TreeFileError(
            path, number, f"unbalanced brackets: {len(open_slots)} '[' never closed"
        )
    if not brackets:  # a bare "word"
        brackets.append((None, 0, 1))
    return RawTree(tuple(words), tuple(brackets), number)


# ----------------------------------------------------------------------------------------------
# Filtering and trees from spans


def prepare(raw: RawTree, keep: Sequence[bool] | None = None) -> PreparedTree | None:
    """Keep the words with ``keep[i]`` (all by default), normalise them (lower case, digit runs ->
    ``N``), drop brackets left without words and collapse unary ones; None when no word is left.

    Labelled spans: the base label (``NP-SBJ-1`` -> ``NP``) of every labelled bracket that still
    covers two or more words, each ``(label, start, end)`` once.
    """
    if keep is None:
        keep = [True] * len(raw.words)
    new_position = [0] * (len(raw.words) + 1)  # kept words before each position
    for position, kept in enumerate(keep):
        new_position[position + 1] = new_position[position] + bool(kept)
    length = new_position[-1]
    if length == 0:
        return None
    words = tuple(normalise(word) for word, kept in zip(raw.words, keep) if kept)
    spans: dict[Span, None] = {}
    labelled: dict[tuple[str, int, int], None] = {}
    for label, start, end in raw.brackets:
        new_start, new_end = new_position[start], new_position[end]
        if new_end - new_start < 2:
            continue
        spans[(new_start, new_end)] = None
        if label:
            labelled[(base_label(label), new_start, new_end)] = None
    return PreparedTree(words, tree_from_spans(length, spans), tuple(labelled))


def normalise(word: str) -> str:
    """`treernn.parsing.wsj.normalise_word` (lower case, digit runs -> ``N``), cached."""
    return _normalise(word)


@functools.lru_cache(maxsize=1 << 16)
def _normalise(word: str) -> str:
    return _DIGITS.sub("N", word.lower())


def tree_from_spans(length: int, spans: Iterable[Span]) -> Tree:
    """The tree over ``length`` words whose brackets are ``spans`` (spans of two or more words,
    nested or disjoint, duplicates ignored); the whole-sentence bracket is added when missing."""
    if length == 1:
        return 0
    distinct = set(spans)
    distinct.add((0, length))
    ordered = sorted(distinct, key=lambda span: (span[0], -span[1]))
    stack: list[tuple[int, list[Tree]]] = []  # (end, children so far) of each open bracket
    next_span = 0
    root: Tree | None = None
    for position in range(length):
        while next_span < len(ordered) and ordered[next_span][0] == position:
            start, end = ordered[next_span]
            if stack and end > stack[-1][0] or end - start < 2 or end > length:
                raise ValueError(f"span {(start, end)} crosses a bracket or leaves the sentence")
            stack.append((end, []))
            next_span += 1
        node: Tree = position
        while True:
            stack[-1][1].append(node)
            if stack[-1][0] != position + 1:
                break
            node = tuple(stack.pop()[1])
            if not stack:
                root = node
                break
    if next_span != len(ordered) or root is None:
        raise ValueError("spans outside the sentence")
    return root


# ----------------------------------------------------------------------------------------------
# Writing


def format_tree(tree: Tree, words: Sequence[str], format: str = "bracketed") -> str:
    """One line for ``tree`` with ``words`` at its leaves: ``((the cat) sat)`` (bracketed) or
    ``[["the", "cat"], "sat"]`` (json). A one-word tree is ``(the)`` or ``["the"]``, so that every
    line is bracketed; ``(`` and ``)`` inside words are written ``-LRB-`` and ``-RRB-``."""
    if format not in WRITE_FORMATS:
        raise ValueError(f"unknown format {format!r} for writing; choose one of {WRITE_FORMATS}")
    if format == "json":
        open_text, close_text, separator = "[", "]", ", "
        leaf_text = [json.dumps(word, ensure_ascii=False) for word in words]
    else:
        open_text, close_text, separator = "(", ")", " "
        leaf_text = [_escape_word(word) for word in words]
    if isinstance(tree, int):
        return open_text + leaf_text[tree] + close_text
    parts: list[str] = []
    stack: list[Tree | None] = [tree]  # None closes a bracket
    previous_was_item = False
    while stack:
        node = stack.pop()
        if node is None:
            parts.append(close_text)
            previous_was_item = True
            continue
        if previous_was_item:
            parts.append(separator)
        if isinstance(node, int):
            parts.append(leaf_text[node])
            previous_was_item = True
            continue
        parts.append(open_text)
        previous_was_item = False
        stack.append(None)
        stack.extend(reversed(node))
    return "".join(parts)


def _escape_word(word: str) -> str:
    if not word or any(character.isspace() for character in word):
        raise ValueError(f"cannot write the word {word!r}: words need text and no whitespace")
    return word.replace("(", "-LRB-").replace(")", "-RRB-")


def write_trees(
    path: str | Path,
    trees: Sequence[Tree],
    words: Sequence[Sequence[str]],
    format: str = "bracketed",
) -> Path:
    """Write one tree per line (see `format_tree`); the file reads back with
    `read_trees` to the same trees, whole or not at all (a temporary file renamed into
    place). Returns the path written."""
    if len(trees) != len(words):
        raise ValueError(f"{len(trees)} trees for {len(words)} word lists")
    target = Path(path).expanduser()
    lines = [format_tree(tree, sentence, format) for tree, sentence in zip(trees, words)]
    write_result_text(target, "".join(line + "\n" for line in lines))
    return target


__all__ = [
    "FORMATS",
    "PUNCTUATION_TOKENS",
    "WRITE_FORMATS",
    "PreparedTree",
    "RawTree",
    "TreeFile",
    "TreeFileError",
    "format_tree",
    "normalise",
    "parse_tree_lines",
    "prepare",
    "read_trees",
    "tree_from_spans",
    "write_trees",
]
