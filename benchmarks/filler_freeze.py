"""Benchmark 16: what freezing the Service proxies while filler Services are written saves, side by side.

The local two-node cluster with one pod network of pipelines/local-cilium (a scenario series among N
Services, e.g. calico-nftables-service), through the real Kubernetes target. Per block, in a seeded
random order, the target goes from the series' smallest count to --count Services and back twice:
once with the Service proxies (kubernetes.quiet.service_proxies) frozen while the fillers are
written, once without. Each transition is a scenario activation as a campaign does it: the pods
restarted, the fillers created or deleted, the scenario's Service created, and its programmed check
passed (every proxy has programmed every Service).

Prints per mode and direction the n, the median wall time of the activation and of its parts
(fillers written, programmed check), what was frozen, and /proc/loadavg before and after.

    bash scripts/k8s-local-cluster.sh up && bash scripts/k8s-local-cluster.sh cni calico --dataplane nftables
    uv run python benchmarks/filler_freeze.py --series calico-nftables-service --count 2000 [--blocks 2]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from common import loadavg

from benchlib import collectors
from benchlib.settings.loading import load_environment
from benchlib.targets.kubernetes import KubernetesTarget


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--series", default="kube-proxy-iptables", help="a Service-count series of local-cilium")
    p.add_argument("--count", type=int, default=2000, help="the larger count (default 2000)")
    p.add_argument("--blocks", type=int, default=2, help="transitions per mode and direction (default 2)")
    p.add_argument("--seed", type=int, default=16)
    args = p.parse_args()
    env = load_environment("local-cilium")
    small, large = f"{args.series}-4", f"{args.series}-{args.count}"
    if small not in env.scenarios:
        raise SystemExit(f"filler_freeze: local-cilium has no scenario {small}")
    base = env.scenarios[small]
    scenarios = {small: base, large: base.model_copy(update={"services": args.count})}
    env = env.model_copy(update={"scenarios": scenarios})
    proxies = list(env.kubernetes.quiet.service_proxies)  # pyright: ignore[reportOptionalMemberAccess]
    rng = random.Random(args.seed)
    times: dict[tuple[str, str], list[dict]] = {}
    frozen: set[str] = set()
    target = KubernetesTarget(env, list(scenarios), collectors.servers(["netperf"]), log=lambda m: None)
    start_load, t0 = loadavg(), time.monotonic()
    print(f"loadavg before: {start_load}", flush=True)
    with target:
        target.activate(small)
        for block in range(args.blocks):
            modes = ["frozen", "plain"]
            rng.shuffle(modes)
            for mode in modes:
                target.service_proxies = proxies if mode == "frozen" else []
                for direction, scenario in (("up", large), ("down", small)):
                    start = time.monotonic()
                    target.activate(scenario)
                    d = target.placement(scenario).details
                    q = d.get("fillers_quiet") or {}
                    frozen |= set(q.get("frozen", {}))
                    row = {"activate_s": time.monotonic() - start, "fillers_s": d["fillers_s"]}
                    row["programmed_s"] = d.get("programmed_s", 0.0)
                    times.setdefault((mode, direction), []).append(row)
                    print(
                        f"block {block + 1} {mode:<6} {direction:<4} activate {row['activate_s']:6.1f} s"
                        f"  fillers {row['fillers_s']:6.1f} s  programmed {row['programmed_s']:5.1f} s"
                        f"  ({time.monotonic() - t0:.0f} s in)",
                        flush=True,
                    )
    print(f"\nloadavg before: {start_load}   after: {loadavg()}   wall: {time.monotonic() - t0:.0f} s")
    print(f"{args.series}: 4 <-> {args.count} Services; frozen while writing: {', '.join(sorted(frozen))}")
    print(f"\n{'mode':<7} {'dir':<5} {'n':>2} {'activate s':>11} {'fillers s':>10} {'programmed s':>13}")
    for (mode, direction), rows in sorted(times.items()):
        med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        print(
            f"{mode:<7} {direction:<5} {len(rows):>2} {med['activate_s']:>11.1f} {med['fillers_s']:>10.1f}"
            f" {med['programmed_s']:>13.1f}"
        )


if __name__ == "__main__":
    main()
