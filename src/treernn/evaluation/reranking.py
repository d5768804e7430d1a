"""Dependency-parse reranking with a tree language model (Zhang et al. 2016, Section 3.3, Table 2),
for ``python -m treernn rerank`` and the EWT stand-in (`treernn.evaluation.ewt_standins`).

Each sentence has K candidate trees (the paper: the K best of the 2nd-order MSTParser). The tree
model scores every candidate by log P(S|T) and the best-scoring one is kept; the result is the
unlabelled and labelled attachment score (UAS/LAS) of the kept trees against the gold trees
(`rerank`, beside the first candidate's and the oracle's).

Candidate files (`group_candidates`): CoNLL-U (or CoNLL-X), one block per candidate tree,
candidates of the same sentence consecutive and marked with ``# sent_id = <id>`` (a new id starts
the next sentence); an optional ``# candidate = <k>`` comment is kept for reference. Candidates
may be non-projective: the breadth-first generation is defined for any tree.

Synthetic candidates (`perturbed_candidates`): the gold tree plus K-1 trees that each
re-attach a few words to other heads (kept projective), in shuffled order; reranking those is an
easy synthetic task, not the paper's benchmark.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, replace

from treernn.data.dependency import DependencyTree, find_cycle, is_projective
from treernn.errors import DataError


@dataclass
class AttachmentScore:
    heads_correct: int = 0
    labels_correct: int = 0
    words: int = 0

    def add(self, predicted: DependencyTree, gold: DependencyTree, exclude_labels=()) -> None:
        for index, (head, gold_head) in enumerate(zip(predicted.heads, gold.heads)):
            gold_label = gold.labels[index] if gold.labels else "_"
            if gold_label in exclude_labels:
                continue
            self.words += 1
            if head == gold_head:
                self.heads_correct += 1
                if predicted.labels and predicted.labels[index] == gold_label:
                    self.labels_correct += 1

    @property
    def uas(self) -> float:
        return 100.0 * self.heads_correct / max(self.words, 1)

    @property
    def las(self) -> float:
        return 100.0 * self.labels_correct / max(self.words, 1)


def group_candidates(candidates: Sequence[DependencyTree]) -> list[list[DependencyTree]]:
    """Consecutive trees with the same ``sent_id`` form one sentence's candidate list."""
    groups: list[list[DependencyTree]] = []
    previous = object()
    for tree in candidates:
        sent_id = tree.metadata.get("sent_id")
        if sent_id is None:
            raise DataError(f"{tree.source}: candidate without '# sent_id = ...'")
        if sent_id != previous:
            groups.append([])
            previous = sent_id
        groups[-1].append(tree)
    return groups


def rerank(
    scores: Sequence[Sequence[float]],
    groups: Sequence[Sequence[DependencyTree]],
    gold: Sequence[DependencyTree],
    exclude_labels: Sequence[str] = (),
) -> dict[str, float]:
    """UAS/LAS of the reranked choice, of the first candidate and of the oracle."""
    if len(groups) != len(gold):
        raise DataError(
            f"{len(groups)} candidate sentences but {len(gold)} gold trees; they must align"
        )
    chosen, first, oracle = AttachmentScore(), AttachmentScore(), AttachmentScore()
    for sentence_scores, candidates, gold_tree in zip(scores, groups, gold):
        for candidate in candidates:
            if candidate.words != gold_tree.words:
                raise DataError(
                    f"{candidate.source}: words differ from the gold tree at {gold_tree.source}"
                )
        best = max(range(len(candidates)), key=lambda k: (sentence_scores[k], -k))
        chosen.add(candidates[best], gold_tree, exclude_labels)
        first.add(candidates[0], gold_tree, exclude_labels)
        per_candidate = []
        for candidate in candidates:
            score = AttachmentScore()
            score.add(candidate, gold_tree, exclude_labels)
            per_candidate.append(score)
        best_possible = max(per_candidate, key=lambda s: (s.heads_correct, s.labels_correct))
        oracle.heads_correct += best_possible.heads_correct
        oracle.labels_correct += best_possible.labels_correct
        oracle.words += best_possible.words
    return {
        "uas": chosen.uas,
        "las": chosen.las,
        "first_uas": first.uas,
        "first_las": first.las,
        "oracle_uas": oracle.uas,
        "oracle_las": oracle.las,
        "sentences": float(len(gold)),
    }


def perturbed_candidates(
    gold: DependencyTree,
    k: int,
    changes: int,
    rng: random.Random,
    max_distance: int | None = None,
) -> list[DependencyTree]:
    """Gold and up to k-1 distinct projective trees with ``changes`` words moved, shuffled.

    A moved word gets a new head drawn uniformly from the other words of the sentence, or, with
    ``max_distance``, from the words at most that many positions away from it (a local
    attachment error, the kind a parser makes).
    """
    trees = [gold]
    seen = {gold.heads}
    n = len(gold)
    for _ in range(20 * k):
        if len(trees) == k or n < 2:
            break
        heads = list(gold.heads)
        for _ in range(changes):
            word = rng.randrange(1, n + 1)
            if heads[word - 1] == 0:
                continue
            if max_distance is None:
                first, last = 1, n
            else:
                first, last = max(1, word - max_distance), min(n, word + max_distance)
            heads[word - 1] = rng.choice([h for h in range(first, last + 1) if h != word])
        heads_tuple = tuple(heads)
        if heads_tuple in seen or find_cycle(heads) is not None or not is_projective(heads):
            continue
        seen.add(heads_tuple)
        trees.append(replace(gold, heads=heads_tuple))
    rng.shuffle(trees)
    sent_id = gold.metadata.get("sent_id", gold.source)
    return [
        replace(t, metadata={"sent_id": sent_id, "candidate": str(i)}) for i, t in enumerate(trees)
    ]


def grouped_scores(
    flat_scores: Sequence[float], groups: Sequence[Sequence[DependencyTree]]
) -> list[list[float]]:
    """The scores of all candidates, in file order, cut into the groups' candidate lists."""
    if len(flat_scores) != sum(len(group) for group in groups):
        raise ValueError(f"{len(flat_scores)} scores for {sum(map(len, groups))} candidates")
    scores, start = [], 0
    for group in groups:
        scores.append(list(flat_scores[start : start + len(group)]))
        start += len(group)
    return scores
