"""Stanford Sentiment Treebank (Socher et al. 2013): SST-2 and SST-5 sentence classification.

Files: ``sst/trees/{train,dev,test}.txt`` from https://nlp.stanford.edu/sentiment/trainDevTestTrees_PTB.zip
(sha256 below; see ``data/sst/SOURCE.md``), one binarised PTB-format tree per line whose every node
carries a label 0-4, e.g. ``(3 (2 (2 The) (2 Rock)) (4 ...))``.

As the Ordered Memory code reads it (torchtext ``SST``): words lower-cased; SST-5 keeps the five
labels, SST-2 drops neutral (2) and maps 0/1 to negative, 3/4 to positive; with ``train_subtrees``
every node of every training tree (single words included) is a training example ("all labelled
phrases", the paper's setting), otherwise only whole sentences. Validation and test use whole
sentences. Each example keeps its gold binary tree over word positions; test accuracy is also
reported per sentence length (buckets of 10 words).

Word vectors: ``glove_path`` names a local GloVe file (`treernn.data.embeddings`; it is read
and checked in ``setup``, before training). Without one the task trains its embeddings. The
vocabulary holds the training words, plus, with GloVe, the dev/test words that have a vector (their
vectors are fixed by the file, so no label information leaks).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import urllib.request
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import torch

from treernn.data.classification import (
    ClassificationDataModule,
    Example,
    Sentence,
    Tree,
    format_error,
)
from treernn.data.download import (
    ChecksumError,
    DatasetNotFoundError,
    RemoteFile,
    cache_dir,
    default_data_dir,
    file_digest,
    verify_once,
)
from treernn.data.embeddings import PretrainedVectors, load_vectors
from treernn.data.vocab import Vocabulary
from treernn.errors import ConfigValueError

log = logging.getLogger(__name__)

SST_URL = "https://nlp.stanford.edu/sentiment/trainDevTestTrees_PTB.zip"
SST_SHA256 = {
    "train": "e2f3f41b0b1e6d4dddc0effe3bfc2d27ed8928079aa9a03d652311614fc5feb7",
    "dev": "0e9336aed6e4730e19f58d00a77b3f0297efdb755f7b5e598c98a05e3f97ea40",
    "test": "6e54806dee95cf80cd918e7dfb3f6770f6df24bf826f289a4d1f709e1c8f6761",
}
SST5_LABELS = ["very negative", "negative", "neutral", "positive", "very positive"]
SST2_LABELS = ["negative", "positive"]
#: Lower edges of the test-accuracy buckets by sentence length in words; the last is open-ended.
LENGTH_EDGES = (1, 11, 21, 31)
BUCKET_NAMES = ["len1-10", "len11-20", "len21-30", "len31+"]


class SentimentTree:
    """A parsed SST line: its words, its binary tree, and per node (leaves included) the span,
    the label and the node's own tree (over absolute word positions), root first."""

    def __init__(
        self, words: list[str], tree: Tree, nodes: list[tuple[int, int, int, Tree]]
    ) -> None:
        self.words = words
        self.tree = tree
        self.nodes = nodes  # (start, end, label, subtree)

    @property
    def label(self) -> int:
        return self.nodes[0][2]


