"""One colour per scenario in every figure, from one mapping; the CPU categories and ours vs published
in palettes of their own, apart from the scenarios'."""

from __future__ import annotations

import itertools

import polars as pl
import pytest
from figure_colours import by_scenario, drawn

from benchlib.analysis import normalize, stats
from benchlib.report import colours, figures, flamegraphs, mesh as mesh_figures

SCENARIOS = ["host", "bridge", "veth-routed", "vxlan"]


def test_the_baseline_is_grey_and_the_others_take_the_palette_in_natural_order():
    c = colours.scenario_colours(["kp-1000", "host", "kp-4", "kp-104", "host"], "host")
    assert c == {
        "host": colours.BASELINE,
        "kp-4": colours.SCENARIOS[0],
        "kp-104": colours.SCENARIOS[1],
        "kp-1000": colours.SCENARIOS[2],
    }
    # the baseline's grey is the baseline's alone, drawn or not
    assert colours.scenario_colours(["kp-4", "kp-104"], "host") == {k: v for k, v in c.items() if k != "kp-1000"} | {
        "host": colours.BASELINE
    }
    assert colours.BASELINE not in colours.SCENARIOS and len(set(colours.SCENARIOS)) == len(colours.SCENARIOS)


def test_a_figure_of_some_scenarios_keeps_the_campaigns_colours():
    campaign = colours.scenario_colours(SCENARIOS, "host")
    assert colours.pick(campaign, ["vxlan"], "host") == campaign
    # without the campaign's mapping, only the scenarios shown: vxlan takes the first colour
    assert colours.pick(None, ["vxlan"], "host")["vxlan"] == colours.SCENARIOS[0] != campaign["vxlan"]


@pytest.mark.parametrize(
    "palette",
    [
        pytest.param(colours.CATEGORY, id="CPU categories"),
        pytest.param({"ours": colours.OURS, "published": colours.PUBLISHED}, id="ours vs published"),
    ],
)
def test_the_other_palettes_are_apart_from_every_scenario_colour(palette):
    """A category (or ours/published) a reader could take for a scenario's colour would read as that
    scenario: each is at least colours.APART from the baseline's and every scenario's colour."""
    for (name, c), s in itertools.product(palette.items(), (colours.BASELINE, *colours.SCENARIOS)):
        assert colours.distance(c, s) >= colours.APART, (name, c, s, colours.distance(c, s))
    assert len(set(palette.values())) == len(palette)


def test_the_distance_is_cielab():
    assert colours.distance("#000000", "#FFFFFF") == pytest.approx(100, abs=0.01)
    assert colours.distance("#0072B2", "#0072B2") == 0
    assert colours.distance("#56B4E9", "#88CCEE") < colours.APART  # two sky blues: too close


@pytest.fixture(scope="module")
def report_figures(lab_tables):
    """Each figure the report draws with scenario colours, as the notebooks build them from one campaign's
    mapping, and as plotly dicts (what the report writes)."""
    runs, metrics = lab_tables
    values = normalize.with_cpu_at_target(metrics, runs)
    summary = stats.summarize(values, runs)
    compared = stats.compare(
        values.filter(pl.col("metric").is_in(["throughput", "transaction_rate", "connection_rate"])), runs
    )
    campaign = colours.scenario_colours(runs["scenario"], "host")

    def build(c):
        kw = dict(baseline="host", colours=c)
        return {
            "bars": figures.bars(summary, "tcp_stream_1", "throughput", comparisons=compared, **kw),
            "cpu": figures.cpu_bars(summary, "tcp_rr", **kw),
            "strip": figures.runs_strip(stats.ok_values(values, runs), "tcp_crr", "connection_rate", **kw),
            "forest": figures.forest(compared, **kw),
            "scatter": figures.throughput_vs_cpu(
                normalize.per_run_cpu(metrics, runs), "tcp_stream_n", target_gbps=100.0, **kw
            ),
            "latency": figures.latency_percentiles(summary, "tcp_rr", **kw),
        }

    return {
        "campaign": campaign,
        "with mapping": {k: f.to_plotly_json() for k, f in build(campaign).items()},
        "without": {k: f.to_plotly_json() for k, f in build(None).items()},
    }


@pytest.mark.parametrize("how", ["with mapping", "without"])
def test_each_scenario_has_one_colour_across_the_figures(report_figures, how):
    seen = by_scenario(report_figures[how], SCENARIOS)
    assert set(seen) == set(SCENARIOS), seen
    for scenario, colour in seen.items():
        assert len(colour) == 1, (scenario, colour)
    assert {s: next(iter(c)) for s, c in seen.items()} == {s: c.lower() for s, c in report_figures["campaign"].items()}
    # the forest draws no baseline, and yet its scenarios keep the colours of the others
    assert {s for s, _ in drawn(report_figures[how]["forest"], SCENARIOS)} == set(SCENARIOS) - {"host"}


def test_the_reader_of_the_colours_sees_a_scenario_in_two_colours():
    """The check above can fail: a figure that gives bridge another colour is caught."""
    fig = figures.bars(
        stats.summarize(*_tables()),
        "tcp_stream_1",
        "throughput",
        baseline="host",
        colours={s: "#123456" for s in SCENARIOS},
    ).to_plotly_json()
    other = figures.bars(stats.summarize(*_tables()), "tcp_stream_1", "throughput", baseline="host").to_plotly_json()
    seen = by_scenario({"a": fig, "b": other}, SCENARIOS)
    assert all(len(c) == 2 for c in seen.values()), seen


def _tables():
    from tests.support.analysis_tables import lab_like_samples, make_tables

    runs, metrics = make_tables(lab_like_samples())
    return normalize.with_cpu_at_target(metrics, runs), runs


def test_mesh_figures_colour_each_path_by_its_scenario():
    ladder = pl.DataFrame(
        {
            "test": ["rr"] * 4,
            "scenario": ["host", "host", "proxy-both", "proxy-both"],
            "path": ["host (0 hops)", "host (0 hops)", "proxy-both (2 hops)", "proxy-both (2 hops)"],
            "proxy_hops": [0, 0, 2, 2],
            "percentile": ["p50", "p99", "p50", "p99"],
            "median": [10.0, 20.0, 30.0, 60.0],
            "ci_low": [9.0, 18.0, 28.0, 55.0],
            "ci_high": [11.0, 22.0, 32.0, 65.0],
            "n": [10] * 4,
            "unit": ["µs"] * 4,
        }
    )
    campaign = colours.scenario_colours(["host", "proxy-both", "proxy-one"], "host")
    fig = mesh_figures.ladder_figure(ladder, "rr", baseline="host", colours=campaign).to_plotly_json()
    assert dict(drawn(fig, campaign)) == {s: campaign[s].lower() for s in ("host", "proxy-both")}


def test_category_bars_use_the_category_palette():
    cats = pl.DataFrame(
        {
            "environment": ["e"] * 2,
            "test": ["t"] * 2,
            "scenario": ["host", "bridge"],
            "side": ["total"] * 2,
            "category": ["TCP/IP", "TCP/IP"],
            "cpu_per_unit": [1.0, 2.0],
            "share_pct": [50.0, 60.0],
            "unit": ["µs per transaction"] * 2,
        }
    )
    fig = flamegraphs.category_bars(cats, "t", "host")
    assert {t.marker.color for t in fig.data} == {colours.CATEGORY["TCP/IP"]}
