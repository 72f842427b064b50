"""Comparisons between configurations measured on different machines (analysis.machines).

A campaign over several clusters (kubernetes.clusters) compares arms that may not share their machines:
another kernel, instance type or CPU. Their difference is then the machines' as much as the datapaths'.
Each comparison whose two configurations' runs name different machine facts carries them, so that the
report, the summary and `compare` say so instead of crediting the datapath.
"""

from __future__ import annotations

import polars as pl

from . import stats

# what a run's row says of its machine (tidy: the kernel and the machine of the cluster it ran on)
FACTS = ("kernel", "machine")


def annotate(comparisons: pl.DataFrame, runs: pl.DataFrame) -> pl.DataFrame:
    """The comparisons with ``machines_differ``: "kernel A vs B; machine C vs D" for the facts in which
    the scenario's runs and the baseline's differ (each side's distinct values joined), null where they
    are the same or the runs do not say (two clusters of one machine kind are the same machines)."""
    present = [f for f in FACTS if f in runs.columns]
    keys = [c for c in stats.RUN_CONFIG if c != "scenario"]
    per_config = (
        runs.filter(pl.col("outcome") == "ok")
        .group_by(stats.RUN_CONFIG)
        .agg(pl.col(f).drop_nulls().unique().sort().str.join(" | ").alias(f) for f in present)
    )
    base = per_config.select(*keys, baseline=pl.col("scenario"), **{f"{f}_base": pl.col(f) for f in present})
    df = (
        comparisons.with_row_index("_row")
        .join(per_config, on=stats.RUN_CONFIG, how="left", nulls_equal=True)
        .join(base, on=[*keys, "baseline"], how="left", nulls_equal=True)
    )
    differ = [
        pl.when((pl.col(f) != pl.col(f"{f}_base")) & (pl.col(f) != "") & (pl.col(f"{f}_base") != "")).then(
            pl.format(f"{f} {{}} vs {{}}", pl.col(f), pl.col(f"{f}_base"))
        )
        for f in present
    ]
    text = pl.concat_list(differ).list.drop_nulls().list.join("; ").replace("", None) if differ else pl.lit(None)
    out = df.with_columns(machines_differ=text.cast(pl.String))
    return out.sort("_row").drop("_row", *present, *[f"{f}_base" for f in present])
