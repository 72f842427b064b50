"""Capture real netperf output into tests/fixtures/netperf/ for the parser tests, and real
`perf script` output of TCP_RR into tests/fixtures/perf/ for benchlib.profiling.stacks' tests.

Run as root from the project root: `uv run python scripts/capture_fixtures.py`.
Builds the lab's host scenario, runs the commands benchlib builds (plus the
error cases a user meets), and saves stdout, stderr and the exit code exactly
as the tool printed them. Then, in host and veth-routed, records a 2 s TCP_RR
with perf as a profiled run does and saves what `perf script` printed, gzipped.
"""

import gzip
import json
import subprocess
import sys
from pathlib import Path

from benchlib.collectors import netperf
from benchlib.measure import runner
from benchlib.profiling import perf_record, stacks
from benchlib.settings.loading import load_environment
from benchlib.targets.lab import LabTarget

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "netperf"
PERF_OUT = OUT.parent / "perf"
PERF_SCENARIOS = ["host", "veth-routed"]


def save(name: str, proc: subprocess.Popen, argv: list[str]) -> None:
    out, err = proc.communicate(timeout=60)
    (OUT / f"{name}.stdout").write_bytes(out)
    (OUT / f"{name}.stderr").write_bytes(err)
    (OUT / f"{name}.json").write_text(json.dumps({"argv": argv, "returncode": proc.returncode}, indent=1) + "\n")
    print(f"{name}: rc={proc.returncode} {len(out)} bytes")


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    env = load_environment("local-lab")
    with runner.serving(LabTarget(env, ["host"], servers=[netperf.SERVER])) as lab:
        pl = lab.placement("host")
        cases = {
            "tcp_stream": ("TCP_STREAM", 65536),
            "tcp_rr": ("TCP_RR", 1),
            "tcp_crr": ("TCP_CRR", 1),
        }
        for name, (kind, size) in cases.items():
            inv = netperf.commands(kind, pl.server_address, 1, 1, size, pl.client_cpus, pl.server_cpus)[0]
            save(name, lab.spawn("host", "client", inv.argv), inv.argv)
        # What netperf prints when nothing listens at the address.
        argv = netperf.commands("TCP_RR", "198.18.0.99", 1, 1, 1, pl.client_cpus, pl.server_cpus)[0].argv
        save("error_no_server", lab.spawn("host", "client", argv), argv)
        # An output selector netperf does not know.
        argv = ["netperf", "-H", pl.server_address, "-t", "TCP_STREAM", "-l", "1", "-P", "0", "--", "-k", "NO_SUCH_KEY"]
        save("error_bad_selector", lab.spawn("host", "client", argv), argv)
        # The classic (non keyval) output, which the parser must refuse.
        argv = ["netperf", "-H", pl.server_address, "-t", "TCP_STREAM", "-l", "1"]
        save("classic_output", lab.spawn("host", "client", argv), argv)


def capture_perf(out: Path = PERF_OUT) -> None:
    """tcp_rr-<scenario>.script.gz: `perf script -F stacks.PERF_SCRIPT_FIELDS` of a TCP_RR's CPUs."""
    out.mkdir(parents=True, exist_ok=True)
    version = perf_record.check_plan("lab", True)
    env = load_environment("local-lab")
    with runner.serving(LabTarget(env, PERF_SCENARIOS, servers=[netperf.SERVER])) as lab:
        for scenario in PERF_SCENARIOS:
            pl = lab.placement_for(scenario, "TCP_RR")
            inv = netperf.commands("TCP_RR", pl.server_address, 2, 1, 1, pl.client_cpus, pl.server_cpus)[0]
            recorder = perf_record.Recorder({"client": pl.client_cpus, "server": pl.server_cpus}, 499, version)
            try:
                recorder.start()
                proc = lab.spawn(scenario, "client", inv.argv)
                proc.communicate(timeout=60)
                recorder.stop()
                recorder.finish()
                script = subprocess.run(
                    ["perf", "script", "-F", stacks.PERF_SCRIPT_FIELDS, "-i", str(recorder.data)],
                    capture_output=True,
                    check=True,
                    timeout=perf_record.SCRIPT_TIMEOUT_S,
                ).stdout
            finally:
                recorder.close()
            path = out / f"tcp_rr-{scenario}.script.gz"
            path.write_bytes(gzip.compress(script, mtime=0))
            print(f"{path}: {len(script)} bytes, {sum(stacks.fold(script.decode(errors='replace')).values())} samples")


if __name__ == "__main__":
    if "--perf-only" not in sys.argv[1:]:
        main()
    capture_perf(Path(sys.argv[sys.argv.index("--perf-out") + 1]) if "--perf-out" in sys.argv else PERF_OUT)
