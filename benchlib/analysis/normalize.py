"""CPU cost per unit of work, computed per run ("sum first, then divide").

Busy CPU-seconds are summed over a side's CPUs before dividing by the number
of CPUs and by the work done, so a side with one hot CPU and one idle CPU
counts as 50 % busy, not as an average of per-CPU percentages.
"""
from __future__ import annotations

import pandas as pd

from benchlib.schema import DERIVED_METRICS, METRICS, METRICS_SCHEMA, WORK_METRICS

CPU_AT_TARGET = "cpu_pct_at_target"
CPU_SIDES = DERIVED_METRICS[CPU_AT_TARGET].sides  # client, server and total

RUN_KEYS = [c for c in METRICS_SCHEMA.names if c not in ("metric", "value", "unit", "side")]


def per_run_cpu(metrics: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """One row per run: busy % of client, server and both sides' CPUs, and the work done.

    Columns: RUN_KEYS, client, server, total (percent of the respective CPUs),
    work_metric, work (value of the work metric in its schema unit).
    """
    def values(metric: str, side: str | None = None) -> pd.Series:
        rows = metrics[(metrics["metric"] == metric) if side is None
                       else (metrics["metric"] == metric) & (metrics["side"] == side)]
        return rows.set_index("run_id")["value"]

    work = metrics[metrics["metric"].isin(WORK_METRICS)].set_index("run_id")
    df = pd.concat({
        "client_cores": values("cpu_busy_cores", "client"),
        "server_cores": values("cpu_busy_cores", "server"),
        "work_metric": work["metric"],
        "work": work["value"],
    }, axis=1, join="inner")
    df = df.join(runs.set_index("run_id")[["client_cpus", "server_cpus"]], how="inner")
    out = pd.DataFrame({
        "client": 100 * df["client_cores"] / df["client_cpus"],
        "server": 100 * df["server_cores"] / df["server_cpus"],
        # sum the busy cores of both sides first, then divide by all their CPUs
        "total": 100 * (df["client_cores"] + df["server_cores"]) / (df["client_cpus"] + df["server_cpus"]),
        "work_metric": df["work_metric"],
        "work": df["work"],
    })
    keys = metrics.drop_duplicates("run_id").set_index("run_id")[[k for k in RUN_KEYS if k != "run_id"]]
    out = keys.join(out, how="inner").reset_index()
    return out[RUN_KEYS + ["client", "server", "total", "work_metric", "work"]]


def work_targets(target_gbps: float = 100.0, per_transactions: float = 10_000,
                 per_connections: float = 10_000) -> dict[str, float]:
    """The fixed work rate each work metric is normalized to, in the metric's unit."""
    return {"throughput": target_gbps, "transaction_rate": per_transactions, "connection_rate": per_connections}


def cpu_at_target(metrics: pd.DataFrame, runs: pd.DataFrame, target_gbps: float = 100.0,
                  per_transactions: float = 10_000, per_connections: float = 10_000) -> pd.DataFrame:
    """Long table shaped like metrics: CPU % needed for the target work rate, sides client/server/total.

    cpu_pct_at_target = busy % of the side's CPUs * target / measured work.
    Runs that did no work (rate 0) have no finite cost and are left out; they
    show up as failed runs in the run table's outcome, not here.
    """
    targets = work_targets(target_gbps, per_transactions, per_connections)
    df = per_run_cpu(metrics, runs)
    df = df[df["work"] > 0]
    scale = df["work_metric"].map(targets) / df["work"]
    unit = df["work_metric"].map(lambda m: f"% CPU @ {targets[m]:g} {METRICS[m].unit}")
    long = [
        df[RUN_KEYS].assign(metric=CPU_AT_TARGET, value=df[side] * scale, unit=unit, side=side)
        for side in CPU_SIDES
    ]
    return pd.concat(long, ignore_index=True)[METRICS_SCHEMA.names]


def with_cpu_at_target(metrics: pd.DataFrame, runs: pd.DataFrame, **targets) -> pd.DataFrame:
    """The metrics table plus the cpu_pct_at_target rows (targets: see cpu_at_target)."""
    return pd.concat([metrics, cpu_at_target(metrics, runs, **targets)], ignore_index=True)
