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

Ties. When the answer word is not in the vocabulary it becomes ``<unk>``, like any other unknown
candidate word, and candidates that differ only in which unknown word they hold are the same model
input. With a small vocabulary most questions then have several candidates with the top score, and
taking the first of them (``argmax``) favours candidate a. Here no position is favoured: candidates
that encode to the same input (the same token ids and tree) are scored once and share that score
bit for bit, the k candidates with the top score are tied, and a question counts 1/k when the
answer is among them (``--ties expected``, the accuracy expected from a uniform draw) or 0/1 from a
draw seeded by ``--seed`` (``--ties random``). Scores of different inputs are compared exactly;
``--tie-tolerance`` (nats) widens "the top" to scores within that distance of the best. The report
adds the number of questions with a tie at the top and the accuracy on the questions whose answer
word is in the model's vocabulary. A model that scores every candidate alike gets exactly 20%;
one whose scores are random but equal for equal inputs gets a little more when answer words are
in the vocabulary more often than the other candidates (they then stand alone, not in a tie).

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
    normalise_word,
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


TIE_RULES = ("expected", "random")


@dataclass
class QuestionCredit:
    """How each question was answered: the candidates sharing the top score and the credit."""

    top: torch.Tensor  # (Q, 5) True for the candidates with the top score
    credit: torch.Tensor  # (Q,) float64 in [0, 1]: 1/k or 0/1 (see ``question_credit``)

    @property
    def tied(self) -> torch.Tensor:
        """(Q,) True where more than one candidate has the top score."""
        return self.top.sum(1) > 1


def question_credit(
    scores: torch.Tensor,
    answers: Sequence[int] | torch.Tensor,
    ties: str = "expected",
    seed: int = 0,
    tolerance: float = 0.0,
) -> QuestionCredit:
    """Credit of each question from its (Q, 5) candidate scores, with no preference for a position.

    The top of a question is every candidate whose score is within ``tolerance`` of its best (0:
    exactly equal, right when identical inputs share one score, see :func:`score_trees`). With
    k candidates on top, ``ties="expected"`` gives 1/k if the answer is one of them, else 0;
    ``ties="random"`` draws one of the k uniformly (``torch.Generator`` seeded with ``seed``, so
    the same seed gives the same draws) and gives 1 if it is the answer.
    """
    if ties not in TIE_RULES:
        raise ValueError(f"ties={ties!r}: expected one of {TIE_RULES}")
    if tolerance < 0:
        raise ValueError(f"tolerance={tolerance}: expected a number >= 0")
    scores = scores.double()
    if torch.isnan(scores).any():
        raise ValueError("candidate scores contain NaN; the model's log-probabilities are broken")
    answers = torch.as_tensor(answers, dtype=torch.long)
    best = scores.max(dim=1, keepdim=True).values  # (Q, 1)
    top = scores >= best - tolerance  # (Q, 5)
    answer_on_top = top.gather(1, answers[:, None]).squeeze(1)  # (Q,)
    if ties == "expected":
        credit = answer_on_top.double() / top.sum(1).double()
    else:
        generator = torch.Generator().manual_seed(seed)
        keys = torch.rand(scores.shape, generator=generator, dtype=torch.float64)
        drawn = keys.masked_fill(~top, -1.0).argmax(dim=1)  # uniform over the top candidates
        credit = (drawn == answers).double()
    return QuestionCredit(top=top, credit=credit)


def accuracy_report(
    credit: QuestionCredit, answer_in_vocab: Sequence[bool] | None = None
) -> dict[str, float | None]:
    """Accuracy (%) overall and on each half, the ties at the top, and the in-vocabulary subset.

    ``answer_in_vocab`` marks the questions whose answer word the model knows; the accuracy on
    them is ``None`` when there are none (or when ``answer_in_vocab`` is not given).
    """
    values = credit.credit
    half = len(values) // 2

    def percent(part: torch.Tensor) -> float:
        return 100.0 * part.sum().item() / max(len(part), 1)

    tied = int(credit.tied.sum())
    report: dict[str, float | None] = {
        "all": percent(values),
        "first_half": percent(values[:half]),
        "second_half": percent(values[half:]),
        "questions": float(len(values)),
        "chance": 100.0 / CHOICES,
        "tied_questions": float(tied),
        "tied_percent": 100.0 * tied / max(len(values), 1),
        "in_vocab_questions": None,
        "in_vocab": None,
    }
    if answer_in_vocab is not None:
        known = torch.as_tensor(list(answer_in_vocab), dtype=torch.bool)
        if len(known) != len(values):
            raise ValueError(f"{len(known)} in-vocabulary flags for {len(values)} questions")
        report["in_vocab_questions"] = float(known.sum())
        report["in_vocab"] = percent(values[known]) if known.any() else None
    return report


def answer_words(candidates: Sequence[Sequence[str]], answer: int) -> list[str]:
    """The words that make the answer candidate differ from the others (MSR: one word).

    Candidates of equal length: the answer's words at the positions where the candidates differ.
    Otherwise the answer's words that are missing from some other candidate.
    """
    chosen = candidates[answer]
    if len({len(c) for c in candidates}) == 1:
        return [w for i, w in enumerate(chosen) if len({c[i] for c in candidates}) > 1]
    return [w for w in chosen if any(w not in c for c in candidates)]


