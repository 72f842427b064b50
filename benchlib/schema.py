"""The tidy tables (runs, metrics) and the metric registry.

Both tables are long and flat so that pandas/duckdb users can pivot them as
they like; figures and tables pivot, nothing else does.
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import pyarrow as pa


class SchemaError(ValueError):
    """A tidy table does not have the columns or types it must have."""


@dataclass(frozen=True)
class Metric:
    unit: str
    higher_is_better: bool
    description: str


# Every metric a collector may emit. The analysis takes units and the
# direction of "better" from here, never from column names.
METRICS: dict[str, Metric] = {
    "throughput": Metric("Gbit/s", True, "payload throughput (iperf3: as received), summed over streams"),
    "retransmits": Metric("segments", False, "TCP retransmissions seen by the sender"),
    "udp_loss_pct": Metric("%", False, "UDP datagrams lost between sender and receiver (iperf3)"),
    "udp_jitter": Metric("us", False, "UDP packet delay variation at the receiver (iperf3, RFC 1889)"),
    "http_qps": Metric("req/s", True, "HTTP requests completed per second (fortio)"),
    "http_latency_p50": Metric("us", False, "median HTTP request latency (fortio)"),
    "http_latency_p90": Metric("us", False, "90th percentile HTTP request latency (fortio)"),
    "http_latency_p99": Metric("us", False, "99th percentile HTTP request latency (fortio)"),
    "http_latency_p999": Metric("us", False, "99.9th percentile HTTP request latency (fortio)"),
    "http_errors": Metric("requests", False, "HTTP requests without a 200 answer, socket errors included (fortio)"),
    "dns_qps": Metric("queries/s", True, "DNS queries answered per second (dnsperf)"),
    "dns_latency_p50": Metric("us", False, "median DNS resolution latency (dnsperf)"),
    "dns_latency_p99": Metric("us", False, "99th percentile DNS resolution latency (dnsperf)"),
    "dns_errors": Metric("queries", False, "DNS queries timed out or answered other than NOERROR (dnsperf)"),
    "transaction_rate": Metric("trans/s", True, "request/response transactions per second"),
    "connection_rate": Metric("conn/s", True, "connect+request+response+close per second"),
    "latency_min": Metric("us", False, "minimum round-trip latency"),
    "latency_p50": Metric("us", False, "median round-trip latency"),
    "latency_p90": Metric("us", False, "90th percentile round-trip latency"),
    "latency_p99": Metric("us", False, "99th percentile round-trip latency"),
    "latency_mean": Metric("us", False, "mean round-trip latency"),
    "cpu_busy_pct": Metric("%", False, "busy share of the side's CPUs over the steady-state window"),
    "cpu_busy_cores": Metric("cores", False, "busy CPU seconds per second on the side's CPUs"),
}

SIDES = ("client", "server", "none")

_UTC = pa.timestamp("us", tz="UTC")

RUNS_SCHEMA = pa.schema([
    ("campaign", pa.string()),
    ("environment", pa.string()),
    ("scenario", pa.string()),
    ("test", pa.string()),
    ("tool", pa.string()),
    ("kind", pa.string()),
    ("streams", pa.int64()),
    ("message_size", pa.int64()),
    # test and scenario parameters the figures put on an axis
    ("offered_qps", pa.float64()),      # fortio/dns offered rate; null: unpaced ('max') or not a rate test
    ("connection_close", pa.bool_()),  # fortio: a connection per request
    ("services", pa.int64()),          # ClusterIP services in the path; null: none
    ("repetition", pa.int64()),
    ("block", pa.int64()),
    ("order", pa.int64()),
    ("run_id", pa.string()),
    ("attempts", pa.int64()),
    ("outcome", pa.string()),
    ("failure_reason", pa.string()),
    ("started_at", _UTC),
    ("ended_at", _UTC),
    ("duration_s", pa.float64()),
    ("client_cpus", pa.int64()),
    ("server_cpus", pa.int64()),
    ("client_node", pa.string()),
    ("server_node", pa.string()),
    ("kernel", pa.string()),
    ("tool_version", pa.string()),
    ("record", pa.string()),
])

METRICS_SCHEMA = pa.schema([
    ("campaign", pa.string()),
    ("environment", pa.string()),
    ("scenario", pa.string()),
    ("test", pa.string()),
    ("streams", pa.int64()),
    ("message_size", pa.int64()),
    ("repetition", pa.int64()),
    ("block", pa.int64()),
    ("run_id", pa.string()),
    ("metric", pa.string()),
    ("value", pa.float64()),
    ("unit", pa.string()),
    ("side", pa.string()),
])


def to_table(df: pd.DataFrame, schema: pa.Schema, name: str) -> pa.Table:
    """Convert ``df`` to ``schema`` exactly, or raise SchemaError naming the table."""
    missing = [f for f in schema.names if f not in df.columns]
    extra = [c for c in df.columns if c not in schema.names]
    if missing or extra:
        raise SchemaError(f"{name}: missing columns {missing}, unexpected columns {extra}")
    try:
        return pa.Table.from_pandas(df[schema.names], schema=schema, preserve_index=False)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise SchemaError(f"{name}: {exc}") from exc


def check_metrics(df: pd.DataFrame) -> None:
    """Values a metrics table must satisfy beyond its types."""
    unknown = sorted(set(df["metric"]) - set(METRICS))
    if unknown:
        raise SchemaError(f"metrics: unknown metric names {unknown}")
    bad_side = sorted(set(df["side"]) - set(SIDES))
    if bad_side:
        raise SchemaError(f"metrics: unknown sides {bad_side}")
    wrong_unit = df[df["unit"] != df["metric"].map(lambda m: METRICS[m].unit)]
    if not wrong_unit.empty:
        row = wrong_unit.iloc[0]
        raise SchemaError(f"metrics: metric {row.metric} has unit {row.unit!r}, expected {METRICS[row.metric].unit!r}")


def read_runs(path) -> pd.DataFrame:
    return pd.read_parquet(path, schema=RUNS_SCHEMA)


def read_metrics(path) -> pd.DataFrame:
    return pd.read_parquet(path, schema=METRICS_SCHEMA)
