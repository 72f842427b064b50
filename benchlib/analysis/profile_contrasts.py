"""CPU per unit of work, each scenario against the baseline and each declared contrast (analysis.contrasts)
against its reference, with its interval across the profiled runs, and whether it agrees with the
measured change where the test ran at its CPU limit. The pairs are the analysis' own
(stats.compared_pairs), and the ``baseline`` column holds each pair's reference.

Each usable profiled run gives one value per side: its busy CPU per unit of work (run_totals, in the
categories' unit). A contrast is the ratio of the scenario's geometric mean to the reference's, tested
with Welch's t on the logs; the family is an environment's and test's contrasts, corrected as the
analysis corrects its primary family (which holds the declared contrasts too), and the interval is at the level that correction decided at
(families.decision_level), so that an interval excludes zero exactly where the change is called.

Welch's t and not a rank test or a bootstrap: at 3 profiled runs per configuration no rank test can
reach p < 0.1 (2 / C(6, 3)), and a percentile bootstrap's interval excludes zero whenever the two arms'
runs do not overlap, which chance alone does one time in ten.

Where both configurations ran a side at its CPU limit (saturation.CPU_BOUND_PCT), that side was busy
its whole window either way, so its CPU per unit of work goes as 1 / rate: the measured change delta of
the rate implies a change of 1 / (1 + delta) - 1 in CPU per unit, with the comparison's interval. The
profiles' interval must overlap it; where it does not, the profiles disagree with the measurement
(``agrees`` false) and explain nothing.

Where the CPU went (attribution): the same runs, per category and per frame's own time (the samples
taken in the frame itself), the scenario's mean CPU per unit minus the baseline's with Welch's 95 %
interval (absolute: a frame one path lacks is 0 there, not a ratio). These say where a change that
the contrast called went; they are not claims of their own, so they carry no correction.
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl
from scipy import stats as sps

from benchlib.profiling.stacks import frame_work
from benchlib.settings.analysis import DEFAULT_ANALYSIS, Analysis
from benchlib.vocabulary.schema import PROFILES_SCHEMA

from .families import PRIMARY, adjust, decision_level
from .profiles import KEYS, PROFILE_RUNS_SCHEMA, UNIT_COLUMNS, busy_rows, conform, own_category, pooled_configs
from .saturation import CPU_BOUND_PCT, CPU_SIDE_NAMES
from .stats import compared_pairs
from .verdicts import Kind

METHOD = "Welch's t on the logs of the profiled runs' CPU per unit"
MIN_RUNS = 2  # per arm: below it there is no spread, so no interval and no claim

RUN_TOTALS_SCHEMA = {
    **{k: pl.String for k in KEYS},
    "side": pl.String,
    "run_id": pl.String,
    "metric": pl.String,
    "cpu_per_unit": pl.Float64,
    **UNIT_COLUMNS,
}
CONTRASTS_SCHEMA = {
    "environment": pl.String,
    "test": pl.String,
    "scenario": pl.String,
    "baseline": pl.String,
    "side": pl.String,
    "metric": pl.String,  # the headline metric whose work the CPU is per
    "cpu_per_unit": pl.Float64,  # geometric mean over the scenario's profiled runs
    "cpu_per_unit_base": pl.Float64,
    **UNIT_COLUMNS,
    "n_runs": pl.UInt32,
    "n_runs_base": pl.UInt32,
    "change_pct": pl.Float64,  # of CPU per unit, scenario against baseline
    "change_low": pl.Float64,
    "change_high": pl.Float64,
    "ci_level": pl.Float64,
    "p": pl.Float64,
    "p_adj": pl.Float64,
    "method": pl.String,
    "verdict_kind": pl.String,  # finding, noise or insufficient (Kind)
    # where both configurations ran this side at its CPU limit: the change in CPU per unit the measured
    # rate implies (its interval from the comparison's), and whether the profiles' interval overlaps it
    "implied_pct": pl.Float64,
    "implied_low": pl.Float64,
    "implied_high": pl.Float64,
    "agrees": pl.Boolean,
}


ATTRIBUTION_SCHEMA = {
    "environment": pl.String,
    "test": pl.String,
    "scenario": pl.String,
    "baseline": pl.String,
    "side": pl.String,
    "level": pl.String,  # "category"; "self": a frame's own time; "work": what frames do (stacks.WORK)
    "name": pl.String,  # the category, the frame, or the work
    "category": pl.String,  # the frame's own category ("" for a helper counted with its caller)
    "delta": pl.Float64,  # mean CPU per unit, scenario minus baseline, in the contrast's unit
    "delta_low": pl.Float64,
    "delta_high": pl.Float64,
    "ci_level": pl.Float64,
    "n_runs": pl.UInt32,
    "n_runs_base": pl.UInt32,
    **UNIT_COLUMNS,
}
ATTRIBUTION_LEVEL = 0.95


# a group's busy CPU per unit of its run's work, in the configuration's unit
PER_UNIT = (pl.col("cpu_s").sum() * pl.col("scale").first() / pl.col("work").first()).alias("cpu_per_unit")


def _busy_with_work(profiles: pl.DataFrame, profile_runs: pl.DataFrame) -> pl.DataFrame:
    """The busy stack rows of the usable profiled runs (profiles.busy_rows), each with its run's work
    (headline metric x window) and its configuration's scale and unit."""
    configs = pooled_configs(profile_runs)
    work = conform(profile_runs, PROFILE_RUNS_SCHEMA).select(
        "run_id", "metric", work=pl.col("value") * pl.col("window_s")
    )
    return (
        busy_rows(profiles, profile_runs, configs)
        .join(work, on="run_id")
        .join(configs.select(*KEYS, "scale", *UNIT_COLUMNS), on=KEYS)
    )


