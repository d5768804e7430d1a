"""Sentence completion with a dependency-tree or sequential LM: MSR Sentence Completion (Zweig and
Burges 2011) and the way its questions are credited, for ``python -m treernn msr`` and for the
EWT stand-in (`treernn.evaluation.ewt_standins`).

Zhang, Lu and Lapata (2016), Section 3.2 and Table 1: each of the 1,040 questions has 5 candidate
sentences (``Holmes.lm_format.questions.txt``, lines 5i+1..5i+5); the model scores each candidate by
its log-probability, log P(S|T) = sum_t log P(w_t | D(w_t)) over the breadth-first tree for TreeLSTM
and LdTreeLSTM, log P(S) for a sequential LSTM, and picks the highest. Accuracy is reported on all
1,040 questions and on each half (1-520, 521-1040). Paper: LdTreeLSTM 60.67, TreeLSTM 56.73, LSTM
55.96 (d=400), trained on the 522-novel Holmes corpus, which is not shipped here
(``shared/data/msr_sentence_completion/SOURCE.md`` says where it comes from).

Tree models need a dependency parse of every candidate (`candidate_trees`): a CoNLL-U file
with the 5,200 candidate trees in question order (written by any parser, e.g.
``python -m treernn.data.dependency_parser --msr``), or else a locally installed spaCy pipeline.
Sequential models need no parse.

Ties (`question_credit`). When the answer word is not in the vocabulary it becomes
``<unk>``, like any other unknown candidate word, and candidates that differ only in which unknown
word they hold are the same model input. With a small vocabulary most questions then have several
candidates with the top score, and taking the first of them (``argmax``) favours candidate a. Here
no position is favoured: candidates that encode to the same input (the same token ids and tree)
are scored once and share that score bit for bit
(`treernn.evaluation.tree_scoring.score_trees`), the k candidates with the top score are
tied, and a question counts 1/k when the answer is among them (``ties="expected"``, the accuracy
expected from a uniform draw) or 0/1 from a seeded draw (``ties="random"``). Scores of different
inputs are compared exactly; ``tolerance`` (nats) widens "the top" to scores within that distance
of the best. The report adds the number of questions with a tie at the top and the accuracy on
the questions whose answer word is in the model's vocabulary. A model that scores every candidate
alike gets exactly 20%; one whose scores are random but equal for equal inputs gets a little more
when answer words are in the vocabulary more often than the other candidates (they then stand
alone, not in a tie).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from treernn.data.dependency import DependencyTree, normalise_word
from treernn.data.vocab import Vocabulary
from treernn.errors import DataError
from treernn.evaluation.tree_scoring import model_vocabulary, read_conll, score_trees
from treernn.files import read_input_text, text_lines

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
    """Read the lm_format files, one sentence per line (lines end at ``\\n`` only, as the
    training text's readers split them); every answer must equal exactly one of its 5
    candidates."""
    for path in (questions_path, answers_path):
        if not Path(path).exists():
            raise DataError(
                f"{path} is missing: put Holmes.lm_format.questions.txt and "
                "Holmes.lm_format.answers.txt in <data_dir>/msr_sentence_completion/ "
                "(see its SOURCE.md)"
            )
    question_lines = text_lines(read_input_text(questions_path, "MSR questions file"))
    answer_lines = text_lines(read_input_text(answers_path, "MSR answers file"))
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
    exactly equal, right when identical inputs share one score, see `score_trees`). With
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
    """Score every candidate with ``task`` and credit each question (`question_credit`)."""
    is_tree_model = task.encoder.input_view == "dependency_tree"
    trees = candidate_trees(questions, is_tree_model, parsed, spacy_model)
    scores = score_trees(task, trees, batch_size, unk_penalty).view(-1, CHOICES)
    credit = question_credit(scores, questions.answers, ties, seed, tie_tolerance)
    known = answers_in_vocabulary(questions, *model_vocabulary(task))
    return MSREvaluation(accuracy_report(credit, known), scores, credit, known)
