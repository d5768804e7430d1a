"""The papers' comparison tables from finished runs: ``python -m treernn report table``.

A run directory (``python train.py``, or one job of ``python train.py -m``) holds
``.hydra/{config,overrides}.yaml``, ``status.json`` (:mod:`treernn.runs`), ``metrics.json`` (the
final metrics; ``csv/metrics.csv`` where it is missing), ``tree_f1.json`` (parse F1 of a logic /
ListOps model's induced trees and of the trivial trees of the same sentences) and, after
``python -m treernn report tree-f1`` or ``python -m treernn parse``, ``tree_f1_{val,test}.json`` /
``parse_eval.json`` with the trivial-tree baselines.

:func:`load_runs` reads them (runs that did not finish are set aside with the reason);
:func:`build_table` groups the runs into rows by the overrides that differ between them, seed
aside, and gives each column's mean, sample std and max over the row's runs, with the paper's
numbers (:mod:`treernn.reporting.paper`) as extra rows. Columns (``Column.key``):

- ``ops<k>``: test accuracy (%) at k operators (logic); ``ops7-12``: a run's mean over 7..12;
  other ``acc/<bucket>``: accuracy (%) per length bucket (ListOps, SST); ``acc``: test accuracy;
- ``sysgen_<A|B|C>``: accuracy (%) on a systematic-generalisation partition. A logic run with
  ``task.datamodule.split=A`` gives only this column (its other numbers are of a model trained
  on less data), and the split is not a row key, so one row holds a model's A, B and C;
- ``parse_f1/layer<k>``, ``parse_f1_sentence/layer<k>``: corpus and sentence-averaged F1 (%) of
  the k-th layer's induced trees (test; the validation value where a run has no test F1);
  ``parse_f1_short/...``: the same on the short column (WSJ10 / sample10) of a language model's
  test-time scoreboard; the trivial trees are rows of their own, the same number in each layer;
- ``val_ppl``, ``ppl``: perplexity (language models); any other ``test/<name>`` as ``<name>``.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from treernn.errors import UserError
from treernn.reporting.paper import PAPER_RESULTS, PAPERS
from treernn.runs import read_status

#: the keys of --paper; "auto" picks from the runs' task, "none" leaves the papers out
PAPER_CHOICES = ("auto", *PAPERS, "none")
#: overrides that never make a row of their own
IGNORED_OVERRIDES = ("seed", "task.datamodule.split", "hydra.", "paths.")
SYSGEN_SPLITS = ("A", "B", "C")
#: the gold sets of ``python -m treernn parse`` that ON-LSTM Table 2's WSJ-test column compares to
TEST_GOLD = ("wsj_test", "sample")
#: the trivial trees a tree-F1 file may hold: (file key, row label)
BASELINE_ROWS = {
    "left_branching": "left-branching",
    "right_branching": "right-branching",
    "balanced": "balanced trees",
    "random": "random trees",
}


@dataclass
class Run:
    """One finished run: where it is, what it was told, and its numbers by column key."""

    path: Path
    task: str
    config: dict[str, Any]
    overrides: dict[str, str]
    values: dict[str, float]
    #: trivial-tree F1 (%) by row label (from tree_f1_*.json / parse_eval.json)
    baselines: dict[str, float] = field(default_factory=dict)

    @property
    def seed(self) -> Any:
        return self.config.get("seed")

    @property
    def split(self) -> str:
        return str(_select(self.config, "task.datamodule.split") or "full")

    @property
    def model(self) -> str:
        """The model's name (``model.name``, as the run's record gives it)."""
        return str(_select(self.config, "model.name") or "?")

    @property
    def table(self) -> str | None:
        """The papers' table of a ``table=<name>`` sweep (its ``table_name``), else None."""
        name = self.config.get("table_name")
        return None if name is None else str(name)

    @property
    def used_wandb(self) -> bool:
        return "wandb" in (self.config.get("logger") or {})


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


