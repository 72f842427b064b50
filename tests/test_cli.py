"""`benchlib --help` and every subcommand's help explain themselves."""
import re
import subprocess

import pytest

from benchlib import config
from tests.conftest import REPO, venv_env


@pytest.mark.parametrize("args, expected", [
    ([], "dvc repro"),
    (["validate"], "Touches nothing"),
    (["collect"], "resumes"),
    (["parse"], "checksums"),
    (["lab"], "clean"),
    (["lab", "clean"], "no longer running"),
    (["lab", "probe"], "kernel"),
])
def test_help(args, expected):
    proc = subprocess.run(["benchlib", *args, "--help"], cwd=REPO, env=venv_env(), capture_output=True, text=True)
    assert proc.returncode == 0
    assert expected in " ".join(proc.stdout.split())


def test_validate_prints_the_plan():
    proc = subprocess.run(["benchlib", "validate"], cwd=REPO, env=venv_env(), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    blocks = config.load_params(REPO / "params.yaml").experiment.repetitions
    assert "local-lab: 4 scenarios" in proc.stdout and f"16 configurations x {blocks} blocks = {16 * blocks} runs" in proc.stdout
    assert f"= {16 * blocks} runs + 16 profiled" in proc.stdout  # profile_runs: 1


def test_bad_params_exit_2_with_the_key(tmp_path):
    bad = tmp_path / "params.yaml"
    text = (REPO / "params.yaml").read_text()
    bad.write_text(re.sub(r"repetitions: \d+", "repetitions: -1", text, count=1))
    proc = subprocess.run(["benchlib", "--params", str(bad), "validate"], cwd=REPO, env=venv_env(),
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "experiment.repetitions" in proc.stderr


def test_a_command_outside_a_project_says_which_project_it_uses(tmp_path):
    proc = subprocess.run(["benchlib", "validate"], cwd=tmp_path, env=venv_env(), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert f"no project (dvc.yaml) at or above {tmp_path.resolve()}: using the project at {REPO}" in proc.stderr
    inside = subprocess.run(["benchlib", "validate"], cwd=REPO / "notebooks", env=venv_env(), capture_output=True,
                            text=True, timeout=300)
    assert inside.returncode == 0 and "no project" not in inside.stderr, inside.stderr


def test_an_ascii_only_terminal_gets_one_line_not_a_traceback():
    env = {**venv_env(), "PYTHONIOENCODING": "ascii"}
    proc = subprocess.run(["benchlib", "--params", "/nonexistent/päräms–µs.yaml", "validate"], cwd=REPO, env=env,
                          capture_output=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.decode("ascii").splitlines() == ["benchlib: error: /nonexistent/p?r?ms??s.yaml: file not found"]


def test_version_names_the_package_and_the_git_revision():
    proc = subprocess.run(["benchlib", "--version"], cwd=REPO, env=venv_env(), capture_output=True, text=True)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    assert proc.returncode == 0, proc.stderr
    assert re.fullmatch(rf"benchlib \d+\.\d+\.\d+ \(git {head}(-dirty)?\)\n", proc.stdout), proc.stdout


@pytest.mark.parametrize("preset", ["pipelines/local-lab/params-mesh-envoy.yaml"])
def test_params_works_before_or_after_the_command(preset):
    runs = [subprocess.run(["benchlib", *argv], cwd=REPO, env=venv_env(), capture_output=True, text=True)
            for argv in (["--params", preset, "validate"], ["validate", "--params", preset])]
    assert [r.returncode for r in runs] == [0, 0], [r.stderr for r in runs]
    assert runs[0].stdout == runs[1].stdout and "envoy-hbone" in runs[0].stdout
    missing = subprocess.run(["benchlib", "validate", "--params", "no-such.yaml"], cwd=REPO, env=venv_env(),
                             capture_output=True, text=True)
    assert missing.returncode == 2 and "no-such.yaml" in missing.stderr


@pytest.mark.slow  # analyses a whole campaign's tables
def test_summary_names_the_findings_and_the_report_or_says_what_is_missing(tmp_path):
    import sys
    sys.path.insert(0, str(REPO / "tests" / "analysis"))
    from analysis_tables import analysed

    from benchlib.analysis import load_tables
    fixture = REPO / "tests" / "fixtures" / "tidy" / "lab-default-002"
    analysis, _ = analysed(*load_tables(fixture / "runs.parquet", fixture / "metrics.parquet"), tmp_path)
    proc = subprocess.run(["benchlib", "summary", "--analysis", str(analysis), "--report", str(tmp_path / "r.html")],
                          cwd=REPO, env=venv_env(), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("Campaign lab-default-002 in local-lab:") and "**" not in proc.stdout
    assert re.match(r"\d+ of \d+ primary comparisons are significant", lines[1])
    assert any(re.match(r"  - \S+ vs host, .*: [+-]\d", line) for line in lines[2:])
    assert lines[-1] == f"Report: {tmp_path / 'r.html'} (not rendered yet: benchlib report)"
    missing = subprocess.run(["benchlib", "summary", "--analysis", str(tmp_path / "none")], cwd=REPO,
                             env=venv_env(), capture_output=True, text=True)
    assert missing.returncode == 2 and "benchlib analyse" in missing.stderr
