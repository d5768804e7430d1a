"""The dependency treebank DataModule for the Top-down Tree LSTM (Zhang, Lu and Lapata, NAACL 2016).

It reads the treebank's files (`treernn.data.dependency_reading`), applies the paper's
vocabulary options (lower-casing, words seen ``unk_threshold`` times or fewer become ``<unk>``,
sentences longer than ``max_length`` words dropped) and hands out batches
(`treernn.data.dependency_encoding.DependencyBatch`, built by
`treernn.data.dependency_encoding`) with two input views: the breadth-first order with its
schedule (``"dependency_tree"``, for the tree models) and the sentence order (``"tokens"``, for the
sequential LSTM baseline on the same sentences). The names of both modules are importable from
here too.
"""

from __future__ import annotations

import logging
from functools import partial
from pathlib import Path

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, SequentialSampler

from treernn.data.dependency_encoding import (
    ROOT_TOKEN,
    SPECIALS,
    DependencyBatch,
    EncodedTree,
    Linearisation,
    build_vocabulary,
    collate_trees,
    encode_tree,
    linearise,
    normalise_word,
)
from treernn.data.dependency_reading import (
    DependencyFormatError,
    DependencyTree,
    OnError,
    ReadReport,
    find_cycle,
    is_projective,
    read_dependency_file,
    read_dependency_text,
    write_conllu,
)
from treernn.data.download import RemoteFile, resolve_data_file
from treernn.data.sampling import EpochShuffle, LengthBucketBatchSampler, ResumableTrainBatches
from treernn.data.vocab import Vocabulary
from treernn.encoders.top_down_tree import EDGE_TYPES

log = logging.getLogger(__name__)

__all__ = [
    "EDGE_TYPES",
    "ROOT_TOKEN",
    "SPECIALS",
    "DependencyBatch",
    "DependencyDataModule",
    "DependencyFormatError",
    "DependencyTree",
    "EncodedTree",
    "Linearisation",
    "ReadReport",
    "build_vocabulary",
    "collate_trees",
    "encode_tree",
    "find_cycle",
    "is_projective",
    "linearise",
    "normalise_word",
    "read_dependency_file",
    "read_dependency_text",
    "write_conllu",
]


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
