"""The tidy tables (runs, metrics) and the metric registry.

Both tables are long and flat polars frames (parquet on disk) that users can
pivot as they like; figures and tables pivot, nothing else does.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import polars as pl

from ..base import limits
from ..base.errors import SchemaError
from ..base.files import temporary, write_atomically
from ..base.processes import alive

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
    "throughput": Metric("Gbit/s", True, "payload throughput (iperf3: as received), summed over streams", primary=True),
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
    # side total: a run with cpu_placement shared, whose client and server had one CPU set (the whole path's)
    "cpu_busy_pct": Metric(
        "%", False, "busy share of the side's CPUs over the steady-state window", sides=(*SIDES, TOTAL_SIDE)
    ),
    "cpu_busy_cores": Metric(
        "cores", False, "busy CPU seconds per second on the side's CPUs", sides=(*SIDES, TOTAL_SIDE)
    ),
    # the target's own datapath processes (the lab's mesh proxies) over the CPU window: only in runs whose
    # target recorded them; a side without a proxy then has 0 CPU and no RSS row
    "proxy_cpu_s": Metric(
        "s", False, "CPU seconds (user + system) of the side's proxies over the CPU window", sides=SIDES
    ),
    "proxy_cpu_cores": Metric(
        "cores", False, "the side's proxies' CPU seconds per second of the CPU window", sides=SIDES
    ),
    "proxy_peak_rss_kib": Metric(
        "KiB", False, "largest peak RSS of the side's proxies within the CPU window", sides=SIDES
    ),
}

# Metrics the analysis derives from the collected ones; never in metrics.parquet.
# Their unit names the work rate for a reader, e.g. "% CPU @ 100 Gbit/s"; the analysis' summaries carry
# it as data beside the unit (benchlib.analysis.normalize.WORK_COLUMNS).
DERIVED_METRICS: dict[str, Metric] = {
    "cpu_pct_at_target": Metric(
        "%",
        False,
        "busy share of the side's CPUs (total: of both sides' CPUs) needed for a fixed work rate",
        sides=_DERIVED_SIDES,
    ),
    "proxy_cpu_pct_at_target": Metric(
        "%",
        False,
        "the proxies' CPU, in % of one core (total: both sides' proxies), needed for a fixed work rate",
        sides=_DERIVED_SIDES,
    ),
}

# The work a run did, one per run (the base of the CPU cost): its metric names.
WORK_METRICS = ("throughput", "transaction_rate", "connection_rate", "http_qps")
# What one unit of each counted rate is: the work a CPU cost is per ("µs per transaction")
WORK_NOUNS = {
    "transaction_rate": "transaction",
    "connection_rate": "connection",
    "http_qps": "request",
    "dns_qps": "query",
}
PRIMARY_METRICS = tuple(name for name, m in METRICS.items() if m.primary)

# The headline metric of each test kind: the one question the test answers, compared in the primary family.
# A paced test (fortio, dnsperf at a fixed offered rate) achieves its rate on any working path, so its
# headline is the median latency at that rate instead.
HEADLINE_BY_KIND = {
    "TCP_STREAM": "throughput",
    "TCP_RR": "transaction_rate",
    "TCP_CRR": "connection_rate",
    "UDP_STREAM": "udp_loss_pct",
    "HTTP": "http_qps",
    "DNS_UDP": "dns_qps",
}
PACED_HEADLINE = {"http_qps": "http_latency_p50", "dns_qps": "dns_latency_p50"}


def headline_metric(kind: str | None, paced: bool, present) -> str | None:
    """The headline metric of a test of ``kind`` among the metric names ``present``: the kind's own (its
    latency median when paced), else the first primary metric present; None if there is none."""
    metric = HEADLINE_BY_KIND.get(kind or "")
    if paced and metric in PACED_HEADLINE:
        metric = PACED_HEADLINE[metric]
    if metric in present:
        return metric
    return next((m for m in PRIMARY_METRICS if m in present), None)


def metric_info(name: str) -> Metric:
    """Unit, direction and attributes of a collected or derived metric."""
    if name in METRICS:
        return METRICS[name]
    if name in DERIVED_METRICS:
        return DERIVED_METRICS[name]
    raise KeyError(f"unknown metric {name!r}: not in benchlib.vocabulary.schema.METRICS nor DERIVED_METRICS")


def percentiles(prefix: str) -> tuple[str, ...]:
    """The percentile metrics named <prefix>_p<n>, lowest percentile first."""
    found = [(m.percentile, n) for n, m in METRICS.items() if m.percentile is not None and n.startswith(prefix + "_p")]
    return tuple(n for _, n in sorted(found))


GSO_DEFAULT_MAX_SIZE = 65536  # bytes: a GSO/GRO packet's limit without BIG TCP

_UTC = pl.Datetime("us", "UTC")

# Column names and dtypes of the two tables: written, read and built against these only.
RUNS_SCHEMA = pl.Schema(
    {
        "campaign": pl.String,
        "environment": pl.String,
        "scenario": pl.String,
        "test": pl.String,
        "tool": pl.String,
        "kind": pl.String,
        "streams": pl.Int64,
        "message_size": pl.Int64,
        # test and scenario parameters the figures put on an axis
        "offered_qps": pl.Float64,  # fortio/dns offered rate; null: unpaced ('max') or not a rate test
        "connection_close": pl.Boolean,  # fortio: a connection per request
        "services": pl.Int64,  # ClusterIP services in the path; null: none
        # the datapath as the target recorded it (RUNS_DEFAULTS: what a run recorded before these existed)
        "mesh": pl.String,  # lab mesh shape (server-sidecar, sidecars, ...); "none": no proxy
        "proxy_hops": pl.Int64,  # proxies a request passes through
        "mtls": pl.Boolean,  # mutual TLS between the proxies
        "proxy_kind": pl.String,  # e.g. haproxy; null: no proxy
        "proxy_version": pl.String,
        "ip_family": pl.Int64,  # 4 or 6: the benchmark traffic's
        "big_tcp": pl.Boolean,  # GSO/GRO max size above 64 KiB on the path's links
        "gso_gro_max_size": pl.Int64,  # bytes, as set on every link; null: the kernel's default (64 KiB)
        "cpu_placement": pl.String,  # split: client and server on their own CPUs; shared: one CPU set
        # every parameter of the test as recorded (canonical JSON: sorted keys): runs with different
        # settings are never pooled, whatever the test is called
        "test_params": pl.String,
        "block": pl.Int64,
        "order": pl.Int64,
        "run_id": pl.String,
        "attempts": pl.Int64,
        "outcome": pl.String,  # ok, failed, disturbed (other processes took its CPUs); only ok runs are analysed
        "failure_reason": pl.String,
        # cores of the run's CPUs that other processes took over the CPU window; null: not measured
        "foreign_cpu": pl.Float64,
        "foreign_top": pl.String,  # the other processes that took most, e.g. "sha256sum 0.98, python3 0.01"
        # the host daemons frozen over the CPU window (a quiet window), comma-separated; "" none could be;
        # null: no quiet window was asked for (or the record predates them)
        "quiet_frozen": pl.String,
        "started_at": _UTC,
        "ended_at": _UTC,
        "duration_s": pl.Float64,
        "client_cpus": pl.Int64,
        "server_cpus": pl.Int64,
        "client_node": pl.String,
        "server_node": pl.String,
        "nodes_share_kernel": pl.Boolean,  # client and server nodes run on one kernel (its CPUs); null: unknown
        # the cluster of kubernetes.clusters the run ran on ("default": the environment's own); null: one cluster
        "cluster": pl.String,
        "kernel": pl.String,  # of the run's nodes (its cluster's)
        # the machine as the target described it ("<CPU model>, <n> CPUs, <memory>"); null: not recorded
        "machine": pl.String,
        "tool_version": pl.String,
        # the record's directory, relative to the project inside it (record.table_path), so that the table does
        # not depend on where the project lives
        "record": pl.String,
    }
)

METRICS_SCHEMA = pl.Schema(
    {
        "campaign": pl.String,
        "environment": pl.String,
        "scenario": pl.String,
        "test": pl.String,
        "streams": pl.Int64,
        "message_size": pl.Int64,
        "block": pl.Int64,
        "run_id": pl.String,
        "metric": pl.String,
        "value": pl.Float64,
        "unit": pl.String,
        "side": pl.String,
    }
)

# Profiled runs (never in runs or metrics): one row per profiled run, and its CPU profile as one row
# per side, task and stack (benchlib.profiling.stacks.rows). A stack's frames run root -> leaf, ";"-separated.
# which profiled run a row is of, in both tables
_PROFILED_RUN = {
    "run_id": pl.String,
    "campaign": pl.String,
    "environment": pl.String,
    "scenario": pl.String,
    "test": pl.String,
    "kind": pl.String,
}
PROFILE_RUNS_SCHEMA = pl.Schema(
    {
        **_PROFILED_RUN,
        "block": pl.Int64,
        "attribution": pl.String,  # "cpu": samples split by side by CPU; "shared": both sides in side total
        "frequency_hz": pl.Int64,
        "window_s": pl.Float64,
        "samples": pl.Int64,
        "kernel_symbols": pl.Boolean,  # false: kptr_restrict hid them, the kernel frames are [unknown]
        "perf_version": pl.String,
        "kernel": pl.String,
        "metric": pl.String,  # the profiled run's own headline metric (schema.headline_metric), to normalize by
        "value": pl.Float64,
        "unit": pl.String,
        "outcome": pl.String,
        "failure_reason": pl.String,
    }
)

PROFILES_SCHEMA = pl.Schema(
    {
        **_PROFILED_RUN,
        "side": pl.String,  # client, server, or total where the sides share CPUs
        "comm": pl.String,
        "stack": pl.String,
        "category": pl.String,  # benchlib.profiling.stacks.CATEGORIES
        "samples": pl.Int64,
    }
)

# The kernel's accounting of each BPF program over a profiled run's CPU window (benchlib.profiling.bpfstats): one
# row per run and program that ran, its counters' differences.
PROFILE_BPF_SCHEMA = pl.Schema(
    {
        "run_id": pl.String,
        "id": pl.Int64,
        "name": pl.String,
        "type": pl.String,  # sched_cls (tc), xdp, cgroup_sock_addr, ...
        "attach": pl.String,  # "<netns> <device> <hook>", "" where not on a device
        "run_cnt": pl.Int64,
        "run_time_ns": pl.Int64,
    }
)

_SCHEMAS = {
    "runs": RUNS_SCHEMA,
    "metrics": METRICS_SCHEMA,
    "profile_runs": PROFILE_RUNS_SCHEMA,
    "profiles": PROFILES_SCHEMA,
    "profile_bpf": PROFILE_BPF_SCHEMA,
}

# Runs columns added after tables were first written, with the value that was true of every run then
# (no mesh, IPv4, no BIG TCP, split CPUs): an older runs table (or a test's) reads with these filled in.
RUNS_DEFAULTS = {
    "cluster": None,
    "mesh": "none",
    "proxy_hops": 0,
    "mtls": False,
    "proxy_kind": None,
    "proxy_version": None,
    "ip_family": 4,
    "big_tcp": False,
    "gso_gro_max_size": None,
    "cpu_placement": "split",
    "foreign_cpu": None,
    "foreign_top": None,
    "quiet_frozen": None,
    "machine": None,
}


Frame = TypeVar("Frame", pl.DataFrame, pl.LazyFrame)


def conform(df: Frame, name: str) -> Frame:
    """``df`` with exactly the columns and dtypes of table ``name`` (runs, metrics), or SchemaError.

    Casts are strict: a value that does not fit its dtype is an error, never a null.
    """
    sch = _SCHEMAS[name]
    if name == "runs":
        present = df.collect_schema().names()
        df = df.with_columns(pl.lit(v, sch[c]).alias(c) for c, v in RUNS_DEFAULTS.items() if c not in present)
    columns = df.collect_schema().names()
    missing = [c for c in sch.names() if c not in columns]
    extra = [c for c in columns if c not in sch]
    if missing or extra:
        raise SchemaError(f"{name}: missing columns {missing}, unexpected columns {extra}")
    try:
        return df.select(pl.col(c).cast(dtype, strict=True) for c, dtype in sch.items())
    except (pl.exceptions.InvalidOperationError, pl.exceptions.ComputeError, pl.exceptions.SchemaError) as exc:
        raise SchemaError(f"{name}: {exc}") from exc


def empty(name: str) -> pl.DataFrame:
    return pl.DataFrame(schema=_SCHEMAS[name])


# (metric, side, unit) of every allowed metric row: checked by a join, not row by row
_ALLOWED = pl.DataFrame(
    [(name, side, m.unit) for name, m in METRICS.items() for side in m.sides],
    schema={"metric": pl.String, "side": pl.String, "expected_unit": pl.String},
    orient="row",
)


def check_metrics(df: pl.DataFrame | pl.LazyFrame) -> None:
    """Values a metrics table must satisfy beyond its types: known metric, side and unit, finite value.
    A LazyFrame (a scan) is checked in streamed passes over the columns each check reads."""
    unknown = sorted(
        set(df.lazy().select(pl.col("metric").unique()).collect(engine="streaming")["metric"]) - set(METRICS)
    )
    if unknown:
        raise SchemaError(f"metrics: unknown metric names {unknown}")
    # checked on the distinct (metric, side, unit) combinations, not row by row (a million-run table
    # joined whole would be copied); the first offending row in table order is the one named
    combos = (
        df.lazy()
        .select("metric", "side", "unit")
        .unique()
        .collect(engine="streaming")
        .join(_ALLOWED, on=["metric", "side"], how="left")
    )

    def first(bad: pl.DataFrame) -> dict:
        return (
            df.lazy()
            .join(
                bad.lazy().select("metric", "side", "unit"),
                on=["metric", "side", "unit"],
                how="semi",
                nulls_equal=True,
                maintain_order="left",
            )
            .head(1)
            .collect()
            .row(0, named=True)
        )

    bad_side = combos.filter(pl.col("expected_unit").is_null())
    if len(bad_side):
        row = first(bad_side)
        raise SchemaError(
            f"metrics: metric {row['metric']} has side {row['side']!r} (run {row['run_id']}), "
            f"allowed: {list(METRICS[row['metric']].sides)}"
        )
    wrong_unit = combos.filter(pl.col("unit") != pl.col("expected_unit"))
    if len(wrong_unit):
        row = first(wrong_unit)
        raise SchemaError(
            f"metrics: metric {row['metric']} has unit {row['unit']!r}, expected {METRICS[row['metric']].unit!r}"
        )
    bad_value = ~pl.col("value").is_finite() | pl.col("value").is_null()
    count = df.lazy().select(bad_value.sum()).collect(engine="streaming").item()
    if count:
        row = df.lazy().filter(bad_value).head(1).collect().row(0, named=True)
        raise SchemaError(
            f"metrics: {count} value(s) not finite, first: {row['metric']} = {row['value']} (run {row['run_id']})"
        )


FULL_BELOW_BYTES = 1 << 20  # a write failing with less free space than this failed for want of space


def writing(table: Path, target: Path, write) -> None:
    """``write()``, a polars write of ``target`` on the way to table file ``table``. Polars reports a
    failure of the disk (full, read-only, gone) as a ComputeError, with its errno in the text or, when
    the disk filled up while it wrote the footer, lost: either is an OSError naming ``table``, and
    ``target`` is removed."""
    try:
        write()
    except pl.exceptions.PolarsError as exc:
        target.unlink(missing_ok=True)
        code = re.search(r"\(os error (\d+)\)", str(exc))
        if code:
            err = int(code.group(1))
        else:
            free = os.statvfs(target.parent)
            if free.f_bavail * free.f_frsize >= FULL_BELOW_BYTES:
                raise
            err = errno.ENOSPC
        raise OSError(err, os.strerror(err), str(table)) from None


def write(df: pl.DataFrame, name: str, path: Path) -> None:
    """Write table ``name`` to ``path`` atomically, after checking it against its schema."""
    df = conform(df, name)
    if name == "metrics":
        check_metrics(df)
    write_atomically(path, lambda tmp: writing(path, tmp, lambda: df.write_parquet(tmp)))


def remove_stale_temporaries(directory: Path, names) -> list[Path]:
    """Remove from ``directory`` the temporaries of files ``names`` (`temporary`) whose writer is dead
    (a SIGKILL, a power cut): what no later run would otherwise remove. A live writer's are kept."""
    stale = re.compile(rf"^\.({'|'.join(map(re.escape, names))})\.tmp-(\d+)(-.*)?$")
    removed = []
    for p in sorted(directory.iterdir()) if directory.is_dir() else []:
        m = stale.match(p.name)
        if m and not alive(int(m.group(2))):
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
            removed.append(p)
    return removed


