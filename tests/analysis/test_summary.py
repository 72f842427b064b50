"""The report's opening section: sentences built from the analysis of real and degenerate campaigns."""

from __future__ import annotations

import re

import polars as pl
import pytest

from benchlib.analysis import load_tables, normalize, resolve, stats
from benchlib.analysis.verdicts import Direction, Kind
from benchlib.report import figures, format as fmt, summary, tables
from benchlib.vocabulary import schema
from tests.support.analysis_tables import analysed, degenerate

FIXTURE = "tests/fixtures/tidy/lab-default-003"


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    runs, metrics = load_tables(resolve(f"{FIXTURE}/runs.parquet"), resolve(f"{FIXTURE}/metrics.parquet"))
    return analysed(runs, metrics, tmp_path_factory.mktemp("real"))[1]


def text_of(result) -> str:
    s = result.settings
    return summary.summary_markdown(result.runs, result.comparisons, result.families, s)


def test_the_campaign_says_what_was_compared_where_and_with_how_many_runs(real):
    text = summary.campaign_text(real.runs, real.comparisons, "host")
    assert text.startswith(
        "Campaign **lab-default-003** in local-lab: **bridge, veth-routed and vxlan** against "
        "the baseline **host**, on 4 test(s)"
    )
    assert "10 successful run(s) per configuration, 0 failed of 160" in text


def test_findings_are_sentences_with_their_numbers_largest_change_first(real):
    rows = summary.ordered_findings(real.comparisons)
    found = rows.filter(kind=summary.FINDING)
    assert len(found) == 9 and len(rows) == 12
    sizes = found["delta_pct"].abs().to_list()
    assert sizes == sorted(sizes, reverse=True)
    assert found.row(0, named=True)["scenario"] == "vxlan" and found.row(0, named=True)["test"] == "tcp_crr"
    r = rows.filter(scenario="bridge", test="tcp_rr").row(0, named=True)
    assert summary.finding_sentence(r, 12) == (
        "bridge vs host, tcp_rr transaction rate: **-33.7 % [-35.4, -32.2] "
        "worse**, significant after Holm over 12; CPU limit (total, 100 % busy)."
    )
    noise = rows.filter(scenario="veth-routed", test="tcp_stream_1").row(0, named=True)
    assert summary.finding_sentence(noise, 12, cpu_note=False).startswith(
        "veth-routed vs host, tcp_stream_1 throughput: no significant change (it could detect "
    )


def test_the_summary_states_the_caveats_the_comparisons_carry(real):
    text = text_of(real)
    assert "**Findings**: the headline metric of each test, 9 of 12 comparisons significant after Holm" in text
    first = text.index("vxlan vs host, tcp_crr connection rate: **-50.7 %")
    assert first < text.index("bridge vs host, tcp_rr transaction rate") < text.index("Not significant in 3")
    # every comparison of the lab ran a side at its CPU limit: said once, not on every line
    assert "**CPU limit:** in 48 of 48 comparisons" in text and "; CPU limit (" not in text
    assert "**Below the instrument's resolution:** 9 of 48" in text
    assert "No finding" not in text


def test_each_comparison_carries_its_verdicts_kind_and_direction(real):
    c = real.comparisons
    assert set(c["verdict_kind"]) <= set(Kind) and set(c["verdict_direction"]) <= set(Direction)
    pick = {(r["scenario"], r["test"], r["metric"], r["side"]): r for r in c.iter_rows(named=True)}
    slower = pick["bridge", "tcp_rr", "transaction_rate", "none"]
    assert (slower["verdict_kind"], slower["verdict_direction"]) == ("finding", "worse") and slower["delta_pct"] < 0
    same = pick["veth-routed", "tcp_stream_1", "throughput", "none"]
    assert (same["verdict_kind"], same["verdict_direction"]) == ("noise", "none")
    # a finding calls the way the metric's direction gives its change; nothing else calls one
    for r in c.iter_rows(named=True):
        if r["verdict_kind"] == Kind.FINDING and r["delta_pct"]:
            up = (r["delta_pct"] > 0) == schema.metric_info(r["metric"]).higher_is_better
            assert r["verdict_direction"] == ("better" if up else "worse"), r
        else:
            assert r["verdict_direction"] == "none", r
    # below the resolution the sentence is reworded in steps, the kind and direction stay
    below = c.filter(pl.col("below_resolution") & (pl.col("verdict_kind") == Kind.FINDING))
    assert len(below) and set(below["verdict_direction"]) <= {"better", "worse"}


