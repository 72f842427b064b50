"""Analysis layer: CPU normalization, statistics, published references, CPU profiles, as numbers and
category labels (benchlib.report presents them).

Everything here reads the tidy tables (benchlib.vocabulary.schema) and never measures.
"""

from __future__ import annotations

from pathlib import Path

# Papermill runs kernels at the project root, JupyterLab in notebooks/: paths
# anchored at the project root work in both.
from benchlib.settings.project import project_root


def resolve(path: str | Path, root: Path | None = None) -> Path:
    """`path` itself if absolute, else anchored at the project root."""
    p = Path(path)
    return p if p.is_absolute() else (root or project_root()) / p


def load_tables(runs_path: str | Path, metrics_path: str | Path):
    """(runs, metrics) read with their schemas and checked, paths anchored at the project root."""
    from benchlib.vocabulary.schema import check_metrics, read_metrics, read_runs

    runs, metrics = read_runs(resolve(runs_path)), read_metrics(resolve(metrics_path))
    check_metrics(metrics)
    return runs, metrics


def scan_tables(runs_path: str | Path, metrics_path: str | Path):
    """(runs, metrics) as `load_tables` checks them, the runs read and the metrics a lazy scan (the
    largest table, a row per run and metric: `analyse.run` reads only the parts each step needs)."""
    from benchlib.vocabulary.schema import read_runs, scan

    return read_runs(resolve(runs_path)), scan(resolve(metrics_path), "metrics")
