"""What the last `benchlib parse` read, kept beside its tables, so that the next one reads only what changed.

``parse_index.parquet`` holds one row per record whose rows are in the tables: its path (as the
runs table's ``record`` column writes it), its run id, its place in the schedule (environment,
order) and its `record.fingerprint`. A record is known when its fingerprint is unchanged: the
file system's metadata of every file, as DVC tells a changed file, so that telling 100k unchanged
records costs a stat per file instead of reading and checksumming every byte (what parse costs).

The index also names what the rows were derived with; any of it changed and nothing is reused:

- ``code``: a digest of benchlib's source: the raw record is the truth and a parser fix must reach
  old records, and which modules a row depends on is not worth guessing;
- ``campaign_dir``: the directory the records were read from, as record.table_path writes it (the runs table names each record);
- ``tables``: the identity of the tables written with it (schema.PARSE_KEY), so that tables written
  by another parse, or removed (DVC removes a stage's outputs before it runs), are never reused.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from ..base import limits
from ..base.files import write_atomically
from ..vocabulary import schema

INDEX = "parse_index.parquet"
KEY = "benchlib.parse_index"  # parquet key-value metadata: the header (code, campaign_dir, tables)
SCHEMA = pl.Schema(
    {
        "record": pl.String,
        "run_id": pl.String,
        "environment": pl.String,
        "order": pl.Int64,
        "fingerprint": pl.String,
    }
)
_PACKAGE = Path(__file__).resolve().parents[1]


def code_digest() -> str:
    """A digest of every source file of the benchlib package."""
    h = hashlib.sha256()
    for path in sorted(_PACKAGE.rglob("*.py")):
        h.update(f"{path.relative_to(_PACKAGE).as_posix()}\0".encode())
        h.update(path.read_bytes())
    return h.hexdigest()


@dataclass(frozen=True)
class Index:
    rows: pl.DataFrame  # SCHEMA
    header: dict[str, str]


def header(campaign_dir: str, tables: str) -> dict[str, str]:
    return {"code": code_digest(), "campaign_dir": campaign_dir, "tables": tables}


def load(out_dir: Path, campaign_dir: str, tables: list[str]) -> tuple[Index | None, str]:
    """The index in ``out_dir`` if the tables ``tables`` beside it are the ones it describes, and
    benchlib and the campaign's directory are those it was written with; else None and why not."""
    path = out_dir / INDEX
    if not path.is_file():
        return None, f"no {INDEX} in {out_dir}"
    try:
        head = limits.parse_json(pl.read_parquet_metadata(path)[KEY])
        rows = pl.read_parquet(path)
        if rows.schema != SCHEMA or not isinstance(head, dict):
            raise ValueError(f"columns {rows.schema}")
    except (OSError, ValueError, KeyError, TypeError, pl.exceptions.PolarsError) as exc:
        why = " ".join(str(exc).split())[:200]
        return None, f"{path} is unreadable ({type(exc).__name__}: {why})"
    if head.get("code") != code_digest():
        return None, f"{path} was written by another version of benchlib"
    if head.get("campaign_dir") != campaign_dir:
        return None, f"{path} describes the records of {head.get('campaign_dir')}, not {campaign_dir}"
    for name in tables:  # the stamp is the set's: a table swapped for another of the set has it too
        table = out_dir / f"{name}.parquet"
        if not table.exists():
            return None, f"{table} is missing (`dvc repro` removes a stage's outputs before it runs it)"
        stamp = schema.parse_identity(table)
        if (
            stamp is None
            or stamp.get("tables") != head.get("tables")
            or _columns(table) != dict(schema.empty(name).schema)
        ):
            return None, f"{table} is not the {name} table {path} was written with"
    return Index(rows, head), ""


def _columns(table: Path) -> dict | None:
    try:
        return pl.read_parquet_schema(table)
    except (OSError, pl.exceptions.PolarsError):
        return None


def write(out_dir: Path, rows: pl.DataFrame, head: dict[str, str]) -> None:
    path = out_dir / INDEX
    write_atomically(
        path,
        lambda tmp: schema.writing(
            path,
            tmp,
            lambda: rows.select(SCHEMA.names()).cast(SCHEMA).write_parquet(tmp, metadata={KEY: json.dumps(head)}),
        ),
    )
