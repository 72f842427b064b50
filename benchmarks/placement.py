"""Benchmark 7: noise by CPU placement and run length (what the defaults are chosen from).

One environment (the lab's by default; --env local-k8s: the local cluster, which must be up), every
configuration once per block in a seeded random order, through the real runner (runner.measure, the
collector's command lines and parser, the cluster's quiet windows):

* placement: TCP_STREAM, TCP_RR and TCP_CRR, 2 s, with client and server on different CPUs (split)
  and on one CPU set (shared), in every scenario;
* run length: the same tests at 1 and 5 s in the placement the environment uses for them
  (pipelines/local-lab/environment.yaml cpu_placement), in --length-scenarios (the 2 s runs of the
  first part count for 2 s).

Prints per configuration the median and the CV (standard deviation / mean, in %) of the headline
metric, then per test kind the median CV over the scenarios, and per run length the time a campaign
needs for the same power: runs needed grow with CV squared, each run costs its length plus the
measured per-run overhead.

    uv run python benchmarks/placement.py [--blocks 8]
    uv run python benchmarks/placement.py --env local-k8s --scenarios pod-to-pod same-node --lengths
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from common import figure

from benchlib import collectors
from benchlib.collectors import netperf
from benchlib.measure import runner
from benchlib.measure.plan import RunSpec
from benchlib.settings.loading import load_environment
from benchlib.targets import registry

KINDS = ("TCP_STREAM", "TCP_RR", "TCP_CRR")
HEADLINE = {"TCP_STREAM": "throughput", "TCP_RR": "transaction_rate", "TCP_CRR": "connection_rate"}


def spec(kind: str, seconds: int) -> netperf.Spec:
    return netperf.Spec(
        tool="netperf", kind=kind, duration_s=seconds, message_size=65536 if kind == "TCP_STREAM" else 1
    )


def cv_pct(values: list[float]) -> float:
    return 100 * statistics.stdev(values) / statistics.mean(values)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="local-lab", help="the environment (default local-lab)")
    p.add_argument("--blocks", type=int, default=8, help="runs per configuration (default 8)")
    p.add_argument("--scenarios", nargs="+", default=["host", "veth-routed", "bridge", "vxlan"])
    p.add_argument("--length-scenarios", nargs="+", default=["host", "veth-routed"])
    p.add_argument(
        "--lengths", nargs="*", type=int, default=[1, 5], help="run lengths besides 2 s (none: no length part)"
    )
    p.add_argument("--seed", type=int, default=14)
    args = p.parse_args()
    env = load_environment(args.env)
    chosen = {k: env.cpu_placement.get(k, "split") for k in KINDS}
    envs = {
        "split": env.model_copy(update={"cpu_placement": {}}),
        "shared": env.model_copy(update={"cpu_placement": {k: "shared" for k in KINDS}}),
    }
    configs = [(s, k, placement, 2) for s in args.scenarios for k in KINDS for placement in envs]
    lengths = args.length_scenarios if args.lengths else []
    configs += [(s, k, chosen[k], L) for s in lengths for k in KINDS for L in args.lengths]
    print(f"{len(configs)} configurations x {args.blocks} blocks; the environment's placement: {chosen}", flush=True)
    values: dict[tuple, list[float]] = {c: [] for c in configs}
    overhead: dict[str, list[float]] = {k: [] for k in KINDS}
    rng = random.Random(args.seed)
    target = registry.get(env.target, env, args.scenarios)(
        env, args.scenarios, servers=[collectors.get("netperf").SERVER], commands=["netperf"], log=lambda m: None
    )
    quiet = env.kubernetes is not None and env.kubernetes.quiet is not None  # the cluster's daemons frozen
    if env.target == "kubernetes":  # every scenario's pods at once, on the one pod network they share
        if len({target.switch_of(s) for s in args.scenarios}) > 1:
            raise SystemExit(f"placement.py: scenarios {args.scenarios} need different pod networks")
        target.keeps_scenarios = True  # pyright: ignore[reportAttributeAccessIssue] (a KubernetesTarget)
    with runner.serving(target):
        for block in range(args.blocks):
            order = configs[:]
            rng.shuffle(order)
            for scenario, kind, placement, seconds in order:
                target.env = envs[placement]
                run = RunSpec("local-lab", scenario, kind.lower(), spec(kind, seconds), block, 0)
                t0 = time.monotonic()
                m = runner.measure(target, run, trim_s=0.3, quiet=quiet)
                overhead[kind].append(time.monotonic() - t0 - seconds)
                if m.outcome != "ok":
                    print(f"  block {block} {scenario} {kind} {placement} {seconds}s: {m.outcome} {m.reason}")
                    continue
                parsed = collectors.get("netperf").parse(kind, [r.stdout for r in m.results])
                values[(scenario, kind, placement, seconds)].append(parsed[HEADLINE[kind]])
            print(f"block {block + 1}/{args.blocks} done", flush=True)
    target.env = env

    print(f"\n{'scenario':<14}{'test':<12}{'placement':<10}{'s':>3}{'n':>4}{'median':>12}{'CV %':>8}")
    for (scenario, kind, placement, seconds), v in values.items():
        if len(v) >= 2:
            print(
                f"{scenario:<14}{kind:<12}{placement:<10}{seconds:>3}{len(v):>4}{statistics.median(v):>12.4g}"
                f"{cv_pct(v):>8.1f}"
            )
    print()
    per_run = {k: statistics.median(v) for k, v in overhead.items()}
    for kind, o in per_run.items():
        figure(f"{kind} per-run overhead (length - duration)", o, "s")
    for kind in KINDS:
        for placement in envs:
            cvs = [
                cv_pct(v) for (s, k, pl, L), v in values.items() if (k, pl, L) == (kind, placement, 2) and len(v) > 1
            ]
            figure(f"{kind} {placement} 2 s: median CV over scenarios", statistics.median(cvs), "%")
    for kind in KINDS if args.lengths else ():
        cost = {}
        for seconds in sorted({2, *args.lengths}):
            cvs = [
                cv_pct(v)
                for (s, k, pl, L), v in values.items()
                if (k, pl, L) == (kind, chosen[kind], seconds) and s in args.length_scenarios and len(v) > 1
            ]
            cv = statistics.median(cvs)
            cost[seconds] = cv**2 * (seconds + per_run[kind])
            figure(f"{kind} {chosen[kind]} {seconds} s: median CV", cv, "%")
        for seconds, c in cost.items():
            figure(f"{kind} {seconds} s: campaign time for equal power vs 2 s", c / cost[2], "x")


if __name__ == "__main__":
    main()
