"""The statistics of a claim's verdict (`treernn.reporting.claims.statistics`) against numbers
worked out by hand, scipy's own tests, and the power tables every textbook prints (17 seeds a
side detect one standard deviation with 80% power at alpha 0.05; 64 detect half of one)."""

from __future__ import annotations

import math

import pytest
from scipy import stats

from treernn.reporting.claims.statistics import (
    ceiling_words,
    compare,
    hedges_g,
    holm,
    power,
    prob_superiority,
    seeds_needed,
    tost,
)


def test_welch_by_hand_and_as_scipy_computes_it():
    a, b = [1.0, 2.0, 3.0], [4.0, 6.0, 8.0]
    test = compare(a, b)
    # var/n: 1/3 and 4/3; se = sqrt(5/3); df = (5/3)^2 / ((1/3)^2/2 + (4/3)^2/2) = 50/17
    assert test.difference == -4.0
    assert test.df == pytest.approx(50 / 17)
    assert test.method == "Welch t"
    scipy_test = stats.ttest_ind(a, b, equal_var=False)
    interval = scipy_test.confidence_interval(0.95)
    assert test.p == pytest.approx(scipy_test.pvalue, rel=1e-12)
    assert (test.low, test.high) == pytest.approx((interval.low, interval.high), rel=1e-12)


def test_a_constant_b_is_a_one_sample_t_test():
    # t = 2 / (1 / sqrt 3) = 2 sqrt 3 with 2 df: P(T > t) = (1 - t / sqrt(t^2 + 2)) / 2
    test = compare([1.0, 2.0, 3.0], [0.0, 0.0, 0.0], b_constant=True)
    t = 2 * math.sqrt(3)
    assert test.method == "one-sample t" and test.df == 2
    assert test.p == pytest.approx(1 - t / math.sqrt(t * t + 2), rel=1e-12)


def test_a_ceiling_is_an_exact_test_without_an_interval():
    # three seeds at 100 F1 against trivial trees at 13.58: the sign test, 2 * (1/2)^3
    test = compare([100.0] * 3, [13.58] * 3, b_constant=True)
    assert test.method == "exact sign test" and not test.has_interval
    assert test.p == pytest.approx(0.25)
    assert compare([100.0] * 6, [13.58] * 6, b_constant=True).p == pytest.approx(2 / 64)
    # two samples, neither varying: Mann-Whitney's exact test, 2 / C(6, 3)
    both = compare([1.0, 1.0, 1.0], [0.0, 0.0, 0.0])
    assert both.method == "exact Mann-Whitney" and both.p == pytest.approx(0.1)
    assert ceiling_words([100.0] * 3) == "3 of 3 seeds at 100.00"
    assert ceiling_words([100.0, 99.0]) is None


def test_hedges_g_by_hand():
    # pooled variance (2 * 1 + 2 * 4) / 4 = 2.5; d = -4 / sqrt(2.5); J = 1 - 3 / 15
    assert hedges_g([1.0, 2.0, 3.0], [4.0, 6.0, 8.0]) == pytest.approx(-4 / math.sqrt(2.5) * 0.8)
    # against a constant: d = 2 / 1, J = 1 - 3 / (4 * 2 - 1)
    g = hedges_g([1.0, 2.0, 3.0], [0.0] * 3, b_constant=True)
    assert g == pytest.approx(2 * (1 - 3 / 7))
    assert hedges_g([1.0, 1.0], [0.0, 0.0]) is None


def test_probability_of_superiority_counts_pairs_and_ties():
    # 1 beats only 0; 2 ties 2 twice and beats 0; 3 beats all: (1 + 2 + 3) / 9
    estimate, low, high = prob_superiority([1.0, 2.0, 3.0], [2.0, 2.0, 0.0])
    assert estimate == pytest.approx(6 / 9)
    assert 0.0 <= low <= estimate <= high <= 1.0
    assert prob_superiority([1.0, 2.0], [3.0, 4.0], higher=False)[0] == 1.0  # perplexity
    assert prob_superiority([5.0, 6.0], [1.0, 2.0]) == (1.0, 1.0, 1.0)


def test_power_matches_the_textbook_tables():
    assert power(1.0, 1.0, 1.0, 17) == pytest.approx(0.807, abs=1e-3)
    assert power(0.5, 1.0, 1.0, 64) == pytest.approx(0.8015, abs=1e-3)
    assert seeds_needed(1.0, 1.0, 1.0) == 17
    assert seeds_needed(0.5, 1.0, 1.0) == 64
    assert power(1.0, 1.0, 1.0, 16) < 0.8  # 16 is one too few
    assert seeds_needed(0.0, 1.0, 1.0) is None and power(1.0, 0.0, 0.0, 5) is None
    # a stricter alpha (a Bonferroni step of a family of 10) needs more seeds
    assert seeds_needed(1.0, 1.0, 1.0, alpha=0.005) > 17


def test_holm_by_hand():
    # sorted: 0.005 * 4 = 0.02, 0.01 * 3 = 0.03, 0.03 * 2 = 0.06, max(0.06, 0.04 * 1) = 0.06
    adjusted = holm([0.01, 0.04, 0.03, 0.005, None], alpha=0.05)
    assert adjusted[4] is None
    assert [round(p, 10) for p, _ in adjusted[:4]] == [0.03, 0.06, 0.06, 0.02]
    assert [rejected for _, rejected in adjusted[:4]] == [True, False, False, True]


def test_tost_is_the_one_sided_welch_test_at_the_margin():
    a, b = [1.0, 2.0, 3.0], [1.5, 2.0, 2.5]
    # difference 0, se and df as Welch's: each one-sided test is P(T > 2 / se)
    se = math.sqrt(1 / 3 + 0.25 / 3)
    df = (1 / 3 + 0.25 / 3) ** 2 / ((1 / 3) ** 2 / 2 + (0.25 / 3) ** 2 / 2)
    assert tost(a, b, 2.0) == pytest.approx(float(stats.t.sf(2.0 / se, df)), rel=1e-12)
    assert tost(a, b, 1.0) > 0.05 > tost(a, b, 2.0)  # equivalent within 2, not shown within 1
    assert tost([1.0, 1.0], [1.0, 1.0], 1.0) is None
    with pytest.raises(ValueError, match="margin is positive"):
        tost(a, b, 0.0)


def test_power_far_in_the_tails_is_a_number():
    # scipy's noncentral t gives NaN there (nct.cdf(-3.5, 30, 40)); a large effect has power 1
    assert power(1.0, 0.1, 0.1, 30) == 1.0
    assert seeds_needed(1.01, 1.12, 0.76, alpha=0.05) == 16  # claim 1's kept spread
    assert power(-1.0, 1.0, 1.0, 17) == power(1.0, 1.0, 1.0, 17)
