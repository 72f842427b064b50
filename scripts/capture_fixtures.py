"""Capture real netperf output into tests/fixtures/netperf/ for the parser tests.

Run as root from the project root: `uv run python scripts/capture_fixtures.py`.
Builds the lab's host scenario, runs the commands benchlib builds (plus the
error cases a user meets), and saves stdout, stderr and the exit code exactly
as the tool printed them.
"""
import json
import subprocess
from pathlib import Path

from benchlib import runner
from benchlib.collectors import netperf
from benchlib.config import load_environment
from benchlib.targets.lab import LabTarget

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "netperf"


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


if __name__ == "__main__":
    main()
