"""Benchmark 6: benchlib against flent, the same netperf test on the same lab path.

flent drives netperf itself (its `netperf_demo` runner: `netperf -P 0 -v 0
-D -0.20 -4 -H <host> -t TCP_STREAM -l <len> -F /dev/urandom -f m -- -k ...`,
demo-mode interim results every 0.2 s) and supports TCP_STREAM, TCP_MAERTS
and UDP_RR only, so the shared test is a single TCP_STREAM (our tcp_stream_1).
flent has no namespace support: the whole flent process runs in the lab's
client namespace (`ip netns exec`) against the netserver the lab started.
flent does not pin netperf (no -T), so it runs under `taskset` on the lab's
client CPUs: both clients then share the CPUs benchlib's -T gives its own.

Each repetition runs benchlib's measure + record write and a flent run,
alternating which goes first; reported: median throughput of each and the
run-to-run spread, and the wall time per run.

    uv run --group bench python benchmarks/peer.py [--reps 6] [--duration 2]
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import figure, median

from benchlib.collectors import netperf
from benchlib.measure import runner
from benchlib.measure.plan import RunSpec
from benchlib.records import layout
from benchlib.settings.loading import load_environment
from benchlib.targets.lab import LabTarget

FLENT = Path(sys.executable).parent / "flent"


def ours(lab: LabTarget, spec: netperf.Spec, raw: Path, rep: int) -> tuple[float, float]:
    """(throughput Gbit/s, wall s) of one benchlib run, its raw record written as collect writes it."""
    run = RunSpec("local-lab", "host", "tcp_stream_1", spec, rep, rep)
    t0 = time.monotonic()
    attempt = runner.measure(lab, run, trim_s=0.3)
    runner.to_record("peer", run, [attempt], {"clk_tck": 100, "versions": {}}).write(layout.campaign_dir("peer", raw))
    wall = time.monotonic() - t0
    if attempt.outcome != "ok":
        raise RuntimeError(f"benchlib run failed: {attempt.reason}")
    return netperf.parse(spec.kind, [r.stdout for r in attempt.results])["throughput"], wall


def flent(lab: LabTarget, duration: int, data_dir: Path) -> tuple[float, float]:
    """(throughput Gbit/s, wall s) of one flent tcp_1up_noping run: netperf's final THROUGHPUT."""
    before = set(data_dir.glob("*.flent.gz"))
    t0 = time.monotonic()
    pl = lab.placement("host")
    subprocess.run(
        [
            "ip",
            "netns",
            "exec",
            lab.namespace("host", "client"),
            "taskset",
            "-c",
            ",".join(map(str, pl.client_cpus)),
            str(FLENT),
            "tcp_1up_noping",
            "-H",
            pl.server_address,
            "-l",
            str(duration),
            "-D",
            str(data_dir),
            "-f",
            "summary",
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    wall = time.monotonic() - t0
    (new,) = set(data_dir.glob("*.flent.gz")) - before
    data = json.loads(gzip.decompress(new.read_bytes()))
    mbps = data["metadata"]["SERIES_META"]["TCP upload"]["MEAN_VALUE"]
    return mbps / 1000.0, wall


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=6)
    p.add_argument("--duration", type=int, default=2)
    args = p.parse_args()
    spec = netperf.Spec(tool="netperf", kind="TCP_STREAM", duration_s=args.duration, streams=1, message_size=65536)
    results = {"benchlib": [], "flent": []}
    with (
        tempfile.TemporaryDirectory(prefix="bench-peer-") as tmp,
        runner.serving(
            LabTarget(load_environment("local-lab"), ["host"], servers=[netperf.SERVER], log=lambda m: None)
        ) as lab,
    ):
        for rep in range(args.reps):
            order = ("benchlib", "flent") if rep % 2 == 0 else ("flent", "benchlib")
            for who in order:
                results[who].append(
                    ours(lab, spec, Path(tmp), rep) if who == "benchlib" else flent(lab, args.duration, Path(tmp))
                )
    print(f"peer: TCP_STREAM 1 stream, {args.duration} s, lab scenario host, {args.reps} interleaved reps")
    for who, rows in results.items():
        tput = [t for t, _ in rows]
        print(f"  {who:<8} runs (Gbit/s): " + " ".join(f"{t:.3g}" for t in tput))
        figure(f"{who} throughput median", median(tput), "Gbit/s")
        figure(f"{who} throughput min..max spread", (max(tput) - min(tput)) / median(tput) * 100, "% of median")
        figure(f"{who} wall per run median", median([w for _, w in rows]), "s")
    ratio = median([t for t, _ in results["benchlib"]]) / median([t for t, _ in results["flent"]])
    figure("throughput ratio benchlib/flent", ratio)


if __name__ == "__main__":
    main()
