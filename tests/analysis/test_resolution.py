"""Latency percentiles with the resolution of the instrument that produced them (benchlib.analysis.resolution),
on the real campaigns in tests/fixtures/tidy (netperf, fortio) and a captured dnsperf output."""

from __future__ import annotations

import re

import numpy as np
import polars as pl
import pytest

from benchlib.analysis import load_tables, resolution, stats
from benchlib.report import format as fmt, tables
from tests.support.analysis_tables import report_comparisons

DEFAULT = "tests/fixtures/tidy/lab-default-003"
DEFAULT_SPLIT = "tests/fixtures/tidy/lab-default-002"
MESH = "tests/fixtures/tidy/lab-mesh-short-001"


def _steps(metric: str, values: list[float]) -> list[float | None]:
    df = pl.DataFrame({"metric": [metric] * len(values), "value": pl.Series(values, dtype=pl.Float64)})
    return resolution.with_resolution(df)["resolution"].to_list()


def test_netperf_percentile_steps_are_its_histogram_sub_buckets():
    """netperf 2.7 (netlib.c HIST_add / HIST_get_percentile, hist.h HIST_NUM_OF_BUCKET 100): integer
    microseconds, 100 sub-buckets per decade, the percentile truncated to int."""
    assert _steps("latency_p50", [0, 5, 13, 99, 100, 137, 999, 1000, 1157, 12000]) == [
        1,
        1,
        1,
        1,
        10,
        10,
        10,
        100,
        100,
        1000,
    ]
    assert _steps("latency_min", [12, 5000]) == [1, 1]  # one integer sample
    assert _steps("latency_mean", [13.55]) == [0.01]  # printed %.2f
    assert _steps("throughput", [12.6]) == [None]  # continuous


def test_netperf_prints_whole_microseconds_in_the_real_campaigns():
    for fixture in (DEFAULT, DEFAULT_SPLIT, MESH):
        _, metrics = load_tables(f"{fixture}/runs.parquet", f"{fixture}/metrics.parquet")
        pct = metrics.filter(pl.col("metric").is_in(resolution.NETPERF_PERCENTILES))["value"].to_numpy()
        assert len(pct) and (pct == np.round(pct)).all()
        means = metrics.filter(metric="latency_mean")["value"].to_numpy()
        assert (np.abs(means * 100 - np.round(means * 100)) < 1e-6).all()  # two decimals


def test_fortio_steps_are_its_bucket_widths():
    """fortio stats.go buckets in units of -r (benchlib: 10 us): 1 unit up to 12, then 2, 5, 10, 20, ..."""
    assert resolution.FORTIO_UNIT_US == pytest.approx(10)
    assert _steps("http_latency_p50", [5, 95, 115, 130, 200, 250, 1564.27, 9866.26, 19528.8, 57758.6]) == pytest.approx(
        [10, 10, 10, 20, 20, 50, 200, 1000, 10000, 25000]
    )
    # the mesh campaign's real percentiles (a loaded machine: 0.4 to 360 ms): each in a bucket no wider
    # than itself and at least 1/12 of it (fortio's widest relative step is 11 -> 12 units)
    _, metrics = load_tables(f"{MESH}/runs.parquet", f"{MESH}/metrics.parquet")
    rows = resolution.with_resolution(metrics.filter(pl.col("metric").is_in(resolution.FORTIO_PERCENTILES)))
    assert len(rows) == 240 and rows["resolution"].is_not_null().all()
    rel = (rows["resolution"] / rows["value"]).to_numpy()
    assert (rel <= 1).all() and (rel >= 1 / 12.5).all()


def test_dnsperf_prints_each_latency_to_the_microsecond():
    text = open("tests/fixtures/dns/udp_1000.stdout").read()
    latencies = [m for m in re.findall(r"^> NOERROR \S+ A (\S+)$", text, re.M)]
    assert len(latencies) > 900 and {len(s.split(".")[1]) for s in latencies} == {6}
    assert _steps("dns_latency_p50", [174.0]) == [resolution.DNS_STEP_US] == [1.0]


