"""Dependency treebanks for the Top-down Tree LSTM (Zhang, Lu and Lapata, NAACL 2016).

Reading: CoNLL-U and CoNLL-X files (blank-line separated sentences, 10 columns; tabs, or runs of
spaces for old CoNLL-X files) are read with the ``conllu`` library. Comment lines, multiword-token
ranges (``1-2``) and empty nodes (``8.1``) are skipped, as the authors' reader does. A sentence with
a malformed line, a missing or out-of-range head, a cycle, or (by default) a non-projective tree is
reported as ``file:line: reason`` and skipped (``on_error="skip"``) or rejected with
:class:`DependencyFormatError` (``on_error="raise"``). Every skipped sentence is counted in the
:class:`ReadReport`; nothing is dropped silently.

Linearisation (paper Section 2.1-2.2, Figure 2): trees are generated top-down, breadth-first from
ROOT; for each node its left dependents nearest-first, then its right dependents nearest-first. Step
``t`` (1..n) generates one word from a predecessor step ``t'`` (0 = ROOT) along one of four edge
types: LEFT (head -> first left dependent), NX_LEFT (previous left sibling -> next left dependent),
RIGHT and NX_RIGHT. ROOT's dependents are its right dependents. For LdTreeLSTM (Section 2.4) a RIGHT
step also carries the head's left dependents, farthest first (left to right in the sentence).

The DataModule applies the paper's vocabulary options (lower-casing, words seen ``unk_threshold``
times or fewer become ``<unk>``, sentences longer than ``max_length`` words dropped) and hands out
batches (:class:`DependencyBatch`) with two input views (:mod:`treernn.data.batch`): the
breadth-first order with its schedule (``"dependency_tree"``, for the tree models) and the sentence
order (``"tokens"``, for the sequential LSTM baseline on the same sentences).
"""

from __future__ import annotations

import logging
import re
from collections import Counter, deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, fields
from functools import partial
from pathlib import Path
from typing import Literal

import conllu
import lightning.pytorch as pl
import torch
from torch import Tensor
from torch.utils.data import DataLoader, SequentialSampler

from treernn.data.batch import EncoderInputs, missing_view
from treernn.data.download import RemoteFile, resolve_data_file
from treernn.data.sampling import EpochShuffle, LengthBucketBatchSampler, ResumableTrainBatches
from treernn.data.vocab import Vocabulary
from treernn.encoders.top_down_tree import EDGE_TYPES, LEFT, NX_LEFT, NX_RIGHT, RIGHT, TopDownTree
from treernn.errors import DataError

log = logging.getLogger(__name__)

ROOT_TOKEN = "<root>"
SPECIALS = ("<pad>", "<unk>", ROOT_TOKEN)
OnError = Literal["skip", "raise"]

__all__ = [
    "EDGE_TYPES",
    "DependencyBatch",
    "DependencyDataModule",
    "DependencyFormatError",
    "DependencyTree",
    "Linearisation",
    "ReadReport",
    "build_vocabulary",
    "collate_trees",
    "encode_tree",
    "is_projective",
    "linearise",
    "read_dependency_file",
    "read_dependency_text",
]


class DependencyFormatError(DataError, ValueError):
    """A treebank sentence that cannot be used; the message names file and line."""


@dataclass(frozen=True)
class DependencyTree:
    """One sentence: ``heads[i]`` is the 1-based head of word ``i`` (0 = ROOT)."""

    words: tuple[str, ...]
    heads: tuple[int, ...]
    labels: tuple[str, ...] = ()
    source: str = ""  # "file:line" of the sentence's first token line
    metadata: dict[str, str] = field(default_factory=dict, compare=False, hash=False)
    #: part-of-speech tags per word, universal (UPOS) and the treebank's own (XPOS); "_" where the
    #: file has none, empty for a tree built without them
    upos: tuple[str, ...] = field(default=(), compare=False)
    xpos: tuple[str, ...] = field(default=(), compare=False)

    def __len__(self) -> int:
        return len(self.words)


