"""Raw records -> the tidy tables (runs.parquet, metrics.parquet), as polars frames.

The raw record is the truth: metrics are re-derived here from the tool output
exactly as printed, so a parser fix applies to old campaigns too.
"""
from __future__ import annotations

import json
import math
import os
import re
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import polars as pl

from . import collectors, cpu, record, schema
from .errors import ParseError, RecordError

PARALLEL_MIN_RECORDS = 2000  # below this, starting worker processes costs more than it saves
PARSE_CHUNK = 500  # records per task handed to a worker process

# the columns of both tables that identify a run
_KEYS = ("campaign", "environment", "scenario", "test", "streams", "message_size", "block", "run_id")


def datapath(placement: dict) -> dict:
    """The runs columns that describe the datapath, from what the target recorded in the placement
    (a record from before a field existed gets schema.RUNS_DEFAULTS' value)."""
    mesh = placement.get("mesh") or {}
    size = (placement.get("big_tcp") or {}).get("size")
    return {"mesh": mesh.get("kind", "none"), "proxy_hops": len(mesh.get("proxies", {})),
            "mtls": "mtls" in mesh, "proxy_kind": mesh.get("proxy"), "proxy_version": mesh.get("proxy_version"),
            "ip_family": placement.get("ip_family", 4),
            "big_tcp": size is not None and size > schema.GSO_DEFAULT_MAX_SIZE, "gso_gro_max_size": size,
            "cpu_placement": placement.get("cpu_placement", "split")}


def cpu_sides(rec: record.RunRecord) -> list[tuple[str, record.SideCpu]]:
    """The CPU sets to account a run's CPU on: each side's, or, where client and server shared one
    set (cpu_placement shared), that set once as side total (per side it would be counted twice)."""
    if rec.placement.get("cpu_placement") == "shared":
        return [(schema.TOTAL_SIDE, rec.cpu["client"])]
    return list(rec.cpu.items())


def proxy_usage(rec: record.RunRecord) -> dict[tuple[str, str], float]:
    """Per side: the proxies' CPU seconds and cores over the CPU window (a side without a proxy: 0),
    and their largest peak RSS. Nothing for a run whose target recorded no datapath process: its
    proxies' cost is unknown (a cluster's sidecars), or there were none."""
    if not rec.processes:
        return {}
    out = {}
    for side, c in rec.cpu.items():
        procs = [p for p in rec.processes.values() if p["side"] == side]
        seconds = sum(end - start for start, end in (p["cpu_ticks"] for p in procs)) / rec.clk_tck
        out[("proxy_cpu_s", side)] = seconds
        out[("proxy_cpu_cores", side)] = seconds / (c.end.mono - c.start.mono)  # the window cpu.side_usage uses
        if procs:
            out[("proxy_peak_rss_kib", side)] = max(p["peak_rss_kib"] for p in procs)
    return out


def load_record(path: Path) -> tuple[dict, list[dict]]:
    """One run row and its metric rows (metric, side, value, unit) from a raw record directory.

    A value that is not a finite number (a parser or a tool gone wrong) is an
    error naming the record, never a NaN that the statistics would meet later.
    """
    rec = record.load(path)
    try:
        params = rec.test_params
        placement = rec.placement
        versions = rec.target["versions"]
        run = {
            "campaign": rec.campaign, "environment": rec.environment, "scenario": rec.scenario,
            "test": rec.test, "block": rec.block, "run_id": rec.run_id, "tool": rec.tool, "kind": rec.kind,
            "streams": params["streams"], "message_size": params["message_size"],
            "offered_qps": params["qps"] if isinstance(params.get("qps"), int) else None,
            "connection_close": params.get("connection_close", False),
            "services": placement.get("services"),
            **datapath(placement),
            "test_params": json.dumps(params, sort_keys=True, separators=(",", ":")),
            "order": rec.order, "attempts": len(rec.attempts),
            "outcome": rec.outcome, "failure_reason": rec.failure_reason,
            "started_at": rec.started_at, "ended_at": rec.ended_at,
            "duration_s": (rec.ended_at - rec.started_at).total_seconds(),
            "client_cpus": len(placement["client_cpus"]), "server_cpus": len(placement["server_cpus"]),
            "client_node": placement["client_node"], "server_node": placement["server_node"],
            "nodes_share_kernel": placement.get("nodes_share_kernel"),
            "kernel": versions["kernel"], "tool_version": versions.get(rec.tool, ""),
            "record": str(path),
        }
        if rec.outcome != "ok":
            return run, []
        values = collectors.get(rec.tool).parse(rec.kind, rec.stdouts)
        for side, c in cpu_sides(rec):
            usage = cpu.side_usage(c.start, c.end, c.cpus, rec.clk_tck)
            values.update({(name, side): v for name, v in usage.items()})
        values.update(proxy_usage(rec))
        rows = []
        for key, value in values.items():
            metric, side = key if isinstance(key, tuple) else (key, schema.NO_SIDE)
            value = float(value)
            if not math.isfinite(value):
                raise ParseError(f"{metric} ({side}) is {value}, not a finite number (run {rec.run_id})")
            rows.append({"metric": metric, "side": side, "value": value, "unit": schema.METRICS[metric].unit})
    except ParseError as exc:
        raise RecordError(f"{path}: {exc}") from None
    except (KeyError, TypeError, ValueError) as exc:
        raise RecordError(f"{path}: malformed record ({type(exc).__name__}: {exc})") from None
    return run, rows


