"""``python -m treernn rerank``: dependency-parse reranking with a tree language model (Zhang et
al. 2016, Section 3.3, Table 2; `treernn.evaluation.reranking`): UAS/LAS of the candidates the
model prefers, beside the first candidate and the oracle.

Candidate file format: CoNLL-U (or CoNLL-X), one block per candidate tree, candidates of the same
sentence consecutive and marked with ``# sent_id = <id>`` (a new id starts the next sentence); an
optional ``# candidate = <k>`` comment is kept for reference. The gold file holds one tree per
sentence, in the same sentence order, with the same words.

Producing candidates: any k-best dependency parser writing CoNLL (MSTParser's k-best mode, as in the
paper, or another parser's k-best output), with one ``# sent_id`` per sentence. For a quick sanity
check without a k-best parser, ``make-candidates`` writes the gold tree plus K-1 trees that each
re-attach a few words to other heads (kept projective), in shuffled order. Reranking those is an
easy synthetic task, not the paper's benchmark; the stand-in of ``docs/papers/ewt-standins.md``
(candidates from UD English-EWT's test trees) is scored at the end of a run's test by a callback
(``callbacks=[default,ewt_standins]``).

    python -m treernn rerank score --ckpt X.ckpt --candidates cands.conllu --gold gold.conllu
    python -m treernn rerank make-candidates --gold dev.conllu --k 4 --out cands.conllu

``make-candidates`` writes a new file (``--out``, also spelled ``--output``) unless ``--force``,
whole or not at all; ``score`` writes nothing.
"""

from __future__ import annotations

import argparse
import random
import sys

from treernn.data.dependency import write_conllu
from treernn.errors import CheckpointError
from treernn.evaluation.reranking import (
    group_candidates,
    grouped_scores,
    perturbed_candidates,
    rerank,
)
from treernn.evaluation.tree_scoring import read_conll
from treernn.files import new_result_file


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True, metavar="<action>")
    score = actions.add_parser("score", help="rerank candidate trees and report UAS/LAS")
    score.add_argument("--ckpt", required=True, help="a tree-LM checkpoint (td/ld_treelstm)")
    score.add_argument("--candidates", required=True, help="CoNLL-U, one # sent_id per sentence")
    score.add_argument("--gold", required=True, help="CoNLL-U, one tree per sentence")
    score.add_argument("--exclude-labels", default="", help="e.g. punct (comma separated)")
    score.add_argument("--batch-size", type=int, default=128)
    make = actions.add_parser("make-candidates", help="synthetic candidates from gold trees")
    make.add_argument("--gold", required=True)
    make.add_argument("--out", "--output", dest="out", required=True, help="the CoNLL-U to write")
    make.add_argument("--force", action="store_true", help="replace an existing --out file")
    make.add_argument("--k", type=int, default=4)
    make.add_argument("--changes", type=int, default=2)
    make.add_argument("--seed", type=int, default=0)


TREE_MODEL = (
    "a tree language model's checkpoint (task=dependency_lm, model=td_treelstm or ld_treelstm)"
)


def run(args: argparse.Namespace) -> int:
    model = None
    if args.action == "make-candidates":  # an existing file is refused before any work
        new_result_file(args.out, "candidates.conllu", args.force)
    if args.action == "score":  # the checkpoint is checked before any data is read
        from treernn.models.load import load

        model = load(args.ckpt, "cpu", kind="dependency_lm", command="rerank", hint=TREE_MODEL)
        if model.encoder.input_view != "dependency_tree":
            raise CheckpointError(
                f"rerank: {args.ckpt} is a sequence model; rerank needs {TREE_MODEL}"
            )
    gold, report = read_conll(args.gold, on_error="skip")
    if report.skipped:
        print(f"warning: {report.summary()}", file=sys.stderr)
    if model is None:  # make-candidates
        rng = random.Random(args.seed)
        trees = [c for g in gold for c in perturbed_candidates(g, args.k, args.changes, rng)]
        write_conllu(trees, args.out)
        print(f"wrote {len(trees)} candidate trees for {len(gold)} sentences to {args.out}")
        return 0
    candidates, _ = read_conll(args.candidates)
    groups = group_candidates(candidates)
    scores = grouped_scores(model.score(candidates, args.batch_size), groups)
    exclude = [x for x in args.exclude_labels.split(",") if x]
    result = rerank(scores, groups, gold, exclude)
    print(
        f"reranked {int(result['sentences'])} sentences: UAS {result['uas']:.2f} LAS "
        f"{result['las']:.2f} (first candidate UAS {result['first_uas']:.2f} LAS "
        f"{result['first_las']:.2f}; oracle UAS {result['oracle_uas']:.2f})"
    )
    return 0
