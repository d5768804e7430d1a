"""The rule that decides each claim (``docs/claims.md`` says it in words, and when each part was
fixed): a comparison "A beats B on a metric", from the seeds of the sweep it reads.

1. **Which sweep.** Where the claim's plan (`treernn.reporting.claims.plans`) decides the
   comparison and its sweep was given, that sweep; else the largest complete budget that ran
   both models (`treernn.reporting.claims.sweeps`). A sweep whose jobs have not all finished, or
   below its table's declared budget in updates or in epochs (a smoke check), is never a
   verdict.
2. **Planned or post hoc.** A verdict is *planned* where the plan was committed before every job
   of its sweep started (`plans.fixed_at`, each job's ``status.json``), the sweep ran the plan's
   budget and seeds, and every job finished; any other verdict is *post hoc*, labelled with the
   date of the rule it used (`RULE_DATE`) and why.
3. **The test.** The difference of the means with its 95% interval and a two-sided p-value
   (`statistics.compare`: Welch's t, a one-sample t against constant trivial trees, an exact
   test where no side varies); beside it the effect size (Hedges' g), P(A > B) over seeds with
   its bootstrap interval, the power at the observed spread and the seeds a decision would need.
4. **Holm across the report.** Every comparison's p-value (and each equivalence test's) is
   adjusted with Holm's step-down method over the whole report (`settle`), a comparison without
   a test counted as p = 1 (since 2026-12-07). **shown** / **not
   shown**: the adjusted p is at most alpha, on the claim's side of 0 or the other; **equivalent**:
   where the plan gives an equivalence margin, both one-sided tests reject after adjustment;
   else **undecided**.
5. **Trend.** Only from a planned earlier budget of the same recipe: where the straight line
   through the gap there and the gap at T reaches 0 by 2T, a shown / not shown becomes
   undecided (gap closing). Without a planned earlier budget the verdict stands on its test
   alone.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from treernn.reporting.claims import statistics as stats
from treernn.reporting.claims.catalogue import CLAIMS, TRIVIAL_BEST, Claim, Comparison
from treernn.reporting.claims.plans import Plan, family_size, fixed_at, started_before
from treernn.reporting.claims.sweeps import (
    Sweep,
    choose_sweep,
    column_of,
    declared_budget,
    describe_rise,
    rise_at_end,
    sides_of,
    values_of,
)
from treernn.reporting.run_records import Run

#: when the rule below was fixed: every verdict not decided by a plan committed before its runs
#: is post hoc under the rule of this date
RULE_DATE = "2026-12-07"
ALPHA = 0.05
#: the power a decision is asked to have (the seeds a decision would need are counted for it)
TARGET_POWER = 0.8

SHOWN, NOT_SHOWN, UNDECIDED, NO_RUN = "shown", "not shown", "undecided", "no run"
EQUIVALENT = "equivalent"
#: a sweep below its table's declared budget: it checks that the pipeline runs, it decides
#: nothing
SMOKE = "smoke check"
#: a sweep whose jobs have not all finished
INCOMPLETE = "incomplete"
GAP_CLOSING = "gap closing"


@dataclass(frozen=True)
class Trend:
    """The gap at a planned earlier budget and at T, and where the line through them is at 2T."""

    earlier_at: int
    earlier: float
    gap: float
    budget: int

    @property
    def at_twice(self) -> float:
        return self.gap + (self.gap - self.earlier) / (self.budget - self.earlier_at) * self.budget

    @property
    def closing(self) -> bool:
        """The line reaches 0 after T and by 2T (a gap of exactly 0 decides nothing)."""
        return self.gap != 0.0 and self.gap * self.at_twice <= 0.0

    def describe(self) -> str:
        return (
            f"{self.earlier:+.2f} at {self.earlier_at:,} -> {self.gap:+.2f} at {self.budget:,}; "
            f"on that line {self.at_twice:+.2f} at {2 * self.budget:,}"
        )


@dataclass
class Outcome:
    """One comparison decided: the sweep read, the values of each side, the test and what stands
    beside it, the word and whether it is planned."""

    comparison: Comparison
    index: int
    word: str
    table: str | None = None
    sweep: Sweep | None = None
    metric: str | None = None  # the column compared (a layer for parse_f1/layer*)
    better: list[float] | None = None
    worse: list[float] | None = None
    test: stats.Test | None = None
    effect: float | None = None  # Hedges' g
    superiority: tuple[float, float, float] | None = None  # P(A > B), its interval
    #: Holm-adjusted p of the difference, and of the equivalence test where there is a margin
    adjusted: float | None = None
    margin: float | None = None
    tost_p: float | None = None
    tost_adjusted: float | None = None
    #: the effect the power is given for (the plan's smallest effect, else the observed one),
    #: the power of this many seeds, the seeds a side that would give TARGET_POWER
    power_effect: float | None = None
    power: float | None = None
    seeds_needed: int | None = None
    planned: bool = False
    post_hoc: str = ""  # why a verdict is post hoc
    reason: str = ""  # why undecided / no run / a smoke check, in a few words
    trend: Trend | None = None
    improving: list[str] = field(default_factory=list)
    ceilings: list[str] = field(default_factory=list)  # "3 of 3 seeds at 100.00" per side

    @property
    def constant_b(self) -> bool:
        return self.comparison.worse == TRIVIAL_BEST


@dataclass
class Decided:
    """A claim decided: its number, word and outcomes, and whether the word is planned."""

    claim: Claim
    number: int
    word: str
    outcomes: list[Outcome]
    plan: Plan | None = None

    @property
    def planned(self) -> bool:
        return all(
            outcome.planned for outcome in self.outcomes if outcome.test is not None
        ) and any(outcome.test is not None for outcome in self.outcomes)

    @property
    def label(self) -> str:
        if not any(outcome.test is not None for outcome in self.outcomes):
            return ""
        return "planned" if self.planned else f"post hoc (rule of {RULE_DATE})"


# ----------------------------------------------------------------------------- one comparison
def _plan_sweep(plan: Plan | None, index: int, candidates: Sequence[Sweep]) -> Sweep | None:
    """The plan's sweep among a table's sweeps (its runs alone where it was read joined with a
    kept sweep of the same terms, unless the plan pools them)."""
    if plan is None or not plan.decides(index):
        return None
    for sweep in candidates:
        named = [path for path in sweep.paths if path.name == plan.sweep]
        if not named:
            continue
        if len(sweep.paths) == 1 or plan.raw.get("pool_kept"):
            return sweep
        own = [run for run in sweep.runs if run.path.parent.resolve() == named[0].resolve()]
        from treernn.lifecycle.sweeps.layout import sweep_size

        return Sweep((named[0],), own, sweep.budget, len(own), sweep_size(named[0]), sweep.epochs)
    return None


def _why_post_hoc(plan: Plan | None, index: int, sweep: Sweep, from_plan: bool) -> str:
    """Why a verdict from ``sweep`` is not a planned one ("" where it is)."""
    if plan is None or not plan.decides(index):
        return "no plan fixed before its runs"
    if not from_plan:
        # a planned sweep under way beside the one read is said as such, not as never run
        begun = (sweep.path.parent / plan.sweep / "multirun.yaml").is_file()
        state = "started, not finished" if begun else "not run yet"
        return f"reads {sweep.path.name}, not the planned sweep {plan.sweep} ({state})"
    fixed = fixed_at(plan.path)
    if fixed is None:
        return f"its plan {plan.path.name} is not committed as it stands"
    from treernn.lifecycle.records import read_status

    early = [
        run for run in sweep.runs if started_before(read_status(run.path).get("started"), fixed)
    ]
    if early:
        return (
            f"{len(early)} of its {len(sweep.runs)} jobs started before the plan was fixed "
            f"({fixed.isoformat(timespec='minutes')})"
        )
    key, value = plan.budget
    ran = sweep.budget if key == "max_steps" else sweep.epochs
    if ran != value:
        return f"it ran trainer.{key}={ran}, not the plan's {value}"
    return ""


def _seeds_missing(plan: Plan, runs: Sequence[Run]) -> list[int]:
    return sorted(set(plan.seeds) - {run.seed for run in runs})


def decide(
    comparison: Comparison,
    index: int,
    sweeps: Mapping[str, Sequence[Sweep]],
    plan: Plan | None = None,
    config_dir: Path | None = None,
) -> Outcome:
    """One comparison before Holm's adjustment (`settle` gives its word where it has a test)."""
    tables = [name for name in comparison.tables if sweeps.get(name)]
    if plan is not None and plan.decides(index) and plan.table in sweeps:
        tables = [plan.table, *[name for name in tables if name != plan.table]]
    if not tables:
        return Outcome(
            comparison, index, NO_RUN, reason=f"no sweep of table {comparison.tables[0]}"
        )
    table = next(
        (
            name
            for name in tables
            if any(all(sides_of(comparison, sweep.runs)) for sweep in sweeps[name])
        ),
        tables[0],
    )
    planned_sweep = _plan_sweep(plan, index, sweeps.get(table, []))
    sweep = planned_sweep or choose_sweep(comparison, sweeps[table])
    outcome = Outcome(comparison, index, NO_RUN, table, sweep)
    if planned_sweep is not None and not sweep.complete:
        outcome.word, outcome.planned = INCOMPLETE, True
        outcome.reason = f"{sweep.finished} of {sweep.size} jobs finished: not a verdict yet"
        return outcome
    better_runs, worse_runs = sides_of(comparison, sweep.runs)
    missing = [
        m for m, r in ((comparison.better, better_runs), (comparison.worse, worse_runs)) if not r
    ]
    if missing:
        outcome.reason = f"no finished run of {', '.join(missing)} in table {table}"
        return outcome
    metric = column_of(better_runs, comparison.metric, comparison.higher_is_better)
    better, worse, trivial = values_of(comparison, sweep, metric)
    outcome.metric = f"{metric} vs {trivial}" if comparison.worse == TRIVIAL_BEST else metric
    outcome.better, outcome.worse = better, worse
    if not better or not worse:
        outcome.reason = f"no {comparison.metric} in the runs of table {table}"
        return outcome
    compared = {comparison.better: [run for run in better_runs if metric in run.values]}
    if comparison.worse != TRIVIAL_BEST:
        compared[comparison.worse] = [run for run in worse_runs if metric in run.values]
    for model, model_runs in compared.items():
        rise = rise_at_end(model_runs)
        if rise is not None:
            outcome.improving.append(describe_rise(model, rise[0], rise[3]))
    if plan is not None and plan.decides(index):
        outcome.margin = plan.equivalence_margins.get(index)
    if not sweep.complete:
        outcome.word = INCOMPLETE
        outcome.reason = f"{sweep.finished} of {sweep.size} jobs finished: not a verdict yet"
        outcome.planned = planned_sweep is not None
        return outcome
    if planned_sweep is None:
        steps, epochs = declared_budget(table, config_dir)
        smoke = ""
        if steps is not None and sweep.budget is not None and sweep.budget < steps:
            smoke = f"{sweep.budget:,} updates, below table {table}'s declared {steps:,}"
        elif epochs is not None and sweep.epochs is not None and sweep.epochs < epochs:
            smoke = f"{sweep.epochs} epochs, below table {table}'s declared {epochs}"
        if smoke:
            outcome.word, outcome.reason = SMOKE, smoke
            return outcome
    if len(better) < 2 or (len(worse) < 2 and comparison.worse != TRIVIAL_BEST):
        outcome.word, outcome.reason = UNDECIDED, "fewer than 2 seeds"
        return outcome
    outcome.post_hoc = _why_post_hoc(plan, index, sweep, planned_sweep is not None)
    if not outcome.post_hoc and plan is not None:
        lacking = _seeds_missing(plan, [run for runs in compared.values() for run in runs])
        if lacking:
            outcome.post_hoc = f"seeds {lacking} of the plan did not finish"
    outcome.planned = not outcome.post_hoc
    _test(outcome, plan)
    if plan is not None and plan.decides(index) and plan.earlier is not None:
        outcome.trend = _trend(comparison, plan, sweeps.get(table, []), metric, trivial, outcome)
    return outcome