def _reworded(c: pl.DataFrame) -> pl.DataFrame:
    """The comparisons with every verdict sentence reworded: no word or prefix of the old ones left."""
    return c.with_columns(verdict=pl.format("verdict {} of {}", pl.int_range(pl.len()), "scenario"))


def test_no_decision_reads_the_verdicts_wording(real, monkeypatch):
    """A rewording of the verdicts (their text, and the words stats names them by) changes no decision of
    the summary, the takeaways, the figures or the tables: each reads the kind and direction columns."""
    s = real.settings
    c, rows = real.comparisons, real.comparisons.height

    def decisions(c: pl.DataFrame) -> dict:
        return {
            "kinds": summary.ordered_findings(c, None).select("scenario", "test", "metric", "side", "kind"),
            "takeaways": summary.takeaways(c, s.baseline),
            "head": summary.findings_head(c, s),
            "degenerate": summary.degenerate_text(real.runs, c, s.baseline),
            "forest": [list(t.marker.symbol) for t in figures.forest(c, s.baseline).data if t.type == "scatter"],
            "overview": [list(z) for z in figures.overview(c, s.baseline).data[0].z],
        }

    before = decisions(c)
    for name, word in (("WITHIN_NOISE", "no change"), ("UNCLEAR", "unclear"), ("NEGLIGIBLE", "tiny")):
        monkeypatch.setattr(stats, name, word)
    monkeypatch.setattr(stats, "INSUFFICIENT", "too few")
    r = _reworded(c)
    assert r["verdict"].n_unique() == rows
    after = decisions(r)
    assert before["kinds"].equals(after["kinds"])
    assert {k: v for k, v in before.items() if k != "kinds"} == {k: v for k, v in after.items() if k != "kinds"}
    # what the decisions were: the findings, a finding's way in the takeaways, open markers for noise
    assert before["kinds"]["kind"].to_list().count("finding") > 0 and "(worse)" in before["takeaways"][0]
    assert any("circle-open" in sym for sym in before["forest"])
    # the headline table colours by kind and direction: the same cells, whatever the words
    styled = [
        sorted(
            (str(x.locname), x.colname, x.rownum, repr(x.styles))
            for x in tables.headline_table(real.summary, t, s.baseline)._styles
        )
        for t in (c, r)
    ]
    assert styled[0] == styled[1] and any("#" in st for *_, st in styled[0])


def test_a_below_resolution_finding_keeps_the_verdicts_resolution_wording(real):
    lat = summary.ordered_findings(real.comparisons, None).filter(pl.col("below_resolution")).row(0, named=True)
    assert "step of" in summary.finding_sentence(lat)


@pytest.mark.parametrize(
    "name, after", [("lab-default-004", "lab-default-005"), ("run9", "run10"), ("mine", "mine-2"), ("a-099", "a-100")]
)
def test_the_next_campaign_name_is_a_fresh_one(name, after):
    assert summary.next_campaign(name) == after


def test_the_rerun_box_names_the_campaign_and_the_commands():
    box = summary.rerun_box("lab-default-003")
    assert box.startswith('<aside class="rerun"') and "campaign <code>lab-default-003</code>" in box
    # rebuilding the report measures nothing; measuring again needs a new campaign name, and says so
    assert "# this report again from the records of lab-default-003" in box
    assert "measures nothing\ndvc repro -f -s parse analyse report\n# measure again" in box
    assert "experiment.campaign: lab-default-003 in params.yaml); measures nothing" in box
    assert "bash scripts/reproduce.sh" in box and "a new name in params.yaml (e.g. lab-default-004)" in box
    assert "under lab-default-003 it finds every run recorded and measures nothing" in box
    compare = summary.rerun_box(["a", "b"], [("benchlib compare a b", "this comparison again")])
    assert "<code>a and b</code>" in compare and "# this comparison again\nbenchlib compare a b" in compare


