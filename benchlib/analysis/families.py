"""Families of comparisons, each corrected on its own: the headline metric of every test is the
primary family (analysis.correction); every other metric is in the Benjamini-Hochberg family of its
kind (latency, CPU, other). The corrections and the level each decided at.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import overload

import numpy as np
import polars as pl
from statsmodels.stats.multitest import multipletests

from benchlib.settings.analysis import DEFAULT_ANALYSIS
from benchlib.vocabulary.schema import headline_metric, metric_info

CORRECTIONS = {"holm": "Holm", "fdr_bh": "FDR (Benjamini-Hochberg)"}

# Families of comparisons, each corrected on its own: the headline metric of every test (and the
# contrasts of it) under analysis.correction; the other metrics one family per kind, Benjamini-Hochberg.
PRIMARY = "primary"
LATENCY, CPU, OTHER = "latency", "CPU", "other"
SECONDARY_CORRECTION = "fdr_bh"
FAMILY_ORDER = (PRIMARY, LATENCY, CPU, OTHER)


def adjust(
    p: np.ndarray, correction: str = DEFAULT_ANALYSIS.correction, alpha: float = DEFAULT_ANALYSIS.alpha
) -> np.ndarray:
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


def headlines(values: pl.DataFrame | pl.LazyFrame, runs: pl.DataFrame) -> pl.DataFrame:
    """Per environment, test and test_params: the test's headline metric among those in ``values``
    (benchlib.vocabulary.schema.headline_metric: by the test's kind, its latency median when paced)."""
    keys = ["environment", "test", "test_params"]
    # streamed: an eager group_by on three keys of a million runs takes half a GiB (polars 2.1)
    tests = (
        runs.lazy()
        .group_by(keys)
        .agg(kind=pl.col("kind").first(), paced=pl.col("offered_qps").is_not_null().any())
        .collect(engine="streaming")
    )
    # the metrics present per test, streamed. A test run with one set of parameters (the usual case)
    # needs no run lookup; only a test run with several is joined to its runs' test_params (that join
    # of every metric row to its run was the peak of a million-run analysis: 0.1 GiB above this).
    by_test = ["environment", "test"]
    varied = tests.group_by(by_test).len().filter(pl.col("len") > 1).drop("len")
    metrics = values.lazy().select("environment", "test", "run_id", "metric")
    present = [
        metrics.join(varied.lazy(), on=by_test, how="anti")
        .group_by(by_test)
        .agg(pl.col("metric").unique())
        .join(tests.lazy().select(keys), on=by_test)
        .select(*keys, "metric")
    ]
    if len(varied):
        present.append(
            metrics.join(varied.lazy(), on=by_test, how="semi")
            .join(runs.lazy().select("run_id", "test_params"), on="run_id", how="inner")
            .group_by(keys)
            .agg(pl.col("metric").unique())
        )
    rows = tests.join(pl.concat(present).collect(engine="streaming"), on=keys, nulls_equal=True)
    return rows.select(
        *keys,
        headline=pl.Series(
            [headline_metric(r["kind"], r["paced"], set(r["metric"])) for r in rows.iter_rows(named=True)],
            dtype=pl.String,
        ),
    )


@overload
def compared_values(values: pl.DataFrame, runs: pl.DataFrame, metrics: Sequence[str]) -> pl.DataFrame: ...
@overload
def compared_values(values: pl.LazyFrame, runs: pl.DataFrame, metrics: Sequence[str]) -> pl.LazyFrame: ...
def compared_values(
    values: pl.DataFrame | pl.LazyFrame, runs: pl.DataFrame, metrics: Sequence[str]
) -> pl.DataFrame | pl.LazyFrame:
    """The rows of ``values`` a report compares: each test's headline metric (the primary family)
    and ``metrics`` (analysis.family_metrics: the secondary ones shown). Of a LazyFrame (a scan), the
    same rows as a LazyFrame: each step that reads them filters them again instead of holding them."""
    keys = ["environment", "test", "test_params"]
    # each run's headline, then one streamed pass over the rows (in their order) that keeps the compared ones
    run_heads = (
        runs.lazy()
        .select("run_id", *keys)
        .join(headlines(values, runs).lazy(), on=keys, how="inner", nulls_equal=True)
        .select("run_id", "environment", "test", "headline")
        .collect()
    )
    compared = (
        values.lazy()
        .join(
            run_heads.lazy(), on=["run_id", "environment", "test"], how="left", nulls_equal=True, maintain_order="left"
        )
        .filter(pl.col("metric").is_in(list(metrics)) | (pl.col("metric") == pl.col("headline")))
        .select(values.collect_schema().names())
    )
    return compared.collect(engine="streaming") if isinstance(values, pl.DataFrame) else compared
