"""Collectors: one module per tool, each the model of its tests, a pure command builder and a pure parser.

Every collector module satisfies `Collector` (checked by the tests). Collectors
depend on nothing but benchlib.base.errors: targets and the runner use them, never
the other way round.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import Discriminator, Tag

from ..base.errors import ParseError  # noqa: F401 (collectors raise it; callers catch collectors.ParseError)
from . import dns, fortio, iperf3, netperf
from .base import RECORDED_PARAMS, Collector, Invocation, Server, json_number  # noqa: F401 (the collectors' shared types)

MODULES: dict[str, Collector[Any]] = {"netperf": netperf, "iperf3": iperf3, "fortio": fortio, "dns": dns}
TOOLS = tuple(MODULES)


def _tool(value) -> str | None:
    return value.get("tool") if isinstance(value, dict) else getattr(value, "tool", None)


# A test as params.yaml gives it: its `tool` picks the collector's model. A function picks it, not
# Field(discriminator="tool"), which pydantic refuses on a field with a before-validator (the
# boolean guard every settings model has).
# Written out (not built from MODULES) so that type checkers read it too.
TestSpec = Annotated[
    Annotated[netperf.Spec, Tag("netperf")]
    | Annotated[iperf3.Spec, Tag("iperf3")]
    | Annotated[fortio.Spec, Tag("fortio")]
    | Annotated[dns.Spec, Tag("dns")],
    Discriminator(_tool),
]


def get(tool: str) -> Collector[Any]:
    """The collector module for ``tool``."""
    if tool not in MODULES:
        raise KeyError(f"no collector for tool {tool!r}; known: {sorted(MODULES)}")
    return MODULES[tool]


def servers(tools: Sequence[str]) -> list[Server]:
    """The servers the tools need, once each, in the order of ``tools``."""
    return list({m.SERVER.name: m.SERVER for m in map(get, tools) if m.SERVER}.values())


def programs() -> dict[str, tuple[str, str]]:
    """Every program the collectors run, with the scripts/setup.sh profile that installs it and how."""
    return {name: how for m in MODULES.values() for name, how in m.PROGRAMS.items()}


def client_commands(tools: Sequence[str]) -> list[str]:
    """The executables the tools' clients run (what a target checks before building anything)."""
    return list(dict.fromkeys(get(t).VERSION_COMMAND[0] for t in tools))
