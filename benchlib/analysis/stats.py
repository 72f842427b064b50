"""Per-configuration summaries and comparisons against a baseline.

Implements docs/design.md "Statistics": the unit is the run; medians
with distribution-free CIs; Mann-Whitney U against the baseline, corrected
within families (the primary family: each test's headline metric, Holm; one
secondary family per kind of metric, Benjamini-Hochberg); effect = median
ratio - 1 with a CI (bootstrap up to BOOTSTRAP_MAX_N runs per side,
Maritz-Jarrett above) at the level the family's correction decided at, so that
a verdict and its interval never contradict; the minimum detectable effect of
each comparison at its n and spread.

Tables are polars frames. A configuration's values are gathered into a list
(in run order) by one group_by; the statistics then run on 2-D arrays, one
per sample size, with scipy's ``axis=`` where it has one.
"""
from __future__ import annotations

import math
import warnings
from collections.abc import Iterator, Mapping, Sequence
from functools import lru_cache

import numpy as np
import polars as pl
from scipy import stats
from scipy.stats import mstats
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.power import NormalIndPower, TTestIndPower

from benchlib.schema import headline_metric, metric_info

# A configuration: everything that identifies one sample of runs of one metric.
# test_params (every recorded parameter of the test) keeps runs of different
# settings apart even where a test name was reused for them.
RUN_CONFIG = ["campaign", "environment", "scenario", "test", "test_params", "streams", "message_size"]
CONFIG = [*RUN_CONFIG, "metric", "side"]
# Two configurations are compared when they differ only in the scenario.
PEERS = [c for c in CONFIG if c != "scenario"]

# Below 6 runs no two-sided 95 % distribution-free CI of the median exists
# (0.5**5 * 2 > 0.05), so neither a CI nor a verdict is given.
MIN_N = 6
INSUFFICIENT = "insufficient n"
WITHIN_NOISE = "~ within noise"
NEGLIGIBLE = "negligible"
# the Mann-Whitney test and the interval of the change (computed apart) disagree at the decision level
UNCLEAR = "inconclusive"

CORRECTIONS = {"holm": "Holm", "fdr_bh": "FDR (Benjamini-Hochberg)"}

# Families of comparisons, each corrected on its own: the headline metric of every test (and the
# contrasts of it) under analysis.correction; the other metrics one family per kind, Benjamini-Hochberg.
PRIMARY = "primary"
LATENCY, CPU, OTHER = "latency", "CPU", "other"
SECONDARY_CORRECTION = "fdr_bh"
FAMILY_ORDER = (PRIMARY, LATENCY, CPU, OTHER)

# Planned power of the minimum detectable effect.
POWER = 0.8
# Pitman efficiency of Mann-Whitney relative to the t test for normal data: it needs pi/3 times the runs.
ARE_MANN_WHITNEY = 3 / math.pi

# Above this many runs per side the normal approximation (with tie correction)
# is accurate to well below any alpha in use, and exact or permutation
# p-values cost time that grows with n (a 100k-run campaign has n ~ 1000).
EXACT_MAX_N = 50
# Up to this many runs on the smaller side the CI of the change is a
# bootstrap; above it, Maritz-Jarrett standard errors of both medians (cost
# linear in n where the bootstrap's is n_resamples x n); see delta_ci_method.
BOOTSTRAP_MAX_N = 50


def ok_values(metrics: pl.DataFrame, runs: pl.DataFrame) -> pl.DataFrame:
    """Metric rows of successful runs only, with each run's start time (for run order) and test_params."""
    ok = runs.filter(pl.col("outcome") == "ok").select("run_id", "started_at", "test_params")
    return metrics.join(ok, on="run_id", how="inner", validate="m:1")


def failed_runs(runs: pl.DataFrame) -> pl.DataFrame:
    """Runs whose outcome is not 'ok', counted per configuration (with their reasons)."""
    return (runs.filter(pl.col("outcome") != "ok")
            .group_by(RUN_CONFIG)
            .agg(failed_runs=pl.len(),
                 reasons=pl.col("failure_reason").drop_nulls().unique().sort().str.join("; "))
            .sort(RUN_CONFIG, nulls_last=True))


@lru_cache(maxsize=None)
def _median_ci_ranks(n: int, confidence: float = 0.95) -> tuple[int, int] | None:
    """0-based ranks of the order statistics bounding the median's CI for n values; None below MIN_N.

    They depend on n only, so scipy's quantile_test is asked once per n, on
    the ranks themselves (its interval is made of order statistics).
    """
    if n < MIN_N:
        return None
    ci = stats.quantile_test(np.arange(n), q=0, p=0.5).confidence_interval(confidence)
    return int(ci.low), int(ci.high)


def median_ci(x: np.ndarray, confidence: float = 0.95) -> tuple[float, float]:
    """Distribution-free CI of the median (order statistics, binomial); NaN below MIN_N runs."""
    ranks = _median_ci_ranks(len(x), confidence)
    if ranks is None:
        return math.nan, math.nan
    s = np.sort(x)
    return float(s[ranks[0]]), float(s[ranks[1]])


