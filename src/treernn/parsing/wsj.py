"""WSJ constituency trees for unsupervised-parsing evaluation, prepared as the ON-LSTM authors do.

Reads the Penn Treebank WSJ ``.mrg`` files with nltk's ``BracketParseCorpusReader`` from either

- the full treebank (LDC99T42, licensed), in the LDC layout
  ``.../parsed/mrg/wsj/{00..24}/wsj_NNNN.mrg`` or nltk's ``ptb`` layout
  ``.../WSJ/{00..24}/WSJ_NNNN.MRG`` (any directory holding such files), or
- the free nltk 10% sample (sections 00-01, 3,914 trees), ``<data_dir>/ptb_nltk_sample/nltk_data/
  corpora/treebank/combined/wsj_NNNN.mrg``.

Preparation (ON-LSTM paper Sec. 5.2, following Htut et al. 2018 and Klein & Manning 2002; details
in REFERENCE.md): keep a word only if its POS tag is a word tag (drops punctuation, ``-NONE-``
traces, ``$``, ``#``, brackets and quotes), lower-case it and replace every run of digits by ``N``;
in the gold tree drop subtrees left without words and collapse unary nodes. Constituent labels
(function tags and indices stripped: ``NP-SBJ-1`` -> ``NP``) are kept on every span of two or more
words for per-label recall.

``keep_punctuation=True`` (a variant some papers report) keeps every word except ``-NONE-``
traces; the split is still chosen by the length without punctuation, so ``wsj10`` holds the same
sentences under both conventions.

Splits: ``wsj10`` (at most 10 words, sections 00-24) and ``wsj_test`` (section 23) on the full
treebank; on the sample, ``sample`` (all sentences) and ``sample10`` (at most 10 words) stand in
for them.
"""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeAlias

from treernn.errors import DataError
from treernn.parsing.trees import Span, Tree

log = logging.getLogger(__name__)

#: POS tags of words; all others (punctuation, -NONE-, $, #, -LRB-, quotes) are dropped.
# fmt: off
WORD_TAGS: frozenset[str] = frozenset([
    "CC", "CD", "DT", "EX", "FW", "IN", "JJ", "JJR", "JJS", "LS", "MD", "NN", "NNS", "NNP", "NNPS",
    "PDT", "POS", "PRP", "PRP$", "RB", "RBR", "RBS", "RP", "SYM", "TO", "UH", "VB", "VBD", "VBG",
    "VBN", "VBP", "VBZ", "WDT", "WP", "WP$", "WRB",
])
# fmt: on

#: The POS tag of empty elements (traces), never a word.
TRACE_TAG = "-NONE-"

#: Where the nltk sample lives under the data directory, and where it comes from.
SAMPLE_SUBDIR = Path("ptb_nltk_sample/nltk_data/corpora/treebank/combined")
SAMPLE_URL = (
    "https://raw.githubusercontent.com/nltk/nltk_data/gh-pages/packages/corpora/treebank.zip"
)
SAMPLE_SHA256 = "9da92d76c3666cfb6cddeaed0f7e86b344cce0f0928a286d439e555f19c37399"
SAMPLE_MD5 = "78c24a97940c2504d0ad35dd3f8a560b"

#: WSJ tree files in every layout: wsj_0001.mrg (LDC, nltk sample) or WSJ_0001.MRG (nltk ptb).
MRG_FILE = re.compile(r"wsj_(\d{2})(\d{2})\.mrg", re.IGNORECASE)
EXPECTED_LAYOUT = (
    "expected WSJ tree files named wsj_NNNN.mrg anywhere below it (LDC Treebank-3: "
    "parsed/mrg/wsj/{00..24}/wsj_NNNN.mrg; nltk ptb: WSJ/{00..24}/WSJ_NNNN.MRG)"
)

LabelledSpans: TypeAlias = tuple[tuple[str, int, int], ...]
Split = Literal["wsj10", "wsj_test", "sample", "sample10"]
TreebankKind = Literal["wsj", "sample"]
SPLITS: dict[str, tuple[str, ...]] = {
    "wsj": ("wsj10", "wsj_test"),
    "sample": ("sample10", "sample"),
}
SHORT_SENTENCE = 10
TEST_SECTION = 23


