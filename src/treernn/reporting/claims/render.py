"""The claims report as Markdown (``python -m treernn report claims``, the results page): a row
per comparison with its test and what stands beside it, each claim's verdict labelled planned or
post hoc, then the notes a reader needs to weigh them: the plans and their state, which sweeps
were read, what was still improving, what limits each claim, and the machines the runs ran on.
"""

from __future__ import annotations

import collections
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path

from treernn.reporting.claims.plans import Plan, family_size, history
from treernn.reporting.claims.rule import ALPHA, RULE_DATE, TARGET_POWER, Decided, Outcome
from treernn.reporting.claims.sweeps import Sweep
from treernn.reporting.run_records import Run


def _mean(values: Sequence[float] | None) -> str:
    if not values:
        return "-"
    text = f"{statistics.fmean(values):.2f}"
    if len(values) > 1:
        text += f" ± {statistics.stdev(values):.2f}"
    return f"{text} (n={len(values)})"


def _difference(outcome: Outcome) -> str:
    test = outcome.test
    if test is None:
        return "-"
    if not test.has_interval:
        return f"{test.difference:+.2f} (no interval: {'; '.join(outcome.ceilings) or 'no spread'})"
    return f"{test.difference:+.2f} [{test.low:+.2f}, {test.high:+.2f}]"


def _p(outcome: Outcome) -> str:
    if outcome.test is None:
        return "-"
    text = f"{outcome.test.p:.2g} ({outcome.adjusted:.2g})"
    if outcome.tost_p is not None:
        text += f"; TOST {outcome.tost_p:.2g} ({outcome.tost_adjusted:.2g})"
    return text


def _power(outcome: Outcome) -> str:
    if outcome.test is None:
        return "-"
    what = "+-" if outcome.margin is not None else ""
    power = "-" if outcome.power is None else f"{outcome.power:.2f}"
    needed = outcome.seeds_needed if outcome.seeds_needed is not None else "over 1,000"
    if outcome.power is None and outcome.seeds_needed is None:
        needed = "- (no spread)"
    return f"{power} at {what}{outcome.power_effect:.3g}; {needed}"


def _superiority(outcome: Outcome) -> str:
    if outcome.superiority is None:
        return "-"
    estimate, low, high = outcome.superiority
    return f"{estimate:.2f} [{low:.2f}, {high:.2f}]"


def to_markdown(
    decided: Sequence[Decided],
    machines: bool = False,
    details: bool = True,
    plans: Mapping[int, Plan] | None = None,
) -> str:
    """One table, a row per comparison (the claim, its verdict and whether it is planned on its
    first row), then with ``details`` the notes (module docstring); with ``machines``, which
    machines the runs read ran on."""
    header = [
        "#", "claim", "verdict", "comparison", "A", "B", "A - B [95% interval]", "g",
        "P(A>B)", "p (Holm)", "power; seeds a side",
    ]  # fmt: skip
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for entry in decided:
        for index, outcome in enumerate(entry.outcomes):
            first = index == 0
            metric = outcome.comparison.metric
            verdict = f"**{entry.word}**" + (f", {entry.label}" if entry.label else "")
            cells = [
                str(entry.number) if first else "",
                f"{entry.claim.text} ({entry.claim.paper})" if first else "",
                verdict if first else "",
                str(outcome.comparison)
                + (f" [{outcome.metric}]" if outcome.metric not in (None, metric) else "")
                + f": {outcome.word}"
                + (f" ({outcome.reason})" if outcome.reason else ""),
                _mean(outcome.better),
                _mean(outcome.worse),
                _difference(outcome),
                "-" if outcome.effect is None else f"{outcome.effect:+.2f}",
                _superiority(outcome),
                _p(outcome),
                _power(outcome),
            ]
            lines.append("| " + " | ".join(cells) + " |")
    lines += ["", legend()]
    if details:
        lines += notes(decided, plans or {})
    read = runs_read(decided) if machines else {}
    if read:
        lines += ["", machines_line(read)]
    return "\n".join(lines) + "\n"


