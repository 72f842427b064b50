"""The analysis stage: from the tidy tables and the analysis settings to every table the report shows.

`benchlib analyse` runs `run` once and `write`s its tables to data/analysis/; the notebooks `load`
them and only present. `benchlib compare` uses the same settings model (`targets`). In JupyterLab a
cell can re-run the analysis with changed settings:

    a = analyse.load("data/analysis")
    strict = analyse.run(a.runs, a.metrics, a.settings.model_copy(update={"alpha": 0.01}))
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field, fields
from pathlib import Path

import polars as pl

from benchlib.base import files, limits
from benchlib.base.errors import BenchlibError, SchemaError
from benchlib.settings.analysis import Analysis as Settings
from benchlib.settings.campaign import Experiment
from benchlib.vocabulary import schema

from . import (
    machines,
    mesh,
    normalize,
    profile_contrasts,
    profiles,
    reference,
    resolution,
    resolve,
    saturation,
    sequential,
    stats,
)

ANALYSIS_DIR = "data/analysis"
SETTINGS_FILE = "settings.json"  # the settings analysed with, which tidy tables, and the digests of the set
# the tidy tables `benchlib parse` writes, which `benchlib analyse` reads
PROCESSED = {
    name: f"data/processed/{name}.parquet" for name in ("runs", "metrics", "profile_runs", "profiles", "profile_bpf")
}


class AnalysisError(BenchlibError, ValueError):
    """The analysis tables are missing or do not belong together; the message names the file."""


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
    # analysed from a scan (`scan_metrics`), these two are LazyFrames over the metrics file: never held whole
    metrics: pl.DataFrame | pl.LazyFrame
    values: pl.DataFrame | pl.LazyFrame  # every metric per run, plus CPU at the target work rates
    # per configuration of a compared metric: median, CI, flags; a CPU cost's work rate (normalize.WORK_COLUMNS)
    summary: pl.DataFrame
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
    profile_no_symbols: pl.DataFrame = field(default_factory=lambda: profiles.empty("profile_no_symbols"))
    profile_disturbed: pl.DataFrame = field(default_factory=lambda: profiles.empty("profile_disturbed"))
    profile_bpf: pl.DataFrame = field(default_factory=lambda: profiles.empty("profile_bpf"))
    # each scenario's CPU per unit against the baseline's, with its interval across the profiled runs and
    # the check against the measured rate, and where it went, by category and frame (profile_contrasts.py)
    profile_attribution: pl.DataFrame = field(
        default_factory=lambda: pl.DataFrame(schema=profile_contrasts.ATTRIBUTION_SCHEMA)
    )
    profile_contrasts: pl.DataFrame = field(
        default_factory=lambda: pl.DataFrame(schema=profile_contrasts.CONTRASTS_SCHEMA)
    )
    # a campaign run until precise: per primary comparison, the target, the look it stopped at and whether
    # it met the target (sequential.py); empty otherwise
    precision: pl.DataFrame = field(default_factory=lambda: sequential.precision(pl.DataFrame(), pl.DataFrame(), None))

    def profile_tables(self) -> dict[str, pl.DataFrame]:
        """The profile tables by name, as the report's sentences read them (report.profiles.explanations)."""
        return {name: getattr(self, name) for name in (*profiles.EMPTY, "profile_contrasts", "profile_attribution")}

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


def compare(compared: pl.DataFrame | pl.LazyFrame, runs: pl.DataFrame, settings: Settings) -> pl.DataFrame:
    """The compared values (stats.compared_values) against the baseline and the contrasts, corrected
    within families, as ``settings`` say."""
    return stats.compare_as(compared, runs, settings)