@dataclass(frozen=True)
class GoldSentence:
    """One prepared WSJ sentence.

    words: the kept, normalised words. tree: the cleaned gold tree over word positions.
    labelled_spans: ``(label, start, end)`` for every constituent of at least two words, each once
    (different labels may share a span after unary collapse). source: ``file:index`` (index of the
    tree in its file, from 0). section: the WSJ section (first two digits of the file number; -1
    for trees from elsewhere).
    length_without_punctuation: the number of words the default filter keeps (selects ``wsj10``
    when punctuation is kept); None means ``len(words)``.
    """

    words: tuple[str, ...]
    tree: Tree
    labelled_spans: LabelledSpans
    source: str
    section: int
    length_without_punctuation: int | None = None

    @property
    def filtered_length(self) -> int:
        if self.length_without_punctuation is None:
            return len(self.words)
        return self.length_without_punctuation


@dataclass(frozen=True)
class Treebank:
    """All prepared sentences of a treebank directory in file order, and the trees left empty."""

    directory: Path
    sentences: tuple[GoldSentence, ...]
    empty: tuple[str, ...]  # sources of trees that have no word after filtering (not in sentences)


class TreebankError(DataError, ValueError):
    """A treebank directory, file or split that cannot be used; the message says what to do."""


def normalise_word(word: str) -> str:
    """Lower-case, replace every run of digits by ``N``: ``1988`` -> ``N``, ``4.5`` -> ``N.N``."""
    return re.sub(r"[0-9]+", "N", word.lower())


def base_label(label: str) -> str:
    """``NP-SBJ-1`` -> ``NP``, ``NP=2`` -> ``NP``, ``ADVP|PRT`` -> ``ADVP``."""
    return re.split(r"[-=|]", label, maxsplit=1)[0] or label


def is_word_tag(tag: str, keep_punctuation: bool = False) -> bool:
    """Whether a leaf with this POS tag is a word: a tag of `WORD_TAGS`, or with
    ``keep_punctuation`` any tag but the trace tag ``-NONE-``."""
    return tag != TRACE_TAG if keep_punctuation else tag in WORD_TAGS


def prepare_tree(
    tree: object, keep_punctuation: bool = False
) -> tuple[tuple[str, ...], Tree, LabelledSpans] | None:
    """Filter, normalise and clean one ``nltk.Tree``; None when no word is left.

    Returns ``(words, tree, labelled_spans)``. A preterminal is a node whose children are strings;
    it is a word when `is_word_tag` says so for its label.
    """
    words: list[str] = []
    labelled: list[tuple[str, int, int]] = []

    def visit(node: object) -> Tree | None:
        if not hasattr(node, "label"):
            # nltk turns a tree with unbalanced brackets into a flat list of (word, tag) pairs
            raise ValueError(f"malformed tree (unbalanced brackets?) near {node!r}")
        children = list(node)  # type: ignore[call-overload]
        if all(isinstance(child, str) for child in children):
            if not is_word_tag(node.label(), keep_punctuation):  # type: ignore[attr-defined]
                return None
            words.append(normalise_word(" ".join(children)))
            return len(words) - 1
        start = len(words)
        kept = [sub for sub in (visit(child) for child in children) if sub is not None]
        if not kept:
            return None
        label = base_label(node.label())  # type: ignore[attr-defined]
        if label and len(words) - start >= 2:
            labelled.append((label, start, len(words)))
        return kept[0] if len(kept) == 1 else tuple(kept)

    tree_of_positions = visit(tree)
    if tree_of_positions is None:
        return None
    # A unary chain such as (NP (NP the board)) gives one NP span, not two.
    return tuple(words), tree_of_positions, tuple(dict.fromkeys(labelled))


