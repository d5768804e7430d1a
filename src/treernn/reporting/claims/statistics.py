"""The statistics a claim's verdict is made of, each a function of the seeds' values alone.

- `compare`: the difference of the means A - B with its interval and two-sided p-value.
  Welch's t test (scipy's ``ttest_ind(equal_var=False)``) where both sides vary; a one-sample t
  test where B is a constant (the trivial trees: the same value in every run); where no side
  varies (a ceiling or a floor: "3 of 3 seeds at 100.00") a t interval has no width to speak of,
  and the test is exact instead: the sign test against a constant B, Mann-Whitney's exact test
  between two samples. Such a comparison has no interval.
- `hedges_g`: the effect size, the difference over the pooled standard deviation with Hedges'
  small-sample correction (Cohen's d against a constant).
- `prob_superiority`: P(A > B), the chance that a seed of A beats a seed of B (ties count a half),
  with a percentile bootstrap interval over seeds (Bouthillier et al. 2021 decide on it; here it
  is reported beside the test).
- `power` and `seeds_needed`: the chance that Welch's two-sided test at ``alpha`` detects a
  difference ``delta`` with ``n`` seeds a side at the given spread (noncentral t), and the
  fewest seeds a side that reach a target power.
- `holm`: Holm's step-down adjustment of a family of p-values (the report's comparisons).
- `tost`: two one-sided tests for equivalence within a margin (Schuirmann 1987): where "no
  difference" can be the answer, the difference lies within +-margin when both reject.

scipy is imported inside the functions (``report claims`` imports it once it decides).
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

#: bootstrap resamples of `prob_superiority`'s interval (a fixed seed: the report is the same
#: every time it is made)
RESAMPLES = 10_000


@dataclass(frozen=True)
class Test:
    """A two-sided test of mean(A) - mean(B): the difference, its interval at ``level`` (None
    where the test is exact: no side varies), the degrees of freedom of a t test, the p-value and
    the test's name."""

    difference: float
    low: float | None
    high: float | None
    df: float | None
    p: float
    method: str

    @property
    def has_interval(self) -> bool:
        return self.low is not None and self.high is not None


def _variance(values: Sequence[float]) -> float:
    return statistics.variance(values) if len(values) > 1 else 0.0


def compare(
    a: Sequence[float], b: Sequence[float], b_constant: bool = False, level: float = 0.95
) -> Test:
    """mean(a) - mean(b), tested two-sided (module docstring); ``b_constant``: B is one value in
    every run (the trivial trees), so that A alone varies."""
    from scipy import stats

    if len(a) < 2 or (len(b) < 2 and not b_constant):
        raise ValueError(f"a test needs 2 values a side, got {len(a)} and {len(b)}")
    difference = statistics.fmean(a) - statistics.fmean(b)
    var_a = _variance(a) / len(a)
    var_b = 0.0 if b_constant else _variance(b) / len(b)
    if b_constant:
        constant = statistics.fmean(b)
        if var_a == 0.0:  # every seed at one value: the sign test against B
            above = sum(value > constant for value in a)
            below = sum(value < constant for value in a)
            p = 1.0 if above + below == 0 else stats.binomtest(above, above + below).pvalue
            return Test(difference, None, None, None, float(p), "exact sign test")
        df = len(a) - 1.0
        se = math.sqrt(var_a)
        p = 2.0 * float(stats.t.sf(abs(difference) / se, df))
        half = float(stats.t.ppf(0.5 + level / 2, df)) * se
        return Test(difference, difference - half, difference + half, df, p, "one-sample t")
    if var_a == 0.0 and var_b == 0.0:
        p = float(stats.mannwhitneyu(a, b, alternative="two-sided", method="exact").pvalue)
        return Test(difference, None, None, None, p, "exact Mann-Whitney")
    se = math.sqrt(var_a + var_b)
    df = (var_a + var_b) ** 2 / (
        (var_a**2 / (len(a) - 1) if var_a else 0.0) + (var_b**2 / (len(b) - 1) if var_b else 0.0)
    )
    p = 2.0 * float(stats.t.sf(abs(difference) / se, df))
    half = float(stats.t.ppf(0.5 + level / 2, df)) * se
    return Test(difference, difference - half, difference + half, df, p, "Welch t")


def hedges_g(a: Sequence[float], b: Sequence[float], b_constant: bool = False) -> float | None:
    """The standardised difference (mean(a) - mean(b)) / s with Hedges' correction
    ``1 - 3 / (4 df - 1)``: s pooled over both sides (df = n_a + n_b - 2), or A's own standard
    deviation against a constant (df = n_a - 1). None where s is 0 (no side varies)."""
    difference = statistics.fmean(a) - statistics.fmean(b)
    if b_constant:
        df = len(a) - 1
        spread = math.sqrt(_variance(a))
    else:
        df = len(a) + len(b) - 2
        spread = math.sqrt(((len(a) - 1) * _variance(a) + (len(b) - 1) * _variance(b)) / df)
    if spread == 0.0 or df < 1:
        return None
    return difference / spread * (1.0 - 3.0 / (4.0 * df - 1.0))


