"""`benchlib --help` and every subcommand's help explain themselves."""
import subprocess

import pytest

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
    assert "local-lab: 4 scenarios" in proc.stdout and "128 runs" in proc.stdout


def test_bad_params_exit_2_with_the_key(tmp_path):
    bad = tmp_path / "params.yaml"
    bad.write_text((REPO / "params.yaml").read_text().replace("repetitions: 8", "repetitions: -1"))
    proc = subprocess.run(["benchlib", "--params", str(bad), "validate"], cwd=REPO, env=venv_env(),
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "experiment.repetitions" in proc.stderr
