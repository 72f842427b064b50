"""Figures: one template, readable labels, offline HTML and valid static files."""

from __future__ import annotations

import ast
import multiprocessing
import re
import struct
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

import plotly.io as pio
import polars as pl
import pytest

from benchlib.analysis import normalize, stats
from benchlib.report import export, figures, format as fmt, publish
from tests.conftest import REPO

PLOTLYJS_BANNER = "* plotly.js v"  # first comment line of the bundled plotly.min.js
REMOTE_SCRIPT = re.compile(r"<script[^>]*\ssrc=[\"']?(https?:)?//", re.I)


@pytest.fixture(scope="module")
def tables(lab_tables):
    runs, metrics = lab_tables
    values = normalize.with_cpu_at_target(metrics, runs)
    fam = values.filter(pl.col("metric").is_in(["throughput", "transaction_rate", "cpu_pct_at_target"]))
    return {
        "runs": runs,
        "summary": stats.summarize(values, runs),
        "values": stats.ok_values(values, runs),
        "per_run": normalize.per_run_cpu(metrics, runs),
        "comparisons": stats.compare(fam, runs),
    }


@pytest.fixture(scope="module")
def all_figures(tables):
    s = tables["summary"]
    return {
        "bars": figures.bars(s, "tcp_stream_1", "throughput", baseline="host"),
        "cpu": figures.cpu_bars(s, "tcp_rr", baseline="host"),
        "strip": figures.runs_strip(tables["values"], "tcp_crr", "connection_rate", baseline="host"),
        "forest": figures.forest(tables["comparisons"]),
        "scatter": figures.throughput_vs_cpu(tables["per_run"], "tcp_stream_n", baseline="host", target_gbps=100.0),
        "latency": figures.latency_percentiles(s, "tcp_rr", baseline="host"),
    }


def test_all_figures_share_the_template_and_have_titles(all_figures):
    for name, fig in all_figures.items():
        assert fig.layout.template == pio.templates[figures.TEMPLATE], name
        assert fig.layout.title.text, name
        assert fig.layout.xaxis.title.text or name == "forest", name
        assert fig.layout.yaxis.title.text or name == "forest", name


def test_bars_baseline_first_one_colour_per_scenario_with_ci(all_figures, tables):
    bar = all_figures["bars"].data[0]
    assert list(bar.x) == ["host", "bridge", "veth-routed", "vxlan"]
    assert len(set(bar.marker.color)) == 4
    s = tables["summary"]
    host = s.filter(scenario="host", test="tcp_stream_1", metric="throughput").row(0, named=True)
    assert bar.y[0] == pytest.approx(host["median"])
    assert bar.error_y.array[0] == pytest.approx(host["ci_high"] - host["median"])
    assert "Gbit/s" in all_figures["bars"].layout.yaxis.title.text


def test_cpu_bars_client_and_server_side_by_side(all_figures):
    fig = all_figures["cpu"]
    assert [t.name for t in fig.data] == ["client", "server"]
    assert fig.layout.barmode == "group"
    assert fig.layout.yaxis.title.text == "CPU per work (% CPU @ 10000 trans/s)"


def test_strip_shows_every_run(all_figures, tables):
    v = tables["values"]
    expected = len(v.filter(test="tcp_crr", metric="connection_rate"))
    boxes = [t for t in all_figures["strip"].data if t.type == "box"]
    assert sum(len(t.y) for t in boxes) == expected
    assert all(t.boxpoints == "all" for t in boxes)


def test_forest_has_noise_band_and_one_row_per_comparison(all_figures, tables):
    fig = all_figures["forest"]
    bands = [t for t in fig.data if t.name == "noise band"]
    assert sum(len(b.base) for b in bands) == len(tables["comparisons"]) and {v for b in bands for v in b.base} == {
        -2.0
    }
    assert sum(len(t.x) for t in fig.data if t.name != "noise band") == len(tables["comparisons"])
    assert "interval (bootstrap)" in fig.layout.title.text  # n = 8 per side: the bootstrap's range


