"""Compare two campaigns: what differs in their setup, then how each configuration changed.

Campaign B is compared against campaign A, configuration by configuration
(environment, scenario, test with its parameters, metric, side), with the
statistics of benchlib.analysis.stats, with the report's families: medians
with distribution-free CIs, Mann-Whitney U, the change in % with its CI at
the level of its family's correction (the primary family: each test's
headline metric; secondary families, FDR: every other metric by kind) and a
verdict by the metric's direction. `benchlib compare` and
notebooks/compare.py both call run().
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
from scipy import stats as sps

from benchlib.base import limits
from benchlib.base.errors import BenchlibError, SchemaError
from benchlib.settings.analysis import DEFAULT_ANALYSIS, Analysis
from benchlib.vocabulary import schema

from . import normalize, resolve, stats
from .verdicts import Direction, Kind

CONFIG_KEYS = ["environment", "scenario", "test"]
NOT_RECORDED = "(not recorded)"


class CompareError(BenchlibError, ValueError):
    """Two campaigns cannot be compared as asked; the message names the campaign or configuration."""


@dataclass(frozen=True)
class Campaign:
    """A campaign's tidy tables: runs, metrics and facts (tidy.build_facts: what each configuration's
    records say about its setup)."""

    name: str
    runs: pl.DataFrame
    metrics: pl.DataFrame
    facts: pl.DataFrame


def _configs(runs: pl.DataFrame) -> pl.DataFrame:
    return runs.select(CONFIG_KEYS).unique()


def _where(configs: pl.Series, total: int) -> str:
    names = sorted(configs)
    return f"all {total} configurations" if len(names) == total else ", ".join(names)


def differences(a: Campaign, b: Campaign) -> pl.DataFrame:
    """What the raw records of A and B say differently about configurations measured in both:
    field, value in A, value in B, where (the configurations, environment/scenario/test).

    Different test parameters for one configuration are refused (CompareError naming it and the
    fields): such runs measure something else, and the statistics would not pair them anyway.
    """
    both = _configs(a.runs).join(_configs(b.runs), on=CONFIG_KEYS)
    fa, fb = (c.facts.join(both, on=CONFIG_KEYS) for c in (a, b))
    diff = (
        fa.join(fb, on=[*CONFIG_KEYS, "field"], how="full", coalesce=True, suffix="_b")
        .rename({"value": "value_a"})
        .with_columns(pl.col("value_a", "value_b").fill_null(NOT_RECORDED))
        .filter(pl.col("value_a") != pl.col("value_b"))
    )
    params = diff.filter(pl.col("field").str.starts_with("test_params."))
    if len(params):
        lines = [
            f"{cfg}: "
            + "; ".join(
                f"{f.removeprefix('test_params.')} {va} in {a.name}, {vb} in {b.name}"
                for f, va, vb in zip(g["field"], g["value_a"], g["value_b"], strict=True)
            )
            for (cfg,), g in params.with_columns(cfg=pl.concat_str(CONFIG_KEYS, separator="/")).group_by(
                "cfg", maintain_order=True
            )
        ]
        raise CompareError(
            f"{a.name} vs {b.name}: refused, the same configuration was measured with different "
            f"test parameters (give the test a new name to measure new settings): " + " | ".join(lines)
        )
    return (
        diff.with_columns(cfg=pl.concat_str(CONFIG_KEYS, separator="/"))
        .group_by("field", "value_a", "value_b")
        .agg(
            where=pl.col("cfg").map_batches(
                lambda s: pl.Series([_where(s, len(both))]), returns_scalar=True, return_dtype=pl.String
            )
        )
        .sort("field", "value_a", "value_b")
    )


def unmatched(a: Campaign, b: Campaign) -> pl.DataFrame:
    """Configurations (environment/scenario/test) measured in only one of the campaigns."""
    ca, cb = _configs(a.runs), _configs(b.runs)
    only = [
        c.join(other, on=CONFIG_KEYS, how="anti").with_columns(only_in=pl.lit(name))
        for c, other, name in ((ca, cb, a.name), (cb, ca, b.name))
    ]
    return pl.concat(only).sort("only_in", *CONFIG_KEYS)


def _values(c: Campaign, targets: Mapping[str, float]) -> pl.DataFrame:
    return normalize.with_cpu_at_target(c.metrics, c.runs, **targets)


RUN_KEYS = [c for c in stats.RUN_CONFIG if c != "campaign"]  # a configuration's runs, in either campaign
NO_RATIO = "no CI: values <= 0"


def run_counts(runs: pl.DataFrame) -> pl.DataFrame:
    """Per configuration (RUN_KEYS): how many runs were recorded, how many failed (disturbed ones
    included: other processes took their CPUs), how many were disturbed, and why."""
    return (
        runs.group_by(RUN_KEYS)
        .agg(
            runs=pl.len().cast(pl.Int64),
            failed_runs=(pl.col("outcome") != "ok").sum().cast(pl.Int64),
            disturbed_runs=(pl.col("outcome") == "disturbed").sum().cast(pl.Int64),
            failure_reasons=pl.col("failure_reason")
            .filter(pl.col("outcome") != "ok")
            .drop_nulls()
            .unique()
            .sort()
            .str.join("; "),
        )
        .sort(RUN_KEYS, nulls_last=True)
    )


def failed_runs(a: Campaign, b: Campaign) -> pl.DataFrame:
    """Configurations measured in both campaigns with at least one failed run in either: runs and
    failed runs in A (``_base``) and in B, with the failure reasons."""
    ca, cb = run_counts(a.runs), run_counts(b.runs)
    both = cb.join(ca, on=RUN_KEYS, how="inner", suffix="_base", nulls_equal=True)
    return both.filter((pl.col("failed_runs") > 0) | (pl.col("failed_runs_base") > 0)).select(
        "environment",
        "scenario",
        "test",
        "runs_base",
        "failed_runs_base",
        "disturbed_runs_base",
        "failure_reasons_base",
        "runs",
        "failed_runs",
        "disturbed_runs",
        "failure_reasons",
        "test_params",
        "streams",
        "message_size",
    )


def _fix_undefined_ratio(rows: pl.DataFrame) -> pl.DataFrame:
    """Significant changes whose median ratio's interval is undefined (a value <= 0, e.g. a rate that
    collapsed to 0) get their direction and change all the same: the change of the medians in % where
    A's median is positive (a collapse to 0 is -100 %), unbounded where it is not; the direction from the
    medians, or where they are equal from Mann-Whitney's U (B's values tend above A's when U > n n_base / 2).
    stats.verdict leaves them "different (...)"; a gate must see a collapse to 0 as worse."""
    fixed_delta, fixed_verdict, fixed_direction, beyond = [], [], [], []
    for r in rows.iter_rows(named=True):
        d, v, way, out = r["delta_pct"], r["verdict"], r["verdict_direction"], None
        undefined = (
            not math.isnan(r["p_adj"])
            and r["p_adj"] < r["alpha"]
            and math.isnan(r["delta_pct"])
            and math.isfinite(r["median"])
            and math.isfinite(r["median_base"])
        )
        if undefined:
            b, a = r["median"], r["median_base"]
            up = b > a if b != a else r["u"] > r["n"] * r["n_base"] / 2
            same = b == a and r["u"] == r["n"] * r["n_base"] / 2
            word = Direction.WORSE if up != schema.metric_info(r["metric"]).higher_is_better else Direction.BETTER
            if same:
                pass
            elif a > 0:
                d = 100 * (b / a - 1)
                v, way = f"{d:+.1f} % (median {a:.4g} -> {b:.4g}; {NO_RATIO}) {word}", word
                out = abs(d) > r["noise_band_pct"]
            else:
                v, way = f"different: median {a:.4g} -> {b:.4g} (change in % unbounded; {NO_RATIO}) {word}", word
                out = b != a
        fixed_delta.append(d)
        fixed_verdict.append(v)
        fixed_direction.append(str(way))
        beyond.append(out)
    return rows.with_columns(
        delta_pct=pl.Series(fixed_delta, dtype=pl.Float64),
        verdict=pl.Series(fixed_verdict, dtype=pl.String),
        verdict_direction=pl.Series(fixed_direction, dtype=pl.String),
        _beyond=pl.Series(beyond, dtype=pl.Boolean),
    )


def _all_failed(
    failed: Campaign, other: Campaign, other_summary: pl.DataFrame, other_values: pl.DataFrame, failed_is_b: bool
) -> pl.DataFrame:
    """Rows for configurations measured in both campaigns whose every run failed in ``failed`` while
    ``other`` has values: one per configuration, on the test's headline metric (the primary family),
    with the other campaign's median and CI. Not tested (p NaN); a regression where B failed."""
    counts = run_counts(failed.runs).filter(pl.col("failed_runs") == pl.col("runs"))
    heads = stats.headlines(other_values, other.runs)
    rows = (
        other_summary.drop("failed_runs")
        .join(counts, on=RUN_KEYS, nulls_equal=True)
        .join(heads, on=["environment", "test", "test_params"], nulls_equal=True)
        .filter(pl.col("metric") == pl.col("headline"))
    )
    mine, theirs = ("", "_base") if failed_is_b else ("_base", "")
    b, a = (failed, other) if failed_is_b else (other, failed)
    who = "B" if failed_is_b else "A"
    nan = pl.lit(math.nan, dtype=pl.Float64)
    reasons = pl.when(pl.col("failure_reasons") != "").then(pl.format(": {}", "failure_reasons")).otherwise(pl.lit(""))
    return rows.select(
        *[c for c in stats.CONFIG if c != "campaign"],
        "unit",
        campaign=pl.lit(b.runs["campaign"][0]),
        baseline=pl.lit(a.runs["campaign"][0]),
        family=pl.lit(stats.PRIMARY),
        verdict=pl.format(f"every run failed in {who} ({{}} of {{}}{{}})", "failed_runs", "runs", reasons),
        verdict_kind=pl.lit(str(Kind.FAILED)),
        verdict_direction=pl.lit(str(Direction.NONE)),
        regression=pl.lit(failed_is_b),
        all_failed=pl.lit(who),
        correction=pl.lit("not tested"),
        excluded=pl.lit(0, pl.Int64),
        **{
            f"n{theirs}": pl.col("n"),
            f"median{theirs}": pl.col("median"),
            f"ci_low{theirs}": pl.col("ci_low"),
            f"ci_high{theirs}": pl.col("ci_high"),
            f"flags{theirs}": pl.col("flags"),
            f"n{mine}": pl.lit(0, pl.Int64),
            f"median{mine}": nan,
            f"ci_low{mine}": nan,
            f"ci_high{mine}": nan,
            f"flags{mine}": pl.lit(""),
        },
        **{
            c: nan
            for c in (
                "u",
                "p",
                "p_adj",
                "ci_level",
                "delta_pct",
                "delta_low",
                "delta_high",
                "sd_log",
                "mde_pct",
                "noise_band_pct",
            )
        },
    )


