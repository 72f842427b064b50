"""Comparisons made where a side ran at its CPU limit, stated beside them.

When the client (or server, or the one CPU set both share) is busy all the time, a rate or a latency
measures that CPU as much as the datapath under test: two scenarios then differ in what each costs the
saturated CPU per unit of work, and the comparison that says so is CPU per work
(normalize.CPU_AT_TARGET, "cpu_pct_at_target"), not the rate itself. This module finds such
configurations from the CPU samples every run records (metric cpu_busy_pct: busy share of the side's
CPUs over the steady-state window, see benchlib.host.cpu.side_usage) and marks the comparisons made on them.

The check is generic: any test, any tool (netperf TCP_STREAM, fortio at qps max, ...), any side a run
recorded (client, server; total where client and server shared one CPU set, cpu_placement shared).
"""

from __future__ import annotations

import polars as pl

from benchlib.analysis import stats
from benchlib.analysis.normalize import CPU_AT_TARGET
from benchlib.vocabulary.schema import SIDES, TOTAL_SIDE

CPU_METRIC = "cpu_busy_pct"
CPU_SIDE_NAMES = (*SIDES, TOTAL_SIDE)
# A side whose median run kept >= 90 % of its CPUs busy is at its limit. /proc/stat busy time of a
# side that is never idle reads 97-101 % in the lab (tick accounting and window edges), and a side
# that waits on the other (or the network) for even a tenth of the time has headroom left; 90 % sits
# between, well above the unsaturated sides the lab records (the TCP_STREAM receiver: 23-41 %).
CPU_BOUND_PCT = 90.0

COLUMNS = ["cpu_bound", "cpu_bound_in", "cpu_bound_side", "cpu_bound_pct", "cpu_bound_pct_base", "note"]


def side_utilisation(metrics: pl.DataFrame | pl.LazyFrame, runs: pl.DataFrame) -> pl.DataFrame:
    """One row per configuration (stats.RUN_CONFIG): the median over its successful runs of each
    side's busy % (columns cpu_client, cpu_server, cpu_total; null where not recorded)."""
    ok, configs = stats.successful_runs(runs)
    medians = (  # streamed: the busy % rows are three per run
        metrics.lazy()
        .filter(pl.col("metric") == CPU_METRIC)
        .select("run_id", "side", "value")
        .join(ok.lazy(), on="run_id", how="inner")
        .group_by("_config", "side")
        .agg(pl.col("value").median())
        .collect(engine="streaming")
        .join(configs, on="_config")
        .drop("_config")
    )
    wide = medians.pivot(on="side", index=stats.RUN_CONFIG, values="value")
    return wide.select(
        *stats.RUN_CONFIG,
        *[
            (pl.col(s) if s in wide.columns else pl.lit(None, dtype=pl.Float64)).alias(f"cpu_{s}")
            for s in CPU_SIDE_NAMES
        ],
    )


def _note(metric: pl.Expr, side: pl.Expr, bound_in: pl.Expr, pct: pl.Expr, pct_base: pl.Expr) -> pl.Expr:
    """'client at the CPU limit (median busy 99 %, baseline 99 %): throughput then measures that CPU as
    much as the path; compare cpu_pct_at_target (CPU per work), side client'."""
    who = pl.when(side == TOTAL_SIDE).then(pl.lit("client and server's shared CPU set")).otherwise(side)
    where = pl.format(
        "{} at the CPU limit{} (median busy {} %, baseline {} %)",
        who,
        bound_in.replace_strict(
            {"both": "", "scenario": " in this scenario", "baseline": " in the baseline"}, return_dtype=pl.String
        ),
        pct.round(0).cast(pl.Int64).cast(pl.String).fill_null("-"),
        pct_base.round(0).cast(pl.Int64).cast(pl.String).fill_null("-"),
    )
    return (
        pl.when(metric.str.contains("cpu"))
        .then(pl.format("{}: CPU per work is the comparison that is meaningful here", where))
        .otherwise(
            pl.format(
                "{}: {} then measures that CPU as much as the path; compare "
                + CPU_AT_TARGET
                + " (CPU per work), side {}",
                where,
                metric,
                side,
            )
        )
    )


