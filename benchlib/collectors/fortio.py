"""fortio HTTP load at a fixed QPS against a fortio echo server: builder and JSON parser.

The client runs ``fortio load -json -`` (the JSON result on stdout, logs on
stderr) at the test's ``qps`` (or ``max``: fortio's ``-qps 0``, no pacing)
over ``streams`` connections, with keep-alive or, with ``connection_close``,
a new connection per request (fortio then sends ``Connection: close``).

The command is plain ``fortio``, found on PATH wherever the client runs: in
a pod (the benchmark image has it in /usr/bin), on an SSH host, or in the lab,
where ``benchlib`` puts the checkout's ``.tools/bin`` (scripts/setup.sh installs
fortio there) first on PATH.
"""

from __future__ import annotations

import typing
from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from .base import Invocation, PacedSpec, ParseError, Server, finite, json_document, json_get, json_number, text

Kind = Literal["HTTP"]
KINDS = typing.get_args(Kind)
PORT = 8080
BINARY = "fortio"
# Only the HTTP echo server: the gRPC, redirect, TCP/UDP echo servers and the UI stay off.
SERVER = Server(
    "fortio",
    [
        BINARY,
        "server",
        "-http-port",
        str(PORT),
        "-grpc-port",
        "disabled",
        "-redirect-port",
        "disabled",
        "-tcp-port",
        "disabled",
        "-udp-port",
        "disabled",
        "-ui-path",
        "",
    ],
    PORT,
    l7="http",
)
VERSION_COMMAND = [BINARY, "version"]
PROGRAMS = {BINARY: ("mesh", "go install fortio.org/fortio into .tools/bin; needs go")}
# fortio's latency histogram has 1 ms buckets at the low end by default: a
# pod-to-pod request takes well under 1 ms, so its percentiles would be
# interpolated inside the first bucket (p99 ~ 0.99 ms whatever happened).
# 10 us buckets resolve them.
RESOLUTION_S = 0.00001
PERCENTILES = {50.0: "http_latency_p50", 90.0: "http_latency_p90", 99.0: "http_latency_p99", 99.9: "http_latency_p999"}


class Spec(PacedSpec):
    """A fortio HTTP load test."""

    tool: Literal["fortio"]
    kind: Kind
    connection_close: bool = Field(
        False, description=("a new connection per request (Connection: close) instead of keep-alive")
    )


def warmup_s(spec: Spec) -> float:
    """Seconds the tool runs before its measured interval starts."""
    return 0.0


def expected_wall_s(spec: Spec) -> float:
    return spec.duration_s


def server_wait_s(spec: Spec) -> float:
    return 0.0


def build(spec: Spec, host: str, client_cpus: list[int], server_cpus: list[int]) -> list[Invocation]:
    """The command line of one run of a test: one fortio process with ``streams`` connections."""
    return [command(host, spec.duration_s, spec.qps, spec.streams, spec.connection_close, client_cpus, server_cpus)]


def command(
    host: str,
    duration_s: float,
    qps: int | str,
    connections: int,
    connection_close: bool,
    client_cpus: list[int],
    server_cpus: list[int],
    port: int = PORT,
) -> Invocation:
    if qps != "max" and not (isinstance(qps, int) and qps > 0):
        raise ValueError(f"fortio: qps must be a positive integer or 'max', got {qps!r}")
    argv = [
        "taskset",
        "-c",
        ",".join(map(str, client_cpus)),
        BINARY,
        "load",
        "-qps",
        "0" if qps == "max" else str(qps),
        "-t",
        f"{duration_s:g}s",
        "-c",
        str(connections),
        "-p",
        ",".join(f"{p:g}" for p in PERCENTILES),
        "-r",
        f"{RESOLUTION_S:g}",
        "-json",
        "-",
    ]
    if connection_close:
        argv.append("-keepalive=false")
    argv.append(f"http://{host}:{port}/echo")
    return Invocation(argv, client_cpus[0], server_cpus[0])


def parse(kind: str, stdouts: Sequence[bytes | str]) -> dict[str, float]:
    """Actual QPS, latency percentiles (us) and the count of requests that did not get a 200."""
    if kind not in KINDS:
        raise ParseError(f"fortio: unknown test kind {kind!r}")
    if len(stdouts) != 1:
        raise ParseError(f"fortio: expected the output of one process, got {len(stdouts)}")
    if not text(stdouts[0]).strip():
        raise ParseError("fortio printed no JSON result (it aborts before writing one when it cannot connect)")
    doc = json_document("fortio", stdouts[0])
    if not isinstance(doc, dict) or doc.get("RunType") != "HTTP":
        raise ParseError('fortio output is not the result of an HTTP load run (RunType is not "HTTP")')
    out = {"http_qps": json_number("fortio", doc, "ActualQPS", minimum=0)}
    entries = json_get(doc, "DurationHistogram", "Percentiles")
    if not isinstance(entries, list):
        raise ParseError("fortio JSON lacks the list DurationHistogram.Percentiles")
    found = {}
    for entry in entries:
        p = json_get(entry, "Percentile")
        if isinstance(p, (int, float)) and not isinstance(p, bool) and abs(p) <= 100:  # 1e400 is no float
            found[float(p)] = entry
    for p, metric in PERCENTILES.items():
        if p not in found:
            raise ParseError(f"fortio JSON lacks the p{p:g} latency (DurationHistogram.Percentiles)")
        try:
            out[metric] = json_number("fortio", found[p], "Value", minimum=0) * 1e6  # seconds -> us
        except ParseError as exc:
            raise ParseError(f"{exc} (the p{p:g} latency in DurationHistogram.Percentiles)") from None
    total = json_number("fortio", doc, "DurationHistogram", "Count", minimum=0)
    codes = doc.get("RetCodes")
    if not isinstance(codes, dict):
        raise ParseError("fortio JSON lacks the object RetCodes")
    if total == 0:
        raise ParseError("fortio completed no request")
    # Socket errors have code -1, HTTP errors their status; both count.
    ok = json_number("fortio", codes, "200", minimum=0) if "200" in codes else 0.0
    if ok > total:
        raise ParseError(f"fortio RetCodes.200={ok:g} exceeds DurationHistogram.Count={total:g}")
    out["http_errors"] = total - ok
    return finite("fortio", out)


def version(stdout: str) -> str:
    """'1.65.0' (``fortio version`` prints only the version)."""
    return stdout.strip().splitlines()[0] if stdout.strip() else ""