def _test(outcome: Outcome, plan: Plan | None) -> None:
    """The test, effect size, P(A > B), equivalence test and power of an outcome with values."""
    comparison, better, worse = outcome.comparison, outcome.better, outcome.worse
    constant = outcome.constant_b
    outcome.test = stats.compare(better, worse, b_constant=constant)
    outcome.effect = stats.hedges_g(better, worse, b_constant=constant)
    outcome.superiority = stats.prob_superiority(better, worse, comparison.higher_is_better)
    outcome.ceilings = [
        words
        for words in (stats.ceiling_words(better), None if constant else stats.ceiling_words(worse))
        if words
    ]
    if outcome.margin is not None:
        outcome.tost_p = stats.tost(better, worse, outcome.margin, b_constant=constant)
    sd_a = statistics.stdev(better)
    sd_b = 0.0 if constant else statistics.stdev(worse)
    n = min(len(better), len(worse)) if not constant else len(better)
    strict = ALPHA / family_size()
    planned_effect = (
        plan.effect_of(outcome.index) if plan is not None and plan.decides(outcome.index) else None
    )
    if outcome.margin is not None:
        from treernn.reporting.claims.plans import tost_power

        outcome.power_effect = outcome.margin
        outcome.power = tost_power(outcome.margin, sd_a, sd_b, n, strict)
        outcome.seeds_needed = next(
            (
                size
                for size in range(2, 1001)
                if (tost_power(outcome.margin, sd_a, sd_b, size, strict) or 0.0) >= TARGET_POWER
            ),
            None,
        )
        return
    effect = planned_effect if planned_effect is not None else abs(outcome.test.difference)
    outcome.power_effect = effect
    outcome.power = stats.power(effect, sd_a, sd_b, n, strict, constant)
    outcome.seeds_needed = stats.seeds_needed(effect, sd_a, sd_b, strict, TARGET_POWER, constant)


