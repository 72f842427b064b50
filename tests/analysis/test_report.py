"""Report: notebooks run headless on tidy tables and render one offline HTML page."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import polars as pl
import pytest
from analysis_tables import analysed
from figure_colours import by_scenario, in_notebooks

from benchlib.analysis import project_root, resolve, stats
from benchlib.report import colours, render as report

PLOTLYJS_BANNER = "* plotly.js v"
REMOTE_SCRIPT = re.compile(r"<script[^>]*\ssrc=[\"']?(https?:)?//", re.I)


def test_project_root_from_notebooks_dir(monkeypatch):
    root = project_root()
    monkeypatch.chdir(root / "notebooks")
    assert project_root() == root
    assert resolve("data/processed/x.parquet") == root / "data/processed/x.parquet"
    assert resolve("/abs/x").as_posix() == "/abs/x"


def test_kernels_started_at_once_keep_their_sockets_apart(tmp_path, monkeypatch):
    """The report's notebooks (and a second report at once) start kernels from one working directory:
    each kernel's sockets are in a directory of its own, outside it, removed when the kernel stops."""
    monkeypatch.chdir(tmp_path)

    async def two_kernels() -> list[Path]:
        managers = [report.LocalKernelManager(kernel_name="python3") for _ in range(2)]
        await asyncio.gather(*(m.start_kernel() for m in managers))
        try:
            assert all([await m.is_alive() for m in managers])
            return [Path(m.ip).parent for m in managers]
        finally:
            await asyncio.gather(*(m.shutdown_kernel(now=True) for m in managers))

    folders = asyncio.run(two_kernels())
    assert folders[0] != folders[1] and not any(tmp_path in f.parents for f in folders)
    assert not any(f.exists() for f in folders) and not list(tmp_path.iterdir())


def test_setup_and_method_tables(lab_tables):
    runs, metrics = lab_tables
    setup = report.setup_table(runs).row(0, named=True)
    assert setup["kernel"] == "6.1.0-test" and setup["tools"] == "netperf 2.7.0"
    assert setup["nodes_share_kernel"] == "true"
    assert "client and server nodes run on one kernel" in report.shared_kernel_note(runs)
    assert report.shared_kernel_note(runs.with_columns(nodes_share_kernel=pl.lit(None, pl.Boolean))) == ""
    method = {r["test"]: r for r in report.method_table(runs).iter_rows(named=True)}
    assert method["tcp_crr"]["failed"] == 1 and method["tcp_crr"]["runs_per_scenario"] == "8-9"
    assert method["tcp_rr"]["blocks"] == 8


def test_caveats_list_flags_and_failures(lab_tables):
    runs, metrics = lab_tables
    flagged, failed = report.caveats(stats.summarize(metrics, runs), runs)
    assert (flagged["flags"] != "").all() and len(flagged) > 0  # retransmits vary a lot
    assert failed.select("scenario", "test", "failed_runs").rows() == [("vxlan", "tcp_crr", 1)]


@pytest.mark.slow
def test_notebooks_execute_and_render_offline_report(default_report):
    runs, result, out, html_path = (default_report[k] for k in ("runs", "result", "out", "html"))
    key = f"{default_report['campaign']}/local-lab"

    html = html_path.read_text()
    assert html.count(PLOTLYJS_BANNER) == 1  # plotly.js exactly once for all figures
    assert html.count('class="plotly-graph-div"') >= 15
    assert not REMOTE_SCRIPT.search(html)  # opens offline
    assert "@import" not in html and "fonts.googleapis" not in html  # tables in system fonts, none fetched
    assert "figures.use_report_renderer" not in html  # code hidden
    headings = (
        "Findings",
        "Significance vs the baseline",
        "Headline table",
        "Caveats",
        "Results per test",
        "Setup",
        "Method",
        "CPU normalization",
    )
    at = [html.index(f'id="{heading.replace(" ", "-")}"') for heading in headings]
    assert at == sorted(at)  # the answer first, the results next, how they were measured last
    assert 'class="gt_table"' in html  # publication tables
    # the first screen before the findings: the title, the takeaways, the context strip, then the contents
    first = html.index('class="first-screen"')
    assert (
        first < html.index('class="report-title"') < html.index('class="context"') < html.index('aria-label="Contents"')
    )
    assert html.index('aria-label="Contents"') < at[0]
    summary_part = html[at[0] : at[1]]
    assert "**" not in summary_part  # markdown rendered
    assert "vxlan vs host, tcp_stream_1 throughput: <strong>" in summary_part and "worse" in summary_part
    assert "dvc repro" in summary_part and 'class="plotly-graph-div"' in summary_part  # headline figure
    assert "Service-mesh" not in html  # no proxy on any path: no mesh section
    assert '"ename"' not in "".join(p.read_text() for p in (out / "notebooks").glob("*.ipynb"))
    # each scenario in one colour in every figure the notebooks drew, the baseline grey
    drawn = by_scenario(in_notebooks(out / "notebooks"), runs["scenario"].unique())
    assert set(drawn) == {"host", "bridge", "veth-routed", "vxlan"}, drawn
    assert all(len(c) == 1 for c in drawn.values()), drawn
    assert set(drawn["host"]) == {colours.BASELINE.lower()}

    m = result.metrics_json()
    assert m["comparisons"][f"{key}/vxlan/tcp_stream_1/throughput/none"]["verdict"].endswith("worse")
    assert m["comparisons"][f"{key}/vxlan vs bridge/tcp_stream_1/throughput/none"]["baseline"] == "bridge"
    assert (out / "significance.csv").stat().st_size > 0
    for name in ("forest", "tcp_stream_1_throughput_vs_cpu", "tcp_rr_latency", "reference_changes"):
        for ext in ("html", "svg", "png"):
            assert (out / "figures" / f"{name}.{ext}").stat().st_size > 1000


