"""Stand-ins for the Top-down Tree LSTM paper's two evaluations, built deterministically from UD
English-EWT's gold trees (``docs/papers/ewt-standins.md`` says why and what they cannot show).

Zhang, Lu and Lapata (2016) test their tree language models on MSR Sentence Completion (Table 1:
1,040 questions from Sherlock Holmes novels, models trained on 522 other novels) and by reranking
the K best trees of the 2nd-order MSTParser on WSJ section 23 (Table 2). The novels are not
obtainable here and the WSJ is licensed, but EWT (train / dev / test CoNLL-U, gold trees with
UPOS and PTB-style XPOS tags) is what the ``dependency_lm`` task trains on. Both stand-ins use its
test trees, read as the task reads them (projective trees of at most ``max_length`` words).

Sentence completion (`completion_questions`). Word statistics come from the training file:
the count of each lower-cased word form and its most frequent (UPOS, XPOS) pair. For each test
sentence of at least ``min_length`` words, with a random generator seeded by ``(seed, sent_id)``:

1. the blank is one word, drawn uniformly from the sentence's eligible words: not the first word
   (its capital would mark it), a content word (UPOS NOUN, VERB, ADJ or ADV), alphabetic, not
   repeated elsewhere in the sentence (a copy would give it away), seen at least ``min_count``
   times in training (so a model trained with ``unk_threshold < min_count`` has a vector for it);
2. the pool of its distractors is every training word whose most frequent tags are the blank's
   tags in this sentence (same UPOS and same XPOS, so that a candidate's inflection does not give
   the answer away: a plural noun competes with plural nouns), seen at least ``min_count`` times,
   alphabetic, and not a word of the sentence;
3. the ``neighbours`` pool words closest to the answer in training frequency (smallest
   ``|log count - log count(answer)|``, ties by spelling) are kept and 4 of them drawn;
4. the answer and the 4 distractors, lower-cased, are shuffled, and each is put in the blank of the
   gold tree: 5 trees with the same structure that differ in one word.

A sentence without an eligible word, or whose pool has fewer than 4 words, gives no question. The
model scores each candidate tree (log P(S|T) for a tree LM, log P(S) for a sequential LM, the MSR
protocol) and the question is credited as MSR's are (`treernn.evaluation.completion.
question_credit`, ties at the top counted 1/k).

Reranking (`rerank_lists`). For each test sentence, K candidate trees: the gold tree and K-1
distinct projective trees in which ``changes`` words are re-attached to a head at most
``max_distance`` words away (`treernn.evaluation.reranking.perturbed_candidates`), shuffled,
from a generator seeded by ``(seed, sent_id)``. A sentence too short to have K distinct candidates
is left out, so every list has K trees. The model picks its highest-scoring candidate; reported are
UAS / LAS of the picked trees, of the first candidate (a random one: the lists are shuffled) and of
the oracle (always 100: the gold tree is in every list). Candidates keep the gold labels, so LAS
differs from UAS only through the words whose head was already wrong.

Everything here is a function of the files, the seed and the options: two models of one table get
the very same questions and lists.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from treernn.data.dependency import DependencyTree, normalise_word
from treernn.errors import DataError
from treernn.evaluation.completion import CHOICES, accuracy_report, question_credit
from treernn.evaluation.reranking import grouped_scores, perturbed_candidates, rerank
from treernn.evaluation.tree_scoring import model_vocabulary, read_conll, score_trees

#: the parts of speech a blank may be (content words, as MSR's blanks are)
CONTENT_UPOS = ("NOUN", "VERB", "ADJ", "ADV")
DISTRACTORS = CHOICES - 1


@dataclass(frozen=True)
class CompletionQuestion:
    """One question: the sentence's gold tree, the blank's position, the 5 candidates in order."""

    tree: DependencyTree
    position: int  # 0-based word index of the blank
    candidates: tuple[str, ...]
    answer: int  # index of the original word in ``candidates``

    @property
    def sent_id(self) -> str:
        return self.tree.metadata.get("sent_id", self.tree.source)

    def trees(self) -> list[DependencyTree]:
        """The gold tree with each candidate in the blank."""
        trees = []
        for word in self.candidates:
            words = list(self.tree.words)
            words[self.position] = word
            trees.append(replace(self.tree, words=tuple(words)))
        return trees


def _require_tags(tree: DependencyTree) -> None:
    if not tree.upos or set(tree.upos) == {"_"}:
        raise DataError(f"{tree.source}: no UPOS tags; the stand-ins need a tagged treebank")


@dataclass
class WordStatistics:
    """Training counts of lower-cased word forms and each form's most frequent (UPOS, XPOS)."""

    counts: Counter
    tags: dict[str, tuple[str, str]]
    #: (UPOS, XPOS) -> the forms whose most frequent tags these are, most frequent first
    by_tags: dict[tuple[str, str], list[str]] = field(default_factory=dict)

    @classmethod
    def of(cls, trees: Sequence[DependencyTree]) -> WordStatistics:
        counts: Counter = Counter()
        tag_counts: dict[str, Counter] = {}
        for tree in trees:
            _require_tags(tree)
            for word, upos, xpos in zip(tree.words, tree.upos, tree.xpos, strict=True):
                form = normalise_word(word)
                counts[form] += 1
                tag_counts.setdefault(form, Counter())[(upos, xpos)] += 1
        # most frequent tags, ties by the tags' spelling
        tags = {
            form: min(counter.items(), key=lambda item: (-item[1], item[0]))[0]
            for form, counter in tag_counts.items()
        }
        by_tags: dict[tuple[str, str], list[str]] = {}
        for form in sorted(counts, key=lambda f: (-counts[f], f)):
            by_tags.setdefault(tags[form], []).append(form)
        return cls(counts, tags, by_tags)

    def eligible(self, form: str, min_count: int) -> bool:
        """Alphabetic and seen at least ``min_count`` times in training."""
        return form.isalpha() and self.counts[form] >= min_count

    def pools(self, min_count: int) -> dict[tuple[str, str], list[str]]:
        """The eligible forms of each (UPOS, XPOS), most frequent first."""
        return {
            tags: [form for form in forms if self.eligible(form, min_count)]
            for tags, forms in self.by_tags.items()
        }