@pytest.mark.parametrize(
    "case, says",
    [
        ("every run failed", "**No finding:** no run of this campaign succeeded"),
        (
            "tiny n",
            "**No finding:** too few runs: no comparison could be tested (as few as 2 successful run(s) per "
            "configuration, at least 6 needed)",
        ),
        ("one scenario", "**No finding:** only one scenario (host) was measured"),
        ("no baseline", "**No finding:** the baseline **host** has no successful run"),
    ],
)
def test_a_degenerate_campaign_gets_a_summary_that_says_so(case, says, tmp_path):
    text = text_of(degenerate(case, tmp_path))
    assert says in text, text
    if case == "tiny n":
        assert "none of the 1 comparisons" in text and "- Not tested (1 of 1" in text


def test_the_headline_table_is_a_publication_table(real):
    html = tables.html(tables.headline_table(real.summary, real.comparisons, "host"))
    # families as row groups, each with its correction and the level its intervals came out at, once
    assert "primary (Holm, intervals at 98.33 %)" in html and "latency (FDR (Benjamini-Hochberg), intervals at " in html
    t = tables.headline(real.summary, real.comparisons, "host")
    assert not any("@" in c for c in t["change % [interval]"].drop_nulls())
    # the change once per row: the verdict beside it is a word
    text = tables.as_text(t.with_columns(verdict=pl.col("verdict_word")))
    assert set(text["verdict"]) <= {"baseline", "better", "worse", "~ within noise", "negligible", ""} | {
        v for v in text["verdict"] if v.startswith(("inconclusive", "worse (", "better (", "worse by", "better by"))
    }
    assert "&lt; 0.001" in html and ">0.00<" not in html  # p as a reader reads it
    assert "µs" in html and "(us)" not in html and " us " not in html
    assert "transaction rate (trans/s)" in html and "Median [95 % CI]" in html
    assert "e+0" not in html.split("</style>")[-1]  # medians without exponents
    assert "null" not in html and "<script" not in html and "fonts.googleapis" not in html
    assert tables.WORSE in html  # verdicts coloured


def test_the_headline_table_names_tests_and_writes_cpu_per_work_in_one_unit_per_kind(real):
    assert tables.test_labels(real.runs) == {
        "tcp_crr": "TCP connect/request/response",
        "tcp_rr": "TCP request/response",
        "tcp_stream_1": "TCP stream, 1 flow",
        "tcp_stream_n": "TCP stream, 4 flows",
    }
    html = tables.html(tables.headline_table(real.summary, real.comparisons, "host", real.runs))
    body = html.split("</style>")[-1]
    assert "TCP stream, 1 flow" in body and "tcp_stream_1" not in body
    assert "µs CPU per transaction" in body and "µs CPU per connection" in body and "cores per 10 Gbit/s" in body
    assert "% CPU @" not in body and "cpu_pct_at_target" not in body
    cpu = real.summary.filter(metric="cpu_pct_at_target")
    cost = tables.cpu_cost(cpu, real.runs)
    for r, c in zip(cpu.iter_rows(named=True), cost.iter_rows(named=True), strict=True):
        n = 1 if r["test"] in ("tcp_rr", "tcp_crr") or r["side"] != "total" else 2  # the lab's CPUs per side
        if r["test"] == "tcp_rr":  # % of n CPUs at 10000 trans/s -> µs of CPU per transaction
            assert c["median"] == pytest.approx(r["median"] / 100 * n / 10_000 * 1e6)
        if r["test"].startswith("tcp_stream"):  # % of n CPUs at 100 Gbit/s -> cores per 10 Gbit/s
            assert c["median"] == pytest.approx(r["median"] / 100 * n / 100 * 10) and c["unit"] == "cores per 10 Gbit/s"
        # one factor per configuration: its interval scales with its median
        assert c["ci_low"] / c["median"] == pytest.approx(r["ci_low"] / r["median"])


