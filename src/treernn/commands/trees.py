"""Induced trees of a language model for sentences you type (ON-LSTM paper, Appendix A).

    python -m treernn trees --ckpt PATH "sentence one" "sentence two" ... [--json]

Each sentence is split on whitespace, lower-cased, digit runs become ``N`` and tokens without a
letter or digit (punctuation) are dropped, as the treebank's POS filter would; every layer's greedy
tree over the words is printed as brackets (``--json``: with the distances).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from treernn.errors import ConfigValueError
from treernn.loading import default_device, load_run
from treernn.parsing.induce import induce_distances, trees_from_distances
from treernn.parsing.trees import to_bracketed
from treernn.parsing.wsj import normalise_word


def sentence_words(text: str) -> list[str]:
    """Whitespace tokens, lower-cased, digit runs -> ``N``; tokens with no letter or digit
    (punctuation) are dropped, standing in for the treebank's POS filter."""
    return [normalise_word(token) for token in text.split() if any(c.isalnum() for c in token)]


def induced_trees(
    ckpt: str | Path, sentences: Sequence[str], device: str = "cpu", batch_size: int = 64
) -> list[dict[str, Any]]:
    """For each sentence: its words, the words read as ``<unk>``, and the tree of every layer."""
    words = [sentence_words(sentence) for sentence in sentences]
    for number, (sentence, sentence_words_) in enumerate(zip(sentences, words), start=1):
        if not sentence_words_:
            raise ConfigValueError(
                f"sentence {number} ({sentence!r}) has no words after dropping punctuation"
            )
    task = load_run(ckpt, "language_model", "trees", device=device, need_distances=True).task
    vocab = task.vocab
    distances = induce_distances(
        task.embedding,
        task.encoder,
        [vocab.encode(sentence) for sentence in words],
        vocab.eos_index,
        batch_size,
        names=[f"{number} ({text!r})" for number, text in enumerate(sentences, start=1)],
    )
    per_layer = trees_from_distances(distances)
    return [
        {
            "sentence": text,
            "words": sentence,
            "unknown": [word for word in sentence if word not in vocab],
            "trees": [to_bracketed(layer_trees[index], sentence) for layer_trees in per_layer],
            "distances": distances[index].tolist(),
        }
        for index, (text, sentence) in enumerate(zip(sentences, words))
    ]


def format_trees(results: Sequence[dict[str, Any]]) -> str:
    lines = []
    for number, result in enumerate(results, start=1):
        lines.append(f"sentence {number}: {' '.join(result['words'])}")
        for layer, tree in enumerate(result["trees"], start=1):
            lines.append(f"  layer {layer}: {tree}")
        if result["unknown"]:
            lines.append(f"  read as <unk>: {', '.join(result['unknown'])}")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ckpt", required=True, help="a language-model checkpoint (ON-LSTM)")
    parser.add_argument("sentences", nargs="+")
    parser.add_argument("--json", action="store_true", help="print JSON with the distances")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--device", default=default_device())


def run(args: argparse.Namespace) -> int:
    results = induced_trees(args.ckpt, args.sentences, args.device, args.batch_size)
    print(json.dumps(results, indent=2) if args.json else format_trees(results))
    return 0
