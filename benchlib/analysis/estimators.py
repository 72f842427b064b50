"""Per-configuration estimators: each configuration's values in run order, its median with a
distribution-free CI, spread, drift and the checks that flag it (docs/design.md "Statistics").

A configuration's values are gathered into a list (in run order) by one group_by per part; the
statistics then run on 2-D arrays, one per sample size, with scipy's ``axis=`` where it has one.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator
from functools import cache
from typing import Any

import numpy as np
import polars as pl
from scipy import stats

from benchlib.settings.analysis import DEFAULT_ANALYSIS

# A configuration: everything that identifies one sample of runs of one metric.
# test_params (every recorded parameter of the test) keeps runs of different
# settings apart even where a test name was reused for them.
RUN_CONFIG = ["campaign", "environment", "scenario", "test", "test_params", "streams", "message_size"]
CONFIG = [*RUN_CONFIG, "metric", "side"]

# Below 6 runs no two-sided 95 % distribution-free CI of the median exists
# (0.5**5 * 2 > 0.05), so neither a CI nor a verdict is given.
MIN_N = 6
INSUFFICIENT = "insufficient n"


def ok_values(metrics: pl.DataFrame, runs: pl.DataFrame) -> pl.DataFrame:
    """Metric rows of successful runs only, with each run's start time (for run order) and test_params."""
    ok = runs.filter(pl.col("outcome") == "ok").select("run_id", "started_at", "test_params")
    return metrics.join(ok, on="run_id", how="inner", validate="m:1")


def failed_runs(runs: pl.DataFrame) -> pl.DataFrame:
    """Runs whose outcome is not 'ok' (failed, or disturbed: other processes took their CPUs), counted
    per configuration (with their reasons)."""
    return (
        runs.filter(pl.col("outcome") != "ok")
        .group_by(RUN_CONFIG)
        .agg(
            failed_runs=pl.len(),
            disturbed_runs=(pl.col("outcome") == "disturbed").sum().cast(pl.Int64),
            reasons=pl.col("failure_reason").drop_nulls().unique().sort().str.join("; "),
        )
        .sort(RUN_CONFIG, nulls_last=True)
    )


@cache
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
    return np.asarray(res.statistic, float), np.asarray(res.pvalue, float)  # pyright: ignore[reportAttributeAccessIssue] (scipy's result classes are not typed)


def drift(x_in_run_order: np.ndarray) -> tuple[float, float]:
    """Spearman rho and p-value of value vs run order; NaN when undefined (n < 3 or constant)."""
    rho, p = _drift(np.asarray(x_in_run_order, float)[None, :])
    return float(rho[0]), float(p[0])


def _stack(lists: pl.Series, idx: np.ndarray, n: int) -> np.ndarray:
    """Rows ``idx`` of a list column whose lists all hold n values, as a (len(idx), n) array."""
    return lists.gather(idx).explode().to_numpy().astype(float).reshape(len(idx), n)


def buckets(*lists: pl.Series) -> Iterator[tuple[np.ndarray, list[np.ndarray]]]:
    """(row indices, one 2-D array per list column) for each distinct combination of list lengths."""
    lengths = np.stack([s.list.len().to_numpy() for s in lists], axis=1)
    for key in np.unique(lengths, axis=0):
        idx = np.flatnonzero((lengths == key).all(axis=1))
        yield idx, [_stack(s, idx, int(n)) for s, n in zip(lists, key, strict=True)]


def successful_runs(runs: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The successful runs as (run_id, started_at, _config), and their configurations as (_config,
    *RUN_CONFIG). Grouping a run's rows by one integer instead of seven columns (long strings among
    them) keeps the groupings of a million runs in hundreds of MiB: polars holds every row's keys."""
    ok = runs.lazy().filter(pl.col("outcome") == "ok")
    configs = ok.select(RUN_CONFIG).unique(maintain_order=True).with_row_index("_config").collect(engine="streaming")
    coded = (
        ok.join(configs.lazy(), on=RUN_CONFIG, how="left", nulls_equal=True, maintain_order="left")
        .select("run_id", "started_at", "_config")
        .collect(engine="streaming")
    )
    if coded["run_id"].is_duplicated().any():
        ok_values(pl.DataFrame(schema={"run_id": pl.String}), runs)  # raises polars' own error: a run_id names one run
    return coded, configs


