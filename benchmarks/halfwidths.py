"""How precise a campaign's primary comparisons are: the half-widths of their intervals of the change.

From a campaign's tidy tables (data/processed) and its params file, the primary comparisons (the
headline metric of each test against the baseline, and the contrasts) computed three ways on the
same runs:

- ``report``: as the report computes them (the family's decision level, the preset's pairing);
- ``95 % unpaired``: each comparison's own 95 % interval, runs as independent samples;
- ``95 % paired``: each comparison's own 95 % interval within the blocks where both ran (the sign
  test's interval of the median per-block ratio; unpaired where a comparison cannot be paired).

Prints per test and way the number of comparisons, the median half-width in percentage points of the
change (half of high - low) and the largest, then every comparison's change and intervals.

    uv run python benchmarks/halfwidths.py --params pipelines/local-cilium/params-calico.yaml \\
        --tables data/processed
"""

from __future__ import annotations

import argparse
from pathlib import Path

import polars as pl

from benchlib.analysis import load_tables, normalize, stats
from benchlib.settings.loading import load_params

KEYS = ["test", "metric", "scenario", "baseline"]


def primary(compared: pl.DataFrame, runs: pl.DataFrame, settings, paired: bool, confidence: float | None):
    """The primary comparisons as the analysis makes them, paired or not, at ``confidence`` (None: the
    family's decision level)."""
    table = stats.compare_as(compared, runs, settings.model_copy(update={"paired": paired}), confidence)
    return table.filter(pl.col("family") == "primary").select(
        *KEYS,
        "n",
        "n_base",
        "delta_pct",
        "delta_low",
        "delta_high",
        "test_method",
        "p_adj",
        half=(pl.col("delta_high") - pl.col("delta_low")) / 2,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--params", type=Path, required=True, help="the campaign's params file (its analysis section)")
    ap.add_argument("--tables", type=Path, default=Path("data/processed"), help="runs.parquet and metrics.parquet")
    args = ap.parse_args()
    settings = load_params(args.params).analysis
    runs, metrics = load_tables(args.tables / "runs.parquet", args.tables / "metrics.parquet")
    values = normalize.with_cpu_at_target(metrics, runs, **normalize.work_rates(settings))
    compared = stats.compared_values(values, runs, settings.family_metrics)
    ways = {
        "report": primary(compared, runs, settings, settings.paired, None),
        "95 % unpaired": primary(compared, runs, settings, False, 0.95),
        "95 % paired": primary(compared, runs, settings, True, 0.95),
    }
    blocks = runs.filter(pl.col("outcome") == "ok")["block"].n_unique()
    print(f"{runs.height} runs, {blocks} blocks with a successful run; half-width = (high - low) / 2, in points of %")
    print(f"{'test':<12} {'way':<15} {'n':>3} {'median half':>12} {'largest':>9} {'paired':>7}")
    for test in sorted(set(ways["report"]["test"])):
        for way, table in ways.items():
            rows = table.filter(pl.col("test") == test)
            paired = rows.filter(pl.col("test_method").str.contains("sign")).height
            print(
                f"{test:<12} {way:<15} {rows.height:>3} {rows['half'].median():>12.1f} {rows['half'].max():>9.1f}"
                f" {paired:>7}"
            )
    joined = (
        ways["report"]
        .join(ways["95 % unpaired"], on=KEYS, suffix="_u95")
        .join(ways["95 % paired"], on=KEYS, suffix="_p95")
    )
    print("\nchange % [report interval] | [95 % unpaired] | [95 % paired]; p_adj as in the report")
    for r in joined.sort("test", "scenario", "baseline").iter_rows(named=True):
        print(
            f"{r['test']:<11} {r['scenario']:<30} vs {r['baseline']:<30} {r['delta_pct']:+7.1f} "
            f"[{r['delta_low']:+.1f}, {r['delta_high']:+.1f}] | [{r['delta_low_u95']:+.1f}, {r['delta_high_u95']:+.1f}] | "
            f"{r['delta_pct_p95']:+.1f} [{r['delta_low_p95']:+.1f}, {r['delta_high_p95']:+.1f}]  p_adj {r['p_adj']:.2g}"
        )


if __name__ == "__main__":
    main()
