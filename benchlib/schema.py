"""The tidy tables (runs, metrics) and the metric registry.

Both tables are long and flat so that pandas/duckdb users can pivot them as
they like; figures and tables pivot, nothing else does.
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import pyarrow as pa

from .errors import SchemaError


# The two sides of every run. A metric row has one of these, or "none" for
# what belongs to the run as a whole (throughput, latency).
SIDES = ("client", "server")
NO_SIDE = "none"
TOTAL_SIDE = "total"  # derived CPU metrics: both sides' CPUs together


@dataclass(frozen=True)
class Metric:
    unit: str
    higher_is_better: bool
    description: str
    primary: bool = False  # what a test's bar charts and progress line show
    percentile: float | None = None  # a latency percentile: which one
    sides: tuple[str, ...] = (NO_SIDE,)


_DERIVED_SIDES = (*SIDES, TOTAL_SIDE)


def _p(unit: str, description: str, percentile: float) -> Metric:
    return Metric(unit, False, description, percentile=percentile)


# Every metric a collector may emit. The analysis takes units, the direction
# of "better", sides and roles from here, never from column names.
METRICS: dict[str, Metric] = {
    "throughput": Metric("Gbit/s", True, "payload throughput (iperf3: as received), summed over streams",
                         primary=True),
    "retransmits": Metric("segments", False, "TCP retransmissions seen by the sender"),
    "udp_loss_pct": Metric("%", False, "UDP datagrams lost between sender and receiver (iperf3)", primary=True),
    "udp_jitter": Metric("us", False, "UDP packet delay variation at the receiver (iperf3, RFC 1889)"),
    "transaction_rate": Metric("trans/s", True, "request/response transactions per second", primary=True),
    "connection_rate": Metric("conn/s", True, "connect+request+response+close per second", primary=True),
    "http_qps": Metric("req/s", True, "HTTP requests completed per second (fortio)", primary=True),
    "http_latency_p50": _p("us", "median HTTP request latency (fortio)", 50),
    "http_latency_p90": _p("us", "90th percentile HTTP request latency (fortio)", 90),
    "http_latency_p99": _p("us", "99th percentile HTTP request latency (fortio)", 99),
    "http_latency_p999": _p("us", "99.9th percentile HTTP request latency (fortio)", 99.9),
    "http_errors": Metric("requests", False, "HTTP requests without a 200 answer, socket errors included (fortio)"),
    "dns_qps": Metric("queries/s", True, "DNS queries answered per second (dnsperf)", primary=True),
    "dns_latency_p50": _p("us", "median DNS resolution latency (dnsperf)", 50),
    "dns_latency_p99": _p("us", "99th percentile DNS resolution latency (dnsperf)", 99),
    "dns_errors": Metric("queries", False, "DNS queries timed out or answered other than NOERROR (dnsperf)"),
    "latency_min": Metric("us", False, "minimum round-trip latency"),
    "latency_p50": _p("us", "median round-trip latency", 50),
    "latency_p90": _p("us", "90th percentile round-trip latency", 90),
    "latency_p99": _p("us", "99th percentile round-trip latency", 99),
    "latency_mean": Metric("us", False, "mean round-trip latency"),
    "cpu_busy_pct": Metric("%", False, "busy share of the side's CPUs over the steady-state window",
                           sides=SIDES),
    "cpu_busy_cores": Metric("cores", False, "busy CPU seconds per second on the side's CPUs", sides=SIDES),
}

# Metrics the analysis derives from the collected ones; never in metrics.parquet.
# Their rows carry the work rate in the unit, e.g. "% CPU @ 100 Gbit/s".
DERIVED_METRICS: dict[str, Metric] = {
    "cpu_pct_at_target": Metric(
        "%", False, "busy share of the side's CPUs (total: of both sides' CPUs) needed for a fixed work rate",
        sides=_DERIVED_SIDES),
}

# The work a run did, one per run (the base of the CPU cost): its metric names.
WORK_METRICS = ("throughput", "transaction_rate", "connection_rate")
PRIMARY_METRICS = tuple(name for name, m in METRICS.items() if m.primary)


def metric_info(name: str) -> Metric:
    """Unit, direction and attributes of a collected or derived metric."""
    if name in METRICS:
        return METRICS[name]
    if name in DERIVED_METRICS:
        return DERIVED_METRICS[name]
    raise KeyError(f"unknown metric {name!r}: not in benchlib.schema.METRICS nor DERIVED_METRICS")


def percentiles(prefix: str) -> tuple[str, ...]:
    """The percentile metrics named <prefix>_p<n>, lowest percentile first."""
    found = [(m.percentile, n) for n, m in METRICS.items() if m.percentile is not None and n.startswith(prefix + "_p")]
    return tuple(n for _, n in sorted(found))


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
    ("nodes_share_kernel", pa.bool_()),  # client and server nodes run on one kernel (its CPUs); null: unknown
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
    allowed = {(name, side) for name, m in METRICS.items() for side in m.sides}
    bad_side = df[~pd.MultiIndex.from_arrays([df["metric"], df["side"]]).isin(allowed)]
    if not bad_side.empty:
        row = bad_side.iloc[0]
        raise SchemaError(f"metrics: metric {row.metric} has side {row.side!r} (run {row.run_id}), "
                          f"allowed: {list(METRICS[row.metric].sides)}")
    wrong_unit = df[df["unit"] != df["metric"].map(lambda m: METRICS[m].unit)]
    if not wrong_unit.empty:
        row = wrong_unit.iloc[0]
        raise SchemaError(f"metrics: metric {row.metric} has unit {row.unit!r}, expected {METRICS[row.metric].unit!r}")


def read_runs(path) -> pd.DataFrame:
    return pd.read_parquet(path, schema=RUNS_SCHEMA)


def read_metrics(path) -> pd.DataFrame:
    return pd.read_parquet(path, schema=METRICS_SCHEMA)
