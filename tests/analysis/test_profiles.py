"""CPU profiles in the analysis and the report, on the captured `perf script` output of a netperf TCP_RR in
the lab (tests/fixtures/perf via profile_tables: host and veth-routed, client and server on CPU 0)."""

from __future__ import annotations

import json
import re

import numpy as np
import polars as pl
import pytest
import scipy.stats

from benchlib.analysis import analyse, profile_contrasts, profiles
from benchlib.profiling import stacks
from benchlib.report import flamegraphs, format, profiles as profile_text, render as report, summary
from benchlib.report.theme import HEIGHT
from benchlib.settings.analysis import Analysis
from benchlib.tables import tidy
from benchlib.vocabulary import schema
from tests.conftest import FIXTURES
from tests.support.analysis_tables import make_tables, settings
from tests.support.hostile import hostile_campaign
from tests.support.profile_tables import HZ, RATES, SPREAD, WINDOW_S, folded, profile_tables


def analysed(p: pl.DataFrame, r: pl.DataFrame, s: Analysis | None = None) -> dict[str, pl.DataFrame]:
    """The profile tables the analysis stores, against host (or ``s``'s baseline), its contrasts included."""
    s = s or Analysis(baseline="host")
    return {
        **profiles.analyse(p, r, s.baseline),
        "profile_contrasts": profile_contrasts.contrasts(p, r, s),
        "profile_attribution": profile_contrasts.attribution(p, r, s),
    }


def test_a_declared_contrast_has_its_cpu_per_unit_with_an_interval_and_its_own_sentence():
    # bridge profiled as veth-routed's stacks at host's rate: less CPU per transaction than veth-routed
    p, r = profile_tables(
        {"host": "host", "veth-routed": "veth-routed", "bridge": "veth-routed"},
        runs_each=3,
        rates={"bridge": RATES["host"]},
    )
    t = analysed(p, r, Analysis(baseline="host", contrasts=[("bridge", "veth-routed")]))
    pairs = set(t["profile_contrasts"].select("scenario", "baseline").unique().iter_rows())
    assert pairs == {("bridge", "host"), ("veth-routed", "host"), ("bridge", "veth-routed")}
    (c,) = t["profile_contrasts"].filter(scenario="bridge", baseline="veth-routed").iter_rows(named=True)
    # the same samples over 53.4k/66.6k of the work: CPU per transaction down by that ratio
    assert c["change_pct"] == pytest.approx(100 * (RATES["veth-routed"] / RATES["host"] - 1), abs=0.5)
    assert c["change_low"] < c["change_pct"] < c["change_high"] < 0 and c["verdict_kind"] == "finding"
    attributed = t["profile_attribution"].filter(scenario="bridge", baseline="veth-routed", level="category")
    assert not attributed.is_empty() and (attributed["delta"] <= 0).all()
    said = profile_text.explanations(t, "host").filter(scenario="bridge", baseline="veth-routed")
    (sentence,) = said["sentence"]
    assert sentence.startswith("bridge vs veth-routed (tcp_rr, per transaction") and "[" in sentence
    # the parts it names are the contrast's own, not bridge's against host
    top = attributed.sort(pl.col("delta").abs(), descending=True).row(0, named=True)
    own = f"{top['name']} {format.cpu_change_interval(top['delta'], top['delta_low'], top['delta_high'], 'µs')}"
    assert own in sentence, sentence


@pytest.fixture(scope="module")
def tables():
    return analysed(*profile_tables(runs_each=3))


def test_each_sides_category_shares_sum_to_100(tables):
    cats = tables["profile_categories"]
    assert set(cats["category"]) - {"idle"} and "idle" not in set(cats["category"])
    sums = cats.group_by("environment", "scenario", "test", "side").agg(pl.col("share_pct").sum())
    assert len(sums) == 2 and sums["share_pct"].to_list() == pytest.approx([100.0, 100.0])
    assert set(cats["unit"]) == {"µs per transaction"}


def test_cpu_per_transaction_is_busy_cpu_seconds_over_the_transactions():
    p, r = profile_tables({"host": "host"})
    cats = profiles.categories(p, r)
    busy = sum(n for stack, n in folded("host").items() if not stack.startswith("cpu0;swapper"))
    expected = busy / HZ / (RATES["host"] * WINDOW_S) * 1e6
    assert cats["cpu_per_unit"].sum() == pytest.approx(expected, rel=0.02)  # a few non-swapper idle samples
    assert 5 < cats["cpu_per_unit"].sum() < 20


