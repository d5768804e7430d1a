"""A claim's plan, fixed before its runs: what decides it, as data in ``results/plans/``.

A plan (``results/plans/claim-<NN>.yaml``, one per claim, read by `load_plans`) says

- which comparisons of the claim it decides (``comparisons``: their positions in the claim,
  from 0; all where absent), on which table and metric (the claim's, `catalogue.CLAIMS`);
- the budget T (``budget``: ``max_steps`` or ``max_epochs``), the seeds of each side
  (``seeds``), the other overrides of the sweep's command (``overrides``) and its name
  (``sweep``: its directory is ``results/tables/<table>/<sweep>``): `command` is the
  command that runs it;
- alpha (two-sided, across the report's comparisons with Holm's correction), the smallest
  effect of interest and the power the seeds were chosen for, with the spread and the sweep it
  was read from (``power_analysis``);
- where "no difference" is a possible answer, the equivalence margin of a comparison
  (``equivalence_margins``: position -> margin, decided by two one-sided tests);
- an earlier budget for the trend check, if any (``earlier``: a planned sweep of the same
  recipe at a smaller budget);
- whether the planned sweep is read together with kept sweeps of the same terms (``pool_kept``:
  a verdict from jobs that started before the plan is post hoc);
- what it costs (``estimate``: CPU core-hours from the kept runs' timings), whether it is run
  here (``run``) and, where it is not, what it would need (``needs``).

A plan is fixed when it is committed: `fixed_at` reads the time of the last commit that
changed what it decides (a plan whose deciding keys were edited after its sweep started no longer
precedes it), and a verdict is a planned one only where every job of the sweep it reads started
after that time. The keys that only describe (`AMENDABLE`: the title, the power analysis's words,
the estimate, what it would need, why) may be amended later, as a pre-registration may be
amended in the open: `history` says when and which. `seeds_for`
and `core_hours` give a new plan its seeds and cost from kept sweeps (``python -m treernn
report plan``).

Nothing here imports torch or Lightning.
"""

from __future__ import annotations

import datetime as dt
import math
import statistics
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from treernn.errors import UserError
from treernn.reporting.claims.catalogue import CLAIMS, TRIVIAL_BEST, Claim

#: where the plans are kept, beside the results they decide
PLANS_DIR = Path(__file__).resolve().parents[4] / "results" / "plans"
#: the budget keys a plan may fix (``trainer.<key>``)
BUDGET_KEYS = ("max_steps", "max_epochs")
#: the keys of a plan file
KEYS = {
    "claim", "title", "table", "sweep", "budget", "seeds", "overrides", "comparisons", "alpha",
    "smallest_effect", "power", "power_analysis", "equivalence_margins", "earlier", "estimate",
    "run", "needs", "why", "pool_kept",
}  # fmt: skip
#: keys that describe a plan and decide nothing: an amendment of these after its sweep started
#: keeps its verdicts planned (every other key, changed, fixes the plan again)
AMENDABLE = frozenset({"title", "power_analysis", "estimate", "needs", "why"})


class PlanError(UserError):
    """A plan file that cannot be read as a plan: one line naming the file and the key."""


@dataclass(frozen=True)
class Plan:
    """One claim's plan (module docstring)."""

    path: Path
    claim: int
    table: str
    sweep: str
    budget: tuple[str, int]
    seeds: tuple[int, ...]
    overrides: tuple[str, ...] = ()
    comparisons: tuple[int, ...] | None = None
    alpha: float = 0.05
    smallest_effect: float | None = None
    #: a comparison's own smallest effect where the claim's comparisons differ in their metrics
    effects: Mapping[int, float] = field(default_factory=dict)
    power: float = 0.8
    equivalence_margins: Mapping[int, float] = field(default_factory=dict)
    earlier: tuple[str, tuple[str, int]] | None = None
    run: bool = True
    needs: str = ""
    raw: Mapping[str, Any] = field(default_factory=dict)

    @property
    def claim_of(self) -> Claim:
        return CLAIMS[self.claim - 1]

    def effect_of(self, index: int) -> float | None:
        """The smallest effect of interest of the claim's comparison at ``index``."""
        return self.effects.get(index, self.smallest_effect)

    def decides(self, index: int) -> bool:
        """Whether this plan decides the claim's comparison at ``index``."""
        return self.comparisons is None or index in self.comparisons

    def command(self) -> list[str]:
        """The overrides of ``python train.py -m`` that run the plan's sweep."""
        key, value = self.budget
        return [
            f"table={self.table}",
            *self.overrides,
            f"trainer.{key}={value}",
            f"seed={','.join(map(str, self.seeds))}",
            f"sweep_id={self.sweep}",
        ]


