"""Every claim of the three papers on one scoreboard: ``python -m treernn report claims``.

The ten comparisons that the ON-LSTM, Ordered Memory and Top-down Tree LSTM papers make
(`CLAIMS`) are decided from the table sweeps given (``python train.py -m table=<name>``;
each run's config names its table in ``table_name``). Runs are read as ``report table`` reads
them (`treernn.reporting.run_records.load_runs`: finished runs only, metrics as its columns,
accuracies and F1 in %), one sweep directory at a time.

A claim holds one or more comparisons "A is better than B on a table's metric". For each:

- the two means over seeds (A's runs and B's runs of the same sweep), the difference A - B and
  Welch's t 95% interval of it: ``d ± t(0.975, df) * se`` with ``se = sqrt(s_A^2/n_A +
  s_B^2/n_B)`` (sample variances) and the Welch-Satterthwaite ``df``. B may be the trivial trees
  (``trivial:best``: the trivial tree with the highest mean F1 on the same sentences; its value is
  the same in every run, so its variance is 0 and the interval is A's one-sample interval);
- one word, by the rule of ``docs/claims.md``, fixed before the runs it reads: **shown** when
  the interval lies on the claim's side of 0, **not shown** when it lies on the other side,
  **undecided** when it contains 0 or either side has fewer than 2 seeds; then a gap check that
  can only turn shown / not shown into **undecided (gap closing)**: the straight line through
  the gap at the largest complete smaller budget of the same comparison and the gap at the
  budget T (without a smaller budget: the gap at T with the slope of the validation gap over the
  last quarter of T) reaches 0 by 2T (`gap_check`). A sweep below its table's declared
  budget is a **smoke check**, not a verdict. Validation still improving at the end is printed,
  with each model's rise and its standard error over seeds, as information
  (`rise_at_end`).

A comparison may name several tables, in order of preference (ON-LSTM against LSTM on logic:
``logic_onlstm``, at the ON-LSTM paper's width, then ``logic``); it reads the first that has a
sweep with finished runs of both its models. A claim is shown when all its comparisons are, not
shown when any is not, else undecided; a claim with no sweep given says "no run". A metric
written ``parse_f1/layer*`` is the layer whose mean F1 is highest for model A (chosen once over
the row, as the notes' "best layer on average").

A table's sweeps at one budget (``trainer.max_steps``) are read as one when they ran on the same
overrides and no job twice: a model added to a finished comparison by a sweep of its own
(``python train.py -m table=logic model=ordered_memory trainer.max_steps=80000 ...
sweep_id=logic-80k-om`` beside ``logic-80k``'s ON-LSTM and LSTM) is compared with the models
already there, which need not run again.
"""

from __future__ import annotations

import collections
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from treernn.errors import UserError
from treernn.lifecycle.sweeps.layout import sweep_size
from treernn.reporting.curves import run_curve
from treernn.reporting.run_records import (
    IGNORED_OVERRIDES,
    Run,
    config_value,
    is_fraction,
    load_runs,
)

TRIVIAL_BEST = "trivial:best"


@dataclass(frozen=True)
class Comparison:
    """ "``better`` beats ``worse`` on ``metric`` (a ``report table`` column) in a table"."""

    tables: tuple[str, ...]  # table names (conf/table/) whose sweeps hold it, first preferred
    metric: str
    better: str  # a model's name, as its runs' config names it
    worse: str  # a model's name, or TRIVIAL_BEST
    higher_is_better: bool = True

    def __str__(self) -> str:
        sign = ">" if self.higher_is_better else "<"
        worse = "best trivial trees" if self.worse == TRIVIAL_BEST else self.worse
        return f"{self.better} {sign} {worse} on {self.metric}"


@dataclass(frozen=True)
class Claim:
    paper: str
    text: str
    comparisons: tuple[Comparison, ...]
    #: what keeps this reproduction from deciding the paper's claim as the paper states it
    limits: str = ""


def _pair(tables, metric, better, worse, higher=True) -> Comparison:
    return Comparison(tuple(tables), metric, better, worse, higher)


