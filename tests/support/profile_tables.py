"""Profile tables as `benchlib parse` writes them (profiles.parquet, profile_runs.parquet), built from the
captured `perf script` output of a netperf TCP_RR in the lab (tests/fixtures/perf: host and veth-routed,
client and server both on CPU 0, so one "total" profile of both sides per run)."""

from __future__ import annotations

import gzip
import itertools
from collections import Counter
from functools import cache

import polars as pl

from benchlib.analysis import profiles
from benchlib.profiling import stacks
from tests.conftest import FIXTURES

# the two runs' transaction rates over their ~2.5 s perf window (test inputs, not results)
RATES = {"host": 66_600.0, "veth-routed": 53_400.0}
# vxlan's transaction rate against host's in the real lab-default-003 campaign (-46.7 %): a vxlan profile
# made of another path's stacks at that rate agrees with the measured change (profile_contrasts)
VXLAN_RATE = RATES["host"] * (1 - 0.467)
WINDOW_S, HZ = 2.5, 499.0
# a configuration's k-th profiled run counts its rate times SPREAD[k] over the same samples: runs that
# differ by a few percent, as profiled runs of one configuration do (test inputs)
SPREAD = (1.0, 1.03, 0.97, 1.01, 0.99)


@cache
def folded(scenario: str) -> Counter:
    return stacks.fold(gzip.decompress((FIXTURES / "perf" / f"tcp_rr-{scenario}.script.gz").read_bytes()).decode())


def profile_tables(
    configs: dict | None = None,
    environment: str = "local-lab",
    test: str = "tcp_rr",
    kernel_symbols: bool = True,
    runs_each: int = 1,
    rates: dict[str, float] | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(profiles, profile_runs) of {scenario: fixture scenario} (default: host and veth-routed as themselves),
    ``runs_each`` profiled runs each (SPREAD), in blocks 0, 1, ...; a scenario's rate its fixture's, or
    the one ``rates`` gives it."""
    configs = configs or {s: s for s in RATES}
    rates = {s: RATES[f] for s, f in configs.items()} | (rates or {})
    rows, runs = [], []
    for (scenario, fixture), k in itertools.product(configs.items(), range(runs_each)):
        f = folded(fixture)
        run_id = f"{scenario}-{test}-p{k}"
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
                "block": k,
                "attribution": "shared",
                "frequency_hz": HZ,
                "window_s": WINDOW_S,
                "samples": sum(f.values()),
                "kernel_symbols": kernel_symbols,
                "perf_version": "perf 6.1.76",
                "kernel": "6.1.0-test",
                "metric": "transaction_rate",
                "value": rates[scenario] * SPREAD[k],
                "outcome": "ok",
            }
        )
    return (
        pl.DataFrame(rows, schema=profiles.PROFILES_SCHEMA),
        pl.DataFrame(runs, schema=profiles.PROFILE_RUNS_SCHEMA),
    )