@pytest.mark.parametrize("notebook", report.NOTEBOOKS)
def test_notebooks_take_only_where_the_data_is(notebook):
    """The analysis settings reach the notebooks through the analysis tables, never as parameters: the
    parameters cell names where the analysis is (and where outputs go, and the user's report title),
    with `benchlib report`'s defaults."""
    import jupytext

    from benchlib.cli import build_parser

    nb = jupytext.read(project_root() / "notebooks" / notebook)
    (cell,) = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    namespace = {}
    exec(cell.source, namespace)  # plain assignments: nothing to import, nothing hidden
    declared = {k: v for k, v in namespace.items() if not k.startswith("__")}
    assert set(declared) <= {"analysis_dir", "out_dir", "title"} and "analysis_dir" in declared, declared
    report_args = build_parser().parse_args(["report"])
    assert declared["analysis_dir"] == report_args.analysis
    assert declared.get("out_dir", "reports") == "reports"
    assert declared.get("title", "") == ""  # none given: the report names what was compared


@pytest.mark.slow
@pytest.mark.parametrize("case", ["every run failed", "no baseline"])  # the other degenerate texts: test_summary
def test_report_renders_without_a_traceback_on_degenerate_campaigns(case, tmp_path):
    from analysis_tables import make_tables

    if case in ("one scenario", "no baseline"):
        from analysis_tables import degenerate

        analysis_dir = tmp_path / "analysis"
        result = degenerate(case, tmp_path)
    elif case == "every run failed":
        runs, metrics = make_tables(
            {
                ("host", "tcp_stream_1"): {("throughput", "none"): [40.0]},
                ("vxlan", "tcp_stream_1"): {("throughput", "none"): [30.0]},
            },
            failed={("host", "tcp_stream_1"): 2, ("vxlan", "tcp_stream_1"): 2},
        )
        runs = runs.with_columns(outcome=pl.lit("failed"), failure_reason=pl.lit("netperf exited 1"))
    else:  # two runs each, and a scenario whose every run failed
        cpu = {("cpu_busy_cores", "client"): [0.9, 0.8], ("cpu_busy_cores", "server"): [0.7, 0.6]}
        runs, metrics = make_tables(
            {
                ("host", "tcp_rr"): {("transaction_rate", "none"): [9e3, 9.1e3], **cpu},
                ("vxlan", "tcp_rr"): {("transaction_rate", "none"): [8e3, 8.1e3], **cpu},
                ("bridge", "tcp_rr"): {("transaction_rate", "none"): [1.0]},
            },
            failed={("bridge", "tcp_rr"): 2},
        )
        runs = runs.with_columns(
            outcome=pl.when(pl.col("scenario") == "bridge").then(pl.lit("failed")).otherwise("outcome")
        )
    if case not in ("one scenario", "no baseline"):
        analysis_dir, result = analysed(
            runs, metrics.join(runs.filter(outcome="ok").select("run_id"), on="run_id"), tmp_path
        )
    out = tmp_path / "reports"
    html = report.build_report(
        [f"notebooks/{n}" for n in report.NOTEBOOKS], out, {"analysis_dir": str(analysis_dir), "out_dir": str(out)}
    ).read_text()
    assert '"ename"' not in "".join(p.read_text() for p in (out / "notebooks").glob("*.ipynb"))
    m = result.metrics_json()
    summary_part = html[: html.index('id="Significance-vs-the-baseline"')]
    # never an empty figure: every figure drawn has something to draw
    assert '"data": []' not in html and '"data":[]' not in html
    # the blog post says plainly that there is nothing to show
    post = (out / "blog" / "post.md").read_text()
    assert post.startswith("# Network datapaths: vxlan against host") and "**No finding:**" in post, post
    assert "No figure: " in post and "![" not in post and (out / "blog" / "post.html").stat().st_size > 0
    if case == "one scenario":
        assert "No finding:</strong> only one scenario (host) was measured" in summary_part
    elif case == "no baseline":
        assert "No finding:</strong> the baseline <strong>host</strong> has no successful run" in summary_part
    elif case == "every run failed":
        assert m["comparisons"] == {} and "no run of this campaign succeeded" in html
        assert "No finding:</strong> no run of this campaign succeeded" in summary_part
    else:
        row = m["comparisons"]["c1/local-lab/vxlan/tcp_rr/transaction_rate/none"]
        assert row["verdict"] == "insufficient n" and row["p"] is None
        assert "insufficient n (2 &lt; 6)" in html or "insufficient n (2 < 6)" in html
        assert "No finding:</strong> too few runs" in summary_part