def _load_chunk(paths: list[Path]) -> tuple[pl.DataFrame, pl.DataFrame, list[RecordError]]:
    """(runs, metrics, errors) of consecutive records; a worker returns frames, not millions of dicts."""
    runs, errors = [], []
    metrics = {c: [] for c in schema.METRICS_SCHEMA}
    for path in paths:
        try:
            run, rows = load_record(path)
        except RecordError as exc:
            errors.append(exc)
            continue
        runs.append(run)
        for row in rows:
            for k in _KEYS:
                metrics[k].append(run[k])
            for k, v in row.items():
                metrics[k].append(v)
    return (pl.DataFrame(runs, schema=schema.RUNS_SCHEMA) if runs else schema.empty("runs"),
            pl.DataFrame(metrics, schema=schema.METRICS_SCHEMA), errors)


def _load_all(records: list[Path]) -> list[tuple[pl.DataFrame, pl.DataFrame, list[RecordError]]]:
    """_load_chunk over every record, chunks in record order.

    Records are independent, so a large campaign is parsed on every CPU
    (100k runs: 80 s on one core of this 2-core VM).
    """
    chunks = [records[i:i + PARSE_CHUNK] for i in range(0, len(records), PARSE_CHUNK)]
    workers = len(os.sched_getaffinity(0))
    if len(records) < PARALLEL_MIN_RECORDS or workers < 2:
        return [_load_chunk(c) for c in chunks]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(_load_chunk, chunks))


def build_tables(campaign_dir: Path, skip_corrupt: bool = False, log=print,
                 records: list[Path] | None = None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(runs, metrics) of a campaign, checked against the schemas.

    ``records``: the record directories to read (default: every one found, see record.survey).
    """
    if not campaign_dir.is_dir():
        raise RecordError(f"{campaign_dir}: no raw data for this campaign (run `dvc repro` or `benchlib collect`)")
    loaded = _load_all(record.find(campaign_dir) if records is None else records)
    skipped = [exc for _, _, errors in loaded for exc in errors]
    if skipped and not skip_corrupt:
        raise skipped[0]
    if skipped:
        log(f"parse: skipped {len(skipped)} corrupt record(s) (--skip-corrupt):\n  "
            + "\n  ".join(map(str, skipped)))
    runs = pl.concat([r for r, _, _ in loaded]) if loaded else schema.empty("runs")
    if runs.is_empty():
        raise RecordError(f"{campaign_dir}: no complete raw records found")
    runs = runs.sort(["environment", "order"])
    metrics = pl.concat([m for _, m, _ in loaded])
    schema.check_metrics(metrics)
    return runs, metrics


def write_tables(runs: pl.DataFrame, metrics: pl.DataFrame, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    schema.write(runs, "runs", out_dir / "runs.parquet")
    schema.write(metrics, "metrics", out_dir / "metrics.parquet")


# What a record's placement and target say that names this session, not the setup: lab ids, namespace
# and pod names, addresses handed out per session, boot IDs. Matched on the last part of a key.
SESSION_KEYS = {"lab_id", "session", "namespace", "namespaces", "client_pod", "server_pod", "client_pod_ip",
                "server_pod_ip", "service_ip", "server_address", "boot_id", "client_node", "server_node"}
# Measured while a scenario was set up (seconds taken, an agent's usage): results, not settings.
MEASURED_KEY = re.compile(r"(_s|_usage)$")
FACTS_SCHEMA = pl.Schema({"environment": pl.String, "scenario": pl.String, "test": pl.String,
                          "field": pl.String, "value": pl.String})


def _flatten(prefix: str, value, out: dict[str, str], session: set[str], settings: bool) -> None:
    """``value`` into ``out`` under dotted keys; ``settings``: the test's own parameters, all kept
    (its duration_s is a setting, a placement's load_s a measurement)."""
    if isinstance(value, dict):
        for k, v in value.items():
            if settings or (str(k) not in SESSION_KEYS and not MEASURED_KEY.search(str(k))):
                _flatten(f"{prefix}.{k}", v, out, session, settings)
        return
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    if settings or not any(s in text for s in session):  # e.g. a lab node named after its lab id
        out[prefix] = text


def record_facts(meta: dict) -> dict[str, str]:
    """The setup a run's meta.json records, flattened to dotted keys (placement.mtu,
    target.versions.kernel, test_params.duration_s, ...), without session identifiers."""
    target = meta.get("target", {})
    session = {str(target[k]) for k in ("lab_id", "session", "namespace") if target.get(k)}
    out: dict[str, str] = {}
    for part in ("test_params", "placement", "target"):
        _flatten(part, meta.get(part, {}), out, session, settings=part == "test_params")
    return out


def build_facts(runs: pl.DataFrame) -> pl.DataFrame:
    """Long table: environment, scenario, test, field, value (the distinct values over the
    configuration's runs, joined by ' | '), read from each run's meta.json (runs.record)."""
    keys = ["environment", "scenario", "test"]
    rows = []
    for r in runs.select(*keys, "record").iter_rows(named=True):
        meta = json.loads((Path(r["record"]) / record.META).read_text())
        rows += [{**{k: r[k] for k in keys}, "field": f, "value": v} for f, v in record_facts(meta).items()]
    return (pl.DataFrame(rows, schema=FACTS_SCHEMA)
            .group_by(*keys, "field").agg(pl.col("value").unique().sort().str.join(" | "))
            .sort(*keys, "field"))
