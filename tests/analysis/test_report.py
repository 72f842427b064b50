"""Report: notebooks run headless on tidy tables and render one offline HTML page."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import polars as pl
import pytest
from figure_colours import by_scenario, in_notebooks

from benchlib.analysis import project_root, resolve, stats
from benchlib.report import colours, export, method, publish, render as report
from tests.conftest import REPO, copy_project, venv_env
from tests.support.analysis_tables import analysed

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
    setup = method.setup_table(runs).row(0, named=True)
    assert setup["kernel"] == "6.1.0-test" and setup["tools"] == "netperf 2.7.0"
    assert setup["nodes_share_kernel"] == "true"
    assert "client and server nodes run on one kernel" in method.shared_kernel_note(runs)
    assert method.shared_kernel_note(runs.with_columns(nodes_share_kernel=pl.lit(None, pl.Boolean))) == ""
    by_test = {r["test"]: r for r in method.method_table(runs).iter_rows(named=True)}
    assert by_test["tcp_crr"]["failed"] == 1 and by_test["tcp_crr"]["runs_per_scenario"] == "8-9"
    assert by_test["tcp_rr"]["blocks"] == 8


def test_caveats_list_flags_and_failures(lab_tables):
    runs, metrics = lab_tables
    flagged, failed = method.caveats(stats.summarize(metrics, runs), runs)
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
    assert "figures.show(" not in html  # code hidden
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
    from tests.support.analysis_tables import make_tables

    if case in ("one scenario", "no baseline"):
        from tests.support.analysis_tables import degenerate

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
    contents = html[html.index('aria-label="Contents"') :]
    contents = contents[: contents.index("</nav>")]
    # no claim of a published study measured: its section is one line, without their tables
    assert "Published reference</a>" in contents and "Service scaling" not in html and "Ours next to" not in html
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


def _tree(directory: Path) -> dict[str, bytes]:
    """Every file below ``directory`` (hidden ones included) by its path there, but a staging directory's."""
    return {
        str(p.relative_to(directory)): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file() and not p.relative_to(directory).parts[0].startswith(f".{publish.STAGING}.tmp-")
    }


def _descendants(pid: int) -> list[int]:
    children = [int(c) for task in Path(f"/proc/{pid}/task").glob("*") for c in (task / "children").read_text().split()]
    return children + [d for c in children for d in _descendants(c)]