def test_runs_of_one_configuration_are_pooled():
    p, r = profile_tables({"host": "host"})
    twice = pl.concat([p, p.with_columns(run_id=pl.lit("second"))])
    runs = pl.concat([r, r.with_columns(run_id=pl.lit("second"), block=pl.lit(1, pl.Int64))])
    one, two = profiles.categories(p, r), profiles.categories(twice, runs)
    assert two["cpu_per_unit"].to_list() == pytest.approx(one["cpu_per_unit"].to_list())
    assert two["samples"].sum() == 2 * one["samples"].sum() and set(two["n_runs"]) == {2}


def sentences(tables: dict[str, pl.DataFrame]) -> pl.DataFrame:
    """The report's CPU-profile sentences of the analysis' tables, against host."""
    return profile_text.explanations(tables, "host")


def test_veth_routed_gains_backlog_processing_and_veth_transmit_over_host(tables):
    d = tables["profile_differences"].filter(level="frame", scenario="veth-routed")
    delta = dict(zip(d["name"], d["delta"], strict=True))
    assert delta["process_backlog"] > 1.0 and delta["veth_xmit"] > 0.1
    total = tables["profile_categories"].group_by("scenario").agg(pl.col("cpu_per_unit").sum())
    t = dict(total.iter_rows())
    assert t["veth-routed"] > t["host"]  # fewer transactions on a longer path: more CPU each
    (sentence,) = sentences(tables)["sentence"]
    assert sentence.startswith("veth-routed vs host (tcp_rr, per transaction, both sides): +")
    assert "+25 % [+17, +34] at 95 %" in sentence  # the change with its interval across the profiled runs
    # what the path does that host does not, by kind of work with its frames: the route lookup and the veth pair
    assert "own time in routing and forwarding +0.74 µs [+0.68, +0.79] (ip_route_input_slow +0.26 [" in sentence
    assert "veth pairs +0.16 µs [+0.14, +0.18] (veth_xmit +0.16 [" in sentence
    assert "encapsulation" not in sentence and "bridge forwarding" not in sentence  # work it does not do
    assert "softirq/backlog" in sentence and "process_backlog" not in sentence  # shared inclusive frames are not
    assert "3 vs 3 profiled runs" in sentence and "busy samples" in sentence
    assert "entry_SYSCALL" not in sentence and "do_softirq" not in sentence  # dispatchers are not named


# real records: the lab's host and vxlan, three profiled TCP_RR runs each, from a default campaign
LAB_PROFILES = FIXTURES / "raw" / "lab-default-005"


def test_vxlans_sentence_names_the_encapsulation_and_the_bridge_host_does_not_do_with_their_frames():
    runs, stacks_ = tidy.build_profile_tables(LAB_PROFILES)
    (said,) = sentences(analysed(stacks_, runs)).iter_rows(named=True)
    sentence = said["sentence"]
    assert sentence.startswith("vxlan vs host (tcp_rr, per transaction, both sides): +4.7 µs CPU (+83 % [+78, +88]")
    works = re.findall(r"(?:own time in |\), )([a-z ]+) ([+-][0-9.]+ µs \[[^]]+\])", sentence)
    assert [w for w, _ in works] == ["routing and forwarding", "bridge forwarding", "encapsulation"], sentence
    # each kind of work with the frames that carry it, each with its interval
    assert "encapsulation +0.38 µs [+0.11, +0.64] (vxlan_xmit +0.06 [+0.04, +0.08], vxlan_find_mac_rcu +" in sentence
    assert "bridge forwarding +0.40 µs [+0.24, +0.56] (br_handle_frame +0.10 [" in sentence
    assert said["frames"] == [
        "fib_table_lookup",
        "ip_forward",
        "br_handle_frame",
        "br_dev_xmit",
        "vxlan_xmit",
        "vxlan_find_mac_rcu",
    ]
    assert "process_backlog" not in sentence and "ip_rcv" not in sentence  # frames every path runs


def _with_other_processes(p: pl.DataFrame, scenario: str, samples: int) -> pl.DataFrame:
    """``p`` with a busy process that is not the measurement's on ``scenario``'s CPUs."""
    row = p.filter(scenario=scenario).head(1)
    hog = row.with_columns(
        comm=pl.lit(stacks.OTHER_TASK + "sha256sum"),
        stack=pl.lit("sha256_block_data_order [sha256sum]"),
        category=pl.lit(stacks.OTHER),
        samples=pl.lit(samples, pl.Int64),
    )
    return pl.concat([p, hog])


