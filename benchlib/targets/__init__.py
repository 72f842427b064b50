"""Targets place the client and the server and run commands on either side.

A target knows nothing about tools or statistics: the runner gives it command
lines and gets back what the processes printed.
"""
from __future__ import annotations

import time
from collections.abc import Callable
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


class Target:
    """The life cycle every target shares.

    `prepare` checks and claims what must be exclusive before anything is
    built (a failure there leaves nothing to tear down); `setup` builds,
    and a failure while building tears down what was built; leaving the
    `with` block always tears down.
    """

    kind = ""
    interleaves_scenarios = True  # whether runs of different scenarios may alternate

    def __init__(self, env, scenarios: list[str], tools=("netperf",), log=print):
        self.env, self.scenarios, self.tools, self.log = env, scenarios, list(tools), log
        self.placements: dict[str, Placement] = {}

    def __enter__(self):
        self.prepare()
        try:
            self.setup()
        except BaseException:
            self.teardown()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.teardown()

    def prepare(self) -> None:
        pass

    def setup(self) -> None:
        raise NotImplementedError

    def teardown(self) -> None:
        raise NotImplementedError


def wait_listening(server, proc, ss: Callable[[list[str]], str], target: str, place: str,
                   output: Callable[[], str], timeout_s: float, poll_s: float) -> None:
    """Return once `ss`, run beside the server, shows its port listening.

    Errors read "<target>: <server> <place> exited ..."; `output()` is what
    the server printed, read if it exits first.
    """
    flag = "-Hltn" if server.protocol == "tcp" else "-Hlun"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise TargetError(f"{target}: {server.name} {place} exited {proc.returncode}: {output().strip()}")
        if ss(["ss", flag, f"sport = :{server.port}"]).strip():
            return
        time.sleep(poll_s)
    raise TargetError(f"{target}: {server.name} {place} did not listen on port {server.port} "
                      f"within {timeout_s:g} s")


@dataclass(frozen=True)
class Result:
    argv: list[str]
    returncode: int | None  # None: killed after the timeout
    stdout: str
    stderr: str


class LocalProcess:
    """A command a target started on this machine, in a session of its own so
    that killing it takes its children along (``ip netns exec``, ``ssh``, ...).

    The runner only uses communicate, poll, returncode and kill, which a remote
    target's process object provides as well.
    """

    def __init__(self, argv: list[str]):
        import subprocess
        self._p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   start_new_session=True)

    @property
    def returncode(self) -> int | None:
        return self._p.returncode

    def poll(self) -> int | None:
        return self._p.poll()

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """(stdout, stderr); raises subprocess.TimeoutExpired like Popen does."""
        return self._p.communicate(timeout=timeout)

    def kill(self) -> None:
        import os
        import signal
        try:
            os.killpg(self._p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