def prob_superiority(
    a: Sequence[float], b: Sequence[float], higher: bool = True, level: float = 0.95
) -> tuple[float, float, float]:
    """P(A > B) over seeds (``higher``: larger is better; else P(A < B)): the share of pairs (a
    seed of A, a seed of B) where A is better, ties counting a half; with the percentile
    bootstrap interval at ``level`` (seeds resampled within each side, `RESAMPLES` times from a
    fixed seed)."""

    def share(xs: Sequence[float], ys: Sequence[float]) -> float:
        wins = 0.0
        for x in xs:
            for y in ys:
                if x == y:
                    wins += 0.5
                elif (x > y) == higher:
                    wins += 1.0
        return wins / (len(xs) * len(ys))

    estimate = share(a, b)
    rng = random.Random(0)
    draws = sorted(
        share(rng.choices(a, k=len(a)), rng.choices(b, k=len(b))) for _ in range(RESAMPLES)
    )
    tail = (1.0 - level) / 2
    low = draws[int(math.floor(tail * (RESAMPLES - 1)))]
    high = draws[int(math.ceil((1.0 - tail) * (RESAMPLES - 1)))]
    return estimate, low, high


def power(
    delta: float,
    sd_a: float,
    sd_b: float,
    n: int,
    alpha: float = 0.05,
    b_constant: bool = False,
) -> float | None:
    """The chance that the two-sided test at ``alpha`` (Welch's with ``n`` seeds a side; the
    one-sample t test where B is a constant) rejects "no difference" when the true difference is
    ``delta`` and the standard deviations ``sd_a`` and ``sd_b``: the noncentral t's mass beyond
    the critical values. None where there is no spread (the t test does not apply)."""
    from scipy import stats

    if n < 2:
        return 0.0
    var_a, var_b = sd_a**2 / n, 0.0 if b_constant else sd_b**2 / n
    se = math.sqrt(var_a + var_b)
    if se == 0.0:
        return None
    if b_constant:
        df = n - 1.0
    else:
        df = (var_a + var_b) ** 2 / ((var_a**2 + var_b**2) / (n - 1.0) if var_a + var_b else 1.0)
    critical = float(stats.t.ppf(1.0 - alpha / 2, df))
    shift = abs(delta) / se  # the test is two-sided: the power is the same for -delta
    # scipy's noncentral t gives NaN far out in its tails (cdf(-3.5, 30, 40)): there the mass
    # beyond the far critical value is 0, and beyond the near one all or nothing
    near = float(stats.nct.sf(critical, df, shift))
    far = float(stats.nct.cdf(-critical, df, shift))
    if not math.isfinite(near):
        near = 1.0 if shift > critical else 0.0
    return min(1.0, near + (far if math.isfinite(far) else 0.0))


def seeds_needed(
    delta: float,
    sd_a: float,
    sd_b: float,
    alpha: float = 0.05,
    target: float = 0.8,
    b_constant: bool = False,
    most: int = 1000,
) -> int | None:
    """The fewest seeds a side (2 to ``most``) at which `power` reaches ``target``; None where
    no spread is known or even ``most`` seeds fall short (a difference of 0 is never
    detected)."""
    if delta == 0.0:
        return None
    low, high = 2, most
    reached = power(delta, sd_a, sd_b, high, alpha, b_constant)
    if reached is None or reached < target:
        return None
    while low < high:  # power grows with n: the first n that reaches the target
        middle = (low + high) // 2
        if (power(delta, sd_a, sd_b, middle, alpha, b_constant) or 0.0) >= target:
            high = middle
        else:
            low = middle + 1
    return low


def holm(p_values: Sequence[float | None], alpha: float = 0.05) -> list[tuple[float, bool] | None]:
    """Holm's step-down adjustment of a family of tests (None: not a test of the family): for
    each, the adjusted p-value ``max over j <= i of min(1, (m - j + 1) p_(j))`` in the order of
    the sorted p-values, and whether it rejects at ``alpha`` (adjusted p <= alpha)."""
    tested = sorted((p, index) for index, p in enumerate(p_values) if p is not None)
    m = len(tested)
    result: list[tuple[float, bool] | None] = [None] * len(p_values)
    running = 0.0
    for rank, (p, index) in enumerate(tested):
        running = max(running, min(1.0, (m - rank) * p))
        result[index] = (running, running <= alpha)
    return result


def tost(
    a: Sequence[float], b: Sequence[float], margin: float, b_constant: bool = False
) -> float | None:
    """The p-value of two one-sided tests that mean(a) - mean(b) lies within +-``margin``: the
    larger of the tests of "difference <= -margin" and "difference >= +margin" (Welch's t, or
    the one-sample t against a constant B). Equivalence is shown where it is at most alpha, that
    is where the 1 - 2 alpha interval lies inside the margin. None where no side varies."""
    from scipy import stats

    if margin <= 0:
        raise ValueError(f"an equivalence margin is positive, got {margin}")
    difference = statistics.fmean(a) - statistics.fmean(b)
    var_a = _variance(a) / len(a)
    var_b = 0.0 if b_constant else _variance(b) / len(b)
    se = math.sqrt(var_a + var_b)
    if se == 0.0:
        return None
    if b_constant:
        df = len(a) - 1.0
    else:
        df = (var_a + var_b) ** 2 / (
            (var_a**2 / (len(a) - 1) if var_a else 0.0)
            + (var_b**2 / (len(b) - 1) if var_b else 0.0)
        )
    above_low = float(stats.t.sf((difference + margin) / se, df))
    below_high = float(stats.t.cdf((difference - margin) / se, df))
    return max(above_low, below_high)


def ceiling_words(values: Sequence[float], unit: str = "") -> str | None:
    """ "3 of 3 seeds at 100.00" where every seed has one value (a ceiling, a floor, or a model
    that learnt one answer), else None."""
    if len(values) > 1 and len(set(values)) == 1:
        return f"{len(values)} of {len(values)} seeds at {values[0]:.2f}{unit}"
    return None