# ----------------------------------------------------------------------------- reading runs
def _select(config: Mapping[str, Any], key: str) -> Any:
    node: Any = config
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def find_run_dirs(paths: Iterable[str | Path]) -> list[Path]:
    """Run directories (those with ``.hydra/config.yaml``) given or below the given paths."""
    found: list[Path] = []
    for path in map(Path, paths):
        if not path.exists():
            raise UserError(f"{path} does not exist: give a multirun directory or run directories")
        if (path / ".hydra" / "config.yaml").is_file():
            found.append(path)
            continue
        below = sorted(c.parent.parent for c in path.rglob(".hydra/config.yaml"))
        if not below:
            raise UserError(
                f"{path} holds no run (no .hydra/config.yaml below it): give the directory of a "
                "multirun (outputs/multirun/<task>/<model>/<time>) or of runs"
            )
        found += below
    unique = list(dict.fromkeys(p.resolve() for p in found))
    return sorted(unique, key=_job_order)


def _job_order(path: Path) -> tuple[str, int, str]:
    name = path.name
    return (str(path.parent), int(name) if name.isdigit() else -1, name)


def _read_yaml(path: Path) -> Any:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.load(path), resolve=False)


def _parse_overrides(lines: Sequence[str]) -> dict[str, str]:
    overrides = {}
    for line in lines:
        key, _, value = str(line).partition("=")
        overrides[key.lstrip("+~")] = value
    return overrides


def _final_metrics(run_dir: Path) -> dict[str, float]:
    """``metrics.json``, or the last value of each column of the csv logger's ``metrics.csv``."""
    path = run_dir / "metrics.json"
    if path.is_file():
        return {k: float(v) for k, v in json.loads(path.read_text()).items()}
    metrics: dict[str, float] = {}
    for csv_path in sorted(run_dir.glob("csv/**/metrics.csv")):
        with csv_path.open(newline="") as handle:
            for record in csv.DictReader(handle):
                metrics.update(
                    {k: float(v) for k, v in record.items() if k and v not in ("", None)}
                )
    return metrics


def metric_columns(metrics: Mapping[str, float]) -> dict[str, float]:
    """The report's columns from a run's final metrics (accuracies to %)."""
    values: dict[str, float] = {}
    has_test_f1 = any(k.startswith("test/parse_f1") for k in metrics)
    for name, value in metrics.items():
        stage, _, rest = name.partition("/")
        if stage == "val" and rest == "ppl":
            values["val_ppl"] = value
            continue
        if stage == "val" and rest.startswith("parse_f1") and not has_test_f1:
            values[rest] = value
            continue
        if stage != "test" or rest == "loss":
            continue
        parts = rest.split("/")
        if parts[0] == "acc" and len(parts) == 2:
            number = re.fullmatch(r"ops(\d+)", parts[1])
            values[f"ops{number.group(1)}" if number else f"acc/{parts[1]}"] = 100 * value
        elif parts == ["acc"]:
            values["acc"] = 100 * value
        elif len(parts) == 2 and parts[1] == "acc":  # another test group: test/sysgen_A/acc
            values[parts[0]] = 100 * value
        elif len(parts) == 3 and parts[1] == "acc":
            continue  # a test group's accuracy per bucket: the group's total is enough here
        else:
            values[rest] = value
    operators = [values.get(f"ops{k}") for k in range(7, 13)]
    if all(v is not None for v in operators):
        values["ops7-12"] = statistics.fmean(operators)  # type: ignore[arg-type]
    return values


def _baselines(run_dir: Path) -> dict[str, float]:
    """Trivial-tree corpus F1 (%) from ``report tree-f1`` / ``parse`` files in the run."""
    found: dict[str, float] = {}
    for path in sorted([*run_dir.glob("tree_f1_*.json"), *run_dir.glob("tree_f1.json")]):
        data = json.loads(path.read_text())
        for name, scores in (data.get("baselines") or {}).items():
            if name in BASELINE_ROWS and "corpus_f1" in scores:
                found[BASELINE_ROWS[name]] = 100 * scores["corpus_f1"]
    path = run_dir / "parse_eval.json"
    if path.is_file():
        tables = json.loads(path.read_text()).get("tables") or []
        # the gold set of the paper's column (WSJ test, or the whole nltk sample), else the last
        tables = [t for t in tables if t.get("gold", {}).get("name") in TEST_GOLD] or tables[-1:]
        for row in tables[0]["rows"] if tables else []:
            if row.get("kind") == "baseline" and row.get("name") in BASELINE_ROWS:
                found[BASELINE_ROWS[row["name"]]] = 100 * row["corpus_f1"]["mean"]
    return found


