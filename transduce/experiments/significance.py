"""Is a system's mean over seeds different from the baseline's? Welch's t-test, two-sided.
Is one system better than another over many datasets? The paired t-test, two-sided, and
Wilcoxon's signed-rank test (`signed_rank`), which does not assume normal differences.

    from transduce.experiments.significance import paired, welch
    welch([91.1, 90.8, 91.4], [90.0, 90.3, 90.6])   # Welch(difference=0.8, t=3.27, df=4.0, p=0.031)
    paired([71.0, 80.5, 64.0], [70.0, 80.0, 62.0])
    # Paired(n=3, difference=1.17, higher=3, lower=0, t=2.65, df=2, p=0.118, wilcoxon_p=0.25)

Welch's test compares two means without assuming equal variances (Welch 1947):

    t  = (mean_a - mean_b) / sqrt(s_a² / n_a + s_b² / n_b)
    df = (s_a² / n_a + s_b² / n_b)² / ((s_a² / n_a)² / (n_a - 1) + (s_b² / n_b)² / (n_b - 1))

(s²: the sample variance, n - 1 in the denominator; df: Welch-Satterthwaite, not an
integer in general). The paired test compares two systems on the same n datasets (each
dataset's number once per system, e.g. its mean over seeds) through the differences
d_i = a_i - b_i (Student 1908; for comparisons over datasets, Demšar 2006 and Dror et
al. 2017, who also discuss the Wilcoxon signed-rank test and corrections for testing many
pairs, which this module does not make):

    t  = mean(d) / (s_d / sqrt(n)),   df = n - 1.

For both, the two-sided p-value is P(|T| >= |t|) for Student's t with df degrees of
freedom, from the regularized incomplete beta function I_x(a, b) (Abramowitz & Stegun
26.7.1; DLMF 8.17.1):

    p = I_{df / (df + t²)}(df / 2, 1 / 2)

and I_x(a, b) from its continued fraction (DLMF 8.17.22; Numerical Recipes, 3rd ed.,
eq. 6.4.5), evaluated by the modified Lentz method (Thompson & Barnett 1986). Pure Python:
no SciPy.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

TEST = "Welch's t-test over seeds, two-sided"  # what the report says it computed
PAIRED_TEST = "paired t-test, two-sided"
EPSILON = 1e-15  # relative change at which the continued fraction has converged
TINY = 1e-300  # keeps Lentz's denominators off zero
MAX_TERMS = 100_000  # converges in O(sqrt(max(a, b))) terms: ~700 for df = 10^6


def incomplete_beta(x: float, a: float, b: float) -> float:
    """The regularized incomplete beta function I_x(a, b) = B(x; a, b) / B(a, b).

    The continued fraction of DLMF 8.17.22,

        I_x(a, b) = x^a (1 - x)^b / (a B(a, b)) * 1 / (1 + d_1 / (1 + d_2 / (1 + ...)))
        d_2m   =  m (b - m) x / ((a + 2m - 1) (a + 2m))
        d_2m+1 = -(a + m) (a + b + m) x / ((a + 2m) (a + 2m + 1)),

    converges fast for x < (a + 1) / (a + b + 2); above that, I_x(a, b) = 1 - I_{1-x}(b, a).

    Args:
        x: in [0, 1].
        a, b: positive.

    Raises:
        ValueError: x outside [0, 1], a or b not positive, or no convergence.
    """
    if not 0.0 <= x <= 1.0:
        raise ValueError(f"incomplete_beta: x must be in [0, 1], got {x}")
    if not (a > 0 and b > 0):
        raise ValueError(f"incomplete_beta: a and b must be positive, got {a}, {b}")
    if x == 0.0 or x == 1.0:
        return x
    if x > (a + 1) / (a + b + 2):
        return 1.0 - incomplete_beta(1.0 - x, b, a)
    # log of x^a (1 - x)^b / B(a, b), B(a, b) = Γ(a) Γ(b) / Γ(a + b)
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    return math.exp(log_front) / a * _continued_fraction(x, a, b)


def _continued_fraction(x: float, a: float, b: float) -> float:
    """1 / (1 + d_1 / (1 + d_2 / (1 + ...))) by the modified Lentz method: the value is the
    product of the factors C_j D_j, C_j = 1 + d_j / C_{j-1}, D_j = 1 / (1 + d_j D_{j-1}),
    stopped when a factor is within EPSILON of 1; a denominator of 0 becomes TINY."""
    c = 1.0
    d = 1.0 - (a + b) * x / (a + 1)  # 1 + d_1
    d = 1.0 / (d if abs(d) > TINY else TINY)
    f = d
    for m in range(1, MAX_TERMS + 1):
        for term in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),  # d_2m
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),  # d_2m+1
        ):
            d = 1.0 + term * d
            d = 1.0 / (d if abs(d) > TINY else TINY)
            c = 1.0 + term / c
            c = c if abs(c) > TINY else TINY
            f *= c * d
        if abs(c * d - 1.0) < EPSILON:
            return f
    raise ValueError(f"incomplete_beta: no convergence in {MAX_TERMS} terms (x={x}, a={a}, b={b})")


def t_two_sided(t: float, df: float) -> float:
    """P(|T| >= |t|) for Student's t with `df` degrees of freedom (any positive real):
    I_{df / (df + t²)}(df / 2, 1 / 2) (Abramowitz & Stegun 26.7.1).

    Raises:
        ValueError: df not positive, or t not a number.
    """
    if not df > 0:
        raise ValueError(f"t_two_sided: df must be positive, got {df}")
    if math.isnan(t):
        raise ValueError("t_two_sided: t is not a number")
    if math.isinf(t):
        return 0.0
    return incomplete_beta(df / (df + t * t), df / 2, 0.5)


@dataclass(frozen=True)
class Welch:
    """Welch's t-test of mean(a) - mean(b)."""

    difference: float  # mean(a) - mean(b)
    t: float
    df: float  # Welch-Satterthwaite
    p: float  # two-sided