#: The ten comparisons of the three papers, in the papers' order.
CLAIMS: tuple[Claim, ...] = (
    Claim(
        "ON-LSTM Table 1",
        "ON-LSTM language model beats the AWD-LSTM baseline (test perplexity)",
        (_pair(["lm"], "ppl", "onlstm", "lstm", higher=False),),
        "scaled-down widths (embedding 200, hidden 400, not 400 and 1,150) and a budget of "
        "epochs, not the paper's 1,000",
    ),
    Claim(
        "ON-LSTM Table 2",
        "ON-LSTM's induced trees beat the trivial trees (parse F1, best layer)",
        (_pair(["lm"], "parse_f1/layer*", "onlstm", TRIVIAL_BEST),),
        "scaled-down widths; the NLTK WSJ sample lies inside PTB's training text (the paper "
        "scores the WSJ test section)",
    ),
    Claim(
        "ON-LSTM Table 3",
        "Marvin & Linzen: ON-LSTM better on long-term dependencies, LSTM on short-term "
        "(pairs within the PTB vocabulary)",
        (
            _pair(["lm"], "syneval_known/long_term", "onlstm", "lstm"),
            _pair(["lm"], "syneval_known/short_term", "lstm", "onlstm"),
        ),
        "scaled-down widths; Marvin & Linzen pairs restricted to PTB's 10k vocabulary (the "
        "paper's models read a Wikipedia vocabulary)",
    ),
    Claim(
        "ON-LSTM Fig. 3",
        "ON-LSTM beats LSTM on logic at 7-12 operators",
        # the paper's width (table=logic_onlstm) where it ran, else the logic table's
        (_pair(["logic_onlstm", "logic"], "ops7-12", "onlstm", "lstm"),),
        "the paper's width only where table=logic_onlstm ran; fewer updates than the paper",
    ),
    Claim(
        "Ordered Memory Table 1",
        "Ordered Memory beats LSTM on logic at 7-12 operators",
        (_pair(["logic"], "ops7-12", "ordered_memory", "lstm"),),
        "scaled-down widths (embedding and hidden 80, not 200) and budgets",
    ),
    Claim(
        "Ordered Memory Table 1 (Sys. Gen.)",
        "Ordered Memory beats LSTM on systematic generalisation (partitions A, B, C)",
        tuple(_pair(["sysgen"], f"sysgen_{split}", "ordered_memory", "lstm") for split in "ABC"),
        "scaled-down widths (embedding and hidden 80, not 200) and budgets",
    ),
    Claim(
        "Ordered Memory Fig. 3a",
        "Ordered Memory beats LSTM and Transformer on ListOps",
        (
            _pair(["listops"], "acc", "ordered_memory", "lstm"),
            _pair(["listops"], "acc", "ordered_memory", "transformer"),
        ),
        "scaled-down widths (embedding and hidden 64, not 128) and budgets",
    ),
    Claim(
        "Ordered Memory Fig. 3a",
        "Ordered Memory's induced ListOps trees beat the trivial trees",
        (_pair(["listops"], "parse_f1/layer*", "ordered_memory", TRIVIAL_BEST),),
        "scaled-down widths (embedding and hidden 64, not 128) and budgets",
    ),
    Claim(
        "Ordered Memory Table 3",
        "Ordered Memory beats LSTM on SST-2",
        (_pair(["sst2"], "acc", "ordered_memory", "lstm"),),
        "hidden 100 with embeddings trained from scratch (no GloVe; the paper: hidden 300, GloVe)",
    ),
    Claim(
        "Top-down Tree LSTM Tables 1-2",
        "LdTreeLSTM > TD-TreeLSTM > LSTM (EWT: perplexity, completion, reranking)",
        (
            _pair(["tdlm"], "ppl", "ld_treelstm", "td_treelstm", higher=False),
            _pair(["tdlm"], "ppl", "td_treelstm", "lstm", higher=False),
            _pair(["tdlm"], "completion_acc", "ld_treelstm", "td_treelstm"),
            _pair(["tdlm"], "completion_acc", "td_treelstm", "lstm"),
            _pair(["tdlm"], "rerank_uas", "ld_treelstm", "td_treelstm"),
        ),
        "scaled-down widths; UD English-EWT and its stand-ins for the paper's MSR and k-best "
        "sets; the halving rule gives seeds different budgets",
    ),
)


