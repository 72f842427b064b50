"""Comparisons made at a side's CPU limit, found from the runs' own CPU samples (benchlib.analysis.saturation),
on the real campaigns in tests/fixtures/tidy."""

from __future__ import annotations

import polars as pl
import pytest

from benchlib.analysis import load_tables, resolution, saturation, stats
from benchlib.report import tables
from tests.support.analysis_tables import make_tables, report_comparisons

DEFAULT = "tests/fixtures/tidy/lab-default-003"
DEFAULT_SPLIT = "tests/fixtures/tidy/lab-default-002"
MESH = "tests/fixtures/tidy/lab-mesh-short-001"


@pytest.fixture(scope="module")
def default_campaign():
    _, runs, values, comparisons = report_comparisons(DEFAULT)
    return {
        "runs": runs,
        "values": values,
        "comparisons": comparisons,
        "annotated": saturation.annotate(comparisons, saturation.side_utilisation(values, runs)),
    }


def test_every_tcp_stream_of_the_default_campaign_is_bound_by_its_sender(default_campaign):
    """lab-default-003: the TCP_STREAM sender (client, 1 CPU) is 97-101 % busy in every scenario, the
    receiver 23-41 %; TCP_RR and TCP_CRR run client and server on one shared CPU, ~100 % busy."""
    util = saturation.side_utilisation(default_campaign["values"], default_campaign["runs"])
    is_stream, is_rr = pl.col("test").str.starts_with("tcp_stream"), pl.col("test").is_in(["tcp_rr", "tcp_crr"])
    stream, rr = util.filter(is_stream), util.filter(is_rr)
    assert len(stream) == 8 and stream["cpu_client"].min() > 98 and stream["cpu_server"].max() < 37
    assert len(rr) == 8 and rr["cpu_total"].min() > 99.5 and rr["cpu_client"].is_null().all()
    a = default_campaign["annotated"]
    assert set(a.filter(is_stream)["cpu_bound_side"]) == {"client"}
    assert set(a.filter(is_rr)["cpu_bound_side"]) == {"total"}


def test_the_throughput_comparison_says_what_it_measures(default_campaign):
    """bridge vs host, TCP_STREAM with n streams: +2.2 % throughput "~ within noise" with both senders at
    100 % and 99 % of their CPU: the note points to CPU per Gbit/s."""
    a = default_campaign["annotated"]
    assert len(a) == len(default_campaign["comparisons"])
    assert a.select(default_campaign["comparisons"].columns).equals(default_campaign["comparisons"])
    r = a.filter(scenario="bridge", test="tcp_stream_n", metric="throughput").row(0, named=True)
    assert r["delta_pct"] == pytest.approx(2.16, abs=0.01) and r["verdict"] == stats.WITHIN_NOISE
    assert (r["cpu_bound"], r["cpu_bound_in"], r["cpu_bound_side"]) == (True, "both", "client")
    assert r["cpu_bound_pct"] == pytest.approx(99.58, abs=0.01)
    assert r["cpu_bound_pct_base"] == pytest.approx(99.25, abs=0.01)
    assert r["note"] == (
        "client at the CPU limit (median busy 100 %, baseline 99 %): throughput then measures "
        "that CPU as much as the path; compare cpu_pct_at_target (CPU per work), side client"
    )
    cpu = a.filter(scenario="bridge", test="tcp_stream_n", metric="cpu_pct_at_target", side="client").row(0, named=True)
    assert cpu["note"].endswith("CPU per work is the comparison that is meaningful here")
    shared = a.filter(scenario="vxlan", test="tcp_rr", metric="transaction_rate").row(0, named=True)
    assert shared["note"].startswith("client and server's shared CPU set at the CPU limit")
    assert a["cpu_bound"].all()  # every test of this campaign runs a side at its limit


