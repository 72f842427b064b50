"""`benchlib analyse`: the tidy tables analysed with the analysis section of params.yaml."""

from __future__ import annotations

from pathlib import Path

from ..base.errors import ConfigError
from ..measure.plan import plan_digest, validate_all
from .common import ERRORS, add, log, out, params


def add_parser(subparsers) -> None:
    s = add(
        subparsers,
        "analyse",
        help="analyse the tidy tables: CPU normalization, summaries, comparisons",
        description="Read data/processed/{runs,metrics}.parquet and analyse them with the analysis "
        "section of params.yaml: CPU at the target work rates, per-configuration "
        "medians with CIs and flags, comparisons against the baseline and the "
        "contrasts corrected within families, minimum detectable effects, the mesh "
        "comparisons and the published references beside ours. Writes "
        "data/analysis/*.parquet (with settings.json: the settings used) and "
        "reports/metrics.json. Measures nothing; `benchlib report` presents it.",
        examples=["benchlib analyse", "benchlib analyse --out /tmp/analysis --metrics-json /tmp/metrics.json"],
        exit_codes=f"0 the analysis is written; {ERRORS}: tables missing, of another campaign or plan, "
        "or a baseline without runs.",
    )
    s.add_argument("--out", help="directory of the analysis tables (default: data/analysis)")
    s.add_argument("--metrics-json", help="where the headline numbers go (default: reports/metrics.json)")
    s.set_defaults(func=run)


def run(args) -> int:
    import polars as pl

    from benchlib import analysis  # statistics and their libraries only when analysing
    from benchlib.analysis import analyse, profiles

    p = params(args)
    validate_all(p)  # the baseline and contrasts name scenarios of the campaign's environments
    paths = {name: analysis.resolve(path) for name, path in analyse.PROCESSED.items()}
    runs_path = analyse.PROCESSED["runs"]
    # a missing or broken table is named here; the metrics are scanned, never read whole
    runs, metrics = analysis.scan_tables(runs_path, analyse.PROCESSED["metrics"])
    # written by parse when the campaign has profiled runs; absent files are empty tables
    profile_stacks, profile_runs, profile_bpf = profiles.read_tables(
        paths["profiles"], paths["profile_runs"], paths["profile_bpf"]
    )
    parse = analyse.check_inputs(paths, runs, metrics, profile_runs, p.experiment.campaign, plan_digest(p), p.source)
    measured = sorted(runs["scenario"].unique())
    baseline = p.analysis.baseline
    if baseline not in measured:
        raise ConfigError(
            f"{p.source}: analysis.baseline: {baseline!r} has no run in {runs_path} "
            f"(campaign {p.experiment.campaign}); scenarios there: {', '.join(measured) or 'none'}"
        )
    where = Path(args.out) if args.out else Path(analyse.ANALYSIS_DIR)
    rows = metrics.select(pl.len()).collect().item()
    log.info(f"analyse: {len(runs)} runs, {rows} metric rows with the analysis section of {p.source}")
    result = analyse.run(
        runs,
        metrics,
        p.analysis,
        profile_stacks=profile_stacks,
        profile_runs=profile_runs,
        experiment=p.experiment,
        profile_bpf=profile_bpf,
    )
    # metrics.json is no DVC-cached output (dvc.yaml: cache: false, persist: true): DVC cannot restore it,
    # so it is written with the tables as one set, which a failure leaves as it was
    metrics_json = args.metrics_json or "reports/metrics.json"
    analyse.write(
        result,
        where,
        runs_path,
        analyse.PROCESSED["metrics"],
        profile_paths=(
            analyse.PROCESSED["profile_runs"],
            analyse.PROCESSED["profiles"],
            analyse.PROCESSED["profile_bpf"],
        ),
        metrics_json=metrics_json,
        parse=parse,
    )
    alpha = result.settings.alpha  # with experiment.precision: the alpha the stopping look spent
    significant = int((result.comparisons["p_adj"] < alpha).sum())
    base = runs.filter(pl.col("scenario") == baseline)
    failed_baseline = (
        f"; the baseline {baseline} has no successful run ({len(base)} failed), so nothing was compared with it"
        if not (base["outcome"] == "ok").any()
        else ""
    )
    out(
        f"analyse: {len(result.comparisons)} comparisons ({significant} significant at alpha = "
        f"{alpha:g}){failed_baseline} -> {where}, {analysis.resolve(metrics_json)}"
    )
    return 0