@dataclass
class ReadReport:
    """What a reader kept and skipped; one ``file:line: reason`` per skipped sentence."""

    path: str
    sentences: int = 0
    kept: int = 0
    skipped: Counter = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)

    def summary(self) -> str:
        reasons = ", ".join(f"{count} {reason}" for reason, count in sorted(self.skipped.items()))
        return f"{self.path}: kept {self.kept} of {self.sentences} sentences" + (
            f"; skipped {reasons}" if reasons else ""
        )


# ----------------------------------------------------------------------------- tree checks


def find_cycle(heads: Sequence[int]) -> int | None:
    """The 1-based index of a word on a cycle (never reaching ROOT), or None."""
    n = len(heads)
    for start in range(1, n + 1):
        node, steps = start, 0
        while node != 0 and steps <= n:
            node, steps = heads[node - 1], steps + 1
        if node != 0:
            return start
    return None


def is_projective(heads: Sequence[int]) -> bool:
    """True when no two arcs cross (arcs from ROOT at position 0 included)."""
    arcs = [(min(h, d), max(h, d)) for d, h in enumerate(heads, start=1)]
    for left, right in arcs:
        for other_left, other_right in arcs:
            if left < other_left < right < other_right:
                return False
    return True


# ----------------------------------------------------------------------------- reading

_ID = re.compile(r"^\d+$")


def _blocks(lines: Iterable[str]) -> Iterator[tuple[int, list[tuple[int, str]]]]:
    """Blank-line separated sentences as (first line number, [(line number, line)])."""
    block: list[tuple[int, str]] = []
    for number, raw in enumerate(lines, start=1):
        line = raw.rstrip("\r\n")
        if line.strip():
            block.append((number, line))
        elif block:
            yield block[0][0], block
            block = []
    if block:
        yield block[0][0], block


def _sentence(
    block: list[tuple[int, str]], path: str, projective_only: bool
) -> tuple[DependencyTree | None, str, str]:
    """Parse one block; returns (tree, "", "") or (None, reason key, "file:line: message")."""
    token_lines: list[tuple[int, str]] = []
    metadata: dict[str, str] = {}
    for number, line in block:
        if line.startswith("#"):
            key, _, value = line[1:].partition("=")
            if value:
                metadata[key.strip()] = value.strip()
            continue
        fields = line.split("\t") if "\t" in line else line.split()
        if len(fields) != 10:
            return (
                None,
                "malformed line",
                (
                    f"{path}:{number}: expected 10 tab-separated columns, found {len(fields)}; "
                    "fix the line or read with on_error='skip'"
                ),
            )
        if not _ID.match(fields[0]):
            continue  # multiword-token range "1-2" or empty node "8.1"
        token_lines.append((number, "\t".join(fields)))
    if not token_lines:
        first = block[0][0]
        return None, "empty sentence", f"{path}:{first}: a sentence with no word lines"
    try:
        tokens = conllu.parse("\n".join(line for _, line in token_lines) + "\n\n")[0]
    except conllu.exceptions.ParseException as error:  # pragma: no cover - guarded above
        return None, "malformed line", f"{path}:{token_lines[0][0]}: {error}"
    words, heads, labels, upos, xpos = [], [], [], [], []
    for position, (token, (number, _)) in enumerate(zip(tokens, token_lines), start=1):
        if token["id"] != position:
            return (
                None,
                "malformed line",
                (
                    f"{path}:{number}: word id {token['id']} where {position} was expected; "
                    "ids must count 1, 2, 3, ..."
                ),
            )
        head = token["head"]
        if head is None:
            return None, "missing head", f"{path}:{number}: word {position} has no head ('_')"
        if not isinstance(head, int) or not 0 <= head <= len(token_lines) or head == position:
            return (
                None,
                "bad head",
                (
                    f"{path}:{number}: head {head!r} of word {position} is not a word of the "
                    "sentence"
                ),
            )
        words.append(token["form"])
        heads.append(head)
        labels.append(token["deprel"] or "_")
        upos.append(token["upos"] or "_")
        xpos.append(token["xpos"] or "_")
    first = token_lines[0][0]
    cyclic = find_cycle(heads)
    if cyclic is not None:
        line = token_lines[cyclic - 1][0]
        return None, "cyclic", f"{path}:{line}: word {cyclic} is on a cycle (never reaches ROOT)"
    if projective_only and not is_projective(heads):
        return None, "non-projective", f"{path}:{first}: non-projective tree (crossing arcs)"
    tree = DependencyTree(
        tuple(words),
        tuple(heads),
        tuple(labels),
        source=f"{path}:{first}",
        metadata=metadata,
        upos=tuple(upos),
        xpos=tuple(xpos),
    )
    return tree, "", ""


