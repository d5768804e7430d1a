"""MSR Sentence Completion (Zweig and Burges 2011) scored with a dependency-tree or sequential LM.

Zhang, Lu and Lapata (2016), Section 3.2 and Table 1: each of the 1,040 questions has 5 candidate
sentences (``Holmes.lm_format.questions.txt``, lines 5i+1..5i+5); the model scores each candidate by
its log-probability, log P(S|T) = sum_t log P(w_t | D(w_t)) over the breadth-first tree for TreeLSTM
and LdTreeLSTM, log P(S) for a sequential LSTM, and picks the highest. Accuracy is reported on all
1,040 questions and on each half (1-520, 521-1040). Paper: LdTreeLSTM 60.67, TreeLSTM 56.73, LSTM
55.96 (d=400), trained on the 522-novel Holmes corpus, which is not shipped here
(``shared/data/msr_sentence_completion/SOURCE.md`` says where it comes from).

Tree models need a dependency parse of every candidate. In order of preference: ``--parsed FILE``,
a CoNLL-U file with the 5,200 candidate trees in question order (written by any parser, e.g.
``python -m treernn.data.dependency_parser --msr``); otherwise a locally installed spaCy pipeline
(``--spacy-model``, default ``en_core_web_sm``). Without either, the tool stops with a message
naming what to install. Sequential models need no parse.

    python -m treernn msr --ckpt outputs/.../checkpoints/epoch003.ckpt [--parsed questions.conllu]

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
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from treernn.data.dependency import (
    DependencyFormatError,
    DependencyTree,
    ReadReport,
    collate_trees,
    encode_tree,
    read_dependency_file,
)
from treernn.data.vocab import Vocabulary
from treernn.errors import CheckpointError, DataError

QUESTIONS_FILE = "msr_sentence_completion/Holmes.lm_format.questions.txt"
ANSWERS_FILE = "msr_sentence_completion/Holmes.lm_format.answers.txt"
CHOICES = 5
PAPER_ACCURACY = {"LdTreeLSTM (d=400)": 60.67, "TreeLSTM (d=400)": 56.73, "LSTM (d=400)": 55.96}


@dataclass
class MSRQuestions:
    candidates: list[list[list[str]]]  # (Q, 5, words)
    answers: list[int]  # (Q,) index 0-4 of the correct candidate

    def flat(self) -> list[list[str]]:
        return [words for question in self.candidates for words in question]


def _words(line: str) -> list[str]:
    return [w for w in line.split() if w not in ("<s>", "</s>")]


def read_msr(questions_path: str | Path, answers_path: str | Path) -> MSRQuestions:
    """Read the lm_format files; every answer must equal exactly one of its 5 candidates."""
    for path in (questions_path, answers_path):
        if not Path(path).is_file():
            raise DataError(
                f"{path} is missing: put Holmes.lm_format.questions.txt and "
                "Holmes.lm_format.answers.txt in <data_dir>/msr_sentence_completion/ "
                "(see its SOURCE.md)"
            )
    question_lines = Path(questions_path).read_text(encoding="utf-8").splitlines()
    answer_lines = Path(answers_path).read_text(encoding="utf-8").splitlines()
    if len(question_lines) != CHOICES * len(answer_lines):
        raise DataError(
            f"{questions_path}: {len(question_lines)} lines for {len(answer_lines)} answers; "
            f"expected {CHOICES} candidate lines per answer"
        )
    candidates, answers = [], []
    for index, answer_line in enumerate(answer_lines):
        options = [_words(x) for x in question_lines[CHOICES * index : CHOICES * (index + 1)]]
        matches = [k for k, option in enumerate(options) if option == _words(answer_line)]
        if len(matches) != 1:
            raise DataError(
                f"{answers_path}:{index + 1}: the answer matches {len(matches)} of its candidates "
                f"({questions_path}:{CHOICES * index + 1}-{CHOICES * index + CHOICES}); expected 1"
            )
        candidates.append(options)
        answers.append(matches[0])
    return MSRQuestions(candidates, answers)


def choose(scores: torch.Tensor) -> torch.Tensor:
    """(Q, 5) scores -> (Q,) index of the best candidate (the first one on ties)."""
    return scores.argmax(dim=1)


def accuracy_report(predictions: Sequence[int], answers: Sequence[int]) -> dict[str, float]:
    """Accuracy (%) overall and on each half of the questions."""
    correct = [int(p) == int(a) for p, a in zip(predictions, answers, strict=True)]
    half = len(correct) // 2

    def percent(values: list[bool]) -> float:
        return 100.0 * sum(values) / max(len(values), 1)

    return {
        "all": percent(correct),
        "first_half": percent(correct[:half]),
        "second_half": percent(correct[half:]),
        "questions": float(len(correct)),
    }


def chain_tree(words: Sequence[str]) -> DependencyTree:
    """A left-to-right chain (each word heads the next): a placeholder for sequential models."""
    return DependencyTree(tuple(words), tuple(range(len(words))))


@torch.no_grad()
def score_trees(
    task, trees: Sequence[DependencyTree], batch_size: int = 128, unk_penalty: float = 0.0
) -> torch.Tensor:
    """log-probability of each tree's sentence under ``task`` (a DependencyLanguageModel), (N,).

    ``unk_penalty`` (nats) is subtracted for every word scored as ``<unk>``. The paper uses none
    (its 65k-word vocabulary leaves few unknown words). With a small vocabulary ``<unk>`` holds the
    mass of all unseen words and an unknown candidate wins too often; log(number of word types
    behind ``<unk>``) spreads that mass uniformly over them.
    """
    if task.vocab is None:
        raise CheckpointError(
            "the model has no vocabulary; was it trained with task=dependency_lm?"
        )
    vocab = Vocabulary(task.vocab, specials=())
    lowercase = bool(task.hparams.get("lowercase", True))
    replace_numbers = bool(task.hparams.get("replace_numbers", False))
    task.eval()
    scores = []
    for start in range(0, len(trees), batch_size):
        chunk = trees[start : start + batch_size]
        batch = collate_trees(
            [encode_tree(t, vocab, lowercase, replace_numbers) for t in chunk], vocab.pad_index
        )
        log_probs = task.sentence_log_probs(batch).double()
        if unk_penalty:
            unknown = (batch.tokens[:, 1:] == vocab.unk_index) & batch.mask[:, 1:]
            log_probs = log_probs - unk_penalty * unknown.sum(1).double()
        scores.append(log_probs)
    return torch.cat(scores) if scores else torch.zeros(0, dtype=torch.float64)


def candidate_trees(
    questions: MSRQuestions,
    needs_trees: bool,
    parsed: str | Path | None = None,
    spacy_model: str = "en_core_web_sm",
) -> list[DependencyTree]:
    """Trees of the 5 x Q candidates, in order: chains (sequential), a parsed file, or spaCy."""
    sentences = questions.flat()
    if not needs_trees:
        return [chain_tree(words) for words in sentences]
    if parsed is not None:
        trees, _ = read_conll(parsed)
        if len(trees) != len(sentences):
            raise DataError(
                f"{parsed}: {len(trees)} trees for {len(sentences)} candidate sentences; "
                "write one tree per line of the questions file, in order"
            )
        for index, (tree, words) in enumerate(zip(trees, sentences)):
            if list(tree.words) != list(words):
                raise DataError(
                    f"{tree.source}: words differ from candidate {index + 1} of the questions file"
                )
        return trees
    from treernn.data.dependency_parser import SpacyDependencyParser

    return SpacyDependencyParser(spacy_model).parse_tokenised(sentences)


def evaluate(
    task,
    questions: MSRQuestions,
    parsed: str | Path | None = None,
    spacy_model: str = "en_core_web_sm",
    batch_size: int = 128,
    unk_penalty: float = 0.0,
) -> tuple[dict[str, float], torch.Tensor]:
    """Accuracy report and the (Q, 5) candidate scores."""
    is_tree_model = task.encoder.input_view == "dependency_tree"
    trees = candidate_trees(questions, is_tree_model, parsed, spacy_model)
    scores = score_trees(task, trees, batch_size, unk_penalty).view(-1, CHOICES)
    return accuracy_report(choose(scores).tolist(), questions.answers), scores


def read_conll(
    path: str | Path,
    on_error: str = "raise",
    projective_only: bool = False,
    max_length: int | None = None,
) -> tuple[list[DependencyTree], ReadReport]:
    """``read_dependency_file`` (trees and its report), with one
    :class:`~treernn.errors.DataError` naming the file (and sentence) that cannot be used."""
    if not Path(path).is_file():
        raise DataError(f"{path}: no such CoNLL-U file")
    try:
        return read_dependency_file(path, on_error, projective_only, max_length)  # type: ignore[arg-type]
    except DependencyFormatError as error:
        raise DataError(str(error)) from error


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ckpt", required=True, help="a treernn checkpoint (task=dependency_lm)")
    parser.add_argument("--data-dir", default=None, help="default: $TREERNN_DATA_DIR or ./data")
    parser.add_argument("--parsed", default=None, help="CoNLL-U trees of the 5,200 candidates")
    parser.add_argument("--spacy-model", default="en_core_web_sm")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--output", default=None, help="write accuracies and scores as JSON")
    parser.add_argument(
        "--unk-penalty", type=float, default=0.0, help="nats per <unk> word (default 0: paper)"
    )


def run(args: argparse.Namespace) -> int:
    from treernn.data.download import default_data_dir
    from treernn.run import load_task

    data_dir = Path(args.data_dir) if args.data_dir else default_data_dir()
    questions = read_msr(data_dir / QUESTIONS_FILE, data_dir / ANSWERS_FILE)
    task = load_task(args.ckpt)
    report, scores = evaluate(
        task, questions, args.parsed, args.spacy_model, args.batch_size, args.unk_penalty
    )
    kind = type(task.encoder).__name__
    print(
        f"MSR sentence completion, {kind}: {report['all']:.2f}% on {int(report['questions'])} "
        f"questions (first half {report['first_half']:.2f}%, second half "
        f"{report['second_half']:.2f}%); chance 20%. Paper (Holmes training corpus): "
        + ", ".join(f"{name} {value}" for name, value in PAPER_ACCURACY.items())
    )
    if args.output:
        payload = {"model": kind, "accuracy": report, "scores": scores.tolist()}
        Path(args.output).write_text(json.dumps(payload), encoding="utf-8")
    return 0