def _fail(path: Path, what: str) -> PlanError:
    return PlanError(f"{path}: {what}; a plan's keys are described in docs/claims.md")


def _int(path: Path, value: Any, key: str, low: int = 0) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise _fail(path, f"{key} is {value!r}, not a whole number from {low}")
    return value


def _number(path: Path, value: Any, key: str, low: float, high: float = math.inf) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not low < value < high:
        raise _fail(path, f"{key} is {value!r}, not a number between {low} and {high}")
    return float(value)


def _budget(path: Path, value: Any, key: str) -> tuple[str, int]:
    if not isinstance(value, dict) or len(value) != 1 or next(iter(value)) not in BUDGET_KEYS:
        raise _fail(path, f"{key} is {value!r}, not one of {{max_steps: N}} or {{max_epochs: N}}")
    name, number = next(iter(value.items()))
    return name, _int(path, number, f"{key}.{name}", 1)


def read_plan(path: str | Path) -> Plan:
    """A plan file, checked (`PlanError` names the key that is wrong)."""
    import yaml

    from treernn.lifecycle.records import read_text

    path = Path(path)
    try:
        data = yaml.safe_load(read_text(path, "restore it from git"))
    except yaml.YAMLError as error:
        raise _fail(path, f"not valid YAML ({str(error).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise _fail(path, "not a mapping of plan keys")
    unknown = sorted(set(map(str, data)) - KEYS)
    if unknown:
        raise _fail(path, f"unknown keys {', '.join(unknown)}")
    claim = _int(path, data.get("claim"), "claim", 1)
    if claim > len(CLAIMS):
        raise _fail(path, f"claim {claim}: the report has claims 1 to {len(CLAIMS)}")
    comparisons_of = CLAIMS[claim - 1].comparisons
    table = data.get("table")
    if table not in {name for comparison in comparisons_of for name in comparison.tables}:
        raise _fail(path, f"table {table!r} is not a table of claim {claim}")
    sweep = data.get("sweep")
    if not isinstance(sweep, str) or not sweep or "/" in sweep or sweep.startswith("."):
        raise _fail(path, f"sweep {sweep!r} is not a sweep's name")
    seeds = data.get("seeds")
    if not isinstance(seeds, list) or len(seeds) < 2:
        raise _fail(path, "seeds is not a list of at least 2 seeds")
    seeds = tuple(_int(path, seed, "seeds[]") for seed in seeds)
    if len(set(seeds)) != len(seeds):
        raise _fail(path, "seeds repeats a seed")
    overrides = data.get("overrides") or []
    if not isinstance(overrides, list) or not all(isinstance(o, str) for o in overrides):
        raise _fail(path, "overrides is not a list of key=value strings")
    fixed = {"table", "seed", "sweep_id", *(f"trainer.{key}" for key in BUDGET_KEYS)}
    for override in overrides:
        key = override.split("=", 1)[0].lstrip("+~")
        if key in fixed:
            raise _fail(path, f"overrides sets {key}, which the plan's own keys set")
    comparisons = data.get("comparisons")
    if comparisons is not None:
        if not isinstance(comparisons, list) or not comparisons:
            raise _fail(path, "comparisons is not a list of the claim's comparisons (from 0)")
        comparisons = tuple(_int(path, index, "comparisons[]") for index in comparisons)
        if max(comparisons) >= len(comparisons_of):
            raise _fail(path, f"claim {claim} has comparisons 0 to {len(comparisons_of) - 1}")
    margins = data.get("equivalence_margins") or {}
    if not isinstance(margins, dict):
        raise _fail(path, "equivalence_margins is not a map of comparison -> margin")
    margins = {
        _int(path, index, "equivalence_margins key"): _number(
            path, margin, f"equivalence_margins.{index}", 0.0
        )
        for index, margin in margins.items()
    }
    earlier = data.get("earlier")
    if earlier is not None:
        if not isinstance(earlier, dict) or set(earlier) != {"sweep", "budget"}:
            raise _fail(path, "earlier is not {sweep: <name>, budget: {max_steps: N}}")
        earlier = (str(earlier["sweep"]), _budget(path, earlier["budget"], "earlier.budget"))
    smallest = data.get("smallest_effect")
    effects = {}
    if isinstance(smallest, dict):
        effects = {
            _int(path, index, "smallest_effect key"): _number(
                path, value, f"smallest_effect.{index}", 0.0
            )
            for index, value in smallest.items()
        }
        smallest = None
    if not isinstance(data.get("pool_kept", False), bool):
        raise _fail(path, f"pool_kept is {data['pool_kept']!r}, not true or false")
    run = data.get("run", True)
    if not isinstance(run, bool):
        raise _fail(path, f"run is {run!r}, not true or false")
    return Plan(
        path=path,
        claim=claim,
        table=str(table),
        sweep=sweep,
        budget=_budget(path, data.get("budget"), "budget"),
        seeds=seeds,
        overrides=tuple(overrides),
        comparisons=comparisons,
        alpha=_number(path, data.get("alpha", 0.05), "alpha", 0.0, 1.0),
        smallest_effect=None if smallest is None else _number(path, smallest, "smallest_effect", 0),
        effects=effects,
        power=_number(path, data.get("power", 0.8), "power", 0.0, 1.0),
        equivalence_margins=margins,
        earlier=earlier,
        run=run,
        needs=str(data.get("needs") or ""),
        raw=data,
    )


def load_plans(directory: str | Path | None = None) -> dict[int, Plan]:
    """Claim number -> its plan, from ``claim-*.yaml`` in ``directory`` (default `PLANS_DIR`;
    none where it does not exist: an installed package without the checkout's results)."""
    folder = Path(directory) if directory is not None else PLANS_DIR
    plans: dict[int, Plan] = {}
    for path in sorted(folder.glob("claim-*.yaml")) if folder.is_dir() else []:
        plan = read_plan(path)
        if plan.claim in plans:
            raise _fail(
                path, f"a second plan of claim {plan.claim} (beside {plans[plan.claim].path})"
            )
        plans[plan.claim] = plan
    return plans


@dataclass(frozen=True)
class History:
    """When a committed plan was fixed, and the amendments since: commits that changed only
    `AMENDABLE` keys, newest first, each with the keys it changed."""

    fixed: dt.datetime
    commit: str
    amended: tuple[tuple[dt.datetime, str, tuple[str, ...]], ...] = ()


def _git(folder: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", *args], cwd=folder, capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def _version(folder: Path, commit: str, name: str) -> dict[str, Any] | None:
    import yaml

    text = _git(folder, "show", f"{commit}:./{name}")
    try:
        data = yaml.safe_load(text) if text is not None else None
    except yaml.YAMLError:
        return None
    return data if isinstance(data, dict) else None


def history(path: Path) -> History | None:
    """The plan at ``path``'s `History`: fixed by the oldest commit from which its deciding keys
    (all but `AMENDABLE`) are as they stand. None where it has no commit, differs from its last
    commit (edited since, whichever key) or git cannot tell (no repository: an installed
    package)."""
    folder = path.resolve().parent
    status = _git(folder, "status", "--porcelain", "--", path.name)
    log = _git(folder, "log", "--format=%H %cI", "--", path.name)
    if status is None or status.strip() or not log:
        return None
    commits = [line.split(" ", 1) for line in log.splitlines() if line.strip()]
    versions = [_version(folder, commit, path.name) for commit, _ in commits]
    if versions[0] is None:
        return None

    def deciding(data: Mapping[str, Any]) -> dict[str, Any]:
        return {key: value for key, value in data.items() if key not in AMENDABLE}

    now = deciding(versions[0])
    oldest = 0
    while (
        oldest + 1 < len(commits)
        and versions[oldest + 1] is not None
        and deciding(versions[oldest + 1]) == now
    ):
        oldest += 1
    amended = []
    for index in range(oldest):
        after, before = versions[index], versions[index + 1] or {}
        keys = sorted(key for key in set(after) | set(before) if after.get(key) != before.get(key))
        if keys:
            amended.append((dt.datetime.fromisoformat(commits[index][1]), commits[index][0],
                            tuple(keys)))  # fmt: skip
    commit, when = commits[oldest]
    return History(dt.datetime.fromisoformat(when), commit, tuple(amended))


def fixed_at(path: Path) -> dt.datetime | None:
    """When the plan at ``path`` was fixed (`history`), None where it is not."""
    found = history(path)
    return found.fixed if found else None


def started_before(start: str | None, fixed: dt.datetime) -> bool:
    """Whether a job's recorded start (``status.json``'s ``started``: local time, as the run
    wrote it) is not after ``fixed``; a job without one counts as started before."""
    if not start:
        return True
    when = dt.datetime.fromisoformat(start)
    if when.tzinfo is None:
        when = when.astimezone()  # the machine's local time zone, as records.now() wrote it
    return when <= fixed


# ----------------------------------------------------------------------------- writing a plan
def tost_power(margin: float, sd_a: float, sd_b: float, n: int, alpha: float) -> float | None:
    """The chance that two one-sided tests at ``alpha`` show equivalence within ``margin`` when
    the true difference is 0 (``n`` seeds a side): ``P1 + P2 - 1``, a lower bound of both
    rejecting, from the noncentral t (Welch's df)."""
    from scipy import stats

    var_a, var_b = sd_a**2 / n, sd_b**2 / n
    se = math.sqrt(var_a + var_b)
    if se == 0.0 or n < 2:
        return None
    df = (var_a + var_b) ** 2 / ((var_a**2 + var_b**2) / (n - 1.0))
    critical = float(stats.t.ppf(1.0 - alpha, df))
    one = float(stats.nct.sf(critical, df, margin / se))
    return max(0.0, 2.0 * one - 1.0)


def family_size() -> int:
    """The number of comparisons in the report: Holm's correction runs across them, and a plan's
    power analysis assumes its strictest step, alpha over this number (Bonferroni)."""
    return sum(len(claim.comparisons) for claim in CLAIMS)


@dataclass(frozen=True)
class Spread:
    """A comparison's sides as kept runs show them: values per side, where they came from."""

    index: int
    better: list[float]
    worse: list[float]
    source: str

    @property
    def sds(self) -> tuple[float, float]:
        def sd(values: list[float]) -> float:
            return statistics.stdev(values) if len(values) > 1 else 0.0

        return sd(self.better), sd(self.worse)


def seeds_for(
    claim: Claim,
    spreads: Sequence[Spread],
    effects: Mapping[int, float],
    margins: Mapping[int, float],
    alpha: float,
    target: float,
    most: int = 200,
) -> tuple[int | None, list[str]]:
    """The seeds a side that give each comparison the ``target`` power at ``alpha`` over the
    report's family (Bonferroni's bound of Holm): to detect its smallest effect (``effects``, by
    the comparison's position), or to show
    equivalence within its margin where it has one; the largest over the comparisons, and a line
    per comparison saying how it was reached. None where a spread is unknown or even ``most``
    seeds fall short."""
    from treernn.reporting.claims.statistics import seeds_needed

    strict = alpha / family_size()
    needed: list[int | None] = []
    lines = []
    for spread in spreads:
        comparison = claim.comparisons[spread.index]
        sd_a, sd_b = spread.sds
        constant = comparison.worse == TRIVIAL_BEST
        if spread.index in margins:
            margin = margins[spread.index]
            n = next(
                (
                    size
                    for size in range(2, most + 1)
                    if (tost_power(margin, sd_a, sd_b, size, strict) or 0.0) >= target
                ),
                None,
            )
            goal = f"equivalence within +-{margin:g} (two one-sided tests)"
        else:
            effect = effects.get(spread.index)
            if effect is None:
                raise UserError(f"{comparison}: give its smallest effect of interest (--effect)")
            n = seeds_needed(effect, sd_a, sd_b, strict, target, constant, most)
            goal = f"a difference of {effect:g}"
        needed.append(n)
        lines.append(
            f"{comparison}: sd {sd_a:.3g} and {sd_b:.3g} ({spread.source}); {n or f'over {most}'} "
            f"seeds a side for {target:.0%} power to detect {goal} at alpha {alpha:g}/"
            f"{family_size()} = {strict:.2g}"
        )
    if any(n is None for n in needed):
        return None, lines
    return max(n for n in needed if n is not None), lines


def core_hours(
    runs_by_model: Mapping[str, Sequence[Any]], budget: tuple[str, int]
) -> tuple[dict[str, float], str]:
    """CPU core-hours a job of each model takes at ``budget``, scaled by the budget's ratio: the
    median over the kept runs of the CPU time their attempts recorded (`records.cpu_hours`,
    resumed runs included), or, for a run that recorded none, its wall time from start to end
    times its threads where it ran in one attempt (one machine record; a resumed run's wall time
    holds the gaps between its attempts, and it is left out)."""
    from treernn.lifecycle.records import cpu_hours, read_status

    hours: dict[str, float] = {}
    used = []
    for model, runs in runs_by_model.items():
        samples, recorded = [], 0
        for run in runs:
            record = read_status(run.path)
            trainer = run.config.get("trainer") or {}
            kept = trainer.get(budget[0])
            if not isinstance(kept, int) or kept <= 0 or not record.get("ended"):
                continue
            spent, missing = cpu_hours(record)
            machines = record.get("machines") or []
            if machines and not missing:
                samples.append(spent * budget[1] / kept)
                recorded += 1
            elif len(machines) == 1 and record.get("started"):
                start = dt.datetime.fromisoformat(record["started"])
                end = dt.datetime.fromisoformat(record["ended"])
                threads = run.config.get("threads") or 1
                samples.append((end - start).total_seconds() / 3600 * budget[1] / kept * threads)
        if samples:
            hours[model] = statistics.median(samples)
            counted = [f"{recorded} recorded CPU time"] if recorded else []
            if len(samples) > recorded:
                counted.append(f"{len(samples) - recorded} in one attempt")
            used.append(f"{model}: {', '.join(counted)}")
    return hours, "median of kept runs (" + "; ".join(used) + ")"


def achieved(
    claim: Claim,
    spreads: Sequence[Spread],
    effects: Mapping[int, float],
    margins: Mapping[int, float],
    alpha: float,
    count: int,
) -> list[str]:
    """What ``count`` seeds a side give each comparison (the seeds were chosen otherwise: a
    sweep shared with another claim's plan, a budget)."""
    from treernn.reporting.claims.statistics import power

    strict = alpha / family_size()
    lines = []
    for spread in spreads:
        comparison = claim.comparisons[spread.index]
        sd_a, sd_b = spread.sds
        if spread.index in margins:
            value = tost_power(margins[spread.index], sd_a, sd_b, count, strict)
            goal = f"equivalence within +-{margins[spread.index]:g}"
        else:
            constant = comparison.worse == TRIVIAL_BEST
            effect = effects.get(spread.index, 0.0)
            value = power(effect, sd_a, sd_b, count, strict, constant)
            goal = f"a difference of {effect:g}"
        shown = "unknown" if value is None else f"{value:.0%}"
        lines.append(f"{comparison}: {count} seeds a side are run: power {shown} for {goal}")
    return lines


def _effects_entry(effects: Mapping[int, float], decided: Sequence[int]) -> Any:
    """A plan's ``smallest_effect``: one number where every comparison it decides has the same,
    else a map of positions to numbers (None where no comparison has one: margins only)."""
    values = {effects[index] for index in decided if index in effects}
    if not values:
        return None
    if len(values) == 1 and all(index in effects for index in decided):
        return values.pop()
    return {index: effects[index] for index in decided if index in effects}


def write_plan(
    *,
    claim: int,
    table: str | None,
    sweep: str,
    budget: tuple[str, int],
    effects: Mapping[int, float],
    margins: Mapping[int, float],
    comparisons: Sequence[int] | None,
    power: float,
    alpha: float,
    first_seed: int,
    seeds: int | None,
    spread_from: Sequence[Path],
    spread: tuple[float, float, str] | None = None,
    overrides: Sequence[str],
    run: bool,
    needs: str,
    why: str,
    pool_kept: bool = False,
) -> str:
    """A plan file's text: the seeds from `seeds_for` at the spread of the kept sweeps
    ``spread_from`` (each decided comparison read where `report claims` reads it: the largest
    complete budget that ran both models), the cost from `core_hours` (jobs per seed as in the
    kept sweep: a sweep over partitions runs one job per partition), checked by `read_plan`."""
    import yaml

    from treernn.reporting.claims.sweeps import choose_sweep, column_of, load_sweeps, values_of

    if not 1 <= claim <= len(CLAIMS):
        raise UserError(f"--claim {claim}: the report has claims 1 to {len(CLAIMS)}")
    entry = CLAIMS[claim - 1]
    table = table or entry.comparisons[0].tables[0]
    decided = list(comparisons) if comparisons is not None else list(range(len(entry.comparisons)))
    kept = load_sweeps(spread_from).get(table) if spread_from else None
    if not kept:
        raise UserError(f"--spread-from: no finished run of table {table} in the sweeps given")
    spreads = []
    for index in decided if spread is None else []:
        comparison = entry.comparisons[index]
        read = choose_sweep(comparison, kept)
        better_runs = [run for run in read.runs if run.model == comparison.better]
        metric = column_of(better_runs, comparison.metric, comparison.higher_is_better)
        better, worse, _ = values_of(comparison, read, metric)
        if len(better) < 2 or len(worse) < 2:
            raise UserError(
                f"--spread-from: {read.describe()} has fewer than 2 seeds of {comparison}"
            )
        spreads.append(Spread(index, better, worse, f"{read.path.name}, {len(better)} seeds"))
    if spread is not None:  # standard deviations from elsewhere (another paper's seeds)
        sd_a, sd_b, source = spread
        spreads = [Spread(index, [0.0, sd_a * math.sqrt(2)], [0.0, sd_b * math.sqrt(2)], source)
                   for index in decided]  # fmt: skip
    needed, lines = seeds_for(entry, spreads, effects, margins, alpha, power)
    # a plan not run here may say that no affordable number of seeds reaches the power asked
    count = seeds or needed or (None if run else 200)
    if count is None:
        raise UserError(
            "the power analysis finds no number of seeds up to 200 that reaches the power asked: "
            "give --seeds and say so in --why, or a larger --effect"
        )
    models = sorted({c.better for c in entry.comparisons} | {c.worse for c in entry.comparisons})
    models = [model for model in models if model != TRIVIAL_BEST]
    by_model = {
        model: [run for sweep in kept for run in sweep.runs if run.model == model]
        for model in models
    }
    hours, how = core_hours(by_model, budget)
    # jobs a seed of each model makes (a sweep over partitions: one a partition), as in the
    # largest complete kept sweep
    source = kept[0]
    per_seed = {}
    for model in models:
        runs = [run for run in source.runs if run.model == model]
        per_seed[model] = len(runs) / max(1, len({run.seed for run in runs}))
    total = sum(hours.get(model, 0.0) * per_seed.get(model, 1.0) * count for model in models)
    plan: dict[str, Any] = {
        "claim": claim,
        "title": entry.text,
        "table": table,
        "sweep": sweep,
        "budget": {budget[0]: budget[1]},
        "seeds": list(range(first_seed, first_seed + count)),
        "overrides": list(overrides),
    }
    if comparisons is not None:
        plan["comparisons"] = list(comparisons)
    plan.update(
        {
            "alpha": alpha,
            "smallest_effect": _effects_entry(effects, decided),
            "power": power,
            "power_analysis": lines
            + (achieved(entry, spreads, effects, margins, alpha, count) if seeds else []),
        }
    )
    if margins:
        plan["equivalence_margins"] = dict(margins)
    plan["estimate"] = {
        "core_hours_per_job": {model: round(value, 2) for model, value in hours.items()},
        "jobs": {model: round(per_seed.get(model, 1.0) * count) for model in models},
        "core_hours": round(total, 1),
        "from": f"{', '.join(sweep.path.name for sweep in kept)}: {how}",
    }
    plan["run"] = run
    if pool_kept:
        plan["pool_kept"] = True
    if needs:
        plan["needs"] = needs
    if why:
        plan["why"] = why
    text = (
        f"# The plan of claim {claim}: {entry.text}. Written by python -m treernn report plan; "
        "fixed by its commit.\n"
        + yaml.safe_dump(
            plan, sort_keys=False, allow_unicode=True, width=100, default_flow_style=None
        )
    )
    import tempfile

    with tempfile.TemporaryDirectory() as folder:  # checked as read_plan reads the file
        copy = Path(folder) / f"claim-{claim:02d}.yaml"
        copy.write_text(text)
        read_plan(copy)
    return text