def completion_question(
    tree: DependencyTree,
    statistics: WordStatistics,
    pools: dict[tuple[str, str], list[str]],
    seed: int = 0,
    min_count: int = 2,
    neighbours: int = 10,
    min_length: int = 5,
) -> CompletionQuestion | None:
    """The question of one test sentence (see the module docstring), or None; ``pools`` is
    ``statistics.pools(min_count)``."""
    if len(tree) < min_length:
        return None
    _require_tags(tree)
    rng = random.Random(f"{seed}:{tree.metadata.get('sent_id', tree.source)}")
    forms = [normalise_word(word) for word in tree.words]
    in_sentence = set(forms)
    counts = statistics.counts
    choices = []
    for position in range(1, len(tree)):
        if tree.upos[position] not in CONTENT_UPOS:
            continue
        if not statistics.eligible(forms[position], min_count) or forms.count(forms[position]) > 1:
            continue
        tags = (tree.upos[position], tree.xpos[position])
        # the pool less the sentence's own words (those with these tags that are in the pool)
        taken = sum(
            statistics.tags.get(form) == tags and statistics.eligible(form, min_count)
            for form in in_sentence
        )
        if len(pools.get(tags, [])) - taken >= DISTRACTORS:
            choices.append(position)
    if not choices:
        return None
    position = rng.choice(choices)
    answer = forms[position]
    tags = (tree.upos[position], tree.xpos[position])
    pool = [form for form in pools[tags] if form not in in_sentence]
    distance = math.log(counts[answer])
    nearest = sorted(pool, key=lambda form: (abs(math.log(counts[form]) - distance), form))
    distractors = rng.sample(nearest[: max(neighbours, DISTRACTORS)], DISTRACTORS)
    candidates = [answer, *distractors]
    rng.shuffle(candidates)
    return CompletionQuestion(tree, position, tuple(candidates), candidates.index(answer))


def completion_questions(
    test: Sequence[DependencyTree],
    train: Sequence[DependencyTree],
    seed: int = 0,
    min_count: int = 2,
    neighbours: int = 10,
    min_length: int = 5,
    max_questions: int | None = None,
) -> list[CompletionQuestion]:
    """The questions of the test trees, in file order (the first ``max_questions``)."""
    if min_count < 1 or neighbours < DISTRACTORS:
        raise ValueError(f"min_count={min_count} >= 1 and neighbours={neighbours} >= 4 expected")
    statistics = WordStatistics.of(train)
    pools = statistics.pools(min_count)
    questions = []
    for tree in test:
        if max_questions is not None and len(questions) >= max_questions:
            break
        question = completion_question(
            tree, statistics, pools, seed, min_count, neighbours, min_length
        )
        if question is not None:
            questions.append(question)
    return questions


def rerank_lists(
    test: Sequence[DependencyTree],
    k: int = 4,
    changes: int = 2,
    max_distance: int | None = 3,
    seed: int = 0,
    max_sentences: int | None = None,
) -> tuple[list[list[DependencyTree]], list[DependencyTree]]:
    """K candidate trees per test sentence (those with K distinct ones) and the gold trees."""
    if k < 2 or changes < 1:
        raise ValueError(f"k={k} >= 2 and changes={changes} >= 1 expected")
    groups, gold = [], []
    for tree in test:
        if max_sentences is not None and len(gold) >= max_sentences:
            break
        rng = random.Random(f"{seed}:{tree.metadata.get('sent_id', tree.source)}")
        candidates = perturbed_candidates(tree, k, changes, rng, max_distance)
        if len(candidates) == k:
            groups.append(candidates)
            gold.append(tree)
    return groups, gold


