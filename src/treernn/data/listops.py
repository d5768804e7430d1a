"""ListOps (Nangia and Bowman 2018) as Ordered Memory (Sec. 4.2, Fig. 3) runs it.

Lines are ``label<TAB>expression``; the expression's parentheses give the gold binary tree (each
list left-branching) and are NOT fed to the model: the model reads ``[MIN [MAX [MED [SM``, digits
and ``]``, and gold-tree encoders get the tree over exactly those tokens. For
``( ( ( [SM 6 ) 5 ) ] )`` the model reads ``[SM 6 5 ]`` and the tree is ``(((0, 1), 2), 3)``.

Files: the released test set is ``listops/test_d20s.tsv``; the training set ``train_d20s.tsv`` is
downloaded from its canonical URL and checked by its git blob id. Without network, set
``train_source=generate`` for a seeded STAND-IN made by `treernn.data.listops_generator`
(clearly not the benchmark). As in the Ordered Memory code, training examples longer than
``max_train_tokens`` (50: transitions ``2n - 1 <= 100``) are dropped and evaluation keeps all.
Deviation: the Ordered Memory script validates and anneals on the test set; here every
``val_every``-th training example is held out for validation instead (``val_every=0`` restores
the authors' set-up: validation on the test file). Every label is checked against the evaluator.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Literal

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
from treernn.data.download import (
    DatasetNotFoundError,
    RemoteFile,
    cache_dir,
    resolve_data_file,
)
from treernn.data.listops_generator import (
    CLOSE,
    DIGITS,
    OPERATORS,
    STANDIN_WARNING,
    evaluate_listops,
    generate_examples,
    standin_file_name,
    write_examples,
)
from treernn.data.vocab import Vocabulary
from treernn.errors import ConfigValueError

log = logging.getLogger(__name__)

DATASET = "listops"
BASE_URL = (
    "https://raw.githubusercontent.com/nyu-mll/spinn/listops-release/python/spinn/data/listops/"
)
TRAIN_FILE = RemoteFile(
    relpath="train_d20s.tsv",
    url=BASE_URL + "train_d20s.tsv",
    # the git blob id is the same in spinn master, listops-release and Ordered-Neurons' copy;
    # a third-party md5 (f3141589f80dad7de8ce2b6bcbbd306b) is unverified, so it is not used
    git_blob="fb442a5e082a26cc0094714f83681225c89ad29f",
)
TEST_FILE = RemoteFile(
    relpath="test_d20s.tsv",
    url=BASE_URL + "test_d20s.tsv",
    sha256="71335416e6896e8dd8dc69281c8ed9b37316382d05d3705d660461564e843840",
    git_blob="8e25a83b1d9bf84493049b07bce90a7b123441e2",
)
#: What the model reads (no parentheses), operators first.
LISTOPS_TOKENS = [*OPERATORS, CLOSE, *DIGITS]
_KNOWN_TOKENS = frozenset([*LISTOPS_TOKENS, "(", ")"])
#: Lower edges of the default length buckets (non-parenthesis tokens); the last is open-ended.
DEFAULT_LENGTH_EDGES = (1, 51, 101, 201, 401)


def parse_expression(expression: str) -> tuple[list[str], tuple[int, ...], Tree]:
    """(model tokens, their positions in the bracketed line, gold tree); ``ValueError`` if bad."""
    tokens = expression.split()
    unknown = set(tokens) - _KNOWN_TOKENS
    if unknown:
        raise ValueError(
            f"unknown token {sorted(unknown)[0]!r} (expected {LISTOPS_TOKENS} or parentheses)"
        )
    leaf_positions, tree = parse_bracketed(tokens)
    return [tokens[p] for p in leaf_positions], tuple(leaf_positions), tree


def read_listops_file(
    path: str | Path, check_labels: bool = True
) -> list[tuple[int, list[str], Tree]]:
    """(label, model tokens, gold tree) per line; malformed lines raise with file and line."""
    examples = []
    for line_number, (label_text, expression) in read_tsv_lines(path, 2):
        if label_text not in DIGITS:
            raise format_error(path, line_number, f"label {label_text!r} is not a digit 0-9")
        try:
            tokens, _, tree = parse_expression(expression)
            value = evaluate_listops(tokens) if check_labels else None
        except ValueError as error:
            raise format_error(path, line_number, str(error)) from None
        if check_labels and value != int(label_text):
            raise format_error(
                path, line_number, f"label {label_text} but the expression evaluates to {value}"
            )
        examples.append((int(label_text), tokens, tree))
    return examples


def bucket_names_for(edges: tuple[int, ...]) -> list[str]:
    names = [f"len{low}-{high - 1}" for low, high in zip(edges[:-1], edges[1:])]
    return [*names, f"len{edges[-1]}+"]


class ListOpsDataModule(ClassificationDataModule):
    """Single-sentence classification into 10 values; buckets are length ranges.

    Args:
        train_source: ``download`` (the released train_d20s.tsv) or ``generate`` (a stand-in).
        max_train_tokens: drop longer training examples (50 as Ordered Memory; None keeps all).
        val_every: hold out every n-th training example for validation; 0 validates on test.
        train_limit: keep this many training examples (seeded subset), e.g. 90k for OM Fig. 3b.
        standin_size / standin_seed / standin_max_tokens: the generated stand-in's size and seed.
        length_edges: lower edges of the test length buckets.
        verify_checksums: check the local files against their published git blob ids.
    """

    num_sentences = 1

    def __init__(
        self,
        data_dir: str | Path | None = None,
        train_source: Literal["download", "generate"] = "download",
        max_train_tokens: int | None = 50,
        val_every: int = 10,
        train_limit: int | None = None,
        test_limit: int | None = None,
        standin_size: int = 100_000,
        standin_seed: int = 0,
        standin_max_tokens: int | None = None,
        length_edges: tuple[int, ...] | list[int] = DEFAULT_LENGTH_EDGES,
        check_labels: bool = True,
        download: bool = True,
        verify_checksums: bool = True,
        batch_size: int = 128,
        eval_batch_size: int | None = None,
        num_workers: int = 0,
        length_bucketing: bool = True,
        subset_seed: int = 0,
    ) -> None:
        super().__init__(data_dir, batch_size, eval_batch_size, num_workers, length_bucketing)
        if train_source not in ("download", "generate"):
            raise ConfigValueError(f"train_source={train_source!r}: use 'download' or 'generate'")
        if val_every == 1 or val_every < 0:
            raise ConfigValueError(
                f"val_every={val_every}: use 0 (validate on test) or an integer >= 2"
            )
        edges = tuple(int(edge) for edge in length_edges)
        if not edges or list(edges) != sorted(set(edges)):
            raise ConfigValueError(f"length_edges={list(length_edges)} must be strictly increasing")
        self.train_source = train_source
        self.max_train_tokens = max_train_tokens
        self.val_every = val_every
        self.train_limit = train_limit
        self.test_limit = test_limit
        self.standin_size = standin_size
        self.standin_seed = standin_seed
        self.standin_max_tokens = standin_max_tokens
        self.length_edges = edges
        self.check_labels = check_labels
        self.download = download
        self.verify_checksums = verify_checksums
        self.subset_seed = subset_seed
        self.vocab = Vocabulary(LISTOPS_TOKENS, specials=("<pad>",))
        self.label_names = list(DIGITS)
        self.bucket_names = bucket_names_for(edges)
        self.group_names = ["test"]
        #: training examples dropped by ``max_train_tokens``
        self.dropped_long: int = 0

    # --- files --------------------------------------------------------------------------------
    def _standin_path(self) -> Path:
        name = standin_file_name(self.standin_size, self.standin_seed, 1, self.standin_max_tokens)
        return cache_dir() / DATASET / name

    def _train_path(self) -> Path:
        if self.train_source == "download":
            try:
                return resolve_data_file(
                    DATASET,
                    TRAIN_FILE,
                    self.data_dir,
                    download=self.download,
                    verify=self.verify_checksums,
                )
            except DatasetNotFoundError as error:
                raise DatasetNotFoundError(
                    f"{error} Or train on a generated stand-in (not the benchmark) with "
                    "task.datamodule.train_source=generate."
                ) from error
        path = self._standin_path()
        if not path.is_file():
            log.warning(
                "%s Generating %d examples into %s", STANDIN_WARNING, self.standin_size, path
            )
            examples = generate_examples(
                self.standin_size, self.standin_seed, max_tokens=self.standin_max_tokens
            )
            write_examples(path, examples)
        return path

    def _test_path(self) -> Path:
        return resolve_data_file(
            DATASET, TEST_FILE, self.data_dir, download=self.download, verify=self.verify_checksums
        )

    def prepare_data(self) -> None:
        self._train_path()
        self._test_path()

    # --- splits -------------------------------------------------------------------------------
    def bucket_of(self, length: int) -> int:
        bucket = 0
        for index, edge in enumerate(self.length_edges):
            if length >= edge:
                bucket = index
        return bucket

    def _example(self, label: int, tokens: list[str], tree: Tree) -> Example:
        ids = tuple(self.vocab.stoi[token] for token in tokens)
        sentence = Sentence(token_ids=ids, leaf_ids=ids, tree=tree)
        return Example(sentences=(sentence,), label=label, bucket=self.bucket_of(len(ids)))

    def _subset(self, examples: list[Example], limit: int | None) -> list[Example]:
        if limit is None or limit >= len(examples):
            return examples
        generator = torch.Generator().manual_seed(self.subset_seed)
        keep = torch.randperm(len(examples), generator=generator)[:limit]
        return [examples[i] for i in sorted(keep.tolist())]

    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return
        if self.train_source == "generate":
            log.warning(STANDIN_WARNING)
        train: list[Example] = []
        val: list[Example] = []
        self.dropped_long = 0
        rows = read_listops_file(self._train_path(), check_labels=self.check_labels)
        for index, (label, tokens, tree) in enumerate(rows, start=1):
            example = self._example(label, tokens, tree)
            if self.val_every and index % self.val_every == 0:
                val.append(example)  # held out before the length filter: validation keeps all
            elif self.max_train_tokens is not None and len(tokens) > self.max_train_tokens:
                self.dropped_long += 1
            else:
                train.append(example)
        test_rows = read_listops_file(self._test_path(), check_labels=self.check_labels)
        test = self._subset([self._example(*row) for row in test_rows], self.test_limit)
        if not self.val_every:
            val = test
        self.splits = {"train": self._subset(train, self.train_limit), "val": val, "test": test}
        log.info(
            "ListOps (%s): train %d (dropped %d longer than %s tokens), val %d, test %d",
            "STAND-IN" if self.train_source == "generate" else "released",
            len(self.splits["train"]),
            self.dropped_long,
            self.max_train_tokens,
            len(val),
            len(test),
        )
