"""Raw records -> the tidy tables (runs.parquet, metrics.parquet).

The raw record is the truth: metrics are re-derived here from the tool output
exactly as printed, so a parser fix applies to old campaigns too.
"""
from __future__ import annotations

import hashlib
import json
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

from . import collectors, cpu, schema
from .collectors import ParseError
from .runner import CHECKSUMS


PARALLEL_MIN_RECORDS = 2000  # below this, starting worker processes costs more than it saves


class RecordError(ValueError):
    """A raw record is corrupt, truncated or inconsistent; the message names it."""


def verify(record: Path) -> dict[str, bytes]:
    """Check every file of a record against its checksums; returns their contents.

    Parsing uses the contents returned here, so each file is read once (at
    100k runs, reading every file twice was half the parse time).
    """
    try:
        sums = (record / CHECKSUMS).read_text()
    except FileNotFoundError:
        raise RecordError(f"{record}: {CHECKSUMS} missing (incomplete or foreign record)") from None
    files = {}
    for line in sums.splitlines():
        digest, _, name = line.partition("  ")
        path = record / name
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise RecordError(f"{path}: listed in {CHECKSUMS} but missing") from None
        if hashlib.sha256(data).hexdigest() != digest:
            raise RecordError(f"{path}: checksum mismatch (file changed after it was recorded)")
        files[name] = data
    return files


def load_record(record: Path) -> tuple[dict, list[dict]]:
    """One run row and its metric rows from a raw record directory."""
    files = verify(record)
    try:
        meta = json.loads(files["meta.json"])
        keys = {k: meta[k] for k in ("campaign", "environment", "scenario", "test", "repetition", "block", "run_id")}
        params = meta["test_params"]
        placement = meta["placement"]
        run = {
            **keys, "tool": meta["tool"], "kind": meta["kind"],
            "streams": params["streams"], "message_size": params["message_size"],
            "offered_qps": params["qps"] if isinstance(params.get("qps"), int) else None,
            "connection_close": params.get("connection_close", False),
            "services": placement.get("services"),
            "order": meta["order"], "attempts": len(meta["attempts"]),
            "outcome": meta["outcome"], "failure_reason": meta["failure_reason"],
            "started_at": pd.Timestamp(meta["started_at"]), "ended_at": pd.Timestamp(meta["ended_at"]),
            "client_cpus": len(placement["client_cpus"]), "server_cpus": len(placement["server_cpus"]),
            "client_node": placement["client_node"], "server_node": placement["server_node"],
            "kernel": meta["target"]["versions"]["kernel"],
            "tool_version": meta["target"]["versions"].get(meta["tool"], ""),
            "record": str(record),
        }
        run["duration_s"] = (run["ended_at"] - run["started_at"]).total_seconds()
        if meta["outcome"] != "ok":
            return run, []
        stdouts = [files[f"stdout-{i}.txt"].decode() for i in range(len(meta["commands"]))]
        values = collectors.get(meta["tool"]).parse(meta["kind"], stdouts)
        cpu_record = json.loads(files["cpu.json"])
        for side, data in cpu_record["sides"].items():
            usage = cpu.side_usage(cpu.Snapshot.from_json(data["start"]), cpu.Snapshot.from_json(data["end"]),
                                   data["cpus"], cpu_record["clk_tck"])
            values.update({(name, side): v for name, v in usage.items()})
    except (KeyError, TypeError, ValueError, json.JSONDecodeError, FileNotFoundError) as exc:
        if isinstance(exc, ParseError):
            raise RecordError(f"{record}: {exc}") from None
        raise RecordError(f"{record}: malformed record ({type(exc).__name__}: {exc})") from None
    base = {k: run[k] for k in ("campaign", "environment", "scenario", "test", "streams",
                                "message_size", "repetition", "block", "run_id")}
    rows = []
    for key, value in values.items():
        metric, side = key if isinstance(key, tuple) else (key, "none")
        rows.append({**base, "metric": metric, "value": float(value),
                     "unit": schema.METRICS[metric].unit, "side": side})
    return run, rows


def find_records(campaign_dir: Path) -> list[Path]:
    return sorted(p.parent for p in campaign_dir.glob("*/*/*/*/meta.json") if not p.parent.name.startswith("."))


def _load_or_error(record: Path) -> tuple[dict, list[dict]] | RecordError:
    try:
        return load_record(record)
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
        return list(pool.map(_load_or_error, records, chunksize=500))


def build_tables(campaign_dir: Path, skip_corrupt: bool = False, log=print) -> tuple[pd.DataFrame, pd.DataFrame]:
    if not campaign_dir.is_dir():
        raise RecordError(f"{campaign_dir}: no raw data for this campaign (run `dvc repro` or `benchlib collect`)")
    runs, metrics, skipped = [], [], []
    for loaded in _load_all(find_records(campaign_dir)):
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
