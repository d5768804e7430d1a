"""Reading the table sweeps a claim is decided from: each sweep's finished runs with their budget
and size, and which sweep a comparison reads.

Runs are read as ``report table`` reads them (`treernn.reporting.run_records.load_runs`:
finished runs only, metrics as its columns, accuracies and F1 in %), one sweep directory at a
time. A table's sweeps at one budget are read as one when they ran on the same overrides and no
job twice (`Sweep.joined`: a model added to a finished comparison by a sweep of its own). Also
here: a table's declared budget (what decides a smoke check) and whether validation was still
improving at the end (printed as information).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from treernn.errors import UserError
from treernn.lifecycle.records import is_fraction
from treernn.lifecycle.sweeps.layout import sweep_size
from treernn.reporting.claims.catalogue import TRIVIAL_BEST, Comparison
from treernn.reporting.curves import run_curve
from treernn.reporting.run_records import (
    IGNORED_OVERRIDES,
    Run,
    config_value,
    load_runs,
)

#: the checkout's config directory, beside src/
CONFIG_DIR = Path(__file__).resolve().parents[4] / "conf"


def declared_budget(table: str, config_dir: Path | None = None) -> tuple[int | None, int | None]:
    """The budget a table declares in ``conf/table/<table>.yaml``: its ``trainer.max_steps`` and
    ``trainer.max_epochs`` (None where the file or the key is not there: an installed package
    without the checkout's conf, a table budgeted in the other unit)."""
    import yaml

    path = (config_dir or CONFIG_DIR) / "table" / f"{table}.yaml"
    if not path.is_file():
        return None, None
    trainer = (yaml.safe_load(path.read_text()) or {}).get("trainer") or {}

    def positive(key: str) -> int | None:
        value = trainer.get(key)
        return value if isinstance(value, int) and value > 0 else None

    return positive("max_steps"), positive("max_epochs")


# ----------------------------------------------------------------------------- still improving
def improvement_at_end(runs: Sequence[Run]) -> tuple[str, float, float] | None:
    """Where the monitored validation metric, mean over the runs at each validation, was better at
    the last validation than at every earlier one: (the metric, its mean there, the best mean
    before it), so that a reader sees by how much; None where it was not, or where fewer than two
    validations were logged (the runs' csv logger files).

    Only the runs that trained to the end of their budget count. A run that its own rule stopped
    earlier (the Top-down Tree LSTM recipe stops at the second epoch that misses the threshold) had
    stopped improving by that rule, and more updates would not have trained it on; and with it in
    the mean, the mean after it stopped would be over fewer seeds than before, so that a change of
    seeds could read as a climb. None where every run stopped before its budget."""
    rise = rise_at_end(runs)
    return None if rise is None else rise[:3]


def rise_at_end(runs: Sequence[Run]) -> tuple[str, float, float, list[float]] | None:
    """`improvement_at_end` with each seed's own rise: its value at the last validation
    minus its value at the validation whose mean was the best before (the rises' mean is the
    means' difference), over the seeds that have both; the spread of the rises over seeds says
    whether the climb is more than noise."""
    config = runs[0].config
    monitor = str((config.get("task") or {}).get("monitor") or "")
    lower = (config.get("task") or {}).get("mode") == "min"
    curves = [run_curve(run.path, monitor) for run in runs] if monitor else []
    curves = _to_the_budget([curve for curve in curves if curve], _budget(runs))
    steps = sorted({step for curve in curves for step in curve})
    if len(steps) < 2:
        return None
    means = [statistics.fmean(curve[step] for curve in curves if step in curve) for step in steps]
    earlier = means[:-1]
    best_index = earlier.index(min(earlier) if lower else max(earlier))
    before = earlier[best_index]
    improved = means[-1] < before if lower else means[-1] > before
    if not improved:
        return None
    last_step, best_step = steps[-1], steps[best_index]
    rises = [
        curve[last_step] - curve[best_step]
        for curve in curves
        if last_step in curve and best_step in curve
    ]
    return monitor, means[-1], before, rises


def describe_rise(model: str, monitor: str, rises: Sequence[float]) -> str:
    """``lstm: val/acc +0.007 ± 0.010 points (standard error over 3 seeds)``: accuracies
    (logged as fractions) in percentage points."""
    scale, unit = (100.0, " points") if is_fraction(monitor) else (1.0, "")
    values = [scale * rise for rise in rises]
    if not values:
        return f"{model}: {monitor} best at the last validation"
    mean = statistics.fmean(values)
    if len(values) < 2:
        return f"{model}: {monitor} {mean:+.3g}{unit} (1 seed)"
    error = statistics.stdev(values) / math.sqrt(len(values))
    return (
        f"{model}: {monitor} {mean:+.3g} ± {error:.2g}{unit} "
        f"(standard error over {len(values)} seeds)"
    )


def distinct_numbers(a: float, b: float) -> tuple[str, str]:
    """``a`` and ``b`` to 4 significant digits, or to as many more (up to 10) as it takes for them
    to read differently: a last validation better than every earlier one by 0.00007 (val/acc
    0.96524 against 0.96517) reads as the tie-break it is, not as "0.9652, best before 0.9652"."""
    for digits in range(4, 11):
        a_text, b_text = f"{a:.{digits}g}", f"{b:.{digits}g}"
        if a_text != b_text:
            break
    return a_text, b_text


def _to_the_budget(curves: list[dict[int, float]], budget: int | None) -> list[dict[int, float]]:
    """The validation curves of the runs that trained to the end of ``budget`` updates (without
    one, to the longest run's end): those whose next validation, the run's usual (median) number
    of updates after its last, would have fallen within it were stopped by a rule. The csv logger
    writes a validation after ``n`` updates at step ``n - 1``."""
    if not curves:
        return curves
    limit = budget or max(max(curve) for curve in curves) + 1

    def stopped_early(curve: dict[int, float]) -> bool:
        steps = sorted(curve)
        if len(steps) < 2:
            return False
        gap = statistics.median(after - before for before, after in zip(steps, steps[1:]))
        return steps[-1] + 1 + gap <= limit

    return [curve for curve in curves if not stopped_early(curve)]


def _runs_of(runs: Sequence[Run], model: str) -> list[Run]:
    return [run for run in runs if run.model == model]


def column_of(runs: Sequence[Run], metric: str, higher: bool) -> str | None:
    if not metric.endswith("*"):
        return metric
    found = {key for run in runs for key in run.values if key.startswith(metric[:-1])}
    if not found:
        return None

    def mean(key: str) -> float:
        return statistics.fmean(run.values[key] for run in runs if key in run.values)

    return max(found, key=mean) if higher else min(found, key=mean)


def sides_of(comparison: Comparison, runs: Sequence[Run]) -> tuple[list[Run], list[Run]]:
    """The runs of the comparison's two models (the trivial trees: model A's runs)."""
    better_runs = _runs_of(runs, comparison.better)
    if comparison.worse == TRIVIAL_BEST:
        return better_runs, better_runs
    return better_runs, _runs_of(runs, comparison.worse)


def choose_sweep(comparison: Comparison, candidates: Sequence[Sweep]) -> Sweep:
    """Of a table's sweeps (ranked by `load_sweeps`), the first that has finished runs of
    both models compared, so that each comparison reads the largest budget that ran both (a long
    re-run of two of a table's models leaves the others' comparisons on the sweep that ran them);
    the first sweep where none has both (the outcome then says which model is missing)."""
    for sweep in candidates:
        if all(sides_of(comparison, sweep.runs)):
            return sweep
    return candidates[0]


def values_of(
    comparison: Comparison, sweep: Sweep, metric: str | None, trivial: str | None = None
) -> tuple[list[float], list[float], str | None]:
    """The claim metric over A's and B's runs of ``sweep``, and the trivial trees compared (the
    best on the same sentences, or ``trivial`` where given)."""
    better_runs, worse_runs = sides_of(comparison, sweep.runs)
    better = [run.values[metric] for run in better_runs if metric and metric in run.values]
    if comparison.worse != TRIVIAL_BEST:
        worse = [run.values[metric] for run in worse_runs if metric and metric in run.values]
        return better, worse, None
    names = {name for run in better_runs for name in run.baselines}
    best = trivial or max(
        names,
        key=lambda name: statistics.fmean(
            run.baselines[name] for run in better_runs if name in run.baselines
        ),
        default=None,
    )
    worse = [run.baselines[best] for run in better_runs if best and best in run.baselines]
    return better, worse, best


# ----------------------------------------------------------------------------- reading sweeps
def _budget(runs: Sequence[Run], key: str = "trainer.max_steps") -> int | None:
    """The most updates (``trainer.max_steps``; or epochs: ``key``) any run of a sweep was given,
    None where unset."""
    found = [config_value(run.config, key) for run in runs]
    found = [int(value) for value in found if isinstance(value, int) and value > 0]
    return max(found) if found else None


def _updates(budget: int | None, epochs: int | None = None) -> str:
    if budget:
        return f"{budget:,} updates"
    return f"{epochs} epochs" if epochs else "no budget (trainer.max_steps or max_epochs)"


def _terms(runs: Sequence[Run]) -> dict[str, list[str]]:
    """What a sweep's runs were told beyond their table's config and which job each is: each
    override but the model, the sweep's name and those no table row is made of
    (`treernn.reporting.run_records.IGNORED_OVERRIDES`: seed, split, Hydra's, paths), with
    its values over the runs."""
    terms: dict[str, set[str]] = {}
    for run in runs:
        for key, value in run.overrides.items():
            if key not in ("model", "sweep_id") and not key.startswith(IGNORED_OVERRIDES):
                terms.setdefault(key, set()).add(value)
    return {key: sorted(values) for key, values in sorted(terms.items())}


def _job(run: Run) -> str:
    return f"model={run.model} seed={run.seed}" + (
        f" split={run.split}" if run.split != "full" else ""
    )


@dataclass(frozen=True)
class Sweep:
    """The finished runs of one table in one sweep directory, or in several sweeps run on the same
    terms (a model added to a finished sweep by a sweep of its own), with their budget and size."""

    paths: tuple[Path, ...]
    runs: list[Run]
    budget: int | None  # updates (trainer.max_steps)
    finished: int  # the sweeps' finished runs, of every table
    size: int | None  # jobs the sweeps' commands make, None where unknown
    epochs: int | None = None  # trainer.max_epochs, where the sweep is budgeted in epochs

    @property
    def path(self) -> Path:
        return self.paths[0]

    @property
    def complete(self) -> bool:
        return self.size is None or self.finished >= self.size

    def describe(self) -> str:
        jobs = f", {self.finished} of {self.size} jobs finished" if self.size else ""
        where = " + ".join(map(str, self.paths))
        return f"{where} ({_updates(self.budget, self.epochs)}{jobs})"

    def joined(self, other: Sweep, table: str) -> Sweep:
        """This sweep and ``other``, of the same table and budget, read as one: a comparison may
        take one model's runs from each. Only on the same terms (`_terms`) and with no job
        run in both; else a `UserError` that says which."""
        here, there = _terms(self.runs), _terms(other.runs)
        if here != there:
            differ = sorted(key for key in {*here, *there} if here.get(key) != there.get(key))
            shown = "; ".join(
                f"{key}={','.join(here.get(key, ['(unset)']))} against "
                f"{','.join(there.get(key, ['(unset)']))}"
                for key in differ
            )
            raise UserError(
                f"{other.path}: a second sweep of table {table} with the same budget as "
                f"{self.describe()} but other overrides ({shown}): the two cannot be compared as "
                "one sweep; give one of them, or run the second on the first's overrides"
            )
        both = sorted({_job(run) for run in self.runs} & {_job(run) for run in other.runs})
        if both:
            raise UserError(
                f"{other.path}: a second sweep of table {table} with the same budget as "
                f"{self.describe()} that ran the same jobs ({'; '.join(both)}): give one of them"
            )
        size = None if self.size is None or other.size is None else self.size + other.size
        return Sweep(
            self.paths + other.paths,
            self.runs + other.runs,
            self.budget,
            self.finished + other.finished,
            size,
            self.epochs,
        )


def load_sweeps(
    paths: Iterable[str | Path], notes: list[str] | None = None
) -> dict[str, list[Sweep]]:
    """Table name -> its sweeps (their finished runs), in the order a comparison prefers them:
    those whose jobs have all finished first, each group by budget (``trainer.max_steps``),
    largest first. ``results/tables/*/*`` holds a table's short and long budgets: a comparison
    reads the first that ran both its models (`choose_sweep`), so a long sweep still
    running (archived every few minutes into ``results/``) does not hide a complete shorter one.
    A sweep without a finished job yet is left out, with a line appended to ``notes``. Sweeps of
    one table with the same budget are read as one (`Sweep.joined`: a model run later beside
    a finished sweep, on its overrides), or are an error; so is having no finished run at all."""
    found: dict[str, list[Sweep]] = {}
    empty = []
    for path in map(Path, paths):
        runs, _ = load_runs([path], allow_empty=True)
        if not runs:
            empty.append(str(path))
            continue
        names = {run.table for run in runs}
        if None in names:
            raise UserError(
                f"{path}: runs without table_name in their config; give the sweeps of "
                "`python train.py -m table=<name>` (conf/table/)"
            )
        size = sweep_size(path)
        for name in sorted(names, key=str):
            table_runs = [run for run in runs if run.table == name]
            epochs = _budget(table_runs, "trainer.max_epochs")
            sweep = Sweep((path,), table_runs, _budget(table_runs), len(runs), size, epochs)
            found.setdefault(str(name), []).append(sweep)
    if not found:
        raise UserError(
            f"no finished run in {', '.join(empty)}: give the sweeps of `python train.py -m "
            "table=<name>` once a job has finished (`python -m treernn sweep status <dir>`)"
        )
    if notes is not None:
        notes += [f"Left out, no finished job yet: {path}" for path in empty]
    sweeps: dict[str, list[Sweep]] = {}
    for name, candidates in found.items():
        by_budget: dict[tuple[int | None, int | None], Sweep] = {}
        for sweep in candidates:
            first = by_budget.get((sweep.budget, sweep.epochs))
            joined = sweep if first is None else first.joined(sweep, name)
            by_budget[(sweep.budget, sweep.epochs)] = joined
        # the largest budget first; an unset budget counts as 0
        ranked = sorted(
            by_budget.values(), key=lambda s: (s.budget or 0, s.epochs or 0), reverse=True
        )
        sweeps[name] = sorted(ranked, key=lambda sweep: not sweep.complete)  # a stable sort
    return sweeps