def test_both_sides_bound_where_each_has_its_own_cpu():
    """lab-default-002: client and server on one CPU each, both ~99 % busy in every test."""
    _, runs, values, comparisons = report_comparisons(DEFAULT_SPLIT)
    util = saturation.side_utilisation(values, runs)
    assert len(util) == 16 and min(util["cpu_client"].min(), util["cpu_server"].min()) > 97
    a = saturation.annotate(comparisons, util)
    assert a["cpu_bound"].all() and set(a["cpu_bound_side"]) == {"client, server"}


def test_the_check_is_generic_fortio_and_either_configuration():
    """lab-mesh-short-001 (fortio at 1000 req/s, a loaded machine): proxy-server's HTTP sides run at 80-81 %,
    below the limit; its baseline veth-routed's server at 98 %: the comparison is noted as bound in
    the baseline, on the server."""
    runs, metrics = load_tables(f"{MESH}/runs.parquet", f"{MESH}/metrics.parquet")
    r0 = runs.filter(scenario="proxy-server", test="http_1000").row(0, named=True)
    # the comparison's keys, from the runs (the mesh section compares with mesh.comparisons)
    rows = pl.DataFrame(
        [
            {
                **{c: r0[c] for c in stats.RUN_CONFIG},
                "metric": "http_latency_p50",
                "side": "none",
                "baseline": "veth-routed",
            }
        ],
        schema_overrides={"message_size": pl.Int64},
    )
    util = saturation.side_utilisation(metrics, runs)
    a = saturation.annotate(rows, util).row(0, named=True)
    mine = util.filter(test="http_1000", scenario="proxy-server").row(0, named=True)
    assert mine["cpu_client"] < 82 and mine["cpu_server"] < 82
    assert (a["cpu_bound"], a["cpu_bound_in"], a["cpu_bound_side"]) == (True, "baseline", "server")
    assert a["cpu_bound_pct_base"] == pytest.approx(98.42, abs=0.01)
    assert "server at the CPU limit in the baseline (median busy 80 %, baseline 98 %)" in a["note"]


def test_a_side_with_headroom_is_not_bound():
    """Constructed: a path whose client runs at 50-60 % and server at 40 % (no fixture has one)."""
    samples = {
        (s, "tcp_stream_1"): {
            ("throughput", "none"): [10.0 + i * 0.01 for i in range(8)],
            ("cpu_busy_pct", "client"): [55.0 + i for i in range(8)],
            ("cpu_busy_pct", "server"): [40.0] * 8,
            ("cpu_busy_cores", "client"): [0.55] * 8,
            ("cpu_busy_cores", "server"): [0.4] * 8,
        }
        for s in ("host", "bridge")
    }
    samples[("bridge", "tcp_stream_1")][("cpu_busy_pct", "client")] = [88.0, 89.0, 90.0, 91.0, 92.0, 85.0, 86.0, 87.0]
    runs, metrics = make_tables(samples)
    c = stats.compare(metrics, runs, baseline="host")
    utilisation = saturation.side_utilisation(metrics, runs)
    a = saturation.annotate(c, utilisation)
    assert not a["cpu_bound"].any() and a["note"].is_null().all() and a["cpu_bound_side"].is_null().all()
    # the median, 88.5 %, is below the 90 % limit; at 85 % it is above
    b = saturation.annotate(c, utilisation, threshold_pct=85.0).row(0, named=True)
    assert (b["cpu_bound"], b["cpu_bound_in"], b["cpu_bound_side"]) == (True, "scenario", "client")
    assert b["cpu_bound_pct"] == pytest.approx(88.5) and b["cpu_bound_pct_base"] == pytest.approx(58.5)


def test_both_annotations_together_in_the_headline(default_campaign):
    a = resolution.annotate(default_campaign["annotated"])
    summary = stats.summarize(default_campaign["values"], default_campaign["runs"])
    table = tables.headline(summary, a, "host")
    r = table.filter(scenario="bridge", test="tcp_stream_n", metric="throughput").row(0, named=True)
    assert r[tables.CPU_LIMIT] == "client (100 %)"
    assert (table.filter(scenario="host")[tables.CPU_LIMIT] == "").all()  # the baseline's own rows compare nothing
