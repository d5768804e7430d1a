"""Logical inference data (Bowman, Manning and Potts 2015), as ON-LSTM (Sec. 5.4, Fig. 3) and
Ordered Memory (Sec. 4.1, Tables 1-2) use it.

Files ``train0..12`` / ``test0..12`` hold ``relation<TAB>premise<TAB>hypothesis``; the file number
is the number of logical operators (``*12`` holds 12 or more). Formulas are fully bracketed, e.g.
``( d ( and e ) )``. Sequence models read the brackets as tokens (the authors' code does); gold-tree
models read the non-bracket tokens with the tree the brackets give, here ``(0, (1, 2))``.

Splits, as in the authors' code: train on ``train0..train6`` with every 10th pair (a running count
over the concatenated files) held out for validation; test on ``test0..test12``, one accuracy per
number of operators. The systematic-generalisation partitions of Ordered Memory Table 2 drop every
pair whose premise or hypothesis contains a pattern from training:

    A: ``( and ( not a ) )``   B: ``( and ( not *``   C: ``( and ( not *`` or ``( or ( not *``

leaving 128,969 / 87,948 / 51,896 of the 135,529 pairs (the paper's numbers, reproduced exactly).
Which pairs form the paper's test sets is not documented: by default the matching pairs of the
test files (all lengths) form the extra test group ``sysgen_<split>``; ``sysgen_test_source=
"excluded"`` uses the pairs removed from training instead.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Literal, NamedTuple, TypeVar

import torch

from treernn.data.classification import (
    ClassificationDataModule,
    Example,
    Sentence,
    Tree,
    format_error,
    parse_bracketed,
    read_tsv_lines,
)
from treernn.data.download import RemoteFile, resolve_data_file
from treernn.data.vocab import Vocabulary
from treernn.errors import ConfigValueError

log = logging.getLogger(__name__)

DATASET = "propositional_logic"
BASE_URL = (
    "https://raw.githubusercontent.com/sleepinyourhat/vector-entailment/master/propositionallogic/"
)
#: Token vocabulary in the authors' order (brackets first).
LOGIC_TOKENS = ["(", ")", "a", "b", "c", "d", "e", "f", "or", "and", "not"]
#: The seven relations of MacCartney's natural logic, in the authors' label order.
RELATIONS = list("<>=^|#v")
MAX_OPS = 12
_KNOWN_TOKENS = frozenset(LOGIC_TOKENS)
_RELATION_INDEX = {relation: index for index, relation in enumerate(RELATIONS)}
T = TypeVar("T")
BRACKETS = ("(", ")")

SHA256 = {
    "train0": "6b7679d24a5121e747bbb6e1606c33773ef2803d2f1e3e5961f396bfe6d5ead1",
    "train1": "b18140de23966481c20d6d4cac1f014322f760d6f891f643ff4beca48df1d347",
    "train2": "b08cfe4e89fa941d053b7ba229f3743d25d0a73235c628bf45da645336ecc22a",
    "train3": "ab0dd5694b97815ed29d2be7016790ba78b5173b68df5702ed4d0f9cad087041",
    "train4": "ca53b91edcb966330ca6a4241ca313932f3dd897ce7af18b2446e6c551bb63fc",
    "train5": "8c6db46c7527aea7f685400075c2cebad2a36acb4904371c052827f3769baa00",
    "train6": "ab507a99dcd2f7a2c4a3c81fbdbf0e55e1169d48f1be177ee8278778f34cf141",
    "train7": "939a58dfb0ca552eedf479c4db414e115da88d9a5e665cf101a35dfa735d1d51",
    "train8": "469f3e45b28a63ddc48f687d9b8a6813f431f8cd38366c90facf8ea6e677dc34",
    "train9": "b65a324de9862d74de4165696b5570342f5e323eb95ceccb679959a71978d769",
    "train10": "dd50e0c545773f84767c4ecde1a4d331217e7a8cc2ecfb487a80525d05b73e1a",
    "train11": "18012480bb981a6d03cb3225b0e5761b84df9e4e2a659b5fdf911e0d0b35993e",
    "train12": "cfeced4bcf2c4364fec121b1c97cbd59a535a377d6123bd280400d627da9ec4c",
    "test0": "0f0f47ea2699b52c8e49d84466afdae457111320669b328e752b690d21dab0ef",
    "test1": "d846fd8e2e10c44b95796cd31a3ea9056bd2ab7e510447e92172d252b5a4ebcf",
    "test2": "74d3b9346bbdff39e9f6bd81bb84446309b3918e4d6dbae820280958c935fb82",
    "test3": "c22eb4b2120fd2599eea1772ff2983e44b5e5501f17bfedc7f526ab6ddea9557",
    "test4": "171a5b9ff84c8c8972662d7ee84d9bae88a0b0caf121c779e1898d08ff23d056",
    "test5": "4456aab62f4189a95645822d7fd22b8b12ebadc15679fb37ed93921d1ee11004",
    "test6": "b99fa4c2b48db710213cbfcf948ab08fdaf327c07f5e7fa978747f1cf73c53d0",
    "test7": "9951b19945ea6b7b388118b05ac497b197aba7e24fbd501c5d9cf71f57433da5",
    "test8": "8b653190922c9b5902339714e79d22654e0f34e61d691e0d592589a92882bc30",
    "test9": "6d404315b4e0b15e70084f621f7e9677deebf7378016b0df95fbb63487851ed5",
    "test10": "bb3b3d312bb3223bdad030695d6004dc9d1d6131fe26a5531f2e54cc1bd1e780",
    "test11": "f6ee99fac9b1459448f6b2dc0a263fab7493d9a1e05ed1d32e0674031aa4fda5",
    "test12": "37d63e62b894cd2f25977d3092c71da23244cbadcfa12909183f57da938abb9f",
}

#: Ordered Memory Table 2: token patterns whose presence in either formula removes a pair.
SYSGEN_PATTERNS: dict[str, tuple[tuple[str, ...], ...]] = {
    "A": (("(", "and", "(", "not", "a", ")", ")"),),
    "B": (("(", "and", "(", "not"),),
    "C": (("(", "and", "(", "not"), ("(", "or", "(", "not")),
}
#: Training-set sizes in the paper (train0..6, before the validation hold-out).
PAPER_TRAIN_SIZES = {"full": 135_529, "A": 128_969, "B": 87_948, "C": 51_896}

Split = Literal["full", "A", "B", "C"]


def remote_file(name: str) -> RemoteFile:
    return RemoteFile(relpath=name, url=BASE_URL + name, sha256=SHA256[name])


def parse_formula(formula: str) -> tuple[list[str], list[int], Tree]:
    """(tokens, positions of the non-bracket tokens, tree over them); ``ValueError`` when bad."""
    tokens = formula.split()
    unknown = set(tokens) - _KNOWN_TOKENS
    if unknown:
        raise ValueError(f"unknown token {sorted(unknown)[0]!r} (expected one of {LOGIC_TOKENS})")
    leaf_positions, tree = parse_bracketed(tokens)
    return tokens, leaf_positions, tree


def read_logic_file(
    path: str | Path, parse: Callable[[str], T] = parse_formula
) -> list[tuple[int, T, T]]:
    """Parse one file into (relation index, premise, hypothesis), formulas read by ``parse``.

    A malformed line (field count, relation, token, brackets) raises ``DataFormatError`` naming
    the file and line.
    """
    pairs: list[tuple[int, T, T]] = []
    for line_number, (relation, premise, hypothesis) in read_tsv_lines(path, 3):
        label = _RELATION_INDEX.get(relation)
        if label is None:
            raise format_error(
                path, line_number, f"unknown relation {relation!r} (expected one of {RELATIONS})"
            )
        try:
            pairs.append((label, parse(premise), parse(hypothesis)))
        except ValueError as error:
            raise format_error(path, line_number, str(error)) from None
    return pairs


def matches_pattern(formula: str, split: str) -> bool:
    """True when the formula contains one of the partition's excluded token patterns."""
    padded = f" {' '.join(formula.split())} "
    return any(f" {' '.join(pattern)} " in padded for pattern in SYSGEN_PATTERNS[split])