# ----------------------------------------------------------------------------- statistics
@dataclass(frozen=True)
class Interval:
    difference: float
    low: float
    high: float
    df: float | None  # None: both sides without spread, the interval is the difference


def welch_interval(a: Sequence[float], b: Sequence[float], level: float = 0.95) -> Interval:
    """Welch's t interval for mean(a) - mean(b) (each with at least 2 values)."""
    from scipy.stats import t as student_t

    if len(a) < 2 or len(b) < 2:
        raise ValueError(f"Welch's interval needs 2 values a side, got {len(a)} and {len(b)}")
    difference = statistics.fmean(a) - statistics.fmean(b)
    var_a = statistics.variance(a) / len(a)  # sample variance (n - 1) over n
    var_b = statistics.variance(b) / len(b)
    se = math.sqrt(var_a + var_b)
    if se == 0.0:
        return Interval(difference, difference, difference, None)
    df = (var_a + var_b) ** 2 / (var_a**2 / (len(a) - 1) + var_b**2 / (len(b) - 1))
    half = float(student_t.ppf(0.5 + level / 2, df)) * se
    return Interval(difference, difference - half, difference + half, df)


# ----------------------------------------------------------------------------- deciding
SHOWN, NOT_SHOWN, UNDECIDED, NO_RUN = "shown", "not shown", "undecided", "no run"
#: a sweep run below its table's declared budget: it checks that the pipeline runs, it decides
#: nothing
SMOKE = "smoke check"
GAP_CLOSING = "gap closing"


@dataclass(frozen=True)
class GapCheck:
    """Where the claim metric's gap A - B is heading: a straight line through the gap at the
    budget ``budget`` with slope ``slope`` (per update), and whether it reaches 0 by twice the
    budget. ``source`` says where the slope comes from: the gap at a smaller budget ``earlier_at``
    of the same comparison (``earlier``), or the validation gap over the last quarter of the
    budget (``validation``: that metric)."""

    gap: float
    budget: int
    slope: float
    source: str
    earlier_at: int | None = None
    earlier: float | None = None
    validation: str | None = None

    @property
    def at_twice(self) -> float:
        return self.gap + self.slope * self.budget

    @property
    def closing(self) -> bool:
        return line_reaches_zero(self.gap, self.slope, self.budget)

    def describe(self) -> str:
        if self.source == "smaller budget":
            start = (
                f"{self.earlier:+.2f} at {self.earlier_at:,} -> {self.gap:+.2f} at {self.budget:,}"
            )
        else:
            per = self.slope * 1000
            start = f"{self.validation} gap {per:+.3g} per 1,000 updates over the last quarter"
        return f"{start}; on that line {self.at_twice:+.2f} at {2 * self.budget:,}"


def line_reaches_zero(gap: float, slope: float, budget: int) -> bool:
    """Whether the line through ``gap`` at ``budget`` updates with ``slope`` per update reaches 0
    after ``budget`` and by ``2 * budget``: its value at twice the budget is 0 or of the other
    sign. A gap of exactly 0 decides nothing and is left to the interval."""
    if gap == 0.0:
        return False
    return gap * (gap + slope * budget) <= 0.0


def slope_through(points: Sequence[tuple[float, float]]) -> float:
    """The least-squares slope of ``(update, value)`` points (two points: the line through them)."""
    if len(points) < 2:
        raise ValueError(f"a slope needs 2 points, got {len(points)}")
    mean_x = statistics.fmean(x for x, _ in points)
    mean_y = statistics.fmean(y for _, y in points)
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    if spread == 0.0:
        raise ValueError("a slope needs 2 different updates")
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / spread


@dataclass
class Outcome:
    comparison: Comparison
    word: str
    table: str | None = None
    sweep: Sweep | None = None  # the sweep whose runs were compared
    metric: str | None = None  # the column compared (a layer for parse_f1/layer*)
    better: list[float] | None = None
    worse: list[float] | None = None
    interval: Interval | None = None
    reason: str = ""  # why undecided / no run / a smoke check, in a few words
    gap_check: GapCheck | None = None
    #: "still improving" at the end of training, as information: it does not change the word
    improving: list[str] = field(default_factory=list)


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