@pytest.fixture(scope="module")
def default_campaign():
    p, runs, values, comparisons = report_comparisons(DEFAULT)
    return {
        "p": p,
        "runs": runs,
        "values": values,
        "comparisons": comparisons,
        "annotated": resolution.annotate(comparisons),
        "summary": stats.summarize(values, runs, alpha=p["alpha"]),
    }


def _row(df: pl.DataFrame, scenario: str, test: str, metric: str, side: str = "none") -> dict:
    return df.filter(scenario=scenario, test=test, metric=metric, side=side).row(0, named=True)


def test_an_exact_looking_interval_of_whole_microseconds_is_marked(default_campaign):
    """lab-default-003, TCP_RR p50: every veth-routed run printed 17 us, host runs 13 or 14 us; the
    bootstrap interval of the change is narrower than one step of 1 us (1/13 = 7.7 %)."""
    c = default_campaign["comparisons"]
    before = _row(c, "veth-routed", "tcp_rr", "latency_p50")
    assert (before["median"], before["median_base"]) == (17.0, 13.0)
    assert (before["delta_high"] - before["delta_low"]) / 2 < 100 / 13
    assert before["verdict"] == "+30.8 % [+25.9, +30.8] worse"
    r = _row(default_campaign["annotated"], "veth-routed", "tcp_rr", "latency_p50")
    assert (r["step"], r["steps"], r["unresolved"], r["below_resolution"]) == (1.0, 4.0, "interval", True)
    assert r["delta_low_res"] == pytest.approx(before["delta_low"] - 100 / 13)
    assert r["delta_high_res"] == pytest.approx(before["delta_high"] + 100 / 13)
    assert fmt.change_text(r) == "+31 % [+18, +38] ± 1 step @ 95 % (4 steps of 1 µs; interval below resolution)"
    assert r["verdict"] == "+31 % [+18, +38] worse (± 1 step of 1 us)"
    assert r["finer_metric"] == "latency_mean"


def test_steps_grow_with_the_value(default_campaign):
    """TCP_CRR p99 crosses 100 us: its steps are 10 us (netperf's 10 us sub-buckets)."""
    r = _row(default_campaign["annotated"], "vxlan", "tcp_crr", "latency_p99")
    assert (r["median"], r["median_base"], r["resolution"], r["resolution_base"]) == (177.0, 89.0, 10.0, 1.0)
    assert r["step"] == 10.0 and r["steps"] == pytest.approx(8.8)
    assert not r["below_resolution"] and fmt.change_text(r) == "+98.9 [+87.2, +114.6] @ 95 %"


def test_only_latencies_change_and_no_verdict_quotes_digits_below_resolution(default_campaign):
    c, a = default_campaign["comparisons"], default_campaign["annotated"]
    assert "change" not in a.columns  # a display string: the report writes it
    assert len(a) == len(c) and a.select(c.columns).drop("verdict").equals(c.drop("verdict"))
    continuous = a["resolution"].is_null()
    assert continuous.sum() == 36 and not a.filter(continuous)["below_resolution"].any()
    assert a.filter(continuous)["verdict"].equals(c.filter(continuous)["verdict"])
    below = a.filter("below_resolution")
    assert len(below) == 9  # of the 12 latency comparisons
    for r in below.iter_rows(named=True):
        assert resolution.BELOW in fmt.change_text(r) and not re.search(r"\d\.\d", r["verdict"]), r
        assert r["delta_low_res"] < r["delta_low"] <= r["delta_high"] < r["delta_high_res"]


