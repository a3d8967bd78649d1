"""Welch's t-test and the Student t distribution behind it (`experiments.significance`),
against closed forms, printed tables and hand-computed examples."""

from __future__ import annotations

import math
import statistics

import pytest

from transduce.experiments.significance import (
    incomplete_beta,
    paired,
    signed_rank,
    t_two_sided,
    welch,
)


@pytest.mark.parametrize("x", [0.0, 0.01, 0.3, 0.5, 0.77, 0.999, 1.0])
def test_the_incomplete_beta_function_against_its_closed_forms(x):
    assert incomplete_beta(x, 1, 1) == pytest.approx(x, abs=1e-14)
    assert incomplete_beta(x, 3.5, 1) == pytest.approx(x**3.5, abs=1e-14)
    assert incomplete_beta(x, 1, 2.5) == pytest.approx(1 - (1 - x) ** 2.5, abs=1e-14)
    # integer a, b: the binomial tail, I_x(a, b) = sum_{j >= a} C(a+b-1, j) x^j (1-x)^(a+b-1-j)
    for a, b in [(2, 3), (7, 4), (20, 30)]:
        n = a + b - 1
        tail = sum(math.comb(n, j) * x**j * (1 - x) ** (n - j) for j in range(a, n + 1))
        assert incomplete_beta(x, a, b) == pytest.approx(tail, abs=1e-13)
        # the symmetry that the continued fraction uses above (a + 1) / (a + b + 2)
        assert incomplete_beta(x, a, b) == pytest.approx(
            1 - incomplete_beta(1 - x, b, a), abs=1e-13
        )


def test_the_incomplete_beta_function_at_its_middle_and_refusals():
    for a in (0.5, 2.0, 37.5, 1000.0):
        assert incomplete_beta(0.5, a, a) == pytest.approx(0.5, abs=1e-12)
    for x, a, b in [(-0.1, 1, 1), (1.1, 1, 1), (0.5, 0, 1), (0.5, 1, -2), (math.nan, 1, 1)]:
        with pytest.raises(ValueError):
            incomplete_beta(x, a, b)


def df4(t: float) -> float:
    """The two-sided p of Student's t with 4 degrees of freedom, in closed form:
    F(t) = 1/2 + 3/8 u (1 - u^2 / 12), u = t / sqrt(1 + t^2 / 4)."""
    u = abs(t) / math.sqrt(1 + t * t / 4)
    return 1 - 3 / 4 * u * (1 - u * u / 12)


@pytest.mark.parametrize("t", [0.0, 0.3, 1.0, 2.0, -2.0, 3.5, 10.0, 150.0])
def test_the_t_distribution_against_its_closed_forms(t):
    a = abs(t)
    assert t_two_sided(t, 1) == pytest.approx(1 - 2 * math.atan(a) / math.pi, rel=1e-12)  # Cauchy
    assert t_two_sided(t, 2) == pytest.approx(1 - a / math.sqrt(2 + t * t), rel=1e-12)
    u = a / math.sqrt(3)
    three = 1 - 2 / math.pi * (u / (1 + u * u) + math.atan(u))
    assert t_two_sided(t, 3) == pytest.approx(three, rel=1e-9, abs=1e-15)
    assert t_two_sided(t, 4) == pytest.approx(df4(t), rel=1e-9, abs=1e-15)


def test_the_t_distribution_against_printed_tables():
    """t = 2.0 with df = 4: p = 0.1161; the 97.5% quantiles of Student's t (e.g. Abramowitz
    & Stegun, Table 26.10) give p = 0.05."""
    assert t_two_sided(2.0, 4) == pytest.approx(0.1161, abs=5e-5)
    quantiles = {1: 12.7062047, 2: 4.3026527, 4: 2.7764451, 10: 2.2281389, 30: 2.0422725}
    for df, t in quantiles.items():
        assert t_two_sided(t, df) == pytest.approx(0.05, abs=1e-7), df
    assert t_two_sided(3.1692727, 10) == pytest.approx(0.01, abs=1e-7)  # the 99.5% one
    assert t_two_sided(math.inf, 3) == 0.0 and t_two_sided(0.0, 2.5) == 1.0
    with pytest.raises(ValueError):
        t_two_sided(1.0, 0)


