"""`benchlib compare` corrects within the report's families (no lab: two campaigns made of known values)."""

from __future__ import annotations

import polars as pl
import pytest

from benchlib.analysis import compare, stats
from benchlib.report import compare as compare_output
from tests.support.analysis_tables import lab_like_samples, make_tables


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
    shown = compare_output.display_rows(primary)
    assert {"change % [CI @ level]", "MDE %"} <= set(shown.columns)
    text = compare_output.text(
        compare.Result("a", "b", pl.DataFrame(), pl.DataFrame(), rows, compare.geomean_summary(rows), 0.05, "holm")
    )
    assert "primary family 16 (Holm)" in text and "latency family" in text


@pytest.mark.slow  # the report's whole analysis of a real campaign, twice
def test_compare_normalizes_cpu_with_the_analysis_settings_of_the_report():
    """HTTP CPU per request rate included: compare and the report's analysis give the same medians."""
    from benchlib.analysis import analyse, load_tables
    from tests.support.analysis_tables import settings

    fixture = "tests/fixtures/tidy/lab-mesh-short-001"  # a real campaign with fortio and proxies
    runs, metrics = load_tables(f"{fixture}/runs.parquet", f"{fixture}/metrics.parquet")
    real = compare.Campaign("mesh", runs, metrics, pl.DataFrame(schema={"field": pl.String}))
    cpu = pl.col("metric") == "cpu_pct_at_target"
    http = pl.col("test").str.starts_with("http")
    medians = {}
    for per_requests in (1000.0, 250.0):
        s = settings("pipelines/local-lab/params-mesh.yaml").model_copy(update={"http_per_requests": per_requests})
        rows = compare.comparisons(real, real, s).filter(cpu, http)
        summary = analyse.run(runs, metrics, s).summary_all.filter(cpu, http)
        both = rows.join(summary, on=["scenario", "test", "side"], suffix="_report")
        assert len(both) == len(rows) > 0
        assert (both["median"] - both["median_report"]).abs().max() < 1e-9
        medians[per_requests] = rows.sort("scenario", "test", "side")["median"].to_numpy()
    assert abs(medians[250.0] / medians[1000.0] - 0.25).max() < 1e-9


def test_compare_sentences_name_the_scenario_once_then_campaign_vs_campaign():
    """The compare page's findings on two real default campaigns (tests/fixtures/tidy, as `benchlib
    parse` wrote them): "host: lab-default-003 vs lab-default-002, ...", never "host vs lab-default-002"."""
    from benchlib.analysis import load_tables
    from benchlib.report import summary

    def real(name: str) -> compare.Campaign:
        runs, metrics = load_tables(
            f"tests/fixtures/tidy/{name}/runs.parquet", f"tests/fixtures/tidy/{name}/metrics.parquet"
        )
        return compare.Campaign(name, runs, metrics, pl.DataFrame(schema={"field": pl.String}))

    rows = compare.comparisons(real("lab-default-002"), real("lab-default-003"))
    assert set(rows["campaign_base"]) == {"lab-default-002"} and set(rows["campaign"]) == {"lab-default-003"}
    primary = rows.filter(family=stats.PRIMARY)
    text = summary.findings_markdown(primary, pl.DataFrame(), stats.PRIMARY)
    lines = text.splitlines()
    assert lines and "host vs lab-default-002" not in text
    # every comparison is stated once, its scenario then the campaigns
    for r in primary.iter_rows(named=True):
        what = f"{r['scenario']}: lab-default-003 vs lab-default-002, {r['test']} "
        assert what in text, (what, text)
    host_rr = primary.filter(scenario="host", test="tcp_rr").row(0, named=True)
    sentence = summary.finding_sentence(host_rr, len(primary))
    assert sentence.startswith("host: lab-default-003 vs lab-default-002, tcp_rr transaction rate: "), sentence
    # a comparison of scenarios within one campaign keeps its wording
    within = {**host_rr, "scenario": "bridge", "baseline": "host", "campaign_base": None}
    assert summary.finding_sentence(within).startswith("bridge vs host, tcp_rr transaction rate: ")
    # and the machine-readable result leaves the campaigns to its top level
    res = compare.Result(
        "lab-default-002",
        "lab-default-003",
        pl.DataFrame(),
        pl.DataFrame(),
        rows,
        compare.geomean_summary(rows),
        0.05,
        "holm",
    )
    assert "campaign_base" not in compare_output.to_json(res)["comparisons"][0]
