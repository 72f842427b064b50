"""iperf3 TCP and UDP streams: command builder and JSON (``-J``) parser.

TCP runs skip a warm-up second (``-O``) past slow start, so they last
OMIT_S longer than duration_s (warmup_s tells the runner to start the CPU
window after it, so CPU and throughput cover the same interval). UDP runs have no warm-up: iperf3
3.12 miscounts UDP loss after ``-O`` (lost_percent above 100 %, esnet/iperf
issue #1489, fixed in 3.14 by pull request #1498).

UDP goes at a target bitrate, or unlimited (``-b 0``: send as fast as the
sender can, the loss then says how much the path dropped).
"""

from __future__ import annotations

import re
import typing
from collections.abc import Sequence
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator

from .base import (
    MAX_MESSAGE_BYTES,
    Invocation,
    ParseError,
    Server,
    WholeSecondsSpec,
    finite,
    json_document,
    json_get,
    json_number,
    message,
)

Kind = Literal["TCP_STREAM", "UDP_STREAM"]
KINDS = typing.get_args(Kind)
PORT = 5201
# One iperf3 server runs one test at a time; the runner never runs two at once.
SERVER = Server("iperf3", ["iperf3", "-s", "-p", str(PORT)], PORT)
VERSION_COMMAND = ["iperf3", "--version"]
PROGRAMS = {"iperf3": ("lab", "apt-get install iperf3")}
OMIT_S = 1
BITRATE_RE = r"unlimited|\d+(\.\d+)?[KMG]?"


class Spec(WholeSecondsSpec):
    """An iperf3 test (-t takes whole seconds)."""

    tool: Literal["iperf3"]
    kind: Kind
    message_size: int | None = Field(
        None, gt=0, le=MAX_MESSAGE_BYTES, description="-l buffer size (bytes); default iperf3's"
    )
    bitrate: str | None = Field(
        None,
        validate_default=True,
        description=("UDP_STREAM: target bitrate per stream (e.g. 1G, 500M) or 'unlimited'"),
    )

    @field_validator("bitrate")
    @classmethod
    def _bitrate_for_udp(cls, bitrate: str | None, info: ValidationInfo) -> str | None:
        kind = info.data.get("kind")
        if kind is None:
            return bitrate  # already reported on kind
        if kind != "UDP_STREAM" and bitrate is not None:
            raise ValueError(f"not used by iperf3 {kind}; remove it")
        if kind == "UDP_STREAM" and bitrate is None:
            raise ValueError(f"iperf3 {kind} needs bitrate: a bitrate such as 1G, or 'unlimited'")
        if bitrate is not None and not re.fullmatch(BITRATE_RE, bitrate):
            raise ValueError(
                f"{bitrate!r} is not a bitrate: a number with an optional K, M or G suffix, or 'unlimited'"
            )
        return bitrate


def warmup_s(spec: Spec) -> float:
    """Seconds the tool runs before its measured interval starts (the omitted TCP warm-up)."""
    return OMIT_S if spec.kind == "TCP_STREAM" else 0.0


def expected_wall_s(spec: Spec) -> float:
    return spec.duration_s + (OMIT_S if spec.kind == "TCP_STREAM" else 0)


def server_wait_s(spec: Spec) -> float:
    return 0.0


def build(spec: Spec, host: str, client_cpus: list[int], server_cpus: list[int]) -> list[Invocation]:
    """The command line of one run of a test (parallel streams are one process, ``-P``)."""
    return [
        command(
            spec.kind,
            host,
            spec.duration_s,
            spec.streams,
            spec.message_size,
            spec.bitrate,
            client_cpus[0],
            server_cpus[0],
        )
    ]


def command(
    kind: str,
    host: str,
    duration_s: float,
    streams: int,
    message_size: int | None,
    bitrate: str | None,
    client_cpu: int,
    server_cpu: int,
    port: int = PORT,
) -> Invocation:
    if kind not in KINDS:
        raise ValueError(f"iperf3: unsupported test kind {kind!r}; allowed: {list(KINDS)}")
    if duration_s != int(duration_s):
        raise ValueError(f"iperf3: duration must be whole seconds, got {duration_s}")
    # -A n,m pins the client to n and, for this test only, the server to m.
    argv = [
        "iperf3",
        "-c",
        host,
        "-p",
        str(port),
        "-J",
        "-t",
        str(int(duration_s)),
        "-P",
        str(streams),
        "-A",
        f"{client_cpu},{server_cpu}",
    ]
    if kind == "TCP_STREAM":
        if bitrate is not None:
            raise ValueError("iperf3: bitrate applies to UDP_STREAM only")
        argv += ["-O", str(OMIT_S)]
    else:
        if bitrate is None:
            raise ValueError("iperf3: UDP_STREAM needs a bitrate (e.g. '1G', or 'unlimited')")
        argv += ["-u", "-b", "0" if bitrate == "unlimited" else bitrate]
    if message_size is not None:
        argv += ["-l", str(message_size)]
    return Invocation(argv, client_cpu, server_cpu)


def parse(kind: str, stdouts: Sequence[bytes | str]) -> dict[str, float]:
    """Metrics of one run: receiver throughput (Gbit/s), and TCP retransmits or UDP loss and jitter."""
    if kind not in KINDS:
        raise ParseError(f"iperf3: unknown test kind {kind!r}")
    if len(stdouts) != 1:
        raise ParseError(f"iperf3: expected the output of one process, got {len(stdouts)}")
    doc = json_document("iperf3", stdouts[0])
    if not isinstance(doc, dict):
        raise ParseError("iperf3 output is not a JSON object")
    if "error" in doc:  # with -J, iperf3 reports failures in the document
        raise ParseError(f"iperf3 error: {message(doc['error'])}")
    protocol = json_get(doc, "start", "test_start", "protocol")
    if protocol != kind.partition("_")[0]:
        raise ParseError(f"iperf3 ran a {message(protocol, 40)} test, expected {kind} (start.test_start.protocol)")
    out = {"throughput": json_number("iperf3", doc, "end", "sum_received", "bits_per_second", minimum=0) / 1e9}
    if kind == "TCP_STREAM":
        out["retransmits"] = json_number("iperf3", doc, "end", "sum_sent", "retransmits", minimum=0)
        return finite("iperf3", out)
    # end.sum is the receiver's (server's) count, sent back to the client at the end.
    loss = json_number("iperf3", doc, "end", "sum", "lost_percent")
    if not 0 <= loss <= 100:
        raise ParseError(f"iperf3 lost_percent={loss} is outside 0-100 % (iperf3 miscounted, see issue #1489)")
    out["udp_loss_pct"] = loss
    out["udp_jitter"] = json_number("iperf3", doc, "end", "sum", "jitter_ms", minimum=0) * 1000  # us
    return finite("iperf3", out)


def version(stdout: str) -> str:
    """'iperf 3.12 (cJSON 1.7.15)...' -> '3.12'."""
    return stdout.split()[1] if stdout.startswith("iperf ") else stdout.strip()
