"""Benchmark 1: the lab's `host` path against loopback, the machine's limit for it.

The same netperf command line (the collector's, same -T pinning, same
duration) runs alternately in the lab (client node -> veth wire -> server
node) and over 127.0.0.1 in the root namespace, ABAB..., and the medians are
compared. Loopback has no veth hop, so it bounds what the lab can reach.
Root-namespace loopback has a 65536-byte MTU while the lab's wire has 1500, so
a third side, loopback at MTU 1500 (the lab server node's own `lo`, set to
1500 for this benchmark), separates the cost of the MTU from that of the hop.

    uv run python benchmarks/fidelity.py [--reps 6] [--duration 2]
"""

from __future__ import annotations

import argparse
import subprocess

from common import LOOPBACK_PORT, figure, loopback_netserver, median, run_netperf

from benchlib.collectors import netperf
from benchlib.measure import runner
from benchlib.settings.loading import load_environment
from benchlib.targets.lab import LabTarget

TESTS = {"TCP_STREAM": ("throughput", 65536, "Gbit/s"), "TCP_RR": ("transaction_rate", 1, "/s")}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=6)
    p.add_argument("--duration", type=int, default=2)
    args = p.parse_args()
    with runner.serving(
        LabTarget(load_environment("local-lab"), ["host"], servers=[netperf.SERVER], log=lambda m: None)
    ) as lab:
        pl = lab.placement("host")
        server_ns = lab.namespace("host", "server")
        subprocess.run(["ip", "-n", server_ns, "link", "set", "lo", "mtu", "1500"], check=True)
        with loopback_netserver(pl.server_cpus) as loopback:
            where = {
                "lab": (["ip", "netns", "exec", lab.namespace("host", "client")], pl.server_address, netperf.PORT),
                "loopback": ([], loopback, LOOPBACK_PORT),
                "loopback-mtu1500": (["ip", "netns", "exec", server_ns], "127.0.0.1", netperf.PORT),
            }
            values = {(kind, side): [] for kind in TESTS for side in where}
            for rep in range(args.reps):
                for kind, (metric, size, _) in TESTS.items():
                    # rotate which side goes first, so none always follows another
                    sides = list(where)[rep % 3 :] + list(where)[: rep % 3]
                    for side in sides:
                        prefix, host, port = where[side]
                        m = run_netperf(prefix, kind, host, args.duration, size, pl.client_cpus, pl.server_cpus, port)
                        values[(kind, side)].append(m[metric])
    print(
        f"fidelity: {args.reps} interleaved reps x {args.duration} s, client CPUs {pl.client_cpus}, "
        f"server CPUs {pl.server_cpus}"
    )
    for kind, (_, _, unit) in TESTS.items():
        medians = {}
        for side in where:
            runs = values[(kind, side)]
            print(f"  {kind} {side:<17} runs: " + " ".join(f"{v:.4g}" for v in runs))
            medians[side] = median(runs)
            figure(f"{kind} {side} median", medians[side], unit)
        figure(
            f"{kind} ratio lab/loopback",
            medians["lab"] / medians["loopback"],
            "",
            ">= 0.9" if kind == "TCP_STREAM" else "",
        )
        figure(f"{kind} ratio lab/loopback-mtu1500", medians["lab"] / medians["loopback-mtu1500"])


if __name__ == "__main__":
    main()
