"""CPU cost per unit of work, computed per run ("sum first, then divide").

Busy CPU-seconds are summed over a side's CPUs before dividing by the number
of CPUs and by the work done, so a side with one hot CPU and one idle CPU
counts as 50 % busy, not as an average of per-CPU percentages.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, overload

import polars as pl

from benchlib.vocabulary.schema import DERIVED_METRICS, METRICS, METRICS_SCHEMA, SIDES, TOTAL_SIDE, WORK_METRICS

from .estimators import RUN_CONFIG

if TYPE_CHECKING:
    from benchlib.settings.analysis import Analysis

CPU_AT_TARGET = "cpu_pct_at_target"
CPU_SIDES = DERIVED_METRICS[CPU_AT_TARGET].sides  # client, server and total
PROXY_CPU_AT_TARGET = "proxy_cpu_pct_at_target"

RUN_KEYS = [c for c in METRICS_SCHEMA.names() if c not in ("metric", "value", "unit", "side")]
# The summaries' columns after unit (with_work): on a row of a metric at a target work rate, what its unit
# spells for a reader ("% CPU @ 100 Gbit/s"), as data: the work metric and its target rate in the metric's
# unit; null on every other row. Whatever converts or words a cost reads these, never the unit's text.
WORK_COLUMNS = {"work_metric": pl.String, "work_target": pl.Float64}


def work_rates(analysis: Analysis) -> dict[str, float]:
    """The work rates the analysis settings normalize CPU to, as with_cpu_at_target's keyword arguments."""
    return {
        "target_gbps": analysis.cpu_target_gbps,
        "per_transactions": analysis.rr_per_transactions,
        "per_connections": analysis.crr_per_connections,
        "per_requests": analysis.http_per_requests,
    }


