"""Where the project is: the directory holding dvc.yaml, and its environments' folders."""

from __future__ import annotations

from pathlib import Path


def project_root() -> Path:
    """The project a command or notebook works on (find_project)."""
    return find_project()[0]


def find_project() -> tuple[Path, bool]:
    """(root, found): the nearest directory holding dvc.yaml at or above the working directory
    (dvc and papermill run at the root, JupyterLab runs notebooks in notebooks/), found True; else
    the checkout this package lives in, found False (a command says so: it may not be the
    project the user meant)."""
    here = Path.cwd().resolve()
    for d in (here, *here.parents):
        if (d / "dvc.yaml").exists():
            return d, True
    return Path(__file__).resolve().parents[2], False


def environment_dir(name: str) -> Path:
    return project_root() / "pipelines" / name
