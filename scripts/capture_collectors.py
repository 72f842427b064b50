"""Capture real iperf3, fortio and dnsperf output into tests/fixtures/<tool>/.

Run as root from the project root: `uv run python scripts/capture_collectors.py [iperf3|fortio|dns ...]`.
Builds the lab's host scenario with the three servers, runs the commands
benchlib builds (plus the error cases a user meets), and saves stdout, stderr
and the exit code exactly as the tools printed them.
"""

import json
import sys
import time
from pathlib import Path

from benchlib import collectors
from benchlib.collectors import dns, fortio, iperf3
from benchlib.measure import runner
from benchlib.settings.loading import load_environment
from benchlib.targets.lab import LabTarget

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures"
NOWHERE = "198.18.0.99"  # on the lab wire, nobody there


def save(tool: str, name: str, proc, argv: list[str]) -> None:
    out, err = proc.communicate(timeout=60)
    d = FIXTURES / tool
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{name}.stdout").write_bytes(out)
    (d / f"{name}.stderr").write_bytes(err)
    (d / f"{name}.json").write_text(json.dumps({"argv": argv, "returncode": proc.returncode}, indent=1) + "\n")
    print(f"{tool}/{name}: rc={proc.returncode} {len(out)} bytes")


def capture_iperf3(lab, host, c, s) -> None:
    def run(name, argv):
        save("iperf3", name, lab.spawn("host", "client", argv), argv)

    run("tcp_stream", iperf3.command("TCP_STREAM", host, 1, 1, None, None, c, s).argv)
    run("tcp_stream_4", iperf3.command("TCP_STREAM", host, 1, 4, None, None, c, s).argv)
    run("udp_bitrate", iperf3.command("UDP_STREAM", host, 1, 1, 1400, "500M", c, s).argv)
    run("udp_unlimited", iperf3.command("UDP_STREAM", host, 1, 1, 1400, "unlimited", c, s).argv)
    run("error_no_server", iperf3.command("TCP_STREAM", NOWHERE, 1, 1, None, None, c, s).argv)
    # A second client while the server runs a test: iperf3 serves one at a time.
    first = iperf3.command("TCP_STREAM", host, 3, 1, None, None, c, s).argv
    busy = lab.spawn("host", "client", first)
    time.sleep(1)
    run("error_server_busy", iperf3.command("TCP_STREAM", host, 1, 1, None, None, c, s).argv)
    busy.communicate(timeout=30)


def capture_fortio(lab, host, c, s) -> None:
    def run(name, argv):
        save("fortio", name, lab.spawn("host", "client", argv), argv)

    run("keepalive_1000", fortio.command(host, 1, 1000, 1, False, [c], [s]).argv)
    run("close_1000", fortio.command(host, 1, 1000, 1, True, [c], [s]).argv)
    run("keepalive_max", fortio.command(host, 1, "max", 2, False, [c], [s]).argv)
    # The echo server answers 503 to 10 % of the requests when asked to.
    argv = fortio.command(host, 1, 1000, 1, False, [c], [s]).argv
    argv[-1] += "?status=503:10"
    run("errors_503", argv)
    run("error_no_server", fortio.command(host, 1, 1000, 1, False, [c], [s], port=9999).argv)


def capture_dns(lab, host, c, s) -> None:
    def run(name, argv):
        save("dns", name, lab.spawn("host", "client", argv), argv)

    run("udp_1000", dns.command("DNS_UDP", host, 1, 1000, 1, [c], [s]).argv)
    # A name the server does not know: dnsmasq without upstream refuses it.
    argv = dns.command("DNS_UDP", host, 1, 200, 1, [c], [s]).argv
    argv[-1] = argv[-1].replace(dns.NAME, "unknown.example")
    run("error_refused", argv)
    run("error_no_server", dns.command("DNS_UDP", host, 1, 200, 1, [c], [s], port=5353).argv)


CAPTURES = {"iperf3": capture_iperf3, "fortio": capture_fortio, "dns": capture_dns}


def main() -> None:
    tools = sys.argv[1:] or list(CAPTURES)
    with runner.serving(LabTarget(load_environment("local-lab"), ["host"], servers=collectors.servers(tools))) as lab:
        pl = lab.placement("host")
        for tool in tools:
            CAPTURES[tool](lab, pl.server_address, pl.client_cpus[0], pl.server_cpus[0])


if __name__ == "__main__":
    main()
