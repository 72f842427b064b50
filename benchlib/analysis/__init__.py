"""Analysis layer: CPU normalization, statistics, figures, published references, report.

Everything here reads the tidy tables (benchlib.schema) and never measures.
"""
from __future__ import annotations

from pathlib import Path

# Papermill runs kernels at the project root, JupyterLab in notebooks/: paths
# anchored at the project root work in both.
from benchlib.config import project_root


def resolve(path: str | Path, root: Path | None = None) -> Path:
    """`path` itself if absolute, else anchored at the project root."""
    p = Path(path)
    return p if p.is_absolute() else (root or project_root()) / p


COMPARISONS_FILE = "comparisons.parquet"


def comparisons_path(out_dir: str | Path) -> Path:
    """Where 02_significance saves the comparison against the baseline and 03_figures reads it."""
    return resolve(out_dir) / COMPARISONS_FILE


def default_parameters(params_path: str | Path | None = None) -> dict:
    """The notebooks' parameters as `benchlib report` passes them: the analysis
    section of params.yaml (or ``params_path``) plus the pipeline's paths
    (relative to the project root)."""
    from benchlib.config import load_params
    params = load_params(resolve(params_path or "params.yaml"))
    return {**params.analysis.model_dump(mode="json"), "metrics_path": "data/processed/metrics.parquet",
            "runs_path": "data/processed/runs.parquet", "out_dir": "reports", "metrics_json": "",
            "reference_dir": "data/reference"}


def load_tables(runs_path: str | Path, metrics_path: str | Path):
    """(runs, metrics) read with their schemas and checked, paths anchored at the project root."""
    from benchlib.schema import check_metrics, read_metrics, read_runs
    runs, metrics = read_runs(resolve(runs_path)), read_metrics(resolve(metrics_path))
    check_metrics(metrics)
    return runs, metrics