def comparisons(
    a: Campaign,
    b: Campaign,
    settings: Analysis = DEFAULT_ANALYSIS,
    threshold_pct: float | Mapping[str, float] | None = None,
) -> pl.DataFrame:
    """B vs A per configuration and every metric: the columns of stats.compare() (its families: each
    test's headline metric the primary family under ``correction``, every other metric in the
    Benjamini-Hochberg family of its kind) plus both medians' 95 % CIs, runs and failed runs on both
    sides (``_base``: A), ``campaign_base`` (A's name) and ``regression`` (significant, worse, and the
    change in % itself beyond the threshold; or every run of the configuration failed in B where A
    measured it).

    A significant change whose ratio has no interval (a value <= 0: a collapse to 0) is worse or better
    by the medians (_fix_undefined_ratio). A configuration whose every run failed in one campaign has a
    row on its headline metric saying so (``all_failed``: "A" or "B"), not tested.

    The ``settings``' alpha, correction, seed and work rates; the threshold ``threshold_pct``, else theirs
    (Analysis.compare_threshold)."""
    alpha = settings.alpha
    threshold = settings.compare_threshold() if threshold_pct is None else threshold_pct
    targets = normalize.work_rates(settings)
    va, vb = _values(a, targets), _values(b, targets)
    rows = stats.compare_campaigns(
        vb,
        b.runs,
        va,
        a.runs,
        alpha=alpha,
        correction=settings.correction,
        noise_band_pct=threshold,
        seed=settings.seed,
    )
    keys = [c for c in stats.CONFIG if c != "campaign"]
    sb, sa = stats.summarize(vb, b.runs, alpha=alpha), stats.summarize(va, a.runs, alpha=alpha)
    cis = [
        s.select(*keys, *(pl.col(k).alias(f"{k}{suffix}") for k in ("ci_low", "ci_high", "flags")))
        for s, suffix in ((sb, ""), (sa, "_base"))
    ]
    for ci in cis:
        rows = rows.join(ci, on=keys, how="left", nulls_equal=True)
    rows = _fix_undefined_ratio(rows.with_columns(alpha=pl.lit(alpha))).drop("alpha")
    # A gate fails on what is worse, significant and beyond the threshold itself (as asv compare does):
    # a significant -2 % whose CI reaches past -5 % reads "worse" but is no regression at 5 %.
    beyond = pl.coalesce("_beyond", pl.col("delta_pct").abs() > pl.col("noise_band_pct"))
    rows = rows.with_columns(
        regression=(pl.col("verdict_direction") == str(Direction.WORSE)) & beyond.fill_null(False),
        all_failed=pl.lit(None, pl.String),
    ).drop("_beyond")
    extra = [df for df in (_all_failed(b, a, sa, va, True), _all_failed(a, b, sb, vb, False)) if len(df)]
    if extra:
        rows = pl.concat([rows, *extra], how="diagonal_relaxed")
    ca, cb = run_counts(a.runs), run_counts(b.runs)
    rows = rows.join(cb.drop("failure_reasons"), on=RUN_KEYS, how="left", nulls_equal=True).join(
        ca.drop("failure_reasons").rename(
            {"runs": "runs_base", "failed_runs": "failed_runs_base", "disturbed_runs": "disturbed_runs_base"}
        ),
        on=RUN_KEYS,
        how="left",
        nulls_equal=True,
    )
    order = {f: i for i, f in enumerate(stats.FAMILY_ORDER)}
    # the base campaign by that name: a sentence then names the scenario once, campaign vs campaign
    rows = rows.with_columns(campaign_base=pl.col("baseline"))
    return rows.sort(
        pl.col("family").replace_strict(order, default=len(order)), "environment", "test", "metric", "side", "scenario"
    )


