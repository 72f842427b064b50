"""Analysis layer: CPU normalization, statistics, figures, published references, report.

Everything here reads the tidy tables (benchlib.schema) and never measures.
"""
from __future__ import annotations

from pathlib import Path


def project_root(start: Path | None = None) -> Path:
    """The nearest directory at or above `start` (default: cwd) holding pyproject.toml.

    Papermill runs kernels at the repo root, JupyterLab in notebooks/: paths
    anchored here work in both.
    """
    here = (start or Path.cwd()).resolve()
    for d in (here, *here.parents):
        if (d / "pyproject.toml").is_file():
            return d
    raise FileNotFoundError(f"no pyproject.toml at or above {here}: not inside the project")


def resolve(path: str | Path, root: Path | None = None) -> Path:
    """`path` itself if absolute, else anchored at the project root."""
    p = Path(path)
    return p if p.is_absolute() else (root or project_root()) / p