def samples(metrics: pl.DataFrame | pl.LazyFrame, runs: pl.DataFrame) -> pl.DataFrame:
    """One row per configuration of the successful runs' metric rows (ok_values): unit, its finite
    values in run order (list column x), and how many non-finite values were left out of it (excluded).

    One pass per (metric, side): only that part's rows and the columns it needs are read (from a
    scan: predicate and projection pushdown), each looked up among the successful runs (its run's
    start time and configuration code) and grouped. Memory holds the lookup and one part, never the
    whole table (a million-run campaign: 11M rows, parts of 1M).
    """
    ok, configs = successful_runs(runs)
    finite = pl.col("value").is_finite().fill_null(False)
    in_order: dict[str, Any] = dict(by="started_at", maintain_order=True)  # run order, as a stable sort gives

    def cells(metric: str | None, side: str | None) -> pl.DataFrame:
        part = pl.col("metric").eq_missing(metric) & pl.col("side").eq_missing(side)
        return (
            metrics.lazy()
            .filter(part)
            .select("run_id", "value", "unit")
            .join(ok.lazy(), on="run_id", how="inner", maintain_order="left")  # the successful runs' rows
            .group_by("_config")
            .agg(
                unit=pl.col("unit").sort_by(**in_order).first(),
                x=pl.col("value").sort_by(**in_order).filter(finite.sort_by(**in_order)),
                excluded=(~finite).sum(),
            )
            .with_columns(metric=pl.lit(metric, dtype=pl.String), side=pl.lit(side, dtype=pl.String))
            .collect()
        )

    parts = metrics.lazy().select("metric", "side").unique().collect(engine="streaming")
    out = pl.concat([cells(m, sd) for m, sd in parts.iter_rows()] or [cells(None, None)])
    return (
        out.join(configs, on="_config", how="left")
        .select(*CONFIG, "unit", "x", "excluded")
        .sort(CONFIG, nulls_last=True)
    )


def _flags(row: dict, alpha: float, cv_limit_pct: float) -> str:
    out = []
    if row["n"] < MIN_N:
        out.append(f"{INSUFFICIENT} ({row['n']} < {MIN_N})")
    if row["cv_pct"] > cv_limit_pct:
        out.append(f"CV {row['cv_pct']:.1f} % > {cv_limit_pct:g} %")
    if row["drift_p"] < alpha:
        out.append(f"drift (Spearman rho {row['drift_rho']:+.2f}, p {row['drift_p']:.3f})")
    if row["failed_runs"] > row["disturbed_runs"]:
        out.append(f"{row['failed_runs'] - row['disturbed_runs']} failed run(s)")
    if row["disturbed_runs"]:
        out.append(f"{row['disturbed_runs']} disturbed run(s) left out")
    if row["excluded"]:
        out.append(f"{row['excluded']} non-finite value(s) excluded")
    return "; ".join(out)


SUMMARY_COLUMNS = [
    *CONFIG,
    "unit",
    "n",
    "median",
    "ci_low",
    "ci_high",
    "iqr",
    "cv_pct",
    "drift_rho",
    "drift_p",
    "excluded",
    "failed_runs",
    "flags",
]


def summarize(
    metrics: pl.DataFrame | pl.LazyFrame,
    runs: pl.DataFrame,
    alpha: float = DEFAULT_ANALYSIS.alpha,
    cv_limit_pct: float = 5.0,
) -> pl.DataFrame:
    """One row per configuration: n, median and its 95 % CI, IQR, CV, drift, failed runs,
    non-finite values excluded, flags."""
    cells = samples(metrics, runs)
    out = {
        c: np.full(len(cells), math.nan)
        for c in ("median", "ci_low", "ci_high", "iqr", "cv_pct", "drift_rho", "drift_p")
    }
    for idx, (x,) in buckets(cells["x"]):
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
    df = (
        cells.with_columns(n=pl.col("x").list.len().cast(pl.Int64), **{c: pl.Series(v) for c, v in out.items()})
        .join(
            failed_runs(runs).select(*RUN_CONFIG, "failed_runs", "disturbed_runs"),
            on=RUN_CONFIG,
            how="left",
            nulls_equal=True,
        )
        .with_columns(
            pl.col("failed_runs", "disturbed_runs").fill_null(0).cast(pl.Int64), pl.col("excluded").cast(pl.Int64)
        )
    )
    df = df.with_columns(
        flags=pl.Series([_flags(r, alpha, cv_limit_pct) for r in df.iter_rows(named=True)], dtype=pl.String)
    )
    return df.select(SUMMARY_COLUMNS)
