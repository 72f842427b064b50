"""Small helpers the benchmark scripts share."""

from __future__ import annotations

import statistics
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

from benchlib.collectors import netperf

LOOPBACK_PORT = 22865  # the root namespace's netserver; the lab's listen on 12865 inside their namespaces


def figure(name: str, value: float, unit: str = "", target: str = "") -> None:
    """One result line, the format BENCHMARKS.md quotes."""
    suffix = f"   (target {target})" if target else ""
    print(f"{name:<44} {value:>12.4g} {unit}{suffix}", flush=True)


def median(values) -> float:
    return statistics.median(values)


def loadavg() -> str:
    """The 1, 5 and 15 min load averages: a shared machine's load is part of a result."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


@contextmanager
def loopback_netserver(cpus: list[int]):
    """A netserver on 127.0.0.1 in the root namespace, pinned as the lab pins its servers."""
    proc = subprocess.Popen(
        [
            "taskset",
            "-c",
            ",".join(map(str, cpus)),
            "netserver",
            "-D",
            "-4",
            "-L",
            "127.0.0.1",
            "-p",
            str(LOOPBACK_PORT),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while (
            f":{LOOPBACK_PORT}"
            not in subprocess.run(["ss", "-Hltn", f"sport = :{LOOPBACK_PORT}"], capture_output=True, text=True).stdout
        ):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"loopback netserver did not listen on port {LOOPBACK_PORT}")
            time.sleep(0.05)
        yield "127.0.0.1"
    finally:
        proc.terminate()
        proc.wait()


def run_netperf(
    prefix: list[str],
    kind: str,
    host: str,
    duration_s: int,
    message_size: int,
    client_cpus: list[int],
    server_cpus: list[int],
    port: int = netperf.PORT,
) -> dict[str, float]:
    """One single-stream netperf run (the collector's own command line) and its parsed metrics."""
    (inv,) = netperf.commands(kind, host, duration_s, 1, message_size, client_cpus, server_cpus, port)
    proc = subprocess.run(prefix + inv.argv, capture_output=True, text=True, timeout=duration_s + 30)
    if proc.returncode != 0:
        raise RuntimeError(f"netperf failed ({proc.returncode}): {proc.stdout.strip()} {proc.stderr.strip()}")
    return netperf.parse(kind, [proc.stdout])
