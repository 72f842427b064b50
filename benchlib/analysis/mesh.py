"""Service-mesh proxy hops: latency percentiles and proxy CPU per hop count.

Everything reads the tidy tables: the runs' datapath columns (mesh, proxy_hops,
mtls, ...) say what each scenario put on the path, the metrics hold the
latency percentiles and, where the target recorded its proxies, their CPU.
The latency comparisons are secondary metrics: their own family, corrected by
Benjamini-Hochberg and labelled FDR (docs/design.md "Statistics").
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from benchlib.settings.analysis import Analysis
from benchlib.vocabulary.schema import metric_info, percentiles

from . import stats
from .normalize import PROXY_CPU_AT_TARGET
from .verdicts import VERDICT_COLUMNS, Direction, Kind

HTTP_PERCENTILES = percentiles("http_latency")  # p50, p90, p99, p99.9 (fortio)
RR_PERCENTILES = percentiles("latency")  # p50, p90, p99 (netperf TCP_RR)
LADDER_METRICS = (*HTTP_PERCENTILES, *RR_PERCENTILES)
P99 = ("http_latency_p99", "latency_p99")
LOAD_SHORTFALL = 0.95  # achieved below this share of the offered rate: the latency is of a lighter load
FDR = "fdr_bh"

PATH_COLUMNS = ["scenario", "mesh", "proxy_hops", "mtls", "proxy_kind", "proxy_version"]


def has_mesh(runs: pl.DataFrame) -> bool:
    """Whether any run of the campaign went through a proxy: the report's mesh section only then."""
    return bool((runs["proxy_hops"] > 0).any())


def has_sized_datapath(runs: pl.DataFrame) -> bool:
    """Whether any run set GSO/GRO sizes or ran over IPv6 (the BIG TCP scenarios)."""
    return bool(runs["gso_gro_max_size"].is_not_null().any() or (runs["ip_family"] == 6).any())


def sized_paths(runs: pl.DataFrame) -> pl.DataFrame:
    """One row per scenario: IP family, BIG TCP and the GSO/GRO max size its runs recorded."""
    return (
        runs.select("scenario", "ip_family", "big_tcp", "gso_gro_max_size")
        .unique()
        .sort("ip_family", "gso_gro_max_size", "scenario", nulls_last=True)
    )


def paths(runs: pl.DataFrame) -> pl.DataFrame:
    """One row per scenario: its mesh shape, proxy hops, mTLS, proxy and version, as the runs recorded them."""
    return runs.select(PATH_COLUMNS).unique().sort("proxy_hops", "mtls", "scenario")


def path_label() -> pl.Expr:
    """'proxy-both (2 hops, mTLS)': a scenario with what it puts on the path."""
    return pl.format(
        "{} ({} hop{}{})",
        "scenario",
        "proxy_hops",
        pl.when(pl.col("proxy_hops") == 1).then(pl.lit("")).otherwise(pl.lit("s")),
        pl.when(pl.col("mtls")).then(pl.lit(", mTLS")).otherwise(pl.lit("")),
    )


def ladder(summary: pl.DataFrame, runs: pl.DataFrame, values: pl.DataFrame) -> pl.DataFrame:
    """Latency percentiles per test and scenario, hop counts in order: median over runs of each run's
    percentile with its 95 % CI (stats.summarize), and for the p99s their range over runs (min-max,
    as the Istio vs Cilium study reports it)."""
    rng = (
        stats.ok_values(values.filter(pl.col("metric").is_in(P99)), runs)
        .group_by(stats.CONFIG)
        .agg(range_min=pl.col("value").min(), range_max=pl.col("value").max())
    )
    return (
        summary.filter(pl.col("metric").is_in(LADDER_METRICS))
        .join(rng, on=stats.CONFIG, how="left", nulls_equal=True)
        .join(paths(runs), on="scenario")
        .with_columns(
            path=path_label(),
            percentile=pl.col("metric").replace_strict({m: f"p{metric_info(m).percentile:g}" for m in LADDER_METRICS}),
        )
        .sort("test", "proxy_hops", "mtls", "scenario", "metric")
        .select(
            "test",
            "proxy_hops",
            "scenario",
            "path",
            "mesh",
            "mtls",
            "metric",
            "percentile",
            "unit",
            "n",
            "median",
            "ci_low",
            "ci_high",
            "range_min",
            "range_max",
            "flags",
        )
    )


