"""`benchlib history` at scale: hundreds of campaigns lined up, peak memory and time.

One synthetic campaign of real-format records (synth.py) is parsed once; the history then reads it as
``--campaigns`` campaigns, one a day, each with its values scaled by a slow drift, handed over one at a
time as the command hands over campaigns it parses. Each campaign's parse is left out (benchmark 5
measures parse); what is measured is the history's own work and what it keeps in memory.

    uv run python benchmarks/history.py --campaigns 300 --runs 2000
"""

from __future__ import annotations

import argparse
import datetime as dt
import resource
import tempfile
import time
from pathlib import Path

import polars as pl
import synth
from common import figure

from benchlib.analysis import history
from benchlib.analysis.compare import Campaign
from benchlib.tables import tidy


def campaigns(runs: pl.DataFrame, metrics: pl.DataFrame, count: int):
    """``count`` campaigns from one campaign's tables: campaign k a day after k - 1, values drifting 0.1 %
    a day."""
    for k in range(count):
        name = f"nightly-{k:04d}"
        yield Campaign(
            name,
            runs.with_columns(campaign=pl.lit(name), started_at=pl.col("started_at") + dt.timedelta(days=k)),
            metrics.with_columns(campaign=pl.lit(name), value=pl.col("value") * (1 + 0.001 * k)),
            pl.DataFrame(),
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--campaigns", type=int, default=300)
    ap.add_argument("--runs", type=int, default=2000, help="runs per campaign")
    ap.add_argument("--scenarios", type=int, default=10)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cdir = synth.generate(Path(tmp), runs=args.runs, scenarios=args.scenarios, seed=1)
        runs, metrics = tidy.build_tables(cdir)
    base_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    table = history.line_up(campaigns(runs, metrics, args.campaigns))
    elapsed = time.perf_counter() - start
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    changed = int(table["changed"].sum())
    print(
        f"history: {args.campaigns} campaigns x {args.runs} runs ({args.campaigns * args.runs:,} runs), "
        f"{len(table):,} rows, {changed} marked changed"
    )
    figure("history wall time", elapsed, "s")
    figure("history time per campaign", 1000 * elapsed / args.campaigns, "ms")
    figure("peak RSS (process)", peak_kib / 1024**2, "GiB", "< 2 GiB")
    figure("peak RSS above the tables of one campaign", (peak_kib - base_kib) / 1024**2, "GiB")


if __name__ == "__main__":
    main()
