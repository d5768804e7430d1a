"""Marvin & Linzen's targeted syntactic evaluation (ON-LSTM Table 3) of a PTB language model after
testing, from the tested weights, as ``python -m treernn syneval --ckpt`` scores a checkpoint
(`treernn.evaluation.syneval`).

Off by default; ``conf/callbacks/syneval.yaml`` switches it on (``callbacks=[default,syneval]``, or
``- /callbacks/syneval@task.callbacks`` in a table). After the test loop the process of rank 0
scores the test pairs, prints the Table 3 layout, writes ``syneval_<template set>.json`` into
``output_dir`` (default: the run directory) and logs, as test metrics in %:

- ``test/syneval/<case>``: accuracy over all pairs of a Table 3 row (keys:
  `treernn.evaluation.syneval.TestCase.key`, e.g. ``agreement_across_subj_rel``);
- ``test/syneval_known/<case>``: the same over the pairs with no word outside the vocabulary;
- ``test/syneval/short_term``, ``test/syneval/long_term`` and
  ``test/syneval_known/{short,long}_term``: the unweighted means over the rows of each group.

The test sets are read when the trainer sets up, so a missing file stops the run before training.
``max_pairs_per_condition`` keeps that many pairs of each condition (evenly spaced), for tests and
smoke runs; the full sets hold 179,732 distinct pairs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback

from treernn.errors import ConfigValueError
from treernn.evaluation.syneval import (
    TEMPLATE_SETS,
    TestSets,
    evaluate_syneval,
    format_table,
    load_test_sets,
    syneval_metrics,
)
from treernn.tasks.language_model import LanguageModelTask


class SynEvalCallback(Callback):
    """Table 3 accuracies of the tested weights, logged as test metrics (module docstring).

    Args:
        syneval_dir: the ``syneval`` data folder (``<data_dir>/syneval``).
        template_set: ``current`` (what ON-LSTM evaluated on) or ``EMNLP2018``.
        batch_size: sentences per forward pass.
        include_end: add log p(<eos>) at the end of each sentence (LM_syneval's final period).
        max_pairs_per_condition: at most this many pairs per condition (None: all).
        output_dir: where ``syneval_<set>.json`` goes (None: the trainer's run directory).
    """

    def __init__(
        self,
        syneval_dir: str | Path,
        template_set: str = "current",
        batch_size: int = 256,
        include_end: bool = True,
        max_pairs_per_condition: int | None = None,
        output_dir: str | Path | None = None,
    ) -> None:
        if template_set not in TEMPLATE_SETS:
            raise ConfigValueError(f"template_set={template_set!r}: use one of {TEMPLATE_SETS}")
        if batch_size < 1:
            raise ConfigValueError(f"batch_size={batch_size}: use a positive number")
        if max_pairs_per_condition is not None and max_pairs_per_condition < 1:
            raise ConfigValueError(
                f"max_pairs_per_condition={max_pairs_per_condition}: use a positive number or null"
            )
        self.syneval_dir = Path(syneval_dir)
        self.template_set = template_set
        self.batch_size = batch_size
        self.include_end = include_end
        self.max_pairs_per_condition = max_pairs_per_condition
        self.output_dir = Path(output_dir) if output_dir else None
        self._test_sets: TestSets | None = None
        #: the last test's metrics (what was logged)
        self.metrics: dict[str, float] = {}

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if not isinstance(pl_module, LanguageModelTask):
            raise ConfigValueError(
                f"the syneval callback scores sentences with a language model (task=ptb), not "
                f"{type(pl_module).__name__}: leave callbacks/syneval out of this run"
            )
        if self._test_sets is None and trainer.is_global_zero:
            self._test_sets = load_test_sets(self.syneval_dir, self.template_set)

    def on_test_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.is_global_zero or self._test_sets is None:
            return
        result = evaluate_syneval(
            pl_module,
            self._test_sets,
            self.template_set,
            batch_size=self.batch_size,
            include_end=self.include_end,
            max_items_per_condition=self.max_pairs_per_condition,
        )
        self.metrics = syneval_metrics(result)
        for key, value in self.metrics.items():
            pl_module.log(key, value, rank_zero_only=True)
        print("\n" + format_table(result), flush=True, file=sys.stdout)
        directory = self.output_dir or Path(trainer.default_root_dir)
        directory.mkdir(parents=True, exist_ok=True)
        record = result.as_dict() | {
            "max_pairs_per_condition": self.max_pairs_per_condition,
            "metrics": self.metrics,
        }
        path = directory / f"syneval_{self.template_set}.json"
        path.write_text(json.dumps(record, indent=2))