def run(
    runs: pl.DataFrame,
    metrics: pl.DataFrame | pl.LazyFrame,
    settings: Settings,
    reference_dir: str | Path = reference.REFERENCE_DIR,
    profile_stacks: pl.DataFrame | None = None,
    profile_runs: pl.DataFrame | None = None,
    experiment: Experiment | None = None,
    profile_bpf: pl.DataFrame | None = None,
) -> Result:
    """Analyse one campaign's tidy tables with ``settings`` (the analysis section of params.yaml); with
    the profiled runs' tables (profiles.parquet, profile_runs.parquet, profile_bpf.parquet), their CPU
    profiles and BPF programs' counters too.

    ``metrics`` may be a scan (`scan_metrics`): each step then reads only the rows and columns it
    needs, one (metric, side) at a time, and memory grows with the configurations, not the runs; the
    tables are the same as from the table in memory.

    A campaign run until precise (``experiment``.precision) is analysed at the alpha its stopping look
    spent (sequential.spent_alpha): the settings returned carry that alpha."""
    s = settings
    if experiment is not None and experiment.precision is not None:
        s = s.model_copy(update={"alpha": sequential.spent_alpha(experiment, s.alpha, runs)})
    rates = normalize.work_rates(s)
    values = normalize.with_cpu_at_target(metrics, runs, **rates)
    work = normalize.config_work(values, runs, normalize.work_targets(**rates))
    compared = stats.compared_values(values, runs, s.family_metrics)
    # what the instrument cannot resolve, and where a side ran at its CPU limit, stated on each comparison
    utilisation = saturation.side_utilisation(values, runs)
    comparisons = machines.annotate(
        saturation.annotate(resolution.annotate(compare(compared, runs, s)), utilisation), runs
    )
    mesh_comparisons = (
        resolution.annotate(mesh.comparisons(values, runs, s)) if mesh.has_mesh(runs) else comparisons.clear()
    )
    published = reference.side_by_side(metrics, runs, reference.published_changes(reference_dir), s)
    return Result(
        settings=s,
        runs=runs,
        metrics=metrics,
        values=values,
        summary=normalize.with_work(resolution.annotate_summary(stats.summarize(compared, runs, alpha=s.alpha)), work),
        summary_all=normalize.with_work(
            resolution.annotate_summary(stats.summarize(values, runs, alpha=s.alpha)), work
        ),
        comparisons=comparisons,
        families=families(comparisons, s.alpha),
        mesh_comparisons=mesh_comparisons,
        reference=published,
        **profiles.analyse(profile_stacks, profile_runs, s.baseline, profile_bpf),
        profile_attribution=profile_contrasts.attribution(profile_stacks, profile_runs, s),
        profile_contrasts=profile_contrasts.contrasts(profile_stacks, profile_runs, s, comparisons, utilisation),
        precision=sequential.precision(comparisons, runs, experiment, s.alpha),
    )


def _parse_text(identity: dict | None) -> str:
    if identity is None:
        return "no parse identity (written by an older benchlib or another tool)"
    return f"campaign {identity.get('campaign')}, parse {str(identity.get('tables'))[:12]}"


