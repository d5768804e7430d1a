"""Scoring dependency trees with a trained dependency language model: what MSR sentence
completion (`treernn.evaluation.completion`), k-best reranking
(`treernn.evaluation.reranking`) and their EWT stand-ins
(`treernn.evaluation.ewt_standins`) share.

The model is a `treernn.tasks.dependency_lm.DependencyLanguageModel` (or anything with its
``vocab``, ``hparams`` (``lowercase``, ``replace_numbers``) and ``sentence_log_probs(batch)``): a
tree model gives log P(S|T) over the breadth-first tree, a sequential LSTM log P(S) of the same
words, so a sequential model scores every tree of one sentence alike.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

import torch

from treernn.data.dependency import (
    DependencyFormatError,
    DependencyTree,
    ReadReport,
    collate_trees,
    encode_tree,
    read_dependency_text,
)
from treernn.data.vocab import Vocabulary
from treernn.errors import CheckpointError, DataError
from treernn.files import read_input_text


def model_vocabulary(task) -> tuple[Vocabulary, bool, bool]:
    """A DependencyLanguageModel's vocabulary and how it normalises words (lowercase, numbers)."""
    if task.vocab is None:
        raise CheckpointError(
            "the model has no vocabulary; was it trained with task=dependency_lm?"
        )
    return (
        Vocabulary(task.vocab, specials=()),
        bool(task.hparams.get("lowercase", True)),
        bool(task.hparams.get("replace_numbers", False)),
    )


@torch.no_grad()
def score_trees(
    task, trees: Sequence[DependencyTree], batch_size: int = 128, unk_penalty: float = 0.0
) -> torch.Tensor:
    """log-probability of each tree's sentence under ``task`` (a DependencyLanguageModel), (N,).

    Trees that encode to the same input (token ids and heads; e.g. two candidates whose different
    words are both ``<unk>``) are scored once and get the very same float: a batched forward pass
    need not give bitwise-equal results for equal rows, and tie detection compares exactly.

    ``unk_penalty`` (nats) is subtracted for every word scored as ``<unk>``. The paper uses none
    (its 65k-word vocabulary leaves few unknown words). With a small vocabulary ``<unk>`` holds the
    mass of all unseen words and an unknown candidate wins too often; log(number of word types
    behind ``<unk>``) spreads that mass uniformly over them.
    """
    vocab, lowercase, replace_numbers = model_vocabulary(task)
    task.eval()
    encoded, position, unique_of = [], {}, []
    for tree in trees:
        item = encode_tree(tree, vocab, lowercase, replace_numbers)
        key = (tuple(item.sequence_tokens), tuple(tree.heads))
        if key not in position:
            position[key] = len(encoded)
            encoded.append(item)
        unique_of.append(position[key])
    scores = []
    for start in range(0, len(encoded), batch_size):
        batch = collate_trees(encoded[start : start + batch_size], vocab.pad_index)
        log_probs = task.sentence_log_probs(batch).double()
        if unk_penalty:
            unknown = (batch.tokens[:, 1:] == vocab.unk_index) & batch.mask[:, 1:]
            log_probs = log_probs - unk_penalty * unknown.sum(1).double()
        scores.append(log_probs)
    if not scores:
        return torch.zeros(0, dtype=torch.float64)
    return torch.cat(scores)[torch.tensor(unique_of, dtype=torch.long)]


def read_conll(
    path: str | Path,
    on_error: str = "raise",
    projective_only: bool = False,
    max_length: int | None = None,
) -> tuple[list[DependencyTree], ReadReport]:
    """What ``read_dependency_file`` reads (trees and its report, its lines split as a run's
    treebank reader splits them), with one `treernn.errors.DataError` naming the file (and
    sentence) that cannot be used: the file is read as a regular file (never a FIFO or a
    device) of at most `treernn.files.INPUT_TEXT_LIMIT` bytes of UTF-8 text."""
    if not Path(path).exists():
        raise DataError(f"{path}: no such CoNLL-U file")
    text = read_input_text(path, "CoNLL-U file")
    # newline=None: the universal newlines of the text-mode file a run's reader opens
    lines = io.StringIO(text, newline=None)
    try:
        return read_dependency_text(lines, str(path), on_error, projective_only, max_length)  # type: ignore[arg-type]
    except DependencyFormatError as error:
        raise DataError(str(error)) from error
