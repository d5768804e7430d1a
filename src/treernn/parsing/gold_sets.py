"""The gold side of the parse scoreboard: the gold sentences a scoreboard is scored against (a WSJ
split, the nltk sample or a gold tree file, punctuation dropped or kept), and the alignment of
predicted trees read from a file to those sentences by their words."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from treernn.parsing.treefile import (
    PUNCTUATION_TOKENS,
    RawTree,
    TreeFile,
    TreeFileError,
    normalise,
    prepare,
    read_trees,
)
from treernn.parsing.trees import Tree
from treernn.parsing.wsj import (
    SPLITS,
    GoldSentence,
    is_word_tag,
    load_split,
)

PUNCTUATION_CHOICES: tuple[str, ...] = ("drop", "keep")
#: Gold splits treernn knows; anything else is read as a gold tree file.
KNOWN_SPLITS: tuple[str, ...] = tuple(name for names in SPLITS.values() for name in names)


class TreeAlignmentError(TreeFileError):
    """Predicted trees that do not fit the gold sentences (count or words)."""


@dataclass(frozen=True)
class GoldSet:
    """Prepared gold sentences and where they come from."""

    name: str
    sentences: tuple[GoldSentence, ...]
    skipped: tuple[str, ...] = ()  # sources of gold trees left without words

    def __len__(self) -> int:
        return len(self.sentences)


# ----------------------------------------------------------------------------------------------
# Gold


def load_gold(
    gold: str | Path,
    *,
    wsj_dir: str | Path | None = None,
    data_dir: str | Path | None = None,
    punctuation: str = "drop",
    format: str = "auto",
) -> GoldSet:
    """A split treernn knows or, for any other value, a gold tree file.

    Splits (see `treernn.parsing.wsj.load_split`): ``wsj10`` and ``wsj_test`` from the full
    WSJ in ``wsj_dir``; ``sample`` and ``sample10`` from the nltk sample below ``data_dir``."""
    _check_punctuation(punctuation)
    name = str(gold)
    if name in KNOWN_SPLITS:
        kind = "sample" if name in SPLITS["sample"] else "wsj"
        sentences = load_split(
            kind,  # type: ignore[arg-type]
            name,
            wsj_dir=wsj_dir,
            data_dir=data_dir,
            keep_punctuation=punctuation == "keep",
        )
        return GoldSet(name, tuple(sentences))
    return read_gold_file(gold, punctuation=punctuation, format=format)


def read_gold_file(path: str | Path, *, punctuation: str = "drop", format: str = "auto") -> GoldSet:
    """Gold trees from a tree file, filtered as the module docstring says."""
    _check_punctuation(punctuation)
    tree_file = read_trees(path, format)
    keep_punctuation = punctuation == "keep"
    sentences: list[GoldSentence] = []
    skipped: list[str] = []
    for raw in tree_file.trees:
        source = f"{Path(tree_file.path).name}:{raw.line}"
        if raw.tags is not None:
            keep = [is_word_tag(tag, keep_punctuation) for tag in raw.tags]
        else:
            keep = [keep_punctuation or word not in PUNCTUATION_TOKENS for word in raw.words]
        prepared = prepare(raw, keep)
        if prepared is None:
            skipped.append(source)
            continue
        sentences.append(
            GoldSentence(prepared.words, prepared.tree, prepared.labelled_spans, source, -1)
        )
    if not sentences:
        raise TreeFileError(tree_file.path, None, "no gold tree has a word left after filtering")
    return GoldSet(tree_file.path, tuple(sentences), tuple(skipped))


def _check_punctuation(punctuation: str) -> None:
    if punctuation not in PUNCTUATION_CHOICES:
        raise ValueError(f"punctuation must be one of {PUNCTUATION_CHOICES}, not {punctuation!r}")


# ----------------------------------------------------------------------------------------------
# Alignment


def word_key(word: str) -> str:
    """What two words must share to be the same word: lower case, digit runs as one ``n``."""
    return normalise(word).lower()


def align(
    tree_file: TreeFile,
    gold: GoldSet | Sequence[GoldSentence],
    *,
    punctuation: str = "drop",
) -> list[Tree]:
    """The predicted trees of ``tree_file`` over the gold sentences' word positions, in order.

    Raises `TreeAlignmentError` naming both counts when the numbers of trees differ, and
    naming the line and both word lists when a tree's words differ from its gold sentence.
    """
    _check_punctuation(punctuation)
    sentences = gold.sentences if isinstance(gold, GoldSet) else tuple(gold)
    gold_name = gold.name if isinstance(gold, GoldSet) else "gold"
    if len(tree_file.trees) != len(sentences):
        raise TreeAlignmentError(
            tree_file.path,
            None,
            f"{len(tree_file.trees)} trees, but the gold {gold_name} has {len(sentences)} "
            "sentences: one tree per gold sentence, in order",
        )
    keep_punctuation = punctuation == "keep"
    trees: list[Tree] = []
    for index, (raw, sentence) in enumerate(zip(tree_file.trees, sentences)):
        gold_keys = [word_key(word) for word in sentence.words]
        prepared = prepare(raw, _keep_mask(raw, gold_keys, keep_punctuation))
        predicted_words = prepared.words if prepared is not None else ()
        if [word_key(word) for word in predicted_words] != gold_keys:
            hint = ""
            if tree_file.detected and tree_file.format == "labelled":
                hint = " (the file was read as labelled trees; if it has no labels, say so with "
                hint += "format='bracketed')"
            raise TreeAlignmentError(
                tree_file.path,
                raw.line,
                f"the words differ from gold sentence {index + 1} ({sentence.source}) after "
                f"filtering{hint}: predicted {list(predicted_words)}, gold {list(sentence.words)}",
            )
        trees.append(prepared.tree)  # type: ignore[union-attr]
    return trees


def _keep_mask(raw: RawTree, gold_keys: list[str], keep_punctuation: bool) -> list[bool]:
    if raw.tags is not None:
        return [is_word_tag(tag, keep_punctuation) for tag in raw.tags]
    if keep_punctuation:
        return [True] * len(raw.words)
    keep: list[bool] = []
    expected = 0  # index of the next gold word
    for word in raw.words:
        matches = expected < len(gold_keys) and word_key(word) == gold_keys[expected]
        if word in PUNCTUATION_TOKENS and not matches:
            keep.append(False)
        else:
            keep.append(True)
            expected += 1
    return keep