def _column(runs: Sequence[Run], metric: str, higher: bool) -> str | None:
    if not metric.endswith("*"):
        return metric
    found = {key for run in runs for key in run.values if key.startswith(metric[:-1])}
    if not found:
        return None

    def mean(key: str) -> float:
        return statistics.fmean(run.values[key] for run in runs if key in run.values)

    return max(found, key=mean) if higher else min(found, key=mean)


def _sides(comparison: Comparison, runs: Sequence[Run]) -> tuple[list[Run], list[Run]]:
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
        if all(_sides(comparison, sweep.runs)):
            return sweep
    return candidates[0]


def _values(
    comparison: Comparison, sweep: Sweep, metric: str | None, trivial: str | None = None
) -> tuple[list[float], list[float], str | None]:
    """The claim metric over A's and B's runs of ``sweep``, and the trivial trees compared (the
    best on the same sentences, or ``trivial`` where given)."""
    better_runs, worse_runs = _sides(comparison, sweep.runs)
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


def declared_budget(table: str, config_dir: Path | None = None) -> int | None:
    """The budget a table declares (``trainer.max_steps`` in ``conf/table/<table>.yaml``); None
    where the file or the key is not there (an installed package without the checkout's conf)."""
    import yaml

    path = (config_dir or CONFIG_DIR) / "table" / f"{table}.yaml"
    if not path.is_file():
        return None
    steps = ((yaml.safe_load(path.read_text()) or {}).get("trainer") or {}).get("max_steps")
    return int(steps) if isinstance(steps, int) else None


#: the checkout's config directory, beside src/
CONFIG_DIR = Path(__file__).resolve().parents[3] / "conf"


def gap_check(
    comparison: Comparison,
    candidates: Sequence[Sweep],
    sweep: Sweep,
    metric: str,
    gap: float,
    trivial: str | None,
) -> GapCheck | None:
    """Where the gap at the sweep's budget T is heading (the rule in ``docs/claims.md``): the
    line through the gap at the largest complete smaller budget of the same comparison and the
    gap at T; where no smaller budget ran both models, the gap at T with the slope of the
    validation gap over the last quarter of T. None where neither can be read."""
    budget = sweep.budget
    if budget is None:
        return None
    smaller = [
        other
        for other in candidates
        if other.complete
        and other.budget is not None
        and other.budget < budget
        and all(_sides(comparison, other.runs))
    ]
    for other in sorted(smaller, key=lambda other: other.budget or 0, reverse=True):
        better, worse, _ = _values(comparison, other, metric, trivial)
        if better and worse:
            earlier = statistics.fmean(better) - statistics.fmean(worse)
            slope = (gap - earlier) / (budget - other.budget)
            return GapCheck(gap, budget, slope, "smaller budget", other.budget, earlier)
    return _validation_gap_check(comparison, sweep, metric, gap)


def _validation_metric(comparison: Comparison, runs: Sequence[Run], metric: str) -> str | None:
    """The validation column that follows the claim metric: ``val/<metric>`` where the runs
    logged it (parse F1 by layer, perplexity), else the task's monitor where it points the same
    way (an accuracy the claim's subset or partition is part of)."""
    own = f"val/{metric}"
    if all(run_curve(run.path, own) for run in runs):
        return own
    task = runs[0].config.get("task") or {}
    monitor = str(task.get("monitor") or "")
    higher = task.get("mode") != "min"
    if monitor and higher == comparison.higher_is_better:
        return monitor
    return None


