"""netperf TCP_STREAM / TCP_RR / TCP_CRR: command builder and keyval parser.

netperf 2.7's omni tests print ``KEY=value`` lines for the output selectors
given with ``-k``; that is the only output format parsed here.
"""

from __future__ import annotations

import math
import typing
from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from .base import MAX_MESSAGE_BYTES, Invocation, ParseError, Server, WholeSecondsSpec, finite, text, utf8

STREAM_KEYS = (
    "THROUGHPUT",
    "THROUGHPUT_UNITS",
    "ELAPSED_TIME",
    "LOCAL_SEND_SIZE",
    "LOCAL_TRANSPORT_RETRANS",
    "LOCAL_CPU_BIND",
    "REMOTE_CPU_BIND",
)
RR_KEYS = (
    "THROUGHPUT",
    "THROUGHPUT_UNITS",
    "ELAPSED_TIME",
    "REQUEST_SIZE",
    "RESPONSE_SIZE",
    "MIN_LATENCY",
    "P50_LATENCY",
    "P90_LATENCY",
    "P99_LATENCY",
    "MEAN_LATENCY",
    "LOCAL_CPU_BIND",
    "REMOTE_CPU_BIND",
)
LATENCY_METRICS = {
    "MIN_LATENCY": "latency_min",
    "P50_LATENCY": "latency_p50",
    "P90_LATENCY": "latency_p90",
    "P99_LATENCY": "latency_p99",
    "MEAN_LATENCY": "latency_mean",
}
RATE_METRIC = {"TCP_RR": "transaction_rate", "TCP_CRR": "connection_rate"}
Kind = Literal["TCP_STREAM", "TCP_RR", "TCP_CRR"]
KINDS = typing.get_args(Kind)
PORT = 12865
# Stream i's data connection goes to DATA_PORT + i (netperf's test option -P),
# so a firewall or a service in front of the server can name every port it uses.
DATA_PORT = 12866
SERVICE_STREAMS = 8  # streams a service in front of the server exposes data ports for
SERVICE_PORTS = tuple(range(DATA_PORT, DATA_PORT + SERVICE_STREAMS))
# -D: stay in the foreground so the target owns the process; -4: IPv4 only.
SERVER = Server("netserver", ["netserver", "-D", "-4", "-p", str(PORT)], PORT, data_ports=SERVICE_PORTS)
VERSION_COMMAND = ["netperf", "-V"]
PROGRAMS = {name: ("lab", "Debian's non-free package netperf") for name in ("netperf", "netserver")}
# netserver reports a TCP_CRR result only after its own timer (test length
# plus netperf's PAD_TIME of 4 s) expires: it waits in accept() for a next
# connection that never comes. A CRR run lasts 4 s longer unless the target
# fires that timer once the client is done (Target.end_server_wait).
CRR_PAD_S = 4.0


class Spec(WholeSecondsSpec):
    """A netperf test (-l takes whole seconds)."""

    tool: Literal["netperf"]
    kind: Kind
    message_size: int | None = Field(
        None,
        gt=0,
        le=MAX_MESSAGE_BYTES,
        description=("TCP_STREAM send size, or RR/CRR request and response size (bytes); default netperf's"),
    )


def warmup_s(spec: Spec) -> float:
    """Seconds the tool runs before its measured interval starts."""
    return 0.0


def expected_wall_s(spec: Spec) -> float:
    return spec.duration_s + server_wait_s(spec)


def server_wait_s(spec: Spec) -> float:
    return CRR_PAD_S if spec.kind == "TCP_CRR" else 0.0


def build(spec: Spec, host: str, client_cpus: list[int], server_cpus: list[int]) -> list[Invocation]:
    """The command lines of one run of a test."""
    return commands(spec.kind, host, spec.duration_s, spec.streams, spec.message_size, client_cpus, server_cpus)