def _trend(
    comparison: Comparison,
    plan: Plan,
    candidates: Sequence[Sweep],
    metric: str,
    trivial: str | None,
    outcome: Outcome,
) -> Trend | None:
    """The gap at the plan's earlier budget (its own planned sweep, finished) and at T."""
    name, (key, value) = plan.earlier
    for sweep in candidates:
        if name not in [path.name for path in sweep.paths] or not sweep.complete:
            continue
        ran = sweep.budget if key == "max_steps" else sweep.epochs
        budget = outcome.sweep.budget if key == "max_steps" else outcome.sweep.epochs
        if ran != value or budget is None or ran >= budget:
            return None
        better, worse, _ = values_of(comparison, sweep, metric, trivial)
        if not better or not worse:
            return None
        earlier = statistics.fmean(better) - statistics.fmean(worse)
        return Trend(ran, earlier, outcome.test.difference, budget)
    return None


# ----------------------------------------------------------------------------- the report
def settle(outcomes: Sequence[Outcome], alpha: float = ALPHA) -> None:
    """Holm's adjustment across every test of the report (each comparison's difference test,
    and its equivalence test where it has a margin), then each comparison's word. A comparison
    without a test (no run, incomplete, a smoke check, no spread for an equivalence test) stays
    in the family as p = 1, never rejected: the family is the report's, the one the plans' power
    analyses divide alpha by (`plans.family_size`), and a verdict does not become easier to
    reach while other claims' sweeps have not finished."""
    family: list[float | None] = []
    for outcome in outcomes:
        family.append(outcome.test.p if outcome.test is not None else 1.0)
        if outcome.tost_p is not None:
            family.append(outcome.tost_p)
        else:
            family.append(None if outcome.margin is None else 1.0)
    adjusted = stats.holm(family, alpha)
    for position, outcome in enumerate(outcomes):
        difference, equivalence = adjusted[2 * position], adjusted[2 * position + 1]
        if outcome.test is None:  # counted in the family, its word (no run, ...) kept
            continue
        outcome.adjusted = difference[0]
        outcome.tost_adjusted = None if equivalence is None else equivalence[0]
        sign = 1.0 if outcome.comparison.higher_is_better else -1.0
        if difference[1]:
            outcome.word = SHOWN if sign * outcome.test.difference > 0 else NOT_SHOWN
            if outcome.trend is not None and outcome.trend.closing:
                outcome.word, outcome.reason = UNDECIDED, GAP_CLOSING
        elif equivalence is not None and equivalence[1]:
            outcome.word = EQUIVALENT
            outcome.reason = f"within +-{outcome.margin:g} (two one-sided tests)"
        else:
            outcome.word = UNDECIDED
            outcome.reason = f"Holm-adjusted p = {difference[0]:.3g}" + (
                f"; equivalence not shown within +-{outcome.margin:g} (adjusted p = "
                f"{equivalence[0]:.3g})"
                if equivalence is not None
                else ""
            )