def parse_sentiment_tree(line: str) -> SentimentTree:
    """Read ``(3 (2 The) (4 (3 good) (2 film)))``; ``ValueError`` on malformed input."""
    text = line.strip()
    if not text.startswith("("):
        raise ValueError("a tree must start with '('")
    words: list[str] = []
    nodes: list[tuple[int, int, int, Tree]] = []
    open_nodes: list[tuple[int, int, int, list[Tree]]] = []  # (node id, label, start, children)
    result: Tree | None = None
    position, length = 0, len(text)
    while position < length:
        char = text[position]
        if char == " ":
            position += 1
            continue
        end = position + 1
        if char == "(":
            while end < length and text[end] not in " ()":
                end += 1
            label_text = text[position + 1 : end]
            if not label_text.isdigit() or int(label_text) > 4:
                raise ValueError(f"node label {label_text!r} is not 0-4")
            open_nodes.append((len(nodes), int(label_text), len(words), []))
            nodes.append((0, 0, 0, 0))  # filled in when the node closes
        elif char == ")":
            if not open_nodes:
                raise ValueError("unbalanced ')'")
            node_id, label, start, children = open_nodes.pop()
            if not children:
                raise ValueError("a node with no word")
            if result is not None:
                raise ValueError("text after the tree")
            subtree: Tree = children[0] if len(children) == 1 else tuple(children)
            nodes[node_id] = (start, len(words), label, subtree)
            if open_nodes:
                open_nodes[-1][3].append(subtree)
            else:
                result = subtree
        else:
            while end < length and text[end] not in " ()":
                end += 1
            if not open_nodes:
                raise ValueError("a word outside any node")
            open_nodes[-1][3].append(len(words))
            words.append(text[position:end])
        position = end
    if open_nodes or result is None:
        raise ValueError("unbalanced '('")
    return SentimentTree(words, result, nodes)


