"""Profile tables as `benchlib parse` writes them (profiles.parquet, profile_runs.parquet), built from the
captured `perf script` output of a netperf TCP_RR in the lab (tests/fixtures/perf: host and veth-routed,
client and server both on CPU 0, so one "total" profile of both sides per run)."""

from __future__ import annotations

import gzip
from collections import Counter
from functools import cache

import polars as pl

from benchlib.analysis import profiles
from benchlib.profiling import stacks
from tests.conftest import FIXTURES

# the two runs' transaction rates over their ~2.5 s perf window (test inputs, not results)
RATES = {"host": 66_600.0, "veth-routed": 53_400.0}
WINDOW_S, HZ = 2.5, 499.0


@cache
def folded(scenario: str) -> Counter:
    return stacks.fold(gzip.decompress((FIXTURES / "perf" / f"tcp_rr-{scenario}.script.gz").read_bytes()).decode())


def profile_tables(
    configs: dict | None = None, environment: str = "local-lab", test: str = "tcp_rr", kernel_symbols: bool = True
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(profiles, profile_runs) of {scenario: fixture scenario} (default: host and veth-routed as themselves),
    one profiled run each."""
    configs = configs or {s: s for s in RATES}
    rows, runs = [], []
    for i, (scenario, fixture) in enumerate(configs.items()):
        f = folded(fixture)
        run_id = f"{scenario}-{test}-p0"
        key = {
            "run_id": run_id,
            "campaign": "c1",
            "environment": environment,
            "scenario": scenario,
            "test": test,
            "kind": "TCP_RR",
        }
        rows += [{**key, **r} for r in stacks.rows(f, {"client": [0], "server": [0]})]
        runs.append(
            {
                **key,
                "block": i,
                "attribution": "shared",
                "frequency_hz": HZ,
                "window_s": WINDOW_S,
                "samples": sum(f.values()),
                "kernel_symbols": kernel_symbols,
                "perf_version": "perf 6.1.76",
                "kernel": "6.1.0-test",
                "metric": "transaction_rate",
                "value": RATES[fixture],
                "outcome": "ok",
            }
        )
    return (
        pl.DataFrame(rows, schema=profiles.PROFILES_SCHEMA),
        pl.DataFrame(runs, schema=profiles.PROFILE_RUNS_SCHEMA),
    )
