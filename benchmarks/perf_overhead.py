"""Benchmark 19: what perf costs the run it profiles, and how many profiled runs a configuration needs.

A campaign of the lab (params.yaml's tests, ``--scenarios``) in which every block holds, for each
configuration, one measured run and one profiled run (`experiment.profile_runs` = the blocks), shuffled
within the block as every campaign's runs are, so each profiled run has a measured twin seconds away. It
runs through the real runner and LabTarget into a temporary raw root and is parsed by the real parse.

* perf's overhead: per test, the profiled run's headline metric over its block twin's, as the geometric
  mean of the pairs' ratios with a 95 % t interval on the logs (scipy), against the analysis' noise band.
  Within the band, a profiled run measures what a measured run measures; outside it, perf slows the run.
* profiled runs per configuration: the CPU per unit of work (the analysis' own `run_totals`) varies
  from run to run; from that spread (the median per-run CV across configurations and sides), the 95 %
  half-width Welch's t would give a contrast between two configurations at k runs each, for k = 2..10,
  with what k profiled runs per configuration add to the default campaign (planned as validate plans).

``--tables DIR`` reads a parsed campaign instead (runs, metrics, profile_runs, profiles parquet), such
as the default campaign's data/processed: its pairs are its profiled runs and their blocks' measured runs.

    uv run python benchmarks/perf_overhead.py [--reps 12] [--scenarios host,vxlan] [--tables DIR]
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
from pathlib import Path

import numpy as np
import polars as pl
from common import figure, loadavg
from scipy import stats as sps

from benchlib import collectors
from benchlib.analysis import profile_contrasts
from benchlib.measure import runner
from benchlib.measure.plan import plan_environment
from benchlib.profiling import perf_record
from benchlib.records import layout
from benchlib.settings.loading import load_environment, load_params
from benchlib.settings.project import project_root
from benchlib.tables import tidy
from benchlib.targets.lab import LabTarget

TESTS = ("tcp_rr", "tcp_crr", "tcp_stream_1")  # params.yaml's single-flow tests: one per kind
KS = (2, 3, 4, 5, 6, 8, 10)


def collect(params, reps: int, scenarios: list[str], out: Path) -> None:
    """Run the benchmark's campaign (``params`` narrowed to it) and parse it into out/*.parquet."""
    environment = params.environments["local-lab"].model_copy(update={"scenarios": scenarios})
    params = params.model_copy(
        update={
            "experiment": params.experiment.model_copy(
                update={"campaign": "bench-perf-overhead", "repetitions": reps, "profile_runs": reps}
            ),
            "tests": {name: spec for name, spec in params.tests.items() if name in TESTS},
            "environments": {"local-lab": environment},
        }
    )
    plan = plan_environment(params, "local-lab")
    tools = plan.tools()
    lab = LabTarget(
        load_environment("local-lab"),
        plan.scenarios,
        servers=collectors.servers(tools),
        commands=collectors.client_commands(tools),
        log=lambda m: None,
    )
    with tempfile.TemporaryDirectory(prefix="bench-perf-") as raw:
        counts = runner.run_environment(params, plan, lab, raw_root=Path(raw), log=lambda m: None)
        print(f"campaign: {counts}, load average {loadavg()}")
        tidy.parse_campaign(layout.campaign_dir(params.experiment.campaign, Path(raw)), out)


def pairs(tables: Path) -> pl.DataFrame:
    """One row per profiled run that has an ok measured twin in its block: scenario, test, block, the
    two headline values and their ratio."""
    runs = pl.read_parquet(tables / "runs.parquet").filter(pl.col("outcome") == "ok")
    metrics = pl.read_parquet(tables / "metrics.parquet")
    profiled = pl.read_parquet(tables / "profile_runs.parquet").filter(pl.col("outcome") == "ok")
    keys = ["environment", "scenario", "test", "block"]
    measured = metrics.join(runs.select("run_id"), on="run_id").join(
        profiled.select(*keys, "metric").unique(), on=[*keys, "metric"]
    )
    return (
        profiled.select(*keys, "kind", "metric", pl.col("value").alias("profiled"))
        .join(measured.select(*keys, "metric", pl.col("value").alias("measured")), on=[*keys, "metric"])
        .with_columns(ratio=pl.col("profiled") / pl.col("measured"))
        .sort(keys)
    )


