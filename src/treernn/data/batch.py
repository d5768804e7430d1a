"""What a batch hands an encoder: the inputs of one input view.

Every encoder declares the view of the data it reads (``Encoder.input_view``): ``"tokens"`` (a
token sequence and its padding mask), ``"constituency_tree"`` (the leaves of a gold tree plus
``tree=`` a `treernn.encoders.tree_batch.TreeBatch`) or ``"dependency_tree"``
(breadth-first words plus ``tree=`` a `treernn.encoders.td_treelstm.TopDownTree`). A
DataModule's batch carries every view its data has and hands out one of them with
``batch.encoder_inputs(view)`` as `EncoderInputs`; a view the batch lacks raises
`MissingViewError`, which names the view and the encoders that read it. Tasks ask for the
view of their encoder and never look at what kind of encoder it is.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from treernn.encoders.base import EncoderOutput
from treernn.errors import ConfigValueError

#: who reads each view, for error messages (model config names)
VIEW_READERS: dict[str, str] = {
    "tokens": "sequence encoders (model=lstm, onlstm, transformer, ordered_memory)",
    "constituency_tree": "gold constituency-tree encoders (model=tree_rnn, tree_lstm, grc_tree)",
    "dependency_tree": "dependency-tree encoders (model=td_treelstm, ld_treelstm)",
}


def pad_rows(rows: Iterable[Sequence[int]], fill: int, width: int) -> Tensor:
    """The rows as one ``long`` tensor, each padded with ``fill`` to ``width``: built from padded
    lists in one call, not a slice assignment a row (with the 256 sentences of a logic batch the
    row loop took a fifth of a small ON-LSTM's training update; py-spy, 2026-11-30)."""
    return torch.tensor([[*row, *[fill] * (width - len(row))] for row in rows], dtype=torch.long)


def length_mask(lengths: Sequence[int], width: int) -> Tensor:
    """``(len(lengths), width)``, True over each row's first ``lengths[row]`` positions."""
    return torch.arange(width) < torch.tensor(lengths)[:, None]


class MissingViewError(ConfigValueError):
    """The batch has no inputs for the view the encoder reads (a task/model mismatch)."""


def missing_view(batch: object, view: str, available: Sequence[str]) -> MissingViewError:
    """The one-line error for a batch asked for a view it does not carry."""
    readers = VIEW_READERS.get(view, "no known encoder")
    offered = ", ".join(f"{name!r}" for name in available)
    choices = "; ".join(VIEW_READERS[name] for name in available if name in VIEW_READERS)
    return MissingViewError(
        f"{type(batch).__name__} has no {view!r} input view, which {readers} read; this data "
        f"offers {offered}: pick one of {choices}"
    )


@dataclass
class EncoderInputs:
    """The inputs of one view of a batch.

    tokens: (B, T) ids the task embeds; mask: (B, T) True at real tokens (None: no padding).
    kwargs: extra keywords for the encoder, e.g. ``tree=``.
    targets / target_mask: (B, T') the words a language model predicts from this view and which of
        them are real; ``hidden[:, first_predicting_step:]`` are the encoder states that predict
        them (None for tasks that predict no words).
    """

    view: str
    tokens: Tensor
    mask: Tensor | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)
    targets: Tensor | None = None
    target_mask: Tensor | None = None
    first_predicting_step: int = 0

    def __len__(self) -> int:
        return self.tokens.size(0)


@dataclass
class EncodedBatch:
    """The inputs a task gave its encoder and what came out. Evaluation steps return it, so that
    callbacks (e.g. tree F1) reuse the pass instead of running the encoder again."""

    inputs: EncoderInputs
    output: EncoderOutput
