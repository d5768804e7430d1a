"""Reading and writing dependency treebanks (CoNLL-U and CoNLL-X), for the Top-down Tree LSTM.

Files (blank-line separated sentences, 10 columns; tabs, or runs of spaces for old CoNLL-X files)
are read with the ``conllu`` library. Comment lines, multiword-token ranges (``1-2``) and empty
nodes (``8.1``) are skipped, as the authors' reader does. A sentence with a malformed line, a
missing or out-of-range head, a cycle, or (by default) a non-projective tree is reported as
``file:line: reason`` and skipped (``on_error="skip"``) or rejected with
`DependencyFormatError` (``on_error="raise"``). Every skipped sentence is counted in the
`ReadReport`; nothing is dropped silently.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import conllu

from treernn.errors import DataError
from treernn.files import atomic_write

log = logging.getLogger(__name__)

OnError = Literal["skip", "raise"]


class DependencyFormatError(DataError, ValueError):
    """A treebank sentence that cannot be used; the message names file and line."""


@dataclass(frozen=True)
class DependencyTree:
    """One sentence: ``heads[i]`` is the 1-based head of word ``i`` (0 = ROOT)."""

    words: tuple[str, ...]
    heads: tuple[int, ...]
    labels: tuple[str, ...] = ()
    source: str = ""  # "file:line" of the sentence's first token line
    metadata: dict[str, str] = field(default_factory=dict, compare=False, hash=False)
    #: part-of-speech tags per word, universal (UPOS) and the treebank's own (XPOS); "_" where the
    #: file has none, empty for a tree built without them
    upos: tuple[str, ...] = field(default=(), compare=False)
    xpos: tuple[str, ...] = field(default=(), compare=False)

    def __len__(self) -> int:
        return len(self.words)


@dataclass
class ReadReport:
    """What a reader kept and skipped; one ``file:line: reason`` per skipped sentence."""

    path: str
    sentences: int = 0
    kept: int = 0
    skipped: Counter = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)

    def summary(self) -> str:
        reasons = ", ".join(f"{count} {reason}" for reason, count in sorted(self.skipped.items()))
        return f"{self.path}: kept {self.kept} of {self.sentences} sentences" + (
            f"; skipped {reasons}" if reasons else ""
        )


# ----------------------------------------------------------------------------- tree checks


def find_cycle(heads: Sequence[int]) -> int | None:
    """The 1-based index of a word on a cycle (never reaching ROOT), or None."""
    n = len(heads)
    for start in range(1, n + 1):
        node, steps = start, 0
        while node != 0 and steps <= n:
            node, steps = heads[node - 1], steps + 1
        if node != 0:
            return start
    return None


def is_projective(heads: Sequence[int]) -> bool:
    """True when no two arcs cross (arcs from ROOT at position 0 included)."""
    arcs = [(min(h, d), max(h, d)) for d, h in enumerate(heads, start=1)]
    for left, right in arcs:
        for other_left, other_right in arcs:
            if left < other_left < right < other_right:
                return False
    return True


# ----------------------------------------------------------------------------- reading

_ID = re.compile(r"^\d+$")


def _blocks(lines: Iterable[str]) -> Iterator[tuple[int, list[tuple[int, str]]]]:
    """Blank-line separated sentences as (first line number, [(line number, line)])."""
    block: list[tuple[int, str]] = []
    for number, raw in enumerate(lines, start=1):
        line = raw.rstrip("\r\n")
        if line.strip():
            block.append((number, line))
        elif block:
            yield block[0][0], block
            block = []
    if block:
        yield block[0][0], block


def _sentence(
    block: list[tuple[int, str]], path: str, projective_only: bool
) -> tuple[DependencyTree | None, str, str]:
    """Parse one block; returns (tree, "", "") or (None, reason key, "file:line: message")."""
    token_lines: list[tuple[int, str]] = []
    metadata: dict[str, str] = {}
    for number, line in block:
        if line.startswith("#"):
            key, _, value = line[1:].partition("=")
            if value:
                metadata[key.strip()] = value.strip()
            continue
        fields = line.split("\t") if "\t" in line else line.split()
        if len(fields) != 10:
            return (
                None,
                "malformed line",
                (
                    f"{path}:{number}: expected 10 tab-separated columns, found {len(fields)}; "
                    "fix the line or read with on_error='skip'"
                ),
            )
        if not _ID.match(fields[0]):
            continue  # multiword-token range "1-2" or empty node "8.1"
        token_lines.append((number, "\t".join(fields)))
    if not token_lines:
        first = block[0][0]
        return None, "empty sentence", f"{path}:{first}: a sentence with no word lines"
    try:
        tokens = conllu.parse("\n".join(line for _, line in token_lines) + "\n\n")[0]
    except conllu.exceptions.ParseException as error:  # pragma: no cover - guarded above
        return None, "malformed line", f"{path}:{token_lines[0][0]}: {error}"
    words, heads, labels, upos, xpos = [], [], [], [], []
    for position, (token, (number, _)) in enumerate(zip(tokens, token_lines), start=1):
        if token["id"] != position:
            return (
                None,
                "malformed line",
                (
                    f"{path}:{number}: word id {token['id']} where {position} was expected; "
                    "ids must count 1, 2, 3, ..."
                ),
            )
        head = token["head"]
        if head is None:
            return None, "missing head", f"{path}:{number}: word {position} has no head ('_')"
        if not isinstance(head, int) or not 0 <= head <= len(token_lines) or head == position:
            return (
                None,
                "bad head",
                (
                    f"{path}:{number}: head {head!r} of word {position} is not a word of the "
                    "sentence"
                ),
            )
        words.append(token["form"])
        heads.append(head)
        labels.append(token["deprel"] or "_")
        upos.append(token["upos"] or "_")
        xpos.append(token["xpos"] or "_")
    first = token_lines[0][0]
    cyclic = find_cycle(heads)
    if cyclic is not None:
        line = token_lines[cyclic - 1][0]
        return None, "cyclic", f"{path}:{line}: word {cyclic} is on a cycle (never reaches ROOT)"
    if projective_only and not is_projective(heads):
        return None, "non-projective", f"{path}:{first}: non-projective tree (crossing arcs)"
    tree = DependencyTree(
        tuple(words),
        tuple(heads),
        tuple(labels),
        source=f"{path}:{first}",
        metadata=metadata,
        upos=tuple(upos),
        xpos=tuple(xpos),
    )
    return tree, "", ""


def read_dependency_text(
    lines: Iterable[str],
    path: str = "<text>",
    on_error: OnError = "skip",
    projective_only: bool = True,
    max_length: int | None = None,
) -> tuple[list[DependencyTree], ReadReport]:
    """Read CoNLL-U/CoNLL-X lines; see the module docstring for what is skipped or raised."""
    if on_error not in ("skip", "raise"):
        raise ValueError(f"on_error={on_error!r}: use 'skip' or 'raise'")
    report = ReadReport(path=path)
    trees: list[DependencyTree] = []
    for _, block in _blocks(lines):
        report.sentences += 1
        tree, reason, message = _sentence(block, path, projective_only)
        if tree is not None and max_length is not None and len(tree) > max_length:
            reason, message = "too long", f"{tree.source}: {len(tree)} words > {max_length}"
            tree = None
            report.skipped[reason] += 1
            continue  # the paper's length cut is a filter, not an error
        if tree is None:
            if on_error == "raise":
                raise DependencyFormatError(message)
            report.skipped[reason] += 1
            report.problems.append(message)
            continue
        trees.append(tree)
    report.kept = len(trees)
    for message in report.problems[:5]:
        log.warning("skipped %s", message)
    if report.skipped:
        log.warning("%s", report.summary())
    return trees, report


def read_dependency_file(
    path: str | Path,
    on_error: OnError = "skip",
    projective_only: bool = True,
    max_length: int | None = None,
) -> tuple[list[DependencyTree], ReadReport]:
    """Read a CoNLL-U/CoNLL-X file (UTF-8)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such treebank file; check data_dir and the file name")
    with path.open(encoding="utf-8") as handle:
        return read_dependency_text(handle, str(path), on_error, projective_only, max_length)


def write_conllu(trees: Iterable[DependencyTree], path: str | Path) -> None:
    """Write trees as CoNLL-U (FORM, UPOS, XPOS, HEAD, DEPREL filled; metadata kept as
    comments), whole or not at all (a temporary file renamed into place)."""
    lines = []
    for tree in trees:
        for key, value in tree.metadata.items():
            lines.append(f"# {key} = {value}\n")
        labels = tree.labels or ("dep",) * len(tree)
        upos = tree.upos or ("_",) * len(tree)
        xpos = tree.xpos or ("_",) * len(tree)
        columns = zip(tree.words, upos, xpos, tree.heads, labels)
        for index, (word, universal, own, head, label) in enumerate(columns, 1):
            lines.append(f"{index}\t{word}\t_\t{universal}\t{own}\t_\t{head}\t{label}\t_\t_\n")
        lines.append("\n")
    atomic_write(path, lambda handle: handle.write("".join(lines).encode("utf-8")))