def test_forest_splits_families_and_directions_and_marks_the_better_side(all_figures):
    """Rates, latencies and CPU never share one signed axis: a panel per family and direction, its
    correction in its title, its better side on its axis."""
    fig = all_figures["forest"]
    panels = [a.text for a in fig.layout.annotations if " is better" in a.text]
    assert panels[0] == "primary metrics, higher is better (Holm)"  # the level is the method's to state, once
    assert not any("%" in p for p in panels)
    assert "CPU metrics, lower is better" in " ".join(panels) and len(panels) == len(set(panels))
    axes = [fig.layout[k].title.text for k in fig.layout if k.startswith("xaxis")]
    assert "Change vs host (%), better →" in axes and "Change vs host (%), ← better" in axes
    # the title states the finding: how many are significant and the largest change
    assert re.match(r"\d+ of \d+ changes vs host are significant<br><sup>largest: ", fig.layout.title.text)


def test_figures_have_axis_titles_in_words_with_units_and_a_caption_with_numbers(all_figures):
    for name, fig in all_figures.items():
        titles = [
            fig.layout[k].title.text for k in fig.layout if k[:5] in ("xaxis", "yaxis") and fig.layout[k].title.text
        ]
        assert titles and not any("_" in t for t in titles), (name, titles)
        assert any(re.search(r"\(.+\)", t) for t in titles), (name, titles)
        caption, alt = fig.layout.meta["caption"], fig.layout.meta["alt"]
        assert re.search(r"\d", caption) and re.search(r"\b(chart|plot)\b", alt), name
    bars = all_figures["bars"].layout.meta["caption"]
    assert re.search(r"host \d[\d.]* \[[\d.]+, [\d.]+\] Gbit/s, n = 8", bars), bars


def test_scatter_iso_lines_pass_through_origin(all_figures):
    lines = [t for t in all_figures["scatter"].data if t.mode == "lines"]
    assert lines and all(t.y[0] == 0 for t in lines)
    assert any("per 100 Gbit/s" in a.text for a in all_figures["scatter"].layout.annotations)


def test_latency_percentiles_grouped(all_figures):
    fig = all_figures["latency"]
    assert [t.name for t in fig.data] == ["host", "bridge", "veth-routed", "vxlan"]
    assert list(fig.data[0].x) == ["p50", "p90", "p99"]


def test_figure_for_two_campaigns_is_refused(tables):
    s = tables["summary"]
    two = pl.concat([s, s.with_columns(campaign=pl.lit("c2"))])
    with pytest.raises(ValueError, match="campaigns"):
        figures.bars(two, "tcp_stream_1", "throughput", baseline="host")


def test_a_displayed_figure_leaves_plotly_js_to_the_page(all_figures):
    bundle = figures.figure_bundle(all_figures["bars"])
    assert "plotly-graph-div" in bundle["text/html"]
    assert PLOTLYJS_BANNER not in bundle["text/html"]
    assert not REMOTE_SCRIPT.search(bundle["text/html"])
    assert "application/vnd.plotly.v1+json" in bundle


def notebook_imports() -> set[str]:
    """The benchlib modules the report's notebooks import, and the names they import from them."""
    names = set()
    for path in (REPO / "notebooks").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {a.name for a in node.names if a.name.startswith("benchlib")}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("benchlib"):
                names |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
    return names