def claim_word(outcomes: Sequence[Outcome]) -> str:
    """A claim is shown when all its comparisons are; not shown when any is not, or shows no
    difference beyond its margin where the claim says there is one; else undecided."""
    words = [outcome.word for outcome in outcomes]
    if NOT_SHOWN in words or EQUIVALENT in words:
        return NOT_SHOWN
    if all(word == SHOWN for word in words):
        return SHOWN
    if all(word == NO_RUN for word in words):
        return NO_RUN
    if all(word in (SMOKE, NO_RUN) for word in words):
        return SMOKE
    if all(word in (INCOMPLETE, NO_RUN, SMOKE) for word in words):
        return INCOMPLETE
    return UNDECIDED


def decide_claims(
    sweeps: Mapping[str, Sequence[Sweep]],
    claims: Sequence[Claim] = CLAIMS,
    plans: Mapping[int, Plan] | None = None,
    config_dir: Path | None = None,
) -> list[Decided]:
    """Every claim decided from the sweeps given, each with its plan where it has one, Holm's
    adjustment across all their tests."""
    plans = plans or {}
    decided = []
    for claim in claims:
        number = CLAIMS.index(claim) + 1 if claim in CLAIMS else len(decided) + 1
        plan = plans.get(number)
        outcomes = [
            decide(comparison, index, sweeps, plan, config_dir)
            for index, comparison in enumerate(claim.comparisons)
        ]
        decided.append(Decided(claim, number, "", outcomes, plan))
    settle([outcome for entry in decided for outcome in entry.outcomes])
    for entry in decided:
        entry.word = claim_word(entry.outcomes)
    return decided