def test_the_cpu_cost_is_converted_by_the_summarys_work_columns_not_its_units_text(real):
    # the work columns on the rows at a target work rate, and only there
    at_target = pl.col("metric").is_in([normalize.CPU_AT_TARGET, normalize.PROXY_CPU_AT_TARGET])
    known = real.summary_all.select(pl.all_horizontal(pl.col(*normalize.WORK_COLUMNS).is_not_null()).alias("known"))
    assert known["known"].equals(real.summary_all.select(at_target.alias("known"))["known"]) and known["known"].any()
    cpu = real.summary.filter(metric=normalize.CPU_AT_TARGET)
    # the unit spells the work columns for a reader
    for u, m, target in cpu.select("unit", *normalize.WORK_COLUMNS).iter_rows():
        assert u == f"% CPU @ {target:g} {schema.METRICS[m].unit}"
    cost = tables.cpu_cost(cpu, real.runs)
    assert {"µs CPU per transaction", "µs CPU per connection", "cores per 10 Gbit/s"} <= set(cost["unit"])
    reworded = cpu.with_columns(unit=pl.lit("busy share of the CPUs at the target work rate"))
    assert tables.cpu_cost(reworded, real.runs).equals(cost)
    # the target is the column's number: twice the rate, half the CPU per unit of work
    doubled = tables.cpu_cost(cpu.with_columns(pl.col("work_target") * 2), real.runs)
    assert doubled["median"].to_list() == pytest.approx((cost["median"] / 2).to_list())


def test_ours_next_to_theirs_is_written_like_the_headline_table(real):
    measured = real.reference.filter(pl.col("ours_verdict") != "not measured")
    html = tables.html(tables.reference_table(measured)).split("</style>")[-1]
    assert "Our change % [interval]" in html and "Our verdict" in html and "Their change %" in html
    assert "-8.3 [-10.4, -6.3]" in html and ">worse<" in html  # the change once, its verdict a word
    shown = re.sub(r"<[^>]+>", " ", html)  # what a reader sees, not the cells' ids
    assert "pct" not in shown and "ours_" not in shown and "&lt; 0.001" in shown
    box = tables.collapsed("3 claims", "<ul><li>a</li></ul>")
    assert box.startswith('<details class="long"><summary') and ">3 claims</summary>" in box and "open" not in box


def test_publication_cells_are_text_without_nulls_or_quotes():
    df = pl.DataFrame(
        {
            "cv_pct": [1.23456, None, float("nan")],
            "ok": [True, False, None],
            "name": ["a", None, "c"],
            "n": [1, 2, None],
        }
    )
    text = tables.as_text(df, {"cv_pct": "{:.2f}"})
    assert text.rows() == [("1.23", "yes", "a", "1"), ("", "no", "", "2"), ("", "", "c", "")]
    assert fmt.numbers_in("1.7e+04 [1.663e+04, 1.734e+04]") == "17,000 [16,630, 17,340]"
    assert tables.label("median_duration_s") == "Median run length (s)" and tables.label("scenario") == "Scenario"


def test_publication_tables_leave_out_what_is_for_machines(real):
    flagged = real.summary.filter(pl.col("flags") != "").select(*stats.CONFIG, "n", "cv_pct", "flags")
    html = tables.html(tables.publication_table(flagged))
    assert "Test params" not in html and "bitrate" not in html  # the test's parameters as JSON
    assert "lab-default-003" not in html and "local-lab" not in html  # one campaign, one environment
    assert ">CV %<" in html and ">Flags<" in html