def read_sst_file(path: str | Path) -> list[SentimentTree]:
    trees = []
    with open(path, encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                trees.append(parse_sentiment_tree(line))
            except ValueError as error:
                raise format_error(path, line_number, f"not an SST tree ({error})") from None
    return trees


def shift_tree(tree: Tree, offset: int) -> Tree:
    """Renumber a tree's leaves by ``-offset`` (a node's tree, counted from its first word)."""
    if isinstance(tree, int):
        return tree - offset
    return tuple(shift_tree(child, offset) for child in tree)


class SSTDataModule(ClassificationDataModule):
    """SST-2 (``num_classes=2``) or SST-5 (``num_classes=5``).

    Args:
        train_subtrees: train on every labelled node (the paper) or on whole sentences only.
        glove_path: a local GloVe file (see `treernn.data.embeddings`); None trains the
            embeddings. ``embedding_size`` must equal its dimension (checked in ``setup``).
        lowercase: lower-case words (as the authors' torchtext field does).
        train_limit: keep the first n training sentences (before subtrees), for quick runs.
        download: fetch the zip from the canonical URL in ``prepare_data`` if the files are missing.
        verify_checksums: check the local files against their published sha256.
    """

    num_sentences = 1

    def __init__(
        self,
        data_dir: str | Path | None = None,
        num_classes: Literal[2, 5] = 2,
        train_subtrees: bool = True,
        glove_path: str | Path | None = None,
        embedding_size: int | None = None,
        lowercase: bool = True,
        train_limit: int | None = None,
        download: bool = True,
        verify_checksums: bool = True,
        batch_size: int = 128,
        eval_batch_size: int | None = None,
        num_workers: int = 0,
        length_bucketing: bool = True,
    ) -> None:
        super().__init__(data_dir, batch_size, eval_batch_size, num_workers, length_bucketing)
        if num_classes not in (2, 5):
            raise ConfigValueError(f"num_classes={num_classes}: SST is SST-2 (2) or SST-5 (5)")
        self.num_classes = num_classes
        self.train_subtrees = train_subtrees
        self.glove_path = glove_path
        self.embedding_size = embedding_size
        self.lowercase = lowercase
        self.train_limit = train_limit
        self.download = download
        self.verify_checksums = verify_checksums
        self.label_names = SST2_LABELS if num_classes == 2 else SST5_LABELS
        self.bucket_names = BUCKET_NAMES
        self.group_names = ["test"]
        self.vectors: PretrainedVectors | None = None

    # --- files --------------------------------------------------------------------------------
    def _folder(self) -> Path:
        return (self.data_dir or default_data_dir()) / "sst" / "trees"

    def _paths(self) -> dict[str, Path]:
        local, cached = self._folder(), cache_dir() / "sst" / "trees"
        for folder in (local, cached):
            paths = {split: folder / f"{split}.txt" for split in SST_SHA256}
            if all(path.is_file() for path in paths.values()):
                if self.verify_checksums:
                    for split, path in paths.items():
                        remote = RemoteFile(f"trees/{split}.txt", SST_URL, SST_SHA256[split])
                        verify_once(remote, path)
                return paths
        raise DatasetNotFoundError(
            f"SST trees not found in {local} or {cached}: download {SST_URL}, unzip it and put "
            f"trees/train.txt, dev.txt and test.txt in {local} (or set TREERNN_DATA_DIR)"
        )

    def prepare_data(self) -> None:
        try:
            self._paths()
            return
        except DatasetNotFoundError:
            if not self.download:
                raise
        target = cache_dir() / "sst" / "trees"
        target.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=target) as tmp:
            archive = Path(tmp) / "sst.zip"
            try:
                with (
                    urllib.request.urlopen(SST_URL, timeout=60) as response,
                    open(archive, "wb") as out,
                ):
                    shutil.copyfileobj(response, out)
            except Exception as error:  # offline, DNS failure, HTTP error
                raise DatasetNotFoundError(
                    f"could not download {SST_URL} ({error}); unzip it into {self._folder()}"
                ) from None
            with zipfile.ZipFile(archive) as zipped:
                for split, digest in SST_SHA256.items():
                    extracted = Path(zipped.extract(f"trees/{split}.txt", tmp))
                    if file_digest(extracted, "sha256") != digest:
                        raise ChecksumError(f"{SST_URL}: trees/{split}.txt fails its sha256 check")
                    os.replace(extracted, target / f"{split}.txt")

    # --- examples -----------------------------------------------------------------------------
    def _label(self, label: int) -> int | None:
        if self.num_classes == 5:
            return label
        return None if label == 2 else int(label > 2)

    def _words(self, words: Sequence[str]) -> list[str]:
        return [word.lower() for word in words] if self.lowercase else list(words)

    def _examples(self, trees: list[SentimentTree], subtrees: bool) -> list[Example]:
        examples = []
        for tree in trees:
            ids = tuple(self.vocab.encode(self._words(tree.words)))
            nodes = tree.nodes if subtrees else tree.nodes[:1]
            for start, end, label, node in nodes:
                target = self._label(label)
                if target is None:
                    continue
                span_ids = ids[start:end]
                sentence = Sentence(span_ids, span_ids, shift_tree(node, start))
                bucket = sum(end - start >= edge for edge in LENGTH_EDGES) - 1
                examples.append(Example((sentence,), target, bucket=bucket))
        return examples

    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return
        trees = {split: read_sst_file(path) for split, path in self._paths().items()}
        if self.train_limit is not None:
            trees["train"] = trees["train"][: self.train_limit]
        self.vocab = Vocabulary(
            (word for tree in trees["train"] for word in self._words(tree.words)),
            specials=("<pad>", "<unk>"),
        )
        if self.glove_path is not None:
            # one pass over the (large) file for train + dev/test words; dev/test words join the
            # vocabulary only if the file has a vector for them
            everything = Vocabulary(self.vocab.itos, specials=())
            for split in ("dev", "test"):
                for tree in trees[split]:
                    for word in self._words(tree.words):
                        everything.add(word)
            vectors = load_vectors(self.glove_path, everything, self.embedding_size)
            for word in everything.itos[len(self.vocab) :]:
                if vectors.found[everything.stoi[word]]:
                    self.vocab.add(word)
            rows = torch.tensor([everything.stoi[word] for word in self.vocab.itos])
            self.vectors = PretrainedVectors(vectors.weights[rows], vectors.found[rows])
            log.info(
                "SST: %d of %d words have GloVe vectors (%s)",
                int(self.vectors.found.sum()), len(self.vocab), self.glove_path,
            )  # fmt: skip
        else:
            log.info("SST: no glove_path, the task trains its embeddings")
        self.splits = {
            "train": self._examples(trees["train"], self.train_subtrees),
            "val": self._examples(trees["dev"], False),
            "test": self._examples(trees["test"], False),
        }

    def task_kwargs(self) -> dict[str, Any]:
        kwargs = super().task_kwargs()
        if self.vectors is not None:
            kwargs["pretrained_embeddings"] = self.vectors.weights
        return kwargs
