"""`benchlib compare` corrects within the report's families (no lab: two campaigns made of known values)."""
from __future__ import annotations

import polars as pl

from benchlib.analysis import compare, stats

from analysis_tables import lab_like_samples, make_tables


def campaign(name: str, seed: int) -> compare.Campaign:
    runs, metrics = make_tables(lab_like_samples(seed=seed), campaign=name)
    return compare.Campaign(name, runs, metrics, pl.DataFrame(schema={"field": pl.String}))


def test_compare_uses_the_report_families():
    a, b = campaign("a", 1), campaign("b", 2)
    rows = compare.comparisons(a, b)
    primary = rows.filter(family=stats.PRIMARY)
    # each test's headline metric, every scenario: 4 tests x 4 scenarios, Holm
    assert dict(primary.select("test", "metric").unique().iter_rows()) == {
        "tcp_stream_1": "throughput", "tcp_stream_n": "throughput", "tcp_rr": "transaction_rate",
        "tcp_crr": "connection_rate"}
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
    text = compare.text(compare.Result("a", "b", pl.DataFrame(), pl.DataFrame(), rows,
                                       compare.geomean_summary(rows), 0.05, "holm"))
    assert "primary family 16 (Holm)" in text and "latency family" in text
