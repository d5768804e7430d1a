"""Reading finished runs for the comparison tables: what a run directory holds (see
`treernn.reporting.table`), read into one `Run` per finished job, with the runs that did
not finish set aside with the reason."""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from treernn.errors import UserError
from treernn.lifecycle.records import (
    RunState,
    final_values,
    read_json_object,
    read_metrics,
    read_metrics_csv,
    read_overrides,
    read_status,
    read_yaml,
)

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
    #: trivial-tree corpus F1 (%) by row label (from tree_f1_*.json / parse_eval.json)
    baselines: dict[str, float] = field(default_factory=dict)
    #: the CPU model of each attempt and the commit it ran (``<cpu> at <commit>``), as its
    #: status.json records them
    machines: tuple[str, ...] = ()
    #: trivial-tree sentence-averaged F1 (%) by row label, from the same files
    sentence_baselines: dict[str, float] = field(default_factory=dict)

    @property
    def seed(self) -> Any:
        return self.config.get("seed")

    @property
    def split(self) -> str:
        return str(config_value(self.config, "task.datamodule.split") or "full")

    @property
    def model(self) -> str:
        """The model's name (``model.name``, as the run's record gives it)."""
        return str(config_value(self.config, "model.name") or "?")

    @property
    def table(self) -> str | None:
        """The papers' table of a ``table=<name>`` sweep (its ``table_name``), else None."""
        name = self.config.get("table_name")
        return None if name is None else str(name)

    @property
    def used_wandb(self) -> bool:
        return "wandb" in (self.config.get("logger") or {})


# ----------------------------------------------------------------------------- reading runs
def config_value(config: Mapping[str, Any], key: str) -> Any:
    node: Any = config
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def find_run_dirs(paths: Iterable[str | Path], allow_empty: bool = False) -> list[Path]:
    """Run directories (those with ``.hydra/config.yaml``) given or below the given paths; a path
    with none is an error unless ``allow_empty`` (a sweep archived before any job finished)."""
    found: list[Path] = []
    for path in map(Path, paths):
        if not path.exists():
            raise UserError(f"{path} does not exist: give a multirun directory or run directories")
        if (path / ".hydra" / "config.yaml").is_file():
            found.append(path)
            continue
        below = sorted(c.parent.parent for c in path.rglob(".hydra/config.yaml"))
        if not below and not allow_empty:
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
        return read_metrics(path)
    metrics: dict[str, float] = {}
    for csv_path in sorted(run_dir.glob("csv/**/metrics.csv")):
        metrics.update(final_values(read_metrics_csv(csv_path)))
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


def _baselines(run_dir: Path) -> tuple[dict[str, float], dict[str, float]]:
    """Trivial-tree corpus F1 and sentence-averaged F1 (%) by row label, from the ``report
    tree-f1`` / ``parse`` files in the run (each read once)."""
    corpus: dict[str, float] = {}
    sentence: dict[str, float] = {}
    found = {"corpus_f1": corpus, "sentence_f1": sentence}

    def keep(name: Any, scores: dict[str, Any], mean: bool) -> None:
        if name not in BASELINE_ROWS:
            return
        for score, kept in found.items():
            if score in scores:
                value = scores[score]["mean"] if mean else scores[score]
                kept[BASELINE_ROWS[name]] = 100 * value

    for path in sorted([*run_dir.glob("tree_f1_*.json"), *run_dir.glob("tree_f1.json")]):
        for name, scores in (read_json_object(path).get("baselines") or {}).items():
            keep(name, scores, mean=False)
    path = run_dir / "parse_eval.json"
    if path.is_file():
        tables = read_json_object(path).get("tables") or []
        # the gold set of the paper's column (WSJ test, or the whole nltk sample), else the last
        tables = [t for t in tables if t.get("gold", {}).get("name") in TEST_GOLD] or tables[-1:]
        for row in tables[0]["rows"] if tables else []:
            if row.get("kind") == "baseline":
                keep(row.get("name"), row, mean=True)
    return corpus, sentence


def load_run(run_dir: Path) -> Run | str:
    """A run that finished cleanly, or the reason it is left out: it did not finish (it failed,
    e.g. diverged, or was interrupted; the reason is its recorded error), or it finished with a
    metric that is not a number."""
    record = read_status(run_dir)
    if record.get("resumed_into"):
        return f"resumed in {record['resumed_into']}"
    status = record.get("status")
    if status != RunState.FINISHED:
        if not status:
            return "no status.json (did not start or is not a treernn run)"
        return f"{status}: {record['error']}" if record.get("error") else status
    config = read_yaml(run_dir / ".hydra" / "config.yaml") or {}
    _name_from_record(config, record)
    overrides_path = run_dir / ".hydra" / "overrides.yaml"
    lines = read_overrides(overrides_path) if overrides_path.is_file() else []
    task = str(config_value(config, "task.name") or record.get("task") or "?")
    metrics = _final_metrics(run_dir)
    not_numbers = sorted(key for key, value in metrics.items() if not math.isfinite(value))
    if not_numbers:
        shown = ", ".join(f"{key}={metrics[key]}" for key in not_numbers[:3])
        return f"finished with metrics that are not numbers ({shown})"
    values = metric_columns(metrics)
    tree_f1 = run_dir / "tree_f1.json"
    if tree_f1.is_file() and not any(k.startswith("parse_f1") for k in values):
        for layer, scores in read_json_object(tree_f1).get("test", {}).items():
            values[f"parse_f1/{layer}"] = 100 * scores["corpus_f1"]
            values[f"parse_f1_sentence/{layer}"] = 100 * scores["sentence_f1"]
    if not any(name.startswith("test/") for name in metrics) and "parse_f1/layer1" not in values:
        raise UserError(
            f"{run_dir}: the run finished without test results (no test/ metrics in metrics.json "
            f"or csv/metrics.csv; mode={config.get('mode')}): test it (python train.py mode=test "
            "ckpt_path=<its checkpoint> ...) or leave it out"
        )
    machines = tuple(
        str(entry.get("cpu", "?")) + (f" at {entry['commit']}" if entry.get("commit") else "")
        for entry in record.get("machines", [])
    )
    corpus, sentence = _baselines(run_dir)
    run = Run(
        run_dir, task, config, _parse_overrides(lines or []), values, corpus, machines, sentence
    )
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


def load_runs(
    paths: Iterable[str | Path], allow_empty: bool = False
) -> tuple[list[Run], list[tuple[Path, str]]]:
    """The finished runs below ``paths`` and (run directory, reason) of those left out; none is an
    error unless ``allow_empty``."""
    runs, skipped = [], []
    for run_dir in find_run_dirs(paths, allow_empty):
        loaded = load_run(run_dir)
        if isinstance(loaded, Run):
            runs.append(loaded)
        else:
            skipped.append((run_dir, loaded))
    if not runs and not allow_empty:
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