def comparisons(values: pl.DataFrame | pl.LazyFrame, runs: pl.DataFrame, settings: Analysis) -> pl.DataFrame:
    """Every latency percentile and the proxies' total CPU at the fixed work rate, of every scenario
    vs the baseline (0 hops: no proxy CPU to compare with) and the declared contrasts: one family of
    secondary metrics, Benjamini-Hochberg (the correction column says FDR), at the ``settings``' alpha,
    noise band and seed."""
    family = values.filter(
        pl.col("metric").is_in(LADDER_METRICS)
        | ((pl.col("metric") == PROXY_CPU_AT_TARGET) & (pl.col("side") == "total"))
    )
    return stats.compare(
        family,
        runs,
        baseline=settings.baseline,
        alpha=settings.alpha,
        correction=FDR,
        noise_band_pct=settings.noise_band_pct,
        seed=settings.seed,
        contrasts=settings.contrasts,
        family="mesh",
    )


def load_shortfall(values: pl.DataFrame, runs: pl.DataFrame) -> pl.DataFrame:
    """Per paced HTTP configuration: offered and achieved rate, and a flag where a run achieved less
    than LOAD_SHORTFALL of the offered rate (its latency is that of a lighter load than planned)."""
    paced = runs.filter(pl.col("offered_qps").is_not_null()).select("run_id", "offered_qps")
    d = stats.ok_values(values.filter(metric="http_qps"), runs).join(paced, on="run_id")
    return (
        d.group_by("test", "scenario")
        .agg(
            offered_qps=pl.col("offered_qps").first(),
            n=pl.len(),
            achieved_median=pl.col("value").median(),
            achieved_min=pl.col("value").min(),
            short_runs=(pl.col("value") < LOAD_SHORTFALL * pl.col("offered_qps")).sum(),
        )
        .with_columns(
            flag=pl.when(pl.col("short_runs") > 0)
            .then(pl.format("achieved < {} x offered in {} of {} runs", pl.lit(LOAD_SHORTFALL), "short_runs", "n"))
            .otherwise(pl.lit(""))
        )
        .sort("test", "scenario")
    )


def _pairs(runs: pl.DataFrame, baseline: str, contrasts: Sequence[Sequence[str]]) -> pl.DataFrame:
    """(scenario, reference) with both hop counts: every proxied scenario vs the baseline, then the contrasts."""
    hops = dict(paths(runs).select("scenario", "proxy_hops").iter_rows())
    pairs = [(s, baseline) for s in sorted(hops) if s != baseline and hops[s] > 0]
    pairs += [(s, r) for s, r in contrasts if s in hops and r in hops and (s, r) not in pairs]
    return pl.DataFrame(
        [(s, r, hops[s], hops[r]) for s, r in pairs],
        orient="row",
        schema={"scenario": pl.String, "reference": pl.String, "hops": pl.Int64, "hops_reference": pl.Int64},
    )


COST_METRICS = ("http_latency_p50", "http_latency_p99", "latency_p50", "latency_p99")


