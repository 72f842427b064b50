"""The blog post built from a real campaign's analysis (tests/fixtures/tidy/lab-default-003) and from
degenerate ones: its lead, setup, the figures it chooses and their captions."""

from __future__ import annotations

import html
import re

import polars as pl
import pytest

from benchlib.analysis import load_tables, resolve, stats
from benchlib.analysis.verdicts import Direction, Kind
from benchlib.report import export, figures, post, summary
from benchlib.report.format import interval_wording
from benchlib.report.profiles import EXPLANATIONS_SCHEMA
from benchlib.report.theme import HEIGHT
from tests.support.analysis_tables import analysed, degenerate

FIXTURE = "tests/fixtures/tidy/lab-default-003"


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    runs, metrics = load_tables(resolve(f"{FIXTURE}/runs.parquet"), resolve(f"{FIXTURE}/metrics.parquet"))
    return analysed(runs, metrics, tmp_path_factory.mktemp("real"))[1]


def heights_of(result) -> dict[str, float]:
    """The figures the report exports for ``result`` that a post could show, each as tall as it is drawn:
    the overview, each test's headline bars, and the forest of every comparison (far taller)."""
    baseline = result.settings.baseline
    primary = result.comparisons.filter(pl.col("family") == stats.PRIMARY, pl.col("delta_pct").is_not_nan())
    drawn = {figures.OVERVIEW: figures.overview(primary, baseline), "forest": figures.forest(result.comparisons)}
    for r in primary.unique(["test", "metric"]).iter_rows(named=True):
        drawn[figures.headline_name(r["test"], r["metric"])] = figures.bars(
            result.summary_all, r["test"], r["metric"], baseline=baseline, comparisons=result.comparisons
        )
    return {name: fig.layout.height or HEIGHT for name, fig in drawn.items()}


def build(result, heights=None, explanations=None, commit="git 1a2b3c4") -> str:
    s = result.settings
    return post.post_markdown(
        result.runs,
        result.comparisons,
        result.families,
        s,
        heights_of(result) if heights is None else heights,
        explanations,
        commit,
    )


def unescaped(md: str) -> str:
    """Markdown text as a reader sees it: the escapes of names and brackets undone."""
    return html.unescape(re.sub(r"\\(.)", r"\1", md))


def images(md: str) -> list[str]:
    return re.findall(r"^!\[[^\]]+\]\(([^)]+)\.png\)$", md, re.M)


def captions(md: str) -> list[str]:
    """Each figure's caption as a reader sees it (the Markdown escapes undone)."""
    return [unescaped(c) for c in re.findall(r"^\*(.+)\*$", md, re.M)]


def test_the_post_opens_with_the_reports_title_and_takeaways(real):
    md = build(real)
    title, lead = unescaped(md).split("\n\n")[:2]
    assert title == "# Network datapaths: bridge, veth-routed and vxlan against host (local-lab)"
    said = summary.takeaways(real.comparisons, "host")
    assert len(said) == 2 and lead == " ".join(said), lead  # no name here needs escaping
    assert lead.startswith("The largest difference: vxlan's tcp_crr connection rate is 50.7 % lower")
    # the user's report.title heads the post as it heads the report
    s = real.settings
    titled = post.post_markdown(real.runs, real.comparisons, real.families, s, title="Lab *datapaths*")
    assert titled.startswith("# Lab &#42;datapaths&#42;\n\n"), titled[:40]


def test_the_setup_paragraph_says_where_with_what_and_how(real):
    md = build(real)
    setup = unescaped(md).split("## Setup and method\n\n")[1].split("\n\n")[0]
    for fact in (
        "Campaign lab-default-003, measured 2026-11-23 in local-lab (both nodes on one kernel)",
        "kernel: 6.18.44-fc-v657",
        "tools: netperf 2.7.0",
        "run length: 2.01 s per run (median)",
        "n = 10 per configuration, 160 of 160 ok, 10 blocks",
        "Holm-corrected over the 12 headline comparisons",
        f"its interval the {interval_wording('holm', 0.05)} (at 98.33 % in this campaign)",
        "Report built from git 1a2b3c4.",
    ):
        assert fact in setup, (fact, setup)


def test_the_figures_are_the_overview_then_each_findings_test_with_short_captions(real):
    md = build(real)
    # largest finding first: vxlan's tcp_crr, tcp_rr, then the streams; the forest is far too tall for a post
    assert images(md) == [
        "overview",
        "tcp_crr_connection_rate",
        "tcp_rr_transaction_rate",
        "tcp_stream_1_throughput",
        "tcp_stream_n_throughput",
    ]
    said = captions(md)
    assert len(said) == 5 and all(len(c) <= post.CAPTION_CHARS for c in said), [len(c) for c in said]
    print("caption lengths:", [len(c) for c in said])
    assert said[0].startswith("Each scenario against host in each test's headline metric")
    assert "(9 of 12)" in said[0] and "The largest: vxlan's tcp_crr connection rate, -50.7 %." in said[0]
    # each scenario's verdict as the report writes it, findings largest first, the rest grouped
    assert said[1] == (
        "tcp_crr connection rate, median of runs with 95 % CI (n = 10 runs each). Against host: "
        "vxlan -50.7 % [-52.0, -49.2] worse; bridge -37.1 % [-38.2, -35.6] worse; "
        "veth-routed -24.9 % [-26.1, -23.1] worse."
    )
    assert said[4].endswith("vxlan -7.2 % [-11.8, -4.7] worse; veth-routed and bridge not significant.")
    assert "Each block runs every scenario × test once" in md and "report.html" in md


