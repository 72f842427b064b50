"""A synthetic campaign of raw records, for the scale benchmark.

Every record is a ``benchlib.records.record.RunRecord`` written by its own ``write``
(so meta.json, cpu.json and SHA256SUMS are exactly what a real campaign holds), around tool
output that netperf really printed (tests/fixtures/netperf), with the numbers
varied run to run. About 1 % of the runs are failures carrying netperf's real
"no netserver" output.

    uv run python benchmarks/synth.py --runs 100000 --out /tmp/synth
"""

from __future__ import annotations

import argparse
import random
import re
import shutil
import sys
import time
from pathlib import Path

from benchlib.collectors import netperf
from benchlib.host import cpu
from benchlib.records import layout, record

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "netperf"
TESTS = {
    "tcp_stream_1": netperf.Spec(tool="netperf", kind="TCP_STREAM", duration_s=2, streams=1, message_size=65536),
    "tcp_stream_n": netperf.Spec(tool="netperf", kind="TCP_STREAM", duration_s=2, streams=4, message_size=65536),
    "tcp_rr": netperf.Spec(tool="netperf", kind="TCP_RR", duration_s=2, message_size=1),
    "tcp_crr": netperf.Spec(tool="netperf", kind="TCP_CRR", duration_s=2, message_size=1),
}
FIXTURE_OF = {"TCP_STREAM": "tcp_stream", "TCP_RR": "tcp_rr", "TCP_CRR": "tcp_crr"}
# the values that vary from run to run; the rest of netperf's output stays as printed
VARIED = re.compile(r"^(THROUGHPUT|MIN_LATENCY|P50_LATENCY|P90_LATENCY|P99_LATENCY|MEAN_LATENCY)=(.*)$", re.M)
TARGET_INFO = {
    "target": "lab",
    "lab_id": "bl-synthetic_0",
    "versions": {"kernel": "6.1.0-synthetic", "iproute2": "ip utility, iproute2-6.1.0", "netperf": "2.7.0"},
    "clk_tck": 100,
}
CLIENT_CPUS, SERVER_CPUS = [0], [1]


def _vary(stdout: str, factor: float) -> str:
    """Throughput scales with factor, latencies inversely, as a faster or slower run would print."""

    def repl(m: re.Match) -> str:
        value = float(m.group(2))
        value = value * factor if m.group(1) == "THROUGHPUT" else value / factor
        return f"{m.group(1)}={value:.2f}"

    return VARIED.sub(repl, stdout)


def _snapshots(rng: random.Random, t0: float, duration: float) -> tuple[cpu.Snapshot, cpu.Snapshot]:
    start = {c: [rng.randrange(10**5, 10**6) for _ in cpu.FIELDS] for c in (0, 1)}
    end = {}
    for c, counters in start.items():
        busy = rng.uniform(0.3, 1.0) * duration * TARGET_INFO["clk_tck"]
        user, system, softirq = int(busy * 0.3), int(busy * 0.4), int(busy * 0.3)
        idle = int(duration * TARGET_INFO["clk_tck"] - busy)
        end[c] = [v + d for v, d in zip(counters, (user, 0, system, idle, 0, 0, softirq, 0, 0, 0), strict=True)]
    return cpu.Snapshot(t0, t0, start), cpu.Snapshot(t0 + duration, t0 + duration, end)


def scenario_names(n: int) -> list[str]:
    """host first (the analysis baseline), then a sweep of scenarios."""
    return ["host"] + [f"scenario-{i:03d}" for i in range(1, n)]


def generate(out: Path, runs: int, scenarios: int = 25, seed: int = 0, campaign: str = "synthetic") -> Path:
    """Write ``runs`` records (scenarios x 4 tests x blocks) below out/<campaign>; returns the campaign dir."""
    rng = random.Random(seed)
    cdir = layout.campaign_dir(campaign, out)
    names = scenario_names(scenarios)
    configs = [(s, t) for s in names for t in TESTS]
    blocks = -(-runs // len(configs))
    stdout = {kind: (FIXTURES / f"{name}.stdout").read_text() for kind, name in FIXTURE_OF.items()}
    failed_stdout = (FIXTURES / "error_no_server.stdout").read_text()
    level = {s: rng.uniform(0.5, 1.5) for s in names}  # each scenario's own speed
    t = 1.7e9
    order = 0
    for block in range(blocks):
        rng.shuffle(configs)
        for scenario, test in configs:
            if order == runs:
                return cdir
            spec = TESTS[test]
            invocations = netperf.build(spec, "198.18.0.2", CLIENT_CPUS, SERVER_CPUS)
            if rng.random() < 0.01:
                exit_code, outputs = 255, [record.Output(failed_stdout.encode(), b"")] * len(invocations)
                outcome, reason = "failed", "netperf stream 0 exited 255: " + failed_stdout.splitlines()[-1]
            else:
                exit_code = 0
                outputs = [
                    record.Output(_vary(stdout[spec.kind], level[scenario] * rng.lognormvariate(0, 0.08)).encode(), b"")
                    for _ in invocations
                ]
                outcome, reason = "ok", None
            first, last = _snapshots(rng, t, spec.duration_s - 0.6)
            record.RunRecord(
                campaign=campaign,
                environment="local-lab",
                scenario=scenario,
                test=test,
                block=block,
                order=order,
                tool=spec.tool,
                kind=spec.kind,
                test_params=spec.test_params(),
                commands=[inv.argv for inv in invocations],
                exit_codes=[exit_code] * len(invocations),
                started_at=record.utc(t),
                ended_at=record.utc(t + netperf.expected_wall_s(spec)),
                placement={
                    "server_address": "198.18.0.2",
                    "client_node": "n1",
                    "server_node": "n2",
                    "client_cpus": CLIENT_CPUS,
                    "server_cpus": SERVER_CPUS,
                    "topology": "host",
                },
                target=TARGET_INFO,
                clk_tck=TARGET_INFO["clk_tck"],
                cpu={
                    "client": record.SideCpu("n1", CLIENT_CPUS, first, last),
                    "server": record.SideCpu("n2", SERVER_CPUS, first, last),
                },
                attempts=(record.Attempt(outcome, reason, record.utc(t), tuple(outputs)),),
            ).write(cdir)
            t += netperf.expected_wall_s(spec) + 0.1
            order += 1
    return cdir


def generate_once(out: Path, runs: int, scenarios: int = 25) -> Path:
    """The campaign under out, generated only if it does not hold ``runs`` records yet."""
    cdir = layout.campaign_dir("synthetic", out)
    if not (cdir.is_dir() and sum(1 for _ in layout.walk(cdir)) == runs):
        shutil.rmtree(cdir, ignore_errors=True)
        generate(out, runs, scenarios)
    return cdir


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=100_000)
    p.add_argument("--scenarios", type=int, default=25)
    p.add_argument("--out", type=Path, required=True, help="raw root; records go to OUT/synthetic/")
    args = p.parse_args(argv)
    t0 = time.monotonic()
    cdir = generate(args.out, args.runs, args.scenarios)
    print(f"synth: {args.runs} records in {cdir} ({time.monotonic() - t0:.1f} s)", file=sys.stderr)


if __name__ == "__main__":
    main()