def find_tree_files(directory: str | Path) -> list[Path]:
    """The ``wsj_NNNN.mrg`` files below ``directory`` (any case), sorted by file number."""
    root = Path(directory).expanduser()
    if not root.is_dir():
        raise TreebankError(f"treebank directory {root} does not exist; {EXPECTED_LAYOUT}")
    files = [path for path in root.rglob("*") if MRG_FILE.fullmatch(path.name) and path.is_file()]
    if not files:
        raise TreebankError(f"no WSJ trees in {root}: {EXPECTED_LAYOUT}")
    return sorted(files, key=lambda path: (MRG_FILE.fullmatch(path.name).groups(), str(path)))  # type: ignore[union-attr]


@contextlib.contextmanager
def _nltk_may_read(root: Path) -> Iterator[None]:
    """nltk >= 3.9 only opens files below ``nltk.data.path``; the user named this directory, so it
    is allowed while we read it (eagerly) and removed afterwards."""
    import nltk.data

    entry = str(root.resolve())
    added = entry not in nltk.data.path
    if added:
        nltk.data.path.append(entry)
    try:
        yield
    finally:
        if added:
            nltk.data.path.remove(entry)


def read_treebank(directory: str | Path, *, keep_punctuation: bool = False) -> Treebank:
    """Read and prepare every tree below ``directory`` (cached per directory: it takes seconds).

    ``keep_punctuation`` keeps every word but traces (see the module docstring); a tree is still
    skipped as empty when it has no word without punctuation."""
    return _read_treebank(str(Path(directory).expanduser().resolve()), keep_punctuation)


@functools.lru_cache(maxsize=4)
def _read_treebank(directory: str, keep_punctuation: bool = False) -> Treebank:
    from nltk.corpus.reader import BracketParseCorpusReader

    files = find_tree_files(directory)
    root = Path(directory)
    sentences: list[GoldSentence] = []
    empty: list[str] = []
    with _nltk_may_read(root):
        reader = BracketParseCorpusReader(
            str(root), [str(path.resolve().relative_to(root)) for path in files]
        )
        for path in files:
            section = int(MRG_FILE.fullmatch(path.name).group(1))  # type: ignore[union-attr]
            try:
                trees = _parsed_sents(reader, path)
            except Exception as error:  # nltk raises ValueError / IndexError on broken brackets
                raise TreebankError(
                    f"{path}: cannot read its trees ({type(error).__name__}: {error}); "
                    "is it a Penn Treebank .mrg file?"
                ) from error
            for index, tree in enumerate(trees):
                source = f"{path.name}:{index}"
                try:
                    prepared = prepare_tree(tree)
                    with_punctuation = prepare_tree(tree, True) if keep_punctuation else None
                except ValueError as error:
                    raise TreebankError(f"{path}: tree {index}: {error}") from error
                if prepared is None:
                    empty.append(source)
                    continue
                words, gold_tree, labelled_spans = prepared
                if with_punctuation is None:
                    sentence = GoldSentence(words, gold_tree, labelled_spans, source, section)
                else:
                    sentence = GoldSentence(*with_punctuation, source, section, len(words))
                sentences.append(sentence)
    if empty:
        log.warning(
            "%d tree(s) in %s have no word after dropping punctuation and traces and are skipped "
            "(first: %s)",
            len(empty),
            root,
            empty[0],
        )
    return Treebank(root, tuple(sentences), tuple(empty))


def _parsed_sents(reader, path: Path) -> list:
    """``reader.parsed_sents(fileid)`` of ``path``, read from memory: nltk's own block splitter
    (``read_sexpr_block``) and tree parser (the reader's ``_parse``, which also normalises
    leaves and strips the empty top node) on the file's text in a ``StringIO``. Three times faster
    than the corpus view, whose seekable stream spends most of its time in ``tell``; the trees are
    the same (tests/unit/parsing/test_wsj.py checks every tree of the sample)."""
    from nltk.corpus.reader.util import read_sexpr_block

    stream = io.StringIO(path.read_text(encoding="utf-8"))
    trees = []
    while blocks := read_sexpr_block(stream):
        trees.extend(tree for tree in map(reader._parse, blocks) if tree)
    return trees