def _await_exit(pids: list[int], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while (alive := [p for p in pids if Path(f"/proc/{p}").exists()]) and time.monotonic() < deadline:
        time.sleep(0.2)
    for p in alive:  # a kernel's own children (Chromium) if they outlived it
        os.kill(p, signal.SIGKILL)


def test_a_report_killed_part_way_leaves_the_previous_one_and_the_next_one_replaces_it(default_report, tmp_path):
    """SIGKILL of `benchlib report` once its first notebook is being written, into an out dir holding a
    whole report (the session's): every file of that report stays byte for byte. The next report removes
    what the killed one left, puts a whole new report in its place, and its files name no path of the
    checkout (two clones in different folders write the same paths)."""
    project = copy_project(tmp_path / "project")
    # its analysis in data/analysis, which `benchlib report` reads by default
    shutil.copytree(default_report["out"].parent / "data", project / "data", dirs_exist_ok=True)
    reports = shutil.copytree(default_report["out"], project / "reports")
    before = _tree(reports)
    command = [str(REPO / ".venv/bin/benchlib"), "report"]
    killed = subprocess.Popen(command, cwd=project, env=venv_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    staging = reports / f".{publish.STAGING}.tmp-{killed.pid}"
    deadline = time.monotonic() + 600
    while not list(staging.glob("notebooks/*.ipynb")) and killed.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert killed.poll() is None, killed.communicate()
    kernels = _descendants(killed.pid)
    killed.kill()
    killed.communicate()
    _await_exit(kernels)
    assert _tree(reports) == before
    assert sorted(p.name for p in reports.iterdir() if p.name.startswith(".")) == [staging.name]

    out = subprocess.run(command, cwd=project, env=venv_env(), capture_output=True, text=True, timeout=1200)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout == f"report: {reports / 'report.html'}\n"
    after = _tree(reports)
    assert not [p for p in reports.iterdir() if ".tmp-" in p.name]
    assert sorted(after) == sorted(before)  # the same campaign's report: every file, none of the killed one's
    assert after["notebooks/00_summary.ipynb"] != before["notebooks/00_summary.ipynb"]  # executed anew
    assert not [name for name, data in after.items() if str(project).encode() in data]
    summary = after["notebooks/00_summary.ipynb"].decode()
    assert (
        '"out_dir = \\"reports\\"\\n"' in summary and '"output_path": "reports/notebooks/00_summary.ipynb"' in summary
    )


def _write(files: dict[str, str], directory: Path) -> None:
    for name, text in files.items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_text(text)


def _bytes(files: dict[str, str]) -> dict[str, bytes]:
    return {name: text.encode() for name, text in sorted(files.items())}


# a previous report in the out dir, with what is not the report's own (the user's figure, another
# command's notebook, analyse's metrics.json), and the next report as staged
PREVIOUS = {
    "report.html": "previous page",
    "figures/a.svg": "previous figure",
    f"figures/{export.WRITTEN}": "a.svg\n",
    "figures/mine.svg": "the user's own",
    "notebooks/00_summary.ipynb": "previous notebook",
    "notebooks/compare-a-vs-b.ipynb": "benchlib compare's",
    "metrics.json": "benchlib analyse's",
}
NEW = {
    "report.html": "new page",
    "figures/b.svg": "new figure",
    f"figures/{export.WRITTEN}": "b.svg\n",
    "notebooks/00_summary.ipynb": "new notebook",
    "significance.csv": "new table",
}
KEPT = {"figures/mine.svg": "the user's own", "notebooks/compare-a-vs-b.ipynb": "benchlib compare's"}
RENAMES = 7  # report.html, figures and notebooks: the previous one aside, the new one in; significance.csv in


@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("at", range(RENAMES))
def test_an_interrupted_swap_puts_the_previous_report_back_and_the_next_one_swaps_whole(
    tmp_path, monkeypatch, at, when
):
    """A report's files go into the out dir by renames: an interruption (raised) before or right after any
    one of them leaves the previous report as it was and the staged one whole; the next swap replaces the
    report's own files and keeps the user's and other commands' ones."""
    out = tmp_path / "reports"
    _write(PREVIOUS, out)
    staging = publish.staging_dir(out)
    _write(NEW, staging)
    before = _tree(out)
    rename, calls = os.rename, []

    def interrupted(src, dst):
        calls.append(src)
        if len(calls) == at + 1 and when == "before":
            raise KeyboardInterrupt
        rename(src, dst)
        if len(calls) == at + 1:
            raise KeyboardInterrupt

    monkeypatch.setattr(os, "rename", interrupted)
    with pytest.raises(KeyboardInterrupt):
        publish.swap_in(staging, out)
    monkeypatch.undo()
    assert _tree(out) == before
    assert [p.name for p in out.iterdir() if ".tmp-" in p.name] == [staging.name]
    assert _tree(staging) == _bytes({**NEW, **KEPT})
    publish.swap_in(staging, out)
    assert _tree(out) == _bytes({**NEW, **KEPT, "metrics.json": "benchlib analyse's"})
    assert not [p for p in out.iterdir() if ".tmp-" in p.name]


def test_a_file_where_the_report_puts_a_folder_is_refused_not_removed(tmp_path):
    out = tmp_path / "reports"
    _write({"figures": "not a directory"}, out)
    staging = publish.staging_dir(out)
    _write(NEW, staging)
    with pytest.raises(NotADirectoryError) as refused:
        publish.swap_in(staging, out)
    assert refused.value.filename == str(out / "figures")
    assert _tree(out) == _bytes({"figures": "not a directory"}) and _tree(staging) == _bytes(NEW)


def test_a_new_staging_directory_removes_a_killed_reports_but_not_a_running_ones(tmp_path):
    out = tmp_path / "reports"
    dead = subprocess.Popen(["true"])
    dead.wait()
    running = subprocess.Popen(["sleep", "60"])
    try:
        left = {
            f".{publish.STAGING}.tmp-{pid}{what}": pid for pid in (dead.pid, running.pid) for what in ("", "-previous")
        }
        for name in left:
            _write({"notebooks/00_summary.ipynb": "half written"}, out / name)
        staging = publish.staging_dir(out)
    finally:
        running.kill()
        running.wait()
    assert staging == out / f".{publish.STAGING}.tmp-{os.getpid()}" and not list(staging.iterdir())
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [staging.name, *(name for name, pid in left.items() if pid == running.pid)]
    )


def test_the_pages_of_a_report_link_nowhere_but_http_and_keep_their_scripts(default_report):
    """No link or image target but http(s), anchors and files beside the page in report.html and the blog
    pages (escape.links, behind escape.page), and plotly.js inlined whole."""
    from plotly.offline import get_plotlyjs

    from tests.support.hostile import other_schemes

    html = default_report["html"].read_text()
    assert get_plotlyjs() in html
    for page in (html, *((default_report["out"] / "blog" / f"{p}.html").read_text() for p in ("post", "index"))):
        assert not other_schemes(page), other_schemes(page)[:5]
