"""Trees from a model's tree signal: the one place a `treernn.encoders.base.TreeSignal`
becomes trees.

`trees_from_signal` dispatches on the signal's kind:

- ``"distances"`` (ON-LSTM, Sec. 5.2, Eq. 15): per layer, the distances read at each sentence's
  leaves give a greedy tree (`treernn.parsing.trees.greedy_tree`: split before the largest
  distance, recursively). A large distance at a token means the gate erased much of the memory
  there, i.e. a constituent ended before it.
- ``"attention"`` (Ordered Memory, Algorithm 2): one tree per sentence from the argmax slot of
  each step's pointer (`treernn.parsing.om_trees`), restricted to the leaves.

``leaf_positions`` say where each sentence's leaves sit among the tokens the model read: logic
formulas are read with their brackets but scored over the other tokens; the language model reads
``<eos> w_1 ... w_n <eos>`` and is scored over the words. With ``bracket_distances="drop"`` a leaf
keeps the distance read at the leaf itself; ``"max"`` gives it the largest distance over the tokens
since the previous leaf (see `leaf_distances`).

Language-model sentences (ON-LSTM paper, Sec. 5.2): `sentence_signals` reads each sentence
as in language modelling (eval mode, a fresh zero state, ``<eos>`` on both sides, as the authors'
``test_phrase_grammar.py`` does, REFERENCE.md) and keeps each sentence's own row of the signal.
Sentences are batched with right padding and the padding mask (padding changes no real step),
sorted by length to pad little; the result is the same as one sentence at a time.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from treernn.encoders.base import Encoder, TreeSignal
from treernn.errors import CheckpointError
from treernn.parsing.om_trees import induce_trees as attention_trees
from treernn.parsing.trees import BRACKET_DISTANCES, BracketDistances, Tree, greedy_tree


class NoDistancesError(CheckpointError, ValueError):
    """The encoder produces no tree signal (or not the one asked for), so no tree can be induced:
    the checkpoint is of the wrong kind of model for the command."""


class InductionError(RuntimeError):
    """The model failed on a batch; the message names its first sentences. A bug, not a user's
    mistake: it keeps its traceback."""


def leaf_distances(
    distances: Tensor, leaf_positions: Sequence[int], bracket_distances: BracketDistances = "drop"
) -> Tensor:
    """(L, T) per-token distances of one sentence -> (L, n) distances of its n leaves.

    ``drop``: the distance read at each leaf. ``max``: the largest distance over the tokens after
    the previous leaf up to and including this leaf (for the first leaf: from the first token).
    """
    if bracket_distances not in BRACKET_DISTANCES:
        raise ValueError(f"bracket_distances={bracket_distances!r}: use one of {BRACKET_DISTANCES}")
    positions = list(leaf_positions)
    if not positions:
        raise ValueError("a sentence without leaves has no tree")
    if bracket_distances == "drop":
        return distances[:, positions]
    starts = [0, *(position + 1 for position in positions[:-1])]
    gaps = [distances[:, start : end + 1].amax(1) for start, end in zip(starts, positions)]
    return torch.stack(gaps, dim=1)


def trees_from_distances(distances: Sequence[Tensor]) -> list[list[Tree]]:
    """Greedy trees per layer: ``trees[layer][sentence]`` from per-sentence ``(L, n)`` distances."""
    if not distances:
        return []
    num_layers = distances[0].size(0)
    return [
        [greedy_tree(sentence_distances[layer].tolist()) for sentence_distances in distances]
        for layer in range(num_layers)
    ]


def trees_from_signal(
    signal: TreeSignal,
    leaf_positions: Sequence[Sequence[int]],
    mask: Tensor | None = None,
    rows: Sequence[int] | None = None,
    bracket_distances: BracketDistances = "drop",
) -> list[list[Tree]]:
    """Induced trees ``trees[layer][i]`` of the batch rows ``rows`` (default: 0, 1, ...).

    signal: the encoder's tree signal on the whole batch (B rows).
    leaf_positions[i]: positions of the scored leaves of row ``rows[i]`` among the tokens read.
    mask: (B, T) the padding mask of the tokens read (needed for ``"attention"``; positions count
        real tokens only).
    bracket_distances: ``"drop"`` or ``"max"`` for distances (see `leaf_distances`); an
        attention tree is always restricted to the leaves.
    Distances give one tree per layer; attention gives one tree per sentence (one layer).
    """
    rows = list(range(len(leaf_positions))) if rows is None else list(rows)
    if len(rows) != len(leaf_positions):
        raise ValueError(f"{len(rows)} rows but {len(leaf_positions)} lists of leaf positions")
    if signal.kind == "distances":
        if bracket_distances not in BRACKET_DISTANCES:
            raise ValueError(
                f"bracket_distances={bracket_distances!r}: use one of {BRACKET_DISTANCES}"
            )
        if not rows:
            return [[] for _ in range(signal.num_layers)]
        distances = signal.values.float().cpu()  # (L, B, T)
        per_sentence = [
            leaf_distances(distances[:, row], positions, bracket_distances)
            for row, positions in zip(rows, leaf_positions)
        ]
        return trees_from_distances(per_sentence)
    if signal.kind == "attention":
        attention = signal.values[0]  # (B, T, N): Ordered Memory has one layer of pointers
        index = torch.tensor(rows, dtype=torch.long, device=attention.device)
        row_mask = None if mask is None else mask[index.to(mask.device)]
        trees = attention_trees(
            attention[index], row_mask, keep=[set(positions) for positions in leaf_positions]
        )
        return [trees]
    raise ValueError(f"no tree induction for a TreeSignal of kind {signal.kind!r}")


@torch.no_grad()
def sentence_signals(
    embedding: nn.Module,
    encoder: Encoder,
    sentences: Sequence[Sequence[int]],
    eos_index: int,
    batch_size: int = 64,
    names: Sequence[str] | None = None,
) -> list[TreeSignal]:
    """The tree signal of each sentence of token ids (without ``<eos>``), read as
    ``<eos> w_1 ... w_n <eos>``: a one-row `TreeSignal` over those n + 2 tokens, on the CPU
    as float (the words are positions 1..n, see `trees_from_sentence_signals`).

    Every sentence needs at least one word. ``names`` (e.g. ``wsj_0001.mrg:3``) identify sentences
    in error messages. ``embedding`` and ``encoder`` are put in eval mode for the call and restored
    afterwards.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size} must be at least 1")
    for index, sentence in enumerate(sentences):
        if len(sentence) == 0:
            name = names[index] if names else str(index)
            raise ValueError(f"sentence {name} has no words; remove it before inducing trees")

    modes = (embedding.training, encoder.training)
    embedding.eval()
    encoder.eval()
    device = next(embedding.parameters()).device
    order = sorted(range(len(sentences)), key=lambda index: len(sentences[index]))
    results: list[TreeSignal | None] = [None] * len(sentences)
    try:
        for first in range(0, len(order), batch_size):
            chunk = order[first : first + batch_size]
            lengths = [len(sentences[index]) + 2 for index in chunk]  # words + 2 x <eos>
            tokens = torch.full((len(chunk), max(lengths)), eos_index, dtype=torch.long)  # (B, T)
            mask = torch.zeros(len(chunk), max(lengths), dtype=torch.bool)  # (B, T)
            for row, index in enumerate(chunk):
                words = torch.as_tensor(list(sentences[index]), dtype=torch.long)
                tokens[row, 1 : 1 + len(words)] = words  # <eos> at 0 and after the last word
                mask[row, : lengths[row]] = True
            tokens, mask = tokens.to(device), mask.to(device)
            try:
                output = encoder(embedding(tokens), mask=mask)  # x: (B, T, D)
            except (RuntimeError, IndexError) as error:
                shown = [names[index] if names else str(index) for index in chunk[:3]]
                raise InductionError(
                    f"the model failed on the batch of sentences {', '.join(shown)}"
                    f"{' ...' if len(chunk) > 3 else ''}: {error}"
                ) from error
            signal = output.tree_signal
            if signal is None:
                raise NoDistancesError(
                    f"{type(encoder).__name__} returned no tree signal (neither syntactic "
                    "distances nor memory attention)"
                )
            values = signal.values.float().cpu()  # (L, B, T) or (L, B, T, N)
            for row, index in enumerate(chunk):
                row_values = values[:, row : row + 1, : lengths[row]].clone()
                results[index] = TreeSignal(signal.kind, row_values)
    finally:
        embedding.train(modes[0])
        encoder.train(modes[1])
    return [result for result in results if result is not None]


