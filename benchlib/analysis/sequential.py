"""Run until precise: a group-sequential plan whose looks are fixed in advance, alpha spent across them.

A campaign with experiment.precision looks at its primary comparisons after ``repetitions`` blocks,
then every ``look_blocks`` blocks, and stops at the first look where every primary comparison's
interval of the change is at most ``precision`` % wide on either side (or when the budget is spent);
``precision`` may give each headline metric its own target (config.check_band).
Which look it stops at depends on the data, so the intervals are computed at a spent level: look j
gets alpha_j, with the alpha_j summing to at most alpha (Bonferroni over the looks). Whatever the
dependence between looks and whatever the stopping rule, the interval of the look that stopped then
misses with probability at most sum_j alpha_j <= alpha: it can only miss if the interval of some look
missed. The family's correction (Holm, Benjamini-Hochberg) then runs at alpha_j in place of alpha.

- max_repetitions set: the looks are finite and known, J of them; each gets alpha / J.
- minutes only: the number of looks is open; look j gets alpha / (j (j + 1)), which sums to alpha
  over all j and decreases, so an earlier look never has a smaller level than a later one.
"""

from __future__ import annotations

import polars as pl

from benchlib.settings.analysis import DEFAULT_ANALYSIS, Analysis
from benchlib.settings.campaign import Experiment

from . import stats

METHOD = "a group-sequential plan, alpha spent over looks fixed in advance (Bonferroni over looks)"
KEYS = ["environment", "test", "test_params", "scenario", "baseline", "metric"]


def sequential(exp: Experiment) -> bool:
    return exp.precision is not None


def look_alpha(exp: Experiment, alpha: float, look: int) -> float:
    """alpha_j of look ``look`` (1-based); alpha itself without precision."""
    if not sequential(exp):
        return alpha
    if exp.max_repetitions is not None:
        return alpha / len(exp.looks())
    return alpha / (look * (look + 1))


def blocks_recorded(runs: pl.DataFrame) -> dict[str, int]:
    """Per environment, the blocks its measured runs reach (the highest block + 1)."""
    if runs.is_empty():
        return {}
    per = runs.group_by("environment").agg(blocks=pl.col("block").max() + 1)
    return dict(zip(per["environment"], per["blocks"], strict=True))


def spent_alpha(exp: Experiment, alpha: float, runs: pl.DataFrame) -> float:
    """The level the analysis runs at: alpha_j of the latest look any environment reached. The spending
    never increases from look to look, so this is at most the level of each environment's own stopping
    look, and a comparison's p is compared with no more than its look's share."""
    blocks = blocks_recorded(runs)
    latest = max((exp.look_of(b) for b in blocks.values()), default=1)
    return look_alpha(exp, alpha, latest)


def half_widths(runs: pl.DataFrame, metrics: pl.DataFrame, settings: Analysis, confidence: float) -> pl.DataFrame:
    """Every primary comparison (each test's headline metric vs the baseline and the contrasts) with
    its interval of the change at ``confidence`` and its half-width in % (KEYS, delta_low,
    delta_high, half_width_pct), widest first. The stopping rule's view of the recorded runs."""
    s = settings
    if runs.is_empty() or s.baseline not in set(runs["scenario"]):
        # an environment without the baseline: nothing to judge (its contrasts are not judged either)
        return pl.DataFrame(
            schema={
                **{k: pl.String for k in KEYS},
                "n": pl.Int64,
                **dict.fromkeys(("delta_low", "delta_high", "half_width_pct"), pl.Float64),
            }
        )
    compared = stats.compared_values(metrics, runs, [])  # the headline metrics only: the primary family
    table = stats.compare_as(compared, runs, s, confidence=confidence).filter(pl.col("family") == stats.PRIMARY)
    return (
        table.select(*KEYS, "n", "delta_low", "delta_high")
        .with_columns(half_width_pct=(pl.col("delta_high") - pl.col("delta_low")) / 2)
        .sort("half_width_pct", descending=True, nulls_last=False)
    )


def stopping_confidence(exp: Experiment, alpha: float, look: int, comparisons: int) -> float:
    """The confidence the stopping rule judges look ``look`` at: Bonferroni over the ``comparisons``
    planned primary comparisons at alpha_j, the widest interval the family's correction can show (its
    first step), so that a comparison that met the target at the look meets it in the report too."""
    return 1 - look_alpha(exp, alpha, look) / max(comparisons, 1)


def targets(exp: Experiment, metrics: pl.Series) -> pl.Series:
    """The target half-width of each primary comparison, from the metric it compares."""
    return pl.Series([exp.precision_for(m) for m in metrics], dtype=pl.Float64)


def judged(widths: pl.DataFrame, exp: Experiment) -> pl.DataFrame:
    """half_widths with each comparison's target (target_pct) and whether it is within it (met): one
    without an interval, too few runs or values <= 0, is not."""
    target = targets(exp, widths["metric"])
    hw = widths["half_width_pct"]
    return widths.with_columns(target_pct=target, met=(hw.is_not_nan() & (hw <= target)).fill_null(False))


PRECISION_COLUMNS = [
    *KEYS,
    "blocks",
    "look",
    "looks",
    "alpha_look",
    "half_width_pct",
    "target_pct",
    "met",
]


def precision(
    comparisons: pl.DataFrame, runs: pl.DataFrame, exp: Experiment | None, alpha: float = DEFAULT_ANALYSIS.alpha
) -> pl.DataFrame:
    """Per primary comparison of a campaign run until precise: the blocks its environment stopped at, the
    look, how many looks the plan had (null: open, minutes only), the level spent at that look, the
    half-width of its interval as analysed and whether it met the target. Empty without precision."""
    schema = pl.Schema(
        {
            **{k: pl.String for k in KEYS},
            "blocks": pl.Int64,
            "look": pl.Int64,
            "looks": pl.Int64,
            "alpha_look": pl.Float64,
            "half_width_pct": pl.Float64,
            "target_pct": pl.Float64,
            "met": pl.Boolean,
        }
    )
    if exp is None or not sequential(exp) or comparisons.is_empty():
        return pl.DataFrame(schema=schema)
    blocks = blocks_recorded(runs)
    primary = comparisons.filter(pl.col("family") == stats.PRIMARY)
    env_blocks = [blocks.get(e, 0) for e in primary["environment"]]
    hw = (primary["delta_high"] - primary["delta_low"]) / 2
    target = targets(exp, primary["metric"])
    return (
        primary.select(KEYS)
        .with_columns(
            blocks=pl.Series(env_blocks, dtype=pl.Int64),
            look=pl.Series([exp.look_of(b) for b in env_blocks], dtype=pl.Int64),
            looks=pl.lit(len(exp.looks()) if exp.max_repetitions is not None else None, dtype=pl.Int64),
            alpha_look=pl.lit(alpha, dtype=pl.Float64),
            half_width_pct=hw,
            target_pct=target,
            met=(hw <= target).fill_null(False),  # NaN sorts above every number: not met
        )
        .cast(schema)
    )
