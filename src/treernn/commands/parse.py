"""Evaluate a trained language model the way the ON-LSTM paper does.

``python -m treernn.evaluate parse --ckpt PATH [PATH ...] [--treebank auto|sample|wsj --wsj-dir D]``
    Unsupervised constituency parsing (Table 2): per layer, EVALB corpus-level unlabeled F1 on the
    WSJ10 and WSJ-test splits (on the nltk sample: ``sample10`` and ``sample``), mean (std) and max
    over the checkpoints given (the paper uses 5 seeds), tree depth and per-label recall (ADJP, NP,
    PP, INTJ, from the best checkpoint as in the paper), and the four trivial-tree baselines. Prints
    the table and writes it as JSON beside the run (``<run dir>/parse_eval_<treebank>.json``) or to
    ``--out``.
``python -m treernn.evaluate trees --ckpt PATH "sentence one" "sentence two" ...``
    The induced tree of each sentence from every layer, as bracketed text (Appendix A).
``python -m treernn.evaluate syneval --ckpt PATH [--template-set current|EMNLP2018]``
    Marvin & Linzen's targeted syntactic evaluation grouped as Table 3 (:mod:`treernn.syneval`).

Problems with the input (a missing checkpoint or treebank, a model without distances, a sentence
with no word left) are reported on one line, naming the file or sentence, with exit status 1.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from treernn.parsing.baselines import BASELINES, score_baselines
from treernn.parsing.induce import (
    InductionError,
    NoDistancesError,
    induce_distances,
    trees_from_distances,
)
from treernn.parsing.metrics import TABLE2_LABELS, ParseScores, score_trees
from treernn.parsing.trees import to_bracketed
from treernn.parsing.wsj import (
    GoldSentence,
    TreebankError,
    default_splits,
    load_split,
    normalise_word,
    resolve_treebank,
)
from treernn.syneval import SynEvalError, evaluate_syneval, format_table, load_test_sets


class EvaluationError(ValueError):
    """A problem with the command's input, printed as one line."""


# ----------------------------------------------------------------------------- model loading


def load_language_model(ckpt: str | Path, device: str, need_distances: bool) -> Any:
    """The task of a treernn checkpoint, in eval mode, checked for what the command needs."""
    from treernn.run import UserError, load_task

    path = Path(ckpt)
    try:
        task = load_task(path)
    except UserError as error:
        raise EvaluationError(str(error)) from error
    for attribute in ("embedding", "encoder", "vocab"):
        if getattr(task, attribute, None) is None:
            raise EvaluationError(
                f"checkpoint {path}: the {type(task).__name__} has no {attribute}; "
                "this command needs a language model (task=ptb)"
            )
    if "<eos>" not in task.vocab:
        raise EvaluationError(f"checkpoint {path}: the vocabulary has no <eos> token")
    if need_distances and task.encoder.tree_signal_kind != "distances":
        raise EvaluationError(
            f"checkpoint {path}: its encoder {type(task.encoder).__name__} has no syntactic "
            "distances, so no tree can be induced; parse F1 needs a model such as ON-LSTM "
            "(model=onlstm)"
        )
    return task.to(device).eval()


def default_data_dir() -> Path:
    return Path(os.environ.get("TREERNN_DATA_DIR", "data"))


def run_directory(ckpt: str | Path) -> Path:
    """``outputs/.../<run>/checkpoints/x.ckpt`` -> ``outputs/.../<run>``."""
    path = Path(ckpt).resolve()
    return path.parent.parent if path.parent.name == "checkpoints" else path.parent


# ----------------------------------------------------------------------------- parse


@dataclass
class LayerRuns:
    """One layer's scores on one split, one entry per checkpoint."""

    runs: list[ParseScores]

    def summary(self) -> dict[str, Any]:
        corpus = [run.corpus_f1 for run in self.runs]
        sentence = [run.sentence_f1 for run in self.runs]
        best = max(range(len(self.runs)), key=lambda index: corpus[index])
        return {
            "corpus_f1": _stats(corpus),
            "sentence_f1": _stats(sentence),
            "best_checkpoint": best,
            "best": self.runs[best].as_dict(),
            "runs": [run.as_dict() for run in self.runs],
        }


def _stats(values: Sequence[float]) -> dict[str, float]:
    return {
        "mean": statistics.fmean(values),
        "std": statistics.pstdev(values) if len(values) > 1 else 0.0,
        "max": max(values),
    }