PARSE_KEY = "benchlib.parse"  # parquet key-value metadata: which parse wrote the table (`parse_identity`)


def parse_identity(path: Path) -> dict | None:
    """What `benchlib parse` stamped on the table at ``path``: the campaign, a digest of the plan and one
    of the whole set of tables it wrote together; None for a table without it (an older benchlib)."""
    try:
        text = pl.read_parquet_metadata(path).get(PARSE_KEY)
    except (OSError, pl.exceptions.PolarsError):
        return None
    try:
        identity = limits.parse_json(text) if text else None
    except ValueError:
        return None
    return identity if isinstance(identity, dict) else None


class TableWriter:
    """Table ``name`` written to ``path`` chunk by chunk, each chunk checked as `write` checks a whole
    table, so that memory holds a chunk and not the table, however long it grows.

    Polars cannot append to a parquet file: each chunk goes to a part file beside ``path``, and
    `commit` joins the parts in order with polars' streaming engine, which holds only a few
    row groups at a time, then renames the result into place. Leaving the ``with`` block removes
    the parts; without `commit` (an error), ``path`` is left as it was. Tables that go together are
    each `prepare`d (joined beside their place) before any is `publish`ed (renamed into place), so
    that a full disk leaves all of them as they were. ``digest`` is the sha256 of the parts' bytes:
    what the set's identity is made of.
    """

    def __init__(self, name: str, path: Path):
        self.name, self.path, self.rows = name, path, 0
        self._parts_dir = Path(tempfile.mkdtemp(prefix=temporary(path, "-parts-").name, dir=path.parent))
        self._parts: list[Path] = []
        self._tmp = temporary(path)
        self._digest = hashlib.sha256()

    @property
    def digest(self) -> str:
        return self._digest.hexdigest()

    def append(self, df: pl.DataFrame) -> None:
        df = conform(df, self.name)
        if df.is_empty():  # no part: a campaign without profiles wrote three empty parts per chunk
            return
        if self.name == "metrics":
            check_metrics(df)
        part = self._parts_dir / f"{len(self._parts):08d}.parquet"
        writing(self.path, part, lambda: df.write_parquet(part))
        self._digest.update(part.read_bytes())
        self._parts.append(part)
        self.rows += len(df)

    def prepare(self, metadata: dict[str, str] | None = None) -> None:
        """The whole table, joined from its parts, beside its place, with ``metadata`` (parquet key-value)."""
        if self._parts:
            writing(
                self.path, self._tmp, lambda: pl.scan_parquet(self._parts).sink_parquet(self._tmp, metadata=metadata)
            )
        else:
            writing(self.path, self._tmp, lambda: empty(self.name).write_parquet(self._tmp, metadata=metadata))

    def publish(self) -> None:
        """The prepared table renamed into place."""
        self._tmp.replace(self.path)

    def commit(self) -> None:
        self.prepare()
        self.publish()

    def __enter__(self) -> TableWriter:
        return self

    def __exit__(self, *exc) -> None:
        shutil.rmtree(self._parts_dir, ignore_errors=True)
        self._tmp.unlink(missing_ok=True)  # prepared, never published: an error came first