def _totals(rows: pl.DataFrame) -> pl.DataFrame:
    return (
        rows.group_by(*KEYS, "side", "run_id")
        .agg(PER_UNIT, pl.col("metric", *UNIT_COLUMNS).first())
        .sort(*KEYS, "side", "run_id")
        .select(RUN_TOTALS_SCHEMA.keys())
    )


def run_totals(profiles: pl.DataFrame, profile_runs: pl.DataFrame) -> pl.DataFrame:
    """Per usable profiled run (profiles.pooled_configs) and side: its busy CPU per unit of its own work."""
    return _totals(_busy_with_work(profiles, profile_runs))


def _run_parts(rows: pl.DataFrame) -> pl.DataFrame:
    """Per run and side of ``rows`` (_busy_with_work), the busy CPU per unit of each category (level
    "category"), of each frame's own time (level "self", with the frame's own category) and of what
    the frames do (level "work": the own times of the frames of each of stacks.WORK, summed)."""
    own = rows.filter(pl.col("stack") != "").with_columns(leaf=pl.col("stack").str.split(";").list.last())
    leaves = own["leaf"].unique().sort()
    work = dict(zip(leaves, (frame_work(f) for f in leaves), strict=True))
    parts = [
        rows.group_by(*KEYS, "side", "run_id", name="category").agg(PER_UNIT).with_columns(level=pl.lit("category")),
        own.group_by(*KEYS, "side", "run_id", name="leaf").agg(PER_UNIT).with_columns(level=pl.lit("self")),
        own.with_columns(name=pl.col("leaf").replace_strict(work, return_dtype=pl.String))
        .filter(pl.col("name").is_not_null())
        .group_by(*KEYS, "side", "run_id", "name")
        .agg(PER_UNIT)
        .with_columns(level=pl.lit("work")),
    ]
    out = pl.concat([p.select(*KEYS, "side", "run_id", "level", "name", "cpu_per_unit") for p in parts])
    names = out["name"].unique().sort()
    own_of = dict(zip(names, (own_category(n) for n in names), strict=True))
    return out.with_columns(
        category=pl.when(pl.col("level") == "category")
        .then("name")
        .when(pl.col("level") == "self")
        .then(pl.col("name").replace_strict(own_of, return_dtype=pl.String))
        .otherwise(pl.lit(""))
    )


def _pairs(totals: pl.DataFrame, settings: Analysis) -> list[tuple[str, str]]:
    return compared_pairs(totals["scenario"].unique(), settings.baseline, settings.contrasts)


