"""Dependency trees as the Top-down Tree LSTM reads them (Zhang, Lu and Lapata, NAACL 2016):
the breadth-first linearisation, the vocabulary, and batches.

Linearisation (paper Section 2.1-2.2, Figure 2): trees are generated top-down, breadth-first from
ROOT; for each node its left dependents nearest-first, then its right dependents nearest-first. Step
``t`` (1..n) generates one word from a predecessor step ``t'`` (0 = ROOT) along one of four edge
types (`treernn.encoders.top_down_tree`): LEFT (head -> first left dependent), NX_LEFT
(previous left sibling -> next left dependent), RIGHT and NX_RIGHT. ROOT's dependents are its right
dependents. For LdTreeLSTM (Section 2.4) a RIGHT step also carries the head's left dependents,
farthest first (left to right in the sentence).

A batch (`DependencyBatch`) has two input views (`treernn.data.batch`): the
breadth-first order with its schedule (``"dependency_tree"``, for the tree models) and the sentence
order (``"tokens"``, for the sequential LSTM baseline on the same sentences).
"""

from __future__ import annotations

import re
from collections import Counter, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields

import torch
from torch import Tensor

from treernn.data.batch import EncoderInputs, length_mask, missing_view, pad_rows
from treernn.data.dependency_reading import DependencyFormatError, DependencyTree
from treernn.data.vocab import Vocabulary
from treernn.encoders.top_down_tree import LEFT, NX_LEFT, NX_RIGHT, RIGHT, TopDownTree

ROOT_TOKEN = "<root>"
SPECIALS = ("<pad>", "<unk>", ROOT_TOKEN)


@dataclass(frozen=True)
class Linearisation:
    """The breadth-first generation steps of a tree; index 0 is ROOT, steps are 1..n.

    ``word_index[t]``: 0-based sentence position of the word generated at step t (-1 for ROOT);
    ``predecessor[t]``: the step t' whose state and word generate step t;
    ``edge_type[t]``: LEFT, RIGHT, NX_LEFT or NX_RIGHT (-1 for ROOT);
    ``level[t]``: generation depth, ``level[t] = level[t'] + 1`` (ROOT 0), so every predecessor
    lies on the previous level and all steps of one level can run together;
    ``left_dependents[t]``: for a RIGHT step, the steps of the head's left dependents, farthest
    first (the LdTreeLSTM sequence v_t); empty otherwise.
    """

    word_index: tuple[int, ...]
    predecessor: tuple[int, ...]
    edge_type: tuple[int, ...]
    level: tuple[int, ...]
    left_dependents: tuple[tuple[int, ...], ...]


def linearise(heads: Sequence[int]) -> Linearisation:
    """Breadth-first linearisation of a tree given 1-based heads (0 = ROOT)."""
    n = len(heads)
    left_children: list[list[int]] = [[] for _ in range(n + 1)]
    right_children: list[list[int]] = [[] for _ in range(n + 1)]
    for dependent, head in enumerate(heads, start=1):
        (left_children if dependent < head else right_children)[head].append(dependent)
    for children in left_children:
        children.sort(reverse=True)  # nearest first
    for children in right_children:
        children.sort()
    step_of = {0: 0}
    word_index, predecessor, edge_type, level = [-1], [0], [-1], [0]
    left_dependents: list[tuple[int, ...]] = [()]
    queue = deque([0])
    while queue:
        head = queue.popleft()
        for side, children in ((LEFT, left_children[head]), (RIGHT, right_children[head])):
            for rank, child in enumerate(children):
                previous = head if rank == 0 else children[rank - 1]
                step_of[child] = len(word_index)
                word_index.append(child - 1)
                predecessor.append(step_of[previous])
                edge_type.append(side if rank == 0 else (NX_LEFT if side == LEFT else NX_RIGHT))
                level.append(level[step_of[previous]] + 1)
                if side == RIGHT and rank == 0:
                    farthest_first = tuple(step_of[c] for c in reversed(left_children[head]))
                    left_dependents.append(farthest_first)
                else:
                    left_dependents.append(())
                queue.append(child)
    if len(word_index) != n + 1:
        raise DependencyFormatError("heads do not form a tree rooted at 0 (cycle or bad head)")
    return Linearisation(
        tuple(word_index),
        tuple(predecessor),
        tuple(edge_type),
        tuple(level),
        tuple(left_dependents),
    )


# ----------------------------------------------------------------------------- vocabulary, encoding


_NUMBER = re.compile(r"^[+-]?\d[\d,.:/-]*$")


def normalise_word(word: str, lowercase: bool = True, replace_numbers: bool = False) -> str:
    if replace_numbers and _NUMBER.match(word):
        return "<num>"
    return word.lower() if lowercase else word


def build_vocabulary(
    sentences: Iterable[Sequence[str]], unk_threshold: int = 5, max_size: int | None = None
) -> tuple[Vocabulary, list[int]]:
    """Words seen more than ``unk_threshold`` times, most frequent first, after ``SPECIALS``.

    Returns the vocabulary and per-id training counts (``<unk>`` gets the count of the words it
    replaces; ``<pad>`` and ``<root>`` get 0, as they are never predicted).
    """
    counts = Counter(word for sentence in sentences for word in sentence)
    kept = [w for w, c in sorted(counts.items(), key=lambda i: (-i[1], i[0])) if c > unk_threshold]
    kept = [w for w in kept if w not in SPECIALS][: None if max_size is None else max_size]
    vocab = Vocabulary(kept, specials=SPECIALS)
    unigram = [0] * len(vocab)
    for word, count in counts.items():
        unigram[vocab.stoi.get(word, vocab.unk_index)] += count
    unigram[vocab.pad_index] = unigram[vocab.stoi[ROOT_TOKEN]] = 0
    return vocab, unigram


