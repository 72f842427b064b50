"""`benchlib compare` corrects within the report's families (no lab: two campaigns made of known values)."""

from __future__ import annotations

import polars as pl
import pytest
from analysis_tables import lab_like_samples, make_tables

from benchlib.analysis import compare, stats


def campaign(name: str, seed: int) -> compare.Campaign:
    runs, metrics = make_tables(lab_like_samples(seed=seed), campaign=name)
    return compare.Campaign(name, runs, metrics, pl.DataFrame(schema={"field": pl.String}))


def test_compare_uses_the_report_families():
    a, b = campaign("a", 1), campaign("b", 2)
    rows = compare.comparisons(a, b)
    primary = rows.filter(family=stats.PRIMARY)
    # each test's headline metric, every scenario: 4 tests x 4 scenarios, Holm
    assert dict(primary.select("test", "metric").unique().iter_rows()) == {
        "tcp_stream_1": "throughput",
        "tcp_stream_n": "throughput",
        "tcp_rr": "transaction_rate",
        "tcp_crr": "connection_rate",
    }
    assert len(primary) == 16 and set(primary["correction"]) == {"Holm"}
    secondary = rows.filter(pl.col("family") != stats.PRIMARY)
    assert set(secondary["family"]) == {stats.LATENCY, stats.CPU, stats.OTHER}
    assert set(secondary["correction"]) == {"FDR (Benjamini-Hochberg)"}
    assert rows["family"].to_list()[:16] == [stats.PRIMARY] * 16  # primary first
    for (family,), g in rows.group_by("family"):
        correction = "holm" if family == stats.PRIMARY else "fdr_bh"
        assert g["p_adj"].to_numpy().tolist() == stats.adjust(g["p"].to_numpy(), correction).tolist()
    shown = compare.display_rows(primary)
    assert {"change % [CI @ level]", "MDE %"} <= set(shown.columns)
    text = compare.text(
        compare.Result("a", "b", pl.DataFrame(), pl.DataFrame(), rows, compare.geomean_summary(rows), 0.05, "holm")
    )
    assert "primary family 16 (Holm)" in text and "latency family" in text


@pytest.mark.slow  # the report's whole analysis of a real campaign, twice
def test_compare_normalizes_cpu_with_the_analysis_settings_of_the_report():
    """HTTP CPU per request rate included: compare and the report's analysis give the same medians."""
    from analysis_tables import settings

    from benchlib.analysis import analyse, load_tables

    fixture = "tests/fixtures/tidy/lab-mesh-short-001"  # a real campaign with fortio and proxies
    runs, metrics = load_tables(f"{fixture}/runs.parquet", f"{fixture}/metrics.parquet")
    real = compare.Campaign("mesh", runs, metrics, pl.DataFrame(schema={"field": pl.String}))
    cpu = pl.col("metric") == "cpu_pct_at_target"
    http = pl.col("test").str.starts_with("http")
    medians = {}
    for per_requests in (1000.0, 250.0):
        s = settings("pipelines/local-lab/params-mesh.yaml").model_copy(update={"http_per_requests": per_requests})
        rows = compare.comparisons(real, real, targets=analyse.targets(s)).filter(cpu, http)
        summary = analyse.run(runs, metrics, s).summary_all.filter(cpu, http)
        both = rows.join(summary, on=["scenario", "test", "side"], suffix="_report")
        assert len(both) == len(rows) > 0
        assert (both["median"] - both["median_report"]).abs().max() < 1e-9
        medians[per_requests] = rows.sort("scenario", "test", "side")["median"].to_numpy()
    assert abs(medians[250.0] / medians[1000.0] - 0.25).max() < 1e-9