def _validation_gap_check(
    comparison: Comparison, sweep: Sweep, metric: str, gap: float
) -> GapCheck | None:
    budget = sweep.budget
    better_runs, worse_runs = _sides(comparison, sweep.runs)
    better_runs = [run for run in better_runs if metric in run.values]
    worse_runs = [run for run in worse_runs if metric in run.values]
    trivial = comparison.worse == TRIVIAL_BEST
    validation = _validation_metric(comparison, better_runs + worse_runs, metric)
    if validation is None or budget is None:
        return None
    scale = 100.0 if is_fraction(validation) else 1.0

    def mean_curve(runs: Sequence[Run]) -> dict[int, float]:
        curves = _to_the_budget([run_curve(run.path, validation) for run in runs], budget)
        steps = sorted({step for curve in curves for step in curve})
        return {
            step: scale * statistics.fmean(curve[step] for curve in curves if step in curve)
            for step in steps
        }

    better = mean_curve(better_runs)
    # the trivial trees are the same at every update: the gap moves with A alone
    worse = {step: 0.0 for step in better} if trivial else mean_curve(worse_runs)
    steps = sorted(set(better) & set(worse))
    if len(steps) < 2:
        return None
    # validations after 3T/4 updates (the csv logger writes one after n updates at step n - 1)
    quarter = [step for step in steps if step + 1 >= 0.75 * budget] or steps[-2:]
    if len(quarter) < 2:
        quarter = steps[-2:]
    slope = slope_through([(step + 1, better[step] - worse[step]) for step in quarter])
    return GapCheck(gap, budget, slope, "validation", validation=validation)


def decide(
    comparison: Comparison,
    sweeps: Mapping[str, Sequence[Sweep]],
    config_dir: Path | None = None,
) -> Outcome:
    """The outcome of one comparison from each table's sweeps (see the module docstring)."""
    tables = [name for name in comparison.tables if sweeps.get(name)]
    if not tables:
        return Outcome(comparison, NO_RUN, reason=f"no sweep of table {comparison.tables[0]}")
    # the first table, in the comparison's order, with a sweep that ran both models
    table = next(
        (
            name
            for name in tables
            if any(all(_sides(comparison, sweep.runs)) for sweep in sweeps[name])
        ),
        tables[0],
    )
    sweep = choose_sweep(comparison, sweeps[table])
    better_runs, worse_runs = _sides(comparison, sweep.runs)
    outcome = Outcome(comparison, NO_RUN, table, sweep)
    sides = ((comparison.better, better_runs), (comparison.worse, worse_runs))
    missing = [model for model, model_runs in sides if not model_runs]
    if missing:
        outcome.reason = f"no finished run of {', '.join(missing)} in table {table}"
        return outcome
    metric = _column(better_runs, comparison.metric, comparison.higher_is_better)
    outcome.metric = metric
    better, worse, trivial = _values(comparison, sweep, metric)
    if trivial is not None or comparison.worse == TRIVIAL_BEST:
        outcome.metric = f"{metric} vs {trivial}"
    outcome.better, outcome.worse = better, worse
    if not better or not worse:
        outcome.reason = f"no {comparison.metric} in the runs of table {table}"
        return outcome
    # the runs that gave the numbers (of a systematic-generalisation partition: that partition's)
    compared = {comparison.better: [run for run in better_runs if metric in run.values]}
    if comparison.worse != TRIVIAL_BEST:
        compared[comparison.worse] = [run for run in worse_runs if metric in run.values]
    for model, model_runs in compared.items():
        rise = rise_at_end(model_runs)
        if rise is not None:
            outcome.improving.append(describe_rise(model, rise[0], rise[3]))
    declared = declared_budget(table, config_dir)
    smoke = ""
    if declared is not None and sweep.budget is not None and sweep.budget < declared:
        smoke = f"{sweep.budget:,} updates, below table {table}'s declared {declared:,}"
    if len(better) < 2 or len(worse) < 2:
        outcome.word, outcome.reason = (
            (SMOKE, smoke) if smoke else (UNDECIDED, "fewer than 2 seeds")
        )
        return outcome
    interval = welch_interval(better, worse)
    outcome.interval = interval
    if smoke:
        outcome.word, outcome.reason = SMOKE, smoke
        return outcome
    # where the gap is heading, printed for every comparison; it decides only a shown / not shown
    check = gap_check(comparison, sweeps[table], sweep, metric, interval.difference, trivial)
    outcome.gap_check = check
    # the claim's side: A - B > 0 where higher is better, < 0 where lower is
    sign = 1.0 if comparison.higher_is_better else -1.0
    low, high = sorted((sign * interval.low, sign * interval.high))
    if low <= 0 <= high:
        outcome.word, outcome.reason = UNDECIDED, "the interval contains 0"
    elif check is not None and check.closing:
        outcome.word, outcome.reason = UNDECIDED, GAP_CLOSING
    else:
        outcome.word = SHOWN if low > 0 else NOT_SHOWN
    return outcome