def _drift(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Spearman rho and p of each row (values in run order) vs run order; NaN for n < 3 or constant rows.

    Spearman's rho is Pearson's r of the ranks: pearsonr takes ``axis=``, spearmanr does not.
    """
    k, n = x.shape
    if n < 3:
        return np.full(k, math.nan), np.full(k, math.nan)
    with warnings.catch_warnings(), np.errstate(invalid="ignore", divide="ignore"):
        # constant samples have no rank correlation; NaN says so
        warnings.simplefilter("ignore", stats.ConstantInputWarning)
        res = stats.pearsonr(np.broadcast_to(np.arange(n, dtype=float), x.shape), stats.rankdata(x, axis=1), axis=1)
    return np.asarray(res.statistic, float), np.asarray(res.pvalue, float)


def drift(x_in_run_order: np.ndarray) -> tuple[float, float]:
    """Spearman rho and p-value of value vs run order; NaN when undefined (n < 3 or constant)."""
    rho, p = _drift(np.asarray(x_in_run_order, float)[None, :])
    return float(rho[0]), float(p[0])


def _stack(lists: pl.Series, idx: np.ndarray, n: int) -> np.ndarray:
    """Rows ``idx`` of a list column whose lists all hold n values, as a (len(idx), n) array."""
    return lists.gather(idx).explode().to_numpy().astype(float).reshape(len(idx), n)


def _buckets(*lists: pl.Series) -> Iterator[tuple[np.ndarray, list[np.ndarray]]]:
    """(row indices, one 2-D array per list column) for each distinct combination of list lengths."""
    lengths = np.stack([s.list.len().to_numpy() for s in lists], axis=1)
    for key in np.unique(lengths, axis=0):
        idx = np.flatnonzero((lengths == key).all(axis=1))
        yield idx, [_stack(s, idx, int(n)) for s, n in zip(lists, key)]


def _samples(metrics: pl.DataFrame, runs: pl.DataFrame) -> pl.DataFrame:
    """One row per configuration of the successful runs' metric rows (ok_values): unit, its finite
    values in run order (list column x), and how many non-finite values were left out of it (excluded).

    Each metric row is looked up among the successful runs once, on the run_id column alone (its
    run's start time, and its test_params as a small integer code); then one pass per (metric, side)
    groups that part of the table. Memory holds the lookup and one part, never the whole table
    joined with its runs, sorted and copied (a million-run campaign: 11M rows, parts of 2M at most).
    """
    ok = runs.lazy().filter(pl.col("outcome") == "ok").select("run_id", "started_at", "test_params").collect()
    if ok["run_id"].is_duplicated().any():
        ok_values(metrics, runs)  # raises polars' own error: a run_id names one run
    params = ok.select("test_params").unique(maintain_order=True).with_row_index("_params")
    ok = ok.join(params, on="test_params", how="left", nulls_equal=True).drop("test_params")
    run = (metrics.lazy().select("run_id").join(ok.lazy(), on="run_id", how="left", maintain_order="left")
           .select("started_at", "_params").collect())
    keys = [c if c != "test_params" else "_params" for c in CONFIG]
    # column by column: a frame's columns can be chunked differently (normalize's concat), and
    # selecting them together as a frame would first copy them all into matching chunks
    table = [metrics[c] for c in CONFIG if c != "test_params"] + [metrics["value"], metrics["unit"]]
    finite = pl.col("value").is_finite().fill_null(False)
    in_order = dict(by="started_at", maintain_order=True)  # run order, as a stable sort of the rows gives

    def cells(rows: pl.Series) -> pl.DataFrame:
        # both halves gathered alike (each comes out contiguous), then side by side: filtering the
        # table by a mask chunked otherwise would copy all of it first
        idx = rows.arg_true()
        return (pl.DataFrame([c.gather(idx) for c in table]).hstack(run[idx]).lazy()
                .group_by(keys)
                .agg(unit=pl.col("unit").sort_by(**in_order).first(),
                     x=pl.col("value").sort_by(**in_order).filter(finite.sort_by(**in_order)),
                     excluded=(~finite).sum())
                .collect())

    ran = run["_params"].is_not_null()  # the successful runs' rows
    parts = metrics.lazy().select("metric", "side").unique().collect(engine="streaming")
    if len(parts) <= 1:
        out = cells(ran)
    else:
        out = pl.concat([cells(ran & metrics["metric"].eq_missing(m) & metrics["side"].eq_missing(sd))
                         for m, sd in parts.iter_rows()])
    return (out.join(params, on="_params", how="left").select(*CONFIG, "unit", "x", "excluded")
            .sort(CONFIG, nulls_last=True))


def _flags(row: dict, alpha: float, cv_limit_pct: float) -> str:
    out = []
    if row["n"] < MIN_N:
        out.append(f"{INSUFFICIENT} ({row['n']} < {MIN_N})")
    if row["cv_pct"] > cv_limit_pct:
        out.append(f"CV {row['cv_pct']:.1f} % > {cv_limit_pct:g} %")
    if row["drift_p"] < alpha:
        out.append(f"drift (Spearman rho {row['drift_rho']:+.2f}, p {row['drift_p']:.3f})")
    if row["failed_runs"]:
        out.append(f"{row['failed_runs']} failed run(s)")
    if row["excluded"]:
        out.append(f"{row['excluded']} non-finite value(s) excluded")
    return "; ".join(out)


SUMMARY_COLUMNS = [*CONFIG, "unit", "n", "median", "ci_low", "ci_high", "iqr", "cv_pct", "drift_rho", "drift_p",
                   "excluded", "failed_runs", "flags"]


def summarize(metrics: pl.DataFrame, runs: pl.DataFrame, alpha: float = 0.05,
              cv_limit_pct: float = 5.0) -> pl.DataFrame:
    """One row per configuration: n, median and its 95 % CI, IQR, CV, drift, failed runs,
    non-finite values excluded, flags."""
    cells = _samples(metrics, runs)
    out = {c: np.full(len(cells), math.nan) for c in ("median", "ci_low", "ci_high", "iqr", "cv_pct",
                                                       "drift_rho", "drift_p")}
    for idx, (x,) in _buckets(cells["x"]):
        n = x.shape[1]
        if n == 0:  # every value non-finite: nothing to summarize, the flag says why
            continue
        out["median"][idx] = np.median(x, axis=1)
        if (ranks := _median_ci_ranks(n)) is not None:
            s = np.sort(x, axis=1)
            out["ci_low"][idx], out["ci_high"][idx] = s[:, ranks[0]], s[:, ranks[1]]
        out["iqr"][idx] = stats.iqr(x, axis=1)
        if n >= 2:
            with np.errstate(invalid="ignore", divide="ignore"):  # all-zero samples: CV undefined
                out["cv_pct"][idx] = 100 * stats.variation(x, axis=1, ddof=1)
        out["drift_rho"][idx], out["drift_p"][idx] = _drift(x)
    df = (cells.with_columns(n=pl.col("x").list.len().cast(pl.Int64), **{c: pl.Series(v) for c, v in out.items()})
          .join(failed_runs(runs).select(*RUN_CONFIG, "failed_runs"), on=RUN_CONFIG, how="left", nulls_equal=True)
          .with_columns(pl.col("failed_runs").fill_null(0).cast(pl.Int64), pl.col("excluded").cast(pl.Int64)))
    df = df.with_columns(flags=pl.Series([_flags(r, alpha, cv_limit_pct) for r in df.iter_rows(named=True)],
                                         dtype=pl.String))
    return df.select(SUMMARY_COLUMNS)


def _mwu_rows(x: np.ndarray, y: np.ndarray, seed: int, n_resamples: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Two-sided Mann-Whitney U of each row of x vs the same row of y: (U of x, p, method).

    scipy's exact null distribution assumes no ties, so with ties the p-value
    comes from permutations (all of them when there are at most n_resamples);
    large samples use the normal approximation with tie correction. Exact and
    asymptotic rows go to scipy in one call each (``axis=1``).
    """
    k = len(x)
    u, p = np.full(k, math.nan), np.full(k, math.nan)
    if min(x.shape[1], y.shape[1]) > EXACT_MAX_N:
        method = np.full(k, "asymptotic", dtype=object)
    else:
        pooled = np.sort(np.concatenate([x, y], axis=1), axis=1)
        ties = (np.diff(pooled, axis=1) == 0).any(axis=1)
        method = np.where(ties, "permutation", "exact").astype(object)
    for how in ("exact", "asymptotic"):
        rows = method == how
        if rows.any():
            res = stats.mannwhitneyu(x[rows], y[rows], alternative="two-sided", method=how, axis=1)
            u[rows], p[rows] = res.statistic, res.pvalue
    for i in np.flatnonzero(method == "permutation"):
        res = stats.mannwhitneyu(x[i], y[i], alternative="two-sided",
                                 method=stats.PermutationMethod(n_resamples=n_resamples, rng=seed))
        u[i], p[i] = res.statistic, res.pvalue
    return u, p, method


def mann_whitney(x: np.ndarray, y: np.ndarray, seed: int = 0, n_resamples: int = 9999) -> tuple[float, float, str]:
    """Two-sided Mann-Whitney U of x vs y: (U of x, p, method); see _mwu_rows."""
    u, p, method = _mwu_rows(np.asarray(x, float)[None, :], np.asarray(y, float)[None, :], seed, n_resamples)
    return float(u[0]), float(p[0]), str(method[0])


@lru_cache(maxsize=None)
def smallest_p(n1: int, n2: int) -> float:
    """The smallest two-sided Mann-Whitney p that n1 vs n2 runs can give (complete separation)."""
    return float(stats.mannwhitneyu(np.arange(n1), np.arange(n1, n1 + n2), method="exact").pvalue)


def _never_reaches(n1: int, n2: int, level: float) -> bool:
    """smallest_p(n1, n2) >= level. That p is 2 / C(n1 + n2, n1); where its logarithm lies below
    log(level) by more than 1 the answer is known without scipy's exact distribution, whose cost
    grows with n1 x n2 (n ~ 1000: 3 ms per pair, against microseconds here)."""
    log_p = math.log(2) - (math.lgamma(n1 + n2 + 1) - math.lgamma(n1 + 1) - math.lgamma(n2 + 1))
    if level > 0 and log_p < math.log(level) - 1:
        return False
    return smallest_p(n1, n2) >= level


def _log_median_ratio(x, y, axis=-1):
    return np.log(np.median(x, axis=axis)) - np.log(np.median(y, axis=axis))


def delta_ci_method(n: int, n_base: int) -> str:
    """Which CI of the change applies to n vs n_base runs (README: "Statistics")."""
    return "bootstrap" if min(n, n_base) <= BOOTSTRAP_MAX_N else "maritz-jarrett"


def _maritz_jarrett_ci(x: np.ndarray, y: np.ndarray, confidence: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CI of log(median x) - log(median y) per row, from the Maritz-Jarrett standard errors of the medians.

    Delta method: se(log m) ~ se(m) / m; the samples are independent, so the
    variances of the two logs add. Normal quantiles: this is the large-n method.
    """
    se_x = mstats.mjci(x, [0.5], axis=1)[:, 0] / np.median(x, axis=1)
    se_y = mstats.mjci(y, [0.5], axis=1)[:, 0] / np.median(y, axis=1)
    half = stats.norm.ppf(0.5 + confidence / 2) * np.hypot(se_x, se_y)
    center = _log_median_ratio(x, y, axis=1)
    return center - half, center + half


def _delta_rows(x: np.ndarray, y: np.ndarray, seed: int, n_resamples: int,
                confidence: float | np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(delta %, low, high) per row: median(x)/median(y) - 1 with a CI of the log median ratio
    at ``confidence`` (one level, or one per row).

    Bootstrap (percentile intervals, not BCa: BCa's jackknife acceleration is
    unreliable for a non-smooth statistic like the median) up to
    BOOTSTRAP_MAX_N runs per side; Maritz-Jarrett above. NaN where a value is
    <= 0 (the log ratio is undefined, e.g. zero retransmits).
    """
    k = len(x)
    out = np.full((3, k), math.nan)
    positive = (x.min(axis=1) > 0) & (y.min(axis=1) > 0)
    if not positive.any():
        return out[0], out[1], out[2]
    xs, ys = x[positive], y[positive]
    level = np.broadcast_to(np.asarray(confidence, float), (k,))[positive]
    center = _log_median_ratio(xs, ys, axis=1)
    if delta_ci_method(x.shape[1], y.shape[1]) == "bootstrap":
        lo, hi = np.empty(len(xs)), np.empty(len(xs))
        for i in range(len(xs)):
            ci = stats.bootstrap((xs[i], ys[i]), _log_median_ratio, n_resamples=n_resamples, vectorized=True,
                                 method="percentile", confidence_level=level[i], rng=seed).confidence_interval
            lo[i], hi[i] = ci.low, ci.high
    else:
        lo, hi = _maritz_jarrett_ci(xs, ys, level)
    out[:, positive] = 100 * np.expm1([center, lo, hi])
    return out[0], out[1], out[2]


def delta_pct(x: np.ndarray, y: np.ndarray, seed: int = 0, n_resamples: int = 9999,
              confidence: float = 0.95) -> tuple[float, float, float]:
    """median(x)/median(y) - 1 in %, with the CI of delta_ci_method(len(x), len(y)); see _delta_rows."""
    d, lo, hi = _delta_rows(np.asarray(x, float)[None, :], np.asarray(y, float)[None, :], seed, n_resamples,
                            confidence)
    return float(d[0]), float(lo[0]), float(hi[0])


def adjust(p: np.ndarray, correction: str = "holm", alpha: float = 0.05) -> np.ndarray:
    """p-values adjusted over the whole family; NaN entries are not part of it."""
    if correction not in CORRECTIONS:
        raise ValueError(f"correction must be one of {sorted(CORRECTIONS)}, got {correction!r}")
    p = np.asarray(p, float)
    out = np.full_like(p, np.nan)
    tested = ~np.isnan(p)
    if tested.any():
        # method named explicitly: statsmodels' default is Holm-Sidak
        out[tested] = multipletests(p[tested], alpha=alpha, method=correction)[1]
    return out


def decision_level(p_adj: np.ndarray, alpha: float, correction: str) -> float:
    """The per-comparison level the correction decided at: p < level exactly where p_adj < alpha.

    Holm rejecting R of m stops at step R + 1, whose threshold is alpha / (m - R): every rejected p
    lies below it (its own, smaller step passed), every other p at or above it. Benjamini-Hochberg
    rejecting R of m rejects exactly the p below R * alpha / m (alpha / m when R = 0), which is also
    the Benjamini-Yekutieli level of intervals with false coverage rate alpha. NaN entries
    (untested) are not part of the family.

    Intervals at this level match the decisions. For Holm they are simultaneous (Bonferroni)
    intervals only when nothing is rejected (R = 0: alpha / m); with rejections they are the
    step's level, narrower than simultaneous ones, and make no family-wise coverage claim.
    """
    p_adj = np.asarray(p_adj, float)
    tested = p_adj[~np.isnan(p_adj)]
    m, r = len(tested), int((tested < alpha).sum())
    if m == 0:
        return math.nan
    if correction == "holm":
        return alpha / (m - r) if r < m else alpha
    return alpha * max(r, 1) / m


def family_of(metric: str, headline: str | None) -> str:
    """The family a comparison of ``metric`` belongs to, in a test whose headline metric is ``headline``."""
    if metric == headline:
        return PRIMARY
    info = metric_info(metric)
    if info.percentile is not None or "latency" in metric or metric == "udp_jitter":
        return LATENCY
    return CPU if "cpu" in metric else OTHER


def headlines(values: pl.DataFrame, runs: pl.DataFrame) -> pl.DataFrame:
    """Per environment, test and test_params: the test's headline metric among those in ``values``
    (benchlib.schema.headline_metric: by the test's kind, its latency median when paced)."""
    keys = ["environment", "test", "test_params"]
    tests = runs.group_by(keys).agg(kind=pl.col("kind").first(), paced=pl.col("offered_qps").is_not_null().any())
    # the metrics present per test: distinct (run, metric) pairs streamed, never the joined table whole
    present = (values.lazy().select("environment", "test", "run_id", "metric")
               .join(runs.lazy().select("run_id", "test_params"), on="run_id", how="inner")
               .group_by(keys).agg(pl.col("metric").unique())
               .collect(engine="streaming"))
    rows = tests.join(present, on=keys, nulls_equal=True)
    return rows.select(*keys, headline=pl.Series(
        [headline_metric(r["kind"], r["paced"], set(r["metric"])) for r in rows.iter_rows(named=True)],
        dtype=pl.String))


def compared_values(values: pl.DataFrame, runs: pl.DataFrame, metrics: Sequence[str]) -> pl.DataFrame:
    """The rows of ``values`` a report compares: each test's headline metric (the primary family)
    and ``metrics`` (analysis.family_metrics: the secondary ones shown)."""
    keys = ["environment", "test", "test_params"]
    # each run's headline, then one streamed pass over the rows (in their order) that keeps the compared ones
    run_heads = (runs.lazy().select("run_id", *keys)
                 .join(headlines(values, runs).lazy(), on=keys, how="inner", nulls_equal=True)
                 .select("run_id", "environment", "test", "headline"))
    return (values.lazy()
            .join(run_heads, on=["run_id", "environment", "test"], how="left", nulls_equal=True,
                  maintain_order="left")
            .filter(pl.col("metric").is_in(list(metrics)) | (pl.col("metric") == pl.col("headline")))
            .select(values.columns)
            .collect(engine="streaming"))


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
        sx, sy = (stats.median_abs_deviation(v, axis=1, scale="normal") for v in (lx, ly))
        var = ((n - 1) * sx**2 + (m - 1) * sy**2) / (n + m - 2)
    return np.sqrt(var)


@lru_cache(maxsize=None)
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
    if min(n, n_base) < MIN_N or not 0 < sd_log < math.inf or _never_reaches(n, n_base, alpha):
        return math.nan
    with np.errstate(over="ignore"):
        return 100 * float(np.expm1(_mde_effect_size(n, n_base, alpha, power) * sd_log))


@lru_cache(maxsize=None)
def _mde_effect_size(n: int, n_base: int, alpha: float, power: float) -> float:
    """The standardized effect of mde_pct: it depends on n, n_base, alpha and power only, not on the
    spread, so comparisons at the same sizes and level share one root finding (statsmodels' solver
    took three quarters of compare at 100k runs)."""
    with warnings.catch_warnings():  # no convergence is a NaN effect size: "n/a", said by the caller
        warnings.simplefilter("ignore")
        d = TTestIndPower().solve_power(effect_size=None, nobs1=n * ARE_MANN_WHITNEY, alpha=alpha, power=power,
                                        ratio=n_base / n, alternative="two-sided")
    return float(d)


def _power(d: float, n: int, alpha: float) -> float:
    """Power of the two-sided two-sample t test at standardized effect ``d``, ``n`` runs per side
    scaled by Mann-Whitney's ARE. statsmodels' noncentral t gives NaN for some very large effects
    (d = 19.8 at n = 6, alpha 0.0042); the normal approximation, then as good as 1, stands in."""
    nobs = n * ARE_MANN_WHITNEY
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = TTestIndPower().power(d, nobs, alpha, ratio=1.0)
    return float(p) if math.isfinite(p) else float(NormalIndPower().power(d, nobs, alpha, ratio=1.0))


def n_for_effect(effect_pct: float, sd_log: float, alpha: float, power: float = POWER,
                 n_max: int = 2**40) -> int | None:
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


def noise_band(metric: str, noise_band_pct: float | Mapping[str, float]) -> float:
    """The +/- % band inside which a significant change is called negligible."""
    if not isinstance(noise_band_pct, Mapping):
        return float(noise_band_pct)
    band = noise_band_pct.get(metric, noise_band_pct.get("default"))
    if band is None:
        raise ValueError(f"no noise band for metric {metric!r}: add it or a 'default' to noise_band_pct")
    return float(band)


def verdict(p_adj: float, delta: float, low: float, high: float, alpha: float,
            band_pct: float, higher_is_better: bool) -> str:
    """The label shown next to a comparison (NaN p_adj means it was not tested: too few runs).

    [low, high] is the interval at the level the family's correction decided at (decision_level),
    so a significant p and an interval that excludes 0 should go together. They come from different
    methods (Mann-Whitney; bootstrap or Maritz-Jarrett), so they can disagree; then neither is
    believed and the label says which way they disagree.
    """
    if math.isnan(p_adj):
        return INSUFFICIENT
    significant = p_adj < alpha
    if math.isnan(delta):
        return "different (median ratio undefined: values <= 0)" if significant else WITHIN_NOISE
    excludes_0 = low > 0 or high < 0
    if significant != excludes_0:
        return (f"{UNCLEAR}: p_adj < {alpha:g} but the CI includes 0" if significant
                else f"{UNCLEAR}: the CI excludes 0 but p_adj >= {alpha:g}")
    if not significant:
        return WITHIN_NOISE
    if -band_pct <= low and high <= band_pct:
        return NEGLIGIBLE
    if delta == 0:
        word = "same median"
    else:
        word = "better" if (delta > 0) == higher_is_better else "worse"
    return f"{delta:+.1f} % [{low:+.1f}, {high:+.1f}] {word}"


COMPARISON_COLUMNS = [*CONFIG, "unit", "baseline", "family", "n", "n_base", "median", "median_base", "u", "p",
                      "test_method", "p_adj", "correction", "ci_level", "delta_pct", "delta_low", "delta_high",
                      "delta_method", "excluded", "noise_band_pct", "verdict", "sd_log", "mde_pct", "n_attainable"]


_COMPARISON_DTYPES = {
    "unit": pl.String, "baseline": pl.String, "family": pl.String, "n": pl.Int64, "n_base": pl.Int64,
    "median": pl.Float64, "median_base": pl.Float64, "u": pl.Float64, "p": pl.Float64, "test_method": pl.String,
    "p_adj": pl.Float64, "correction": pl.String, "ci_level": pl.Float64, "delta_pct": pl.Float64,
    "delta_low": pl.Float64, "delta_high": pl.Float64, "delta_method": pl.String, "excluded": pl.Int64,
    "noise_band_pct": pl.Float64, "verdict": pl.String, "sd_log": pl.Float64, "mde_pct": pl.Float64,
    "n_attainable": pl.Int64,
}


def _pairs(cells: pl.DataFrame, against: list[tuple[str, str]]) -> pl.DataFrame:
    """Each configuration of scenario s beside its peer of the reference (x_base), for every (s, ref)."""
    pairs = [
        cells.filter(pl.col("scenario") == s)
        .join(cells.filter(pl.col("scenario") == ref).drop("scenario", "unit"), on=PEERS, suffix="_base",
              nulls_equal=True)
        .with_columns(baseline=pl.lit(ref))
        for s, ref in against
    ]
    return pl.concat(pairs) if pairs else None


def compare(metrics: pl.DataFrame, runs: pl.DataFrame, baseline: str = "host", alpha: float = 0.05,
            correction: str = "holm", noise_band_pct: float | Mapping[str, float] = 2.0,
            seed: int = 0, n_resamples: int = 9999,
            contrasts: Sequence[Sequence[str]] = (), family: str | None = None,
            confidence: float | None = None) -> pl.DataFrame:
    """Every configuration vs the same configuration in the baseline scenario, plus each
    (scenario, reference) of `contrasts` (e.g. notrack vs conntrack), wherever both were measured.

    Families: each test's headline metric is the primary family, corrected by ``correction``; the
    other metrics form one family per kind (family_of), Benjamini-Hochberg. Pass the metrics a
    report stands behind (compared_values). ``family`` names one family for every row instead,
    corrected by ``correction`` (a section with a family of its own); ``confidence`` sets the level
    of the intervals where the caller corrects over a family of its own. A baseline that was measured
    but has no successful run gives no comparison (an empty table: the report says why); a baseline
    that is not in the campaign is an error.
    """
    if correction not in CORRECTIONS:
        raise ValueError(f"correction must be one of {sorted(CORRECTIONS)}, got {correction!r}")
    measured = set(runs["scenario"])
    if baseline not in measured:
        raise ValueError(f"baseline scenario {baseline!r} is not in the campaign; scenarios: {sorted(measured)}")
    cells = _samples(metrics, runs)
    present = set(cells["scenario"])
    against = [(s, baseline) for s in sorted(present - {baseline})] if baseline in present else []
    against += [(s, ref) for s, ref in contrasts if {s, ref} <= present and (s, ref) not in against]
    return _compare_pairs(_pairs(cells, against), cells.schema, headlines(metrics, runs), alpha, correction,
                          noise_band_pct, seed, n_resamples, family, confidence)


def compare_campaigns(metrics: pl.DataFrame, runs: pl.DataFrame, metrics_base: pl.DataFrame,
                      runs_base: pl.DataFrame, alpha: float = 0.05, correction: str = "holm",
                      noise_band_pct: float | Mapping[str, float] = 2.0, seed: int = 0,
                      n_resamples: int = 9999) -> pl.DataFrame:
    """Every configuration of one campaign vs the same configuration (every CONFIG key but the
    campaign) of a base campaign, wherever both were measured; the families of compare().

    Rows have the columns of compare(): ``campaign`` is the campaign, ``baseline`` the base campaign.
    """
    if correction not in CORRECTIONS:
        raise ValueError(f"correction must be one of {sorted(CORRECTIONS)}, got {correction!r}")
    cells, base = _samples(metrics, runs), _samples(metrics_base, runs_base)
    keys = [c for c in CONFIG if c != "campaign"]
    pairs = (cells.join(base.drop("unit"), on=keys, suffix="_base", nulls_equal=True)
             .with_columns(baseline=pl.col("campaign_base")).drop("campaign_base"))
    return _compare_pairs(pairs, cells.schema, headlines(metrics, runs), alpha, correction, noise_band_pct, seed,
                          n_resamples)


def _compare_pairs(pairs: pl.DataFrame | None, schema: pl.Schema, heads: pl.DataFrame, alpha: float,
                   correction: str, noise_band_pct: float | Mapping[str, float], seed: int, n_resamples: int,
                   family: str | None = None, confidence: float | None = None) -> pl.DataFrame:
    """The tests, the correction per family, the effects at each family's decision level, the MDE
    and the verdicts over all ``pairs``: the rows compare() returns."""
    if pairs is None or pairs.is_empty():
        return pl.DataFrame(schema={**{c: schema[c] for c in CONFIG}, **_COMPARISON_DTYPES})
    k = len(pairs)
    num = {c: np.full(k, math.nan) for c in ("median", "median_base", "u", "p", "sd_log", "delta_pct",
                                             "delta_low", "delta_high", "p_adj", "alpha_family")}
    test_method, delta_method = np.full(k, "", dtype=object), np.full(k, "", dtype=object)
    for idx, (x, y) in _buckets(pairs["x"], pairs["x_base"]):
        n, m = x.shape[1], y.shape[1]
        if n:
            num["median"][idx] = np.median(x, axis=1)
        if m:
            num["median_base"][idx] = np.median(y, axis=1)
        if min(n, m) < MIN_N:
            continue
        num["u"][idx], num["p"][idx], test_method[idx] = _mwu_rows(x, y, seed, n_resamples)
        num["sd_log"][idx] = pooled_log_sd(x, y)
        delta_method[idx] = delta_ci_method(n, m)
    # each comparison's family, then the correction within it and the level it decided at
    if family is None:
        pairs = pairs.join(heads, on=["environment", "test", "test_params"], how="left", nulls_equal=True)
        families = [family_of(mt, h) for mt, h in zip(pairs["metric"], pairs["headline"])]
    else:
        families = [family] * k
    families = np.array(families, dtype=object)
    corrections = {f: correction if f in (PRIMARY, family) else SECONDARY_CORRECTION for f in set(families)}
    for f, corr in corrections.items():
        rows = families == f
        num["p_adj"][rows] = adjust(num["p"][rows], corr, alpha)
        num["alpha_family"][rows] = decision_level(num["p_adj"][rows], alpha, corr)
    if confidence is not None:
        num["alpha_family"][:] = 1 - confidence
    # the change and its interval at that level (computed per row: levels differ between families)
    for idx, (x, y) in _buckets(pairs["x"], pairs["x_base"]):
        if min(x.shape[1], y.shape[1]) >= MIN_N:
            num["delta_pct"][idx], num["delta_low"][idx], num["delta_high"][idx] = _delta_rows(
                x, y, seed, n_resamples, 1 - num["alpha_family"][idx])
    n_runs, n_base = pairs["x"].list.len().to_numpy(), pairs["x_base"].list.len().to_numpy()
    mde = [mde_pct(int(a), int(b), sd, lvl) for a, b, sd, lvl in zip(n_runs, n_base, num["sd_log"],
                                                                       num["alpha_family"])]
    attainable = [n_attainable(float(lvl)) if not math.isnan(lvl) and _never_reaches(int(a), int(b), lvl)
                  else None
                  for a, b, lvl in zip(n_runs, n_base, num["alpha_family"])]
    df = pairs.with_columns(
        n=pl.Series(n_runs, dtype=pl.Int64), n_base=pl.Series(n_base, dtype=pl.Int64),
        excluded=(pl.col("excluded") + pl.col("excluded_base")).cast(pl.Int64),
        family=pl.Series(families, dtype=pl.String),
        test_method=pl.Series(test_method, dtype=pl.String), delta_method=pl.Series(delta_method, dtype=pl.String),
        correction=pl.Series([CORRECTIONS[corrections[f]] for f in families], dtype=pl.String),
        ci_level=pl.Series(1 - num.pop("alpha_family")),
        mde_pct=pl.Series(mde, dtype=pl.Float64), n_attainable=pl.Series(attainable, dtype=pl.Int64),
        noise_band_pct=pl.col("metric").replace_strict(
            {m: noise_band(m, noise_band_pct) for m in pairs["metric"].unique()}, return_dtype=pl.Float64),
        **{c: pl.Series(v) for c, v in num.items()})
    labels = []
    for r in df.iter_rows(named=True):
        if math.isnan(r["p_adj"]) and r["excluded"]:
            # not "insufficient n": the runs were there, their values were not numbers
            labels.append(f"not tested: {r['excluded']} non-finite value(s) excluded")
        else:
            labels.append(verdict(r["p_adj"], r["delta_pct"], r["delta_low"], r["delta_high"], alpha,
                                  r["noise_band_pct"], metric_info(r["metric"]).higher_is_better))
    return df.with_columns(verdict=pl.Series(labels, dtype=pl.String)).select(COMPARISON_COLUMNS)


def _fmt(v: float | None) -> str:
    return "-" if v is None or math.isnan(v) else f"{v:.4g}"


def change_text(r: dict) -> str:
    """A comparison's change in % with its interval and the interval's level (in steps of the
    instrument where resolution.annotate marked it below_resolution)."""
    if r["delta_pct"] is None or math.isnan(r["delta_pct"]):
        return ""
    if r.get("below_resolution"):
        from benchlib.analysis import resolution
        return resolution.change_text(r)
    return f"{r['delta_pct']:+.1f} [{r['delta_low']:+.1f}, {r['delta_high']:+.1f}] @ {100 * r['ci_level']:.4g} %"


def mde_text(r: dict) -> str:
    """A comparison's minimum detectable effect in %, or why there is none at its n."""
    if r["n_attainable"] is not None:
        return f"not attainable at n = {r['n']} (needs n >= {r['n_attainable']})"
    return "" if r["mde_pct"] is None or math.isnan(r["mde_pct"]) else f"{r['mde_pct']:.1f}"


# columns resolution.annotate and saturation.annotate add to comparisons that headline carries when present
ANNOTATIONS = ("below_resolution", "unresolved", "step", "steps", "delta_low_res", "delta_high_res", "cpu_bound",
               "cpu_bound_side", "cpu_bound_pct", "cpu_bound_pct_base")
CPU_LIMIT = "CPU limit"  # headline's column: the sides at their CPU limit (saturation.annotate explains)


def headline(summary: pl.DataFrame, comparisons: pl.DataFrame, baseline: str = "host") -> pl.DataFrame:
    """benchstat-like table: per family, test, metric and side, each scenario's median [95 % CI] and,
    against the baseline, the change in % with its CI at the family's decision level (the level
    shown), p_adj, the verdict and the minimum detectable effect (MDE, % of the baseline median); and,
    where the comparisons carry saturation.annotate's columns, the sides at their CPU limit with the
    highest median busy % (e.g. "client (100 %)")."""
    vs_base = comparisons.filter(pl.col("baseline") == baseline).select(
        *CONFIG, "family", "correction", "delta_pct", "delta_low", "delta_high", "ci_level", "p_adj", "verdict",
        "mde_pct", "n_attainable", *[c for c in ANNOTATIONS if c in comparisons.columns])
    df = summary.join(vs_base, on=CONFIG, how="left", nulls_equal=True)
    ci = [f"{_fmt(r['median'])} [{_fmt(r['ci_low'])}, {_fmt(r['ci_high'])}]" if r["n"] >= MIN_N
          else f"{_fmt(r['median'])} ({INSUFFICIENT})" for r in df.iter_rows(named=True)]
    rows = list(df.iter_rows(named=True))
    keys = ["environment", "test", "metric", "side"]
    return (df.with_columns(
                verdict=pl.when(pl.col("scenario") == baseline).then(pl.lit("baseline"))
                .otherwise(pl.col("verdict").fill_null("")),
                # the baseline's row belongs to the family of its comparisons
                family=pl.col("family").drop_nulls().first().over(keys, order_by="scenario"),
                correction=pl.col("correction").drop_nulls().first().over(keys, order_by="scenario"),
                _base_first=pl.col("scenario") != baseline,
                **{"median [95 % CI]": pl.Series(ci, dtype=pl.String),
                   "change % [CI @ level]": pl.Series([change_text(r) for r in rows], dtype=pl.String),
                   "MDE %": pl.Series([mde_text(r) for r in rows], dtype=pl.String)})
            .with_columns(_family_order=pl.col("family").replace_strict(
                {f: i for i, f in enumerate(FAMILY_ORDER)}, default=len(FAMILY_ORDER), return_dtype=pl.Int64))
            .sort(["_family_order", "environment", "test", "metric", "side", "_base_first", "scenario"],
                  maintain_order=True)
            .select("family", "correction", "environment", "test", "metric", "side", "unit", "scenario", "n",
                    "median [95 % CI]", "change % [CI @ level]", "p_adj", "verdict", "MDE %", "flags",
                    *([pl.when(pl.col("cpu_bound")).then(pl.format(
                        "{} ({} %)", "cpu_bound_side",
                        pl.max_horizontal("cpu_bound_pct", "cpu_bound_pct_base").round(0).cast(pl.Int64)))
                       .otherwise(pl.lit("")).alias(CPU_LIMIT)] if "cpu_bound" in df.columns else [])))


def _json_number(v):
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def to_metrics_dict(summary: pl.DataFrame, comparisons: pl.DataFrame, baseline: str) -> dict:
    """Headline numbers keyed campaign/environment/scenario/test/metric/side, JSON-ready (NaN -> null).

    A contrast (a comparison not against `baseline`) names its reference in
    the scenario part: ".../notrack vs conntrack/...".
    """
    def key(r: dict) -> str:
        scenario = r["scenario"] if r.get("baseline", baseline) == baseline else f"{r['scenario']} vs {r['baseline']}"
        return "/".join(str(v) for v in (r["campaign"], r["environment"], scenario, r["test"], r["metric"], r["side"]))

    return {
        "summary": {key(r): {c: _json_number(r[c]) for c in ("n", "median", "ci_low", "ci_high", "cv_pct")}
                    for r in summary.iter_rows(named=True)},
        "comparisons": {key(r): {**{c: _json_number(r[c])
                                    for c in ("median_base", "median", "delta_pct", "delta_low", "delta_high",
                                              "ci_level", "p", "p_adj", "mde_pct")},
                                 "baseline": r["baseline"], "family": r["family"], "correction": r["correction"],
                                 "verdict": r["verdict"]}
                        for r in comparisons.iter_rows(named=True)},
    }
