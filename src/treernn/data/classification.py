"""Shared pieces for sentence and sentence-pair classification data (ListOps, logic, SST).

An `Example` holds one or two `Sentence` objects, a label, a length bucket (number of
operators for logical inference, a length range for ListOps and SST) and an evaluation group (the
test split it belongs to, e.g. the plain length test or a systematic-generalisation test).
`collate` turns a list of examples into a `ClassificationBatch`; pairs are stacked
sentence-major (rows ``[0, B)`` are first sentences, ``[B, 2B)`` second ones), so one encoder call
reads both, as the Ordered Memory code does.

Each sentence carries two views: ``token_ids`` (what a sequence model reads, brackets included
where the task feeds them) and ``leaf_ids`` (the tree's leaves, what a gold-tree model reads), with
``tree`` given as nested tuples of leaf positions (see CONTRIBUTING.md). ``leaf_positions`` says
where each leaf sits among ``token_ids`` (None: the two views are the same), so that a per-token
signal of a sequence model (ON-LSTM's distances) can be read at the leaves.

The batch hands out the inputs of the view an encoder reads (`treernn.data.batch`):
``"tokens"`` (the token view) or ``"constituency_tree"`` (the leaves with ``tree=`` a
`treernn.encoders.tree_batch.TreeBatch`, built on first use on the batch's device).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Sampler, SequentialSampler

from treernn.data.batch import EncoderInputs, length_mask, missing_view, pad_rows
from treernn.data.sampling import EpochShuffle, LengthBucketBatchSampler, ResumableTrainBatches
from treernn.data.vocab import Vocabulary
from treernn.encoders.tree_batch import TreeBatch
from treernn.errors import DataError
from treernn.parsing.trees import Tree  # an int leaf or a tuple of subtrees


class DataFormatError(DataError, ValueError):
    """A malformed line in a dataset file; the message names the file and line."""


def format_error(path: str | Path, line_number: int, what: str) -> DataFormatError:
    return DataFormatError(
        f"{path}:{line_number}: {what}. Fix or remove this line, or download the file again."
    )


def read_tsv_lines(path: str | Path, num_fields: int) -> Iterator[tuple[int, list[str]]]:
    """(line number, fields) of each non-blank line of a tab-separated file; a line with another
    number of fields raises `DataFormatError` naming the file and line."""
    with open(path, encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, start=1):
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            fields = line.split("\t")
            if len(fields) != num_fields:
                raise format_error(
                    path,
                    line_number,
                    f"expected {num_fields} tab-separated fields, found {len(fields)}",
                )
            yield line_number, fields


def parse_bracketed(
    tokens: Sequence[str], open_token: str = "(", close_token: str = ")"
) -> tuple[list[int], Tree]:
    """Read a bracketed token sequence: (positions of the non-bracket tokens, tree over them).

    ``( d ( and e ) )`` -> ([1, 3, 4], (0, (1, 2))). A bracket around a single subtree is
    collapsed; a bare token gives the tree ``0``. Iterative, so deep trees do not hit Python's
    recursion limit. Raises ``ValueError`` (without file context) on unbalanced or empty brackets.
    """
    leaf_positions: list[int] = []
    stack: list[list[Tree]] = []
    current: list[Tree] = []  # children of the innermost open bracket
    for position, token in enumerate(tokens):
        if token == open_token:
            stack.append(current)
            current = []
        elif token == close_token:
            if not stack:
                raise ValueError(
                    f"unbalanced brackets: '{close_token}' at token {position} closes nothing"
                )
            if not current:
                raise ValueError(f"empty brackets ending at token {position}")
            node = current[0] if len(current) == 1 else tuple(current)
            current = stack.pop()
            current.append(node)
        else:
            current.append(len(leaf_positions))
            leaf_positions.append(position)
    if stack:
        raise ValueError(f"unbalanced brackets: {len(stack)} '{open_token}' never closed")
    if not current:
        raise ValueError("no tokens")
    return leaf_positions, current[0] if len(current) == 1 else tuple(current)


@dataclass(frozen=True)
class Sentence:
    """One sentence: ids for sequence models, ids of the tree's leaves, and the gold tree.

    ``leaf_positions[i]`` is the index in ``token_ids`` of leaf ``i``; None when ``token_ids`` and
    ``leaf_ids`` are the same sequence.
    """

    token_ids: tuple[int, ...]
    leaf_ids: tuple[int, ...]
    tree: Tree
    leaf_positions: tuple[int, ...] | None = None

    def positions_of_leaves(self) -> tuple[int, ...]:
        if self.leaf_positions is None:
            return tuple(range(len(self.leaf_ids)))
        return self.leaf_positions


@dataclass(frozen=True)
class Example:
    sentences: tuple[Sentence, ...]
    label: int
    bucket: int = 0
    group: int = 0

    @property
    def length(self) -> int:
        return max(len(sentence.token_ids) for sentence in self.sentences)


@dataclass
class ClassificationBatch:
    """A padded batch (right padding). S sentences per example, stacked sentence-major.

    tokens / mask: (S*B, T) ids and real-token mask of what sequence models read.
    leaf_tokens / leaf_mask: (S*B, L) the trees' leaves, what gold-tree models read.
    leaf_index: (S*B, L) position of each leaf in ``tokens`` (0 at padding).
    trees: S*B trees over leaf positions. labels, buckets, groups: (B,).
    """

    tokens: Tensor
    mask: Tensor
    leaf_tokens: Tensor
    leaf_mask: Tensor
    trees: list[Tree]
    labels: Tensor
    buckets: Tensor
    groups: Tensor
    leaf_index: Tensor | None = None
    num_sentences: int = 1
    extras: dict[str, Any] = field(default_factory=dict)

    #: the input views this batch offers (see `encoder_inputs`)
    views = ("tokens", "constituency_tree")

    def __len__(self) -> int:
        return self.labels.size(0)

    def encoder_inputs(self, view: str) -> EncoderInputs:
        """The inputs of ``view`` for all S*B sentence rows."""
        if view == "tokens":
            return EncoderInputs(view, self.tokens, self.mask)
        if view == "constituency_tree":
            tree = TreeBatch.from_trees(
                self.trees,
                lengths=self.leaf_mask.sum(1).tolist(),
                max_length=self.leaf_tokens.size(1),
            )
            tree = tree.to(self.leaf_tokens.device)
            return EncoderInputs(view, self.leaf_tokens, self.leaf_mask, {"tree": tree})
        raise missing_view(self, view, self.views)

    def leaf_positions(self, view: str, rows: Sequence[int]) -> list[list[int]]:
        """Where the leaves of the gold tree of each of ``rows`` sit among the tokens of ``view``
        (the token view reads brackets on logic; the tree view reads the leaves only)."""
        lengths = self.leaf_mask.sum(1).tolist()
        if view == "tokens" and self.leaf_index is not None:
            return [self.leaf_index[row, : lengths[row]].tolist() for row in rows]
        if view not in self.views:
            raise missing_view(self, view, self.views)
        return [list(range(lengths[row])) for row in rows]

    def to(self, device: torch.device | str) -> ClassificationBatch:
        """Move the tensors only. Lightning calls this directly, so it never walks the trees."""
        return ClassificationBatch(
            tokens=self.tokens.to(device),
            mask=self.mask.to(device),
            leaf_tokens=self.leaf_tokens.to(device),
            leaf_mask=self.leaf_mask.to(device),
            trees=self.trees,
            labels=self.labels.to(device),
            buckets=self.buckets.to(device),
            groups=self.groups.to(device),
            leaf_index=None if self.leaf_index is None else self.leaf_index.to(device),
            num_sentences=self.num_sentences,
            extras=self.extras,
        )


class Collator:
    """Picklable collate function (DataLoader workers need one)."""

    def __init__(self, pad_index: int) -> None:
        self.pad_index = pad_index

    def __call__(self, examples: list[Example]) -> ClassificationBatch:
        num_sentences = len(examples[0].sentences)
        # sentence-major: all first sentences, then all second sentences
        sentences = [ex.sentences[s] for s in range(num_sentences) for ex in examples]
        tokens, mask = _pad_with_lengths([s.token_ids for s in sentences], self.pad_index)
        leaf_tokens, leaf_mask = _pad_with_lengths([s.leaf_ids for s in sentences], self.pad_index)
        leaf_index, _ = _pad_with_lengths([s.positions_of_leaves() for s in sentences], 0)
        return ClassificationBatch(
            tokens=tokens,
            mask=mask,
            leaf_tokens=leaf_tokens,
            leaf_mask=leaf_mask,
            trees=[s.tree for s in sentences],
            labels=torch.tensor([ex.label for ex in examples], dtype=torch.long),
            buckets=torch.tensor([ex.bucket for ex in examples], dtype=torch.long),
            groups=torch.tensor([ex.group for ex in examples], dtype=torch.long),
            leaf_index=leaf_index,
            num_sentences=num_sentences,
        )


def _pad_with_lengths(sequences: Sequence[Sequence[int]], pad_index: int) -> tuple[Tensor, Tensor]:
    """``(ids, mask)``: the sequences as rows padded with ``pad_index`` to the longest (at least
    1), and True over each row's own length. The mask comes from the lengths, so a real token
    equal to ``pad_index`` stays visible."""
    lengths = [len(sequence) for sequence in sequences]
    width = max(1, max(lengths))
    return pad_rows(sequences, pad_index, width), length_mask(lengths, width)


class ClassificationDataModule(ResumableTrainBatches, pl.LightningDataModule):
    """Base DataModule: subclasses fill ``self.splits`` ({"train", "val", "test"} -> examples)
    in ``setup`` and define the fixed vocabulary, label, bucket and group names."""

    #: 1 for single sentences, 2 for sentence pairs
    num_sentences: int = 1

    def __init__(
        self,
        data_dir: str | Path | None = None,
        batch_size: int = 128,
        eval_batch_size: int | None = None,
        num_workers: int = 0,
        length_bucketing: bool = True,
    ) -> None:
        super().__init__()
        self.data_dir = Path(data_dir).expanduser() if data_dir else None
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size or batch_size
        self.num_workers = num_workers
        self.length_bucketing = length_bucketing
        self.splits: dict[str, list[Example]] = {}

    # --- what subclasses define -------------------------------------------------------------
    vocab: Vocabulary
    label_names: list[str]
    bucket_names: list[str]
    group_names: list[str]

    def task_kwargs(self) -> dict[str, Any]:
        """Constructor arguments for the classification task (no file is read)."""
        return {
            "vocab_size": len(self.vocab),
            "num_classes": len(self.label_names),
            "vocab": self.vocab,
            "pad_index": self.vocab.pad_index,
            "num_sentences": self.num_sentences,
            "label_names": list(self.label_names),
            "bucket_names": list(self.bucket_names),
            "group_names": list(self.group_names),
        }

    # --- loaders ------------------------------------------------------------------------------
    def _loader(self, stage: str, shuffle: bool) -> DataLoader:
        if stage not in self.splits:
            raise RuntimeError(f"{type(self).__name__}: call setup() before {stage} data")
        examples = self.splits[stage]
        batch_size = self.batch_size if stage == "train" else self.eval_batch_size
        sampler: Sampler[int] = (
            EpochShuffle(len(examples)) if shuffle else SequentialSampler(examples)
        )
        batch_sampler = LengthBucketBatchSampler(
            sampler,
            batch_size,
            drop_last=False,
            lengths=[example.length for example in examples] if self.length_bucketing else (),
            # evaluation: one pool over everything, kept in sorted order
            pool_batches=50 if shuffle else max(1, len(examples)),
            shuffle_batches=shuffle and self.length_bucketing,
        )
        if shuffle:
            batch_sampler = self._resumable(batch_sampler)
        return DataLoader(
            examples,
            batch_sampler=batch_sampler,
            num_workers=self.num_workers,
            collate_fn=Collator(self.vocab.pad_index),
            # the loader's own generator: iterating data never draws from torch's global one
            generator=torch.Generator(),
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", shuffle=False)

    def split_sizes(self) -> dict[str, int]:
        return {name: len(examples) for name, examples in self.splits.items()}