def count_operators(tokens: list[str]) -> int:
    return sum(token in ("and", "or", "not") for token in tokens)


#: parsed files by (path, size, mtime, feed_brackets): repeated runs in one process (tests,
#: sweeps) parse each file once
_PARSED_FILES: dict[tuple[str, int, int, bool], list] = {}


class _Formula(NamedTuple):
    text: str
    sentence: Sentence


_Pair = tuple[int, _Formula, _Formula]


class LogicInferenceDataModule(ClassificationDataModule):
    """Sentence-pair classification over the logic files; buckets are numbers of operators.

    Args:
        split: ``full`` or a systematic-generalisation partition ``A``/``B``/``C``.
        max_train_ops: train on ``train0..train{max_train_ops}`` (6 in both papers).
        val_every: every n-th training pair (running count) goes to validation.
        feed_brackets: sequence models read the brackets as tokens (the papers do).
        train_limit: keep only this many training pairs (a seeded random subset), for quick runs.
        sysgen_test_source: ``test`` (matching pairs of test0..12) or ``excluded`` (the pairs the
            partition removed from training).
    """

    num_sentences = 2

    def __init__(
        self,
        data_dir: str | Path | None = None,
        split: Split = "full",
        max_train_ops: int = 6,
        val_every: int = 10,
        feed_brackets: bool = True,
        train_limit: int | None = None,
        sysgen_test_source: Literal["test", "excluded"] = "test",
        download: bool = True,
        verify_checksums: bool = True,
        batch_size: int = 128,
        eval_batch_size: int | None = None,
        num_workers: int = 0,
        length_bucketing: bool = True,
        subset_seed: int = 0,
    ) -> None:
        super().__init__(data_dir, batch_size, eval_batch_size, num_workers, length_bucketing)
        if split not in PAPER_TRAIN_SIZES:
            raise ConfigValueError(f"split={split!r}: use one of {list(PAPER_TRAIN_SIZES)}")
        if not 0 <= max_train_ops <= MAX_OPS:
            raise ConfigValueError(
                f"max_train_ops={max_train_ops}: use 0..{MAX_OPS} (the papers use 6)"
            )
        if val_every < 2:
            raise ConfigValueError(
                f"val_every={val_every}: use an integer >= 2 (the papers use 10)"
            )
        if sysgen_test_source not in ("test", "excluded"):
            raise ConfigValueError(
                f"sysgen_test_source={sysgen_test_source!r}: use 'test' or 'excluded'"
            )
        self.split = split
        self.max_train_ops = max_train_ops
        self.val_every = val_every
        self.feed_brackets = feed_brackets
        self.train_limit = train_limit
        self.sysgen_test_source = sysgen_test_source
        self.download = download
        self.verify_checksums = verify_checksums
        self.subset_seed = subset_seed
        self.vocab = Vocabulary(LOGIC_TOKENS, specials=("<pad>",))
        self.label_names = list(RELATIONS)
        self.bucket_names = [f"ops{n}" for n in range(MAX_OPS + 1)]
        self.group_names = ["length"] + ([] if split == "full" else [f"sysgen_{split}"])
        #: training-set size before the validation hold-out (compare with PAPER_TRAIN_SIZES)
        self.train_pool_size: int | None = None
        self._sentence_cache: dict[str, Sentence] = {}

    # --- files --------------------------------------------------------------------------------
    def _file_names(self) -> list[str]:
        train = [f"train{n}" for n in range(self.max_train_ops + 1)]
        return train + [f"test{n}" for n in range(MAX_OPS + 1)]

    def _path(self, name: str) -> Path:
        remote = remote_file(name)
        return resolve_data_file(
            DATASET, remote, self.data_dir, download=self.download, verify=self.verify_checksums
        )

    def prepare_data(self) -> None:
        for name in self._file_names():
            self._path(name)

    # --- splits -------------------------------------------------------------------------------
    def _sentence(self, formula: str) -> Sentence:
        """Parse a formula once; formulas repeat a lot, so parsed sentences are shared."""
        sentence = self._sentence_cache.get(formula)
        if sentence is None:
            tokens, leaf_positions, tree = parse_formula(formula)
            stoi = self.vocab.stoi
            token_ids = tuple([stoi[token] for token in tokens])
            leaf_ids = tuple([token_ids[p] for p in leaf_positions])
            positions: tuple[int, ...] | None = tuple(leaf_positions)
            if not self.feed_brackets:
                token_ids, positions = leaf_ids, None
            sentence = Sentence(token_ids, leaf_ids, tree, leaf_positions=positions)
            self._sentence_cache[formula] = sentence
        return sentence

    def _formula(self, text: str) -> _Formula:
        return _Formula(text, self._sentence(text))

    def _read(self, name: str) -> list[_Pair]:
        path = self._path(name)
        stat = path.stat()
        key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns, self.feed_brackets)
        pairs = _PARSED_FILES.get(key)
        if pairs is None:
            pairs = read_logic_file(path, self._formula)
            _PARSED_FILES[key] = pairs
        return pairs

    def _excluded(self, pair: _Pair) -> bool:
        """Does the systematic-generalisation partition remove this pair from training?"""
        if self.split == "full":
            return False
        _, premise, hypothesis = pair
        return matches_pattern(premise.text, self.split) or matches_pattern(
            hypothesis.text, self.split
        )

    @staticmethod
    def _example(pair: _Pair, ops: int, group: int) -> Example:
        label, premise, hypothesis = pair
        sentences = (premise.sentence, hypothesis.sentence)
        return Example(sentences=sentences, label=label, bucket=ops, group=group)

    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return
        train: list[Example] = []
        val: list[Example] = []
        excluded: list[Example] = []
        counter = 0  # running count over the concatenated training files, as the authors do
        for ops in range(self.max_train_ops + 1):
            for pair in self._read(f"train{ops}"):
                if self._excluded(pair):
                    excluded.append(self._example(pair, ops, group=1))
                    continue
                counter += 1
                held_out = counter % self.val_every == 0
                (val if held_out else train).append(self._example(pair, ops, group=0))
        self.train_pool_size = counter
        if self.train_limit is not None and self.train_limit < len(train):
            generator = torch.Generator().manual_seed(self.subset_seed)
            keep = torch.randperm(len(train), generator=generator)[: self.train_limit]
            train = [train[i] for i in sorted(keep.tolist())]
        test: list[Example] = []
        for ops in range(MAX_OPS + 1):
            for pair in self._read(f"test{ops}"):
                test.append(self._example(pair, ops, group=0))
                if self.sysgen_test_source == "test" and self._excluded(pair):
                    test.append(self._example(pair, ops, group=1))
        if self.sysgen_test_source == "excluded":
            test.extend(excluded)
        self.splits = {"train": train, "val": val, "test": test}
        log.info(
            "logic split %s: %d training pairs before the validation hold-out (paper: %d); "
            "train %d, val %d, test groups %s",
            self.split,
            counter,
            PAPER_TRAIN_SIZES[self.split],
            len(train),
            len(val),
            self.group_sizes(),
        )

    def group_sizes(self) -> dict[str, int]:
        """Number of test pairs in each evaluation group."""
        sizes = dict.fromkeys(self.group_names, 0)
        for example in self.splits.get("test", []):
            sizes[self.group_names[example.group]] += 1
        return sizes