def trees_from_sentence_signals(signals: Sequence[TreeSignal]) -> list[list[Tree]]:
    """Trees per layer, ``trees[layer][sentence]``, from `sentence_signals`' output: each
    sentence's tree over its words (the ``<eos>`` on both sides dropped)."""
    per_sentence = [
        trees_from_signal(signal, [range(1, signal.values.size(2) - 1)]) for signal in signals
    ]
    if not per_sentence:
        return []
    return [[trees[layer][0] for trees in per_sentence] for layer in range(len(per_sentence[0]))]


def induce_distances(
    embedding: nn.Module,
    encoder: Encoder,
    sentences: Sequence[Sequence[int]],
    eos_index: int,
    batch_size: int = 64,
    names: Sequence[str] | None = None,
) -> list[Tensor]:
    """Per-sentence syntactic distances of the words only: a list of ``(L, n_words)`` CPU float
    tensors; the distance of ``w_i`` is the one computed while reading ``w_i`` itself (the
    authors' ``distance[layer][1:-1]``). See `sentence_signals` for the arguments."""
    if encoder.tree_signal_kind != "distances":
        raise NoDistancesError(
            f"{type(encoder).__name__} has no syntactic distances "
            f"(tree_signal_kind={encoder.tree_signal_kind!r}); parse F1 needs a model such as "
            "ON-LSTM"
        )
    signals = sentence_signals(embedding, encoder, sentences, eos_index, batch_size, names)
    return [signal.values[:, 0, 1:-1].clone() for signal in signals]
