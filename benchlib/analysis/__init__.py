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


def default_parameters(params_path: str | Path | None = None) -> dict:
    """The notebooks' parameters as `benchlib report` passes them: the analysis
    section of params.yaml (or ``params_path``) plus the pipeline's paths
    (relative to the project root)."""
    from benchlib.config import load_params
    params = load_params(resolve(params_path or "params.yaml"))
    return {**params.analysis.model_dump(mode="json"), "metrics_path": "data/processed/metrics.parquet",
            "runs_path": "data/processed/runs.parquet", "out_dir": "reports",
            "reference_dir": "data/reference"}


def load_tables(runs_path: str | Path, metrics_path: str | Path):
    """(runs, metrics) read with their schemas and checked, paths anchored at the project root."""
    from benchlib.schema import check_metrics, read_metrics, read_runs
    runs, metrics = read_runs(resolve(runs_path)), read_metrics(resolve(metrics_path))
    check_metrics(metrics)
    return runs, metrics
