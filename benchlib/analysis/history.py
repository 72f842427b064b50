"""History across campaigns: each campaign's primary metrics in the order the campaigns were measured,
and each campaign judged against the one before it as `benchlib compare` judges B against A
(stats.compare_campaigns: Mann-Whitney on the runs, each test's headline metric in the primary family,
corrected within each pair of campaigns, the change's interval at the level the correction decided at).

A change is marked where one campaign differs from the one before it, by the test a pair of campaigns
gets, never by a change point searched for along the series (a split the data chose would find one in
noise). A campaign is read whole once and reduced to its headline values (one per run) as it comes: memory
holds one campaign's tables and the headline values of all, not every campaign's tables.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import polars as pl

from benchlib.settings.analysis import DEFAULT_ANALYSIS, Analysis
from benchlib.vocabulary.schema import RUNS_SCHEMA

from . import normalize, stats
from .compare import Campaign
from .verdicts import VERDICT_COLUMNS

KEYS = [c for c in stats.CONFIG if c != "campaign"]  # a configuration, in any campaign
COLUMNS = [
    *KEYS,
    "campaign",
    "started_at",
    "n",
    "median",
    "ci_low",
    "ci_high",
    "unit",
    "previous",
    "delta_pct",
    "delta_low",
    "delta_high",
    "p_adj",
    *VERDICT_COLUMNS,
    "changed",
]


@dataclass(frozen=True)
class Headline:
    """A campaign reduced to what its history needs: its name, its runs and its headline values."""

    name: str
    runs: pl.DataFrame
    values: pl.DataFrame


def headline(campaign: Campaign, targets: Mapping[str, float], environment: str | None = None) -> Headline:
    """The headline metric's values of each test of ``campaign`` (of ``environment`` only, if given)."""
    runs = campaign.runs if environment is None else campaign.runs.filter(pl.col("environment") == environment)
    metrics = campaign.metrics.filter(pl.col("run_id").is_in(runs["run_id"].implode()))
    values = normalize.with_cpu_at_target(metrics, runs, **targets)
    return Headline(campaign.name, runs, stats.compared_values(values, runs, []))


def line_up(
    campaigns: Iterable[Campaign], settings: Analysis = DEFAULT_ANALYSIS, environment: str | None = None
) -> pl.DataFrame:
    """One row per configuration and campaign (COLUMNS), the campaigns in the order of their first run:
    the median with its 95 % CI, and against the campaign just before it (``previous``, where that one
    measured the configuration) the change with its interval, p_adj and verdict; ``changed``: significant
    and beyond the threshold, as a regression or an improvement is in `benchlib compare`.

    Each campaign is reduced to its headline values as it comes (``campaigns`` may load them one at a time).
    The ``settings``' alpha, correction, seed, work rates and threshold (Analysis.compare_threshold)."""
    targets = normalize.work_rates(settings)
    kept = [h for h in (headline(c, targets, environment) for c in campaigns) if not h.runs.is_empty()]
    kept.sort(key=lambda h: h.runs["started_at"].min())  # pyright: ignore[reportArgumentType, reportCallIssue] (a datetime)
    rows = []
    for before, now in zip([None, *kept], kept, strict=False):
        summary = stats.summarize(now.values, now.runs, alpha=settings.alpha).select(
            *KEYS, "n", "median", "ci_low", "ci_high", "unit"
        )
        row = summary.with_columns(campaign=pl.lit(now.name), started_at=pl.lit(now.runs["started_at"].min()))
        if before is not None:
            row = row.join(_against(now, before, settings), on=KEYS, how="left", nulls_equal=True)
        rows.append(row)
    # the empty frame of every column first: a lone campaign has no change columns of its own
    schema = _schema()
    return pl.concat([pl.DataFrame(schema=schema), *rows], how="diagonal_relaxed").select(schema.names()).cast(schema)  # pyright: ignore[reportArgumentType]


def _against(now: Headline, before: Headline, settings: Analysis) -> pl.DataFrame:
    """``now`` judged against ``before`` as `benchlib compare` judges B against A: the primary family."""
    judged = stats.compare_campaigns(
        now.values,
        now.runs,
        before.values,
        before.runs,
        alpha=settings.alpha,
        correction=settings.correction,
        noise_band_pct=settings.compare_threshold(),
        seed=settings.seed,
    ).filter(pl.col("family") == stats.PRIMARY)
    beyond = (pl.col("delta_pct").abs() > pl.col("noise_band_pct")).fill_null(False)
    return judged.select(
        *KEYS,
        previous=pl.col("baseline"),
        delta_pct="delta_pct",
        delta_low="delta_low",
        delta_high="delta_high",
        p_adj="p_adj",
        verdict="verdict",
        verdict_kind="verdict_kind",
        verdict_direction="verdict_direction",
        changed=(pl.col("p_adj") < settings.alpha) & beyond,
    )


def _schema() -> pl.Schema:
    floats = ("median", "ci_low", "ci_high", "delta_pct", "delta_low", "delta_high", "p_adj")
    types: dict[str, pl.DataType | type[pl.DataType]] = {c: pl.String for c in COLUMNS}
    types |= dict.fromkeys(floats, pl.Float64)
    types |= {"streams": pl.Int64, "message_size": pl.Int64, "n": pl.Int64, "changed": pl.Boolean}
    types["started_at"] = RUNS_SCHEMA["started_at"]
    return pl.Schema({c: types[c] for c in COLUMNS})
