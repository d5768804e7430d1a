"""BLiMP minimal pairs (Warstadt et al. 2020), scored as BLiMP's own evaluation scores them.

A BLiMP file is JSON lines, one pair per line, with ``sentence_good`` and ``sentence_bad`` (raw
text) and the pair's description: ``UID`` (the paradigm; one file per paradigm), ``field``
(morphology, syntax, semantics, syntax-semantics), ``linguistics_term`` (the phenomenon, 12 of
them), ``pairID`` and the methods the paradigm suits. Three methods, each a comparison of two
log-probabilities (`treernn.api.LanguageModel.conditional_score`, ``reduction="sum"``, nats):

- ``full`` (the paper's "simple LM method"): ``log p(sentence_good)`` against
  ``log p(sentence_bad)``, each sentence whole (with its closing ``<eos>`` unless told not);
- ``one_prefix``: the good and the bad word(s) given the prefix both share,
  ``log p(one_prefix_word_good | one_prefix_prefix)`` against
  ``log p(one_prefix_word_bad | one_prefix_prefix)``;
- ``two_prefix``: the critical word(s) both share given the good and the bad prefix,
  ``log p(two_prefix_word | two_prefix_prefix_good)`` against
  ``log p(two_prefix_word | two_prefix_prefix_bad)``.

A pair is right when the good side's log-probability is the higher. A pair whose paradigm does
not suit the method (its line lacks the method's keys) is left out and counted as skipped. Pairs
whose two sides read the same for the model (their difference is in words it does not know)
are ties: counted wrong, and listed. Accuracy is reported over all pairs, per paradigm (UID),
per phenomenon (``linguistics_term``) and per ``field``, each pooled over its pairs (BLiMP's
paradigms have 1,000 pairs each, so this is also the mean of their accuracies); every pair's
two scores are kept.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from treernn.errors import ConfigValueError, DataError
from treernn.files import read_input_text, text_lines

METHODS = ("full", "one_prefix", "two_prefix")
#: the keys of a BLiMP line each method reads
METHOD_KEYS = {
    "full": ("sentence_good", "sentence_bad"),
    "one_prefix": ("one_prefix_prefix", "one_prefix_word_good", "one_prefix_word_bad"),
    "two_prefix": ("two_prefix_prefix_good", "two_prefix_prefix_bad", "two_prefix_word"),
}
#: the value grouped under where a line does not say its field or phenomenon
NOT_GIVEN = "(not given)"


@dataclass(frozen=True)
class MinimalPair:
    good: str
    bad: str
    uid: str  # the paradigm
    fields: dict[str, Any]  # the line's other keys (field, linguistics_term, pairID, ...)
    source: str = ""  # file:line

    @property
    def field(self) -> str:
        return str(self.fields.get("field") or NOT_GIVEN)

    @property
    def phenomenon(self) -> str:
        return str(self.fields.get("linguistics_term") or NOT_GIVEN)

    @property
    def pair_id(self) -> str:
        value = self.fields.get("pairID", self.fields.get("pair_id"))
        return "" if value is None else str(value)

    def comparison(self, method: str) -> tuple[str, str, str, str] | None:
        """``(good prefix, good continuation, bad prefix, bad continuation)`` under ``method``,
        or None where the line lacks the method's keys (its paradigm does not suit it)."""
        if method == "full":
            return ("", self.good, "", self.bad)
        keys = METHOD_KEYS[method]
        values = [self.fields.get(key) for key in keys]
        if not all(isinstance(value, str) for value in values):
            if self.fields.get(f"{method}_method") is True:
                raise DataError(
                    f"{self.source or self.uid}: {method}_method is true but the line lacks "
                    f"{', '.join(key for key, v in zip(keys, values) if not isinstance(v, str))}"
                )
            return None
        if method == "one_prefix":
            prefix, good, bad = values
            return (prefix, good, prefix, bad)
        good_prefix, bad_prefix, word = values
        return (good_prefix, word, bad_prefix, word)


@dataclass(frozen=True)
class PairScore:
    """One pair under a method: its two log-probabilities (nats), right or not, tied or not."""

    uid: str
    pair_id: str
    field: str
    phenomenon: str
    good: float
    bad: float
    correct: bool
    tie: bool
    source: str


