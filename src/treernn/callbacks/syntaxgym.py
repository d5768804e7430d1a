"""SyntaxGym (Hu et al. 2020) of a PTB language model after testing, from the tested weights, as
``python -m treernn syntaxgym --ckpt`` scores a checkpoint (`treernn.evaluation.syntaxgym`).

Off by default; ``conf/callbacks/syntaxgym.yaml`` switches it on (``callbacks=[default,syntaxgym]``,
or ``- /callbacks/syntaxgym@task.callbacks`` in a table). After the test loop the process of
rank 0 scores the suites (Hu et al.'s 34, or those named), prints the table, writes
``syntaxgym.json`` and ``syntaxgym_results.csv`` (Hu et al.'s layout) into ``output_dir``
(default: the run directory) and logs, as test metrics in %:

- ``test/syntaxgym/sg_score``: Hu et al.'s SG score (mean accuracy over their 31 suites);
- ``test/syntaxgym/sg_score_all``: the mean over every suite scored;
- ``test/syntaxgym/circuit/<circuit>``: the mean over each circuit's suites;
- ``test/syntaxgym/unk_items``: the share of items with ``<unk>`` in a critical region;
- ``test/syntaxgym_suite/<suite>``: each suite's accuracy.

The suites are read when the trainer sets up (from ``<data_dir>/syntaxgym``, else the download
cache, else downloaded from their canonical URLs and checked), so a missing or damaged suite
stops the run before training.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback

from treernn.data.syntaxgym import SUITE_FILES, Suite, model_label, read_suite, suite_files
from treernn.errors import ConfigValueError
from treernn.evaluation.syntaxgym import (
    TaskScorer,
    evaluate_suites,
    format_table,
    syntaxgym_metrics,
)
from treernn.tasks.language_model import LanguageModelTask


class SyntaxGymCallback(Callback):
    """SyntaxGym scores of the tested weights, logged as test metrics (module docstring).

    Args:
        data_dir: the data folder that holds ``syntaxgym/`` (``paths.data_dir``).
        suites: Hu et al.'s suites by name, or paths of suite files (None: all 34).
        batch_size: sentences per forward pass.
        download: fetch a published suite that is neither in ``data_dir`` nor in the cache.
        model, corpus, seed: the model's name in the CSV, ``<model>_<corpus>_<seed>``.
        output_dir: where the result files go (None: the trainer's run directory).
    """

    def __init__(
        self,
        data_dir: str | Path | None = None,
        suites: list[str] | None = None,
        batch_size: int = 256,
        download: bool = True,
        model: Any = "model",
        corpus: Any = None,
        seed: Any = None,
        output_dir: str | Path | None = None,
    ) -> None:
        if batch_size < 1:
            raise ConfigValueError(f"batch_size={batch_size}: use a positive number")
        if suites is not None and (isinstance(suites, str) or not list(suites)):
            raise ConfigValueError(
                f"suites={suites!r}: give a list of suite names or files, or null for all 34"
            )
        self.data_dir = data_dir
        self.suite_names = None if suites is None else [str(suite) for suite in suites]
        self.batch_size = batch_size
        self.download = download
        self.label = model_label(model, corpus, seed)
        self.output_dir = Path(output_dir) if output_dir else None
        self._suites: list[Suite] | None = None
        #: the last test's metrics (what was logged)
        self.metrics: dict[str, float] = {}

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if not isinstance(pl_module, LanguageModelTask):
            raise ConfigValueError(
                f"the syntaxgym callback scores sentences with a language model (task=ptb), not "
                f"{type(pl_module).__name__}: leave callbacks/syntaxgym out of this run"
            )
        if self._suites is None and trainer.is_global_zero:
            self._suites = self._read_suites()

    def _read_suites(self) -> list[Suite]:
        names = self.suite_names
        if names is None:
            paths = suite_files(data_dir=self.data_dir, download=self.download)
        else:
            published = [name for name in names if name in SUITE_FILES]
            found = dict(
                zip(published, suite_files(published, self.data_dir, download=self.download))
            )
            paths = [found.get(name, Path(name)) for name in names]
        return [read_suite(path) for path in paths]

    def on_test_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.is_global_zero or self._suites is None:
            return
        result = evaluate_suites(self._suites, TaskScorer(pl_module, self.batch_size), self.label)
        self.metrics = syntaxgym_metrics(result)
        for key, value in self.metrics.items():
            pl_module.log(key, value, rank_zero_only=True)
        print("\n" + format_table(result), flush=True, file=sys.stdout)
        directory = self.output_dir or Path(trainer.default_root_dir)
        directory.mkdir(parents=True, exist_ok=True)
        record = result.as_dict() | {"metrics": self.metrics}
        (directory / "syntaxgym.json").write_text(json.dumps(record, indent=1) + "\n")
        (directory / "syntaxgym_results.csv").write_text(result.csv_text())