def answers_in_vocabulary(
    questions: MSRQuestions, vocab: Vocabulary, lowercase: bool, replace_numbers: bool
) -> list[bool]:
    """Per question: every answer word, normalised as the model reads it, has its own id."""
    unk = vocab.stoi.get("<unk>")
    return [
        all(
            vocab.stoi.get(normalise_word(w, lowercase, replace_numbers), unk) != unk
            for w in answer_words(candidates, answer)
        )
        for candidates, answer in zip(questions.candidates, questions.answers, strict=True)
    ]


def chain_tree(words: Sequence[str]) -> DependencyTree:
    """A left-to-right chain (each word heads the next): a placeholder for sequential models."""
    return DependencyTree(tuple(words), tuple(range(len(words))))


def model_vocabulary(task) -> tuple[Vocabulary, bool, bool]:
    """A DependencyLanguageModel's vocabulary and how it normalises words (lowercase, numbers)."""
    if task.vocab is None:
        raise CheckpointError(
            "the model has no vocabulary; was it trained with task=dependency_lm?"
        )
    return (
        Vocabulary(task.vocab, specials=()),
        bool(task.hparams.get("lowercase", True)),
        bool(task.hparams.get("replace_numbers", False)),
    )


@torch.no_grad()
def score_trees(
    task, trees: Sequence[DependencyTree], batch_size: int = 128, unk_penalty: float = 0.0
) -> torch.Tensor:
    """log-probability of each tree's sentence under ``task`` (a DependencyLanguageModel), (N,).

    Trees that encode to the same input (token ids and heads; e.g. two candidates whose different
    words are both ``<unk>``) are scored once and get the very same float: a batched forward pass
    need not give bitwise-equal results for equal rows, and tie detection compares exactly.

    ``unk_penalty`` (nats) is subtracted for every word scored as ``<unk>``. The paper uses none
    (its 65k-word vocabulary leaves few unknown words). With a small vocabulary ``<unk>`` holds the
    mass of all unseen words and an unknown candidate wins too often; log(number of word types
    behind ``<unk>``) spreads that mass uniformly over them.
    """
    vocab, lowercase, replace_numbers = model_vocabulary(task)
    task.eval()
    encoded, position, unique_of = [], {}, []
    for tree in trees:
        item = encode_tree(tree, vocab, lowercase, replace_numbers)
        key = (tuple(item.sequence_tokens), tuple(tree.heads))
        if key not in position:
            position[key] = len(encoded)
            encoded.append(item)
        unique_of.append(position[key])
    scores = []
    for start in range(0, len(encoded), batch_size):
        batch = collate_trees(encoded[start : start + batch_size], vocab.pad_index)
        log_probs = task.sentence_log_probs(batch).double()
        if unk_penalty:
            unknown = (batch.tokens[:, 1:] == vocab.unk_index) & batch.mask[:, 1:]
            log_probs = log_probs - unk_penalty * unknown.sum(1).double()
        scores.append(log_probs)
    if not scores:
        return torch.zeros(0, dtype=torch.float64)
    return torch.cat(scores)[torch.tensor(unique_of, dtype=torch.long)]


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


@dataclass
class MSREvaluation:
    report: dict[str, float | None]  # see accuracy_report
    scores: torch.Tensor  # (Q, 5) log-probability of each candidate
    credit: QuestionCredit
    answer_in_vocab: list[bool]  # (Q,)


def evaluate(
    task,
    questions: MSRQuestions,
    parsed: str | Path | None = None,
    spacy_model: str = "en_core_web_sm",
    batch_size: int = 128,
    unk_penalty: float = 0.0,
    ties: str = "expected",
    seed: int = 0,
    tie_tolerance: float = 0.0,
) -> MSREvaluation:
    """Score every candidate with ``task`` and credit each question (:func:`question_credit`)."""
    is_tree_model = task.encoder.input_view == "dependency_tree"
    trees = candidate_trees(questions, is_tree_model, parsed, spacy_model)
    scores = score_trees(task, trees, batch_size, unk_penalty).view(-1, CHOICES)
    credit = question_credit(scores, questions.answers, ties, seed, tie_tolerance)
    known = answers_in_vocabulary(questions, *model_vocabulary(task))
    return MSREvaluation(accuracy_report(credit, known), scores, credit, known)


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
    parser.add_argument("--output", default=None, help="write accuracies and scores as JSON")
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
    from treernn.checkpoints import load_trained
    from treernn.data.download import default_data_dir
    from treernn.tasks.dependency_lm import DependencyLanguageModel

    task = load_trained(
        args.ckpt,
        kind=DependencyLanguageModel,
        command="msr",
        hint="a dependency language model's checkpoint (task=dependency_lm, e.g. "
        "experiment=tdlstm/ld_treelstm_ewt_small)",
    ).task
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
    if args.output:
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
        Path(args.output).write_text(json.dumps(payload), encoding="utf-8")
    return 0
