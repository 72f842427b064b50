"""What every collector shares: the Collector protocol, invocations, servers, JSON numbers."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ..errors import ParseError

@dataclass(frozen=True)
class Invocation:
    """One client process of a run (a run with N streams has N of them)."""

    argv: list[str]
    client_cpu: int
    server_cpu: int


@dataclass(frozen=True)
class Server:
    """A long-running server process a collector needs on the server side."""

    name: str
    argv: list[str]
    port: int
    protocol: str = "tcp"
    # TCP ports besides `port` that a service in front of the server must
    # forward (netperf's data connections)
    data_ports: tuple[int, ...] = ()
    # the application protocol on `port` that a service-mesh proxy parses
    # ("http"), None for bytes it forwards as they are
    l7: str | None = None

    def ports(self) -> list[tuple[int, str]]:
        """Every (port, protocol) a client of this server connects to."""
        return [(self.port, self.protocol), *((p, "tcp") for p in self.data_ports)]


@runtime_checkable
class Collector(Protocol):
    """What the runner and the tidy step need from a tool's module."""

    KINDS: tuple[str, ...]  # the test kinds it runs
    SERVER: Server | None  # started on the server side of each scenario before its first run
    VERSION_COMMAND: list[str]  # run on the client side once per campaign session

    def version(self, output: str) -> str:
        """The version in what VERSION_COMMAND printed (stdout then stderr)."""

    def build(self, spec, host: str, client_cpus: list[int], server_cpus: list[int]) -> list[Invocation]:
        """The client command lines of one run of a TestSpec against ``host``."""

    def parse(self, kind: str, stdouts: list[str]) -> dict[str, float]:
        """Metrics of one run from what its client processes printed; ParseError if impossible."""

    def warmup_s(self, spec) -> float:
        """Seconds the tool runs before its measured interval (the CPU window starts after)."""

    def expected_wall_s(self, spec) -> float:
        """How long a run takes, for estimates."""

    def server_wait_s(self, spec) -> float:
        """Seconds the server idles after the test before it reports, on a timer of its own that a
        target may fire early (Target.end_server_wait); 0 for tools that report at once."""


def json_number(tool: str, doc, *path) -> float:
    """The number at ``path`` in a tool's JSON document, or a ParseError naming the path."""
    dotted = ".".join(map(str, path))
    for key in path:
        if not isinstance(doc, dict) or key not in doc:
            raise ParseError(f"{tool} JSON lacks {dotted}")
        doc = doc[key]
    if not isinstance(doc, (int, float)) or isinstance(doc, bool):
        raise ParseError(f"{tool} {dotted}={doc!r} is not a number")
    if not math.isfinite(doc):  # JSON's 1E999 reads as inf
        raise ParseError(f"{tool} {dotted}={doc!r} is not a finite number")
    return float(doc)