def _opened(path: Path, name: str, open_table: Callable[[], Frame]) -> Frame:
    """``open_table()`` (a read or a scan of ``path``), with what `read` and `scan` both refuse: a
    directory, an empty, missing or unreadable file, or a file that holds another table."""
    if path.is_dir():
        raise SchemaError(f"{path}: a directory, not the {name} table")
    try:
        if path.stat().st_size == 0:
            raise SchemaError(f"{path}: empty (0 bytes), not the {name} table")
        table = open_table()
        columns = table.collect_schema().names()
    except FileNotFoundError:
        raise SchemaError(f"{path}: not found (the {name} table; `benchlib parse` writes it)") from None
    except pl.exceptions.PolarsError as exc:
        why = " ".join(str(exc).split())[:200]
        raise SchemaError(f"{path}: not a readable parquet file, truncated or overwritten? ({why})") from None
    others = [other for other, sch in _SCHEMAS.items() if other != name and set(columns) == set(sch.names())]
    if others:
        raise SchemaError(f"{path}: holds the {others[0]} table, not the {name} table")
    return table


def read(path, name: str) -> pl.DataFrame:
    """Table ``name`` from ``path``, checked as on write (a file from elsewhere is not trusted).
    A file that is missing, empty, truncated, not parquet or another table is a SchemaError naming it."""
    path = Path(path)
    df = _opened(path, name, lambda: pl.read_parquet(path, glob=False))
    try:
        df = conform(df, name)
        if name == "metrics":
            check_metrics(df)
        check_names(df)
    except SchemaError as exc:
        raise SchemaError(f"{path}: {exc}") from None
    return df