def evaluate_completion(
    task: Any, questions: Sequence[CompletionQuestion], batch_size: int = 128
) -> dict[str, Any]:
    """Accuracy (%) of ``task`` (a dependency LM) on the questions, as MSR's are credited
    (`treernn.evaluation.completion.accuracy_report`; ``in_vocab``: the questions whose
    answer has a vector of its own), with the number of questions."""
    if not questions:
        raise DataError("no sentence-completion question: the test file has no eligible sentence")
    trees = [tree for question in questions for tree in question.trees()]
    scores = score_trees(task, trees, batch_size).view(-1, CHOICES)  # (Q, 5)
    credit = question_credit(scores, [question.answer for question in questions])
    vocab, lowercase, replace_numbers = model_vocabulary(task)
    unknown = vocab.unk_index

    def known(word: str) -> bool:
        return vocab.stoi.get(normalise_word(word, lowercase, replace_numbers), unknown) != unknown

    answer_known = [known(q.candidates[q.answer]) for q in questions]
    report = accuracy_report(credit, answer_known)
    report["all_candidates_known"] = float(sum(all(map(known, q.candidates)) for q in questions))
    return report


def evaluate_reranking(
    task: Any,
    groups: Sequence[Sequence[DependencyTree]],
    gold: Sequence[DependencyTree],
    batch_size: int = 128,
) -> dict[str, float]:
    """UAS / LAS (%) of the candidates ``task`` prefers, the first and the oracle ones."""
    if not groups:
        raise DataError("no reranking list: the test file has no sentence with K candidates")
    flat = [tree for group in groups for tree in group]
    with torch.no_grad():
        scores = score_trees(task, flat, batch_size).tolist()
    return rerank(grouped_scores(scores, groups), groups, gold)


def standin_metrics(
    completion: dict[str, Any] | None, reranking: dict[str, float] | None, prefix: str = "test"
) -> dict[str, float]:
    """The logged metrics (%): ``completion_acc``, ``rerank_uas``, ``rerank_las``,
    ``rerank_first_uas``, ``rerank_oracle_uas`` under ``prefix/``."""
    metrics = {}
    if completion is not None:
        metrics[f"{prefix}/completion_acc"] = float(completion["all"])
    if reranking is not None:
        for name in ("uas", "las", "first_uas", "oracle_uas"):
            metrics[f"{prefix}/rerank_{name}"] = float(reranking[name])
    return metrics


@dataclass(frozen=True)
class StandInOptions:
    """How the stand-ins are built (the module docstring); the callback's and commands' options."""

    seed: int = 0
    min_count: int = 2
    neighbours: int = 10
    min_length: int = 5
    k: int = 4
    changes: int = 2
    max_distance: int | None = 3
    max_sentences: int | None = None  # the first n questions / lists (tests, smoke runs)


def read_treebanks(
    data_dir: str | Path,
    train_file: str,
    test_file: str,
    projective_only: bool = True,
    max_length: int | None = 100,
) -> tuple[list[DependencyTree], list[DependencyTree]]:
    """The training and test trees, read as the ``dependency_lm`` task reads them."""
    trees = []
    for name in (train_file, test_file):
        found, _ = read_conll(Path(data_dir) / name, "skip", projective_only, max_length)
        trees.append(found)
    return trees[0], trees[1]


def build_standins(
    train: Sequence[DependencyTree], test: Sequence[DependencyTree], options: StandInOptions
) -> tuple[list[CompletionQuestion], tuple[list[list[DependencyTree]], list[DependencyTree]]]:
    """The completion questions and the reranking lists (candidate lists, gold trees)."""
    questions = completion_questions(
        test,
        train,
        options.seed,
        options.min_count,
        options.neighbours,
        options.min_length,
        options.max_sentences,
    )
    lists = rerank_lists(
        test, options.k, options.changes, options.max_distance, options.seed, options.max_sentences
    )
    return questions, lists


def format_standins(completion: dict[str, Any] | None, reranking: dict[str, float] | None) -> str:
    """The lines the callback and the commands print."""
    lines = []
    if completion is not None:
        in_vocab = completion["in_vocab"]
        known = (
            f"{in_vocab:.2f}% on the {int(completion['in_vocab_questions'])} whose answer is in "
            "the vocabulary"
            if in_vocab is not None
            else "no answer in the vocabulary"
        )
        lines.append(
            f"EWT sentence completion (MSR stand-in): {completion['all']:.2f}% of "
            f"{int(completion['questions'])} questions (chance 20%; "
            f"{int(completion['tied_questions'])} ties at the top, counted 1/k; {known})"
        )
    if reranking is not None:
        lines.append(
            f"EWT reranking (k-best stand-in): UAS {reranking['uas']:.2f}, LAS "
            f"{reranking['las']:.2f} on {int(reranking['sentences'])} sentences (a random "
            f"candidate: UAS {reranking['first_uas']:.2f}; oracle {reranking['oracle_uas']:.2f})"
        )
    return "\n".join(lines)
