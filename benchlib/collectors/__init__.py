"""Collectors: one module per tool, each a pure command builder and a pure parser.

Every collector module satisfies `Collector` (checked by the tests). Collectors
depend on nothing but benchlib.errors: targets and the runner use them, never
the other way round.
"""
from __future__ import annotations

from collections.abc import Sequence

from ..errors import ParseError  # noqa: F401 (collectors raise it; callers catch collectors.ParseError)
from .base import Collector, Invocation, Server, json_number  # noqa: F401 (the collectors' shared types)

def get(tool: str) -> Collector:
    """The collector module for ``tool``."""
    from . import dns, fortio, iperf3, netperf  # here: each imports .base, which needs this package first
    modules = {"netperf": netperf, "iperf3": iperf3, "fortio": fortio, "dns": dns}
    if tool not in modules:
        raise KeyError(f"no collector for tool {tool!r}; known: {sorted(modules)}")
    return modules[tool]


def servers(tools: Sequence[str]) -> list[Server]:
    """The servers the tools need, once each, in the order of ``tools``."""
    return list({m.SERVER.name: m.SERVER for m in map(get, tools) if m.SERVER}.values())


def client_commands(tools: Sequence[str]) -> list[str]:
    """The executables the tools' clients run (what a target checks before building anything)."""
    return list(dict.fromkeys(get(t).VERSION_COMMAND[0] for t in tools))