def test_the_t_distribution_approaches_the_normal():
    """As df grows, P(|T| >= t) tends to P(|Z| >= t) = erfc(t / sqrt 2), the gap shrinking
    as 1 / df: below 3e-3 at df = 100, 3e-5 at 10^4, 3e-7 at 10^6."""
    for t in (0.5, 1.96, 3.0):
        normal = math.erfc(t / math.sqrt(2))
        gaps = [abs(t_two_sided(t, df) - normal) for df in (100, 10_000, 1_000_000)]
        assert gaps[0] < 3e-3 and gaps[1] < 3e-5 and gaps[2] < 3e-7, gaps
        assert 80 < gaps[0] / gaps[1] < 120 and 80 < gaps[1] / gaps[2] < 120, gaps


def test_welch_by_hand():
    """Equal variances and n = 3 each: df = 2 (n - 1) = 4, so the closed form of df = 4.
    [91.1, 90.8, 91.4] against [90.0, 90.3, 90.6]: means 91.1 and 90.3, s^2 = 0.09 each,
    t = 0.8 / sqrt(0.09 / 3 + 0.09 / 3) = 3.266."""
    test = welch([91.1, 90.8, 91.4], [90.0, 90.3, 90.6])
    assert test is not None
    assert test.difference == pytest.approx(0.8)
    assert test.t == pytest.approx(0.8 / math.sqrt(0.06))
    assert test.df == pytest.approx(4.0)
    assert test.p == pytest.approx(df4(0.8 / math.sqrt(0.06)), rel=1e-6)
    assert test.p == pytest.approx(0.0309, abs=1e-4)


def test_welch_with_unequal_variances_by_hand():
    """[1, 2, 3] (s^2 = 1) against [1, 3, 5, 7] (s^2 = 20/3): s^2/n = 1/3 and 5/3,
    t = (2 - 4) / sqrt(2), df = 2^2 / ((1/3)^2 / 2 + (5/3)^2 / 3) = 216/53; p from mpmath
    (betainc(df/2, 1/2, 0, df/(df+t^2), regularized=True)), an independent implementation."""
    test = welch([1.0, 2.0, 3.0], [1.0, 3.0, 5.0, 7.0])
    assert test is not None
    assert test.t == pytest.approx(-math.sqrt(2)) and test.df == pytest.approx(216 / 53)
    assert test.p == pytest.approx(0.22894282682, abs=1e-10)
    # one side without variance: df = the other side's n - 1, here 2 (closed form)
    test = welch([85.0, 85.0, 85.0], [79.0, 80.0, 81.0])
    assert test is not None and test.df == pytest.approx(2.0)
    t = 5 / math.sqrt(1 / 3)
    assert test.t == pytest.approx(t) and test.p == pytest.approx(1 - t / math.sqrt(2 + t * t))


def test_welch_is_undefined_with_one_seed_or_no_variance():
    assert welch([1.0], [1.0, 2.0]) is None
    assert welch([1.0, 2.0], []) is None
    assert welch([3.0, 3.0], [4.0, 4.0, 4.0]) is None  # the standard error is 0


def test_the_paired_t_test_by_hand():
    """d = 1, 0.5, 2: mean 7/6, s_d^2 = 7/12, so t = (7/6) / sqrt(7/36) = sqrt 7 with df = 2,
    whose two-sided p has the closed form 1 - t / sqrt(2 + t^2) = 1 - sqrt(7) / 3."""
    r = paired([71.0, 80.5, 64.0], [70.0, 80.0, 62.0])
    assert (r.n, r.higher, r.lower, r.df) == (3, 3, 0, 2)
    assert r.difference == pytest.approx(7 / 6)
    assert r.t == pytest.approx(math.sqrt(7)) and r.p == pytest.approx(1 - math.sqrt(7) / 3)
    swapped = paired([70.0, 80.0, 62.0], [71.0, 80.5, 64.0])  # the other way round
    assert (swapped.higher, swapped.lower) == (0, 3)
    assert swapped.t == pytest.approx(-math.sqrt(7)) and swapped.p == pytest.approx(r.p)