@dataclass(frozen=True)
class BlimpResult:
    """What `evaluate_blimp` found: ``accuracy`` over the ``pairs`` scored (``correct`` of
    them, ``ties`` among the wrong), ``skipped`` pairs the method does not suit, the counts
    per ``paradigms`` (UID), ``phenomena`` (``linguistics_term``) and ``fields``, and every
    pair's scores in ``items`` (file order)."""

    method: str
    accuracy: float
    pairs: int
    correct: int
    ties: int
    skipped: int
    paradigms: dict[str, dict[str, Any]]
    phenomena: dict[str, dict[str, Any]]
    fields: dict[str, dict[str, Any]]
    items: list[PairScore] = field(repr=False)

    @property
    def tied(self) -> list[PairScore]:
        """The pairs whose two sides scored the same."""
        return [item for item in self.items if item.tie]

    def as_dict(self) -> dict[str, Any]:
        """The result as JSON-ready data (``items``: one object per pair)."""
        record = asdict(self)
        record["items"] = [
            {
                "UID": item.uid,
                "pairID": item.pair_id,
                "field": item.field,
                "linguistics_term": item.phenomenon,
                "good": item.good,
                "bad": item.bad,
                "correct": item.correct,
                "tie": item.tie,
                "source": item.source,
            }
            for item in self.items
        ]
        return record

    def to_dataframe(self) -> Any:
        """Every pair as a row of a pandas DataFrame (pandas is optional: ``pip install
        pandas``)."""
        from treernn.progress import optional_module

        pandas = optional_module("pandas", "BlimpResult.to_dataframe")
        return pandas.DataFrame(self.as_dict()["items"])


