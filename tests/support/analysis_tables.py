"""Small schema-conforming tidy tables with known values, for the analysis tests (not measurements)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import numpy as np
import polars as pl

from benchlib.vocabulary import schema

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def make_tables(
    samples: dict,
    failed: dict | None = None,
    cpus: tuple[int, int] = (1, 1),
    campaign: str = "c1",
    environment: str = "local-lab",
    run_columns: dict | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(runs, metrics) from {(scenario, test): {(metric, side): [value of run 0, run 1, ...]}}.

    Run i of every configuration is in block i; within a block configurations
    run in dict order, one minute apart. `failed` adds {(scenario, test): k}
    failed runs (no metric rows) after the others. `run_columns` sets runs
    columns per configuration: {(scenario, test): {"services": 1000, ...}}.
    """
    runs, metrics = [], []
    n_configs = len(samples)
    for j, ((scenario, test), columns) in enumerate(samples.items()):
        n = len(next(iter(columns.values())))
        n_failed = (failed or {}).get((scenario, test), 0)
        for i in range(n + n_failed):
            run_id = f"{scenario}-{test}-{i}"
            ok = i < n
            start = T0 + timedelta(minutes=i * n_configs + j)
            runs.append(
                {
                    "campaign": campaign,
                    "environment": environment,
                    "scenario": scenario,
                    "test": test,
                    "tool": "netperf",
                    "kind": "TCP_STREAM",
                    "streams": 1,
                    "message_size": None,
                    "offered_qps": None,
                    "connection_close": False,
                    "services": None,
                    "test_params": json.dumps({"duration_s": 30}),
                    "block": i,
                    "order": i * n_configs + j,
                    "run_id": run_id,
                    "attempts": 1,
                    "outcome": "ok" if ok else "failed",
                    "failure_reason": None if ok else "netperf exited 1",
                    "started_at": start,
                    "ended_at": start + timedelta(seconds=30),
                    "duration_s": 30.0,
                    "client_cpus": cpus[0],
                    "server_cpus": cpus[1],
                    "client_node": "n1",
                    "server_node": "n2",
                    "nodes_share_kernel": True,
                    "kernel": "6.1.0-test",
                    "tool_version": "2.7.0",
                    "record": f"data/raw/{run_id}",
                    **(run_columns or {}).get((scenario, test), {}),
                }
            )
            if not ok:
                continue
            for (metric, side), values in columns.items():
                metrics.append(
                    {
                        "campaign": campaign,
                        "environment": environment,
                        "scenario": scenario,
                        "test": test,
                        "streams": 1,
                        "message_size": None,
                        "block": i,
                        "run_id": run_id,
                        "metric": metric,
                        "value": float(values[i]),
                        "unit": schema.METRICS[metric].unit,
                        "side": side,
                    }
                )
    # through the schema so types are exactly those of the real tables
    runs_df = schema.conform(pl.DataFrame(runs, infer_schema_length=None), "runs")
    metrics_df = schema.conform(pl.DataFrame(metrics, schema=schema.METRICS_SCHEMA), "metrics")
    schema.check_metrics(metrics_df)
    return runs_df, metrics_df


def lab_like_samples(n: int = 8, seed: int = 1) -> dict:
    """Four scenarios x four tests with every metric the lab emits; vxlan clearly slower."""
    rng = np.random.default_rng(seed)
    slow = {"host": 1.0, "veth-routed": 0.97, "bridge": 0.96, "vxlan": 0.8}
    samples = {}
    for scenario, f in slow.items():

        def noisy(center, rel=0.01):
            return center * (1 + rel * rng.standard_normal(n))

        cpu = {
            ("cpu_busy_cores", "client"): noisy(0.9),
            ("cpu_busy_cores", "server"): noisy(0.7),
            ("cpu_busy_pct", "client"): noisy(90.0),
            ("cpu_busy_pct", "server"): noisy(70.0),
        }
        samples[(scenario, "tcp_stream_1")] = {
            ("throughput", "none"): noisy(40 * f),
            ("retransmits", "none"): rng.integers(0, 3, n),
            **cpu,
        }
        samples[(scenario, "tcp_stream_n")] = {("throughput", "none"): noisy(60 * f), **cpu}
        lat = {
            ("latency_min", "none"): noisy(20 / f),
            ("latency_p50", "none"): noisy(30 / f),
            ("latency_p90", "none"): noisy(40 / f),
            ("latency_p99", "none"): noisy(60 / f),
            ("latency_mean", "none"): noisy(32 / f),
        }
        samples[(scenario, "tcp_rr")] = {("transaction_rate", "none"): noisy(30000 * f), **lat, **cpu}
        samples[(scenario, "tcp_crr")] = {("connection_rate", "none"): noisy(8000 * f), **lat, **cpu}
    return samples