def read_dependency_text(
    lines: Iterable[str],
    path: str = "<text>",
    on_error: OnError = "skip",
    projective_only: bool = True,
    max_length: int | None = None,
) -> tuple[list[DependencyTree], ReadReport]:
    """Read CoNLL-U/CoNLL-X lines; see the module docstring for what is skipped or raised."""
    if on_error not in ("skip", "raise"):
        raise ValueError(f"on_error={on_error!r}: use 'skip' or 'raise'")
    report = ReadReport(path=path)
    trees: list[DependencyTree] = []
    for _, block in _blocks(lines):
        report.sentences += 1
        tree, reason, message = _sentence(block, path, projective_only)
        if tree is not None and max_length is not None and len(tree) > max_length:
            reason, message = "too long", f"{tree.source}: {len(tree)} words > {max_length}"
            tree = None
            report.skipped[reason] += 1
            continue  # the paper's length cut is a filter, not an error
        if tree is None:
            if on_error == "raise":
                raise DependencyFormatError(message)
            report.skipped[reason] += 1
            report.problems.append(message)
            continue
        trees.append(tree)
    report.kept = len(trees)
    for message in report.problems[:5]:
        log.warning("skipped %s", message)
    if report.skipped:
        log.warning("%s", report.summary())
    return trees, report