def cost_per_hop(
    summary: pl.DataFrame, compared: pl.DataFrame, runs: pl.DataFrame, baseline: str, contrasts: Sequence[Sequence[str]]
) -> pl.DataFrame:
    """What each comparison adds: median latency (p50, p99) and median total proxy CPU at the fixed
    work rate, scenario minus reference, and per hop where the hop counts differ.

    ``compared``: `comparisons` (its verdicts are joined). A reference without proxies has no proxy
    CPU at all (0), so its scenario's whole proxy CPU is what the hops add.
    """
    pairs = _pairs(runs, baseline, contrasts)
    med = summary.filter(
        pl.col("metric").is_in(COST_METRICS) | ((pl.col("metric") == PROXY_CPU_AT_TARGET) & (pl.col("side") == "total"))
    )
    cols = ["test", "metric", "unit", "scenario", "median"]
    ref = med.select(cols).rename({"scenario": "reference", "median": "median_reference"}).drop("unit")
    verdicts = compared.select(
        "test",
        "metric",
        "scenario",
        pl.col("baseline").alias("reference"),
        "delta_pct",
        "p_adj",
        "correction",
        *VERDICT_COLUMNS,
    )
    df = (
        pairs.join(med.select(cols), on="scenario")
        .join(ref, on=["test", "metric", "reference"], how="left")
        .with_columns(
            median_reference=pl.when((pl.col("metric") == PROXY_CPU_AT_TARGET) & (pl.col("hops_reference") == 0))
            .then(pl.lit(0.0))
            .otherwise("median_reference")
        )
        .filter(pl.col("median_reference").is_not_null())
        .with_columns(added=pl.col("median") - pl.col("median_reference"))
        .with_columns(
            added_per_hop=pl.when(pl.col("hops") != pl.col("hops_reference")).then(
                pl.col("added") / (pl.col("hops") - pl.col("hops_reference"))
            )
        )
        .join(verdicts, on=["test", "metric", "scenario", "reference"], how="left")
        .with_columns(
            pl.when(pl.col("verdict").is_null() & (pl.col("metric") == PROXY_CPU_AT_TARGET))
            .then(pl.lit(text))
            .otherwise(name)
            .alias(name)
            for name, text in (
                ("verdict", "reference has no proxy"),
                ("verdict_kind", str(Kind.UNCOMPARED)),
                ("verdict_direction", str(Direction.NONE)),
            )
        )
    )
    return df.sort("test", "metric", "hops", "scenario").select(
        "test",
        "metric",
        "unit",
        "scenario",
        "reference",
        "hops",
        "hops_reference",
        "median",
        "median_reference",
        "added",
        "added_per_hop",
        "delta_pct",
        "p_adj",
        "correction",
        *VERDICT_COLUMNS,
    )


# which of Istio's published proxies each lab mesh shape stands for (reference.load_istio_proxy_cpu)
ISTIO_COUNTERPART = {
    "server-sidecar": "sidecar",
    "sidecars": "sidecar",
    "sidecars-mtls": "sidecar",
    "node-proxies-mtls": "ztunnel",
}


def beside_istio(summary: pl.DataFrame, runs: pl.DataFrame, istio: pl.DataFrame, per_requests: float) -> pl.DataFrame:
    """Our proxies' CPU per proxy per 1000 requests/s in vCPU (median over runs and its 95 % CI, from the
    total proxy CPU at ``per_requests`` req/s over the scenario's proxy count) beside what Istio publishes
    for the proxy each mesh shape stands for. HTTP tests only: Istio's figure is for HTTP requests."""
    scale = 1000 / per_requests / 100  # % of a core per `per_requests` req/s -> vCPU per 1000 req/s
    ours = (
        summary.filter(metric=PROXY_CPU_AT_TARGET, side="total")
        .join(runs.filter(pl.col("kind") == "HTTP").select("test").unique(), on="test")
        .join(paths(runs), on="scenario")
        .filter(pl.col("proxy_hops") > 0)
        .with_columns(
            proxy=pl.col("mesh").replace_strict(ISTIO_COUNTERPART, default=None),
            **{c: pl.col(c) * scale / pl.col("proxy_hops") for c in ("median", "ci_low", "ci_high")},
        )
    )
    return (
        ours.join(istio.select("proxy", istio_label="label", istio_vcpu="vcpu_per_1000_rps"), on="proxy", how="left")
        .sort("test", "proxy_hops", "mtls", "scenario")
        .select(
            "test",
            "scenario",
            "proxy_kind",
            "proxy_version",
            "proxy_hops",
            "n",
            pl.col("median").alias("vcpu_per_proxy"),
            "ci_low",
            "ci_high",
            "istio_label",
            "istio_vcpu",
        )
    )