def legend() -> str:
    m = family_size()
    return (
        "A, B: mean ± sample std over seeds (accuracy and F1 in %). A - B with the 95% interval "
        "of Welch's t (a one-sample t against trivial trees, which are the same in every run; no "
        "interval where no side varies: an exact test instead). g: Hedges' g. P(A>B): the chance "
        "that a seed of A beats a seed of B (ties a half), with its bootstrap 95% interval. p: "
        f"two-sided, and Holm-adjusted across the report's tests in brackets; shown / not shown: "
        f"adjusted p <= {ALPHA:g} on the claim's / the other side; equivalent: both one-sided "
        "tests reject within the planned margin (TOST). power: of these seeds at alpha "
        f"{ALPHA:g}/{m} (Holm's strictest step over the {m} comparisons, as the plans fix it; a "
        "planned equivalence test adds one more test) for the plan's smallest effect (else the "
        "observed "
        f"difference, or the margin), and the seeds a side that would give {TARGET_POWER:.0%}. "
        f"planned: decided by a plan committed before every job of its sweep started; post hoc: "
        f"any other verdict, under the rule of {RULE_DATE} (docs/claims.md)."
    )


def plans_lines(plans: Mapping[int, Plan]) -> list[str]:
    """A line per plan: its file, when it was fixed and amended, its table, budget and seeds,
    and its sweep or what it would need."""
    lines = []
    for number, plan in sorted(plans.items()):
        found = history(plan.path)
        when = (
            f"fixed {found.fixed:%Y-%m-%d %H:%M %Z}".rstrip() if found else
            "not committed as it stands"
        )  # fmt: skip
        for date, commit, keys in reversed(found.amended if found else ()):
            when += f", amended {date:%Y-%m-%d} ({commit[:7]}: {', '.join(keys)})"
        key, value = plan.budget
        state = f"sweep {plan.sweep}" if plan.run else "not run here"
        if plan.needs:
            state += f"; a decision needs {plan.needs}" if plan.run else f": {plan.needs}"
        lines.append(
            f"- claim {number} ({plan.path.name}, {when}): table {plan.table}, "
            f"trainer.{key}={value:,}, {len(plan.seeds)} seeds a side; {state}"
        )
    return lines


def notes(decided: Sequence[Decided], plans: Mapping[int, Plan]) -> list[str]:
    lines: list[str] = []
    post_hoc = [
        f"- claim {entry.number}, {outcome.comparison}: {outcome.post_hoc}"
        for entry in decided
        for outcome in entry.outcomes
        if outcome.test is not None and outcome.post_hoc
    ]
    if post_hoc:
        lines += ["", "Why each verdict is post hoc:", "", *post_hoc]
    if plans:
        lines += ["", "Plans (results/plans/):", "", *plans_lines(plans)]
    improving = [
        f"- claim {entry.number}, {outcome.comparison}: {'; '.join(outcome.improving)}"
        for entry in decided
        for outcome in entry.outcomes
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
        f"- claim {entry.number}: {entry.claim.limits}" for entry in decided if entry.claim.limits
    ]
    lines += ["", "What limits each claim here:", "", *limits]
    return lines


def reading_notes(decided: Sequence[Decided], sweeps: Mapping[str, Sequence[Sweep]]) -> list[str]:
    """For each table given several sweeps (or sweeps read as one): which claims read which
    sweep, and the sweeps no claim read."""
    notes = []
    for table, candidates in sweeps.items():
        if len(candidates) < 2 and len(candidates[0].paths) < 2:
            continue
        # what each comparison read: a sweep given, or the plan's sweep alone among sweeps read
        # as one (the plans of claims 1, 2 and 11 read lm-planned, claim 3's pools it with
        # lm-long)
        readers: dict[str, list[str]] = {}
        read_paths: set[Path] = set()
        for entry in decided:
            for outcome in entry.outcomes:
                if outcome.table == table and outcome.sweep is not None:
                    claims = readers.setdefault(outcome.sweep.describe(), [])
                    if str(entry.number) not in claims:
                        claims.append(str(entry.number))
                    read_paths.update(outcome.sweep.paths)
        parts = [
            f"claim{'s' if len(claims) > 1 else ''} {', '.join(claims)} read {described}"
            for described, claims in readers.items()
        ]
        for sweep in candidates:
            unread = [path for path in sweep.paths if path not in read_paths]
            if len(unread) == len(sweep.paths):
                parts.append(f"not {sweep.describe()}")
            else:  # a kept sweep read as one with a plan's sweep, which its plan reads alone
                parts += [f"not {path}" for path in unread]
        notes.append(
            f"Several sweeps of table {table}, each comparison reading its plan's sweep, else "
            f"the largest budget with every job finished that ran both its models: "
            f"{'; '.join(parts)}"
        )
    return notes


def runs_read(decided: Sequence[Decided]) -> dict[str, list[Run]]:
    """Table -> the runs of the sweeps its comparisons read, each sweep once."""
    read: dict[str, dict[Path, Sweep]] = {}
    for entry in decided:
        for outcome in entry.outcomes:
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