def datapath_samples(n: int = 8, seed: int = 2) -> tuple[dict, dict]:
    """(samples, run_columns) of a service-scaling and HTTP-sweep campaign with known effects.

    iptables loses 10 % connection rate per decade of services above 4;
    nftables stays flat; at 5000 req/s and unpaced, the `slow` scenario's
    HTTP latency is twice the baseline's.
    """
    rng = np.random.default_rng(seed)

    def noisy(center):
        return center * (1 + 0.01 * rng.standard_normal(n))

    samples, columns = {}, {}
    samples[("veth-routed", "tcp_crr")] = {("connection_rate", "none"): noisy(7000)}
    for proxy in ("iptables", "nftables"):
        for services in (4, 1000, 10000):
            scenario = f"kube-proxy-{proxy}-{services}"
            loss = 1 - 0.1 * np.log10(services / 4) if proxy == "iptables" else 1.0
            samples[(scenario, "tcp_crr")] = {("connection_rate", "none"): noisy(6500 * loss)}
            columns[(scenario, "tcp_crr")] = {"services": services}
    for scenario, factor in (("veth-routed", 1.0), ("slow", 2.0)):
        for test, qps in (("http_1000", 1000.0), ("http_5000", 5000.0), ("http_max", None)):
            f = 1.0 if qps == 1000.0 else factor
            samples[(scenario, test)] = {
                ("http_qps", "none"): noisy(qps or 9000),
                **{
                    (f"http_latency_{p}", "none"): noisy(v * f)
                    for p, v in (("p50", 200), ("p90", 300), ("p99", 500), ("p999", 900))
                },
            }
            columns[(scenario, test)] = {"tool": "fortio", "kind": "HTTP", "offered_qps": qps}
    return samples, columns


def settings(params_path: str = "params.yaml"):
    """The analysis section of a params file of the project (relative to the project root)."""
    from benchlib.analysis import resolve
    from benchlib.settings.loading import load_params

    return load_params(resolve(params_path)).analysis


def analysed(runs: pl.DataFrame, metrics: pl.DataFrame, directory, analysis_settings=None):
    """The tables written as `benchlib parse` and `benchlib analyse` write them, under ``directory``:
    returns (analysis directory, the analysis)."""
    from benchlib.analysis import analyse
    from benchlib.tables import tidy

    tidy.write_tables(runs, metrics, directory)
    result = analyse.run(runs, metrics, analysis_settings or settings())
    out = analyse.write(result, directory / "analysis", directory / "runs.parquet", directory / "metrics.parquet")
    return out, result


def report_comparisons(fixture: str) -> tuple[dict, pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """(parameters, runs, values, comparisons) of a real campaign's tables in ``fixture``, compared as
    `benchlib analyse` compares them with the project's analysis settings, before resolution.annotate
    and saturation.annotate."""
    from benchlib.analysis import analyse, load_tables, normalize, stats

    s = settings()
    runs, metrics = load_tables(f"{fixture}/runs.parquet", f"{fixture}/metrics.parquet")
    values = normalize.with_cpu_at_target(metrics, runs, **normalize.work_rates(s))
    return s.model_dump(), runs, values, analyse.compare(stats.compared_values(values, runs, s.family_metrics), runs, s)


def degenerate(case: str, tmp_path):
    """The analysis of a campaign with nothing (or little) to conclude: "every run failed", "tiny n",
    "one scenario" or "no baseline" (its every run failed); written under tmp_path/analysis."""
    cpu = {("cpu_busy_cores", "client"): [0.9, 0.8], ("cpu_busy_cores", "server"): [0.7, 0.6]}
    failed = None
    if case == "every run failed":
        samples = {
            ("host", "tcp_stream_1"): {("throughput", "none"): [40.0]},
            ("vxlan", "tcp_stream_1"): {("throughput", "none"): [30.0]},
        }
        failed = {("host", "tcp_stream_1"): 2, ("vxlan", "tcp_stream_1"): 2}
    elif case == "tiny n":
        samples = {
            ("host", "tcp_rr"): {("transaction_rate", "none"): [9e3, 9.1e3], **cpu},
            ("vxlan", "tcp_rr"): {("transaction_rate", "none"): [8e3, 8.1e3], **cpu},
        }
    elif case == "one scenario":
        samples = {("host", "tcp_rr"): {("transaction_rate", "none"): [9e3 + i for i in range(8)]}}
    else:  # the baseline never succeeded
        samples = {
            ("host", "tcp_rr"): {("transaction_rate", "none"): [1.0]},
            ("vxlan", "tcp_rr"): {("transaction_rate", "none"): [8e3 + i for i in range(8)]},
        }
        failed = {("host", "tcp_rr"): 2}
    runs, metrics = make_tables(samples, failed=failed)
    if case == "every run failed":
        runs = runs.with_columns(outcome=pl.lit("failed"), failure_reason=pl.lit("netperf exited 1"))
    elif case == "no baseline":
        runs = runs.with_columns(
            outcome=pl.when(pl.col("scenario") == "host").then(pl.lit("failed")).otherwise("outcome")
        )
    return analysed(runs, metrics.join(runs.filter(outcome="ok").select("run_id"), on="run_id"), tmp_path)[1]