def overhead(p: pl.DataFrame, band_pct: float) -> None:
    print(
        f"perf's overhead: profiled / measured twin in the same block, 95 % t interval on the logs; band +/- {band_pct} %"
    )
    for (test, metric), g in p.group_by("test", "metric", maintain_order=True):
        logs = np.log(g["ratio"].to_numpy())
        ci = sps.ttest_1samp(logs, 0.0).confidence_interval(0.95)
        pct = [100 * math.expm1(v) for v in (logs.mean(), ci.low, ci.high)]
        if -band_pct <= pct[1] and pct[2] <= band_pct:
            where = "inside the band"
        elif pct[1] > band_pct or pct[2] < -band_pct:
            where = "outside the band"
        else:
            where = "not decided by the band"
        print(f"  {test} ({metric}), {len(logs)} pairs: {pct[0]:+.2f} % [{pct[1]:+.2f}, {pct[2]:+.2f}]: {where}")
        figure(f"{test} profiled/measured - 1", pct[0], "%")
        figure(f"{test} interval low", pct[1], "%")
        figure(f"{test} interval high", pct[2], "%")


def spread(tables: Path) -> list[float]:
    """Per configuration and side: the per-run CV of CPU per unit of work across the profiled runs."""
    totals = profile_contrasts.run_totals(
        pl.read_parquet(tables / "profiles.parquet"), pl.read_parquet(tables / "profile_runs.parquet")
    )
    cvs = (
        totals.group_by("environment", "scenario", "test", "side")
        .agg(cv=pl.col("cpu_per_unit").std() / pl.col("cpu_per_unit").mean(), n=pl.len())
        .filter(pl.col("n") >= 3)
    )
    return sorted(cvs["cv"].drop_nulls().to_list())


def profile_cost_s(params) -> float:
    """The default campaign's profiled runs at k = 1: per configuration, the test's duration and
    perf's extra time (perf_record.EXTRA_S, what validate plans with)."""
    scenarios = len(params.environments["local-lab"].scenarios)
    return scenarios * sum(spec.duration_s + perf_record.EXTRA_S for spec in params.tests.values())


def profiled_runs_needed(cvs: list[float], cost_s: float) -> None:
    cv = statistics.median(cvs)
    print(
        f"profiled runs per configuration: per-run CV of CPU per unit, median {100 * cv:.1f} % "
        f"(quartiles {100 * np.quantile(cvs, 0.25):.1f}-{100 * np.quantile(cvs, 0.75):.1f} %, {len(cvs)} configuration sides)"
    )
    print("  k   Welch 95 % half-width of a contrast   the default campaign's profiled runs")
    for k in KS:
        # two arms of k runs each, equal spread: df 2(k-1), standard error cv * sqrt(2 / k) on the logs
        half = 100 * math.expm1(sps.t.ppf(0.975, 2 * (k - 1)) * cv * math.sqrt(2 / k))
        print(f"  {k:<3} +/- {half:5.1f} %{'':28}{k * cost_s:6.0f} s")
        figure(f"k={k} contrast half-width", half, "%")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--reps", type=int, default=12, help="blocks, each with a measured and a profiled run of every configuration"
    )
    p.add_argument("--scenarios", default="host,vxlan", help="lab scenarios, comma-separated")
    p.add_argument("--params", type=Path, default=project_root() / "params.yaml")
    p.add_argument("--tables", type=Path, help="a parsed campaign's tables instead of a new campaign")
    args = p.parse_args()
    params = load_params(args.params)
    with tempfile.TemporaryDirectory(prefix="bench-perf-tables-") as tmp:
        tables = args.tables
        if tables is None:
            tables = Path(tmp)
            collect(params, args.reps, args.scenarios.split(","), tables)
        twins = pairs(tables)
        overhead(twins, params.analysis.noise_band_pct)
        profiled_runs_needed(spread(tables), profile_cost_s(params))


if __name__ == "__main__":
    main()
