"""Targets place the client and the server and run commands on either side.

A target knows nothing about tools or statistics: the runner gives it command
lines and gets back what the processes printed.
"""
from __future__ import annotations

from dataclasses import dataclass, field


class TargetError(RuntimeError):
    """The target cannot be used (missing privilege, tool or kernel feature, failed set-up)."""


@dataclass(frozen=True)
class Placement:
    """Where one scenario's client and server live, as recorded in each run's metadata."""

    scenario: str
    server_address: str
    client_node: str
    server_node: str
    client_cpus: list[int]
    server_cpus: list[int]
    details: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Result:
    argv: list[str]
    returncode: int | None  # None: killed after the timeout
    stdout: str
    stderr: str
