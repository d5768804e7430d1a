"""Induced trees of a language model for sentences you type (ON-LSTM paper, Appendix A).

    python -m treernn trees --ckpt PATH "sentence one" "sentence two" ... [--layer K]
        [--json | --draw] [--tokenized]

``--ckpt``: a checkpoint, a run directory or an exported model. Each sentence is tokenised as the
PTB language-modelling data was (Treebank tokenisation, lower case, numbers and ``%`` as ``N``,
punctuation dropped: `treernn.data.raw_text`; ``--tokenized``: its words between spaces, as
they are); every layer's greedy tree over the words (``--layer``: one) is printed as unlabeled
brackets (``--json``: with the distances; ``--draw``: drawn by nltk's tree printer, every node
labeled X, each word on a stem of its own). The same trees come from
``treernn.load(PATH).trees(sentences)``, with ``nltk.Tree`` objects from each result's
``nltk_trees()`` and the drawings from its ``drawings()``."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from treernn.models.load import default_device, load


def induced_trees(
    ckpt: str | Path,
    sentences: Sequence[str],
    device: str = "cpu",
    batch_size: int = 64,
    layer: int | None = None,
    tokenized: bool = False,
    drawn: bool = False,
) -> list[dict[str, Any]]:
    """For each sentence: its words, the words read as ``<unk>``, and the tree of every layer
    (brackets; ``drawn``: and ``drawings``, each tree drawn as nltk draws it)."""
    model = load(ckpt, device, kind="language_model", command="trees")
    model.check_distances()
    results = []
    for result in model.trees(sentences, layer, batch_size, tokenized=tokenized):
        record = asdict(result)
        del record["structures"]  # the brackets say the same, as text
        if drawn:
            record["drawings"] = result.drawings()
        results.append(record)
    return results


def format_trees(results: Sequence[dict[str, Any]]) -> str:
    lines = []
    for number, result in enumerate(results, start=1):
        lines.append(f"sentence {number}: {' '.join(result['words'])}")
        drawings = result.get("drawings") or [""] * len(result["trees"])
        for layer, tree, drawing in zip(result["layers"], result["trees"], drawings):
            lines.append(f"  layer {layer}: {tree}")
            lines.extend("    " + line for line in drawing.splitlines())
        if result["unknown"]:
            lines.append(f"  read as <unk>: {', '.join(result['unknown'])}")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--ckpt", required=True, help="a language model (ON-LSTM): checkpoint, run or export"
    )
    parser.add_argument("sentences", nargs="+")
    parser.add_argument("--layer", type=int, default=None, help="one layer (1 = lowest)")
    shown = parser.add_mutually_exclusive_group()
    shown.add_argument("--json", action="store_true", help="print JSON with the distances")
    shown.add_argument("--draw", action="store_true", help="draw each tree under its brackets")
    parser.add_argument(
        "--tokenized", action="store_true", help="take each sentence's words between spaces"
    )
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--device", default=default_device())


def run(args: argparse.Namespace) -> int:
    results = induced_trees(
        args.ckpt,
        args.sentences,
        args.device,
        args.batch_size,
        args.layer,
        args.tokenized,
        drawn=args.draw,
    )
    print(json.dumps(results, indent=2) if args.json else format_trees(results))
    return 0
