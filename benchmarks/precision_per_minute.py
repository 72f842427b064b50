"""Precision per minute of collect: what each campaign design buys for the time it takes.

For campaigns of the same comparisons run with different designs (one cluster switched between pod
networks in rounds; clusters side by side, every run interleaved), the primary comparisons'
median 95 % half-width, unpaired and paired by block, the minutes of collect (first run's start to
last run's end, switches included), and half-width x sqrt(minutes): the half-width a campaign of one
minute would reach if precision grew with the square root of time. Lower is better; the ratio of two
designs' figures is how many times longer the worse one must run to match the better.

    uv run python benchmarks/precision_per_minute.py \\
        rounds=pipelines/local-cilium/params-vpc-rounds.yaml:data/rounds \\
        side-by-side=pipelines/local-clusters/params.yaml:data/processed
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import polars as pl
from halfwidths import primary

from benchlib.analysis import load_tables, normalize, stats
from benchlib.settings.loading import load_params


def design(params: Path, tables: Path) -> list[dict]:
    """Per test and way (unpaired, paired): comparisons, median half-width, minutes, the product."""
    settings = load_params(params).analysis
    runs, metrics = load_tables(tables / "runs.parquet", tables / "metrics.parquet")
    values = normalize.with_cpu_at_target(metrics, runs, **normalize.work_rates(settings))
    compared = stats.compared_values(values, runs, settings.family_metrics)
    minutes = (runs["ended_at"].max() - runs["started_at"].min()).total_seconds() / 60  # pyright: ignore[reportOptionalMemberAccess, reportOperatorIssue] (datetimes of a non-empty table)
    blocks = runs.filter(pl.col("outcome") == "ok")["block"].n_unique()
    out = []
    for way, paired in (("unpaired", False), ("paired", True)):
        table = primary(compared, runs, settings, paired, 0.95)
        for test in sorted(set(table["test"])):
            rows = table.filter(pl.col("test") == test)
            half = float(rows["half"].median())  # pyright: ignore[reportArgumentType] (a number: rows exist)
            out.append(
                {
                    "test": test,
                    "way": way,
                    "comparisons": rows.height,
                    "paired": rows.filter(pl.col("test_method").str.contains("sign")).height,
                    "blocks": blocks,
                    "runs": runs.height,
                    "minutes": minutes,
                    "half": half,
                    "per_minute": half * math.sqrt(minutes),
                }
            )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("designs", nargs="+", help="LABEL=PARAMS:TABLES (a params file and its campaign's tidy tables)")
    args = ap.parse_args()
    print(
        f"{'design':<14} {'test':<13} {'way':<9} {'cmp':>3} {'paired':>6} {'blocks':>6} {'runs':>5} "
        f"{'minutes':>8} {'median half %':>13} {'half x sqrt(min)':>16}"
    )
    for spec in args.designs:
        label, _, paths = spec.partition("=")
        params, _, tables = paths.partition(":")
        for r in design(Path(params), Path(tables)):
            print(
                f"{label:<14} {r['test']:<13} {r['way']:<9} {r['comparisons']:>3} {r['paired']:>6} {r['blocks']:>6} "
                f"{r['runs']:>5} {r['minutes']:>8.1f} {r['half']:>13.2f} {r['per_minute']:>16.2f}"
            )


if __name__ == "__main__":
    main()