def welch(a: Sequence[float], b: Sequence[float]) -> Welch | None:
    """Welch's t-test of two samples' means (unequal variances), two-sided.

    Returns:
        None where it is undefined: fewer than 2 values on either side, or no variance on
        both (then the standard error is 0).
    """
    if len(a) < 2 or len(b) < 2:
        return None
    mean_a, mean_b = statistics.fmean(a), statistics.fmean(b)
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)  # s² / n
    if va + vb == 0:
        return None
    t = (mean_a - mean_b) / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    return Welch(mean_a - mean_b, t, df, t_two_sided(t, df))


@dataclass(frozen=True)
class Paired:
    """The paired t-test of mean(a_i - b_i) over n datasets, the differences' signs, and
    Wilcoxon's signed-rank test of the same differences."""

    n: int
    difference: float  # mean(a_i - b_i)
    higher: int  # datasets where a_i > b_i
    lower: int  # where a_i < b_i (the rest are equal)
    t: float | None  # None where undefined: n < 2, or every difference the same
    df: int | None  # n - 1
    p: float | None  # two-sided
    wilcoxon_p: float | None = None  # two-sided, exact (`signed_rank`); None: no nonzero d


def signed_rank(d: Sequence[float]) -> float | None:
    """Wilcoxon's (1945) signed-rank test of differences d, two-sided and exact.

    The zeros are dropped (Wilcoxon's own treatment); the others are ranked by |d|, ties
    sharing their mean rank; W+ is the sum of the ranks of the positive ones. Under the
    null hypothesis each sign is + or - with probability 1/2, independently, so W+ is a
    sum of a random subset of the ranks: its distribution is counted exactly over all 2^n
    subsets by dynamic programming over the (doubled, so integer) rank sums, given the
    ties, and p = P(|W+ - E| >= |w+ - E|), E = (sum of the ranks) / 2. No normal
    approximation: exact for any n (e.g. R's wilcox.test(exact = TRUE) without ties).

    Returns:
        None where every difference is zero (or there are none).
    """
    nonzero = [x for x in d if x != 0]
    n = len(nonzero)
    if n == 0:
        return None
    order = sorted(range(n), key=lambda i: abs(nonzero[i]))
    doubled = [0] * n  # twice each midrank: an integer
    i = 0
    while i < n:
        j = i
        while j + 1 < n and abs(nonzero[order[j + 1]]) == abs(nonzero[order[i]]):
            j += 1
        for k in range(i, j + 1):
            doubled[order[k]] = (i + 1) + (j + 1)
        i = j + 1
    total = sum(doubled)
    ways = [1] + [0] * total  # ways[s]: the subsets of the ranks whose doubled sum is s
    for rank in doubled:
        for s in range(total - rank, -1, -1):
            if ways[s]:
                ways[s + rank] += ways[s]
    observed = sum(r for r, x in zip(doubled, nonzero, strict=True) if x > 0)
    extreme = abs(2 * observed - total)
    as_far = sum(count for s, count in enumerate(ways) if abs(2 * s - total) >= extreme)
    return as_far / 2**n


def paired(a: Sequence[float], b: Sequence[float]) -> Paired | None:
    """The paired t-test of a against b, two-sided: a[i] and b[i] are the same dataset's.

    Returns:
        None for no pairs; t, df and p None where the test is undefined (one pair, or no
        variance in the differences: then the standard error is 0).

    Raises:
        ValueError: a and b of different lengths.
    """
    if len(a) != len(b):
        raise ValueError(f"paired: {len(a)} values against {len(b)}")
    if not a:
        return None
    # the differences, up to the rounding of the numbers they come from (80.1 - 79.1 and
    # 70.43... - 69.43... are both 1, as ranks and as a variance of 0)
    scale = max(abs(x) for x in [*a, *b]) or 1.0
    digits = max(0, 9 - math.ceil(math.log10(scale)))
    d = [round(x - y, digits) for x, y in zip(a, b, strict=True)]
    mean = statistics.fmean(d)
    higher, lower = sum(x > 0 for x in d), sum(x < 0 for x in d)
    ranks = signed_rank(d)
    variance = statistics.variance(d) if len(d) > 1 else 0.0  # rounded: equal ones give 0
    if variance == 0:
        return Paired(len(d), mean, higher, lower, None, None, None, ranks)
    t = mean / math.sqrt(variance / len(d))
    df = len(d) - 1
    return Paired(len(d), mean, higher, lower, t, df, t_two_sided(t, df), ranks)