def read_dependency_file(
    path: str | Path,
    on_error: OnError = "skip",
    projective_only: bool = True,
    max_length: int | None = None,
) -> tuple[list[DependencyTree], ReadReport]:
    """Read a CoNLL-U/CoNLL-X file (UTF-8)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such treebank file; check data_dir and the file name")
    with path.open(encoding="utf-8") as handle:
        return read_dependency_text(handle, str(path), on_error, projective_only, max_length)


def write_conllu(trees: Iterable[DependencyTree], path: str | Path) -> None:
    """Write trees as CoNLL-U (FORM, UPOS, XPOS, HEAD, DEPREL filled; metadata kept as
    comments)."""
    with Path(path).open("w", encoding="utf-8") as handle:
        for tree in trees:
            for key, value in tree.metadata.items():
                handle.write(f"# {key} = {value}\n")
            labels = tree.labels or ("dep",) * len(tree)
            upos = tree.upos or ("_",) * len(tree)
            xpos = tree.xpos or ("_",) * len(tree)
            columns = zip(tree.words, upos, xpos, tree.heads, labels)
            for index, (word, universal, own, head, label) in enumerate(columns, 1):
                handle.write(f"{index}\t{word}\t_\t{universal}\t{own}\t_\t{head}\t{label}\t_\t_\n")
            handle.write("\n")


# ----------------------------------------------------------------------------- linearisation


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
    tree: the :class:`TopDownTree` schedule, (B, T+1) predecessor/edge/level tensors and
    (B, T+1, K) left-dependent steps.
    """

    tokens: Tensor
    mask: Tensor
    sequence_tokens: Tensor
    word_index: Tensor
    tree: TopDownTree

    #: the input views this batch offers (see :meth:`encoder_inputs`)
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
    """Pad a list of encoded trees into one :class:`DependencyBatch`."""
    batch = len(examples)
    width = max(len(e.tokens) for e in examples)
    ld_width = max((len(s) for e in examples for s in e.steps.left_dependents), default=0)
    tokens = torch.full((batch, width), pad_index, dtype=torch.long)
    sequence_tokens = torch.full((batch, width), pad_index, dtype=torch.long)
    mask = torch.zeros(batch, width, dtype=torch.bool)
    predecessor = torch.zeros(batch, width, dtype=torch.long)
    edge_type = torch.zeros(batch, width, dtype=torch.long)
    level = torch.zeros(batch, width, dtype=torch.long)
    word_index = torch.full((batch, width), -1, dtype=torch.long)
    left_dependents = torch.zeros(batch, width, ld_width, dtype=torch.long)
    left_lengths = torch.zeros(batch, width, dtype=torch.long)
    for row, example in enumerate(examples):
        length, steps = len(example.tokens), example.steps
        tokens[row, :length] = torch.tensor(example.tokens)
        sequence_tokens[row, :length] = torch.tensor(example.sequence_tokens)
        mask[row, :length] = True
        predecessor[row, :length] = torch.tensor(steps.predecessor)
        edge_type[row, 1:length] = torch.tensor(steps.edge_type[1:], dtype=torch.long)
        level[row, :length] = torch.tensor(steps.level)
        word_index[row, :length] = torch.tensor(steps.word_index)
        for step, deps in enumerate(steps.left_dependents):
            if deps:
                left_dependents[row, step, : len(deps)] = torch.tensor(deps)
                left_lengths[row, step] = len(deps)
    tree = TopDownTree(predecessor, edge_type, level, left_dependents, left_lengths)
    return DependencyBatch(tokens, mask, sequence_tokens, word_index, tree)


# ----------------------------------------------------------------------------- DataModule
EWT_DATASET = "ud_english_ewt"
EWT_URL = "https://raw.githubusercontent.com/UniversalDependencies/UD_English-EWT/r2.16/"
#: UD English-EWT r2.16, the default treebank: downloaded when missing, checked by sha256
EWT_FILES = {
    f"{EWT_DATASET}/{name}": RemoteFile(name, EWT_URL + name, sha256)
    for name, sha256 in (
        (
            "en_ewt-ud-train.conllu",
            "3fb78e2b55482c8ee00caa653af436c88c9e5bc9a73ce26e4ae3ddc79d2b7e7b",
        ),
        (
            "en_ewt-ud-dev.conllu",
            "531a54ff90d6ab12201c5a50c3e78e6ddac4de69abc4bce5d275d3cd29efe2b6",
        ),
        (
            "en_ewt-ud-test.conllu",
            "e266e515a0a7547657ed3d90d9ba46487d6bd251f27ad4269d4e8a427c8555cd",
        ),
    )
}


