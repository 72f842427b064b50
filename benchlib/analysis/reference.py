"""Published reference results (data/reference/, provenance in its README.md) and their derived claims.

The published numbers are medians without repetitions, so the claims derived
here are plain ratios without CIs; ours keep their statistics.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import polars as pl

from benchlib.settings.analysis import DEFAULT_ANALYSIS, Analysis
from benchlib.vocabulary.schema import metric_info

from . import resolve
from .stats import CORRECTIONS, adjust, compare, decision_level, verdict, verdict_columns
from .verdicts import Kind, Verdict

REFERENCE_DIR = Path("data/reference")
EKS_SCENARIOS = "eks_m6i_2026_scenarios.csv"
EKS_SERVICE_SCALING = "eks_m6i_2026_service_scaling.csv"
CILIUM_2021_DIRECTIONS = "cilium_2021_directions.csv"
ISTIO_PROXY_CPU = "istio_1_24_proxy_cpu.csv"

# Direction of "better" for the study's own metric names (ours live in schema.METRICS).
EKS_HIGHER_IS_BETTER = {
    "tcp_throughput": True,
    "udp_throughput": True,
    "udp_loss": False,
    "pod_rtt": False,
    "http_p50_at_1000qps": False,
    "http_p99_at_1000qps": False,
    "http_actual_qps_at_5000qps": True,
    "http_p99_at_5000qps": False,
    "http_max_qps": True,
    "http_p99_at_max_qps": False,
    "dns_p50": False,
    "dns_p99": False,
    "agent_memory": False,
    "conn_setup_time_connection_close": False,
}

# Claims where our lab measures the same kind of change as the study. Our
# comparison is overlay vs a routed pod network, as the study's B (Cilium
# VXLAN) vs A (VPC CNI, native VPC routing); kube-proxy mode does not touch
# pod-to-pod traffic. Their stream count and RTT tool differ from ours: see caveat.
LIKE_FOR_LIKE = [
    {
        "claim": "TCP throughput: VXLAN overlay vs routed pods",
        "ours_test": "tcp_stream_1",
        "ours_metric": "throughput",
        "ours_side": "none",
        "ours_scenario": "vxlan",
        "ours_baseline": "veth-routed",
        "theirs_metric": "tcp_throughput",
        "theirs_scenario": "B",
        "theirs_baseline": "A",
        "caveat": "theirs: iperf3 between EC2 nodes (12.5 Gbit/s NIC cap); ours: one netperf stream in netns",
    },
    {
        "claim": "Round-trip latency: VXLAN overlay vs routed pods",
        "ours_test": "tcp_rr",
        "ours_metric": "latency_p50",
        "ours_side": "none",
        "ours_scenario": "vxlan",
        "ours_baseline": "veth-routed",
        "theirs_metric": "pod_rtt",
        "theirs_scenario": "B",
        "theirs_baseline": "A",
        "caveat": "theirs: pod-to-pod RTT; ours: netperf TCP_RR median transaction latency",
    },
    {
        "claim": "Connection setup: 1000 vs 4 services, kube-proxy iptables",
        "ours_test": "tcp_crr",
        "ours_metric": "latency_p50",
        "ours_side": "none",
        "ours_scenario": "kube-proxy-iptables-1000",
        "ours_baseline": "kube-proxy-iptables-4",
        "theirs_metric": "conn_setup_time_connection_close",
        "theirs_scenario": "kube-proxy-iptables-1000",
        "theirs_baseline": "kube-proxy-iptables-4",
        "caveat": "theirs: connection time of HTTP requests with Connection: close on EKS; ours: netperf TCP_CRR "
        "median (connect, 1-byte request/response, close) through the lab's ClusterIP",
    },
]


# The local cluster with the real Cilium agent (pipelines/local-cilium) mirrors
# the study's B, C and D against A: by default our A is the bridge CNI with
# kube-proxy iptables (routed pods, no encapsulation), theirs the VPC CNI. A preset
# names its own stand-ins with analysis.reference_scenarios (study_claims).
CILIUM_AS_STUDY = {
    "A": "bridge-iptables",
    "B": "cilium-vxlan-iptables",
    "C": "cilium-vxlan-ebpf",
    "D": "cilium-native-ebpf",
}
CILIUM_CLAIMS = [  # (claim, our test, our metric, their metric, caveat)
    (
        "TCP throughput",
        "tcp_stream",
        "throughput",
        "tcp_throughput",
        "theirs: iperf3 between EC2 nodes (12.5 Gbit/s NIC cap); ours: one netperf stream pod to pod across "
        "two cluster nodes that share one kernel and a veth wire",
    ),
    (
        "Round-trip latency",
        "tcp_rr",
        "latency_p50",
        "pod_rtt",
        "theirs: pod-to-pod RTT; ours: netperf TCP_RR median transaction latency pod to pod",
    ),
    (
        "HTTP median latency at 1000 q/s",
        "http_1000",
        "http_latency_p50",
        "http_p50_at_1000qps",
        "theirs: fortio on EKS; ours: fortio at 1000 q/s pod to pod on the local cluster",
    ),
    (
        "HTTP p99 latency at 1000 q/s",
        "http_1000",
        "http_latency_p99",
        "http_p99_at_1000qps",
        "theirs: fortio on EKS; ours: fortio at 1000 q/s pod to pod on the local cluster",
    ),
]


def study_claims(stand_ins: Mapping[str, str], label: str) -> list[dict]:
    """The EKS study's like-for-like claims for our stand-ins of its scenarios (its name -> ours): each
    of B-E named against A on CILIUM_CLAIMS, and, for kube-proxy-iptables, connection setup from 4 to
    1000 Services (ours: <stand-in>-4 and -1000)."""
    claims = [
        {
            "claim": f"{claim}: {study} vs A ({label})",
            "ours_test": test,
            "ours_metric": metric,
            "ours_side": "none",
            "ours_scenario": ours,
            "ours_baseline": stand_ins["A"],
            "theirs_metric": theirs,
            "theirs_scenario": study,
            "theirs_baseline": "A",
            "caveat": caveat,
        }
        for study, ours in stand_ins.items()
        if study in ("B", "C", "D", "E")
        for claim, test, metric, theirs, caveat in CILIUM_CLAIMS
    ]
    kube_proxy = stand_ins.get("kube-proxy-iptables")
    if kube_proxy:
        claims.append(
            {
                "claim": f"Connection setup: 1000 vs 4 services, kube-proxy iptables ({label})",
                "ours_test": "tcp_crr",
                "ours_metric": "latency_p50",
                "ours_side": "none",
                "ours_scenario": f"{kube_proxy}-1000",
                "ours_baseline": f"{kube_proxy}-4",
                "theirs_metric": "conn_setup_time_connection_close",
                "theirs_scenario": "kube-proxy-iptables-1000",
                "theirs_baseline": "kube-proxy-iptables-4",
                "caveat": "theirs: connection time of HTTP requests with Connection: close on EKS; ours: netperf "
                "TCP_CRR median (connect, 1-byte request/response, close) through a ClusterIP",
            }
        )
    return claims


LOCAL_CILIUM_CLAIMS = study_claims(CILIUM_AS_STUDY, "local Cilium")
LIKE_FOR_LIKE += LOCAL_CILIUM_CLAIMS

# The 2021 bare-metal study (data/reference/README.md) states directions, not numbers.
LIKE_FOR_LIKE.append(
    {
        "claim": "Connection rate: NOTRACK vs conntrack (2021 bare metal)",
        "ours_test": "tcp_crr",
        "ours_metric": "connection_rate",
        "ours_side": "none",
        "ours_scenario": "notrack",
        "ours_baseline": "conntrack",
        "theirs_metric": "tcp_crr_32_processes",
        "theirs_scenario": "notrack",
        "theirs_baseline": "conntrack",
        "caveat": "theirs: 32 netperf processes between two 100G hosts, direction only (charts, no table); "
        "ours: one TCP_CRR stream through the lab's pod path (params-datapaths.yaml)",
    }
)


def like_for_like(stand_ins: Mapping[str, str] | None = None) -> list[dict]:
    """The claims side_by_side pairs: LIKE_FOR_LIKE, where ``stand_ins`` (analysis.reference_scenarios:
    the study's name -> our scenario) take the place of the local Cilium campaign's."""
    if not stand_ins:
        return LIKE_FOR_LIKE
    kept = [c for c in LIKE_FOR_LIKE if c not in LOCAL_CILIUM_CLAIMS]
    return kept + study_claims(stand_ins, "this campaign")


def load_eks_scenarios(directory: str | Path = REFERENCE_DIR) -> pl.DataFrame:
    """The 2026 EKS m6i study, scenarios A-E: one row per scenario and metric."""
    return pl.read_csv(resolve(directory) / EKS_SCENARIOS)


def load_istio_proxy_cpu(directory: str | Path = REFERENCE_DIR) -> pl.DataFrame:
    """Istio 1.24's published CPU per 1000 requests/s of a sidecar, a waypoint and a ztunnel."""
    return pl.read_csv(resolve(directory) / ISTIO_PROXY_CPU)


def load_eks_service_scaling(directory: str | Path = REFERENCE_DIR) -> pl.DataFrame:
    """The 2026 EKS m6i study, 4/104/1000 ClusterIP services: one row per datapath, count and metric."""
    return pl.read_csv(resolve(directory) / EKS_SERVICE_SCALING)


def _direction(change: pl.Expr, metric: pl.Expr) -> pl.Expr:
    """same / better / worse by the study metric's direction of "better" (unknown direction: worse, as before)."""
    higher = metric.replace_strict(EKS_HIGHER_IS_BETTER, default=None, return_dtype=pl.Boolean)
    return (
        pl.when(change == 0)
        .then(pl.lit("same"))
        .when((change > 0) == higher)
        .then(pl.lit("better"))
        .otherwise(pl.lit("worse"))
    )


def eks_relative_changes(scenarios: pl.DataFrame, baseline: str = "A") -> pl.DataFrame:
    """Each scenario's change vs the baseline scenario per metric, in % (value / baseline - 1).

    Metrics the baseline did not report (agent memory: VPC CNI has no agent)
    have no change and are left out.
    """
    base = scenarios.filter(pl.col("scenario") == baseline).select("metric", baseline_value="value")
    return (
        scenarios.filter(pl.col("scenario") != baseline)
        .join(base, on="metric", how="inner")
        .with_columns(change_pct=100 * (pl.col("value") / pl.col("baseline_value") - 1), baseline=pl.lit(baseline))
        .with_columns(direction=_direction(pl.col("change_pct"), pl.col("metric")))
        .select(
            "scenario",
            "label",
            "baseline",
            "metric",
            "unit",
            "statistic",
            "baseline_value",
            "value",
            "change_pct",
            "direction",
        )
    )


def eks_service_scaling_growth(scaling: pl.DataFrame, base_services: int = 4) -> pl.DataFrame:
    """Change of each metric from `base_services` services to each larger count, per datapath."""
    base = scaling.filter(pl.col("services") == base_services).select("datapath", "metric", "unit", value_from="value")
    return (
        scaling.filter(pl.col("services") != base_services)
        .join(base, on=["datapath", "metric", "unit"], how="inner")
        .select(
            "datapath",
            "metric",
            "unit",
            services_from=pl.lit(base_services, dtype=pl.Int64),
            services_to="services",
            value_from="value_from",
            value_to="value",
            change_pct=100 * (pl.col("value") / pl.col("value_from") - 1),
        )
        .sort("datapath", "metric", "services_to")
    )


def eks_scaling_changes(scaling: pl.DataFrame, base_services: int = 4) -> pl.DataFrame:
    """The service-scaling growth in the shape of eks_relative_changes: scenario `<datapath>-<services>`
    vs baseline `<datapath>-<base_services>`, so side_by_side can pair it with our kube-proxy scenarios."""
    return eks_service_scaling_growth(scaling, base_services).select(
        scenario=pl.format("{}-{}", "datapath", "services_to"),
        baseline=pl.format("{}-{}", "datapath", "services_from"),
        metric="metric",
        unit="unit",
        baseline_value="value_from",
        value="value_to",
        change_pct="change_pct",
        direction=_direction(pl.col("change_pct"), pl.col("metric")),
    )


def published_changes(directory: str | Path = REFERENCE_DIR) -> pl.DataFrame:
    """Every published change side_by_side can pair: the EKS scenarios vs A, its service-scaling growth,
    and the 2021 study's stated directions (no change in %)."""
    directions = pl.read_csv(resolve(directory) / CILIUM_2021_DIRECTIONS).drop("statement")
    return pl.concat(
        [
            eks_relative_changes(load_eks_scenarios(directory)),
            eks_scaling_changes(load_eks_service_scaling(directory)),
            directions,
        ],
        how="diagonal",
    )


def side_by_side(
    metrics: pl.DataFrame | pl.LazyFrame,
    runs: pl.DataFrame,
    changes: pl.DataFrame,
    settings: Analysis = DEFAULT_ANALYSIS,
) -> pl.DataFrame:
    """Our relative change (with CI and verdict) next to the study's, for each like-for-like claim
    (like_for_like of the ``settings``' reference scenarios), at their alpha, correction, band and seed.

    The claims form their own family for the correction; our intervals are at the level it decided
    at (stats.decision_level), as the report's. A claim whose scenarios we did not measure keeps NaN
    on our side.
    """

    def ours(pair: dict, confidence: float | None = None) -> dict:
        sub = (
            metrics.lazy()
            .filter(
                (pl.col("test") == pair["ours_test"])
                & (pl.col("metric") == pair["ours_metric"])
                & (pl.col("side") == pair["ours_side"])
                & pl.col("scenario").is_in([pair["ours_scenario"], pair["ours_baseline"]])
            )
            .collect()
        )
        if not (sub["scenario"] == pair["ours_baseline"]).any():
            return {}
        c = compare(
            sub,
            runs,
            baseline=pair["ours_baseline"],
            alpha=settings.alpha,
            correction=settings.correction,
            noise_band_pct=settings.noise_band_pct,
            seed=settings.seed,
            family="reference",
            confidence=confidence,
        )
        return c.row(0, named=True) if len(c) == 1 else {}

    # the family's p-values first, then each interval at the level the correction decided at
    pairs = like_for_like(settings.reference_scenarios)
    p = np.array([ours(pair).get("p", math.nan) for pair in pairs], float)
    p_adj = adjust(p, settings.correction, settings.alpha)
    level = decision_level(p_adj, settings.alpha, settings.correction)
    rows = []
    for pair in pairs:
        theirs = changes.filter(
            (pl.col("metric") == pair["theirs_metric"])
            & (pl.col("scenario") == pair["theirs_scenario"])
            & (pl.col("baseline") == pair["theirs_baseline"])
        )
        o = ours(pair, None if math.isnan(level) else 1 - level)
        t = theirs.row(0, named=True) if len(theirs) == 1 else {}
        rows.append(
            {
                "claim": pair["claim"],
                "ours": f"{pair['ours_test']} {pair['ours_metric']}: "
                f"{pair['ours_scenario']} vs {pair['ours_baseline']}",
                "ours_n": o.get("n"),
                "ours_p": o.get("p", math.nan),
                "ours_delta_pct": o.get("delta_pct", math.nan),
                "ours_low": o.get("delta_low", math.nan),
                "ours_high": o.get("delta_high", math.nan),
                "noise_band_pct": o.get("noise_band_pct", math.nan),
                "theirs": f"{pair['theirs_metric']}: {pair['theirs_scenario']} vs {pair['theirs_baseline']}",
                "theirs_change_pct": t.get("change_pct", math.nan),
                "theirs_direction": t.get("direction", ""),
                "higher_is_better": metric_info(pair["ours_metric"]).higher_is_better,
                "caveat": pair["caveat"],
            }
        )
    df = pl.DataFrame(rows, schema_overrides={"ours_n": pl.Int64})
    verdicts = [
        Verdict("not measured", Kind.UNCOMPARED)
        if r["ours_n"] is None
        else verdict(
            q,
            r["ours_delta_pct"],
            r["ours_low"],
            r["ours_high"],
            settings.alpha,
            r["noise_band_pct"],
            r["higher_is_better"],
        )
        for r, q in zip(df.iter_rows(named=True), p_adj, strict=True)
    ]
    return df.with_columns(
        pl.Series("ours_p_adj", p_adj),
        *verdict_columns(verdicts, prefix="ours_"),
        correction=pl.lit(CORRECTIONS[settings.correction]),
        ours_ci_level=pl.lit(1 - level),
    ).drop("higher_is_better", "noise_band_pct")
