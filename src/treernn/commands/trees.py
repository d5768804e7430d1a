"""Induced trees of a language model for sentences you type (ON-LSTM paper, Appendix A).

    python -m treernn trees --ckpt PATH "sentence one" "sentence two" ... [--layer K] [--json]

``--ckpt``: a checkpoint, a run directory or an exported model. Each sentence is tokenised as the
PTB language-modelling data was (Treebank tokenisation, lower case, numbers and ``%`` as ``N``,
punctuation dropped: `treernn.data.raw_text`); every layer's greedy tree over the words
(``--layer``: one) is printed as brackets (``--json``: with the distances). The same trees come
from ``treernn.load(PATH).trees(sentences)``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from treernn.api import load
from treernn.loading import default_device


def induced_trees(
    ckpt: str | Path,
    sentences: Sequence[str],
    device: str = "cpu",
    batch_size: int = 64,
    layer: int | None = None,
) -> list[dict[str, Any]]:
    """For each sentence: its words, the words read as ``<unk>``, and the tree of every layer."""
    model = load(ckpt, device, kind="language_model", command="trees")
    model.check_distances()
    return [asdict(result) for result in model.trees(sentences, layer, batch_size)]


def format_trees(results: Sequence[dict[str, Any]]) -> str:
    lines = []
    for number, result in enumerate(results, start=1):
        lines.append(f"sentence {number}: {' '.join(result['words'])}")
        for layer, tree in zip(result["layers"], result["trees"]):
            lines.append(f"  layer {layer}: {tree}")
        if result["unknown"]:
            lines.append(f"  read as <unk>: {', '.join(result['unknown'])}")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--ckpt", required=True, help="a language model (ON-LSTM): checkpoint, run or export"
    )
    parser.add_argument("sentences", nargs="+")
    parser.add_argument("--layer", type=int, default=None, help="one layer (1 = lowest)")
    parser.add_argument("--json", action="store_true", help="print JSON with the distances")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--device", default=default_device())


def run(args: argparse.Namespace) -> int:
    results = induced_trees(args.ckpt, args.sentences, args.device, args.batch_size, args.layer)
    print(json.dumps(results, indent=2) if args.json else format_trees(results))
    return 0