def test_a_report_kernel_imports_no_notebook_format_validators():
    # nbformat and its jsonschema format checkers take about 1 s to import, in each of a report's kernels
    names = notebook_imports()
    code = (
        "import importlib, sys\n"
        f"for name in {sorted(names)!r}:\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except ModuleNotFoundError:\n"
        "        pass  # a function or class, imported with its module\n"
        "import plotly.graph_objects as go\n"
        "from benchlib.report import figures\n"
        "figures.figure_bundle(go.Figure(layout={'title': {'text': 't'}}))\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('nbformat', 'jsonschema', 'papermill')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert "benchlib.report.figures" in names and "benchlib.report.method" in names
    assert out.stdout.strip() == "[]"


def test_write_figures_html_svg_png(all_figures, tmp_path):
    blog = tmp_path / "blog"
    paths = export.write_figures(
        {"bars": all_figures["bars"], "forest": all_figures["forest"]}, tmp_path, blog_dir=blog
    )
    assert sorted(p.relative_to(tmp_path).as_posix() for p in paths) == sorted(
        [f"{n}.{e}" for n in ("bars", "forest") for e in ("html", "svg", "png")]
        + [f"blog/{n}.{e}" for n in ("bars", "forest") for e in ("md", "svg", "png")]
        + ["blog/index.md", "blog/index.html"]
    )
    # the blog snippet: the SVG at blog width with its alt text, then the generated caption with its numbers
    image, caption = (blog / "bars.md").read_text().split("\n\n")[:2]
    assert image.startswith("![bar chart of Throughput (Gbit/s) against Scenario: tcp_stream_1: ")
    assert image.endswith("](bars.svg)")
    assert re.fullmatch(r"\*Throughput, tcp_stream_1: median of runs &#91;95 % CI&#93;: host .* n = 8\..*\*", caption)
    assert (blog / "bars.svg").read_bytes() == (tmp_path / "bars.svg").read_bytes()
    html = (tmp_path / "bars.html").read_text()
    assert html.count('class="plotly-graph-div"') == 1
    # plotly.js is written once beside the pages and loaded from there: offline, nothing fetched
    assert PLOTLYJS_BANNER not in html
    assert 'src="plotly.min.js"' in html
    assert (tmp_path / "plotly.min.js").read_text().count(PLOTLYJS_BANNER) == 1
    assert not REMOTE_SCRIPT.search(html)
    svg = ET.parse(tmp_path / "bars.svg").getroot()
    assert svg.tag.endswith("svg") and len(list(svg.iter())) > 20
    png = (tmp_path / "bars.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])
    assert (width, height) == (2 * figures.BLOG_WIDTH, 2 * 440)


@pytest.fixture(scope="module")
def datapaths():
    from tests.support.analysis_tables import datapath_samples, make_tables

    samples, columns = datapath_samples()
    runs, metrics = make_tables(samples, run_columns=columns)
    family = metrics.filter(pl.col("metric").is_in(["connection_rate", "http_latency_p50", "http_latency_p99"]))
    return {
        "runs": runs,
        "summary": stats.summarize(metrics, runs),
        "comparisons": stats.compare(family, runs, baseline="veth-routed"),
    }


def test_service_scaling_one_line_and_ribbon_per_datapath(datapaths):
    s, runs = datapaths["summary"], datapaths["runs"]
    fig = figures.service_scaling(
        s, runs, "tcp_crr", "connection_rate", baseline="veth-routed", comparisons=datapaths["comparisons"]
    )
    lines = {t.name: t for t in fig.data if t.mode == "lines+markers+text"}
    assert set(lines) == {"kube-proxy-iptables", "kube-proxy-nftables"}
    ipt = lines["kube-proxy-iptables"]
    assert list(ipt.x) == [4, 1000, 10000]
    expected = s.filter(
        pl.col("metric") == "connection_rate", pl.col("scenario").str.starts_with("kube-proxy-iptables-")
    )
    expected = expected.sort(pl.col("scenario").str.extract(r"-(\d+)$").cast(pl.Int64))
    assert list(ipt.y) == pytest.approx(list(expected["median"]))
    ribbons = [t for t in fig.data if t.fill == "toself"]
    assert len(ribbons) == 2
    assert max(ribbons[0].y) >= max(ipt.y) or max(ribbons[1].y) >= max(ipt.y)
    # iptables loses ~10 % per decade: significant and worse at 10000, more than at 4
    assert ipt.text[2].startswith("-") and float(ipt.text[2].split()[0]) < float(ipt.text[0].split()[0])
    # the hover shows each point's verdict sentence
    c = datapaths["comparisons"].filter(test="tcp_crr", metric="connection_rate", side="none")
    verdicts = dict(zip(c["scenario"], c["verdict"], strict=True))
    assert [row[3] for row in ipt.customdata] == [verdicts[f"kube-proxy-iptables-{n}"] for n in (4, 1000, 10000)]
    assert fig.layout.xaxis.type == "log"
    assert len(fig.layout.shapes) == 2  # the baseline's line and its CI band


def test_rate_sweep_orders_rates_and_marks_significance(datapaths):
    fig = figures.rate_sweep(
        datapaths["summary"],
        datapaths["runs"],
        ["http_max", "http_5000", "http_1000"],
        ("http_latency_p50", "http_latency_p99"),
        baseline="veth-routed",
        comparisons=datapaths["comparisons"],
    )
    assert list(fig.layout.xaxis.categoryarray) == ["1000", "5000", "max"]
    assert [a.text for a in fig.layout.annotations] == ["p50", "p99"]  # a panel per percentile
    assert len(fig.data) == 4  # 2 scenarios x 2 percentiles
    slow_p50 = next(t for t in fig.data if t.name == "slow" and t.xaxis == "x")
    assert list(slow_p50.x) == ["1000", "5000", "max"]
    # same latency at 1000 req/s (within noise), twice the baseline's above it
    assert list(slow_p50.marker.symbol) == ["circle-open", "circle", "circle"]


def test_bars_label_each_scenario_with_its_verdict(datapaths):
    fig = figures.bars(
        datapaths["summary"], "tcp_crr", "connection_rate", baseline="veth-routed", comparisons=datapaths["comparisons"]
    )
    assert list(fig.data[0].x)[:4] == [
        "veth-routed",
        "kube-proxy-iptables-4",
        "kube-proxy-iptables-1000",
        "kube-proxy-iptables-10000",
    ]  # numbers sort by value
    labels = {a.x: a.text for a in fig.layout.annotations}
    assert labels["veth-routed"] == "baseline"
    assert labels["kube-proxy-iptables-10000"].startswith("-") and labels["kube-proxy-iptables-10000"].endswith("%")


# The intervals the run-level figures draw, on real campaigns' tables (tests/fixtures/tidy: what
# `benchlib parse` wrote for the default campaign on this machine's lab).
REAL = "tests/fixtures/tidy"


@pytest.fixture(scope="module")
def real():
    from benchlib.analysis import load_tables

    out = {}
    for campaign in ("lab-default-002", "lab-default-003"):
        runs, metrics = load_tables(f"{REAL}/{campaign}/runs.parquet", f"{REAL}/{campaign}/metrics.parquet")
        values = normalize.with_cpu_at_target(metrics, runs)
        out[campaign] = {
            "summary": stats.summarize(values, runs),
            "values": stats.ok_values(values, runs),
            "per_run": normalize.per_run_cpu(metrics, runs),
        }
    return out


def _interval_trace(fig):
    """The trace of each scenario's median and CI: the one with error bars on the y axis."""
    (trace,) = [t for t in fig.data if t.type == "scatter" and t.error_y and t.error_y.array is not None]
    return trace


def test_strip_draws_each_scenarios_median_with_the_ci_of_the_summary_table(real):
    c = real["lab-default-003"]
    fig = figures.runs_strip(c["values"], "tcp_rr", "transaction_rate", baseline="host")
    ci = _interval_trace(fig)
    caption = fig.layout.meta["caption"]
    for i, scenario in enumerate(ci.x):
        row = c["summary"].filter(scenario=scenario, test="tcp_rr", metric="transaction_rate").row(0, named=True)
        assert ci.y[i] == pytest.approx(row["median"])
        assert ci.y[i] + ci.error_y.array[i] == pytest.approx(row["ci_high"])
        assert ci.y[i] - ci.error_y.arrayminus[i] == pytest.approx(row["ci_low"])
        # the caption states the same numbers, with n and the kind of interval
        n_runs = len(c["values"].filter(scenario=scenario, test="tcp_rr", metric="transaction_rate"))
        assert f"{scenario} {fmt.caption(row['median'])} [{fmt.caption(row['ci_low'])}, " in caption
        assert f"n = {n_runs}" in caption and row["n"] == n_runs
    assert sorted(ci.x) == sorted(c["summary"].filter(test="tcp_rr", metric="transaction_rate")["scenario"])
    assert "95 % CI" in caption and "95 % CI" in fig.layout.title.text


def test_throughput_vs_cpu_draws_each_scenarios_ci_on_both_axes(real):
    c = real["lab-default-002"]  # client and server on CPU sets of their own: per-side CPU too
    fig = figures.throughput_vs_cpu(c["per_run"], "tcp_stream_n", baseline="host", target_gbps=100.0)
    medians = [t for t in fig.data if t.type == "scatter" and t.error_x and t.error_x.array is not None]
    assert len(medians) == c["per_run"].filter(test="tcp_stream_n")["scenario"].n_unique() == 4
    caption = fig.layout.meta["caption"]
    for t in medians:
        runs = c["per_run"].filter(test="tcp_stream_n", scenario=t.name)
        row = c["summary"].filter(scenario=t.name, test="tcp_stream_n", metric="throughput").row(0, named=True)
        # the throughput interval is the summary table's; the CPU one is made the same way from the runs
        assert (t.y[0], t.y[0] - t.error_y.arrayminus[0], t.y[0] + t.error_y.array[0]) == pytest.approx(
            (row["median"], row["ci_low"], row["ci_high"])
        )
        cpu = runs["total"].to_numpy()
        assert t.x[0] == pytest.approx(float(pl.Series(cpu).median()))
        low, high = t.x[0] - t.error_x.arrayminus[0], t.x[0] + t.error_x.array[0]
        assert low < t.x[0] < high and low in cpu and high in cpu  # order statistics of the runs
        assert f"{t.name} {fmt.caption(row['median'])} [{fmt.caption(row['ci_low'])}, " in caption
        assert f"n = {len(runs)}" in caption
    assert "95 % CI" in caption


def test_a_new_report_replaces_the_previous_reports_figures_but_not_the_users_files(all_figures, tmp_path):
    """A report swapped in (publish.swap_in) takes the place of what the previous report wrote in the
    figures and blog folders (another campaign's figures must not reach the new blog index); a user's own
    files there stay."""
    out = tmp_path / "reports"
    export.write_figures({"scatter": all_figures["scatter"]}, out / "figures", blog_dir=out / "blog")  # the previous
    mine = {"blog/notes.md", "blog/photo.png", "figures/mine.svg"}
    for name in mine:
        (out / name).write_text("the user's own")
    staging = publish.staging_dir(out)
    export.write_figures({"bars": all_figures["bars"]}, staging / "figures", blog_dir=staging / "blog")
    publish.swap_in(staging, out)
    blog = out / "blog"
    assert export.INDEX_HEADING.findall((blog / "index.md").read_text()) == ["bars"]
    assert not [p for p in [*(out / "figures").iterdir(), *blog.iterdir()] if p.stem == "scatter"]
    assert all((out / name).read_text() == "the user's own" for name in mine)
    assert (out / "figures/plotly.min.js").exists() and (blog / "bars.md").exists()
    assert not mine & {f"{d}/{n}" for d in ("blog", "figures") for n in export.written_names(out / d)}


def test_notebooks_exporting_at_once_take_turns_with_the_blog_index(all_figures, tmp_path):
    """The report's notebooks run side by side, each in its own kernel process, and export into one blog
    folder: while one holds the folder's lock, another writes its snippets but waits to list them and
    rewrite the index, so neither loses the other's figures."""
    blog = tmp_path / "blog"
    export.write_figures({"bars": all_figures["bars"]}, tmp_path / "a", blog_dir=blog)
    other = multiprocessing.get_context("spawn").Process(
        target=export.write_figures,
        args=({"forest": all_figures["forest"]}, tmp_path / "b"),
        kwargs={"blog_dir": blog},
    )
    with export.one_writer(blog):
        other.start()
        deadline = time.monotonic() + 120
        while not (blog / "forest.md").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1)  # what the other process does next needs the lock
        assert (blog / "forest.md").exists()
        assert export.INDEX_HEADING.findall((blog / "index.md").read_text()) == ["bars"]
        assert "forest.md" not in export.written_names(blog)
    other.join(120)
    assert other.exitcode == 0
    assert export.INDEX_HEADING.findall((blog / "index.md").read_text()) == ["bars", "forest"]
    assert {"bars.md", "forest.md", "index.md"} <= set(export.written_names(blog))


def test_the_blog_index_lists_every_exported_figure_with_its_caption_and_files(all_figures, tmp_path):
    """Each report notebook exports its own figures into one blog directory: after two exports the
    index has both, in the order they were exported, each with its image, caption and file links."""
    from html.parser import HTMLParser

    blog = tmp_path / "blog"
    first = {"scatter": all_figures["scatter"], "bars": all_figures["bars"]}
    export.write_figures(first, tmp_path / "a", blog_dir=blog)
    export.write_figures({"forest": all_figures["forest"]}, tmp_path / "b", blog_dir=blog)
    export.write_figures({"bars": all_figures["bars"]}, tmp_path / "a", blog_dir=blog)  # a re-export keeps its place
    md = (blog / "index.md").read_text()
    assert export.INDEX_HEADING.findall(md) == ["scatter", "bars", "forest"]
    assert md.startswith("# Figures for a post\n\n3 figures")
    for name in ("scatter", "bars", "forest"):
        image, caption = (blog / f"{name}.md").read_text().split("\n\n")[:2]
        assert f"## `{name}`\n\n{image}\n\n{caption}\n\n" in md
        assert f"[{name}.svg]({name}.svg) · [{name}.png]({name}.png) · [{name}.md]({name}.md)" in md

    class Page(HTMLParser):
        """The images, the emphasised text (the captions) and the links of index.html."""

        def __init__(self):
            super().__init__()
            self.images, self.captions, self.links, self._em = [], [], [], None

        def handle_starttag(self, tag, attrs):
            a = dict(attrs)
            if tag == "img":
                self.images.append((a["src"], a["alt"]))
            elif tag == "a":
                self.links.append(a["href"])
            elif tag == "em":
                self._em = ""

        def handle_data(self, data):
            if self._em is not None:
                self._em += data

        def handle_endtag(self, tag):
            if tag == "em":
                self.captions.append(self._em)
                self._em = None

    page = Page()
    page.feed((blog / "index.html").read_text())
    # the page shows each figure's own words as theme.describe made them, and every file it links is there
    assert page.captions == [figures.words(all_figures[n])[0] for n in ("scatter", "bars", "forest")]
    assert page.images == [(f"{n}.svg", figures.words(all_figures[n])[1]) for n in ("scatter", "bars", "forest")]
    assert len(page.links) == 9 and all((blog / href).is_file() for href in page.links)


def test_the_overview_shows_every_scenario_in_every_test_signed_by_better():
    """The default campaign's primary comparisons: one cell per scenario x test, green better, red worse
    whatever the metric's direction, the change in the cell with "*" where significant."""
    from tests.support.analysis_tables import report_comparisons

    _, runs, _, rows = report_comparisons("tests/fixtures/tidy/lab-default-003")
    primary = rows.filter(family=stats.PRIMARY)
    fig = figures.overview(primary, "host")
    (heat,) = fig.data
    scenarios = sorted(set(primary["scenario"]))
    assert sorted(heat.y) == scenarios and "host" not in heat.y
    assert [x.split("<br>")[0] for x in heat.x] == sorted(set(primary["test"]))
    for s, zs, texts in zip(heat.y, heat.z, heat.text, strict=True):
        for x, z, text in zip(heat.x, zs, texts, strict=True):
            r = primary.filter(scenario=s, test=x.split("<br>")[0]).row(0, named=True)
            assert text.startswith(f"{fmt.change(r['delta_pct'])} %")
            worse = r["verdict"].endswith(" worse")
            assert text.endswith(" *") == (worse or r["verdict"].endswith(" better"))
            if worse:
                assert z < 0  # red, whether the metric is a rate or a latency
    assert "are significant" in fig.layout.title.text
    assert fig.layout.meta["caption"] and fig.layout.meta["alt"]
