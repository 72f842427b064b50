"""Power of the comparisons: the minimum detectable effect of each at its n and spread, and the
runs a planned effect needs (Mann-Whitney's efficiency relative to the t test; statsmodels' solvers).
"""

from __future__ import annotations

import math
import warnings
from functools import cache

import numpy as np
from scipy import stats
from statsmodels.stats.power import NormalIndPower, TTestIndPower

from .estimators import MIN_N

# Planned power of the minimum detectable effect.
POWER = 0.8
# Pitman efficiency of Mann-Whitney relative to the t test for normal data: it needs pi/3 times the runs.
ARE_MANN_WHITNEY = 3 / math.pi


@cache
def smallest_p(n1: int, n2: int) -> float:
    """The smallest two-sided Mann-Whitney p that n1 vs n2 runs can give (complete separation)."""
    return float(stats.mannwhitneyu(np.arange(n1), np.arange(n1, n1 + n2), method="exact").pvalue)


def never_reaches(n1: int, n2: int, level: float) -> bool:
    """smallest_p(n1, n2) >= level. That p is 2 / C(n1 + n2, n1); where its logarithm lies below
    log(level) by more than 1 the answer is known without scipy's exact distribution, whose cost
    grows with n1 x n2 (n ~ 1000: 3 ms per pair, against microseconds here)."""
    log_p = math.log(2) - (math.lgamma(n1 + n2 + 1) - math.lgamma(n1 + 1) - math.lgamma(n2 + 1))
    if level > 0 and log_p < math.log(level) - 1:
        return False
    return smallest_p(n1, n2) >= level


def pooled_log_sd(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Per row: the pooled spread of log values of x and y (NaN where a value is <= 0).

    Each side's spread is its normal-scaled median absolute deviation: it estimates the standard
    deviation of normal log values, and like Mann-Whitney it is not inflated by a stray run (the
    sample standard deviation put one slow vxlan run's MDE at 83 % where -24 % was detected)."""
    n, m = x.shape[1], y.shape[1]
    if min(n, m) < 2:
        return np.full(len(x), math.nan)
    with np.errstate(invalid="ignore", divide="ignore"):  # log of 0 or less: NaN, and so is the spread
        lx = np.where(x > 0, np.log(np.where(x > 0, x, 1)), math.nan)
        ly = np.where(y > 0, np.log(np.where(y > 0, y, 1)), math.nan)
        sx, sy = (stats.median_abs_deviation(v, axis=1, scale="normal") for v in (lx, ly))  # pyright: ignore[reportArgumentType] (scipy documents scale="normal"; its annotation says float)
        var = ((n - 1) * sx**2 + (m - 1) * sy**2) / (n + m - 2)
    return np.sqrt(var)


@cache
def n_attainable(alpha: float, n_max: int = 1000) -> int:
    """The fewest runs per side (both sides alike) whose completely separated samples give p < alpha."""
    return next(n for n in range(1, n_max) if smallest_p(n, n) < alpha)


def mde_pct(n: int, n_base: int, sd_log: float, alpha: float, power: float = POWER) -> float:
    """Minimum detectable effect: the change in % of the baseline median that Mann-Whitney at level
    ``alpha`` (two-sided) detects with probability ``power``, at n vs n_base runs whose log values
    spread as ``sd_log`` (pooled_log_sd); NaN where smallest_p(n, n_base) >= alpha (no sample of
    this size can reach the level: n_attainable says how many runs can) or no spread is known.

    Method: the two-sample t test's power (statsmodels TTestIndPower) on the log values, with each
    side's n scaled by Mann-Whitney's asymptotic relative efficiency 3/pi; the effect size found,
    in standard deviations of the logs, times sd_log is the log median ratio. Closed form and fast,
    for every comparison and for planning; a simulation of exact Mann-Whitney p-values on normal
    log values (tests/analysis/test_stats.py) gives a power within a few points of the one planned:
    at n = 8 the discreteness of the exact test costs a little.
    """
    if min(n, n_base) < MIN_N or not 0 < sd_log < math.inf or never_reaches(n, n_base, alpha):
        return math.nan
    with np.errstate(over="ignore"):
        return 100 * float(np.expm1(_mde_effect_size(n, n_base, alpha, power) * sd_log))


@cache
def _mde_effect_size(n: int, n_base: int, alpha: float, power: float) -> float:
    """The standardized effect of mde_pct: it depends on n, n_base, alpha and power only, not on the
    spread, so comparisons at the same sizes and level share one root finding (statsmodels' solver
    took three quarters of compare at 100k runs)."""
    with warnings.catch_warnings():  # no convergence is a NaN effect size: "n/a", said by the caller
        warnings.simplefilter("ignore")
        d = TTestIndPower().solve_power(
            effect_size=None,
            nobs1=n * ARE_MANN_WHITNEY,
            alpha=alpha,
            power=power,
            ratio=n_base / n,
            alternative="two-sided",
        )
    return float(d)


def _power(d: float, n: int, alpha: float) -> float:
    """Power of the two-sided two-sample t test at standardized effect ``d``, ``n`` runs per side
    scaled by Mann-Whitney's ARE. statsmodels' noncentral t gives NaN for some very large effects
    (d = 19.8 at n = 6, alpha 0.0042); the normal approximation, then as good as 1, stands in."""
    nobs = n * ARE_MANN_WHITNEY
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = TTestIndPower().power(d, nobs, alpha, ratio=1)
    return float(p) if math.isfinite(p) else float(NormalIndPower().power(d, nobs, alpha, ratio=1))


def n_for_effect(
    effect_pct: float, sd_log: float, alpha: float, power: float = POWER, n_max: int = 2**40
) -> int | None:
    """Runs per side (both alike) for Mann-Whitney at level ``alpha`` to detect a change of
    ``effect_pct`` % with probability ``power`` at spread ``sd_log`` (see mde_pct); never below
    MIN_N nor n_attainable(alpha); None without a finite positive spread or effect, or beyond n_max.

    The smallest such n, found on the integers (power grows with n) rather than by statsmodels'
    root finder, which returns NaN when it fails to converge on very large or tiny effects."""
    if not (0 < sd_log < math.inf and 0 < effect_pct < math.inf):
        return None
    d = math.log1p(effect_pct / 100) / sd_log
    low = max(MIN_N, n_attainable(alpha))
    if _power(d, low, alpha) >= power:
        return low  # a large effect: the fewest runs that can reach alpha at all
    high = 2 * low
    while _power(d, high, alpha) < power:
        if high > n_max:
            return None
        low, high = high, 2 * high
    while high - low > 1:  # power(low) < power <= power(high)
        mid = (low + high) // 2
        low, high = (low, mid) if _power(d, mid, alpha) >= power else (mid, high)
    return high