def claim_word(outcomes: Sequence[Outcome]) -> str:
    words = [outcome.word for outcome in outcomes]
    if NOT_SHOWN in words:
        return NOT_SHOWN
    if all(word == SHOWN for word in words):
        return SHOWN
    if all(word == NO_RUN for word in words):
        return NO_RUN
    if all(word in (SMOKE, NO_RUN) for word in words):
        return SMOKE
    return UNDECIDED


# ----------------------------------------------------------------------------- reading sweeps
def _budget(runs: Sequence[Run]) -> int | None:
    """The most updates any run of a sweep was given (``trainer.max_steps``), None where unset."""
    steps = [config_value(run.config, "trainer.max_steps") for run in runs]
    steps = [int(value) for value in steps if isinstance(value, int) and value > 0]
    return max(steps) if steps else None


def _updates(budget: int | None) -> str:
    return f"{budget:,} updates" if budget else "no trainer.max_steps"


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
    budget: int | None
    finished: int  # the sweeps' finished runs, of every table
    size: int | None  # jobs the sweeps' commands make, None where unknown

    @property
    def path(self) -> Path:
        return self.paths[0]

    @property
    def complete(self) -> bool:
        return self.size is None or self.finished >= self.size

    def describe(self) -> str:
        jobs = f", {self.finished} of {self.size} jobs finished" if self.size else ""
        where = " + ".join(map(str, self.paths))
        return f"{where} ({_updates(self.budget)}{jobs})"

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
            sweep = Sweep((path,), table_runs, _budget(table_runs), len(runs), size)
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
        by_budget: dict[int | None, Sweep] = {}
        for sweep in candidates:
            first = by_budget.get(sweep.budget)
            by_budget[sweep.budget] = sweep if first is None else first.joined(sweep, name)
        # the largest budget first; an unset budget counts as 0
        ranked = sorted(by_budget.values(), key=lambda sweep: sweep.budget or 0, reverse=True)
        sweeps[name] = sorted(ranked, key=lambda sweep: not sweep.complete)  # a stable sort
    return sweeps


def reading_notes(
    decided: Sequence[tuple[Claim, str, list[Outcome]]], sweeps: Mapping[str, Sequence[Sweep]]
) -> list[str]:
    """For each table given several sweeps (or sweeps read as one): which claims read which
    sweep, and the sweeps no claim read."""
    notes = []
    for table, candidates in sweeps.items():
        if len(candidates) < 2 and len(candidates[0].paths) < 2:
            continue
        readers: dict[Path, list[str]] = {sweep.path: [] for sweep in candidates}
        for number, (_, _, outcomes) in enumerate(decided, start=1):
            for outcome in outcomes:
                if outcome.table == table and outcome.sweep is not None:
                    claims = readers[outcome.sweep.path]
                    if str(number) not in claims:
                        claims.append(str(number))
        parts = [
            f"claim{'s' if len(readers[sweep.path]) > 1 else ''} "
            f"{', '.join(readers[sweep.path])} read {sweep.describe()}"
            for sweep in candidates
            if readers[sweep.path]
        ]
        parts += [f"not {sweep.describe()}" for sweep in candidates if not readers[sweep.path]]
        notes.append(
            f"Several sweeps of table {table}, each comparison reading the largest budget with "
            f"every job finished that ran both its models: {'; '.join(parts)}"
        )
    return notes


def decide_claims(
    sweeps: Mapping[str, Sequence[Sweep]], claims: Sequence[Claim] = CLAIMS
) -> list[tuple[Claim, str, list[Outcome]]]:
    decided = []
    for claim in claims:
        outcomes = [decide(comparison, sweeps) for comparison in claim.comparisons]
        decided.append((claim, claim_word(outcomes), outcomes))
    return decided