def load_run(run_dir: Path) -> Run | str:
    """A run that finished cleanly, or the reason it is left out: it did not finish (it failed,
    e.g. diverged, or was interrupted; the reason is its recorded error), or it finished with a
    metric that is not a number."""
    record = read_status(run_dir)
    if record.get("resumed_into"):
        return f"resumed in {record['resumed_into']}"
    status = record.get("status")
    if status != "finished":
        if not status:
            return "no status.json (did not start or is not a treernn run)"
        return f"{status}: {record['error']}" if record.get("error") else status
    config = _read_yaml(run_dir / ".hydra" / "config.yaml") or {}
    _name_from_record(config, record)
    overrides_path = run_dir / ".hydra" / "overrides.yaml"
    lines = _read_yaml(overrides_path) if overrides_path.is_file() else []
    task = str(_select(config, "task.name") or record.get("task") or "?")
    metrics = _final_metrics(run_dir)
    not_numbers = sorted(key for key, value in metrics.items() if not math.isfinite(value))
    if not_numbers:
        shown = ", ".join(f"{key}={metrics[key]}" for key in not_numbers[:3])
        return f"finished with metrics that are not numbers ({shown})"
    values = metric_columns(metrics)
    tree_f1 = run_dir / "tree_f1.json"
    if tree_f1.is_file() and not any(k.startswith("parse_f1") for k in values):
        for layer, scores in json.loads(tree_f1.read_text()).get("test", {}).items():
            values[f"parse_f1/{layer}"] = 100 * scores["corpus_f1"]
            values[f"parse_f1_sentence/{layer}"] = 100 * scores["sentence_f1"]
    if not any(name.startswith("test/") for name in metrics) and "parse_f1/layer1" not in values:
        raise UserError(
            f"{run_dir}: the run finished without test results (no test/ metrics in metrics.json "
            f"or csv/metrics.csv; mode={config.get('mode')}): test it (python train.py mode=test "
            "ckpt_path=<its checkpoint> ...) or leave it out"
        )
    run = Run(run_dir, task, config, _parse_overrides(lines or []), values, _baselines(run_dir))
    if run.split in SYSGEN_SPLITS:  # only the partition's accuracy compares across models
        run.values = {k: v for k, v in values.items() if k.startswith("sysgen_")}
    return run


def _name_from_record(config: dict[str, Any], record: Mapping[str, Any]) -> None:
    """A model config without its own ``name:`` is named after its file by an interpolation
    (``${hydra:runtime.choices.model}``, conf/config.yaml) that the saved config keeps unresolved;
    the run's record holds the name it ran under."""
    model = config.get("model")
    if isinstance(model, dict) and "${" in str(model.get("name", "")) and record.get("model"):
        model["name"] = record["model"]


def load_runs(paths: Iterable[str | Path]) -> tuple[list[Run], list[tuple[Path, str]]]:
    """The finished runs below ``paths`` and (run directory, reason) of those left out."""
    runs, skipped = [], []
    for run_dir in find_run_dirs(paths):
        loaded = load_run(run_dir)
        if isinstance(loaded, Run):
            runs.append(loaded)
        else:
            skipped.append((run_dir, loaded))
    if not runs:
        listed = "; ".join(f"{path}: {reason}" for path, reason in skipped)
        raise UserError(f"no finished run to report ({listed})")
    tasks: dict[str, int] = {}
    for run in runs:
        tasks[run.task] = tasks.get(run.task, 0) + 1
    if len(tasks) > 1:
        counts = ", ".join(f"{task}: {count} runs" for task, count in tasks.items())
        raise UserError(
            f"runs of several tasks ({counts}): one table compares the runs of one task; give "
            "each task's runs separately"
        )
    return runs, skipped


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
        classes = {_select(run.config, "task.datamodule.num_classes") for run in runs}
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
    value = _select(run.config, key)  # not overridden: the value the run's config composed to
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
    labels = {"acc": "acc", "val_ppl": "val ppl", "ppl": "test ppl"}
    return Column(key, labels.get(key, key), 2 if "ppl" in key else 1)