def read_blimp(paths: Sequence[str | Path]) -> list[MinimalPair]:
    """The pairs of BLiMP jsonl files, in file order, one pair per line (lines end at ``\\n``
    only: a form feed or U+2028 inside a sentence stays in it); a missing, unreadable or
    malformed file or line is one line naming it."""
    pairs = []
    for path in map(Path, paths):
        text = read_input_text(path, "BLiMP file")
        for number, line in enumerate(text_lines(text), start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as error:
                raise DataError(f"{path}:{number}: not JSON ({error})") from None
            pairs.append(pair_from_record(record, f"{path}:{number}", path.stem))
    if not pairs:
        raise DataError(f"no BLiMP pair in {', '.join(map(str, paths))}")
    return pairs


def pair_from_record(record: Any, source: str, default_uid: str = "") -> MinimalPair:
    """A pair from one BLiMP line's object (``source`` names it in messages)."""
    if not isinstance(record, dict) or not all(
        isinstance(record.get(key), str) for key in ("sentence_good", "sentence_bad")
    ):
        raise DataError(f"{source}: a BLiMP line needs sentence_good and sentence_bad strings")
    others = {
        key: value for key, value in record.items() if key not in ("sentence_good", "sentence_bad")
    }
    uid = str(record.get("UID") or default_uid or NOT_GIVEN)
    return MinimalPair(record["sentence_good"], record["sentence_bad"], uid, others, source)


def pairs_from(given: Any) -> list[MinimalPair]:
    """Pairs from a BLiMP file's path, a list of paths, or a list of `MinimalPair`s or of
    dicts in BLiMP's keys (`treernn.api.LanguageModel.blimp`)."""
    if isinstance(given, (str, Path)):
        return read_blimp([given])
    items = list(given)
    if items and all(isinstance(item, (str, Path)) for item in items):
        return read_blimp(items)
    pairs = []
    for number, item in enumerate(items, start=1):
        pairs.append(
            item if isinstance(item, MinimalPair) else pair_from_record(item, f"pair {number}")
        )
    if not pairs:
        raise ConfigValueError("blimp: no pair given")
    return pairs


def evaluate_blimp(
    score: Callable[[list[str], list[str], bool], list[float]],
    pairs: Sequence[MinimalPair],
    method: str = "full",
    include_end: bool = True,
) -> BlimpResult:
    """``pairs`` under ``method`` (module docstring). ``score(prefixes, continuations, end)``:
    ``log p(continuation | prefix)`` of each (nats; an empty prefix: the continuation is a
    sentence), with the closing ``<eos>``'s term when ``end``; called once, with the good and
    bad side of every pair interleaved. ``include_end``: whether the full method counts
    ``<eos>`` (the prefix methods score the critical word(s) alone)."""
    if method not in METHODS:
        raise ConfigValueError(f"method={method!r}: use one of {', '.join(METHODS)}")
    scored, comparisons = [], []
    for pair in pairs:
        comparison = pair.comparison(method)
        if comparison is not None:
            scored.append(pair)
            comparisons.append(comparison)
    if not scored:
        keys = ", ".join(METHOD_KEYS[method])
        raise DataError(
            f"no pair suits the {method} method: none of the {len(pairs)} pairs has {keys} "
            "(BLiMP gives them only for the paradigms the method suits)"
        )
    prefixes = [text for c in comparisons for text in (c[0], c[2])]
    continuations = [text for c in comparisons for text in (c[1], c[3])]
    scores = score(prefixes, continuations, include_end and method == "full")
    items = []
    for index, pair in enumerate(scored):
        good, bad = scores[2 * index], scores[2 * index + 1]
        items.append(
            PairScore(
                uid=pair.uid,
                pair_id=pair.pair_id,
                field=pair.field,
                phenomenon=pair.phenomenon,
                good=good,
                bad=bad,
                correct=good > bad,
                tie=good == bad,
                source=pair.source,
            )
        )
    paradigms = _grouped(items, lambda item: item.uid)
    for uid, counts in paradigms.items():
        first = next(item for item in items if item.uid == uid)
        counts |= {"field": first.field, "linguistics_term": first.phenomenon}
    correct = sum(item.correct for item in items)
    return BlimpResult(
        method=method,
        accuracy=correct / len(items),
        pairs=len(items),
        correct=correct,
        ties=sum(item.tie for item in items),
        skipped=len(pairs) - len(scored),
        paradigms=paradigms,
        phenomena=_grouped(items, lambda item: item.phenomenon),
        fields=_grouped(items, lambda item: item.field),
        items=items,
    )


def _grouped(items: Iterable[PairScore], key: Callable[[PairScore], str]) -> dict[str, Any]:
    groups: dict[str, dict[str, Any]] = {}
    for item in items:
        counts = groups.setdefault(key(item), {"pairs": 0, "correct": 0, "ties": 0})
        counts["pairs"] += 1
        counts["correct"] += int(item.correct)
        counts["ties"] += int(item.tie)
    return {
        name: counts | {"accuracy": counts["correct"] / counts["pairs"]}
        for name, counts in sorted(groups.items())
    }


#: how many tied pairs the table names (the JSON lists them all)
SHOWN_TIES = 20


def format_blimp(result: BlimpResult) -> str:
    """The table: accuracy per paradigm, phenomenon and field, then over all pairs; then the
    tied pairs."""
    sections = [
        ("paradigm (UID)", result.paradigms),
        ("phenomenon (linguistics_term)", result.phenomena),
        ("field", result.fields),
    ]
    names = [name for _, groups in sections for name in groups]
    width = max(len("all"), *(len(name) for name in names), *(len(t) for t, _ in sections))
    lines = [f"BLiMP, {result.method} method"]
    for title, groups in sections:
        lines.append(f"{title:<{width}}  accuracy  pairs  ties")
        for name, counts in groups.items():
            lines.append(_row(name, counts["accuracy"], counts["pairs"], counts["ties"], width))
        lines.append("")
    lines.append(_row("all", result.accuracy, result.pairs, result.ties, width))
    if result.skipped:
        lines.append(f"skipped: {result.skipped} pairs without the {result.method} method's keys")
    tied = result.tied
    if tied:
        shown = ", ".join(f"{item.uid}#{item.pair_id or '?'}" for item in tied[:SHOWN_TIES])
        more = f" and {len(tied) - SHOWN_TIES} more" if len(tied) > SHOWN_TIES else ""
        lines.append(f"tied (counted wrong): {shown}{more}")
    return "\n".join(lines)


def _row(name: str, accuracy: float, pairs: int, ties: int, width: int) -> str:
    return f"{name:<{width}}  {100 * accuracy:7.2f}%  {pairs:5d}  {ties:4d}"