# ----------------------------------------------------------------------------- output
def _mean(values: Sequence[float] | None) -> str:
    if not values:
        return "-"
    text = f"{statistics.fmean(values):.2f}"
    if len(values) > 1:
        text += f" ± {statistics.stdev(values):.2f}"
    return f"{text} (n={len(values)})"


def runs_read(decided: Sequence[tuple[Claim, str, list[Outcome]]]) -> dict[str, list[Run]]:
    """Table -> the runs of the sweeps its comparisons read, each sweep once."""
    read: dict[str, dict[Path, Sweep]] = {}
    for _, _, outcomes in decided:
        for outcome in outcomes:
            if outcome.table is not None and outcome.sweep is not None:
                read.setdefault(outcome.table, {})[outcome.sweep.path] = outcome.sweep
    return {
        table: [run for sweep in by_path.values() for run in sweep.runs]
        for table, by_path in read.items()
    }


def machines_line(runs_by_table: Mapping[str, Sequence[Run]]) -> str:
    """Which machines (and commits) the runs of each table ran on (their status.json records):
    sweeps kept across machines may mix CPUs, whose GEMM backends round differently."""
    parts = []
    for table, runs in sorted(runs_by_table.items()):
        counts = collections.Counter(" + ".join(dict.fromkeys(run.machines)) or "?" for run in runs)
        where = ", ".join(f"{count} on {machine}" for machine, count in sorted(counts.items()))
        parts.append(f"{table}: {where}")
    return "Runs: " + "; ".join(parts) + "."


def to_markdown(
    decided: Sequence[tuple[Claim, str, list[Outcome]]],
    machines: bool = False,
    details: bool = True,
) -> str:
    """One table: a row per comparison, the claim and its word on its first row; with
    ``details``, the comparisons still improving at the end and each claim's limits under it;
    with ``machines``, a line saying which machines the runs read of each table ran on."""
    header = ["#", "claim", "result", "comparison", "A", "B", "A - B", "95% interval", "gap trend"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for number, (claim, word, outcomes) in enumerate(decided, start=1):
        for index, outcome in enumerate(outcomes):
            first = index == 0
            interval, metric = outcome.interval, outcome.comparison.metric
            check = outcome.gap_check
            cells = [
                str(number) if first else "",
                f"{claim.text} ({claim.paper})" if first else "",
                f"**{word}**" if first else "",
                str(outcome.comparison)
                + (f" [{outcome.metric}]" if outcome.metric not in (None, metric) else "")
                + f": {outcome.word}"
                + (f" ({outcome.reason})" if outcome.reason else ""),
                _mean(outcome.better),
                _mean(outcome.worse),
                f"{interval.difference:+.2f}" if interval else "-",
                f"[{interval.low:+.2f}, {interval.high:+.2f}]" if interval else "-",
                check.describe() if check else "-",
            ]
            lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "A, B: mean ± sample std over seeds (accuracy and F1 in %); interval: Welch's t 95% "
        "interval of A - B at the sweep's budget T; shown / not shown: the interval lies on the "
        "claim's / the other side of 0; undecided: it contains 0, fewer than 2 seeds, or the gap "
        "closing (the gap trend's line reaches 0 by 2T); smoke check: a sweep below its table's "
        "declared budget, not a verdict (docs/claims.md).",
    ]
    if details:
        improving = [
            f"- claim {number}, {outcome.comparison}: {'; '.join(outcome.improving)}"
            for number, (_, _, outcomes) in enumerate(decided, start=1)
            for outcome in outcomes
            if outcome.improving
        ]
        if improving:
            lines += [
                "",
                "Still improving at the last validation (the rise over the best earlier mean; "
                "information, not part of the verdict):",
                "",
                *improving,
            ]
        limits = [
            f"- claim {number}: {claim.limits}"
            for number, (claim, _, _) in enumerate(decided, start=1)
            if claim.limits
        ]
        lines += ["", "What limits each claim here:", "", *limits]
    read = runs_read(decided) if machines else {}
    if read:
        lines += ["", machines_line(read)]
    return "\n".join(lines) + "\n"