@dataclass(frozen=True)
class EncodedTree:
    """One sentence as token ids, in breadth-first order (tree models) and sentence order."""

    tokens: list[int]  # (n+1,) BFS order, ROOT first
    sequence_tokens: list[int]  # (n+1,) sentence order, ROOT as begin-of-sentence first
    steps: Linearisation


def encode_tree(
    tree: DependencyTree, vocab: Vocabulary, lowercase: bool = True, replace_numbers: bool = False
) -> EncodedTree:
    words = [normalise_word(w, lowercase, replace_numbers) for w in tree.words]
    ids = vocab.encode(words)
    steps = linearise(tree.heads)
    root = vocab.stoi[ROOT_TOKEN]
    bfs = [root] + [ids[i] for i in steps.word_index[1:]]
    return EncodedTree(tokens=bfs, sequence_tokens=[root] + ids, steps=steps)


@dataclass
class DependencyBatch:
    """A padded batch of encoded trees (right padding), step 0 of every row is ROOT.

    tokens: (B, T+1) ids in breadth-first order; mask: (B, T+1) True at real steps;
    sequence_tokens: (B, T+1) the same words in sentence order (ROOT first, as begin-of-sentence);
    word_index: (B, T+1) sentence position of the word of each step (-1 for ROOT and padding);
    tree: the `TopDownTree` schedule, (B, T+1) predecessor/edge/level tensors and
    (B, T+1, K) left-dependent steps.
    """

    tokens: Tensor
    mask: Tensor
    sequence_tokens: Tensor
    word_index: Tensor
    tree: TopDownTree

    #: the input views this batch offers (see `encoder_inputs`)
    views = ("dependency_tree", "tokens")

    def __len__(self) -> int:
        return self.tokens.size(0)

    def encoder_inputs(self, view: str) -> EncoderInputs:
        """The inputs of ``view`` and the words it predicts (each word once, no end token).

        ``"dependency_tree"``: all breadth-first steps with ``tree=``; the state of step t predicts
        the word of step t (Eq. 2d), so the targets are steps 1..T. ``"tokens"``: the sentence
        order read left to right from ROOT; input i predicts word i + 1.
        """
        targets_mask = self.mask[:, 1:]
        if view == "dependency_tree":
            return EncoderInputs(
                view,
                self.tokens,
                self.mask,
                {"tree": self.tree},
                targets=self.tokens[:, 1:],
                target_mask=targets_mask,
                first_predicting_step=1,
            )
        if view == "tokens":
            input_mask = targets_mask.clone()  # input i is real when it predicts a real word
            input_mask[:, 0] = True
            return EncoderInputs(
                view,
                self.sequence_tokens[:, :-1],
                input_mask,
                targets=self.sequence_tokens[:, 1:],
                target_mask=targets_mask,
            )
        raise missing_view(self, view, self.views)

    def to(self, device: torch.device | str) -> DependencyBatch:
        """Move every tensor (Lightning calls this on batch transfer)."""
        tree = TopDownTree(*(getattr(self.tree, f.name).to(device) for f in fields(self.tree)))
        return DependencyBatch(
            tokens=self.tokens.to(device),
            mask=self.mask.to(device),
            sequence_tokens=self.sequence_tokens.to(device),
            word_index=self.word_index.to(device),
            tree=tree,
        )


def collate_trees(examples: Sequence[EncodedTree], pad_index: int = 0) -> DependencyBatch:
    """Pad a list of encoded trees into one `DependencyBatch` (each field one tensor,
    `treernn.data.batch.pad_rows`)."""
    lengths = [len(e.tokens) for e in examples]
    width = max(lengths)
    ld_width = max((len(s) for e in examples for s in e.steps.left_dependents), default=0)
    steps = [e.steps for e in examples]
    tokens = pad_rows((e.tokens for e in examples), pad_index, width)
    sequence_tokens = pad_rows((e.sequence_tokens for e in examples), pad_index, width)
    mask = length_mask(lengths, width)
    predecessor = pad_rows((s.predecessor for s in steps), 0, width)
    edge_type = pad_rows(((0, *s.edge_type[1:]) for s in steps), 0, width)  # ROOT's -1 left out
    level = pad_rows((s.level for s in steps), 0, width)
    word_index = pad_rows((s.word_index for s in steps), -1, width)
    no_dependents = [0] * ld_width
    left_dependents = torch.tensor(
        [
            [[*deps, *[0] * (ld_width - len(deps))] for deps in s.left_dependents]
            + [no_dependents] * (width - len(s.left_dependents))
            for s in steps
        ],
        dtype=torch.long,
    )
    left_lengths = pad_rows(([len(deps) for deps in s.left_dependents] for s in steps), 0, width)
    tree = TopDownTree(predecessor, edge_type, level, left_dependents, left_lengths)
    return DependencyBatch(tokens, mask, sequence_tokens, word_index, tree)
