"""Per-configuration summaries and comparisons against a baseline.

Implements docs/design.md "Statistics": the unit is the run; medians
with distribution-free CIs; Mann-Whitney U against the baseline, corrected
within families (the primary family: each test's headline metric, Holm; one
secondary family per kind of metric, Benjamini-Hochberg); effect = median
ratio - 1 with a CI (bootstrap up to BOOTSTRAP_MAX_N runs per side,
Maritz-Jarrett above) at the level the family's correction decided at, so that
a verdict and its interval never contradict; the minimum detectable effect of
each comparison at its n and spread.

The comparisons live here; the estimators, the power and the families are
modules of their own (estimators.py, power.py, families.py), whose public
names this module also gives, so that ``stats.X`` reads the same everywhere.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import polars as pl
from scipy import stats
from scipy.stats import mstats

from benchlib.settings.analysis import DEFAULT_ANALYSIS
from benchlib.vocabulary.schema import metric_info

if TYPE_CHECKING:
    from benchlib.settings.analysis import Analysis

# `X as X`: names of the split-off modules that this module re-exports, so that `stats.X` reads the same everywhere
from . import paired as paired_module
from .estimators import (
    CONFIG,
    INSUFFICIENT,
    MIN_N,
    RUN_CONFIG as RUN_CONFIG,
    buckets,
    failed_runs as failed_runs,
    median_ci as median_ci,
    ok_values as ok_values,
    samples,
    successful_runs as successful_runs,
    summarize as summarize,
)
from .families import (
    CORRECTIONS,
    CPU as CPU,
    FAMILY_ORDER as FAMILY_ORDER,
    LATENCY as LATENCY,
    OTHER as OTHER,
    PRIMARY,
    SECONDARY_CORRECTION,
    adjust,
    compared_values as compared_values,
    decision_level,
    family_of,
    headlines,
)
from .power import (
    POWER as POWER,
    mde_pct,
    n_attainable,
    n_for_effect as n_for_effect,
    never_reaches,
    pooled_log_sd,
    smallest_p as smallest_p,
)
from .verdicts import VERDICT_COLUMNS, Direction, Kind, Verdict

# Two configurations are compared when they differ only in the scenario.
PEERS = [c for c in CONFIG if c != "scenario"]
WITHIN_NOISE = "~ within noise"
NEGLIGIBLE = "negligible"
# the Mann-Whitney test and the interval of the change (computed apart) disagree at the decision level
UNCLEAR = "inconclusive"
N_RESAMPLES = 9999  # bootstrap and permutation resamples of every interval and exact test
SAME_MEDIAN = "same median"  # a significant change whose medians are equal

# Above this many runs per side the normal approximation (with tie correction)
# is accurate to well below any alpha in use, and exact or permutation
# p-values cost time that grows with n (a 100k-run campaign has n ~ 1000).
EXACT_MAX_N = 50
# Up to this many runs on the smaller side the CI of the change is a
# bootstrap; above it, Maritz-Jarrett standard errors of both medians (cost
# linear in n where the bootstrap's is n_resamples x n); see delta_ci_method.
BOOTSTRAP_MAX_N = 50


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
        permutation = stats.PermutationMethod(n_resamples=n_resamples, rng=seed)
        res = stats.mannwhitneyu(x[i], y[i], alternative="two-sided", method=permutation)  # pyright: ignore[reportArgumentType] (scipy documents a PermutationMethod; its annotation says str)
        u[i], p[i] = res.statistic, res.pvalue
    return u, p, method


def mann_whitney(
    x: np.ndarray, y: np.ndarray, seed: int = DEFAULT_ANALYSIS.seed, n_resamples: int = N_RESAMPLES
) -> tuple[float, float, str]:
    """Two-sided Mann-Whitney U of x vs y: (U of x, p, method); see _mwu_rows."""
    u, p, method = _mwu_rows(np.asarray(x, float)[None, :], np.asarray(y, float)[None, :], seed, n_resamples)
    return float(u[0]), float(p[0]), str(method[0])


def _log_median_ratio(x, y, axis=-1):
    return np.log(np.median(x, axis=axis)) - np.log(np.median(y, axis=axis))


def delta_ci_method(n: int, n_base: int) -> str:
    """Which CI of the change applies to n vs n_base runs (docs/concepts/statistics.md)."""
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


def _delta_rows(
    x: np.ndarray, y: np.ndarray, seed: int, n_resamples: int, confidence: float | np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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
            ci = stats.bootstrap(
                (xs[i], ys[i]),
                _log_median_ratio,
                n_resamples=n_resamples,
                vectorized=True,
                method="percentile",
                confidence_level=level[i],
                rng=seed,
            ).confidence_interval
            lo[i], hi[i] = ci.low, ci.high
    else:
        lo, hi = _maritz_jarrett_ci(xs, ys, level)
    out[:, positive] = 100 * np.expm1([center, lo, hi])
    return out[0], out[1], out[2]


def delta_pct(
    x: np.ndarray,
    y: np.ndarray,
    seed: int = DEFAULT_ANALYSIS.seed,
    n_resamples: int = N_RESAMPLES,
    confidence: float = 0.95,
) -> tuple[float, float, float]:
    """median(x)/median(y) - 1 in %, with the CI of delta_ci_method(len(x), len(y)); see _delta_rows."""
    d, lo, hi = _delta_rows(np.asarray(x, float)[None, :], np.asarray(y, float)[None, :], seed, n_resamples, confidence)
    return float(d[0]), float(lo[0]), float(hi[0])


def noise_band(metric: str, noise_band_pct: float | Mapping[str, float]) -> float:
    """The +/- % band inside which a significant change is called negligible."""
    if not isinstance(noise_band_pct, Mapping):
        return float(noise_band_pct)
    band = noise_band_pct.get(metric, noise_band_pct.get("default"))
    if band is None:
        raise ValueError(f"no noise band for metric {metric!r}: add it or a 'default' to noise_band_pct")
    return float(band)


def verdict(
    p_adj: float, delta: float, low: float, high: float, alpha: float, band_pct: float, higher_is_better: bool
) -> Verdict:
    """The verdict of a comparison: its label, kind and direction (NaN p_adj means it was not tested:
    too few runs).

    [low, high] is the interval at the level the family's correction decided at (decision_level),
    so a significant p and an interval that excludes 0 should go together. They come from different
    methods (Mann-Whitney; bootstrap or Maritz-Jarrett), so they can disagree; then neither is
    believed and the label says which way they disagree.
    """
    if math.isnan(p_adj):
        return Verdict(INSUFFICIENT, Kind.INSUFFICIENT)
    significant = p_adj < alpha
    if math.isnan(delta):
        if significant:
            return Verdict("different (median ratio undefined: values <= 0)", Kind.FINDING)
        return Verdict(WITHIN_NOISE, Kind.NOISE)
    excludes_0 = low > 0 or high < 0
    if significant != excludes_0:
        return Verdict(
            f"{UNCLEAR}: p_adj < {alpha:g} but the CI includes 0"
            if significant
            else f"{UNCLEAR}: the CI excludes 0 but p_adj >= {alpha:g}",
            Kind.INCONCLUSIVE,
        )
    if not significant:
        return Verdict(WITHIN_NOISE, Kind.NOISE)
    if -band_pct <= low and high <= band_pct:
        return Verdict(NEGLIGIBLE, Kind.NEGLIGIBLE)
    if delta == 0:
        return Verdict(f"{delta:+.1f} % [{low:+.1f}, {high:+.1f}] {SAME_MEDIAN}", Kind.FINDING)
    way = Direction.BETTER if (delta > 0) == higher_is_better else Direction.WORSE
    return Verdict(f"{delta:+.1f} % [{low:+.1f}, {high:+.1f}] {way}", Kind.FINDING, way)


COMPARISON_COLUMNS = [
    *CONFIG,
    "unit",
    "baseline",
    "family",
    "n",
    "n_base",
    "median",
    "median_base",
    "u",
    "p",
    "test_method",
    "p_adj",
    "correction",
    "ci_level",
    "delta_pct",
    "delta_low",
    "delta_high",
    "delta_method",
    "excluded",
    "noise_band_pct",
    *VERDICT_COLUMNS,
    "sd_log",
    "mde_pct",
    "n_attainable",
]


_COMPARISON_DTYPES = {
    "unit": pl.String,
    "baseline": pl.String,
    "family": pl.String,
    "n": pl.Int64,
    "n_base": pl.Int64,
    "median": pl.Float64,
    "median_base": pl.Float64,
    "u": pl.Float64,
    "p": pl.Float64,
    "test_method": pl.String,
    "p_adj": pl.Float64,
    "correction": pl.String,
    "ci_level": pl.Float64,
    "delta_pct": pl.Float64,
    "delta_low": pl.Float64,
    "delta_high": pl.Float64,
    "delta_method": pl.String,
    "excluded": pl.Int64,
    "noise_band_pct": pl.Float64,
    "verdict": pl.String,
    "verdict_kind": pl.String,
    "verdict_direction": pl.String,
    "sd_log": pl.Float64,
    "mde_pct": pl.Float64,
    "n_attainable": pl.Int64,
}


def _pairs(cells: pl.DataFrame, against: list[tuple[str, str]]) -> pl.DataFrame | None:
    """Each configuration of scenario s beside its peer of the reference (x_base), for every (s, ref)."""
    pairs = [
        cells.filter(pl.col("scenario") == s)
        .join(
            cells.filter(pl.col("scenario") == ref).drop("scenario", "unit"), on=PEERS, suffix="_base", nulls_equal=True
        )
        .with_columns(baseline=pl.lit(ref))
        for s, ref in against
    ]
    return pl.concat(pairs) if pairs else None


def compared_pairs(
    scenarios: Iterable[str], baseline: str, contrasts: Sequence[Sequence[str]] = ()
) -> list[tuple[str, str]]:
    """The (scenario, reference) pairs an analysis compares among ``scenarios``: each against the baseline
    (none without it), then each of ``contrasts`` whose two scenarios are both there."""
    present = set(scenarios)
    against = [(s, baseline) for s in sorted(present - {baseline})] if baseline in present else []
    return against + [(s, ref) for s, ref in contrasts if {s, ref} <= present and (s, ref) not in against]


def compare(
    metrics: pl.DataFrame | pl.LazyFrame,
    runs: pl.DataFrame,
    baseline: str = DEFAULT_ANALYSIS.baseline,
    alpha: float = DEFAULT_ANALYSIS.alpha,
    correction: str = DEFAULT_ANALYSIS.correction,
    noise_band_pct: float | Mapping[str, float] = DEFAULT_ANALYSIS.noise_band_pct,
    seed: int = DEFAULT_ANALYSIS.seed,
    n_resamples: int = N_RESAMPLES,
    contrasts: Sequence[Sequence[str]] = (),
    family: str | None = None,
    confidence: float | None = None,
    paired: bool = False,
) -> pl.DataFrame:
    """Every configuration vs the same configuration in the baseline scenario, plus each
    (scenario, reference) of `contrasts` (e.g. notrack vs conntrack), wherever both were measured.

    Families: each test's headline metric is the primary family, corrected by ``correction``; the
    other metrics form one family per kind (family_of), Benjamini-Hochberg. Pass the metrics a
    report stands behind (compared_values). ``family`` names one family for every row instead,
    corrected by ``correction`` (a section with a family of its own); ``confidence`` sets the level
    of the intervals where the caller corrects over a family of its own. ``paired``: each comparison
    within the blocks where both configurations ran, where it can be (paired.py). A baseline that was measured
    but has no successful run gives no comparison (an empty table: the report says why); a baseline
    that is not in the campaign is an error.
    """
    if correction not in CORRECTIONS:
        raise ValueError(f"correction must be one of {sorted(CORRECTIONS)}, got {correction!r}")
    measured = set(runs["scenario"])
    if baseline not in measured:
        raise ValueError(f"baseline scenario {baseline!r} is not in the campaign; scenarios: {sorted(measured)}")
    cells = samples(metrics, runs)
    pairs = _pairs(cells, compared_pairs(cells["scenario"], baseline, contrasts))
    return _compare_pairs(
        pairs,
        cells.schema,
        headlines(metrics, runs),
        alpha,
        correction,
        noise_band_pct,
        seed,
        n_resamples,
        family,
        confidence,
        paired_module.block_ratios(metrics, runs, pairs) if paired and pairs is not None else None,
    )


def compare_campaigns(
    metrics: pl.DataFrame,
    runs: pl.DataFrame,
    metrics_base: pl.DataFrame,
    runs_base: pl.DataFrame,
    alpha: float = DEFAULT_ANALYSIS.alpha,
    correction: str = DEFAULT_ANALYSIS.correction,
    noise_band_pct: float | Mapping[str, float] = DEFAULT_ANALYSIS.noise_band_pct,
    seed: int = DEFAULT_ANALYSIS.seed,
    n_resamples: int = N_RESAMPLES,
) -> pl.DataFrame:
    """Every configuration of one campaign vs the same configuration (every CONFIG key but the
    campaign) of a base campaign, wherever both were measured; the families of compare().

    Rows have the columns of compare(): ``campaign`` is the campaign, ``baseline`` the base campaign.
    """
    if correction not in CORRECTIONS:
        raise ValueError(f"correction must be one of {sorted(CORRECTIONS)}, got {correction!r}")
    cells, base = samples(metrics, runs), samples(metrics_base, runs_base)
    keys = [c for c in CONFIG if c != "campaign"]
    pairs = (
        cells.join(base.drop("unit"), on=keys, suffix="_base", nulls_equal=True)
        .with_columns(baseline=pl.col("campaign_base"))
        .drop("campaign_base")
    )
    return _compare_pairs(
        pairs, cells.schema, headlines(metrics, runs), alpha, correction, noise_band_pct, seed, n_resamples
    )


def _compare_pairs(
    pairs: pl.DataFrame | None,
    schema: pl.Schema,
    heads: pl.DataFrame,
    alpha: float,
    correction: str,
    noise_band_pct: float | Mapping[str, float],
    seed: int,
    n_resamples: int,
    family: str | None = None,
    confidence: float | None = None,
    paired: dict[int, np.ndarray] | None = None,
) -> pl.DataFrame:
    """The tests, the correction per family, the effects at each family's decision level, the MDE
    and the verdicts over all ``pairs``: the rows compare() returns. The rows in ``paired`` (row ->
    per-block log ratios) are tested and estimated within blocks (paired.py)."""
    paired = paired or {}
    if pairs is None or pairs.is_empty():
        return pl.DataFrame(schema={**{c: schema[c] for c in CONFIG}, **_COMPARISON_DTYPES})
    k = len(pairs)
    num = {
        c: np.full(k, math.nan)
        for c in (
            "median",
            "median_base",
            "u",
            "p",
            "sd_log",
            "delta_pct",
            "delta_low",
            "delta_high",
            "p_adj",
            "alpha_family",
        )
    }
    test_method, delta_method = np.full(k, "", dtype=object), np.full(k, "", dtype=object)
    for idx, (x, y) in buckets(pairs["x"], pairs["x_base"]):
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
    for i, d in paired.items():
        num["u"][i], num["p"][i] = paired_module.sign_test(d)
        num["sd_log"][i] = paired_module.spread(d)
        test_method[i], delta_method[i] = paired_module.TEST, paired_module.INTERVAL
    # each comparison's family, then the correction within it and the level it decided at
    if family is None:
        pairs = pairs.join(heads, on=["environment", "test", "test_params"], how="left", nulls_equal=True)
        families = [family_of(mt, h) for mt, h in zip(pairs["metric"], pairs["headline"], strict=True)]
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
    for idx, (x, y) in buckets(pairs["x"], pairs["x_base"]):
        if min(x.shape[1], y.shape[1]) >= MIN_N:
            num["delta_pct"][idx], num["delta_low"][idx], num["delta_high"][idx] = _delta_rows(
                x, y, seed, n_resamples, 1 - num["alpha_family"][idx]
            )
    for i, d in paired.items():
        num["delta_pct"][i], num["delta_low"][i], num["delta_high"][i] = paired_module.delta(
            d, 1 - num["alpha_family"][i]
        )
    n_runs, n_base = pairs["x"].list.len().to_numpy().copy(), pairs["x_base"].list.len().to_numpy().copy()
    mde = [
        mde_pct(int(a), int(b), sd, lvl)
        for a, b, sd, lvl in zip(n_runs, n_base, num["sd_log"], num["alpha_family"], strict=True)
    ]
    attainable = [
        n_attainable(float(lvl)) if not math.isnan(lvl) and never_reaches(int(a), int(b), lvl) else None
        for a, b, lvl in zip(n_runs, n_base, num["alpha_family"], strict=True)
    ]
    for i, d in paired.items():  # a paired comparison's n is its blocks, its power the sign test's
        n_runs[i] = n_base[i] = len(d)
        level = num["alpha_family"][i]
        mde[i] = paired_module.mde_pct(len(d), num["sd_log"][i], level, POWER)
        attainable[i] = paired_module.n_attainable(level) if paired_module.smallest_p(len(d)) >= level else None
    df = pairs.with_columns(
        n=pl.Series(n_runs, dtype=pl.Int64),
        n_base=pl.Series(n_base, dtype=pl.Int64),
        excluded=(pl.col("excluded") + pl.col("excluded_base")).cast(pl.Int64),
        family=pl.Series(families, dtype=pl.String),
        test_method=pl.Series(test_method, dtype=pl.String),
        delta_method=pl.Series(delta_method, dtype=pl.String),
        correction=pl.Series([CORRECTIONS[corrections[f]] for f in families], dtype=pl.String),
        ci_level=pl.Series(1 - num.pop("alpha_family")),
        mde_pct=pl.Series(mde, dtype=pl.Float64),
        n_attainable=pl.Series(attainable, dtype=pl.Int64),
        noise_band_pct=pl.col("metric").replace_strict(
            {m: noise_band(m, noise_band_pct) for m in pairs["metric"].unique()}, return_dtype=pl.Float64
        ),
        **{c: pl.Series(v) for c, v in num.items()},
    )
    labels: list[Verdict] = []
    for r in df.iter_rows(named=True):
        if math.isnan(r["p_adj"]) and r["excluded"]:
            # not "insufficient n": the runs were there, their values were not numbers
            labels.append(Verdict(f"not tested: {r['excluded']} non-finite value(s) excluded", Kind.EXCLUDED))
        else:
            labels.append(
                verdict(
                    r["p_adj"],
                    r["delta_pct"],
                    r["delta_low"],
                    r["delta_high"],
                    alpha,
                    r["noise_band_pct"],
                    metric_info(r["metric"]).higher_is_better,
                )
            )
    return df.with_columns(verdict_columns(labels)).select(COMPARISON_COLUMNS)


def verdict_columns(verdicts: Sequence[Verdict], prefix: str = "") -> list[pl.Series]:
    """The columns of ``verdicts``: ``{prefix}verdict``, ``{prefix}verdict_kind``, ``{prefix}verdict_direction``."""
    return [
        pl.Series(f"{prefix}verdict", [v.text for v in verdicts], dtype=pl.String),
        pl.Series(f"{prefix}verdict_kind", [str(v.kind) for v in verdicts], dtype=pl.String),
        pl.Series(f"{prefix}verdict_direction", [str(v.direction) for v in verdicts], dtype=pl.String),
    ]


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
        "summary": {
            key(r): {c: _json_number(r[c]) for c in ("n", "median", "ci_low", "ci_high", "cv_pct")}
            for r in summary.iter_rows(named=True)
        },
        "comparisons": {
            key(r): {
                **{
                    c: _json_number(r[c])
                    for c in (
                        "median_base",
                        "median",
                        "delta_pct",
                        "delta_low",
                        "delta_high",
                        "ci_level",
                        "p",
                        "p_adj",
                        "mde_pct",
                    )
                },
                "baseline": r["baseline"],
                "family": r["family"],
                "correction": r["correction"],
                "verdict": r["verdict"],
            }
            for r in comparisons.iter_rows(named=True)
        },
    }


def compare_as(
    compared: pl.DataFrame | pl.LazyFrame, runs: pl.DataFrame, settings: Analysis, confidence: float | None = None
) -> pl.DataFrame:
    """`compare` with the analysis settings: the baseline, contrasts, correction, noise band and seed
    they name (the analysis at alpha, the stopping rule of a run until precise at its look's level)."""
    s = settings
    return compare(
        compared,
        runs,
        baseline=s.baseline,
        alpha=s.alpha,
        correction=s.correction,
        noise_band_pct=s.noise_band_pct,
        seed=s.seed,
        contrasts=s.contrasts,
        confidence=confidence,
        paired=s.paired,
    )
