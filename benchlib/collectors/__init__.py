"""Collectors: one module per tool, each a pure command builder and a pure parser.

Every collector module provides:
  KINDS                       the test kinds it runs
  SERVER                      a Server the target starts once per scenario, or None
  VERSION_COMMAND, version()  how to ask the tool its version, and read the answer
  build(spec, address, client_cpus, server_cpus) -> list[Invocation]
  parse(kind, stdouts) -> dict[metric, value]
  warmup_s(spec)              seconds before the measured interval (the CPU window starts after)
  expected_wall_s(spec)       how long a run takes, for estimates
and optionally SERVICE_PORTS: TCP ports besides SERVER.port that a service in
front of the server must forward (netperf's data connections).
"""
from __future__ import annotations

from dataclasses import dataclass


class ParseError(ValueError):
    """A tool's output could not be turned into metrics."""


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


def json_number(tool: str, doc, *path) -> float:
    """The number at ``path`` in a tool's JSON document, or a ParseError naming the path."""
    dotted = ".".join(map(str, path))
    for key in path:
        if not isinstance(doc, dict) or key not in doc:
            raise ParseError(f"{tool} JSON lacks {dotted}")
        doc = doc[key]
    if not isinstance(doc, (int, float)) or isinstance(doc, bool):
        raise ParseError(f"{tool} {dotted}={doc!r} is not a number")
    return float(doc)


def get(tool: str):
    """The collector module for ``tool``."""
    from . import dns, fortio, iperf3, netperf
    modules = {"netperf": netperf, "iperf3": iperf3, "fortio": fortio, "dns": dns}
    if tool not in modules:
        raise KeyError(f"no collector for tool {tool!r}; known: {sorted(modules)}")
    return modules[tool]