class DependencyDataModule(ResumableTrainBatches, pl.LightningDataModule):
    """CoNLL-U/CoNLL-X treebank splits for dependency language modelling.

    Files are relative to ``data_dir``. ``unk_threshold``: training words seen that many times or
    fewer become ``<unk>`` (paper: 5 on MSR, 1 on PTB reranking). ``max_length``: longer sentences
    are dropped (paper: 100). ``on_error``/``projective_only``: see the module docstring.
    ``max_sentences`` caps each split (for quick CPU runs); the cap is logged. The UD English-EWT
    r2.16 files (the default) are downloaded when missing (``download``) and checked against their
    published sha256 (``verify_checksums``); other treebanks are read as they are.
    """

    def __init__(
        self,
        data_dir: str = "data",
        train_file: str = "ud_english_ewt/en_ewt-ud-train.conllu",
        val_file: str = "ud_english_ewt/en_ewt-ud-dev.conllu",
        test_file: str | None = "ud_english_ewt/en_ewt-ud-test.conllu",
        lowercase: bool = True,
        replace_numbers: bool = False,
        unk_threshold: int = 1,
        max_vocab_size: int | None = None,
        max_length: int | None = 100,
        projective_only: bool = True,
        on_error: OnError = "skip",
        max_sentences: int | None = None,
        batch_size: int = 64,
        eval_batch_size: int | None = None,
        num_workers: int = 0,
        download: bool = True,
        verify_checksums: bool = True,
    ) -> None:
        super().__init__()
        self.save_hyperparameters(logger=False)
        self.vocab: Vocabulary | None = None
        self.unigram_counts: list[int] = []
        self.reports: dict[str, ReadReport] = {}
        self.datasets: dict[str, list[EncodedTree]] = {}

    def _path(self, name: str, download: bool) -> Path:
        hp = self.hparams
        remote = EWT_FILES.get(name)
        if remote is None:
            return Path(hp.data_dir) / name
        return resolve_data_file(
            EWT_DATASET, remote, hp.data_dir, download=download, verify=hp.verify_checksums
        )

    def prepare_data(self) -> None:
        hp = self.hparams
        for name in (hp.train_file, hp.val_file, hp.test_file):
            if name is not None:
                self._path(name, download=hp.download)

    def _read(self, split: str, name: str | None) -> list[DependencyTree]:
        if name is None:
            return []
        hp = self.hparams
        trees, report = read_dependency_file(
            self._path(name, download=False), hp.on_error, hp.projective_only, hp.max_length
        )
        self.reports[split] = report
        if not report.skipped:
            log.info("%s", report.summary())
        if hp.max_sentences is not None and len(trees) > hp.max_sentences:
            log.info("%s: using the first %d of %d trees", split, hp.max_sentences, len(trees))
            trees = trees[: hp.max_sentences]
        return trees

    def setup(self, stage: str | None = None) -> None:
        if self.vocab is not None:
            return
        hp = self.hparams
        raw = {
            split: self._read(split, name)
            for split, name in (
                ("train", hp.train_file),
                ("val", hp.val_file),
                ("test", hp.test_file),
            )
        }

        def words(tree: DependencyTree) -> list[str]:
            return [normalise_word(w, hp.lowercase, hp.replace_numbers) for w in tree.words]

        self.vocab, self.unigram_counts = build_vocabulary(
            (words(t) for t in raw["train"]), hp.unk_threshold, hp.max_vocab_size
        )
        self.datasets = {
            split: [encode_tree(t, self.vocab, hp.lowercase, hp.replace_numbers) for t in trees]
            for split, trees in raw.items()
        }

    def task_kwargs(self) -> dict:
        self.setup()
        assert self.vocab is not None
        return {
            "vocab_size": len(self.vocab),
            "vocab": self.vocab,  # a Vocabulary object: Hydra would read a list's "???" as missing
            "unigram_counts": list(self.unigram_counts),
            "pad_index": self.vocab.pad_index,
            "lowercase": self.hparams.lowercase,
            "replace_numbers": self.hparams.replace_numbers,
        }

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        size = self.hparams.batch_size if shuffle else self.hparams.eval_batch_size
        dataset = self.datasets[split]
        sampler = EpochShuffle(len(dataset)) if shuffle else SequentialSampler(dataset)
        batch_sampler = LengthBucketBatchSampler(
            sampler, size or self.hparams.batch_size, shuffle_batches=False
        )
        if shuffle:
            batch_sampler = self._resumable(batch_sampler)
        return DataLoader(
            dataset,
            batch_sampler=batch_sampler,
            collate_fn=partial(collate_trees, pad_index=self.vocab.pad_index),
            num_workers=self.hparams.num_workers,
            # the loader's own generator: iterating data never draws from torch's global one
            generator=torch.Generator(),
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", shuffle=False)