def attribution(
    profiles: pl.DataFrame | None, profile_runs: pl.DataFrame | None, settings: Analysis = DEFAULT_ANALYSIS
) -> pl.DataFrame:
    """profile_attribution: per compared pair (each scenario against the ``settings``' baseline, each
    contrast against its reference), side, category and frame (own time), the change of mean CPU per unit
    with Welch's ATTRIBUTION_LEVEL interval across the profiled runs; a part a run lacks counts 0 in
    that run. Only where both have at least MIN_RUNS runs."""
    rows = _busy_with_work(conform(profiles, PROFILES_SCHEMA), conform(profile_runs, PROFILE_RUNS_SCHEMA))
    totals = rows.select(*KEYS, "side", "run_id").unique().sort(*KEYS, "side", "run_id")
    parts = _run_parts(rows)
    runs_of = {
        k: g["run_id"].to_list()
        for k, g in totals.group_by("environment", "test", "scenario", "side", maintain_order=True)
    }
    out = []
    for scenario, reference in _pairs(totals, settings):
        for (env, test, s, side), ids in runs_of.items():
            bids = runs_of.get((env, test, reference, side), [])
            if s != scenario or len(ids) < MIN_RUNS or len(bids) < MIN_RUNS:
                continue
            mine = parts.filter(pl.col("run_id").is_in(ids + bids), side=side)
            if mine.is_empty():
                continue
            # one row per part, one column per run, 0 where the run lacks it
            wide = mine.pivot(on="run_id", index=["level", "name", "category"], values="cpu_per_unit").fill_null(0.0)
            for rid in ids + bids:
                if rid not in wide.columns:
                    wide = wide.with_columns(pl.lit(0.0).alias(rid))
            x, y = wide.select(ids).to_numpy(), wide.select(bids).to_numpy()
            t = sps.ttest_ind(x, y, axis=1, equal_var=False)
            ci = t.confidence_interval(ATTRIBUTION_LEVEL)
            exact = (np.ptp(x, axis=1) == 0) & (np.ptp(y, axis=1) == 0)  # no spread: the difference is the interval
            delta = x.mean(axis=1) - y.mean(axis=1)
            out.append(
                wide.select("level", "name", "category").with_columns(
                    environment=pl.lit(env),
                    test=pl.lit(test),
                    scenario=pl.lit(scenario),
                    baseline=pl.lit(reference),
                    side=pl.lit(side),
                    delta=pl.Series(delta),
                    delta_low=pl.Series(np.where(exact, delta, ci.low)),
                    delta_high=pl.Series(np.where(exact, delta, ci.high)),
                    ci_level=pl.lit(ATTRIBUTION_LEVEL),
                    n_runs=pl.lit(len(ids), pl.UInt32),
                    n_runs_base=pl.lit(len(bids), pl.UInt32),
                )
            )
    if not out:
        return pl.DataFrame(schema=ATTRIBUTION_SCHEMA)
    units = rows.select("environment", "test", "scenario", *UNIT_COLUMNS).unique(["environment", "test", "scenario"])
    return (
        pl.concat(out)
        .join(units, on=["environment", "test", "scenario"], how="left")
        .select(pl.col(c).cast(t) for c, t in ATTRIBUTION_SCHEMA.items())
        .sort("environment", "test", "scenario", "baseline", "side", "level", "name")
    )


def _welch(x: np.ndarray, y: np.ndarray) -> tuple[float, object | None]:
    """(p, the test) of log x against log y; NaN and None where either has fewer than MIN_RUNS or no spread."""
    if len(x) < MIN_RUNS or len(y) < MIN_RUNS or (np.ptp(x) == 0 and np.ptp(y) == 0):
        return math.nan, None
    t = sps.ttest_ind(x, y, equal_var=False)
    return float(t.pvalue), t  # pyright: ignore[reportAttributeAccessIssue] (scipy's result classes are not typed)


def _rows(totals: pl.DataFrame, pairs: list[tuple[str, str]]) -> list[dict]:
    """Each pair's scenario runs beside its reference's of the same environment, test and side, tested."""
    groups = dict(iter(totals.group_by("environment", "test", "scenario", "side", maintain_order=True)))
    out = []
    for scenario, reference in pairs:
        for (env, test, s, side), g in groups.items():
            base = groups.get((env, test, reference, side))
            if s != scenario or base is None:
                continue
            x, y = np.log(g["cpu_per_unit"].to_numpy()), np.log(base["cpu_per_unit"].to_numpy())
            p, t = _welch(x, y)
            out.append(
                {
                    "environment": env,
                    "test": test,
                    "scenario": scenario,
                    "baseline": reference,
                    "side": side,
                    "metric": g["metric"][0],
                    "cpu_per_unit": math.exp(x.mean()),
                    "cpu_per_unit_base": math.exp(y.mean()),
                    **{c: g[c][0] for c in UNIT_COLUMNS},
                    "n_runs": len(x),
                    "n_runs_base": len(y),
                    "p": p,
                    "_t": t,
                }
            )
    return out