def check_inputs(
    paths: dict[str, Path],
    runs: pl.DataFrame,
    metrics: pl.DataFrame | pl.LazyFrame,
    profile_runs: pl.DataFrame,
    campaign: str,
    plan: str,
    source: str | Path,
) -> dict | None:
    """Refuse tidy tables that do not belong together: not of one `benchlib parse` (the identity parse
    stamps on each, schema.parse_identity), of another campaign or plan than ``source`` (params.yaml)
    describes, or, whatever wrote them, metric rows of runs the runs table does not hold or profiled runs
    of another campaign. Returns the tables' common identity (None for tables from before identities)."""
    # a parse from before the BPF counters wrote no profile_bpf: its absence is no mismatch
    ids = {
        name: schema.parse_identity(p) if p.exists() else None
        for name, p in paths.items()
        if p.exists() or name != "profile_bpf"
    }
    first = next((name for name, i in ids.items() if i is not None), None)
    if first is not None:
        for name, i in ids.items():
            if i != ids[first]:
                if not paths[name].exists():  # beside tables that one parse wrote together
                    raise AnalysisError(
                        f"{paths[name]}: missing (`benchlib parse` writes it with {paths[first].name}); "
                        "run `benchlib parse`"
                    )
                raise AnalysisError(
                    f"{paths[name]}: not written by the same `benchlib parse` as {paths[first].name} "
                    f"({_parse_text(i)}; {paths[first].name}: {_parse_text(ids[first])}); run `benchlib parse`"
                )
        identity = ids[first] or {}
        if identity.get("campaign") != campaign:
            raise AnalysisError(
                f"{paths[first]}: parsed from campaign {identity.get('campaign')}, but {source} names campaign "
                f"{campaign}; run `benchlib parse`"
            )
        if identity.get("plan") != plan:
            raise AnalysisError(
                f"{paths[first]}: parsed with another plan than the one of {source} (its experiment, tests or "
                "environments changed since); run `benchlib parse`"
            )
    orphans = (  # streamed: the metrics may be a scan
        metrics.lazy()
        .select("campaign", "run_id")
        .join(runs.lazy().select("campaign", "run_id"), on=["campaign", "run_id"], how="anti")
        .unique()
        .collect(engine="streaming")
    )
    if len(orphans):
        o = orphans.sort("campaign", "run_id").row(0, named=True)
        raise AnalysisError(
            f"{paths['metrics']}: metric rows of {len(orphans)} run(s) that {paths['runs']} does not hold (the first: "
            f"{o['run_id']} of campaign {o['campaign']}): the tables are of different parses; run `benchlib parse`"
        )
    foreign = (
        set(profile_runs["campaign"].unique()) - set(runs["campaign"].unique())
        if "campaign" in profile_runs.columns
        else set()
    )
    if foreign:
        raise AnalysisError(
            f"{paths['profile_runs']}: profiled runs of campaign {', '.join(sorted(foreign))}, which {paths['runs']} "
            "does not hold: the tables are of different parses; run `benchlib parse`"
        )
    return ids[first] if first is not None else None


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _write_parquet(table: pl.DataFrame | pl.LazyFrame, path: Path) -> None:
    # a LazyFrame (the values of a scanned campaign) is streamed to its file, never collected whole
    if isinstance(table, pl.LazyFrame):
        table.sink_parquet(path)
    else:
        table.write_parquet(path)


def write(
    result: Result,
    directory: str | Path,
    runs_path: str | Path,
    metrics_path: str | Path,
    profile_paths: tuple[str | Path, ...] = (),
    metrics_json: str | Path | None = None,
    parse: dict | None = None,
) -> Path:
    """The derived tables as <directory>/<table>.parquet, ``metrics_json`` (result.metrics_json), and
    settings.json naming the settings, the tidy tables they came from (paths as given: relative ones stay
    anchored at the project root) with their digests and ``parse`` identity, and the digest of every file
    of the set, which `load` checks.

    One set: every file is staged beside its place first (a failure, a full disk, leaves the old set as it
    was and no temporary behind), then each is renamed into place, settings.json last; a kill between two
    renames leaves files that settings.json does not name, which `load` refuses."""
    out = resolve(directory)
    out.mkdir(parents=True, exist_ok=True)
    schema.remove_stale_temporaries(out, [f"{name}.parquet" for name in TABLES] + [SETTINGS_FILE])
    staged: list[tuple[Path, Path]] = []
    try:
        digests = {}
        for name in TABLES:
            dst = out / f"{name}.parquet"
            tmp = files.temporary(dst)
            staged.append((tmp, dst))
            schema.writing(dst, tmp, lambda: _write_parquet(getattr(result, name), tmp))  # noqa: B023 (called at once)
            digests[name] = sha256(tmp)
        inputs = [runs_path, metrics_path, *profile_paths]
        saved = {
            "settings": result.settings.model_dump(mode="json"),
            "runs_path": str(runs_path),
            "metrics_path": str(metrics_path),
            "inputs": {str(p): sha256(resolve(p)) for p in inputs if resolve(p).exists()},
            "parse": parse,
            "tables": digests,
        }
        if metrics_json is not None:
            dst = resolve(metrics_json)
            dst.parent.mkdir(parents=True, exist_ok=True)
            schema.remove_stale_temporaries(dst.parent, [dst.name])
            text = json.dumps(result.metrics_json(), indent=2, allow_nan=False)
            staged.append((files.stage(dst, lambda tmp: tmp.write_text(text)), dst))  # noqa: B023 (called at once)
            saved["metrics_json"] = {"path": str(metrics_json), "sha256": hashlib.sha256(text.encode()).hexdigest()}
        saved["digest"] = _digest(saved)
        settings = json.dumps(saved, indent=1)
        staged.append((files.stage(out / SETTINGS_FILE, lambda tmp: tmp.write_text(settings)), out / SETTINGS_FILE))
        for tmp, dst in staged:
            os.replace(tmp, dst)
    finally:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
    return out


