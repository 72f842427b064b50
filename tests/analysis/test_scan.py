"""The analysis of scanned tables (the metrics never read whole) writes what the analysis of the
tables in memory writes, byte for byte, on a synthetic campaign of 100k runs."""

from __future__ import annotations

import sys
from pathlib import Path

import polars as pl
import pytest

from benchlib.analysis import analyse, load_tables, scan_tables
from benchlib.base.errors import SchemaError
from benchlib.tables import tidy
from benchlib.vocabulary import schema
from tests.support.analysis_tables import lab_like_samples, make_tables, settings

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import scale  # noqa: E402
import synth  # noqa: E402


def _written(runs, metrics, tables: Path, out: Path) -> dict[str, bytes]:
    result = analyse.run(runs, metrics, settings())
    analyse.write(result, out, tables / "runs.parquet", tables / "metrics.parquet", metrics_json=out / "metrics.json")
    # settings.json names where metrics.json went, which differs; the digests in it are of the files compared
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.name != analyse.SETTINGS_FILE}


@pytest.mark.slow  # two analyses of 100k runs
def test_scanned_analysis_writes_the_same_files_as_in_memory(tmp_path):
    cdir = synth.generate(tmp_path / "raw", runs=400, scenarios=4, seed=3)
    tidy.parse_campaign(cdir, tmp_path / "one")
    tables = tmp_path / "tables"
    assert scale.replicate(tmp_path / "one", 250, tables) == 100_000
    in_memory = _written(*load_tables(tables / "runs.parquet", tables / "metrics.parquet"), tables, tmp_path / "a")
    runs, metrics = scan_tables(tables / "runs.parquet", tables / "metrics.parquet")
    assert isinstance(metrics, pl.LazyFrame)
    scanned = _written(runs, metrics, tables, tmp_path / "b")
    assert set(in_memory) == {f"{name}.parquet" for name in analyse.TABLES} | {"metrics.json"}
    assert [name for name in in_memory if in_memory[name] != scanned[name]] == []
    comparisons = pl.read_parquet(tmp_path / "b/comparisons.parquet")
    assert len(comparisons) and comparisons["n"].min() > 1000  # compared at the scale of the campaign


def test_a_scanned_metrics_table_is_checked_as_a_read_one(tmp_path):
    runs, metrics = _small()
    bad = metrics.with_columns(value=pl.when(pl.col("metric") == "throughput").then(float("nan")).otherwise("value"))
    bad.write_parquet(tmp_path / "nan.parquet")
    for read in (schema.read_metrics, lambda p: schema.scan(p, "metrics")):
        with pytest.raises(SchemaError, match=r"nan.parquet: metrics: \d+ value\(s\) not finite"):
            read(tmp_path / "nan.parquet")
    runs.write_parquet(tmp_path / "runs-as-metrics.parquet")
    with pytest.raises(SchemaError, match="holds the runs table, not the metrics table"):
        schema.scan(tmp_path / "runs-as-metrics.parquet", "metrics")
    (tmp_path / "empty.parquet").write_bytes(b"")
    with pytest.raises(SchemaError, match="empty"):
        schema.scan(tmp_path / "empty.parquet", "metrics")
    # another integer width, as another tool may write: cast, strictly, as read casts
    metrics.with_columns(pl.col("block").cast(pl.Int32)).write_parquet(tmp_path / "int32.parquet")
    scanned = schema.scan(tmp_path / "int32.parquet", "metrics").collect()
    assert scanned.equals(schema.read_metrics(tmp_path / "int32.parquet"))


def _small():
    return make_tables(lab_like_samples(n=6))