def commands(
    kind: str,
    host: str,
    duration_s: float,
    streams: int,
    message_size: int | None,
    client_cpus: list[int],
    server_cpus: list[int],
    port: int = PORT,
) -> list[Invocation]:
    """The netperf command lines for one run, one per stream, CPUs assigned round-robin."""
    if kind not in KINDS:
        raise ValueError(f"netperf: unsupported test kind {kind!r}")
    keys = STREAM_KEYS if kind == "TCP_STREAM" else RR_KEYS
    test_opts: list[str] = []
    if message_size is not None:
        test_opts += ["-m", str(message_size)] if kind == "TCP_STREAM" else ["-r", f"{message_size},{message_size}"]
    out = []
    for i in range(streams):
        lcpu, rcpu = client_cpus[i % len(client_cpus)], server_cpus[i % len(server_cpus)]
        argv = [
            "netperf",
            "-H",
            host,
            "-p",
            str(port),
            "-t",
            kind,
            "-l",
            _seconds(duration_s),
            "-T",
            f"{lcpu},{rcpu}",
            "-P",
            "0",
        ]
        if kind != "TCP_STREAM":
            argv.append("-j")  # keep the per-transaction timings behind the percentiles
        argv += ["--", *test_opts, "-P", f",{DATA_PORT + i}", "-k", ",".join(keys)]
        out.append(Invocation(argv, lcpu, rcpu))
    return out


def _seconds(d: float) -> str:
    # netperf's -l takes whole seconds; a fraction would be truncated silently.
    if d != int(d):
        raise ValueError(f"netperf: duration must be whole seconds, got {d}")
    return str(int(d))


def parse_keyval(stdout: bytes | str) -> dict[str, str]:
    values = {}
    for line in text(stdout).splitlines():
        key, sep, value = line.partition("=")
        if sep and key.isupper() and key.replace("_", "").isalnum():
            values[key] = value.strip().strip('"')
    return values


def _number(values: dict[str, str], key: str) -> float:
    if key not in values:
        raise ParseError(f"netperf output lacks {key}")
    utf8("netperf", key, values[key])
    try:
        number = float(values[key])
    except ValueError:
        raise ParseError(f"netperf {key}={values[key]!r} is not a number") from None
    if not math.isfinite(number) or number < 0:
        raise ParseError(f"netperf {key}={values[key]!r} is not a finite non-negative number")
    return number


def parse_one(kind: str, stdout: bytes | str) -> dict[str, float]:
    """Metrics of one netperf process's keyval output."""
    values = parse_keyval(stdout)
    if not values:
        raise ParseError("netperf printed no KEY=value lines")
    throughput = _number(values, "THROUGHPUT")
    units = values.get("THROUGHPUT_UNITS")
    if units is not None:
        utf8("netperf", "THROUGHPUT_UNITS", units)
    if kind == "TCP_STREAM":
        if units != "10^6bits/s":
            raise ParseError(f"netperf THROUGHPUT_UNITS={units!r}, expected '10^6bits/s'")
        out = {"throughput": throughput / 1000.0}  # Gbit/s
        if "LOCAL_TRANSPORT_RETRANS" in values:
            out["retransmits"] = _number(values, "LOCAL_TRANSPORT_RETRANS")
        return out
    if units != "Trans/s":
        raise ParseError(f"netperf THROUGHPUT_UNITS={units!r}, expected 'Trans/s'")
    out = {RATE_METRIC[kind]: throughput}
    for key, metric in LATENCY_METRICS.items():
        out[metric] = _number(values, key)
    return out


def parse(kind: str, stdouts: Sequence[bytes | str]) -> dict[str, float]:
    """Metrics of a whole run: rates and throughput summed over streams.

    Latency percentiles cannot be combined across processes, so they are kept
    only for single-stream runs.
    """
    if kind not in KINDS:
        raise ParseError(f"netperf: unknown test kind {kind!r}")
    if not stdouts:
        raise ParseError("netperf: no output to parse")
    per_stream = [parse_one(kind, s) for s in stdouts]
    if len(per_stream) == 1:
        return per_stream[0]
    summed = ("throughput", "retransmits", "transaction_rate", "connection_rate")
    return finite("netperf", {k: sum(p[k] for p in per_stream) for k in summed if all(k in p for p in per_stream)})


def version(stdout: str) -> str:
    """'Netperf version 2.7.0' -> '2.7.0'."""
    return stdout.strip().rpartition(" ")[2]