def parse_evaluation(
    checkpoints: Sequence[str | Path],
    treebank: str = "auto",
    wsj_dir: str | Path | None = None,
    data_dir: str | Path | None = None,
    batch_size: int = 64,
    max_sentences: int | None = None,
    device: str = "cpu",
    seeds: Sequence[int] = (0, 1, 2, 3, 4),
    labels: Sequence[str] = TABLE2_LABELS,
) -> dict[str, Any]:
    """Everything the Table 2 printout shows, as a JSON-ready dict (F1 as fractions)."""
    start = time.perf_counter()
    # check every checkpoint before the (slow) treebank reading
    tasks = [load_language_model(ckpt, device, need_distances=True) for ckpt in checkpoints]
    read_start = time.perf_counter()
    data_dir = data_dir if data_dir is not None else default_data_dir()
    kind = resolve_treebank(treebank, wsj_dir, data_dir)
    splits = default_splits(kind)
    gold: dict[str, list[GoldSentence]] = {}
    for split in splits:
        gold[split] = load_split(kind, split, wsj_dir=wsj_dir, data_dir=data_dir)
        if max_sentences is not None:
            gold[split] = gold[split][:max_sentences]
    read_seconds = time.perf_counter() - read_start

    layer_runs: dict[int, dict[str, LayerRuns]] = {}
    model_names: set[str] = set()
    unknown: dict[str, float] = {}
    induce_seconds = 0.0
    for ckpt, task in zip(checkpoints, tasks):
        vocab = task.vocab
        model_names.add(type(task.encoder).__name__.removesuffix("Encoder"))
        for split in splits:
            sentences = gold[split]
            ids = [vocab.encode(sentence.words) for sentence in sentences]
            tick = time.perf_counter()
            distances = induce_distances(
                task.embedding,
                task.encoder,
                ids,
                vocab.eos_index,
                batch_size,
                names=[sentence.source for sentence in sentences],
            )
            induce_seconds += time.perf_counter() - tick
            words = sum(len(sentence_ids) for sentence_ids in ids)
            unknowns = sum(token == vocab.unk_index for row in ids for token in row)
            unknown[f"{Path(ckpt).name}/{split}"] = unknowns / max(words, 1)
            for layer, trees in enumerate(trees_from_distances(distances), start=1):
                scores = score_trees(
                    trees,
                    [sentence.tree for sentence in sentences],
                    [sentence.labelled_spans for sentence in sentences],
                    labels,
                )
                layer_runs.setdefault(layer, {}).setdefault(split, LayerRuns([])).runs.append(
                    scores
                )
    baselines = {split: score_baselines(gold[split], seeds, labels) for split in splits}
    return {
        "checkpoints": [str(Path(ckpt).resolve()) for ckpt in checkpoints],
        "model": "/".join(sorted(model_names)),
        "treebank": kind,
        "wsj_dir": None if wsj_dir is None else str(wsj_dir),
        "splits": {split: len(gold[split]) for split in splits},
        "columns": {"short": splits[0], "test": splits[1]},
        "labels": list(labels),
        "layers": {
            f"layer{layer}": {split: runs.summary() for split, runs in by_split.items()}
            for layer, by_split in sorted(layer_runs.items())
        },
        "baselines": {
            name: {split: baselines[split][name].as_dict() for split in splits}
            for name in BASELINES
        },
        "unknown_word_rate": unknown,
        "seconds": {
            "read_treebank": read_seconds,
            "induce": induce_seconds,
            "total": time.perf_counter() - start,
        },
    }


BASELINE_NAMES = {
    "random": "Random trees",
    "balanced": "Balanced trees",
    "left_branching": "Left branching",
    "right_branching": "Right branching",
}


def format_parse_table(result: dict[str, Any]) -> str:
    """Table 2's layout: F1 mean (std) and max on the short and test splits, depth, label recall."""
    short, test = result["columns"]["short"], result["columns"]["test"]
    labels = result["labels"]
    header = (
        f"{'':<18} {short + ' F1 (std)':>19} {'max':>5}  {test + ' F1 (std)':>19} {'max':>5}"
        f"  {'depth':>5}  " + " ".join(f"{label:>5}" for label in labels) + f"  {'sent-F1':>7}"
    )
    lines = [
        f"Unsupervised parsing, treebank {result['treebank']} ({short}: {result['splits'][short]} "
        f"sentences, {test}: {result['splits'][test]}); EVALB corpus-level unlabeled F1 in %, "
        f"{len(result['checkpoints'])} checkpoint(s)",
        header,
    ]

    def row(name: str, short_stats: dict, test_stats: dict, depth, recall, sentence_f1) -> str:
        recall_text = " ".join(
            f"{'-' if recall.get(label) is None else f'{100 * recall[label]:.1f}':>5}"
            for label in labels
        )
        return (
            f"{name:<18} {_mean_std(short_stats):>19} {100 * short_stats['max']:>5.1f}  "
            f"{_mean_std(test_stats):>19} {100 * test_stats['max']:>5.1f}  {depth:>5.1f}  "
            f"{recall_text}  {100 * sentence_f1:>7.1f}"
        )

    for layer, by_split in result["layers"].items():
        best = by_split[test]["best"]
        lines.append(
            row(
                f"{result['model']} layer {layer.removeprefix('layer')}",
                by_split[short]["corpus_f1"],
                by_split[test]["corpus_f1"],
                best["depth"],
                best["label_recall"],
                by_split[test]["sentence_f1"]["mean"],
            )
        )
    for name in BASELINES:
        by_split = result["baselines"][name]
        lines.append(
            row(
                BASELINE_NAMES[name],
                by_split[short]["corpus_f1"],
                by_split[test]["corpus_f1"],
                by_split[test]["depth"],
                by_split[test]["label_recall"],
                by_split[test]["sentence_f1"]["mean"],
            )
        )
    lines.append(
        f"depth and label recall on {test} (best checkpoint per layer); sent-F1: the authors' "
        f"sentence-averaged F1 without the whole-sentence span, on {test}."
    )
    lines.append(
        "Paper (full WSJ10 / WSJ test): ON-LSTM 2nd layer 65.1 (1.7) max 66.8 / 47.7 (1.5) max "
        "49.4; random 31.7 / 18.4, balanced 43.4 / 24.5, left 19.6 / 9.0, right 56.6 / 39.8."
    )
    seconds = result["seconds"]
    lines.append(
        f"time: {seconds['total']:.1f} s (reading trees {seconds['read_treebank']:.1f} s, "
        f"inducing trees {seconds['induce']:.1f} s)"
    )
    return "\n".join(lines)


