"""The EWT stand-ins for MSR sentence completion and MSTParser k-best reranking (Top-down Tree LSTM
paper, Tables 1 and 2) of a ``dependency_lm`` model after testing, from the tested weights
(`treernn.evaluation.ewt_standins`, ``docs/papers/ewt-standins.md``).

Off by default; ``conf/callbacks/ewt_standins.yaml`` switches it on (``callbacks=[default,
ewt_standins]``, or ``- /callbacks/ewt_standins@task.callbacks`` in a table). The questions and
candidate lists are built when the trainer sets up (from the run's own treebank files, so a
problem stops the run before training); after the test loop the process of rank 0 scores them,
prints the results, writes ``ewt_standins.json`` into ``output_dir`` (default: the run directory)
and logs, as test metrics in %:

- ``test/completion_acc``: sentence-completion accuracy (ties at the top counted 1/k);
- ``test/rerank_uas``, ``test/rerank_las``: attachment scores of the candidates the model
  prefers; ``test/rerank_first_uas`` (a random candidate: the lists are shuffled) and
  ``test/rerank_oracle_uas`` (100: the gold tree is in every list) beside them. A sequential
  model scores every tree of a sentence alike, so it gets no reranking metrics.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback

from treernn.errors import ConfigValueError
from treernn.evaluation.ewt_standins import (
    CompletionQuestion,
    StandInOptions,
    build_standins,
    evaluate_completion,
    evaluate_reranking,
    format_standins,
    read_treebanks,
    standin_metrics,
)
from treernn.tasks.dependency_lm import DependencyLanguageModel


class EWTStandInsCallback(Callback):
    """Completion and reranking stand-ins of the tested weights (module docstring).

    Args:
        data_dir, train_file, test_file: the run's treebank (word statistics from the training
            file, questions and lists from the test file).
        projective_only, max_length: read the files as the task does.
        completion, rerank: which stand-ins to run.
        seed, min_count, neighbours, min_length, k, changes, max_distance: how questions and
            lists are made (`treernn.evaluation.ewt_standins.StandInOptions`).
        max_sentences: the first n questions and lists only (tests, smoke runs).
        batch_size: trees per forward pass.
        output_dir: where ``ewt_standins.json`` goes (None: the trainer's run directory).
    """

    def __init__(
        self,
        data_dir: str | Path,
        train_file: str,
        test_file: str,
        projective_only: bool = True,
        max_length: int | None = 100,
        completion: bool = True,
        rerank: bool = True,
        seed: int = 0,
        min_count: int = 2,
        neighbours: int = 10,
        min_length: int = 5,
        k: int = 4,
        changes: int = 2,
        max_distance: int | None = 3,
        max_sentences: int | None = None,
        batch_size: int = 128,
        output_dir: str | Path | None = None,
    ) -> None:
        if not (completion or rerank):
            raise ConfigValueError(
                "ewt_standins: completion and rerank are both false; switch one on or leave the "
                "callback out"
            )
        if min_count < 1 or neighbours < 4 or k < 2 or changes < 1 or batch_size < 1:
            raise ConfigValueError(
                f"ewt_standins: min_count={min_count} (>= 1), neighbours={neighbours} (>= 4), "
                f"k={k} (>= 2), changes={changes} (>= 1), batch_size={batch_size} (>= 1) expected"
            )
        self.files = (Path(data_dir), train_file, test_file, projective_only, max_length)
        self.completion = completion
        self.rerank = rerank
        self.options = StandInOptions(
            seed, min_count, neighbours, min_length, k, changes, max_distance, max_sentences
        )
        self.batch_size = batch_size
        self.output_dir = Path(output_dir) if output_dir else None
        self._questions: list[CompletionQuestion] | None = None
        self._lists: tuple[list, list] | None = None
        #: the last test's metrics (what was logged)
        self.metrics: dict[str, float] = {}

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if not isinstance(pl_module, DependencyLanguageModel):
            raise ConfigValueError(
                f"the ewt_standins callback scores dependency trees with a dependency language "
                f"model (task=dependency_lm), not {type(pl_module).__name__}: leave "
                "callbacks/ewt_standins out of this run"
            )
        if self._questions is None and trainer.is_global_zero:
            train, test = read_treebanks(*self.files)
            self._questions, self._lists = build_standins(train, test, self.options)

    def on_test_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.is_global_zero or self._questions is None or self._lists is None:
            return
        start = time.perf_counter()
        completion = (
            evaluate_completion(pl_module, self._questions, self.batch_size)
            if self.completion
            else None
        )
        reranking = None
        if self.rerank and pl_module.encoder.input_view == "dependency_tree":
            reranking = evaluate_reranking(pl_module, *self._lists, batch_size=self.batch_size)
        self.metrics = standin_metrics(completion, reranking)
        for key, value in self.metrics.items():
            pl_module.log(key, value, rank_zero_only=True)
        print("\n" + format_standins(completion, reranking), flush=True)
        record: dict[str, Any] = {
            "options": asdict(self.options),
            "completion": completion,
            "reranking": reranking,
            "metrics": self.metrics,
            "seconds": time.perf_counter() - start,
            "examples": [
                {
                    "sent_id": question.sent_id,
                    "words": list(question.tree.words),
                    "position": question.position,
                    "candidates": list(question.candidates),
                    "answer": question.answer,
                }
                for question in self._questions[:5]
            ],
        }
        directory = self.output_dir or Path(trainer.default_root_dir)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "ewt_standins.json").write_text(json.dumps(record, indent=2))
