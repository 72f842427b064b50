"""The analysis stage: from the tidy tables and the analysis settings to every table the report shows.

`benchlib analyse` runs `run` once and `write`s its tables to data/analysis/; the notebooks `load`
them and only present. `benchlib compare` uses the same settings model (`targets`). In JupyterLab a
cell can re-run the analysis with changed settings:

    a = analyse.load("data/analysis")
    strict = analyse.run(a.runs, a.metrics, a.settings.model_copy(update={"alpha": 0.01}))
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, fields
from pathlib import Path

import polars as pl

from benchlib import limits, schema
from benchlib.config import Analysis as Settings
from benchlib.errors import BenchlibError, SchemaError

from . import mesh, normalize, profiles, reference, resolution, resolve, saturation, stats

ANALYSIS_DIR = "data/analysis"
SETTINGS_FILE = "settings.json"  # the settings analysed with, and which tidy tables


class AnalysisError(BenchlibError, ValueError):
    """The analysis tables are missing or do not belong together; the message names the file."""


def targets(settings: Settings) -> dict[str, float]:
    """The work rates CPU is normalized to, as normalize's keyword arguments."""
    return {
        "target_gbps": settings.cpu_target_gbps,
        "per_transactions": settings.rr_per_transactions,
        "per_connections": settings.crr_per_connections,
        "per_requests": settings.http_per_requests,
    }


def families(comparisons: pl.DataFrame, alpha: float) -> pl.DataFrame:
    """Per family of comparisons (primary first): its correction, size, significant count, interval level
    and metrics."""
    order = {f: i for i, f in enumerate(stats.FAMILY_ORDER)}
    return (
        comparisons.group_by("family", "correction", maintain_order=True)
        .agg(
            comparisons=pl.len(),
            significant=(pl.col("p_adj") < alpha).sum(),
            interval_level_pct=100 * pl.col("ci_level").first(),
            metrics=pl.col("metric").unique().sort().str.join(", "),
        )
        .sort(pl.col("family").replace_strict(order, default=len(order)))
    )


@dataclass(frozen=True)
class Result:
    """One campaign analysed: its inputs, the settings, and the tables derived from them."""

    settings: Settings
    runs: pl.DataFrame
    metrics: pl.DataFrame
    values: pl.DataFrame  # every metric per run, plus CPU at the target work rates
    summary: pl.DataFrame  # per configuration of a compared metric: median, CI, flags
    summary_all: pl.DataFrame  # the same for every metric (figures show metrics outside the families)
    comparisons: pl.DataFrame  # against the baseline and the contrasts, corrected within families, with the
    # instrument's resolution (resolution.annotate) and the CPU limit of either side (saturation.annotate)
    families: pl.DataFrame
    mesh_comparisons: pl.DataFrame  # proxy-hop percentiles and proxy CPU (empty without a mesh scenario)
    reference: pl.DataFrame  # published claims beside ours
    # CPU profiles of the profiled runs (profiles.py); empty without them
    profile_method: pl.DataFrame = field(default_factory=lambda: profiles.empty("profile_method"))
    profile_categories: pl.DataFrame = field(default_factory=lambda: profiles.empty("profile_categories"))
    profile_frames: pl.DataFrame = field(default_factory=lambda: profiles.empty("profile_frames"))
    profile_differences: pl.DataFrame = field(default_factory=lambda: profiles.empty("profile_differences"))
    profile_explanations: pl.DataFrame = field(default_factory=lambda: profiles.empty("profile_explanations"))

    def metrics_json(self) -> dict:
        """reports/metrics.json: the settings that decide verdicts, then the headline numbers."""
        s = self.settings
        return {
            "baseline": s.baseline,
            "alpha": s.alpha,
            "correction": s.correction,
            "cpu_target_gbps": s.cpu_target_gbps,
            **stats.to_metrics_dict(self.summary, self.comparisons, s.baseline),
        }


TABLES = [f.name for f in fields(Result) if f.name not in ("settings", "runs", "metrics")]


def compare(compared: pl.DataFrame, runs: pl.DataFrame, settings: Settings) -> pl.DataFrame:
    """The compared values (stats.compared_values) against the baseline and the contrasts, corrected
    within families, as ``settings`` say."""
    s = settings
    return stats.compare(
        compared,
        runs,
        baseline=s.baseline,
        alpha=s.alpha,
        correction=s.correction,
        noise_band_pct=s.noise_band_pct,
        seed=s.seed,
        contrasts=s.contrasts,
    )