def _mean_std(stats: dict[str, float]) -> str:
    return f"{100 * stats['mean']:.1f} ({100 * stats['std']:.1f})"


# ----------------------------------------------------------------------------- trees


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
            raise EvaluationError(
                f"sentence {number} ({sentence!r}) has no words after dropping punctuation"
            )
    task = load_language_model(ckpt, device, need_distances=True)
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


# ----------------------------------------------------------------------------- command line


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m treernn.evaluate", description=__doc__.split("\n\n")[0]
    )
    commands = parser.add_subparsers(dest="command", required=True)
    device = "cuda" if torch.cuda.is_available() else "cpu"

    parse = commands.add_parser("parse", help="parse F1 per layer and the baselines (Table 2)")
    parse.add_argument("--ckpt", nargs="+", required=True, help="one or more checkpoints (seeds)")
    parse.add_argument("--treebank", choices=("auto", "sample", "wsj"), default="auto")
    parse.add_argument("--wsj-dir", default=os.environ.get("TREERNN_WSJ_DIR"))
    parse.add_argument("--data-dir", default=None, help="default: $TREERNN_DATA_DIR or ./data")
    parse.add_argument(
        "--max-sentences", type=int, default=None, help="per split, for a quick look"
    )
    parse.add_argument("--out", default=None, help="JSON path (default: beside the run)")

    trees = commands.add_parser("trees", help="print the induced trees of sentences (Appendix A)")
    trees.add_argument("--ckpt", required=True)
    trees.add_argument("sentences", nargs="+")
    trees.add_argument("--json", action="store_true", help="print JSON with the distances")

    syneval = commands.add_parser("syneval", help="Marvin & Linzen accuracies (Table 3)")
    syneval.add_argument("--ckpt", required=True)
    syneval.add_argument("--syneval-dir", default=None, help="default: <data dir>/syneval")
    syneval.add_argument("--data-dir", default=None)
    syneval.add_argument("--template-set", choices=("current", "EMNLP2018"), default="current")
    syneval.add_argument("--max-per-condition", type=int, default=None)
    syneval.add_argument(
        "--no-end", action="store_true", help="leave log p(<eos>) out of the sentence score"
    )
    syneval.add_argument("--out", default=None, help="JSON path (default: beside the run)")

    for command in (parse, trees, syneval):
        command.add_argument("--batch-size", type=int, default=64)
        command.add_argument("--device", default=device)
    return parser


def _write_json(data: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2))
    print(f"written: {path}")


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "parse":
            result = parse_evaluation(
                args.ckpt,
                treebank=args.treebank,
                wsj_dir=args.wsj_dir,
                data_dir=args.data_dir,
                batch_size=args.batch_size,
                max_sentences=args.max_sentences,
                device=args.device,
            )
            print(format_parse_table(result))
            out = args.out or run_directory(args.ckpt[0]) / f"parse_eval_{result['treebank']}.json"
            _write_json(result, Path(out))
        elif args.command == "trees":
            results = induced_trees(args.ckpt, args.sentences, args.device, args.batch_size)
            print(json.dumps(results, indent=2) if args.json else format_trees(results))
        else:
            data_dir = Path(args.data_dir) if args.data_dir else default_data_dir()
            test_sets = load_test_sets(args.syneval_dir or data_dir / "syneval", args.template_set)
            task = load_language_model(args.ckpt, args.device, need_distances=False)
            result = evaluate_syneval(
                task,
                test_sets,
                args.template_set,
                batch_size=args.batch_size,
                include_end=not args.no_end,
                max_items_per_condition=args.max_per_condition,
                progress=lambda message: print(message, file=sys.stderr, flush=True),
            )
            print(format_table(result))
            out = args.out or run_directory(args.ckpt) / f"syneval_{args.template_set}.json"
            _write_json(result.as_dict() | {"checkpoint": str(args.ckpt)}, Path(out))
    except (
        EvaluationError,
        TreebankError,
        NoDistancesError,
        InductionError,
        SynEvalError,
    ) as error:
        print(f"error: {error}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