def test_a_change_of_one_step_is_not_given_a_size():
    """lab-default-002 (both sides on their own CPU, 8 runs): TCP_RR p99 bridge 133 us vs host 123 us is one
    step of 10 us (netperf's sub-bucket from 100 us), vxlan 131.5 us 0.85 of one."""
    _, _, _, comparisons = report_comparisons(DEFAULT_SPLIT)
    a = resolution.annotate(comparisons.filter(metric="latency_p99", test="tcp_rr"))
    bridge, vxlan = _row(a, "bridge", "tcp_rr", "latency_p99"), _row(a, "vxlan", "tcp_rr", "latency_p99")
    assert (bridge["median"], bridge["median_base"], bridge["step"]) == (133.0, 123.0, 10.0)
    assert bridge["unresolved"] == vxlan["unresolved"] == resolution.CHANGE
    assert fmt.change_text(bridge).startswith("+8 % (1 step of 10 µs: below resolution) [")
    assert fmt.change_text(vxlan).startswith("+7 % (0.85 steps of 10 µs: below resolution) [")
    assert bridge["verdict"] == vxlan["verdict"] == stats.WITHIN_NOISE  # no precise claim to take back


def test_a_precise_verdict_one_step_apart_keeps_its_direction_only():
    """Constructed (no fixture has it significant): 8 runs at 14 us against 8 at 13 us."""
    from tests.support.analysis_tables import make_tables

    runs, metrics = make_tables(
        {
            ("host", "tcp_rr"): {("latency_p50", "none"): [13.0] * 8},
            ("bridge", "tcp_rr"): {("latency_p50", "none"): [14.0] * 8},
        }
    )
    c = stats.compare(metrics, runs, baseline="host", correction="holm")
    assert c["verdict"][0] == "+7.7 % [+7.7, +7.7] worse"
    r = resolution.annotate(c).row(0, named=True)
    assert r["verdict"] == "worse by 1 step of 1 us (below resolution)"
    assert fmt.change_text(r).startswith("+8 % (1 step of 1 µs: below resolution)")


def test_order_statistic_intervals_of_whole_steps(default_campaign):
    """stats.summarize: median over runs with a distribution-free CI; its bounds are run values, so whole
    steps. veth-routed TCP_RR p50: [17, 17], i.e. the runs agree to within 1 us, not exactly."""
    s = resolution.annotate_summary(default_campaign["summary"])
    r = _row(s, "veth-routed", "tcp_rr", "latency_p50")
    assert (r["ci_low"], r["ci_high"], r["resolution"], r["ci_below_resolution"]) == (17.0, 17.0, 1.0, True)
    assert not s.filter(metric="throughput")["ci_below_resolution"].any()
    assert s.filter(metric="throughput")["resolution"].is_null().all()


def test_netperf_mean_latency_is_the_finer_source(default_campaign):
    """MEAN_LATENCY (0.01 us) agrees with 1/transaction rate (one stream) run by run, the continuous
    mean the brief asked for: no second derived metric is needed."""
    v = default_campaign["values"].filter(test="tcp_rr")
    wide = v.filter(pl.col("metric").is_in(["latency_mean", "transaction_rate"])).pivot(
        on="metric", index="run_id", values="value"
    )
    ratio = wide["latency_mean"] / (1e6 / wide["transaction_rate"])
    assert len(wide) == 40 and ratio.min() > 0.99 and ratio.max() < 1.0
    host = _row(default_campaign["summary"], "host", "tcp_rr", "latency_mean")
    assert resolution.NETPERF_MEAN_STEP_US / host["median"] < 1e-3  # 0.01 us of 13.55 us


def test_headline_shows_the_resolution(default_campaign):
    table = tables.headline(default_campaign["summary"], default_campaign["annotated"], "host")
    r = table.filter(scenario="veth-routed", test="tcp_rr", metric="latency_p50").row(0, named=True)
    assert r["change % [interval]"].endswith("(4 steps of 1 µs; interval below resolution)")
    assert "@" not in r["change % [interval]"]  # the level is the family's, stated once in the table
    assert r["verdict"] == "+31 % [+18, +38] worse (± 1 step of 1 us)"
    plain = tables.headline(default_campaign["summary"], default_campaign["comparisons"], "host")
    shown = ("change % [interval]", "verdict", "verdict_word")
    assert "note" not in plain.columns and plain.drop(shown).equals(table.drop(shown))
