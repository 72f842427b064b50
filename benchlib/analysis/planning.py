"""Planned power for `benchlib validate`: what the planned repetitions can detect, from a pilot.

A pilot is an earlier campaign of the same configurations (environment, scenario, test): the tidy
tables in data/processed, else the newest campaign under data/raw with records of a planned
environment, or tidy tables given with --pilot. Its spread of each test's headline metric gives,
for every planned comparison of the primary family, the minimum detectable effect at the planned
n and the runs needed for the noise band and for 5 % (stats.mde_pct, stats.n_for_effect).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import polars as pl
from scipy.stats import norm

from benchlib.base.errors import BenchlibError, ConfigError
from benchlib.measure.plan import Plan
from benchlib.settings.analysis import Analysis, percent_text
from benchlib.settings.campaign import MAX_BLOCKS, Params
from benchlib.vocabulary import schema

from . import normalize, sequential, stats

EFFECT_PCT = 5.0  # besides the noise band: the runs needed for a change this large


def find_pilot(params: Params, root: Path, pilot: str | Path | None = None) -> tuple[str, Path] | None:
    """(description, directory) of the pilot's tables, or (description, raw campaign directory); None if none."""
    if pilot is not None:
        return f"tables in {pilot}", Path(pilot)
    processed = root / "data" / "processed"
    if (processed / "runs.parquet").is_file() and (processed / "metrics.parquet").is_file():
        return "tables in data/processed", processed
    raw = root / "data" / "raw"
    campaigns = (
        sorted((d for d in raw.iterdir() if d.is_dir()), key=lambda d: d.stat().st_mtime, reverse=True)
        if raw.is_dir()
        else []
    )
    for cdir in campaigns:
        if any((cdir / env).is_dir() for env in params.experiment.environments):
            return f"raw records of {cdir.name}", cdir
    return None


