"""Word-by-word surprisal and the perplexity of a text under a language model, and LM-Zoo's
surprisal table (the format SyntaxGym and psycholinguistic studies read).

- `word_log_probs`: each sentence read alone, as the syntactic evaluation reads it
  (`treernn.evaluation.syneval.sentence_log_probs`): after ``<eos>``, from a fresh state, in
  eval mode; ``log p(w_i | <eos> w_1 .. w_{i-1})`` of every word and of the closing ``<eos>``.
- `stream_perplexity`: a text as the PTB test split is read: one stream of the lines'
  words, each line closed by ``<eos>``, the state carried over ``bptt``-token segments (batch 1,
  the first word unpredicted), ``exp`` of the mean negative log-likelihood.
- `write_surprisal_table`: LM-Zoo's ``get-surprisals`` output: a header line
  ``sentence_id token_id token surprisal``, then one row per token, tab-separated, ids from 1,
  the token as the model read it (``<unk>`` for a word outside the vocabulary) and the sentence's
  closing ``<eos>`` as its last row, surprisal ``-log2 p`` in bits.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TextIO

import torch

from treernn.files import read_input_text, text_lines

LN2 = math.log(2.0)


def bits(log_prob: float) -> float:
    """Surprisal in bits of a natural-log probability: ``-log_prob / ln 2`` (``0.0``, not
    ``-0.0``, for a certain token)."""
    return -log_prob / LN2 + 0.0


SURPRISAL_HEADER = ("sentence_id", "token_id", "token", "surprisal")


@torch.no_grad()
def word_log_probs(
    task: Any,
    sentences: Sequence[Sequence[str]],
    batch_size: int = 64,
    advance: Callable[[int], None] | None = None,
):
    """``log p`` (nats) of each word of each sentence and of its closing ``<eos>``: a list of
    ``len(words) + 1`` floats per sentence. ``task``: a language model task (its ``vocab`` with
    ``<eos>`` and ``token_log_probs``). Sentences are batched by length; padding changes nothing.
    ``advance``: called with the number of sentences of each batch once it is scored."""
    vocab = task.vocab
    eos = vocab.eos_index
    device = next(task.parameters()).device
    encoded = [vocab.encode(sentence) for sentence in sentences]
    results: list[list[float]] = [[] for _ in encoded]
    order = sorted(range(len(encoded)), key=lambda index: len(encoded[index]))
    for first in range(0, len(order), batch_size):
        chunk = order[first : first + batch_size]
        steps = max(len(encoded[index]) for index in chunk) + 1
        inputs = torch.full((len(chunk), steps), eos, dtype=torch.long)  # (B, T)
        targets = torch.full((len(chunk), steps), eos, dtype=torch.long)  # (B, T)
        mask = torch.zeros(len(chunk), steps, dtype=torch.bool)  # (B, T)
        for row, index in enumerate(chunk):
            ids = torch.as_tensor(encoded[index], dtype=torch.long)
            inputs[row, 1 : 1 + len(ids)] = ids
            targets[row, : len(ids)] = ids  # then <eos>
            mask[row, : len(ids) + 1] = True
        log_probs = task.token_log_probs(inputs.to(device), targets.to(device), mask.to(device))
        log_probs = log_probs.float().cpu()  # (B, T)
        for row, index in enumerate(chunk):
            results[index] = log_probs[row, : len(encoded[index]) + 1].tolist()
        if advance is not None:
            advance(len(chunk))
    return results


@torch.no_grad()
def stream_perplexity(
    task: Any,
    lines: Sequence[Sequence[str]],
    bptt: int = 70,
    advance: Callable[[int], None] | None = None,
) -> float:
    """Perplexity of ``lines`` (words, without ``<eos>``) read as one stream, as the PTB test split
    is read (module docstring). Needs at least two tokens (one word and its ``<eos>``).
    ``advance``: called with the number of tokens predicted in each segment."""
    vocab = task.vocab
    stream = [index for line in lines for index in [*vocab.encode(line), vocab.eos_index]]
    if len(stream) < 2:
        raise ValueError("the text has no word to predict")
    was_training = task.training
    task.eval()
    device = next(task.parameters()).device
    ids = torch.as_tensor(stream, dtype=torch.long, device=device).unsqueeze(0)  # (1, N)
    total, count, state = 0.0, 0, None
    try:
        for start in range(0, ids.size(1) - 1, bptt):
            inputs = ids[:, start : start + bptt]  # (1, T)
            targets = ids[:, start + 1 : start + 1 + inputs.size(1)]
            inputs = inputs[:, : targets.size(1)]
            logits, output, _ = task(inputs, state)
            state = output.state
            log_probs = logits.float().log_softmax(-1).gather(-1, targets.unsqueeze(-1))
            total -= float(log_probs.double().sum())
            count += targets.numel()
            if advance is not None:
                advance(targets.numel())
    finally:
        task.train(was_training)
    return math.exp(total / count)


def surprisal_rows(
    words: Sequence[str], log_probs: Sequence[float], known: Iterable[bool]
) -> list[tuple[str, float]]:
    """``(token, surprisal in bits)`` of one sentence: its words (``<unk>`` where not ``known``)
    and ``<eos>``; ``log_probs`` in nats, one more than ``words``."""
    tokens = [word if is_known else "<unk>" for word, is_known in zip(words, known)]
    return [(token, bits(value)) for token, value in zip([*tokens, "<eos>"], log_probs)]


def write_surprisal_table(
    rows: Sequence[Sequence[tuple[str, float]]],
    out: TextIO,
    ids: Sequence[int] | None = None,
) -> None:
    """LM-Zoo's table (module docstring) of ``rows[sentence] = [(token, surprisal), ...]``; the
    surprisal is written as Python's shortest exact ``repr`` of the float. ``ids``: each
    sentence's ``sentence_id`` (default 1, 2, ...; an input's line numbers where lines were
    left out)."""
    out.write("\t".join(SURPRISAL_HEADER) + "\n")
    for sentence_id, sentence in zip(ids or range(1, len(rows) + 1), rows, strict=True):
        for token_id, (token, surprisal) in enumerate(sentence, start=1):
            out.write(f"{sentence_id}\t{token_id}\t{token}\t{surprisal!r}\n")


def read_surprisal_table(path: str | Path) -> list[list[tuple[str, float]]]:
    """The rows of a table `write_surprisal_table` wrote (or LM-Zoo's), by sentence."""
    sentences: dict[int, list[tuple[str, float]]] = {}
    lines = text_lines(read_input_text(path, "surprisal table"))
    for line in lines[1:]:
        sentence_id, _, token, surprisal = line.split("\t")
        sentences.setdefault(int(sentence_id), []).append((token, float(surprisal)))
    return [sentences[key] for key in sorted(sentences)]
