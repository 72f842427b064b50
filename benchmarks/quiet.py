"""Benchmark 11: quiet measurement windows on the local cluster, against none, side by side.

The local two-node cluster (scripts/k8s-local-cluster.sh, bridge CNI, kube-proxy iptables), scenario
pod-to-pod of pipelines/local-k8s, through the real runner (runner.measure, the Kubernetes target's
exec API and CPU window). Per block, TCP_RR, TCP_CRR and fortio HTTP at 1000 req/s each run once with
the nodes' host daemons frozen over the CPU window (quiet) and once without, the six runs in a seeded
random order, so drift in the machine falls on both sides alike.

Prints per test and mode the n, median and CV (standard deviation / mean, in %) of the headline metric
(transaction rate, connection rate, HTTP p50 latency), what the quiet runs froze, and /proc/loadavg
before and after: the machine is shared, and its load is part of the result.

    bash scripts/k8s-local-cluster.sh up && uv run python benchmarks/quiet.py [--blocks 10]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from common import loadavg
from scipy.stats import mannwhitneyu

from benchlib import collectors
from benchlib.collectors import fortio, netperf
from benchlib.measure import runner
from benchlib.measure.plan import RunSpec
from benchlib.settings.loading import load_environment
from benchlib.targets.kubernetes import KubernetesTarget

SCENARIO = "pod-to-pod"
HEADLINE = {"TCP_RR": "transaction_rate", "TCP_CRR": "connection_rate", "HTTP": "http_latency_p50"}


def specs(seconds: int) -> dict[str, object]:
    return {
        "tcp_rr": netperf.Spec(tool="netperf", kind="TCP_RR", duration_s=seconds, message_size=1),
        "tcp_crr": netperf.Spec(tool="netperf", kind="TCP_CRR", duration_s=seconds, message_size=1),
        "http_1000": fortio.Spec(tool="fortio", kind="HTTP", duration_s=seconds, qps=1000, streams=2),
    }


def cv_pct(values: list[float]) -> float:
    return 100 * statistics.stdev(values) / statistics.mean(values)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--blocks", type=int, default=10, help="runs per test and mode (default 10)")
    p.add_argument("--seconds", type=int, default=3, help="each run's length (default 3: a 2 s CPU window)")
    p.add_argument("--seed", type=int, default=11)
    args = p.parse_args()
    env = load_environment("local-k8s")
    env = env.model_copy(update={"scenarios": {SCENARIO: env.scenarios[SCENARIO]}})
    tests = specs(args.seconds)
    rng = random.Random(args.seed)
    values: dict[tuple[str, bool], list[float]] = {(t, q): [] for t in tests for q in (False, True)}
    frozen: set[str] = set()
    problems: list[str] = []
    target = KubernetesTarget(env, [SCENARIO], collectors.servers(["netperf", "fortio"]), log=print)
    start_load, t0 = loadavg(), time.monotonic()
    print(f"loadavg before: {start_load}", flush=True)
    with runner.serving(target):
        order = 0
        for block in range(args.blocks):
            configs = [(t, q) for t in tests for q in (False, True)]
            rng.shuffle(configs)
            for test, quiet in configs:
                spec = tests[test]
                run = RunSpec(env.name, SCENARIO, test, spec, block, order)  # pyright: ignore[reportArgumentType]
                order += 1
                m = runner.measure(target, run, 0.5, quiet=quiet)
                if m.outcome != "ok":
                    problems.append(f"block {block} {test} quiet={quiet}: {m.outcome}: {m.reason}")
                    continue
                if quiet:
                    q = m.quiet or {}
                    if "unavailable" in q or q.get("failed"):
                        problems.append(f"block {block} {test}: not quiet: {q}")
                        continue
                    frozen |= set(q["frozen"])
                parsed = collectors.get(spec.tool).parse(spec.kind, [r.stdout for r in m.results])
                values[(test, quiet)].append(parsed[HEADLINE[spec.kind]])
            print(f"block {block + 1}/{args.blocks} done at {time.monotonic() - t0:.0f} s", flush=True)
    end_load = loadavg()
    print(f"\nloadavg before: {start_load}   after: {end_load}   wall: {time.monotonic() - t0:.0f} s")
    print(f"frozen in quiet runs: {', '.join(sorted(frozen))}")
    for line in problems:
        print(f"left out: {line}")
    print(f"\n{'test':<10} {'mode':<6} {'n':>3} {'median':>12} {'CV %':>7}")
    for (test, quiet), vs in values.items():
        if len(vs) >= 2:
            mode = "quiet" if quiet else "plain"
            print(f"{test:<10} {mode:<6} {len(vs):>3} {statistics.median(vs):>12.5g} {cv_pct(vs):>7.2f}")
    print("\nquiet against plain: two-sided Mann-Whitney p of the medians; every value in run order")
    for test in tests:
        plain, quiet = values[(test, False)], values[(test, True)]
        if plain and quiet:
            p = mannwhitneyu(quiet, plain, alternative="two-sided").pvalue
            print(f"{test:<10} p = {p:.3g}")
            print(f"  plain: {' '.join(f'{v:.5g}' for v in plain)}")
            print(f"  quiet: {' '.join(f'{v:.5g}' for v in quiet)}")


if __name__ == "__main__":
    main()
