"""Published reference results (data/reference/, provenance in its README.md) and their derived claims.

The published numbers are medians without repetitions, so the claims derived
here are plain ratios without CIs; ours keep their statistics.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from . import resolve
from benchlib.schema import metric_info

from .stats import CORRECTIONS, adjust, compare, verdict

REFERENCE_DIR = Path("data/reference")
EKS_SCENARIOS = "eks_m6i_2026_scenarios.csv"
EKS_SERVICE_SCALING = "eks_m6i_2026_service_scaling.csv"

# Direction of "better" for the study's own metric names (ours live in schema.METRICS).
EKS_HIGHER_IS_BETTER = {
    "tcp_throughput": True, "udp_throughput": True, "udp_loss": False, "pod_rtt": False,
    "http_p50_at_1000qps": False, "http_p99_at_1000qps": False, "http_actual_qps_at_5000qps": True,
    "http_p99_at_5000qps": False, "http_max_qps": True, "http_p99_at_max_qps": False,
    "dns_p50": False, "dns_p99": False, "agent_memory": False, "conn_setup_time_connection_close": False,
}

# Claims where our lab measures the same kind of change as the study. Our
# comparison is overlay vs a routed pod network, as the study's B (Cilium
# VXLAN) vs A (VPC CNI, native VPC routing); kube-proxy mode does not touch
# pod-to-pod traffic. Their stream count and RTT tool differ from ours: see caveat.
LIKE_FOR_LIKE = [
    {"claim": "TCP throughput: VXLAN overlay vs routed pods",
     "ours_test": "tcp_stream_1", "ours_metric": "throughput", "ours_side": "none",
     "ours_scenario": "vxlan", "ours_baseline": "veth-routed",
     "theirs_metric": "tcp_throughput", "theirs_scenario": "B", "theirs_baseline": "A",
     "caveat": "theirs: iperf3 between EC2 nodes (12.5 Gbit/s NIC cap); ours: one netperf stream in netns"},
    {"claim": "Round-trip latency: VXLAN overlay vs routed pods",
     "ours_test": "tcp_rr", "ours_metric": "latency_p50", "ours_side": "none",
     "ours_scenario": "vxlan", "ours_baseline": "veth-routed",
     "theirs_metric": "pod_rtt", "theirs_scenario": "B", "theirs_baseline": "A",
     "caveat": "theirs: pod-to-pod RTT; ours: netperf TCP_RR median transaction latency"},
    {"claim": "Connection setup: 1000 vs 4 services, kube-proxy iptables",
     "ours_test": "tcp_crr", "ours_metric": "latency_p50", "ours_side": "none",
     "ours_scenario": "kube-proxy-iptables-1000", "ours_baseline": "kube-proxy-iptables-4",
     "theirs_metric": "conn_setup_time_connection_close", "theirs_scenario": "kube-proxy-iptables-1000",
     "theirs_baseline": "kube-proxy-iptables-4",
     "caveat": "theirs: connection time of HTTP requests with Connection: close on EKS; ours: netperf TCP_CRR "
               "median (connect, 1-byte request/response, close) through the lab's ClusterIP"},
]


# The local cluster with the real Cilium agent (pipelines/local-cilium) mirrors
# the study's B, C and D against A: our baseline is the bridge CNI with
# kube-proxy iptables (routed pods, no encapsulation), theirs the VPC CNI.
CILIUM_AS_STUDY = {"B": "cilium-vxlan-iptables", "C": "cilium-vxlan-ebpf", "D": "cilium-native-ebpf"}
CILIUM_CLAIMS = [  # (claim, our test, our metric, their metric, caveat)
    ("TCP throughput", "tcp_stream", "throughput", "tcp_throughput",
     "theirs: iperf3 between EC2 nodes (12.5 Gbit/s NIC cap); ours: one netperf stream pod to pod across "
     "two cluster nodes that share one kernel and a veth wire"),
    ("Round-trip latency", "tcp_rr", "latency_p50", "pod_rtt",
     "theirs: pod-to-pod RTT; ours: netperf TCP_RR median transaction latency pod to pod"),
    ("HTTP median latency at 1000 q/s", "http_1000", "http_latency_p50", "http_p50_at_1000qps",
     "theirs: fortio on EKS; ours: fortio at 1000 q/s pod to pod on the local cluster"),
    ("HTTP p99 latency at 1000 q/s", "http_1000", "http_latency_p99", "http_p99_at_1000qps",
     "theirs: fortio on EKS; ours: fortio at 1000 q/s pod to pod on the local cluster"),
]
LIKE_FOR_LIKE += [
    {"claim": f"{claim}: {study} vs A (local Cilium)", "ours_test": test, "ours_metric": metric, "ours_side": "none",
     "ours_scenario": ours, "ours_baseline": "bridge-iptables",
     "theirs_metric": theirs, "theirs_scenario": study, "theirs_baseline": "A", "caveat": caveat}
    for study, ours in CILIUM_AS_STUDY.items() for claim, test, metric, theirs, caveat in CILIUM_CLAIMS
]


def load_eks_scenarios(directory: str | Path = REFERENCE_DIR) -> pd.DataFrame:
    """The 2026 EKS m6i study, scenarios A-E: one row per scenario and metric."""
    return pd.read_csv(resolve(directory) / EKS_SCENARIOS)


def load_eks_service_scaling(directory: str | Path = REFERENCE_DIR) -> pd.DataFrame:
    """The 2026 EKS m6i study, 4/104/1000 ClusterIP services: one row per datapath, count and metric."""
    return pd.read_csv(resolve(directory) / EKS_SERVICE_SCALING)


def eks_relative_changes(scenarios: pd.DataFrame, baseline: str = "A") -> pd.DataFrame:
    """Each scenario's change vs the baseline scenario per metric, in % (value / baseline - 1).

    Metrics the baseline did not report (agent memory: VPC CNI has no agent)
    have no change and are left out.
    """
    base = scenarios.loc[scenarios["scenario"] == baseline, ["metric", "value"]].rename(columns={"value": "baseline_value"})
    df = scenarios[scenarios["scenario"] != baseline].merge(base, on="metric", how="inner")
    df["change_pct"] = 100 * (df["value"] / df["baseline_value"] - 1)
    better = df["metric"].map(EKS_HIGHER_IS_BETTER)
    df["direction"] = np.select([df["change_pct"] == 0, (df["change_pct"] > 0) == better],
                                ["same", "better"], "worse")
    df.insert(1, "baseline", baseline)
    return df[["scenario", "label", "baseline", "metric", "unit", "statistic", "baseline_value", "value",
               "change_pct", "direction"]].reset_index(drop=True)


def eks_service_scaling_growth(scaling: pd.DataFrame, base_services: int = 4) -> pd.DataFrame:
    """Change of each metric from `base_services` services to each larger count, per datapath."""
    base = (scaling[scaling["services"] == base_services]
            .rename(columns={"value": "value_from"}).drop(columns="services"))
    df = scaling[scaling["services"] != base_services].merge(base, on=["datapath", "metric", "unit"], how="inner")
    df["change_pct"] = 100 * (df["value"] / df["value_from"] - 1)
    df = df.rename(columns={"services": "services_to", "value": "value_to"}).assign(services_from=base_services)
    return df[["datapath", "metric", "unit", "services_from", "services_to", "value_from", "value_to",
               "change_pct"]].sort_values(["datapath", "metric", "services_to"]).reset_index(drop=True)


def eks_scaling_changes(scaling: pd.DataFrame, base_services: int = 4) -> pd.DataFrame:
    """The service-scaling growth in the shape of eks_relative_changes: scenario `<datapath>-<services>`
    vs baseline `<datapath>-<base_services>`, so side_by_side can pair it with our kube-proxy scenarios."""
    growth = eks_service_scaling_growth(scaling, base_services)
    better = growth["metric"].map(EKS_HIGHER_IS_BETTER)
    return pd.DataFrame({
        "scenario": growth["datapath"] + "-" + growth["services_to"].astype(str),
        "baseline": growth["datapath"] + "-" + growth["services_from"].astype(str),
        "metric": growth["metric"], "unit": growth["unit"], "baseline_value": growth["value_from"],
        "value": growth["value_to"], "change_pct": growth["change_pct"],
        "direction": np.select([growth["change_pct"] == 0, (growth["change_pct"] > 0) == better],
                               ["same", "better"], "worse"),
    })


def side_by_side(metrics: pd.DataFrame, runs: pd.DataFrame, changes: pd.DataFrame,
                 pairs: list[dict] = LIKE_FOR_LIKE, alpha: float = 0.05, correction: str = "holm",
                 noise_band_pct=2.0, seed: int = 0) -> pd.DataFrame:
    """Our relative change (with CI and verdict) next to the study's, for each like-for-like claim.

    The claims form their own family for the correction. A claim whose
    scenarios we did not measure keeps NaN on our side.
    """
    rows = []
    for pair in pairs:
        sub = metrics[(metrics["test"] == pair["ours_test"]) & (metrics["metric"] == pair["ours_metric"])
                      & (metrics["side"] == pair["ours_side"])
                      & metrics["scenario"].isin([pair["ours_scenario"], pair["ours_baseline"]])]
        ours = (compare(sub, runs, baseline=pair["ours_baseline"], alpha=alpha, correction=correction,
                        noise_band_pct=noise_band_pct, seed=seed)
                if (sub["scenario"] == pair["ours_baseline"]).any() else pd.DataFrame())
        theirs = changes[(changes["metric"] == pair["theirs_metric"]) & (changes["scenario"] == pair["theirs_scenario"])
                         & (changes["baseline"] == pair["theirs_baseline"])]
        o = ours.iloc[0] if len(ours) == 1 else {}
        rows.append({
            "claim": pair["claim"], "ours": f"{pair['ours_test']} {pair['ours_metric']}: "
                                            f"{pair['ours_scenario']} vs {pair['ours_baseline']}",
            "ours_n": o.get("n", np.nan), "ours_p": o.get("p", np.nan),
            "ours_delta_pct": o.get("delta_pct", np.nan), "ours_low": o.get("delta_low", np.nan),
            "ours_high": o.get("delta_high", np.nan), "noise_band_pct": o.get("noise_band_pct", np.nan),
            "theirs": f"{pair['theirs_metric']}: {pair['theirs_scenario']} vs {pair['theirs_baseline']}",
            "theirs_change_pct": theirs["change_pct"].iloc[0] if len(theirs) == 1 else np.nan,
            "theirs_direction": theirs["direction"].iloc[0] if len(theirs) == 1 else "",
            "higher_is_better": metric_info(pair["ours_metric"]).higher_is_better,
            "caveat": pair["caveat"],
        })
    df = pd.DataFrame(rows)
    df["ours_p_adj"] = adjust(df["ours_p"].to_numpy(float), correction, alpha)
    df["ours_verdict"] = [
        "not measured" if np.isnan(r.ours_n)
        else verdict(r.ours_p_adj, r.ours_delta_pct, r.ours_low, r.ours_high, alpha, r.noise_band_pct,
                     r.higher_is_better)
        for r in df.itertuples()
    ]
    df["correction"] = CORRECTIONS[correction]
    return df.drop(columns=["higher_is_better", "noise_band_pct"])