def _intervals(rows: list[dict], alpha: float, correction: str) -> None:
    """Each row's adjusted p, verdict kind and interval, corrected within its environment and test."""
    families: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        families.setdefault((r["environment"], r["test"]), []).append(r)
    for family in families.values():
        p_adj = adjust(np.array([r["p"] for r in family]), correction, alpha)
        level = decision_level(p_adj, alpha, correction)
        for r, q in zip(family, p_adj, strict=True):
            t = r.pop("_t")
            r.update(p_adj=float(q), method=METHOD, change_pct=100 * (r["cpu_per_unit"] / r["cpu_per_unit_base"] - 1))
            if t is None:
                r.update(change_low=math.nan, change_high=math.nan, ci_level=math.nan)
                r["verdict_kind"] = str(Kind.INSUFFICIENT)
                continue
            ci = t.confidence_interval(1 - level)
            r.update(
                change_low=100 * math.expm1(ci.low),
                change_high=100 * math.expm1(ci.high),
                ci_level=1 - level,
                verdict_kind=str(Kind.FINDING if q < alpha else Kind.NOISE),
            )


def _inverse(delta: str) -> pl.Expr:
    """The change in CPU per unit of work, in %, that a change of the rate by column ``delta`` (in %)
    implies at a fixed busy CPU."""
    return 100 * (100 / (100 + pl.col(delta)) - 1)


def _implied(contrasts: pl.DataFrame, comparisons: pl.DataFrame, utilisation: pl.DataFrame) -> pl.DataFrame:
    """``contrasts`` with the change in CPU per unit the measured rate implies where both configurations
    ran the contrast's side at its CPU limit, and whether the profiles' interval overlaps it."""
    keys = ["environment", "test", "scenario", "baseline", "metric"]
    rates = (
        comparisons.filter(pl.col("family") == PRIMARY)
        .select(*keys, "delta_pct", "delta_low", "delta_high")
        .unique(keys, keep="first")
    )
    sides = [f"cpu_{s}" for s in CPU_SIDE_NAMES if f"cpu_{s}" in utilisation.columns]
    busy = (
        utilisation.unpivot(index=KEYS, on=sides, variable_name="side", value_name="busy")
        .with_columns(pl.col("side").str.strip_prefix("cpu_"))
        .group_by(*KEYS, "side")
        .agg(pl.col("busy").max())
    )
    at_limit = (pl.col("busy") >= CPU_BOUND_PCT).fill_null(False) & (pl.col("busy_base") >= CPU_BOUND_PCT).fill_null(
        False
    )
    both = pl.all_horizontal([pl.col(c).is_finite().fill_null(False) for c in ("change_low", "implied_low")])
    return (
        contrasts.join(busy, on=[*KEYS, "side"], how="left")
        .join(
            busy.rename({"scenario": "baseline", "busy": "busy_base"}),
            on=["environment", "test", "baseline", "side"],
            how="left",
        )
        .join(rates, on=keys, how="left")
        .with_columns(
            implied_pct=pl.when(at_limit).then(_inverse("delta_pct")),
            implied_low=pl.when(at_limit).then(_inverse("delta_high")),
            implied_high=pl.when(at_limit).then(_inverse("delta_low")),
        )
        .with_columns(
            agrees=pl.when(both).then(
                (pl.col("change_low") <= pl.col("implied_high")) & (pl.col("implied_low") <= pl.col("change_high"))
            )
        )
    )


def contrasts(
    profiles: pl.DataFrame | None,
    profile_runs: pl.DataFrame | None,
    settings: Analysis = DEFAULT_ANALYSIS,
    comparisons: pl.DataFrame | None = None,
    utilisation: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """profile_contrasts: per environment, test, compared pair (each scenario against the ``settings``'
    baseline, each contrast against its reference) and side, the change in busy CPU per unit of work with
    its interval and verdict kind (at their alpha, under their correction); with the analysis'
    ``comparisons`` and the configurations' busy sides (saturation.side_utilisation), the check against
    the measured rate."""
    totals = run_totals(conform(profiles, PROFILES_SCHEMA), conform(profile_runs, PROFILE_RUNS_SCHEMA))
    rows = _rows(totals, _pairs(totals, settings))
    if not rows:
        return pl.DataFrame(schema=CONTRASTS_SCHEMA)
    _intervals(rows, settings.alpha, settings.correction)
    out = pl.DataFrame(rows, schema={c: t for c, t in CONTRASTS_SCHEMA.items() if c in rows[0]})
    if comparisons is not None and utilisation is not None and not comparisons.is_empty():
        out = _implied(out, comparisons, utilisation)
    else:
        out = out.with_columns(pl.lit(None).alias(c) for c in ("implied_pct", "implied_low", "implied_high", "agrees"))
    return out.select(pl.col(c).cast(t) for c, t in CONTRASTS_SCHEMA.items()).sort(
        "environment", "test", "scenario", "baseline", "side"
    )