def test_a_findings_why_figure_follows_its_test_and_says_why_where_it_fits(real):
    heights = {**heights_of(real), "cpu_profile_tcp_crr_vxlan_changed": 470.0, "cpu_profile_tcp_rr_vxlan_changed": 470}
    why = pl.DataFrame(
        [
            {
                "environment": "local-lab",
                "test": "tcp_crr",
                "scenario": "vxlan",
                "baseline": "host",
                "side": "total",
                "sentence": "vxlan vs host (tcp_crr, ...)",
                "clause": "vxlan spends more CPU per unit of work than host, mostly in the tunnel",
            }
        ],
        schema=EXPLANATIONS_SCHEMA,
    )
    md = build(real, heights, why)
    assert images(md) == [
        "overview",
        "tcp_crr_connection_rate",
        "cpu_profile_tcp_crr_vxlan_changed",
        "tcp_rr_transaction_rate",
        "cpu_profile_tcp_rr_vxlan_changed",
        "tcp_stream_1_throughput",
    ]  # six at most
    said = captions(md)
    assert said[2].startswith("What changed in tcp_crr for vxlan (connection rate -50.7 % [-52.0, -49.2] worse)")
    assert said[2].endswith("Vxlan spends more CPU per unit of work than host, mostly in the tunnel.")
    assert all(len(c) <= post.CAPTION_CHARS for c in said)


def test_a_figure_taller_than_a_screen_is_left_out(real):
    heights = {**heights_of(real), figures.OVERVIEW: post.MAX_HEIGHT + 1}
    assert images(build(real, heights))[0] == "tcp_crr_connection_rate"


def test_without_a_finding_the_tests_with_the_largest_change_fill_the_post(real):
    quiet = real.comparisons.with_columns(
        verdict=pl.lit(stats.WITHIN_NOISE), verdict_kind=pl.lit(Kind.NOISE), verdict_direction=pl.lit(Direction.NONE)
    )
    s = real.settings
    md = post.post_markdown(real.runs, quiet, real.families, s, heights=heights_of(real))
    assert "No difference from host is significant" in md
    assert images(md) == ["overview", "tcp_crr_connection_rate", "tcp_rr_transaction_rate"]
    assert "none of the 12 changes is significant after Holm" in captions(md)[0]


def test_a_caption_too_long_for_its_names_is_cut_at_a_word():
    text = post.clip("word " * 80)
    assert len(text) <= post.CAPTION_CHARS and text.endswith("word…")


@pytest.mark.parametrize(
    "case, says",
    [
        ("every run failed", "**No finding:** no run of this campaign succeeded"),
        ("tiny n", "**No finding:** too few runs"),
        ("one scenario", "**No finding:** only one scenario (host) was measured"),
        ("no baseline", "**No finding:** the baseline **host** has no successful run"),
    ],
)
def test_a_degenerate_campaign_gets_a_post_that_says_so(case, says, tmp_path):
    result = degenerate(case, tmp_path)
    md = build(result, heights={})
    assert md.startswith("# ") and says in md, md
    assert "## Setup and method" in md and "No figure: " in md and not images(md)
    assert "Traceback" not in md
    html = export.blog_html("post", md)
    assert "<h1>" in html and "**" not in html


def test_the_heights_are_read_from_the_exported_svgs_at_the_blog_width(tmp_path):
    for name, (width, height) in {"bars": (700, 440), "wide": (1400, 1000)}.items():
        (tmp_path / f"{name}.svg").write_text(
            f'<svg class="main-svg" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}"></svg>'
        )
        (tmp_path / f"{name}.png").write_bytes(b"\x89PNG")
    (tmp_path / "svg-only.svg").write_text('<svg width="700" height="300"></svg>')
    export.note_written(tmp_path, [tmp_path / f"{n}.{e}" for n in ("bars", "wide") for e in ("svg", "png")])
    export.note_written(tmp_path, [tmp_path / "svg-only.svg"])
    assert post.exported_heights(tmp_path) == {"bars": 440.0, "wide": 500.0}


def test_the_blog_index_lists_the_figures_and_not_the_post(tmp_path):
    (tmp_path / "bars.md").write_text("![Bars](bars.svg)\n\n*Bars with 3 numbers.*\n")
    (tmp_path / "post.md").write_text("# A post\n\nIts lead.\n")
    export.note_written(tmp_path, [tmp_path / "bars.md", tmp_path / "post.md"])
    export.blog_index(tmp_path, [])
    assert export.INDEX_HEADING.findall((tmp_path / "index.md").read_text()) == ["bars"]
