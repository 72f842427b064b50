"""DNS resolution with dnsperf: command builder and parser of its verbose output.

dnsperf 2.10 (Debian 12) prints only the average, min and max latency in its
summary, so the client runs with ``-v``, which prints one line per query
(``> NOERROR name A 0.000318``, latency in seconds, or ``> T name A`` for a
query unanswered after TIMEOUT_S); the percentiles come from those lines,
queries/s from the summary. When the time limit stops dnsperf, the queries
still outstanding are printed as timeouts after the last answer: those are
not failures, so only timeouts before the last answer count as errors.
At a fixed ``qps`` (``-Q``) the latency is the resolution latency; at ``max``
dnsperf keeps 100 queries outstanding, so it includes queueing.

The server side answers one name: in the lab a dnsmasq started by the target
(no upstream; the name answered from its own host record); in a cluster
the cluster DNS, which answers the same name.
"""

from __future__ import annotations

import math
import re
import typing
from collections.abc import Sequence
from typing import Literal

from .base import Invocation, PacedSpec, ParseError, Server, finite, text, utf8

# Over TCP, dnsperf 2.10 against dnsmasq (which closes connections) intermittently
# dies with "failed to receive packet: Bad file descriptor", so UDP only.
Kind = Literal["DNS_UDP"]
KINDS = typing.get_args(Kind)
PORT = 53
NAME = "kubernetes.default.svc.cluster.local"
ANSWER = "198.18.0.2"  # a lab address; nothing connects to it
SERVER = Server(
    "dnsmasq",
    [
        "dnsmasq",
        "--keep-in-foreground",
        "--conf-file=/dev/null",
        "--no-resolv",
        "--no-hosts",
        "--pid-file=",
        "--user=root",
        "--log-facility=-",
        f"--port={PORT}",
        f"--host-record={NAME},{ANSWER}",
    ],
    PORT,
    "udp",
)
VERSION_COMMAND = ["dnsperf", "-h"]
PROGRAMS = {"dnsperf": ("lab", "apt-get install dnsperf"), "dnsmasq": ("lab", "apt-get install dnsmasq-base")}
TIMEOUT_S = 1  # a query unanswered for this long is lost (dnsperf's default, 5 s, outlasts short runs)

_ANSWER = re.compile(r"^> (\S+) (\S+) (\S+) (\d+\.\d+)$")
_TIMEOUT = re.compile(r"^> T (\S+) (\S+)$")
_QPS = re.compile(r"^\s*Queries per second:\s+(\S+)$", re.M)


class Spec(PacedSpec):
    """A dnsperf test."""

    tool: Literal["dns"]
    kind: Kind


def warmup_s(spec: Spec) -> float:
    """Seconds the tool runs before its measured interval starts."""
    return 0.0


def expected_wall_s(spec: Spec) -> float:
    return spec.duration_s


def server_wait_s(spec: Spec) -> float:
    return 0.0


def build(spec: Spec, host: str, client_cpus: list[int], server_cpus: list[int]) -> list[Invocation]:
    """The command line of one run: one dnsperf process with ``streams`` client sockets."""
    return [command(spec.kind, host, spec.duration_s, spec.qps, spec.streams, client_cpus, server_cpus)]


def command(
    kind: str,
    host: str,
    duration_s: float,
    qps: int | str,
    clients: int,
    client_cpus: list[int],
    server_cpus: list[int],
    port: int = PORT,
) -> Invocation:
    if kind not in KINDS:
        raise ValueError(f"dns: unsupported test kind {kind!r}; allowed: {list(KINDS)}")
    if qps != "max" and not (isinstance(qps, int) and qps > 0):
        raise ValueError(f"dns: qps must be a positive integer or 'max', got {qps!r}")
    if not re.fullmatch(r"[\w.:-]+", host):  # it goes into a shell command line
        raise ValueError(f"dns: {host!r} is not an address or host name")
    dnsperf = [
        "taskset",
        "-c",
        ",".join(map(str, client_cpus)),
        "dnsperf",
        "-s",
        host,
        "-p",
        str(port),
        "-m",
        "udp",
        "-l",
        f"{duration_s:g}",
        "-t",
        str(TIMEOUT_S),
        "-c",
        str(clients),
        "-v",
    ]
    if qps != "max":
        dnsperf += ["-Q", str(qps)]
    # dnsperf reads queries from stdin and, at its end, rewinds it ("cannot
    # reread input" from a pipe): an endless `yes` feeds it instead, so the
    # command stays one argv any target (netns, pod, ssh) runs without a file.
    script = f"yes '{NAME} A' | exec {' '.join(dnsperf)}"
    return Invocation(["sh", "-c", script], client_cpus[0], server_cpus[0])


def _percentile(sorted_values: list[float], p: float) -> float:
    """Linear interpolation between closest ranks (numpy's default method)."""
    pos = (len(sorted_values) - 1) * p / 100
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def parse(kind: str, stdouts: Sequence[bytes | str]) -> dict[str, float]:
    """Latency p50/p99 (us) of the answered queries, queries/s, and errors
    (answers other than NOERROR, and queries lost before the last answer)."""
    if kind not in KINDS:
        raise ParseError(f"dns: unknown test kind {kind!r}")
    if len(stdouts) != 1:
        raise ParseError(f"dns: expected the output of one process, got {len(stdouts)}")
    out = text(stdouts[0])
    if "Statistics:" not in out:
        raise ParseError("dnsperf printed no statistics (it did not run to the end)")
    latencies, errors, pending_timeouts = [], 0, 0
    ascii_only = out.isascii()  # almost always: then no line needs looking at for stray bytes
    for n, line in enumerate(out.splitlines(), start=1):
        if not ascii_only and line.startswith("> "):  # a query's line: every field of it counts
            utf8("dnsperf", f"query line {n}", line)
        if m := _ANSWER.match(line):
            errors += pending_timeouts  # an answer came after them: they were lost, not cut off
            pending_timeouts = 0
            if m.group(1) == "NOERROR":
                latencies.append(_number(f"latency of query line {n}", m.group(4)))
            else:
                errors += 1
        elif _TIMEOUT.match(line):
            pending_timeouts += 1
    if not latencies:
        raise ParseError(
            f"dnsperf: no query was answered with NOERROR ({errors} errors, "
            f"{pending_timeouts} timeouts); "
            "was it run with -v against a server that knows the name?"
        )
    qps = _QPS.search(out)
    if not qps:
        raise ParseError("dnsperf output lacks 'Queries per second'")
    latencies.sort()
    return finite(
        "dnsperf",
        {
            "dns_qps": _number("Queries per second", utf8("dnsperf", "Queries per second", qps.group(1))),
            "dns_latency_p50": _percentile(latencies, 50) * 1e6,
            "dns_latency_p99": _percentile(latencies, 99) * 1e6,
            "dns_errors": float(errors),
        },
    )


def _number(field: str, value: str) -> float:
    """A finite non-negative number dnsperf printed (seconds, or queries per second)."""
    try:
        number = float(value)
    except ValueError:
        raise ParseError(f"dnsperf {field}: {value[:40]!r} is not a number") from None
    if not math.isfinite(number) or number < 0:  # 400 digits read as inf
        raise ParseError(f"dnsperf {field}: {value[:40]!r} is not a finite non-negative number")
    return number


def version(stdout: str) -> str:
    """'... Version 2.10.0' (the last line of ``dnsperf -h``) -> '2.10.0'."""
    m = re.search(r"^Version (\S+)", stdout, re.M)
    return m.group(1) if m else ""