def _work(metrics: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame:
    """The work metric's row of each run: its keys, work_metric and work (only these rows read)."""
    return (
        metrics.lazy()
        .filter(pl.col("metric").is_in(WORK_METRICS))
        .select(*RUN_KEYS, work_metric=pl.col("metric"), work=pl.col("value"))
        .collect()
    )


def per_run_cpu(metrics: pl.DataFrame | pl.LazyFrame, runs: pl.DataFrame) -> pl.DataFrame:
    """One row per run: busy % of client, server and both sides' CPUs, and the work done.

    Columns: RUN_KEYS, client, server, total (percent of the respective CPUs),
    work_metric, work (value of the work metric in its schema unit). A run whose
    client and server shared one CPU set (cpu_placement shared) has only total:
    that set's busy %, the whole path's. Runs without a work metric or CPU are left out.
    """

    def cores(side: str) -> pl.DataFrame:
        return (
            metrics.lazy()
            .filter((pl.col("metric") == "cpu_busy_cores") & (pl.col("side") == side))
            .select("run_id", pl.col("value").alias(f"{side}_cores"))
            .collect()
        )

    work = _work(metrics)
    df = work.join(runs.select("run_id", "client_cpus", "server_cpus"), on="run_id")
    for side in (*SIDES, TOTAL_SIDE):
        df = df.join(cores(side), on="run_id", how="left")
    # split: sum the busy cores of both sides first, then divide by all their CPUs
    split_total = (
        100 * (pl.col("client_cores") + pl.col("server_cores")) / (pl.col("client_cpus") + pl.col("server_cpus"))
    )
    return df.filter(
        pl.col("total_cores").is_not_null()
        | (pl.col("client_cores").is_not_null() & pl.col("server_cores").is_not_null())
    ).select(
        *RUN_KEYS,
        client=100 * pl.col("client_cores") / pl.col("client_cpus"),
        server=100 * pl.col("server_cores") / pl.col("server_cpus"),
        total=pl.coalesce(100 * pl.col("total_cores") / pl.col("client_cpus"), split_total),
        work_metric=pl.col("work_metric"),
        work=pl.col("work"),
    )


def work_targets(
    target_gbps: float = 100.0,
    per_transactions: float = 10_000,
    per_connections: float = 10_000,
    per_requests: float = 1_000,
) -> dict[str, float]:
    """The fixed work rate each work metric is normalized to, in the metric's unit."""
    return {
        "throughput": target_gbps,
        "transaction_rate": per_transactions,
        "connection_rate": per_connections,
        "http_qps": per_requests,
    }


def _scaled(df: pl.DataFrame, targets: dict[str, float], unit_prefix: str) -> pl.DataFrame:
    """Runs that did work, with scale = target / work and the unit naming the target rate."""
    units = {m: f"{unit_prefix} @ {t:g} {METRICS[m].unit}" for m, t in targets.items()}
    return df.filter(pl.col("work") > 0).with_columns(
        scale=pl.col("work_metric").replace_strict(targets, return_dtype=pl.Float64) / pl.col("work"),
        unit=pl.col("work_metric").replace_strict(units, return_dtype=pl.String),
    )


def cpu_at_target(
    metrics: pl.DataFrame | pl.LazyFrame,
    runs: pl.DataFrame,
    target_gbps: float = 100.0,
    per_transactions: float = 10_000,
    per_connections: float = 10_000,
    per_requests: float = 1_000,
) -> pl.DataFrame:
    """Long table shaped like metrics: CPU % needed for the target work rate, sides client/server/total.

    cpu_pct_at_target = busy % of the side's CPUs * target / measured work.
    Runs that did no work (rate 0) have no finite cost and are left out; they
    show up as failed runs in the run table's outcome, not here.
    """
    targets = work_targets(target_gbps, per_transactions, per_connections, per_requests)
    df = _scaled(per_run_cpu(metrics, runs), targets, "% CPU")
    long = [
        df.filter(pl.col(side).is_not_null()).select(
            *RUN_KEYS,
            metric=pl.lit(CPU_AT_TARGET),
            value=pl.col(side) * pl.col("scale"),
            unit=pl.col("unit"),
            side=pl.lit(side),
        )
        for side in CPU_SIDES
    ]
    return pl.concat(long).select(METRICS_SCHEMA.names())


def per_run_proxy_cpu(metrics: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame:
    """One row per run whose target recorded its proxies: their busy cores per side (client, server)
    and both together (total), and the work done (work_metric, work)."""

    def cores(side: str) -> pl.DataFrame:
        return (
            metrics.lazy()
            .filter((pl.col("metric") == "proxy_cpu_cores") & (pl.col("side") == side))
            .select("run_id", pl.col("value").alias(side))
            .collect()
        )

    work = _work(metrics)
    # tidy gives both sides a row (0 where a side has no proxy) in every run that has proxies
    return (
        work.join(cores("client"), on="run_id")
        .join(cores("server"), on="run_id")
        .with_columns(total=pl.col("client") + pl.col("server"))
    )


def proxy_cpu_at_target(
    metrics: pl.DataFrame | pl.LazyFrame,
    target_gbps: float = 100.0,
    per_transactions: float = 10_000,
    per_connections: float = 10_000,
    per_requests: float = 1_000,
) -> pl.DataFrame:
    """Long table shaped like metrics: the proxies' CPU in % of one core at the target work rate
    (HTTP: per_requests req/s; TCP_RR: per_transactions trans/s), sides client/server/total.

    Percent of one core, not of the side's CPUs: a proxy's cost does not depend on how many CPUs
    its side was given. Only runs whose target recorded its proxies (schema: proxy_cpu_cores)."""
    targets = work_targets(target_gbps, per_transactions, per_connections, per_requests)
    df = _scaled(per_run_proxy_cpu(metrics), targets, "% core")
    long = [
        df.select(
            *RUN_KEYS,
            metric=pl.lit(PROXY_CPU_AT_TARGET),
            value=100 * pl.col(side) * pl.col("scale"),
            unit=pl.col("unit"),
            side=pl.lit(side),
        )
        for side in DERIVED_METRICS[PROXY_CPU_AT_TARGET].sides
    ]
    return pl.concat(long).select(METRICS_SCHEMA.names())


def config_work(values: pl.DataFrame | pl.LazyFrame, runs: pl.DataFrame, targets: dict[str, float]) -> pl.DataFrame:
    """Per run configuration (estimators.RUN_CONFIG), WORK_COLUMNS: the work metric its runs' CPU is
    normalized by and its target rate (``targets``: work_targets); a configuration's runs are of one
    test, so of one work metric."""
    return (
        _work(values)
        .join(runs.select("run_id", "test_params"), on="run_id")
        .group_by(RUN_CONFIG)
        .agg(work_metric=pl.col("work_metric").first())
        .with_columns(work_target=pl.col("work_metric").replace_strict(targets, return_dtype=pl.Float64))
    )


def with_work(summary: pl.DataFrame, work: pl.DataFrame) -> pl.DataFrame:
    """``summary`` (estimators.summarize's) with WORK_COLUMNS after unit, from ``work`` (config_work) on
    the rows of the metrics at a target work rate, null on the others."""
    at_target = pl.col("metric").is_in([CPU_AT_TARGET, PROXY_CPU_AT_TARGET])
    columns = summary.columns
    order = [*columns[: columns.index("unit") + 1], *WORK_COLUMNS, *columns[columns.index("unit") + 1 :]]
    return (
        summary.join(work, on=RUN_CONFIG, how="left", nulls_equal=True, maintain_order="left")
        .with_columns(pl.when(at_target).then(pl.col(c)).cast(t).alias(c) for c, t in WORK_COLUMNS.items())
        .select(order)
    )


@overload
def with_cpu_at_target(metrics: pl.DataFrame, runs: pl.DataFrame, **targets) -> pl.DataFrame: ...
@overload
def with_cpu_at_target(metrics: pl.LazyFrame, runs: pl.DataFrame, **targets) -> pl.LazyFrame: ...
def with_cpu_at_target(
    metrics: pl.DataFrame | pl.LazyFrame, runs: pl.DataFrame, **targets
) -> pl.DataFrame | pl.LazyFrame:
    """The metrics table plus the cpu_pct_at_target and proxy_cpu_pct_at_target rows (targets: see
    cpu_at_target). Of a LazyFrame (a scan), a LazyFrame: the metric rows stay in their file, only
    the derived rows (three per run at most) are held."""
    derived = [cpu_at_target(metrics, runs, **targets), proxy_cpu_at_target(metrics, **targets)]
    if isinstance(metrics, pl.LazyFrame):
        return pl.concat([metrics, *(d.lazy() for d in derived)])
    return pl.concat([metrics, *derived])
