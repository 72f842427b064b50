"""`dvc repro` end to end in a temporary copy of the project, on the real lab:
collect -> parse -> report, then what re-runs when something changes."""

import json
import re
import shutil
import subprocess
import tempfile

import polars as pl
import pytest
import yaml

from benchlib.report import render as report
from benchlib.vocabulary import schema
from tests.conftest import REPO, TOLERANT, copy_project, require_root, venv_env

BLOCKS = 6  # the statistics floor: below it no 95 % median CI exists
# what the main command's `dvc repro` writes, beside the code and dvc.lock that say which inputs made it
OUTPUTS = ("dvc.lock", "data/processed", "data/analysis", "reports")


def dvc(project, *args):
    proc = subprocess.run(["dvc", *args], cwd=project, env=venv_env(), capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout + proc.stderr


def write_params(project, params):
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))


def main_command_is_current() -> bool:
    """Whether this checkout holds the outputs of the README's main command made by its own code and
    params: `dvc status` names no stage (CI runs the main command just before the tests)."""
    proc = subprocess.run(
        ["dvc", "status", "--json"], cwd=REPO, env=venv_env(), capture_output=True, text=True, timeout=300
    )
    return proc.returncode == 0 and proc.stdout.strip() == "{}"


@pytest.fixture(scope="module")
def repro(tmp_path_factory, lab_env):
    """The whole pipeline run once on the real lab, every scenario and test: the main command's own
    campaign, copied with its outputs, when this checkout holds it current (the tests then check what a
    user of the README gets, and no campaign is measured twice); else one short campaign of 6 blocks of
    1 s runs. It measures on the local lab (``lab_env``): its tests are of the lab tier, not the unit tier."""
    require_root()
    project = tmp_path_factory.mktemp("pipeline") / "project"
    copy_project(project)
    params = yaml.safe_load((project / "params.yaml").read_text())
    if main_command_is_current():
        campaign = f"data/raw/{params['experiment']['campaign']}"
        for name in (*OUTPUTS, campaign):
            src, dst = REPO / name, project / name
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copytree(src, dst, symlinks=True) if src.is_dir() else shutil.copy2(src, dst)
        dvc(project, "commit", "--force")  # the copy's own cache: what its dvc.lock names, hashed again
        return project, params
    params["experiment"].update(campaign="pipeline-test", repetitions=BLOCKS, cpu_trim_s=0.25, **TOLERANT)
    for test in params["tests"].values():
        test["duration_s"] = 1
    write_params(project, params)
    dvc(project, "repro")
    return project, params


def blocks(params) -> int:
    return params["experiment"]["repetitions"]


def profiled_each(params) -> int:
    return params["experiment"]["profile_runs"]


def disturbed_runs(runs: pl.DataFrame) -> pl.DataFrame:
    """The runs other processes of the machine took CPU from, measured again and still disturbed: a
    real outcome on a shared VM, counted and left out by the analysis, never a failure of the pipeline."""
    return runs.filter(pl.col("outcome") == "disturbed")


def test_repro_produces_tidy_tables_for_every_configuration(repro):
    project, params = repro
    runs = schema.read_runs(project / "data/processed/runs.parquet")
    metrics = schema.read_metrics(project / "data/processed/metrics.parquet")
    scenarios = params["environments"]["local-lab"]["scenarios"]
    per_config = {(s, t): n for s, t, n in runs.group_by("scenario", "test").len().iter_rows()}
    assert sorted(per_config) == sorted((s, t) for s in scenarios for t in params["tests"])
    assert set(per_config.values()) == {blocks(params)}
    disturbed = disturbed_runs(runs)
    assert set(runs["outcome"]) <= {"ok", "disturbed"}
    assert disturbed["failure_reason"].str.starts_with("disturbed: ").all()
    assert len(disturbed) <= len(runs) // 10, disturbed.select("run_id", "failure_reason")
    have = set(metrics.select("scenario", "test", "metric", "side").iter_rows())
    for s in scenarios:
        for side in ("client", "server"):
            assert (s, "tcp_stream_1", "cpu_busy_pct", side) in have
        assert (s, "tcp_stream_1", "throughput", "none") in have
        assert (s, "tcp_stream_n", "throughput", "none") in have
        assert (s, "tcp_rr", "transaction_rate", "none") in have
        assert (s, "tcp_rr", "latency_p99", "none") in have
        assert (s, "tcp_crr", "connection_rate", "none") in have
    assert set(metrics["campaign"]) == {params["experiment"]["campaign"]}
    assert metrics["run_id"].is_in(runs["run_id"].implode()).all() and runs["run_id"].is_unique().all()
    # the default campaign's profiled runs: profile_runs per configuration, in their own tables only
    profiled = schema.read(project / "data/processed/profile_runs.parquet", "profile_runs")
    per_profiled = {(s, t): n for s, t, n in profiled.group_by("scenario", "test").len().iter_rows()}
    assert per_profiled == {config: profiled_each(params) for config in per_config}
    assert set(profiled["outcome"]) <= {"ok", "disturbed"} and profiled["kernel_symbols"].all()
    assert (profiled["outcome"] == "ok").sum() >= len(profiled) * 0.9
    assert not runs["run_id"].str.contains("/p").any()


