"""Comparisons paired by block (analysis.paired), for campaigns whose blocks are rounds.

A block runs every configuration once; on a cluster a block is a round that visits every pod network
once, so what drifts between rounds (the nodes' caches, the daemons' state, the machine's load) moves
every configuration of a round together. Compared run against run, that drift widens every interval;
compared within each round, it cancels.

Per comparison: the log ratio of its two runs in every block where both ran (d_b = log x_b - log
y_b), then the sign test of median(d) = 0 and the distribution-free interval of median(d) at the
family's level, both from scipy's quantile_test: one binomial procedure, so the test and the interval
agree. The change is exp(median d) - 1, the median of the per-block ratios (the unpaired change is
the ratio of the medians: the two agree when the drift is a common factor). A comparison with fewer
than MIN_N complete blocks, a value <= 0 or a block run twice stays unpaired (Mann-Whitney).
"""

from __future__ import annotations

import math
import warnings
from functools import cache

import numpy as np
import polars as pl
from scipy import stats
from statsmodels.stats.power import TTestPower

from .estimators import CONFIG, MIN_N

TEST = "sign test, paired by block"
INTERVAL = "sign-test interval, paired by block"
# Pitman efficiency of the sign test relative to the t test for normal data: it needs pi/2 times the pairs.
ARE_SIGN = 2 / math.pi


def block_ratios(
    metrics: pl.DataFrame | pl.LazyFrame, runs: pl.DataFrame, pairs: pl.DataFrame
) -> dict[int, np.ndarray]:
    """Row of ``pairs`` (a configuration beside its reference, named by ``baseline``) -> the log ratios of
    its run to the reference's run in each block where both ran, for rows with MIN_N such blocks or more
    and every value above 0; the other rows are absent. ``metrics`` may be a scan: one streamed pass."""
    ok = runs.lazy().filter(pl.col("outcome") == "ok").select("run_id", "test_params")
    values = (
        metrics.lazy()
        .join(ok, on="run_id", how="inner")
        .filter(pl.col("value").is_finite())
        .select(*CONFIG, "block", "value")
        .collect(engine="streaming")
    )
    rows = pairs.select(*CONFIG, "baseline").with_row_index("_row")
    mine = rows.drop("baseline").join(values, on=CONFIG, nulls_equal=True)
    theirs = (
        rows.drop("scenario")
        .rename({"baseline": "scenario"})
        .join(values, on=CONFIG, nulls_equal=True)
        .select("_row", "block", value_base="value")
    )
    both = mine.select("_row", "block", "value").join(theirs, on=["_row", "block"])
    per_row = both.group_by("_row").agg(
        d=(pl.col("value").log() - pl.col("value_base").log()),
        usable=(pl.col("value").min() > 0) & (pl.col("value_base").min() > 0) & pl.col("block").is_unique().all(),
    )
    usable = per_row.filter(pl.col("usable") & (pl.col("d").list.len() >= MIN_N))
    return {int(r): np.asarray(d, float) for r, d in zip(usable["_row"], usable["d"], strict=True)}


def sign_test(d: np.ndarray) -> tuple[float, float]:
    """(statistic, two-sided p) of the sign test of median(d) = 0 (scipy.stats.quantile_test)."""
    res = stats.quantile_test(d, q=0, p=0.5, alternative="two-sided")
    return float(res.statistic), float(res.pvalue)


def delta(d: np.ndarray, confidence: float) -> tuple[float, float, float]:
    """(change %, low, high): exp(median d) - 1 with the distribution-free interval of median(d)."""
    ci = stats.quantile_test(d, q=0, p=0.5).confidence_interval(confidence)
    return tuple(100 * float(np.expm1(v)) for v in (np.median(d), ci.low, ci.high))  # type: ignore[return-value]


def spread(d: np.ndarray) -> float:
    """The spread of the per-block log ratios: their normal-scaled median absolute deviation (robust to
    a stray block, as the unpaired pooled spread is)."""
    return float(stats.median_abs_deviation(d, scale="normal"))  # pyright: ignore[reportArgumentType] (scipy documents scale="normal")


def smallest_p(n: int) -> float:
    """The smallest two-sided sign-test p of n pairs (every ratio on one side): 2 / 2^n."""
    return min(1.0, 2 * 0.5**n)


@cache
def n_attainable(alpha: float, n_max: int = 1000) -> int:
    """The fewest complete blocks whose sign test can give p < alpha."""
    return next(n for n in range(1, n_max) if smallest_p(n) < alpha)


def mde_pct(n: int, sd: float, alpha: float, power: float) -> float:
    """The change in % that the sign test at ``alpha`` detects with probability ``power`` from n blocks
    whose log ratios spread as ``sd``: the one-sample t test's power (statsmodels TTestPower) with n
    scaled by the sign test's efficiency 2/pi; NaN where n blocks cannot reach alpha or no spread is known."""
    if n < MIN_N or not 0 < sd < math.inf or smallest_p(n) >= alpha:
        return math.nan
    with warnings.catch_warnings():  # no convergence is a NaN effect size: "n/a", said by the caller
        warnings.simplefilter("ignore")
        effect = TTestPower().solve_power(effect_size=None, nobs=n * ARE_SIGN, alpha=alpha, power=power)
    return 100 * float(np.expm1(float(effect) * sd))