def annotate(
    comparisons: pl.DataFrame, utilisation: pl.DataFrame, threshold_pct: float = CPU_BOUND_PCT
) -> pl.DataFrame:
    """The comparisons (stats.compare's rows, scenario vs the ``baseline`` scenario) with the CPU limit
    of either side of each, from the configurations' ``utilisation`` (side_utilisation).

    Added columns:
      cpu_bound: the scenario's or the baseline's configuration had a side whose median run kept
        >= threshold_pct of its CPUs busy;
      cpu_bound_in: "both", "scenario" or "baseline": whose configuration had a side at its limit
        (null if neither);
      cpu_bound_side: those sides in either configuration ("client", "client, server", "total":
        one CPU set shared by both), null if none;
      cpu_bound_pct, cpu_bound_pct_base: the highest median busy % among those sides in the scenario
        and in the baseline (one of them may be below the threshold: see cpu_bound_in);
      note: on cpu_bound rows, which side is at its limit, in which configuration, and that the rate
        or latency then measures that CPU as much as the path (compare cpu_pct_at_target of that
        side); on the CPU-per-work rows, that they are the meaningful comparison; null elsewhere.
    Rows whose ``baseline`` is not a configuration of ``utilisation`` (stats.compare_campaigns) are
    judged by the scenario's configuration alone. Verdicts are left as they are: the note says what
    they measure.
    """
    util = [f"cpu_{s}" for s in CPU_SIDE_NAMES]
    keys = [c for c in stats.RUN_CONFIG if c != "scenario"]
    mine = utilisation.select(*stats.RUN_CONFIG, *util)
    base = utilisation.select(*keys, baseline=pl.col("scenario"), **{f"{c}_base": pl.col(c) for c in util})
    df = (
        comparisons.with_row_index("_row")
        .join(mine, on=stats.RUN_CONFIG, how="left", nulls_equal=True)
        .join(base, on=[*keys, "baseline"], how="left", nulls_equal=True)
    )
    bound = {
        s: (pl.col(f"cpu_{s}") >= threshold_pct).fill_null(False)
        | (pl.col(f"cpu_{s}_base") >= threshold_pct).fill_null(False)
        for s in CPU_SIDE_NAMES
    }
    here = pl.any_horizontal([(pl.col(f"cpu_{s}") >= threshold_pct).fill_null(False) for s in CPU_SIDE_NAMES])
    there = pl.any_horizontal([(pl.col(f"cpu_{s}_base") >= threshold_pct).fill_null(False) for s in CPU_SIDE_NAMES])
    df = df.with_columns(
        cpu_bound=pl.any_horizontal(*bound.values()),
        cpu_bound_in=pl.when(here & there)
        .then(pl.lit("both"))
        .when(here)
        .then(pl.lit("scenario"))
        .when(there)
        .then(pl.lit("baseline")),
        cpu_bound_side=pl.concat_list([pl.when(b).then(pl.lit(s)) for s, b in bound.items()])
        .list.drop_nulls()
        .list.join(", ")
        .replace("", None),
        cpu_bound_pct=pl.max_horizontal([pl.when(b).then(pl.col(f"cpu_{s}")) for s, b in bound.items()]),
        cpu_bound_pct_base=pl.max_horizontal([pl.when(b).then(pl.col(f"cpu_{s}_base")) for s, b in bound.items()]),
    ).with_columns(
        note=pl.when(pl.col("cpu_bound")).then(
            _note(
                pl.col("metric"),
                pl.col("cpu_bound_side"),
                pl.col("cpu_bound_in"),
                pl.col("cpu_bound_pct"),
                pl.col("cpu_bound_pct_base"),
            )
        )
    )
    return df.sort("_row").drop("_row", *util, *[f"{c}_base" for c in util])
