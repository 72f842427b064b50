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


def test_bad_params_exit_2_with_the_key(tmp_path):
    bad = tmp_path / "params.yaml"
    text = (REPO / "params.yaml").read_text()
    bad.write_text(re.sub(r"repetitions: \d+", "repetitions: -1", text, count=1))
    proc = subprocess.run(["benchlib", "--params", str(bad), "validate"], cwd=REPO, env=venv_env(),
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "experiment.repetitions" in proc.stderr
