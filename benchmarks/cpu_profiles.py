"""Benchmark 8: CPU profiles at campaign scale: parse (stacks.fold + stacks.rows), classification and the
analysis (profiles.analyse, then the report's sentences) of 1,000 profiles.

The profiles are the two captured `perf script` outputs of tests/fixtures/perf (a netperf TCP_RR in the lab,
host and veth-routed, ~2.5 s at 499 Hz), replicated under varied scenario names: N scenarios x 2 tests x R
profiled runs. Parse is timed apart from classification (stacks.rows classifies each distinct stack; it is
timed with classify() replaced by a constant and without), then the analysis of the tables parse made.

    uv run python benchmarks/cpu_profiles.py [--profiles 1000]
"""

from __future__ import annotations

import argparse
import gzip
import resource
import time

import polars as pl
from common import figure

from benchlib.analysis import profile_contrasts, profiles
from benchlib.profiling import stacks
from benchlib.report import profiles as profile_text
from benchlib.settings.analysis import Analysis
from benchlib.settings.project import project_root

FIXTURES = project_root() / "tests" / "fixtures" / "perf"
RATES = {"host": 66_600.0, "veth-routed": 53_400.0}
TESTS = ("tcp_rr", "tcp_rr_2")
RUNS_PER_CONFIG = 5


def scripts() -> dict[str, str]:
    return {s: gzip.decompress((FIXTURES / f"tcp_rr-{s}.script.gz").read_bytes()).decode() for s in RATES}


def plan(n: int) -> list[tuple[str, str, str, int]]:
    """(scenario, fixture, test, run) for n profiles: host as the baseline, the rest veth-routed copies."""
    out = []
    per_scenario = len(TESTS) * RUNS_PER_CONFIG
    for i in range(max(1, n // per_scenario)):
        scenario, fixture = ("host", "host") if i == 0 else (f"scenario-{i:03d}", "veth-routed")
        out += [(scenario, fixture, test, r) for test in TESTS for r in range(RUNS_PER_CONFIG)]
    return out[:n]


def parse(n: int, texts: dict[str, str], classify: bool = True) -> tuple[pl.DataFrame, pl.DataFrame, float]:
    """The profiles and profile_runs tables of n profiles as parse builds them; seconds taken."""
    keep = stacks.classify
    if not classify:
        stacks.classify = lambda comm, frames: "other"
    try:
        t = time.monotonic()
        rows, runs = [], []
        for k, (scenario, fixture, test, r) in enumerate(plan(n)):
            folded = stacks.fold(texts[fixture])
            key = {
                "run_id": f"{scenario}-{test}-{r}",
                "campaign": "bench",
                "environment": "local-lab",
                "scenario": scenario,
                "test": test,
                "kind": "TCP_RR",
            }
            rows += [{**key, **row} for row in stacks.rows(folded, {"client": [0], "server": [0]})]
            runs.append(
                {
                    **key,
                    "block": r,
                    "attribution": "shared",
                    "frequency_hz": 499.0,
                    "window_s": 2.5,
                    "samples": sum(folded.values()),
                    "kernel_symbols": stacks.kernel_symbols(folded),
                    "perf_version": "perf",
                    "kernel": "bench",
                    "metric": "transaction_rate",
                    "value": RATES[fixture] * (1 + 0.001 * (k % 7)),
                    "outcome": "ok",
                }
            )
        p = pl.DataFrame(rows, schema=profiles.PROFILES_SCHEMA)
        pr = pl.DataFrame(runs, schema=profiles.PROFILE_RUNS_SCHEMA)
        return p, pr, time.monotonic() - t
    finally:
        stacks.classify = keep


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--profiles", type=int, default=1000)
    args = parser.parse_args(argv)
    texts = scripts()
    n = args.profiles
    _, _, t_fold = parse(n, texts, classify=False)
    p, pr, t_parse = parse(n, texts)
    configs = pr.select("scenario", "test").n_unique()
    print(
        f"profiles: {len(pr)} profiles ({configs} configurations x {RUNS_PER_CONFIG} runs), "
        f"{len(p)} stack rows, {pr['samples'].sum()} samples"
    )
    figure("parse: fold + rows, no classification", t_fold, "s")
    figure("parse: fold + rows + classification", t_parse, "s")
    figure("classification alone", t_parse - t_fold, "s")
    t = time.monotonic()
    out = profiles.analyse(p, pr, "host")
    out["profile_contrasts"] = profile_contrasts.contrasts(p, pr, Analysis(baseline="host"))
    out["profile_attribution"] = profile_contrasts.attribution(p, pr, Analysis(baseline="host"))
    out["profile_explanations"] = profile_text.explanations(out, "host")
    t_analysis = time.monotonic() - t
    figure("analysis: profiles.analyse", t_analysis, "s")
    figure("total", t_parse + t_analysis, "s")
    for name, table in out.items():
        print(f"  {name}: {len(table)} rows")
    figure("peak RSS", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, "GiB")


if __name__ == "__main__":
    main()
