"""The benchlib command as a user runs it in a project."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.conftest import venv_env


def benchlib(project: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["benchlib", *args], cwd=project, env=venv_env(), capture_output=True, text=True, timeout=timeout
    )