# Campaign, environment, scenario and test names become directory names (data/raw/<campaign>/<environment>/
# <scenario>/<test>/, pipelines/<environment>/), lab namespace names and the tables' key columns: one rule
# for all, so that none can climb out of its directory, pass for an option or hide a character. Here, with
# the key columns, so that every layer can check it; config's models (config.Name) check it where names enter.
NAME_RE = r"(?!.*\.\.)[A-Za-z0-9][A-Za-z0-9_.-]*"  # whole names (re.fullmatch): no '..' anywhere
NAME_MAX = 100  # a file name has at most 255 bytes; a record's path holds four names
NAME_RULE = f"1 to {NAME_MAX} ASCII letters, digits, '.', '_' and '-', starting with a letter or digit, without '..'"


def check_name(name: object) -> str:
    """``name`` if it follows NAME_RULE; else ValueError saying so."""
    if isinstance(name, str) and len(name) <= NAME_MAX and re.fullmatch(NAME_RE, name):
        return name
    shown = repr(name) if not isinstance(name, str) or len(name) <= 40 else f"{name[:40]!r}... ({len(name)} characters)"
    raise ValueError(f"{shown} is not a name: {NAME_RULE}")


NAME_COLUMNS = ("campaign", "environment", "scenario", "test")


def check_names(df: pl.DataFrame | pl.LazyFrame) -> None:
    """A table's names are ones a campaign can give (config.NAME_RULE), as parse wrote them: a table
    from elsewhere could name figure files out of reports/ or a scenario that is markup."""
    for column in (c for c in NAME_COLUMNS if c in df.collect_schema()):
        names = df.lazy().select(pl.col(column).unique().drop_nulls()).collect(engine="streaming")[column]
        for value in names.to_list():
            try:
                check_name(value)
            except ValueError as exc:
                raise SchemaError(f"{column}: {exc}") from None


def scan(path, name: str) -> pl.LazyFrame:
    """Table ``name`` from ``path`` as a lazy scan, checked as `read` checks it in streamed passes: the
    steps that use it read only the columns and rows they need (projection and predicate pushdown)."""
    path = Path(path)
    lf = _opened(path, name, lambda: pl.scan_parquet(path, glob=False))
    try:
        if list(lf.collect_schema().items()) != list(
            _SCHEMAS[name].items()
        ):  # a file from elsewhere: cast, strictly, once
            lf = conform(lf, name)
            lf.select(pl.all().null_count()).collect(engine="streaming")
        if name == "metrics":
            check_metrics(lf)
        check_names(lf)
    except SchemaError as exc:
        raise SchemaError(f"{path}: {exc}") from None
    except pl.exceptions.PolarsError as exc:
        raise SchemaError(f"{path}: {name}: {' '.join(str(exc).split())[:200]}") from None
    return lf


def read_runs(path) -> pl.DataFrame:
    return read(path, "runs")


def read_metrics(path) -> pl.DataFrame:
    return read(path, "metrics")