def sample_directory(data_dir: str | Path) -> Path:
    """The nltk WSJ sample below ``data_dir``; a clear error saying how to get it when missing."""
    directory = Path(data_dir).expanduser() / SAMPLE_SUBDIR
    if not directory.is_dir() or not any(directory.glob("wsj_*.mrg")):
        raise TreebankError(
            f"the nltk WSJ sample is not in {directory}: download {SAMPLE_URL} "
            f"(sha256 {SAMPLE_SHA256}) and unzip it in {directory.parent.parent} "
            "(it creates treebank/combined/wsj_0001.mrg ...), or point data_dir at a copy"
        )
    return directory


def select_split(sentences: Sequence[GoldSentence], split: str) -> list[GoldSentence]:
    """The sentences of a named split (see the module docstring)."""
    if split in ("wsj10", "sample10"):
        return [sentence for sentence in sentences if sentence.filtered_length <= SHORT_SENTENCE]
    if split == "wsj_test":
        return [sentence for sentence in sentences if sentence.section == TEST_SECTION]
    if split == "sample":
        return list(sentences)
    raise TreebankError(f"unknown split {split!r}; choose one of wsj10, wsj_test, sample, sample10")


def load_split(
    treebank: TreebankKind,
    split: str,
    *,
    wsj_dir: str | Path | None = None,
    data_dir: str | Path | None = None,
    keep_punctuation: bool = False,
) -> list[GoldSentence]:
    """The prepared sentences of ``split`` from the full WSJ (``wsj_dir``) or the sample
    (below ``data_dir``); ``keep_punctuation`` as in `read_treebank`."""
    if split not in SPLITS.get(treebank, ()):
        splits = " and ".join(repr(name) for name in SPLITS.get(treebank, ()))
        raise TreebankError(
            f"split {split!r} does not exist for treebank {treebank!r}; its splits are {splits}"
        )
    if treebank == "wsj":
        if wsj_dir is None:
            raise TreebankError(
                "treebank 'wsj' needs the directory of the full WSJ trees (LDC's Penn Treebank "
                "3, its .mrg files): set TREERNN_WSJ_DIR, or give parse --wsj-dir"
            )
        directory = Path(wsj_dir)
    else:
        if data_dir is None:
            raise TreebankError("treebank 'sample' needs data_dir (TREERNN_DATA_DIR)")
        directory = sample_directory(data_dir)
    treebank_read = read_treebank(directory, keep_punctuation=keep_punctuation)
    selected = select_split(treebank_read.sentences, split)
    if not selected:
        raise TreebankError(f"split {split!r} of {directory} has no sentences")
    return selected


def resolve_treebank(
    treebank: str, wsj_dir: str | Path | None, data_dir: str | Path | None
) -> TreebankKind:
    """``auto`` -> ``wsj`` when ``wsj_dir`` holds trees, else ``sample``."""
    if treebank in ("wsj", "sample"):
        return treebank  # type: ignore[return-value]
    if treebank != "auto":
        raise TreebankError(f"unknown treebank {treebank!r}; choose auto, wsj or sample")
    if wsj_dir is not None and Path(wsj_dir).expanduser().is_dir():
        try:
            find_tree_files(wsj_dir)
            return "wsj"
        except TreebankError:
            log.warning("wsj_dir %s holds no WSJ trees; using the nltk sample", wsj_dir)
    return "sample"


def default_splits(treebank: TreebankKind) -> tuple[str, str]:
    """``(short, test)``: the WSJ10 and WSJ-test columns of Table 2, or their sample equivalents."""
    short, test = SPLITS[treebank]
    return short, test


__all__ = [
    "EXPECTED_LAYOUT",
    "GoldSentence",
    "SAMPLE_MD5",
    "SAMPLE_SHA256",
    "SAMPLE_URL",
    "Span",
    "Treebank",
    "TreebankError",
    "TRACE_TAG",
    "WORD_TAGS",
    "base_label",
    "is_word_tag",
    "default_splits",
    "find_tree_files",
    "load_split",
    "normalise_word",
    "prepare_tree",
    "read_treebank",
    "resolve_treebank",
    "sample_directory",
    "select_split",
]