def test_other_processes_stay_out_of_the_work_and_a_profile_they_disturbed_explains_nothing(tables):
    p, r = profile_tables(runs_each=3)
    busy = int(p.filter(pl.col("scenario") == "veth-routed", pl.col("category") != "idle")["samples"].sum())
    quiet = analysed(_with_other_processes(p, "veth-routed", busy // 20), r)
    noisy = analysed(_with_other_processes(p, "veth-routed", busy // 2), r)
    for t in (quiet, noisy):  # the path's CPU per unit of work is the same with or without others beside it
        assert t["profile_categories"].equals(tables["profile_categories"])
    assert quiet["profile_disturbed"].is_empty() and sentences(quiet).equals(sentences(tables))  # 5 %: below the flag
    (sentence,) = sentences(noisy)["sentence"]
    assert sentence.startswith("veth-routed (tcp_rr): other processes (sha256sum most) took 33 %")
    assert "explains nothing" in sentence


def test_paths_are_a_pruned_tree_with_every_parent(tables):
    f = tables["profile_frames"].filter(level="path")
    for _, g in f.group_by("scenario"):
        ids = set(g["id"])
        assert all(p in ids for p in g["parent"] if p)
        roots = g.filter(pl.col("parent") == "")
        assert roots["id"].to_list() == ["total"]
        assert g["samples"].min() >= profiles.PRUNE_SHARE * roots["samples"][0]
        # a parent holds at least its children (plotly's branchvalues "total")
        kids = g.group_by("parent").agg(pl.col("samples").sum().alias("kids"))
        joined = g.join(kids, left_on="id", right_on="parent")
        assert (joined["samples"] >= joined["kids"]).all()


def test_empty_inputs_give_empty_tables_and_the_no_profiles_message():
    out = profiles.analyse(None, pl.DataFrame(schema=profiles.PROFILE_RUNS_SCHEMA), "host")
    assert all(t.is_empty() for t in out.values())
    assert {name: dict(t.schema) for name, t in out.items()} == {
        name: dict(pl.DataFrame(schema=s).schema) for name, s in profiles.EMPTY.items()
    }
    assert profile_text.method_text(out["profile_method"]).startswith("No CPU profiles: experiment.profile_runs is 0")


def test_a_profile_without_kernel_symbols_gets_a_sentence_not_a_flamegraph():
    p, r = profile_tables(kernel_symbols=False)
    out = analysed(p, r)
    assert out["profile_frames"].is_empty() and out["profile_categories"].is_empty()
    assert out["profile_no_symbols"].select("scenario", "test").rows() == [
        ("host", "tcp_rr"),
        ("veth-routed", "tcp_rr"),
    ]
    said = sentences(out)["sentence"].to_list()
    assert len(said) == 2 and all("no kernel symbols: kernel.kptr_restrict hid them" in s for s in said)
    assert "no kernel symbols" in profile_text.method_text(out["profile_method"])


def test_throughput_is_per_gbit_per_second():
    p, r = profile_tables({"host": "host"})
    out = profiles.categories(p, r.with_columns(metric=pl.lit("throughput"), value=pl.lit(20.0)))
    assert set(out["unit"]) == {"millicores per Gbit/s"}
    busy_cores = out["samples"].sum() / HZ / WINDOW_S
    assert out["cpu_per_unit"].sum() == pytest.approx(1000 * busy_cores / 20.0)


@pytest.mark.parametrize(
    "metric, value, per, short",
    [("transaction_rate", None, "per transaction", " µs"), ("throughput", 20.0, "per Gbit/s", " millicores/(Gbit/s)")],
    ids=["rate", "throughput"],
)
def test_the_sentences_read_what_cpu_per_unit_counts_from_its_columns_not_the_units_text(metric, value, per, short):
    p, r = profile_tables(runs_each=3)
    t = analysed(p, r if value is None else r.with_columns(metric=pl.lit(metric), value=pl.col("value") / 1000))
    for name in ("profile_categories", "profile_frames", "profile_differences"):
        ((unit, cpu_unit, work_unit),) = t[name].select("unit", "cpu_unit", "work_unit").unique().rows()
        assert unit == f"{cpu_unit} per {work_unit}"
    said = sentences(t)
    (sentence,) = said["sentence"]
    assert f"(tcp_rr, {per}, both sides)" in sentence and sentence.count(short) >= 3
    # the unit's text reworded for a reader: the same sentences, figures rounded the same
    reworded = {
        k: v.with_columns(unit=pl.lit("CPU time for each unit of work")) if "unit" in v.columns else v
        for k, v in t.items()
    }
    assert sentences(reworded).equals(said)


def _by_side(p: pl.DataFrame, r: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The one shared profile as if client and server had CPUs of their own (the same stacks each)."""
    return (
        pl.concat([p.with_columns(side=pl.lit(s)) for s in ("client", "server")]),
        r.with_columns(attribution=pl.lit("cpu")),
    )


def test_flamegraph_has_a_trace_per_scenario_and_side_and_a_dropdown_per_scenario():
    p, r = profile_tables({"host": "host", "veth-routed": "veth-routed", "bridge": "veth-routed"})
    for (pp, rr), sides in (((p, r), 1), (_by_side(p, r), 2)):
        t = profiles.analyse(pp, rr, "host")
        fig = flamegraphs.flamegraph(t["profile_frames"], "tcp_rr", baseline="host")
        assert len(fig.data) == 3 * sides and all(tr.type == "icicle" for tr in fig.data)
        assert [tr.name.split()[0] for tr in fig.data[::sides]] == ["host", "bridge", "veth-routed"]
        buttons = fig.layout.updatemenus[0].buttons
        assert [b.label for b in buttons] == ["host", "bridge", "veth-routed"]
        for k, b in enumerate(buttons):
            assert b.args[0]["visible"] == [i // sides == k for i in range(3 * sides)]
        assert [tr.visible for tr in fig.data] == buttons[0].args[0]["visible"]
        assert fig.data[0].branchvalues == "total"
        assert (flamegraphs.SHARED_NOTE in fig.layout.title.text) == (sides == 1)
        diff = flamegraphs.differential(t["profile_differences"], "tcp_rr")
        assert len(diff.data) == 2 * sides and diff.data[0].marker.cmid == 0
        bars = flamegraphs.category_bars(t["profile_categories"], "tcp_rr", baseline="host")
        assert {tr.xaxis for tr in bars.data} == ({"x"} if sides == 1 else {"x", "x2"})
        # each bar stacks to its scenario's whole busy CPU per unit, also where a scenario lacks a
        # category (a null there would restart plotly's stack and hide what is under it)
        cats = (
            t["profile_categories"]
            .filter(test="tcp_rr")
            .filter(~((pl.col("scenario") == "host") & (pl.col("category") == "devices")))
        )
        bars = flamegraphs.category_bars(cats, "tcp_rr", baseline="host")
        assert all(v is not None for tr in bars.data for v in tr.y)
        for tr_side in {"x"} if sides == 1 else {"x", "x2"}:
            heights = {}
            for tr in (tr for tr in bars.data if tr.xaxis == tr_side):
                for x, y in zip(tr.x, tr.y, strict=True):
                    heights[x] = heights.get(x, 0.0) + y
            side = "total" if sides == 1 else ("client" if tr_side == "x" else "server")
            whole = dict(cats.filter(side=side).group_by("scenario").agg(pl.col("cpu_per_unit").sum()).iter_rows())
            assert heights == pytest.approx(whole)


def test_a_findings_figures_show_its_frames_deep_and_coloured_by_their_own_change(tables):
    diffs = tables["profile_differences"]
    diff = flamegraphs.differential(diffs, "tcp_rr", scenarios=["veth-routed"])
    (tr,) = diff.data  # the compared scenario alone, and no menu: fit for a static image
    assert not diff.layout.updatemenus
    assert (tr.marker.colorscale[0][1], tr.marker.cmid) == ("rgb(5,48,97)", 0)  # diverging, centred at 0
    assert tr.marker.cmin == -tr.marker.cmax
    # each box's colour is its own relative change, not its µs: the root is not the reddest
    tree = diffs.filter(level="path", scenario="veth-routed").filter(pl.col("samples") > 0)
    colour = dict(zip(tree["name"], tr.marker.colors, strict=True))
    assert colour["total"] < max(tr.marker.colors) == tr.marker.cmax
    # the frames the sentences name are drawn: every level, process_backlog 21 calls deep
    depth = tree.filter(name="process_backlog")["depth"].min()
    assert depth >= 20 and (tr.maxdepth == -1 or tr.maxdepth > depth)
    assert "outlined" not in diff.layout.title.text and set(tr.marker.line.width) == {1}
    # with the sentences, the functions they name are outlined wherever they are called, nothing else
    said = sentences(tables).filter(scenario="veth-routed")
    named = set(said["frames"].explode())
    assert {"ip_route_input_slow", "veth_xmit"} <= named and "process_backlog" not in named
    outlined = flamegraphs.differential(diffs, "tcp_rr", scenarios=["veth-routed"], explanations=said)
    (tr,) = outlined.data
    assert "outlined in yellow: the functions the explanation names" in outlined.layout.title.text
    wide = {n for n, w in zip(tree["name"], tr.marker.line.width, strict=True) if w > 1}
    assert wide == named & set(tree["name"]) and wide
    # with the attribution, a frame's hover gives its own time's change with its interval, on every call path
    parts = tables["profile_attribution"]
    hovered = flamegraphs.differential(diffs, "tcp_rr", scenarios=["veth-routed"], attribution=parts)
    (tr,) = hovered.data
    veth = parts.filter(level="self", scenario="veth-routed", name="veth_xmit").row(0, named=True)
    lines = {line for n, (*_, line) in zip(tree["name"], tr.customdata, strict=True) if n == "veth_xmit"}
    shown = format.cpu_change_interval(veth["delta"], veth["delta_low"], veth["delta_high"], "µs")
    assert lines == {f"<br>own time, all its call paths, against host: {shown} (95 %, 3 vs 3 profiled runs)"}
    assert "%{customdata[4]}" in tr.hovertemplate
    assert {line for n, (*_, line) in zip(tree["name"], tr.customdata, strict=True) if n == "total"} == {""}
    # what changed: each frame's change of own CPU per transaction with its interval across the runs
    parts = tables["profile_attribution"]
    bars = flamegraphs.changed_frames(
        parts, "tcp_rr", "veth-routed", "host", colours={"host": "#111111", "veth-routed": "#222222"}
    )
    (bar,) = bars.data
    assert bar.marker.color == "#222222" and len(bar.y) == 10
    own = parts.filter(level="self", scenario="veth-routed").sort(pl.col("delta").abs(), descending=True)
    # largest change on top (plotly draws the last category at the top), its interval as the error bar
    top = own.row(0, named=True)
    assert bar.y[-1] == top["name"] and bar.x[-1] == pytest.approx(top["delta"])
    assert bar.x[-1] + bar.error_x.array[-1] == pytest.approx(top["delta_high"])
    assert bar.x[-1] - bar.error_x.arrayminus[-1] == pytest.approx(top["delta_low"])
    clear = [(lo > 0 or hi < 0) for lo, hi in bars.data[0].customdata]
    assert [o == 1.0 for o in bar.marker.opacity] == clear and any(clear)
    assert "95 % intervals across 3 vs 3 profiled runs" in bars.layout.title.text
    assert set(parts["unit"]) == {"µs per transaction"}


def test_each_bar_of_the_categories_carries_its_change_with_its_interval(tables):
    (c,) = tables["profile_contrasts"].iter_rows(named=True)
    bars = flamegraphs.category_bars(
        tables["profile_categories"], "tcp_rr", "host", contrasts=tables["profile_contrasts"]
    )
    (note,) = bars.layout.annotations[1:]  # the first is the side's subplot title
    assert c["verdict_kind"] == "finding" and c["change_low"] > 0
    assert note.text == f"<b>{c['change_pct']:+.0f} %<br>[{c['change_low']:+.0f}, {c['change_high']:+.0f}]</b>"
    assert note.x == "veth-routed" and note.yanchor == "bottom"
    assert "above each bar: its change in CPU per unit against host, 95 % interval across 3 vs 3 profiled runs" in (
        bars.layout.title.text
    )
    assert f"{c['change_pct']:+.0f} % [" in bars.layout.meta["caption"]
    # without the contrasts, the bars alone
    plain = flamegraphs.category_bars(tables["profile_categories"], "tcp_rr", "host")
    assert len(plain.layout.annotations) == 1 and "above each bar" not in plain.layout.title.text
    # the title's extra line takes its room from the figure, not from the plot the y axis' title needs
    assert bars.layout.height > plain.layout.height == HEIGHT
    # with the attribution, each category's hover gives its change against the baseline with its interval,
    # and the baseline's own bars none
    parts = tables["profile_attribution"].filter(level="category", scenario="veth-routed")
    hovered = flamegraphs.category_bars(
        tables["profile_categories"], "tcp_rr", "host", attribution=tables["profile_attribution"]
    )
    for tr in hovered.data:
        line = dict(zip(tr.x, (c[1] for c in tr.customdata), strict=True))
        assert line["host"] == ""
        (r,) = parts.filter(name=tr.name).iter_rows(named=True)
        shown = format.cpu_change_interval(r["delta"], r["delta_low"], r["delta_high"], "µs")
        assert line["veth-routed"] == f"<br>against host: {shown} (95 %, 3 vs 3 profiled runs)"


def test_a_finding_carries_its_profile_sentence(tables):
    expl = sentences(tables)
    row = {"environment": "local-lab", "test": "tcp_rr", "scenario": "veth-routed", "baseline": "host"}
    assert summary.profile_notes(row, expl) == expl["sentence"].to_list()
    assert summary.profile_notes({**row, "scenario": "bridge"}, expl) == []
    # the why in plain words beside the finding, the frames behind a disclosure
    (clause,) = [c for c in expl["clause"] if c]
    assert clause.startswith("veth-routed spends more CPU per unit of work than host, mostly in ")
    (works,) = [w for w in expl["works"].to_list() if w]
    assert works == ["routing and forwarding", "veth pairs"]  # the kinds of work the sentence names
    assert not any(k in clause for k in ("softirq/", "netfilter/", "_"))  # no category or frame ids
    why = summary.why_html(row, expl)
    assert why.startswith(f' Why: {clause} (routing and forwarding, veth pairs). <details class="why"><summary>')
    assert why.endswith("</details>") and "veth-routed vs host (tcp_rr" in why
    assert summary.why_html({**row, "scenario": "bridge"}, expl) == ""


def _tc_program(ns_per_run: list[float]) -> pl.DataFrame:
    """A tc program's counters on each veth-routed profiled run, as parse reads them from its record: two
    program runs per transaction, ``ns_per_run[k]`` ns each in run k (test inputs)."""
    work = [RATES["veth-routed"] * f * WINDOW_S for f in SPREAD[: len(ns_per_run)]]
    return pl.DataFrame(
        [
            {
                "run_id": f"veth-routed-tcp_rr-p{k}",
                "id": 7,
                "name": "from_pod",
                "type": "sched_cls",
                "attach": "node-a veth0 tc ingress",
                "run_cnt": int(2 * w),
                "run_time_ns": int(2 * w * t),
            }
            for k, (w, t) in enumerate(zip(work, ns_per_run, strict=True))
        ],
        schema=schema.PROFILE_BPF_SCHEMA,
    )


def _campaign(tmp_path, with_profiles: str):
    """A campaign's analysis with a clear tcp_rr change, written as `benchlib analyse` writes it."""
    from benchlib.tables import tidy

    samples = {
        (s, "tcp_rr"): {("transaction_rate", "none"): [rate * (1 + 0.002 * i) for i in range(8)]}
        for s, rate in RATES.items()
    }
    runs, metrics = make_tables(samples)
    tidy.write_tables(runs, metrics, tmp_path)
    stacks_, profile_runs = (
        profile_tables(kernel_symbols=with_profiles == "profiles", runs_each=3)
        if with_profiles != "none"
        else (None, None)
    )
    bpf = _tc_program([400.0] * 3)
    result = analyse.run(
        runs,
        metrics,
        settings().model_copy(update={"baseline": "host", "contrasts": []}),
        profile_stacks=stacks_,
        profile_runs=profile_runs,
        profile_bpf=bpf if with_profiles == "profiles" else None,
    )
    return analyse.write(result, tmp_path / "analysis", tmp_path / "runs.parquet", tmp_path / "metrics.parquet")


@pytest.mark.slow
@pytest.mark.parametrize("with_profiles", ["profiles", "none", "no-symbols"])
def test_the_report_section_shows_the_profiles(tmp_path, with_profiles):
    analysis_dir = _campaign(tmp_path, with_profiles)
    assert (
        len(sentences(analyse.load(analysis_dir).profile_tables()))
        == {"profiles": 1, "none": 0, "no-symbols": 2}[with_profiles]
    )
    out = tmp_path / "reports"
    html = report.build_report(
        ["notebooks/00_summary.py", "notebooks/05_cpu_profiles.py"],
        out,
        {"analysis_dir": str(analysis_dir), "out_dir": str(out)},
    ).read_text()
    assert 'id="CPU-profiles"' in html
    if with_profiles == "profiles":
        assert "Profiled runs are separate from the measured runs" in html and "499 Hz" in html
        # the why beside its finding with the sentence behind a disclosure, and the sentence in the section
        assert html.count("veth-routed vs host (tcp_rr, per transaction, both sides)") == 2
        assert "Why: veth-routed spends more CPU per unit of work than host" in html
        assert html.count('<details class="why">') == 1
        assert html.count('class="plotly-graph-div"') >= 4  # forest, bars, flamegraph, differential
        for name in ("categories", "flamegraph"):
            assert (out / "figures" / f"cpu_profile_tcp_rr_{name}.html").exists()
        # the finding's own figures as images and in the blog (its differential the only one: the finding
        # is the one scenario); a figure with a menu as HTML alone, and no image of a widget
        for name in ("changed", "differential"):
            assert (out / "blog" / f"cpu_profile_tcp_rr_veth-routed_{name}.png").exists()
        # the blog post shows the overview and what changed for the finding, with its why
        post = (out / "blog" / "post.md").read_text()
        shown = re.findall(r"^!\[.*\]\((.+)\.png\)$", post, re.M)
        assert shown == ["overview", "cpu_profile_tcp_rr_veth-routed_changed"], post
        assert "Veth-routed spends more CPU per unit of work than host" in post
        assert not (out / "figures" / "cpu_profile_tcp_rr_differential.html").exists()
        assert not list(out.glob("*/cpu_profile_tcp_rr_flamegraph.[ps][nv]g"))
        for image in out.glob("*/cpu_profile_*.png"):
            assert '"buttons"' not in (out / "figures" / f"{image.stem}.html").read_text(), image
        assert "Why the findings differ" in html
        # the kernel's count beside the categories: two runs of 400 ns per transaction
        assert "BPF programs, as the kernel counts them" in html
        # as a publication table, grouped by scenario
        assert re.search(r'<td class="gt_row[^>]*>from_pod</td>', html), html
        assert re.search(r'<th class="gt_group_heading"[^>]*>veth-routed</th>', html)
        assert "0.8 µs per transaction" in html and "with kernel.bpf_stats_enabled on" in html.lower()
        assert len(html) < 6_000_000  # plotly.js once (~4.7 MB) and small trees
    elif with_profiles == "none":
        assert "No CPU profiles: experiment.profile_runs is 0" in html
        assert "CPU profile:" not in html
    else:  # a sentence for each scenario, under its finding where it has one, and no flamegraph of [unknown]
        assert "CPU profile: veth-routed (tcp_rr): no kernel symbols: kernel.kptr_restrict hid them" in html
        assert "host (tcp_rr): no kernel symbols" in html
        assert not list((out / "figures").glob("cpu_profile_*"))


def test_settings_edited_after_the_analysis_are_refused_in_one_line(tmp_path):
    """A baseline changed by hand in settings.json no longer describes the tables beside it."""
    analysis_dir = _campaign(tmp_path, "none")
    analyse.load(analysis_dir)  # as written: loads
    settings = analysis_dir / analyse.SETTINGS_FILE
    saved = json.loads(settings.read_text())
    saved["settings"]["baseline"] = "bridge"
    settings.write_text(json.dumps(saved, indent=1))
    with pytest.raises(analyse.AnalysisError, match=rf"^{settings}: edited after the analysis wrote it") as err:
        analyse.load(analysis_dir)
    assert "\n" not in str(err.value)


def test_an_analysis_by_an_older_benchlib_is_refused_in_one_line(tmp_path):
    """An analysis without the digests of its files (older benchlib: from before profiles too) cannot be
    told from a mixed one: it is refused, naming the file, not loaded half."""
    analysis_dir = _campaign(tmp_path, "none")
    settings = analysis_dir / analyse.SETTINGS_FILE
    saved = json.loads(settings.read_text())
    settings.write_text(json.dumps({k: v for k, v in saved.items() if k not in ("tables", "inputs", "parse")}))
    with pytest.raises(
        analyse.AnalysisError, match=rf"^{settings}: written by an older benchlib, which recorded no digest"
    ):
        analyse.load(analysis_dir)


def test_too_few_profiled_runs_or_no_change_make_no_claim():
    one = analysed(*profile_tables())  # 1 profiled run each: no spread, no interval
    (row,) = one["profile_contrasts"].iter_rows(named=True)
    assert row["verdict_kind"] == "insufficient" and row["change_low"] != row["change_low"]  # NaN
    (said,) = sentences(one).iter_rows(named=True)
    assert "(+25 %)" in said["sentence"] and profile_text.TOO_FEW in said["sentence"]
    assert "own time" not in said["sentence"] and "TCP/IP" not in said["sentence"] and said["clause"] == ""
    assert said["frames"] == []
    # bridge made of host's own stacks, its runs at host's rates: the same CPU per transaction
    same = analysed(*profile_tables({"host": "host", "bridge": "host"}, runs_each=3))
    (row,) = same["profile_contrasts"].iter_rows(named=True)
    assert row["verdict_kind"] == "noise" and row["change_low"] < 0 < row["change_high"]
    (said,) = sentences(same).iter_rows(named=True)
    assert profile_text.NO_CHANGE in said["sentence"] and "own time" not in said["sentence"] and said["clause"] == ""


def test_a_contrasts_interval_is_welchs_at_the_level_its_family_decided_at():
    p, r = profile_tables({"host": "host", "veth-routed": "veth-routed", "bridge": "host"}, runs_each=3)
    c = profile_contrasts.contrasts(p, r, Analysis(baseline="host", alpha=0.05, correction="holm"))
    assert c["scenario"].to_list() == ["bridge", "veth-routed"]  # one family: local-lab's tcp_rr
    totals = profile_contrasts.run_totals(p, r)
    x, y = (np.log(totals.filter(scenario=s)["cpu_per_unit"].to_numpy()) for s in ("veth-routed", "host"))
    welch = scipy.stats.ttest_ind(x, y, equal_var=False)
    veth = c.filter(scenario="veth-routed").row(0, named=True)
    assert veth["p"] == pytest.approx(welch.pvalue) and veth["p_adj"] == pytest.approx(min(1, 2 * welch.pvalue))
    # Holm rejected one of two: its intervals are at 1 - alpha / (2 - 1), where exactly the finding excludes 0
    assert set(c["ci_level"]) == {0.95} and c["verdict_kind"].to_list() == ["noise", "finding"]
    low, high = welch.confidence_interval(0.95)
    assert (veth["change_low"], veth["change_high"]) == pytest.approx((100 * np.expm1(low), 100 * np.expm1(high)))


def test_profiles_that_disagree_with_the_measured_change_explain_nothing_and_are_counted():
    """On the real lab-default-003 campaign, both sides of TCP_RR on one CPU at its limit: the real veth-routed
    profile (+25 % CPU per transaction) agrees with its measured rate (-21.9 %: +28 % implied); the same
    stacks given as vxlan's (measured -46.7 %, +88 % implied) do not."""
    c = hostile_campaign("lab-default-003", "vxlan", "a failed run")
    for scenario, agrees in (("veth-routed", True), ("vxlan", False)):
        stacks_, runs_ = profile_tables({"host": "host", scenario: "veth-routed"}, runs_each=3)
        result = analyse.run(c.runs, c.metrics, settings(), profile_stacks=stacks_, profile_runs=runs_)
        (row,) = result.profile_contrasts.iter_rows(named=True)
        assert row["agrees"] is agrees and row["implied_low"] < row["implied_pct"] < row["implied_high"]
        (said,) = profile_text.explanations(result.profile_tables(), "host").iter_rows(named=True)
        caveats = summary.caveats_markdown(result.comparisons, result.profile_contrasts)
        pairs = profile_text.finding_pairs(result.comparisons, result.profile_tables(), result.settings.baseline)
        if agrees:
            assert "own time in routing and forwarding" in said["sentence"] and said["clause"]
            assert "ip_route_input_slow" in said["frames"]
            assert "at odds with the measurement" not in caveats and pairs["scenario"].to_list() == [scenario]
        else:
            assert f"{profile_text.DISAGREE}: at the CPU limit the measured rate implies +88 % [" in said["sentence"]
            assert "own time" not in said["sentence"] and said["clause"] == "" and pairs.is_empty()
            assert "**Profiles at odds with the measurement:** in 1 of 1 profiled comparisons" in caveats


def test_a_bpf_programs_figures_carry_their_interval_across_the_profiled_runs():
    p, r = profile_tables(runs_each=3)
    ns = [400.0, 420.0, 380.0]  # run time per program run in each of veth-routed's three runs (test inputs)
    bpf = _tc_program(ns)
    (row,) = profiles.bpf_programs(bpf, r).iter_rows(named=True)
    low, high = scipy.stats.ttest_1samp(ns, 0).confidence_interval(0.95)
    assert (row["ns_per_run_low"], row["ns_per_run_high"]) == pytest.approx((low, high), rel=1e-3)
    assert row["cpu_per_unit_low"] < row["cpu_per_unit"] < row["cpu_per_unit_high"]
    (shown,) = profile_text.bpf_rows(profiles.bpf_programs(bpf, r), pl.DataFrame(schema=profiles.DISTURBED_SCHEMA), {})[
        "ns_per_run"
    ]
    assert re.fullmatch(r"400(\.\d)? \[3\d\d(\.\d)?, 4\d\d(\.\d)?\]", shown), shown
