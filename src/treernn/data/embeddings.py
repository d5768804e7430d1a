"""Pretrained word vectors (GloVe, Pennington et al. 2014) for a vocabulary.

Ordered Memory's SST setting uses frozen GloVe 840B 300d (REFERENCE.md). The files are too large to
ship or to download silently, so a run names a local file:

- https://nlp.stanford.edu/data/glove.840B.300d.zip (2.0 GB; the paper's vectors), or
- https://nlp.stanford.edu/data/glove.6B.zip (822 MB; 50/100/200/300 d, lower-cased; small runs).

Accepted formats: the GloVe text format (``word v1 ... vD`` per line, as ``.txt``, ``.txt.gz`` or
inside the ``.zip``; in a zip with several files, the one whose name ends in ``{dim}d.txt``). The
dimension and every line are checked while reading, so a wrong file fails before any training with
the file, line and what to change. Words are matched exactly, then through their lower-cased form;
words without a vector get zeros (torchtext's default, which the authors' code used).
"""

from __future__ import annotations

import gzip
import io
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import torch
from torch import Tensor

from treernn.data.vocab import Vocabulary
from treernn.errors import DataError

GLOVE_URLS = {
    "840B.300d": "https://nlp.stanford.edu/data/glove.840B.300d.zip",
    "6B": "https://nlp.stanford.edu/data/glove.6B.zip",
}


class EmbeddingFormatError(DataError, ValueError):
    """A word-vector file that is missing, of the wrong dimension or malformed."""


@dataclass
class PretrainedVectors:
    """A (V, D) matrix aligned with a vocabulary, and which rows came from the file."""

    weights: Tensor  # (V, D) float32
    found: Tensor  # (V,) bool

    @property
    def coverage(self) -> float:
        return float(self.found.float().mean()) if self.found.numel() else 0.0


@contextmanager
def _open_text(path: Path, dim: int | None) -> Iterator[tuple[IO[str], str]]:
    """Yield (text handle, name shown in errors) for .txt, .gz or .zip GloVe files."""
    if path.suffix == ".zip":
        with zipfile.ZipFile(path) as archive:
            members = [name for name in archive.namelist() if name.endswith(".txt")]
            if len(members) > 1 and dim is not None:
                members = [name for name in members if name.endswith(f"{dim}d.txt")]
            if len(members) != 1:
                raise EmbeddingFormatError(
                    f"{path}: expected one GloVe .txt file"
                    + (f" ending in {dim}d.txt" if dim else "")
                    + f" in the archive, found {members or 'none'}; unzip the one you want and "
                    "pass its path"
                )
            with archive.open(members[0]) as raw:
                yield (
                    io.TextIOWrapper(raw, encoding="utf-8", errors="replace"),
                    (f"{path}!{members[0]}"),
                )
    elif path.suffix == ".gz":
        with gzip.open(path, "rt", encoding="utf-8", errors="replace") as handle:
            yield handle, str(path)
    else:
        with open(path, encoding="utf-8", errors="replace") as handle:
            yield handle, str(path)


def load_vectors(path: str | Path, vocab: Vocabulary, dim: int | None = None) -> PretrainedVectors:
    """Read the vectors of ``vocab``'s words from a GloVe file; check it has ``dim`` values a line.

    Raises `EmbeddingFormatError` (file, line, what to do) on a missing file, a dimension
    other than ``dim``, or a malformed line.
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise EmbeddingFormatError(
            f"word vectors not found at {path}: download {GLOVE_URLS['840B.300d']} (the paper's) "
            f"or {GLOVE_URLS['6B']} and set glove_path to the file, or set glove_path=null to "
            "train the embeddings instead"
        )
    exact: dict[int, list[float]] = {}
    lowered: dict[int, list[float]] = {}
    width = dim
    with _open_text(path, dim) as (handle, name):
        for line_number, line in enumerate(handle, start=1):
            line = line.rstrip("\n").rstrip(" ")
            if width is not None and line.count(" ") == width:  # fast path: one-token word
                head = line[: line.find(" ")]
                if head not in vocab.stoi and head.lower() not in vocab.stoi:
                    continue  # not needed: skip parsing 300 numbers
            fields = line.split(" ")
            if len(fields) < 2:
                if not line.strip():
                    continue
                raise EmbeddingFormatError(f"{name}:{line_number}: expected 'word v1 ... vD'")
            if width is None:
                width = len(fields) - 1
            if len(fields) - 1 < width or (line_number == 1 and len(fields) - 1 != width):
                raise EmbeddingFormatError(
                    f"{name}:{line_number}: {len(fields) - 1} values but the embedding size is "
                    f"{width}; use a {width}d file or set the embedding size to "
                    f"{len(fields) - 1}"
                )
            word = " ".join(fields[:-width])  # a few 840B words contain spaces
            index = vocab.stoi.get(word)
            lower_index = None if index is not None else vocab.stoi.get(word.lower())
            if index is None and (lower_index is None or lower_index in lowered):
                continue
            try:
                values = [float(value) for value in fields[-width:]]
            except ValueError:
                raise EmbeddingFormatError(
                    f"{name}:{line_number}: a value of {word!r} is not a number; is this a GloVe "
                    "text file?"
                ) from None
            if index is not None:
                exact.setdefault(index, values)
            else:
                lowered[lower_index] = values
    if width is None:
        raise EmbeddingFormatError(f"{path} holds no vectors")
    weights = torch.zeros(len(vocab), width)
    found = torch.zeros(len(vocab), dtype=torch.bool)
    for index, values in {**lowered, **exact}.items():
        weights[index] = torch.tensor(values)
        found[index] = True
    return PretrainedVectors(weights, found)