RERUN = "run `benchlib analyse` (or `dvc repro`) to analyse the tables beside it again"


def _digest(saved: dict) -> str:
    """The sha256 of settings.json's content but its digest: an edit of the settings (a baseline changed
    by hand) no longer matches the tables they describe."""
    content = {k: v for k, v in saved.items() if k != "digest"}
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


def load(directory: str | Path = ANALYSIS_DIR) -> Result:
    """The analysis `write` saved in ``directory``, with the tidy tables it was made from; refused (one
    line) when a file of the set is not the one `write` wrote (swapped, edited, from an interrupted
    analysis) or a tidy table changed since (a newer parse beside an older analysis)."""
    d = resolve(directory)
    try:
        saved = limits.parse_json(limits.read_file(d / SETTINGS_FILE, limits.ANALYSIS_FILE_BYTES, SchemaError))
        settings = Settings.model_validate(saved["settings"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise AnalysisError(
            f"{d}: no complete analysis ({type(exc).__name__}: {' '.join(str(exc).split())[:200]}); "
            "run `benchlib analyse` (or `dvc repro`)"
        ) from None
    written = saved.get("tables")
    if not isinstance(written, dict) or not isinstance(saved.get("inputs"), dict) or "digest" not in saved:
        raise AnalysisError(
            f"{d / SETTINGS_FILE}: written by an older benchlib, which recorded no digest of the analysis' "
            f"settings, tables and inputs; {RERUN}"
        )
    if saved["digest"] != _digest(saved):
        raise AnalysisError(
            f"{d / SETTINGS_FILE}: edited after the analysis wrote it (its digest differs): the settings no longer "
            f"describe the tables beside it; change params.yaml instead and {RERUN}"
        )
    for name in TABLES:
        path = d / f"{name}.parquet"
        if not path.is_file() or sha256(path) != written.get(name):
            raise AnalysisError(
                f"{path}: not the table the analysis of {d / SETTINGS_FILE} wrote ("
                + (
                    "missing"
                    if not path.exists()
                    else "its sha256 differs: swapped, edited or left by an interrupted analysis"
                )
                + f"); {RERUN}"
            )
    for given, digest in saved["inputs"].items():
        path = resolve(given)
        if not path.is_file() or sha256(path) != digest:
            now = _parse_text(schema.parse_identity(path)) if path.is_file() else "missing"
            analysed = f", analysed: {_parse_text(saved['parse'])}" if saved.get("parse") else ""
            raise AnalysisError(
                f"{path}: not the table the analysis in {d} was made from (now: {now}{analysed}); {RERUN}"
            )
    if saved.get("metrics_json"):
        path = resolve(saved["metrics_json"]["path"])
        if not path.is_file() or sha256(path) != saved["metrics_json"]["sha256"]:
            raise AnalysisError(
                f"{path}: not the headline numbers the analysis in {d} wrote ("
                + ("missing" if not path.exists() else "its sha256 differs")
                + f"); {RERUN}"
            )
    try:
        tables = {name: pl.read_parquet(d / f"{name}.parquet") for name in TABLES}
    except (OSError, pl.exceptions.PolarsError) as exc:
        raise AnalysisError(
            f"{d}: no complete analysis ({type(exc).__name__}: {' '.join(str(exc).split())[:200]}); {RERUN}"
        ) from None
    runs, metrics = schema.read_runs(resolve(saved["runs_path"])), schema.read_metrics(resolve(saved["metrics_path"]))
    return Result(settings=settings, runs=runs, metrics=metrics, **tables)
