"""``python -m treernn msr``: MSR Sentence Completion (Zweig and Burges 2011) accuracy of a
dependency-tree or sequential language model (`treernn.evaluation.completion` says how
candidates are scored and ties credited). Its stand-in built from UD English-EWT is scored at the
end of a run's test by a callback (``callbacks=[default,ewt_standins]``,
`treernn.evaluation.ewt_standins`, ``docs/papers/ewt-standins.md``).

    python -m treernn msr --ckpt outputs/.../checkpoints/epoch003.ckpt [--parsed questions.conllu]
        [--out msr.json]

prints the accuracy; ``--out FILE`` (also spelled ``--output``) writes the accuracies and every
candidate's score as JSON, a new file unless ``--force``, whole or not at all. The questions
and answers are read from ``<data_dir>/msr_sentence_completion/``, one sentence per line (lines
end at ``\\n`` only).

Tree models need a dependency parse of every MSR candidate. In order of preference: ``--parsed
FILE``, a CoNLL-U file with the 5,200 candidate trees in question order (written by any parser,
e.g. ``python -m treernn.data.dependency_parser --msr``); otherwise a locally installed spaCy
pipeline (``--spacy-model``, default ``en_core_web_sm``). Without either, the tool stops with a
message naming what to install. Sequential models need no parse.

Training corpus (not shipped): Microsoft Research's ``Holmes_Training_Data``, 522 Project Gutenberg
novels, from the MSR Sentence Completion Challenge page
(https://www.microsoft.com/en-us/research/project/msr-sentence-completion-challenge/); the authors'
td-treelstm README also links their CoreNLP-parsed copy. The paper removed Gutenberg headers and
footers, parsed with Stanford CoreNLP, lower-cased, mapped words seen 5 times or fewer to UNK
(65,346 words) and held out 4,000 random sentences for validation: parse it into CoNLL-U and train
with ``experiment=tdlstm/ld_treelstm_msr`` (data under ``msr_train/``). Parse the training corpus
and the questions with the same parser, so that the trees share one annotation style.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from treernn.evaluation.completion import (
    ANSWERS_FILE,
    CHOICES,
    PAPER_ACCURACY,
    QUESTIONS_FILE,
    TIE_RULES,
    evaluate,
    read_msr,
)
from treernn.files import new_result_file, write_result_text


def _non_negative(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text}: expected a number >= 0")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ckpt", required=True, help="a treernn checkpoint (task=dependency_lm)")
    parser.add_argument("--data-dir", default=None, help="default: $TREERNN_DATA_DIR or ./data")
    parser.add_argument("--parsed", default=None, help="CoNLL-U trees of the 5,200 candidates")
    parser.add_argument("--spacy-model", default="en_core_web_sm")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument(
        "--out", "--output", dest="out", default=None, help="write accuracies and scores as JSON"
    )
    parser.add_argument("--force", action="store_true", help="replace an existing --out file")
    parser.add_argument(
        "--unk-penalty", type=float, default=0.0, help="nats per <unk> word (default 0: paper)"
    )
    parser.add_argument(
        "--ties",
        choices=TIE_RULES,
        default="expected",
        help="k candidates tied at the top: expected (1/k if the answer is one of them, default) "
        "or random (a seeded draw among them)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of --ties random (default 0)")
    parser.add_argument(
        "--tie-tolerance",
        type=_non_negative,
        default=0.0,
        help="nats: scores this close to the best are tied with it (default 0: exact; identical "
        "inputs always share one score)",
    )


def format_report(kind: str, report: dict[str, float | None], ties: str, seed: int) -> str:
    """The lines ``python -m treernn msr`` prints."""
    rule = "1/k when the answer is one of the k" if ties == "expected" else f"random, seed {seed}"
    in_vocab = report["in_vocab"]
    return "\n".join(
        [
            f"MSR sentence completion, {kind}: {report['all']:.2f}% on "
            f"{int(report['questions'])} questions (first half {report['first_half']:.2f}%, "
            f"second half {report['second_half']:.2f}%); chance {report['chance']:.0f}%.",
            f"  tie at the top: {int(report['tied_questions'])} questions "
            f"({report['tied_percent']:.1f}%), counted {rule} (--ties {ties}).",
            f"  answer word in the vocabulary: {int(report['in_vocab_questions'] or 0)} questions, "
            + (f"{in_vocab:.2f}% on them." if in_vocab is not None else "no accuracy (none)."),
            "  Paper (Holmes training corpus): "
            + ", ".join(f"{name} {value}" for name, value in PAPER_ACCURACY.items()),
        ]
    )


def run(args: argparse.Namespace) -> int:
    from treernn.data.download import default_data_dir
    from treernn.models.load import load

    out = None if args.out is None else new_result_file(args.out, "msr.json", args.force)
    task = load(
        args.ckpt,
        "cpu",
        kind="dependency_lm",
        command="msr",
        hint="a dependency language model's checkpoint (task=dependency_lm, e.g. "
        "experiment=tdlstm/ld_treelstm_ewt_small)",
    ).module
    data_dir = Path(args.data_dir) if args.data_dir else default_data_dir()
    questions = read_msr(data_dir / QUESTIONS_FILE, data_dir / ANSWERS_FILE)
    result = evaluate(
        task,
        questions,
        args.parsed,
        args.spacy_model,
        args.batch_size,
        args.unk_penalty,
        args.ties,
        args.seed,
        args.tie_tolerance,
    )
    kind = type(task.encoder).__name__
    print(format_report(kind, result.report, args.ties, args.seed))
    if out is not None:
        payload = {
            "model": kind,
            "ties": args.ties,
            "seed": args.seed,
            "tie_tolerance": args.tie_tolerance,
            "accuracy": result.report,
            "scores": result.scores.tolist(),
            "credit": result.credit.credit.tolist(),
            "top": [[k for k in range(CHOICES) if row[k]] for row in result.credit.top.tolist()],
            "answers": list(questions.answers),
            "answer_in_vocab": result.answer_in_vocab,
        }
        write_result_text(out, json.dumps(payload))
        print(f"written: {out}", file=sys.stderr)
    return 0