def geomean_summary(rows: pl.DataFrame) -> pl.DataFrame:
    """Per environment, test, metric and side: the geometric mean of B/A median ratios over the
    scenarios, as a change in % (descriptive: no CI), and how many configurations it spans."""
    ok = rows.filter(
        pl.col("median").is_finite()
        & pl.col("median_base").is_finite()
        & (pl.col("median") > 0)
        & (pl.col("median_base") > 0)
    )
    keys = ["environment", "test", "metric", "side"]
    out = (
        ok.group_by(keys)
        .agg(
            ratios=pl.col("median") / pl.col("median_base"),
            configurations=pl.len(),
            regressions=pl.col("regression").sum(),
        )
        .sort(keys)
    )
    return out.with_columns(
        geomean_change_pct=pl.Series([100 * (sps.gmean(r.to_numpy()) - 1) for r in out["ratios"]], dtype=pl.Float64)
    ).drop("ratios")


@dataclass(frozen=True)
class Result:
    a: str
    b: str
    differences: pl.DataFrame
    unmatched: pl.DataFrame
    rows: pl.DataFrame
    geomean: pl.DataFrame
    alpha: float
    correction: str
    failed: pl.DataFrame = field(default_factory=pl.DataFrame)  # failed_runs(): with failed runs in either

    @property
    def regressions(self) -> pl.DataFrame:
        return self.rows.filter(pl.col("regression"))

    def save(self, directory: Path) -> Path:
        """The result as <directory>/<table>.parquet and result.json, for notebooks/compare.py."""
        directory.mkdir(parents=True, exist_ok=True)
        for name in RESULT_TABLES:
            getattr(self, name).write_parquet(directory / f"{name}.parquet")
        (directory / "result.json").write_text(
            json.dumps({"a": self.a, "b": self.b, "alpha": self.alpha, "correction": self.correction})
        )
        return directory


RESULT_TABLES = ("differences", "unmatched", "rows", "geomean", "failed")


def load_result(directory: str | Path) -> Result:
    """The Result that Result.save wrote (paths anchored at the project root)."""
    d = resolve(directory)
    tables: dict[str, Any] = {name: pl.read_parquet(d / f"{name}.parquet") for name in RESULT_TABLES}
    saved = limits.parse_json(limits.read_file(d / "result.json", limits.ANALYSIS_FILE_BYTES, SchemaError))
    return Result(**saved, **tables)


def run(
    a: Campaign,
    b: Campaign,
    settings: Analysis = DEFAULT_ANALYSIS,
    threshold_pct: float | Mapping[str, float] | None = None,
) -> Result:
    """Check both campaigns' metadata (refusing changed test parameters), then compare B vs A (comparisons)."""
    diff = differences(a, b)
    rows = comparisons(a, b, settings, threshold_pct)
    if rows.is_empty():
        raise CompareError(f"{a.name} vs {b.name}: no configuration was measured successfully in both")
    return Result(
        a.name,
        b.name,
        diff,
        unmatched(a, b),
        rows,
        geomean_summary(rows),
        settings.alpha,
        settings.correction,
        failed_runs(a, b),
    )