def test_report_labels_every_scenario_against_the_baseline(repro):
    project, params = repro
    sig = pl.read_csv(project / "reports/significance.csv")
    assert set(sig["baseline"]) == {"host"}
    assert set(sig["scenario"]) == {"veth-routed", "bridge", "vxlan"}
    assert set(sig["test"]) == set(params["tests"])
    # n: the scenario's runs, one per block, less those that stayed disturbed
    runs = schema.read_runs(project / "data/processed/runs.parquet")
    lost = disturbed_runs(runs).group_by("scenario", "test").len("lost")
    n = sig.join(lost, on=["scenario", "test"], how="left").with_columns(pl.col("lost").fill_null(0))
    assert (n["n"] == blocks(params) - n["lost"]).all(), n.select("scenario", "test", "n", "lost")
    assert sig["p"].is_between(0, 1).all() and sig["p_adj"].is_between(0, 1).all()
    ci = pl.col("delta_low", "delta_high")
    assert sig.select((ci.is_not_null() & ci.is_not_nan()).all()).row(0) == (True, True)
    # "inconclusive" is a real outcome at n = 6: Mann-Whitney and the interval can disagree on noisy runs.
    # a latency below the instrument's resolution reads in whole % and steps (resolution.annotate)
    labels = (
        r"^(~ within noise|negligible|inconclusive: .+|[+-]\d+\.\d % \[.*\] (better|worse)"
        r"|[+-]\d+ % \[.*\] (better|worse) \(± 1 step of .+\)|(better|worse) by .+ \(below resolution\)"
        r"|not resolved: 1 step of .+)$"
    )
    assert sig["verdict"].str.contains(labels).all(), sig.filter(~pl.col("verdict").str.contains(labels))
    metrics_json = json.loads((project / "reports/metrics.json").read_text())
    assert len(metrics_json["comparisons"]) == len(sig)
    for kind in ("html", "svg", "png"):
        assert (project / f"reports/figures/forest.{kind}").stat().st_size > 1000


def test_report_html_opens_offline_with_every_figure_drawn(repro):
    project, _ = repro
    page = project / "reports/report.html"
    html = page.read_text()
    divs = html.count('class="plotly-graph-div"')
    assert divs >= 15
    assert html.count("* plotly.js v") == 1
    assert not re.search(r"<script[^>]*\ssrc=[\"']?(https?:)?//", html, re.I)
    # A real browser, offline: plotly draws an <svg class="main-svg"> per figure once its JS has run.
    with tempfile.TemporaryDirectory() as profile:
        dom = subprocess.run(
            [
                "chromium",
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                f"--user-data-dir={profile}",
                "--virtual-time-budget=20000",
                "--dump-dom",
                page.as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=180,
        ).stdout
    drawn = len(re.findall(r'<div[^>]*class="[^"]*js-plotly-plot', dom))
    assert drawn == divs, f"{drawn} of {divs} figures drawn"
    assert dom.count('class="main-svg"') >= divs


def test_notebooks_give_the_same_result_from_the_notebooks_folder(repro, tmp_path):
    """JupyterLab runs kernels in notebooks/, papermill at the root: paths must work from both."""
    project, _ = repro
    import jupytext
    import papermill

    nb = jupytext.read(project / "notebooks/02_significance.py")
    papermill.execute_notebook(
        nb,
        str(tmp_path / "out.ipynb"),
        parameters={"out_dir": str(tmp_path)},
        cwd=str(project / "notebooks"),
        progress_bar=False,
        kernel_name="python3",
    )
    ours = pl.read_csv(tmp_path / "significance.csv")
    pipeline = pl.read_csv(project / "reports/significance.csv")
    assert ours.equals(pipeline)


def test_unchanged_repro_runs_nothing_and_forced_collect_measures_nothing(repro):
    project, params = repro
    out = dvc(project, "repro")
    for stage in ("collect@local-lab", "parse", "analyse", "report"):
        assert f"Stage '{stage}' didn't change, skipping" in out
    campaign = params["experiment"]["campaign"]
    raw = project / "data/raw" / campaign
    before = {p: p.stat().st_mtime_ns for p in raw.rglob("*") if p.is_file()}
    out = dvc(project, "repro", "--force", "--single-item", "collect@local-lab")
    configs = 16  # 4 scenarios x 4 tests, each run in every block and profiled profile_runs times
    assert f"all {configs * (blocks(params) + profiled_each(params))} runs of campaign {campaign} are recorded" in out
    assert {p: p.stat().st_mtime_ns for p in raw.rglob("*") if p.is_file()} == before


def test_an_analysis_parameter_reruns_only_the_analysis_and_the_report(repro):
    """What DVC would rerun (`--dry`): the analysis, and so the report, which reads the analysis; not
    collect or parse. The first repro showed that the stages themselves run: a real rerun would spend
    a minute and a half on the same graph."""
    project, params = repro
    analysed = (project / "reports/metrics.json").read_bytes()
    params["analysis"]["alpha"] = 0.01
    write_params(project, params)
    out = dvc(project, "repro", "--dry")
    assert "Stage 'collect@local-lab' didn't change, skipping" in out
    assert "Stage 'parse' didn't change, skipping" in out
    assert "Running stage 'analyse'" in out, out
    stages = yaml.safe_load((project / "dvc.yaml").read_text())["stages"]
    assert "data/analysis" in stages["analyse"]["outs"] and "data/analysis" in stages["report"]["deps"]
    assert (project / "reports/metrics.json").read_bytes() == analysed  # a dry run runs nothing


def test_report_notebooks_list_matches_the_pipeline():
    from tests.conftest import REPO

    stage = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]["report"]
    assert [d for d in stage["deps"] if d.startswith("notebooks/")] == [f"notebooks/{n}" for n in report.NOTEBOOKS]