def run(
    runs: pl.DataFrame,
    metrics: pl.DataFrame,
    settings: Settings,
    reference_dir: str | Path = reference.REFERENCE_DIR,
    profile_stacks: pl.DataFrame | None = None,
    profile_runs: pl.DataFrame | None = None,
) -> Result:
    """Analyse one campaign's tidy tables with ``settings`` (the analysis section of params.yaml); with
    the profiled runs' tables (profiles.parquet, profile_runs.parquet), their CPU profiles too."""
    s = settings
    values = normalize.with_cpu_at_target(metrics, runs, **targets(s))
    compared = stats.compared_values(values, runs, s.family_metrics)
    # what the instrument cannot resolve, and where a side ran at its CPU limit, stated on each comparison
    comparisons = saturation.annotate(resolution.annotate(compare(compared, runs, s)), runs, values)
    mesh_comparisons = (
        resolution.annotate(mesh.comparisons(values, runs, s.baseline, s.alpha, s.noise_band_pct, s.seed, s.contrasts))
        if mesh.has_mesh(runs)
        else comparisons.clear()
    )
    published = reference.side_by_side(
        metrics,
        runs,
        reference.published_changes(reference_dir),
        alpha=s.alpha,
        correction=s.correction,
        noise_band_pct=s.noise_band_pct,
        seed=s.seed,
    )
    return Result(
        settings=s,
        runs=runs,
        metrics=metrics,
        values=values,
        summary=resolution.annotate_summary(stats.summarize(compared, runs, alpha=s.alpha)),
        summary_all=resolution.annotate_summary(stats.summarize(values, runs, alpha=s.alpha)),
        comparisons=comparisons,
        families=families(comparisons, s.alpha),
        mesh_comparisons=mesh_comparisons,
        reference=published,
        **profiles.analyse(profile_stacks, profile_runs, s.baseline),
    )


def write(result: Result, directory: str | Path, runs_path: str | Path, metrics_path: str | Path) -> Path:
    """The derived tables as <directory>/<table>.parquet, and settings.json naming the settings and the
    tidy tables they came from (paths as given: relative ones stay anchored at the project root).
    Each file is written beside its place and moved there, so a failure leaves the old one whole."""
    out = resolve(directory)
    out.mkdir(parents=True, exist_ok=True)
    staged = []
    for name in TABLES:
        tmp = out / f".{name}.parquet.tmp-{os.getpid()}"
        getattr(result, name).write_parquet(tmp)
        staged.append((tmp, out / f"{name}.parquet"))
    tmp = out / f".{SETTINGS_FILE}.tmp-{os.getpid()}"
    tmp.write_text(
        json.dumps(
            {
                "settings": result.settings.model_dump(mode="json"),
                "runs_path": str(runs_path),
                "metrics_path": str(metrics_path),
            },
            indent=1,
        )
    )
    staged.append((tmp, out / SETTINGS_FILE))
    for src, dst in staged:
        os.replace(src, dst)
    return out


def load(directory: str | Path = ANALYSIS_DIR) -> Result:
    """The analysis `write` saved in ``directory``, with the tidy tables it was made from."""
    d = resolve(directory)
    try:
        saved = json.loads(limits.read_file(d / SETTINGS_FILE, limits.ANALYSIS_FILE_BYTES, SchemaError))
        settings = Settings.model_validate(saved["settings"])
        # an analysis from before profiles has no profile tables: empty ones
        tables = {
            name: pl.read_parquet(d / f"{name}.parquet")
            if name not in profiles.EMPTY or (d / f"{name}.parquet").exists()
            else profiles.empty(name)
            for name in TABLES
        }
    except (OSError, ValueError, KeyError, pl.exceptions.PolarsError) as exc:
        raise AnalysisError(
            f"{d}: no complete analysis ({type(exc).__name__}: {' '.join(str(exc).split())[:200]}); "
            "run `benchlib analyse` (or `dvc repro`)"
        ) from None
    runs, metrics = schema.read_runs(resolve(saved["runs_path"])), schema.read_metrics(resolve(saved["metrics_path"]))
    return Result(settings=settings, runs=runs, metrics=metrics, **tables)