def group_runs(runs: Sequence[Run], keys: Sequence[str]) -> dict[str, list[Run]]:
    """The runs by row label: ``key=value`` of each of ``keys`` (the model's name, or the task's,
    where there are none), in the order of the runs."""
    groups: dict[str, list[Run]] = {}
    for run in runs:
        label = " ".join(f"{k}={_override_value(run, k)}" for k in keys)
        groups.setdefault(label or str(_select(run.config, "model.name") or run.task), []).append(
            run
        )
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
    column_keys = {k for row in rows for k in row.cells}
    column_keys |= {k for _, cells in paper_rows for k in cells if k != "parse_f1"}
    f1_columns = sorted(k for k in column_keys if k.startswith("parse_f1/"))

    baselines: dict[str, list[float]] = {}
    for run in runs:
        for name, value in run.baselines.items():
            baselines.setdefault(name, []).append(value)
    for name, values in baselines.items():
        cell = Cell.of(values)
        rows.append(Row(name, "baseline", dict.fromkeys(f1_columns, cell), cell.n or 0))

    merged: dict[str, dict[str, Cell]] = {}
    for model, cells in paper_rows:
        row = merged.setdefault(f"{model} (paper)", {})
        for key, reported in cells.items():
            cell = Cell(reported.mean, reported.std, reported.max, None)
            for column in f1_columns if key == "parse_f1" else [key]:
                row[column] = cell
    rows += [Row(label, "paper", cells) for label, cells in merged.items()]
    columns = [_column(k) for k in sorted(column_keys, key=_column_order)]
    projects = [_select(run.config, "logger.wandb.project") for run in runs if run.used_wandb]
    project = str(projects[0] or "treernn") if projects else None
    return Table(runs[0].task, papers, columns, rows, list(skipped), keys, project)


def report_table(paths: Iterable[str | Path], paper: str = "auto") -> Table:
    runs, skipped = load_runs(paths)
    return build_table(runs, paper, skipped)


# ----------------------------------------------------------------------------- output
def format_cell(cell: Cell | None, digits: int, n: int | None = None) -> str:
    """``mean ± std (max M)`` over several runs, the value of one, ``-`` for none; ``[n=k]``
    where the cell has fewer runs than its row."""
    if cell is None:
        return "-"
    text = f"{cell.mean:.{digits}f}"
    if cell.std is not None:
        text += f" ± {cell.std:.{digits}f}"
    if cell.max is not None and (cell.n is None or cell.n > 1) and cell.max != cell.mean:
        text += f" (max {cell.max:.{digits}f})"
    if n is not None and cell.n is not None and cell.n != n:
        text += f" [n={cell.n}]"
    return text


def to_markdown(table: Table) -> str:
    header = ["model", "n", *[column.label for column in table.columns]]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in table.rows:
        n = str(row.n) if row.kind == "run" else ("paper" if row.kind == "paper" else "-")
        cells = [format_cell(row.cells.get(c.key), c.digits, row.n or None) for c in table.columns]
        lines.append("| " + " | ".join([row.label, n, *cells]) + " |")
    notes = [f"task {table.task}; mean ± sample std (max) over seeds; accuracy and F1 in %"]
    if table.papers:
        notes.append("(paper) rows: " + ", ".join(_PAPER_SOURCES[p] for p in table.papers))
    lines += ["", *notes]
    if table.skipped:
        lines.append(f"left out ({len(table.skipped)} runs that did not finish cleanly):")
        lines += [f"- {path}: {reason}" for path, reason in table.skipped]
    return "\n".join(lines) + "\n"


