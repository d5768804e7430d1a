"""Tree induction from a language model's syntactic distances (ON-LSTM paper, Sec. 5.2).

The model reads each sentence as in language modelling: eval mode, a fresh zero state,
``<eos> w_1 ... w_n <eos>``. At step t the master forget gate of each layer gives the distance
``d_t = 1 - sum(master_forget_t) / n_chunk`` (Eq. 15, normalised by the number of chunks as in the
authors' code). Which positions belong to the words: the authors' ``test_phrase_grammar.py`` adds
one token before and one after the sentence (REFERENCE.md: ``<eos>`` on both sides) and keeps
``distance[layer][1:-1]``, so the distance of word ``w_i`` is the one computed while reading ``w_i``
itself (step i of the padded sequence); the distances read at the leading and the trailing
``<eos>`` are dropped. A large distance at ``w_i`` means the gate erased much of the memory there,
i.e. a constituent ended before ``w_i``: the greedy builder
(:func:`treernn.parsing.trees.greedy_tree`) splits before it.

Sentences are batched with right padding and the padding mask (the encoder interface guarantees
that padding changes no real step), sorted by length to pad little; the result is the same as one
sentence at a time.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from treernn.encoders.base import Encoder
from treernn.parsing.trees import Tree, greedy_tree


class NoDistancesError(ValueError):
    """The encoder produces no syntactic distances, so no tree can be induced from it."""


class InductionError(RuntimeError):
    """The model failed on a batch; the message names its first sentences."""


@torch.no_grad()
def induce_distances(
    embedding: nn.Embedding,
    encoder: Encoder,
    sentences: Sequence[Sequence[int]],
    eos_index: int,
    batch_size: int = 64,
    names: Sequence[str] | None = None,
) -> list[Tensor]:
    """Per-sentence distances of the words only: a list of ``(L, n_words)`` CPU float tensors.

    ``sentences`` are token ids without ``<eos>``; every sentence needs at least one word.
    ``names`` (e.g. ``wsj_0001.mrg:3``) identify sentences in error messages. The modules are put
    in eval mode for the call and restored afterwards.
    """
    if not getattr(encoder, "has_distances", False):
        raise NoDistancesError(
            f"{type(encoder).__name__} has no syntactic distances (has_distances=False); "
            "parse F1 needs a model such as ON-LSTM"
        )
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size} must be at least 1")
    for index, sentence in enumerate(sentences):
        if len(sentence) == 0:
            name = names[index] if names else str(index)
            raise ValueError(f"sentence {name} has no words; remove it before inducing trees")

    modes = (embedding.training, encoder.training)
    embedding.eval()
    encoder.eval()
    device = embedding.weight.device
    order = sorted(range(len(sentences)), key=lambda index: len(sentences[index]))
    results: list[Tensor | None] = [None] * len(sentences)
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
            if output.distances is None:
                raise NoDistancesError(f"{type(encoder).__name__} returned no distances")
            distances = output.distances.float().cpu()  # (L, B, T)
            for row, index in enumerate(chunk):
                results[index] = distances[:, row, 1 : lengths[row] - 1].clone()  # (L, n_words)
    finally:
        embedding.train(modes[0])
        encoder.train(modes[1])
    return [result for result in results if result is not None]


def trees_from_distances(distances: Sequence[Tensor]) -> list[list[Tree]]:
    """Greedy trees per layer: ``trees[layer][sentence]`` from per-sentence ``(L, n)`` distances."""
    if not distances:
        return []
    num_layers = distances[0].size(0)
    return [
        [greedy_tree(sentence_distances[layer].tolist()) for sentence_distances in distances]
        for layer in range(num_layers)
    ]