def test_the_terminal_summary_says_plainly_that_the_baseline_has_no_successful_run(tmp_path):
    a = degenerate("no baseline", tmp_path)
    text = summary.terminal_text(a.runs, a.comparisons, "host", "reports/report.html")
    assert "0 to 8 successful run(s) per configuration, 3 failed of 11" in text, text
    assert "No finding: the baseline host has no successful run, so no scenario was compared with it." in text


def test_the_first_screen_has_a_title_takeaways_and_the_context_of_the_runs(real):
    s = real.settings
    assert (
        summary.title_text(real.runs, "host")
        == "Network datapaths: bridge, veth-routed and vxlan against host (local-lab)"
    )
    lead, per_scenario = summary.takeaways(real.comparisons, "host")
    assert lead == "The largest difference: vxlan's tcp_crr connection rate is 50.7 % lower than host's (worse)."
    assert per_scenario == (
        "Against host, each test's headline metric: vxlan worse in 4 of 4 tests (-50.7 % to -7.2 %); "
        "bridge worse in 3 of 4 tests (-37.1 % to -5.8 %); veth-routed worse in 2 of 4 tests (-24.9 % to -21.9 %)."
    )
    strip = dict(summary.context(real.runs))
    assert strip["Measured"] == "2026-11-23" or strip["Measured"].startswith("2026-11-23 to ")
    assert strip["Campaign"] == "lab-default-003" and strip["Kernel"] == "6.18.44-fc-v657"
    assert strip["Runs"] == "n = 10 per configuration, 160 of 160 ok, 10 blocks"
    assert "netperf 2.7.0" in strip["Tools"] and strip["Run length"].endswith("s per run (median)")
    # the fixture's tables predate the machine column: said, not left blank
    assert strip["Machine"] == "not recorded" and "Report built from" not in strip
    from benchlib.tables import tidy

    machine = tidy.machine_text({"cpu_model": "AMD EPYC 9R14", "cpus": 2, "memory": "8126464 kB"})
    assert machine == "AMD EPYC 9R14, 2 CPUs, 8 GiB" and tidy.machine_text({}) is None
    recorded = dict(summary.context(real.runs.with_columns(machine=pl.lit(machine)), commit="git 1a2b3c4"))
    assert recorded["Machine"] == machine and recorded["Report built from"] == "git 1a2b3c4"
    html = summary.first_screen_html(real.runs, real.comparisons, s.baseline)
    assert html.startswith('<header class="first-screen"') and html.count("<h1") == 1
    assert html.index("report-title") < html.index("takeaways") < html.index('class="context"')
    # the user's report.title heads the page, what was compared beneath it
    titled = summary.first_screen_html(real.runs, real.comparisons, s.baseline, title="Lab <datapaths>")
    assert '<h1 class="report-title" style="margin:.2em 0 .4em 0">Lab &lt;datapaths&gt;</h1>' in titled
    assert "report-subtitle" in titled and summary.title_text(real.runs, s.baseline) in titled


def test_the_takeaways_say_so_when_nothing_differs(real):
    none = real.comparisons.with_columns(
        verdict=pl.lit(stats.WITHIN_NOISE), verdict_kind=pl.lit(Kind.NOISE), verdict_direction=pl.lit(Direction.NONE)
    )
    assert summary.takeaways(none, "host") == [
        "No difference from host is significant in any test's headline metric (12 comparisons)."
    ]
    assert summary.takeaways(real.comparisons.clear(), "host") == []


def test_the_interval_is_named_the_same_whatever_its_level(real):
    """The findings name their intervals by what they agree with, never by a level that changes from
    campaign to campaign; the method states the levels once."""
    s = real.settings
    text = text_of(real)
    assert "[interval agreeing with the Holm-corrected test, 5 % family-wise error]" in text
    assert "interval at" not in text and "98.33" not in text
    method = summary.levels_text(real.families, s)
    assert "primary (Holm, 9 of 12 significant): 98.33 %" in method
    assert fmt.interval_wording("fdr_bh", 0.01) == (
        "interval agreeing with the Benjamini-Hochberg test, 1 % false discovery rate"
    )
