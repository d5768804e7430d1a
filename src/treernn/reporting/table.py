"""The papers' comparison tables from finished runs: ``python -m treernn report table``.

A run directory (``python train.py``, or one job of ``python train.py -m``) holds
``.hydra/{config,overrides}.yaml``, ``status.json`` (`treernn.lifecycle.records`),
``metrics.json`` (the final metrics; ``csv/metrics.csv`` where it is missing), ``tree_f1.json``
(parse F1 of a logic / ListOps model's induced trees and of the trivial trees of the same sentences)
and, after ``python -m treernn report tree-f1`` or ``python -m treernn parse``,
``tree_f1_{val,test}.json`` / ``parse_eval.json`` with the trivial-tree baselines.

`load_runs` reads them (runs that did not finish are set aside with the reason);
`build_table` groups the runs into rows by the overrides that differ between them, seed
aside, and gives each column's mean, sample std and max over the row's runs, with the paper's
numbers (`treernn.reporting.paper`) as extra rows. Columns (``Column.key``):

- ``ops<k>``: test accuracy (%) at k operators (logic); ``ops7-12``: a run's mean over 7..12;
  other ``acc/<bucket>``: accuracy (%) per length bucket (ListOps, SST); ``acc``: test accuracy;
- ``sysgen_<A|B|C>``: accuracy (%) on a systematic-generalisation partition. A logic run with
  ``task.datamodule.split=A`` gives only this column (its other numbers are of a model trained
  on less data), and the split is not a row key, so one row holds a model's A, B and C;
- ``parse_f1/layer<k>``, ``parse_f1_sentence/layer<k>``: corpus and sentence-averaged F1 (%) of
  the k-th layer's induced trees (test; the validation value where a run has no test F1);
  ``parse_f1_short/...``: the same on the short column (WSJ10 / sample10) of a language model's
  test-time scoreboard; the trivial trees are rows of their own, the same number in each layer;
- ``val_ppl``, ``ppl``: perplexity (language models); any other ``test/<name>`` as ``<name>``;
- ``syntaxgym/sg_score``, ``syntaxgym/sg_score_all``, ``syntaxgym/circuit/<circuit>``,
  ``syntaxgym/unk_items``: the syntaxgym callback's SyntaxGym scores (%), beside Hu et al.
  (2020)'s ON-LSTM and LSTM per corpus (their SG score and circuits computed from their
  per-item files where ``<data dir>/syntaxgym/hu2020_results`` holds them:
  `treernn.reporting.paper.hu2020_rows`), with a section of every seed's SG score and of the
  runs' suites beside theirs at BLLIP-XS.

This module builds the table; reading the runs is `treernn.reporting.run_records`, writing it
out (Markdown, CSV, figure) `treernn.reporting.table_output`, and sending it to wandb
`treernn.reporting.table_wandb`.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from treernn.errors import UserError
from treernn.reporting.paper import PAPER_RESULTS, PAPERS, Reported, hu2020_rows
from treernn.reporting.run_records import (
    IGNORED_OVERRIDES,
    SYSGEN_SPLITS,
    Run,
    config_value,
    load_runs,
)
from treernn.reporting.syneval_table import has_syneval, syneval_markdown

#: the keys of --paper; "auto" picks from the runs' task, "none" leaves the papers out
PAPER_CHOICES = ("auto", *PAPERS, "none")
#: a trivial tree's F1 in a paper's rows, the same under every layer's column: corpus F1
#: (``parse_f1/layer<k>``) and sentence-averaged F1 (``parse_f1_sentence/layer<k>``)
TRIVIAL_F1 = ("parse_f1", "parse_f1_sentence")


@dataclass(frozen=True)
class Cell:
    """A column's numbers over a row's runs (or as a paper prints them)."""

    mean: float
    std: float | None
    max: float | None
    n: int | None  # None: a paper's number

    @classmethod
    def of(cls, values: Sequence[float]) -> Cell:
        std = statistics.stdev(values) if len(values) > 1 else None  # sample std (n - 1)
        return cls(statistics.fmean(values), std, max(values), len(values))


@dataclass
class Row:
    label: str
    kind: str  # "run", "baseline" or "paper"
    cells: dict[str, Cell]
    n: int = 0
    runs: list[Path] = field(default_factory=list)


@dataclass(frozen=True)
class Column:
    key: str
    label: str
    digits: int


@dataclass
class Table:
    task: str
    papers: list[str]
    columns: list[Column]
    rows: list[Row]
    skipped: list[tuple[Path, str]]
    #: the grouping overrides, in row order
    row_keys: list[str]
    #: the wandb project of the runs that logged to wandb (None: none did)
    wandb_project: str | None = None
    #: further tables (markdown) printed after this one: the per-construction syneval table
    sections: list[str] = field(default_factory=list)


# ----------------------------------------------------------------------------- the table
def papers_for(runs: Sequence[Run], paper: str = "auto") -> list[str]:
    """The paper tables that go beside these runs."""
    if paper == "none":
        return []
    if paper != "auto":
        if paper not in PAPER_RESULTS:
            raise UserError(f"--paper {paper}: use one of {', '.join(PAPER_CHOICES)}")
        return [paper]
    task = runs[0].task
    if task == "logic":
        splits = {run.split for run in runs}
        chosen = ["logic"] if splits - set(SYSGEN_SPLITS) else []
        return chosen + (["sysgen"] if splits & set(SYSGEN_SPLITS) else [])
    if task == "sst":
        classes = {config_value(run.config, "task.datamodule.num_classes") for run in runs}
        return ["sst5" if 5 in classes else "sst2"]
    if task == "ptb":
        parsed = any(k.startswith("parse_f1") for run in runs for k in run.values)
        return ["ptb", "parsing"] if parsed else ["ptb"]
    return [task] if task in PAPER_RESULTS else []


def row_keys(runs: Sequence[Run]) -> list[str]:
    """The overrides whose values differ between runs (seed, split and paths aside)."""
    keys: list[str] = []
    for run in runs:
        keys += [k for k in run.overrides if k not in keys and not k.startswith(IGNORED_OVERRIDES)]
    return [k for k in keys if len({_override_value(run, k) for run in runs}) > 1]


def _override_value(run: Run, key: str) -> str:
    if key in run.overrides:
        return run.overrides[key]
    value = config_value(run.config, key)  # not overridden: the value the run's config composed to
    if isinstance(value, Mapping):  # a config group: its name
        value = value.get("name", "(default)")
    return "(default)" if value is None else str(value)


def _column_order(key: str) -> tuple[int, float, str]:
    number = re.fullmatch(r"ops(\d+)", key)
    if number:
        return (0, int(number.group(1)), key)
    for rank, prefix in enumerate(
        (
            "ops7-12",
            "acc/",
            "acc",
            "sysgen_",
            "parse_f1/",
            "parse_f1_sentence/",
            "parse_f1_short/",
            "parse_f1_sentence_short/",
            "val_ppl",
            "ppl",
            "syneval/",
            "syneval_known/",
            "syntaxgym/sg_score",
            "syntaxgym/sg_score_all",
            "syntaxgym/circuit/",
            "syntaxgym/unk_items",
        ),  # fmt: skip
        start=1,
    ):
        if key == prefix or (prefix.endswith(("/", "_")) and key.startswith(prefix)):
            # buckets by their first number (len11-20 after len1-10), layers by number
            first = re.search(r"\d+", key.removeprefix(prefix))
            return (rank, int(first.group()) if first else 0, key)
    return (99, 0, key)


def _column(key: str) -> Column:
    layer = re.search(r"layer(\d+)$", key)
    if key.startswith("parse_f1_sentence/") and layer:
        return Column(key, f"sent. F1 L{layer.group(1)}", 1)
    if key.startswith("parse_f1/") and layer:
        return Column(key, f"F1 L{layer.group(1)}", 1)
    # the short column of Table 2 (WSJ10, or the sample's sentences of at most 10 words)
    if key.startswith("parse_f1_sentence_short/") and layer:
        return Column(key, f"sent. F1 (<=10) L{layer.group(1)}", 1)
    if key.startswith("parse_f1_short/") and layer:
        return Column(key, f"F1 (<=10) L{layer.group(1)}", 1)
    if key.startswith("sysgen_"):
        return Column(key, key.removeprefix("sysgen_"), 1)
    if key.startswith("acc/"):
        return Column(key, key.removeprefix("acc/"), 1)
    if key in SYNEVAL_SUMMARY:
        prefix, group = key.split("/")
        where = " (in-vocab)" if prefix == "syneval_known" else ""
        return Column(key, f"M&L {group.removesuffix('_term')}{where}", 1)
    if key in SYNTAXGYM_LABELS:
        return Column(key, SYNTAXGYM_LABELS[key], 1)
    if key.startswith("syntaxgym/circuit/"):
        return Column(key, "SG " + key.removeprefix("syntaxgym/circuit/").replace("_", " "), 1)
    labels = {"acc": "acc", "val_ppl": "val ppl", "ppl": "test ppl"}
    return Column(key, labels.get(key, key), 2 if "ppl" in key else 1)


def group_runs(runs: Sequence[Run], keys: Sequence[str]) -> dict[str, list[Run]]:
    """The runs by row label: ``key=value`` of each of ``keys`` (the model's name, or the task's,
    where there are none), in the order of the runs."""
    groups: dict[str, list[Run]] = {}
    for run in runs:
        label = " ".join(f"{k}={_override_value(run, k)}" for k in keys)
        groups.setdefault(
            label or str(config_value(run.config, "model.name") or run.task), []
        ).append(run)
    return groups


def build_table(runs: Sequence[Run], paper: str = "auto", skipped=()) -> Table:
    """Rows of runs grouped by their differing overrides, then baselines, then the papers."""
    keys = row_keys(runs)
    groups = group_runs(runs, keys)
    rows = []
    for label, members in groups.items():
        column_keys = dict.fromkeys(k for run in members for k in run.values)
        cells = {
            key: Cell.of([run.values[key] for run in members if key in run.values])
            for key in column_keys
        }
        n = max(cell.n or 0 for cell in cells.values()) if cells else 0
        rows.append(Row(label, "run", cells, n, [run.path for run in members]))
    papers = papers_for(runs, paper)
    paper_rows = [(model, cells) for name in papers for model, cells in PAPER_RESULTS[name].items()]
    sections = [syneval_markdown(runs)] if has_syneval(runs) else []
    if paper != "none" and any(key.startswith("syntaxgym/") for run in runs for key in run.values):
        hu_rows, hu_section = _hu2020(runs)
        paper_rows += list(hu_rows.items())
        sections.append(hu_section)
    # Marvin & Linzen: the short/long-range means here, every construction in a table of its own
    column_keys = {k for row in rows for k in row.cells if _main_column(k)}
    column_keys |= {k for _, cells in paper_rows for k in cells if k not in TRIVIAL_F1}
    # a trivial tree's F1 is the same under every layer: each score's layer columns
    layer_columns = {
        score: sorted(k for k in column_keys if k.startswith(f"{score}/")) for score in TRIVIAL_F1
    }

    # the trivial trees' F1 rows, corpus and sentence F1 each under its layers' columns (none:
    # e.g. the systematic-generalisation table, whose only columns are the partitions' accuracies)
    baselines: dict[str, dict[str, list[float]]] = {}
    for score, found in (("parse_f1", "baselines"), ("parse_f1_sentence", "sentence_baselines")):
        for run in runs if layer_columns[score] else ():
            for name, value in getattr(run, found).items():
                baselines.setdefault(name, {}).setdefault(score, []).append(value)
    for name, by_score in baselines.items():
        cells = {
            column: Cell.of(values)
            for score, values in by_score.items()
            for column in layer_columns[score]
        }
        rows.append(Row(name, "baseline", cells, max(len(v) for v in by_score.values())))

    merged: dict[str, dict[str, Cell]] = {}
    for model, cells in paper_rows:
        row = merged.setdefault(f"{model} (paper)", {})
        for key, reported in cells.items():
            cell = Cell(reported.mean, reported.std, reported.max, None)
            for column in layer_columns[key] if key in TRIVIAL_F1 else [key]:
                row[column] = cell
    rows += [Row(label, "paper", cells) for label, cells in merged.items()]
    columns = [_column(k) for k in sorted(column_keys, key=_column_order)]
    projects = [config_value(run.config, "logger.wandb.project") for run in runs if run.used_wandb]
    project = str(projects[0] or "treernn") if projects else None
    return Table(runs[0].task, papers, columns, rows, list(skipped), keys, project, sections)


#: the syneval means the main table shows (all pairs and in-vocabulary pairs, by dependency range)
SYNEVAL_SUMMARY = (
    "syneval/short_term",
    "syneval/long_term",
    "syneval_known/short_term",
    "syneval_known/long_term",
)


#: the SyntaxGym columns' labels (the circuits' are "SG <circuit>")
SYNTAXGYM_LABELS = {
    "syntaxgym/sg_score": "SG score",
    "syntaxgym/sg_score_all": "SG all suites",
    "syntaxgym/unk_items": "SG items w/ <unk>",
}


def _main_column(key: str) -> bool:
    # each suite's SyntaxGym accuracy is in the runs' syntaxgym_results.csv and the section
    if key.startswith("syntaxgym_suite/"):
        return False
    return not key.startswith("syneval") or key in SYNEVAL_SUMMARY


def _hu2020(runs: Sequence[Run]) -> tuple[dict[str, dict[str, Reported]], str]:
    """Hu et al. (2020)'s reference rows and the SyntaxGym section, from their files where the
    data directory (or the download cache) holds them; else no rows and a line saying so."""
    from treernn.data.download import DatasetNotFoundError
    from treernn.reporting.hu2020 import compare, hu2020_results, read_results, seeds_markdown

    try:
        theirs = hu2020_results(download=False)
    except DatasetNotFoundError:
        return {}, (
            "Hu et al. (2020)'s SyntaxGym rows need their per-item files in "
            "<data dir>/syntaxgym/hu2020_results ($TREERNN_DATA_DIR): "
            "python -m treernn syntaxgym --compare-hu2020 <run dirs> downloads them."
        )
    section = "SyntaxGym SG score per seed (Hu et al. 2020):\n\n" + seeds_markdown(theirs)
    files = [run.path / "syntaxgym_results.csv" for run in runs]
    found = [path for path in files if path.is_file()]
    if found:
        section += "\nSyntaxGym per suite beside Hu et al. (2020) at BLLIP-XS:\n\n"
        section += compare(read_results(found), theirs, "bllip-xs")
    return hu2020_rows(theirs), section


def report_table(paths: Iterable[str | Path], paper: str = "auto") -> Table:
    runs, skipped = load_runs(paths)
    return build_table(runs, paper, skipped)
