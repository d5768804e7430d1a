"""Unsupervised constituency parsing scored by one exact protocol (ON-LSTM Table 2), for a treernn
checkpoint or for any system's trees in a file; both go through `treernn.parsing.scoreboard`.

    python -m treernn parse --ckpt CKPT [CKPT ...] [--gold G ...] [--save-trees PATH]
    python -m treernn parse --pred TREES --gold G

Gold ``G``: ``sample10`` / ``sample`` (the nltk WSJ sample below the data directory, its
sentences of at most 10 words / all of it), ``wsj10`` / ``wsj_test`` (the full WSJ in
``--wsj-dir``), or a file of gold trees, one per line. Default for ``--ckpt``: both splits of the
WSJ when ``--wsj-dir`` (or ``TREERNN_WSJ_DIR``) is given, else both of the sample.

``--pred``: one tree per line, in order with the gold sentences, as brackets with or without
labels (``(S (NP the cat) (VP sat))``, ``((the cat) sat)``) or nested JSON lists; its words must
be the gold sentence's after the same filtering.

``--ckpt``: a language model with syntactic distances (ON-LSTM): a checkpoint, a run directory
or an exported model (``treernn.load``); each sentence is read alone as
``<eos> w_1 .. w_n <eos>`` and every layer's greedy tree is a row. Several checkpoints (seeds)
give each layer's mean and max. ``--save-trees PATH`` writes one layer's trees (``--layer``,
default the one below the top: ON-LSTM reports the 2nd of 3) in a format ``--pred`` reads, so
``parse --pred PATH --gold G`` prints that layer's row again, number for number.

Every table is also written as JSON: to ``--out``, by default (with ``--ckpt``) to
``parse_eval.json`` in the current working directory, never beside the model (a model's folder
is data). An existing ``--out`` or ``--save-trees`` file is refused before any work unless
``--force``; each is written whole (a temporary file renamed into place).

One table per gold set: corpus F1 (EVALB), the authors' sentence-averaged F1, per-label recall,
mean depth, and the trivial trees (left, right, random over 5 seeds, balanced both ways). The
protocol line above each table names the options that produced it (defaults: ON-LSTM's).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from treernn.errors import ConfigValueError
from treernn.files import new_result_file, write_result_text
from treernn.models.load import default_device, load
from treernn.parsing.scoreboard import (
    KNOWN_SPLITS,
    PUNCTUATION_CHOICES,
    GoldSet,
    Protocol,
    Scoreboard,
    align,
    evaluate,
    load_gold,
    model_name,
    model_trees,
    score_layers,
    to_json,
    to_markdown,
    to_text,
)
from treernn.parsing.treefile import FORMATS, WRITE_FORMATS, read_trees, write_trees

OUTPUTS = ("text", "markdown", "json")
PAPER = (
    "Paper (full WSJ10 / WSJ test, sentence F1): ON-LSTM 2nd layer 65.1 (1.7) max 66.8 / 47.7 "
    "(1.5) max 49.4; random 31.7 / 18.4, balanced 43.4 / 24.5, left 19.6 / 9.0, right 56.6 / 39.8."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--ckpt", nargs="+", help="language-model checkpoints (one per seed)")
    source.add_argument("--pred", help="a file of predicted trees, one per gold sentence")
    parser.add_argument(
        "--gold",
        nargs="+",
        default=None,
        metavar="G",
        help=f"{', '.join(KNOWN_SPLITS)} or a gold tree file; one table each",
    )
    parser.add_argument(
        "--format", choices=FORMATS, default="auto", help="of the --pred and gold tree files"
    )
    parser.add_argument(
        "--punctuation",
        choices=PUNCTUATION_CHOICES,
        default="drop",
        help="drop: keep words with a word POS tag (ON-LSTM); keep: every word but traces",
    )
    parser.add_argument(
        "--sentence-f1-whole-span",
        action="store_true",
        help="count the whole-sentence span in the sentence-averaged F1 (ON-LSTM: not counted)",
    )
    parser.add_argument("--output", choices=OUTPUTS, default="text", help="what to print")
    parser.add_argument(
        "--out",
        default=None,
        help="JSON of every table (--ckpt default: parse_eval.json in the working directory)",
    )
    parser.add_argument(
        "--force", action="store_true", help="replace existing --out and --save-trees files"
    )
    parser.add_argument("--save-trees", default=None, metavar="PATH", help="write a layer's trees")
    parser.add_argument("--tree-format", choices=WRITE_FORMATS, default="bracketed")
    parser.add_argument("--layer", type=int, default=None, help="layer to save (1 = lowest)")
    parser.add_argument("--wsj-dir", default=os.environ.get("TREERNN_WSJ_DIR"))
    parser.add_argument("--data-dir", default=None, help="default: $TREERNN_DATA_DIR or ./data")
    parser.add_argument("--max-sentences", type=int, default=None, help="per gold set")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--device", default=default_device())


def run(args: argparse.Namespace) -> int:
    protocol = Protocol(
        punctuation=args.punctuation, sentence_f1_whole_span=args.sentence_f1_whole_span
    )
    if args.pred is not None:
        for option in ("save_trees", "layer"):
            if getattr(args, option) is not None:
                raise ConfigValueError(f"--{option.replace('_', '-')} goes with --ckpt, not --pred")
        if args.gold is None or len(args.gold) != 1:
            raise ConfigValueError(
                "--pred needs one --gold: the gold set its trees go with, in order "
                f"({', '.join(KNOWN_SPLITS)} or a gold tree file)"
            )
    golds = args.gold or default_golds(args.wsj_dir)
    if args.save_trees is not None and len(args.ckpt) > 1:
        raise ConfigValueError("--save-trees writes one model's trees: give one --ckpt")
    # where the results go, refused before any work where a file is there already
    out = (
        new_result_file(args.out, "parse_eval.json", args.force)
        if args.out is not None or args.ckpt
        else None
    )
    if args.save_trees is not None:
        for gold_name in golds:
            new_result_file(
                save_path(args.save_trees, gold_name, len(golds)), "", args.force, "--save-trees"
            )

    start = time.perf_counter()
    # the quick checks first: a malformed tree file or checkpoint fails before the treebank is read
    tree_file = read_trees(args.pred, args.format) if args.pred is not None else None
    models = [
        load(c, args.device, kind="language_model", command="parse")
        for c in ([] if tree_file else args.ckpt)
    ]
    for model in models:
        model.check_distances()
    tasks = [model.module for model in models]
    boards: list[Scoreboard] = []
    extra: list[dict[str, Any]] = []
    timing = {"read": 0.0, "induce": 0.0, "score": 0.0}
    for gold_name in golds:
        tick = time.perf_counter()
        gold = read_gold(gold_name, args)
        timing["read"] += time.perf_counter() - tick
        if tree_file is not None:
            tick = time.perf_counter()
            board = evaluate(
                {Path(args.pred).name: align(tree_file, gold, punctuation=args.punctuation)},
                gold,
                protocol=protocol,
                descriptions={Path(args.pred).name: f"trees of {args.pred}"},
            )
            timing["score"] += time.perf_counter() - tick
            boards.append(board)
            extra.append({"pred": str(args.pred)})
            continue
        tick = time.perf_counter()
        per_checkpoint = [model_trees(task, gold, args.batch_size) for task in tasks]
        timing["induce"] += time.perf_counter() - tick
        layers = min(len(trees) for trees, _ in per_checkpoint)
        names = ", ".join(Path(c).name for c in args.ckpt)
        tick = time.perf_counter()
        boards.append(
            score_layers(
                [trees for trees, _ in per_checkpoint], gold, model_name(tasks), names, protocol
            )
        )
        timing["score"] += time.perf_counter() - tick
        extra.append(
            {
                "checkpoints": [str(Path(c).resolve()) for c in args.ckpt],
                "unknown_word_rate": [rate for _, rate in per_checkpoint],
            }
        )
        if args.save_trees is not None:
            layer = args.layer or max(1, layers - 1)
            if not 1 <= layer <= layers:
                raise ConfigValueError(f"--layer {layer}: the model has layers 1 to {layers}")
            path = save_path(args.save_trees, gold_name, len(golds))
            words = [sentence.words for sentence in gold.sentences]
            write_trees(path, per_checkpoint[0][0][layer - 1], words, args.tree_format)
            print(f"wrote layer {layer}'s trees ({args.tree_format}) to {path}", file=sys.stderr)
    timing["total"] = time.perf_counter() - start

    print(render(boards, args.output, with_paper=args.ckpt is not None), end="")
    print(
        f"time: {timing['total']:.1f} s (reading gold {timing['read']:.1f} s, inducing trees "
        f"{timing['induce']:.1f} s, scoring {timing['score']:.2f} s)",
        file=sys.stderr,
    )
    if out is not None:
        record = [to_json(board) | more for board, more in zip(boards, extra)]
        write_result_text(out, json.dumps({"tables": record, "seconds": timing}, indent=2))
        print(f"written: {out}", file=sys.stderr)
    return 0


def default_golds(wsj_dir: str | None) -> list[str]:
    """Table 2's two columns: the WSJ when there is one, else the nltk sample."""
    return ["wsj10", "wsj_test"] if wsj_dir else ["sample10", "sample"]


def read_gold(name: str, args: argparse.Namespace) -> GoldSet:
    from treernn.data.download import default_data_dir

    gold = load_gold(
        name,
        wsj_dir=args.wsj_dir,
        data_dir=args.data_dir or default_data_dir(),
        punctuation=args.punctuation,
        format=args.format,
    )
    if args.max_sentences is not None:
        gold = GoldSet(gold.name, gold.sentences[: args.max_sentences], gold.skipped)
    return gold


def save_path(path: str, gold_name: str, golds: int) -> Path:
    """``PATH`` for one gold set; ``PATH`` with the gold's name before the suffix for several."""
    target = Path(path)
    if golds == 1:
        return target
    return target.with_name(f"{target.stem}.{Path(gold_name).stem}{target.suffix}")


def render(boards: Sequence[Scoreboard], output: str, with_paper: bool = False) -> str:
    if output == "json":
        return json.dumps([to_json(board) for board in boards], indent=2) + "\n"
    tables = [to_markdown(board) if output == "markdown" else to_text(board) for board in boards]
    text = "\n".join(tables)
    if with_paper and output == "text":
        text += PAPER + "\n"
    return text
