"""A copy of the project as a git repository, commands run in it."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.conftest import venv_env


def run(project: Path, *argv: str, timeout: float = 600) -> str:
    done = subprocess.run(argv, cwd=project, env=venv_env(), capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(argv)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def committed(project: Path) -> None:
    """The copy as a git repository with one commit: dvc experiments start from a commit."""
    run(project, "git", "config", "user.name", "benchlib tests")
    run(project, "git", "config", "user.email", "tests@benchlib.invalid")
    run(project, "git", "add", "-A")
    run(project, "git", "commit", "-q", "-m", "the project")