def test_the_paired_t_test_against_students_sleep_data():
    """Cushny & Peebles' two hypnotics on 10 patients (Student 1908; R's `sleep` data):
    t.test(extra ~ group, paired = TRUE) prints t = -4.0621, df = 9, p-value = 0.002833."""
    first = [0.7, -1.6, -0.2, -1.2, -0.1, 3.4, 3.7, 0.8, 0.0, 2.0]
    second = [1.9, 0.8, 1.1, 0.1, -0.1, 4.4, 5.5, 1.6, 4.6, 3.4]
    r = paired(first, second)
    assert r.t == pytest.approx(-4.0621, abs=5e-5) and r.df == 9
    assert r.p == pytest.approx(0.002833, abs=5e-7)
    assert r.difference == pytest.approx(-1.58) and (r.higher, r.lower) == (0, 9)  # one tie


def test_the_paired_t_test_where_it_is_undefined():
    """One pair, or every difference the same: the difference and the signs, no test; no
    pairs: None; unequal lengths: an error."""
    one = paired([5.0], [3.0])
    assert (one.n, one.difference, one.higher, one.t, one.df, one.p) == (1, 2.0, 1, *[None] * 3)
    same = paired([5.0, 6.0, 7.0], [4.0, 5.0, 6.0])
    assert same.difference == pytest.approx(1.0) and same.t is None and same.p is None
    assert paired([], []) is None
    # differences equal up to rounding (1.0 from means of three seeds): no test, not p = 1e-30
    rounded = paired([70.43333333333334, 80.1, 64.36666666666667],
                     [69.43333333333334, 79.1, 63.36666666666667])  # fmt: skip
    assert rounded.difference == pytest.approx(1.0) and rounded.t is None and rounded.p is None
    with pytest.raises(ValueError):
        paired([1.0, 2.0], [1.0])


def test_the_signed_rank_test_against_rs_example():
    """R's ?wilcox.test (Hollander & Wolfe): the differences' negative ranks are 2 and 3, so
    W+ = 40 of 45; 10 of the 2^9 sign patterns give W+ >= 40 (those with W- <= 5), so
    p = 2 * 10 / 512 = 0.0390625 two-sided (R prints 0.01953 one-sided)."""
    x = [1.83, 0.50, 1.62, 2.48, 1.68, 1.88, 1.55, 3.06, 1.30]
    y = [0.878, 0.647, 0.598, 2.05, 1.06, 1.29, 1.06, 3.14, 1.29]
    assert paired(x, y).wilcoxon_p == pytest.approx(20 / 512, abs=1e-15)
    assert signed_rank([1.0, 2.0, 3.0]) == pytest.approx(2 / 8)  # all positive: 2 of 8 as far
    assert signed_rank([0.0, 0.0]) is None and signed_rank([]) is None


@pytest.mark.parametrize("seed", range(6))
def test_the_signed_rank_test_against_every_sign_pattern(seed):
    """With ties and zeros: the p of the counting equals the share of the 2^n sign patterns
    of the (mid)ranks whose W+ is as far from its mean as the observed one."""
    import itertools
    import random

    rng = random.Random(seed)
    d = [rng.choice([-3, -2, -1, 0, 1, 1, 2, 3, 4]) * 0.5 for _ in range(rng.randint(3, 11))]
    nonzero = [x for x in d if x != 0]
    if not nonzero:
        assert signed_rank(d) is None
        return
    sizes = sorted(abs(x) for x in nonzero)
    rank = {v: statistics.fmean(i + 1 for i, s in enumerate(sizes) if s == v) for v in sizes}
    ranks = [rank[abs(x)] for x in nonzero]
    mean = sum(ranks) / 2
    observed = abs(sum(r for r, x in zip(ranks, nonzero) if x > 0) - mean)
    patterns = list(itertools.product((0, 1), repeat=len(ranks)))
    as_far = sum(
        abs(sum(r for r, s in zip(ranks, p) if s) - mean) >= observed - 1e-12 for p in patterns
    )
    assert signed_rank(d) == pytest.approx(as_far / len(patterns), abs=1e-15)
