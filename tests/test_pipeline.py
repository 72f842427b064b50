"""`dvc repro` end to end in a temporary copy of the project, on the real lab."""
import subprocess

import pandas as pd
import pytest
import yaml

from benchlib import schema
from tests.conftest import require_root, venv_env


def dvc(project, *args):
    proc = subprocess.run(["dvc", *args], cwd=project, env=venv_env(), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def repro(tmp_path_factory):
    """One short campaign through the whole pipeline: every scenario and test, one block, 2 s runs."""
    require_root()
    from tests.conftest import project_copy as _copy  # fixture body reused with a module-scoped path
    project = _copy.__wrapped__(tmp_path_factory.mktemp("pipeline"))
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["experiment"].update(campaign="pipeline-test", repetitions=1, cpu_trim_s=0.3)
    for test in params["tests"].values():
        test["duration_s"] = 2
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    out = dvc(project, "repro")
    return project, params, out


def test_repro_produces_tidy_tables_for_every_configuration(repro):
    project, params, out = repro
    runs = schema.read_runs(project / "data/processed/runs.parquet")
    metrics = schema.read_metrics(project / "data/processed/metrics.parquet")
    scenarios = params["environments"]["local-lab"]["scenarios"]
    assert sorted(set(zip(runs.scenario, runs.test))) == sorted((s, t) for s in scenarios for t in params["tests"])
    assert set(runs["outcome"]) == {"ok"}
    have = set(zip(metrics.scenario, metrics.test, metrics.metric, metrics.side))
    for s in scenarios:
        for side in ("client", "server"):
            assert (s, "tcp_stream_1", "cpu_busy_pct", side) in have
        assert (s, "tcp_stream_1", "throughput", "none") in have
        assert (s, "tcp_stream_n", "throughput", "none") in have
        assert (s, "tcp_rr", "transaction_rate", "none") in have
        assert (s, "tcp_rr", "latency_p99", "none") in have
        assert (s, "tcp_crr", "connection_rate", "none") in have
    assert set(metrics["campaign"]) == {"pipeline-test"}
    assert (project / "dvc.lock").exists()
    n = metrics[(metrics.test == "tcp_stream_n") & (metrics.metric == "throughput")]
    assert isinstance(n, pd.DataFrame) and (n["value"] > 0).all()


def test_unchanged_repro_runs_nothing_and_forced_collect_measures_nothing(repro):
    project, _, _ = repro
    out = dvc(project, "repro")
    assert "Stage 'collect@local-lab' didn't change, skipping" in out
    assert "Stage 'parse' didn't change, skipping" in out
    raw = project / "data/raw/pipeline-test"
    before = {p: p.stat().st_mtime_ns for p in raw.rglob("*") if p.is_file()}
    out = dvc(project, "repro", "--force", "--single-item", "collect@local-lab")
    assert "all 16 runs of campaign pipeline-test are recorded" in out
    assert {p: p.stat().st_mtime_ns for p in raw.rglob("*") if p.is_file()} == before


def test_an_analysis_parameter_never_invalidates_collection(repro):
    project, params, _ = repro
    params["analysis"]["alpha"] = 0.01
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    status = dvc(project, "status")
    assert "collect@local-lab" not in status and "parse:" not in status