_PAPER_SOURCES = {
    "logic": "Ordered Memory Table 1",
    "sysgen": "Ordered Memory Table 1 (Sys. Gen.)",
    "listops": "Ordered Memory Fig. 3a",
    "sst2": "Ordered Memory Table 3 (SST-2)",
    "sst5": "Ordered Memory Table 3 (SST-5)",
    "parsing": "ON-LSTM Table 2 (WSJ test)",
    "ptb": "ON-LSTM Table 1",
}


def to_csv(table: Table) -> str:
    """One row per model: kind, n, and each column's mean, std, max and n."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    fields = [f"{c.key}_{stat}" for c in table.columns for stat in ("mean", "std", "max", "n")]
    writer.writerow(["model", "kind", "n", *fields, "runs"])
    for row in table.rows:
        values: list[Any] = [row.label, row.kind, row.n if row.kind != "paper" else ""]
        for column in table.columns:
            cell = row.cells.get(column.key)
            values += (
                [_number(cell.mean), _number(cell.std), _number(cell.max), _number(cell.n)]
                if cell
                else ["", "", "", ""]
            )
        writer.writerow([*values, " ".join(str(path) for path in row.runs)])
    return out.getvalue()


def _number(value: float | int | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def operator_curves(
    table: Table,
) -> tuple[dict[str, dict[int, float]], dict[str, dict[int, float]]]:
    """Mean accuracy and std per number of operators of each run row (for the plot)."""
    curves, errors = {}, {}
    for row in table.rows:
        if row.kind != "run":
            continue
        points = {
            int(key[3:]): cell for key, cell in row.cells.items() if re.fullmatch(r"ops\d+", key)
        }
        if points:
            curves[row.label] = {k: cell.mean for k, cell in sorted(points.items())}
            errors[row.label] = {k: cell.std or 0.0 for k, cell in sorted(points.items())}
    return curves, errors


def write_table(table: Table, prefix: str | Path) -> list[Path]:
    """``<prefix>.md``, ``<prefix>.csv`` and, for accuracy by number of operators,
    ``<prefix>.png`` (ON-LSTM Fig. 3: mean over seeds, error bars = std)."""
    from treernn.reporting.accuracy import plot_accuracy_by_length

    prefix = Path(prefix)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    written = [prefix.with_name(prefix.name + ".md"), prefix.with_name(prefix.name + ".csv")]
    written[0].write_text(to_markdown(table))
    written[1].write_text(to_csv(table))
    curves, errors = operator_curves(table)
    if any(len(curve) > 1 for curve in curves.values()):
        written.append(
            plot_accuracy_by_length(
                curves,
                prefix.with_name(prefix.name + ".png"),
                with_paper="logic" in table.papers,
                errors=errors,
            )
        )
    return written


def log_to_wandb(table: Table, directory: Path, project: str = "treernn") -> str:
    """The table as a ``wandb.Table`` in the summary of a run of its own (offline unless
    ``WANDB_MODE`` says otherwise); returns the run's directory."""
    import os

    import wandb

    columns = ["model", "kind", "n"]
    for column in table.columns:
        columns += [f"{column.key} mean", f"{column.key} std", f"{column.key} max"]
    data = []
    for row in table.rows:
        values: list[Any] = [row.label, row.kind, row.n if row.kind != "paper" else None]
        for column in table.columns:
            cell = row.cells.get(column.key)
            values += [cell.mean, cell.std, cell.max] if cell else [None, None, None]
        data.append(values)
    run = wandb.init(
        project=project,
        job_type="report",
        name=f"table-{table.task}",
        group=f"{table.task}-report",
        dir=str(directory),
        mode=os.environ.get("WANDB_MODE", "offline"),
    )
    try:
        run.summary["report/table"] = wandb.Table(columns=columns, data=data)
        # run.dir is the run's files/ folder; `wandb sync` takes the run folder above it
        return str(Path(run.dir).parent) if getattr(run, "dir", None) else str(directory)
    finally:
        wandb.finish()