def load_pilot(
    directory: Path, parse_raw: Callable[[Path], tuple[pl.DataFrame, pl.DataFrame]] | None = None
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(runs, metrics) of a pilot: tidy tables, or a raw campaign directory parsed by ``parse_raw``
    (the caller's tidy.build_tables: the analysis layer does not parse raw records itself)."""
    if (directory / "runs.parquet").is_file():
        return schema.read_runs(directory / "runs.parquet"), schema.read_metrics(directory / "metrics.parquet")
    if parse_raw is None:
        raise BenchlibError(f"{directory}: no runs.parquet, and no parser for raw records was given")
    return parse_raw(directory)


def planned_comparisons(params: Params, plans: list[Plan]) -> list[tuple[str, str, str, str]]:
    """(environment, test, scenario, reference) of every planned comparison: each scenario vs the
    baseline and the contrasts, wherever both configurations are planned."""
    out = []
    for plan in plans:
        planned = set(plan.configurations())
        pairs = [(s, params.analysis.baseline) for s in plan.scenarios if s != params.analysis.baseline]
        pairs += [tuple(c) for c in params.analysis.contrasts if tuple(c) not in pairs]
        out += [
            (plan.environment.name, t, s, ref)
            for t in plan.tests
            for s, ref in pairs
            if (s, t) in planned and (ref, t) in planned
        ]
    return out


def _samples(runs: pl.DataFrame, metrics: pl.DataFrame, analysis: Analysis) -> dict:
    """{(environment, test, scenario): (headline metric, its values)} of the pilot's successful runs."""
    values = normalize.with_cpu_at_target(metrics, runs, **normalize.work_rates(analysis))
    heads = stats.headlines(values, runs).drop_nulls("headline")
    ok = (
        stats.ok_values(values, runs)
        .join(heads, on=["environment", "test", "test_params"], nulls_equal=True)
        .filter(pl.col("metric") == pl.col("headline"), pl.col("value").is_finite())
    )
    grouped = ok.group_by("environment", "test", "scenario").agg(pl.col("headline").first(), pl.col("value"))
    return {
        (r["environment"], r["test"], r["scenario"]): (r["headline"], np.asarray(r["value"], float))
        for r in grouped.iter_rows(named=True)
    }


def _runs(n: int | None) -> str:
    return "-" if n is None else str(n)


def _spread_problem(sd_log: float) -> str | None:
    """Why no power can be planned from this pooled spread of log values, or None if it can."""
    if np.isnan(sd_log):
        return "the pilot has values <= 0 (no log spread)"
    if sd_log == 0:
        return "the pilot's runs do not spread at all (equal at the instrument's resolution)"
    if not np.isfinite(sd_log):
        return "the pilot's spread is infinite"
    return None


def unreachable(params: Params, planned: list) -> list[str]:
    """One line when no primary comparison can be significant at the planned n, whatever the data:
    the smallest exact p of n runs against n exceeds alpha over the family (Holm's first step)."""
    n, m, alpha = params.experiment.repetitions, len(planned), params.analysis.alpha
    if not m or stats.smallest_p(n, n) < alpha / m:
        return []
    return [
        f"  n = {n} cannot reach significance: its smallest exact p ({stats.smallest_p(n, n):.2g}) exceeds "
        f"alpha {alpha:g} over the {m} primary comparisons ({alpha / m:.2g}); "
        f"experiment.repetitions needs >= {stats.n_attainable(alpha / m)}"
    ]


def blocks_for_precision(
    params: Params, x: np.ndarray, y: np.ndarray, comparisons: int, target_pct: float
) -> int | None:
    """The blocks a campaign run until precise needs for the change of x against y (a pilot's runs) to
    be within +/- ``target_pct`` %: the first look whose interval is that narrow, or beyond the
    budget, the blocks the last look's level needs; None where the pilot gives no interval.

    The pilot's interval at the first look's level (stats.delta_pct, as the analysis computes it) is
    scaled on the log scale by sqrt(n_pilot / n) (a median's standard error) and by the ratio of the
    normal quantiles of the two levels."""
    exp, a = params.experiment, params.analysis
    first = sequential.stopping_confidence(exp, a.alpha, 1, comparisons)
    _, lo, hi = stats.delta_pct(x, y, seed=a.seed, confidence=first)
    if not (np.isfinite(lo) and np.isfinite(hi)) or hi <= lo:
        return None
    log_lo, log_hi = np.log1p(lo / 100), np.log1p(hi / 100)
    width, center = (log_hi - log_lo) / 2, (log_hi + log_lo) / 2
    target = np.arcsinh(target_pct / (100 * np.exp(center)))  # the log half-width of a +/- precision % interval
    n_pilot = min(len(x), len(y))
    z1 = norm.ppf((1 + first) / 2)

    def scaled(look: int) -> float:
        z = norm.ppf((1 + sequential.stopping_confidence(exp, a.alpha, look, comparisons)) / 2)
        return width * z / z1

    marks = exp.looks()
    for j, n in enumerate(marks, 1):
        if scaled(j) * np.sqrt(n_pilot / n) <= target:
            return n
    return int(np.ceil(n_pilot * (scaled(len(marks)) / target) ** 2))


def precision_plan(
    params: Params, planned: list, samples: dict, minutes_per_block: dict[str, float] | None = None
) -> list[str]:
    """Lines on a campaign run until precise: the blocks each primary comparison needs, from the pilot.
    A budget that cannot reach the worst of them is a ConfigError naming the key."""
    exp = params.experiment
    if exp.precision is None:
        return []
    needs = []
    for env, test, s, ref in planned:
        x, y = samples.get((env, test, s)), samples.get((env, test, ref))
        if x is None or y is None or min(len(x[1]), len(y[1])) < stats.MIN_N:
            continue
        blocks = blocks_for_precision(params, x[1], y[1], len(planned), exp.precision_for(x[0]))
        if blocks is not None:
            needs.append((blocks, env, f"{env} {test} {s} vs {ref}"))
    marks = exp.looks()
    lines = [
        f"  run until precise: +/- {percent_text(exp.precision)} at looks after {', '.join(map(str, marks[:6]))}"
        f"{' ...' if len(marks) > 6 else ''} blocks, alpha per look "
        f"{sequential.look_alpha(exp, params.analysis.alpha, 1):.2g}"
        + (" (alpha / (j (j + 1)) at look j)" if exp.max_repetitions is None else "")
    ]
    if not needs:
        return [*lines, "  run until precise: no pilot comparison to estimate the blocks needed from"]
    needs.sort(reverse=True)
    worst, env, label = needs[0]
    lines.append(
        f"  blocks needed from the pilot, worst first: {', '.join(f'{lbl} {b}' for b, _, lbl in needs[:6])}"
        + (" ..." if len(needs) > 6 else "")
    )
    if exp.max_repetitions is not None and worst > exp.max_repetitions:
        raise ConfigError(
            f"{params.source}: experiment.max_repetitions: {exp.max_repetitions} blocks cannot reach "
            f"experiment.precision +/- {percent_text(exp.precision)}: the pilot's spread needs {worst} blocks ({label})"
        )
    if worst > exp.blocks_planned():  # a time budget alone still meets the cap on blocks
        raise ConfigError(
            f"{params.source}: experiment.max_minutes: {exp.max_minutes:g} min cannot reach experiment.precision "
            f"+/- {percent_text(exp.precision)}: the pilot's spread needs {worst} blocks ({label}), beyond "
            f"the {MAX_BLOCKS} blocks a campaign can have"
        )
    per_block = (minutes_per_block or {}).get(env)
    if exp.max_minutes is not None and per_block is not None and worst * per_block > exp.max_minutes:
        raise ConfigError(
            f"{params.source}: experiment.max_minutes: {exp.max_minutes:g} min cannot reach experiment.precision "
            f"+/- {percent_text(exp.precision)}: the pilot's spread needs {worst} blocks ({label}), about "
            f"{worst * per_block:.0f} min"
        )
    return lines


def planned_power(
    params: Params,
    plans: list[Plan],
    root: Path,
    pilot: str | Path | None = None,
    parse_raw: Callable[[Path], tuple[pl.DataFrame, pl.DataFrame]] | None = None,
    minutes_per_block: dict[str, float] | None = None,
) -> list[str]:
    """The lines `benchlib validate` prints about power: one header, one line per test (a raw pilot
    is parsed by ``parse_raw``). Without a pilot, whether the planned n can reach significance at all."""
    found = find_pilot(params, root, pilot)
    if found is None:
        return [
            "planned power: no previous campaign (data/processed, data/raw or --pilot) to take the spread from",
            *unreachable(params, planned_comparisons(params, plans)),
        ]
    what, directory = found
    try:
        runs, metrics = load_pilot(directory, parse_raw)
    except (BenchlibError, OSError) as exc:
        return [f"planned power: the pilot ({what}) cannot be read: {exc}"]
    a = params.analysis
    planned = planned_comparisons(params, plans)
    n = params.experiment.repetitions
    m = len(planned)
    if m == 0:
        return ["planned power: no comparison planned (no scenario besides the baseline)"]
    # the level a comparison must pass when no other one is significant (Holm's first step; the
    # Benjamini-Hochberg level at one rejection): what any single comparison can rely on
    level = a.alpha / m
    samples = _samples(runs, metrics, a)
    lines = [
        f"planned power (pilot: {what}, campaign {', '.join(sorted(runs['campaign'].unique()))}): "
        f"{m} primary comparisons, {stats.CORRECTIONS[a.correction]}, per comparison alpha {level:.2g} "
        f"(= {a.alpha:g}/{m}), {100 * stats.POWER:.0f} % power, n = {n} runs per configuration"
    ]
    if stats.smallest_p(n, n) >= level:
        lines.append(
            f"  n = {n} cannot reach alpha {level:.2g} at all (smallest exact p "
            f"{stats.smallest_p(n, n):.2g}): needs n >= {stats.n_attainable(level)}"
        )
    by_test: dict[str, list[str]] = {}
    missing = []
    for env, test, s, ref in planned:
        x, y = samples.get((env, test, s)), samples.get((env, test, ref))
        if x is None or y is None or min(len(x[1]), len(y[1])) < 2:
            missing.append(f"{env}/{test}/{s} vs {ref}")
            continue
        metric = x[0]
        sd = float(stats.pooled_log_sd(x[1][None, :], y[1][None, :])[0])
        band = stats.noise_band(metric, a.noise_band_pct)
        name = s if ref == a.baseline else f"{s} vs {ref}"
        why = _spread_problem(sd)
        if why:
            part = f"{name} not computable because {why}"
        else:
            mde = stats.mde_pct(n, n, sd, level)
            part = (
                f"{name} {'n/a' if np.isnan(mde) else f'{mde:.1f} %'} "
                f"({_runs(stats.n_for_effect(band, sd, level))}/{_runs(stats.n_for_effect(EFFECT_PCT, sd, level))})"
            )
        by_test.setdefault(f"{env} {test} {metric} (noise band {band:g} %)", []).append(part)
    for label, parts in by_test.items():
        lines.append(f"  {label}: MDE at n = {n} (runs for the noise band/{EFFECT_PCT:g} %): " + ", ".join(parts))
    if missing:
        lines.append(
            f"  no pilot data for {len(missing)} comparison(s): "
            + ", ".join(missing[:4])
            + (" ..." if len(missing) > 4 else "")
        )
    return lines + precision_plan(params, planned, samples, minutes_per_block)
