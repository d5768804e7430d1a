"""BLiMP minimal pairs (Warstadt et al. 2020): a language model is right on a pair when it gives
the grammatical sentence the higher probability (BLiMP's "simple LM method").

A BLiMP file is JSON lines, one pair per line, with ``sentence_good`` and ``sentence_bad`` (raw
text) and the pair's description: ``UID`` (the paradigm; one file per paradigm), ``field``,
``linguistics_term``, ``pairID`` and the method flags. Sentences are scored whole
(``log p(w_1 .. w_n <eos> | <eos>)``, `treernn.api.LanguageModel.log_probs`), after the
model's own tokenisation. Pairs whose two sentences read the same for the model (their difference
is in words it does not know) are ties: counted wrong, and reported.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from treernn.errors import DataError
from treernn.files import read_input_text, text_lines


@dataclass(frozen=True)
class MinimalPair:
    good: str
    bad: str
    uid: str  # the paradigm
    fields: dict[str, Any]  # the line's other keys (field, linguistics_term, pairID, ...)


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
            if not isinstance(record, dict) or not all(
                isinstance(record.get(key), str) for key in ("sentence_good", "sentence_bad")
            ):
                raise DataError(
                    f"{path}:{number}: a BLiMP line needs sentence_good and sentence_bad strings"
                )
            others = {
                key: value
                for key, value in record.items()
                if key not in ("sentence_good", "sentence_bad")
            }
            uid = str(record.get("UID") or path.stem)
            pairs.append(MinimalPair(record["sentence_good"], record["sentence_bad"], uid, others))
    if not pairs:
        raise DataError(f"no BLiMP pair in {', '.join(map(str, paths))}")
    return pairs


def evaluate_blimp(
    log_probs: Callable[[list[str]], list[float]], pairs: Sequence[MinimalPair]
) -> dict[str, Any]:
    """Accuracy per paradigm (UID) and over all pairs; ``log_probs`` scores raw sentences."""
    scores = log_probs([sentence for pair in pairs for sentence in (pair.good, pair.bad)])
    by_uid: dict[str, dict[str, int]] = {}
    for index, pair in enumerate(pairs):
        good, bad = scores[2 * index], scores[2 * index + 1]
        counts = by_uid.setdefault(pair.uid, {"pairs": 0, "correct": 0, "ties": 0})
        counts["pairs"] += 1
        counts["correct"] += int(good > bad)
        counts["ties"] += int(good == bad)
    total = sum(counts["pairs"] for counts in by_uid.values())
    correct = sum(counts["correct"] for counts in by_uid.values())
    return {
        "accuracy": correct / total,
        "pairs": total,
        "ties": sum(counts["ties"] for counts in by_uid.values()),
        "paradigms": {
            uid: counts | {"accuracy": counts["correct"] / counts["pairs"]}
            for uid, counts in sorted(by_uid.items())
        },
    }


def format_blimp(result: dict[str, Any]) -> str:
    width = max(len("all"), *(len(uid) for uid in result["paradigms"]))
    lines = [f"{'paradigm':<{width}}  accuracy  pairs  ties"]
    for uid, counts in result["paradigms"].items():
        lines.append(
            f"{uid:<{width}}  {100 * counts['accuracy']:7.2f}%  {counts['pairs']:5d}  "
            f"{counts['ties']:4d}"
        )
    lines.append(
        f"{'all':<{width}}  {100 * result['accuracy']:7.2f}%  {result['pairs']:5d}  "
        f"{result['ties']:4d}"
    )
    return "\n".join(lines)
