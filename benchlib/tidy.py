"""Raw records -> the tidy tables (runs.parquet, metrics.parquet).

The raw record is the truth: metrics are re-derived here from the tool output
exactly as printed, so a parser fix applies to old campaigns too.
"""
from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

from . import collectors, cpu, record, schema
from .errors import ParseError, RecordError

PARALLEL_MIN_RECORDS = 2000  # below this, starting worker processes costs more than it saves
PARSE_CHUNK = 500  # records per task handed to a worker process

# the columns of both tables that identify a run
_KEYS = ("campaign", "environment", "scenario", "test", "streams", "message_size", "block", "run_id")


def load_record(path: Path) -> tuple[dict, list[dict]]:
    """One run row and its metric rows from a raw record directory."""
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
            "order": rec.order, "attempts": len(rec.attempts),
            "outcome": rec.outcome, "failure_reason": rec.failure_reason,
            "started_at": pd.Timestamp(rec.started_at), "ended_at": pd.Timestamp(rec.ended_at),
            "client_cpus": len(placement["client_cpus"]), "server_cpus": len(placement["server_cpus"]),
            "client_node": placement["client_node"], "server_node": placement["server_node"],
            "nodes_share_kernel": placement.get("nodes_share_kernel"),
            "kernel": versions["kernel"], "tool_version": versions.get(rec.tool, ""),
            "record": str(path),
        }
        run["duration_s"] = (run["ended_at"] - run["started_at"]).total_seconds()
        if rec.outcome != "ok":
            return run, []
        values = collectors.get(rec.tool).parse(rec.kind, rec.stdouts)
        for side, c in rec.cpu.items():
            usage = cpu.side_usage(c.start, c.end, c.cpus, rec.clk_tck)
            values.update({(name, side): v for name, v in usage.items()})
    except ParseError as exc:
        raise RecordError(f"{path}: {exc}") from None
    except (KeyError, TypeError, ValueError) as exc:
        raise RecordError(f"{path}: malformed record ({type(exc).__name__}: {exc})") from None
    base = {k: run[k] for k in _KEYS}
    rows = []
    for key, value in values.items():
        metric, side = key if isinstance(key, tuple) else (key, schema.NO_SIDE)
        rows.append({**base, "metric": metric, "value": float(value),
                     "unit": schema.METRICS[metric].unit, "side": side})
    return run, rows


def _load_or_error(path: Path) -> tuple[dict, list[dict]] | RecordError:
    try:
        return load_record(path)
    except RecordError as exc:
        return exc


def _load_all(records: list[Path]) -> list:
    """load_record of every record, in order; a corrupt one yields its RecordError.

    Records are independent, so a large campaign is parsed on every CPU
    (100k runs: 80 s on one core of this 2-core VM).
    """
    workers = len(os.sched_getaffinity(0))
    if len(records) < PARALLEL_MIN_RECORDS or workers < 2:
        return [_load_or_error(r) for r in records]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(_load_or_error, records, chunksize=PARSE_CHUNK))


def build_tables(campaign_dir: Path, skip_corrupt: bool = False, log=print,
                 records: list[Path] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``records``: the record directories to read (default: every one found, see record.survey)."""
    if not campaign_dir.is_dir():
        raise RecordError(f"{campaign_dir}: no raw data for this campaign (run `dvc repro` or `benchlib collect`)")
    runs, metrics, skipped = [], [], []
    for loaded in _load_all(record.find(campaign_dir) if records is None else records):
        if isinstance(loaded, RecordError):
            if not skip_corrupt:
                raise loaded
            skipped.append(str(loaded))
            continue
        run, rows = loaded
        runs.append(run)
        metrics.extend(rows)
    if skipped:
        log(f"parse: skipped {len(skipped)} corrupt record(s) (--skip-corrupt):\n  " + "\n  ".join(skipped))
    if not runs:
        raise RecordError(f"{campaign_dir}: no complete raw records found")
    runs_df = pd.DataFrame(runs).sort_values(["environment", "order"]).reset_index(drop=True)
    metrics_df = pd.DataFrame(metrics, columns=schema.METRICS_SCHEMA.names)
    schema.check_metrics(metrics_df)
    return runs_df, metrics_df


def write_tables(runs: pd.DataFrame, metrics: pd.DataFrame, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for df, sch, name in ((runs, schema.RUNS_SCHEMA, "runs"), (metrics, schema.METRICS_SCHEMA, "metrics")):
        table = schema.to_table(df, sch, name)
        tmp = out_dir / f".{name}.parquet.tmp"
        pq.write_table(table, tmp)
        tmp.replace(out_dir / f"{name}.parquet")
