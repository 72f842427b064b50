"""Two bare-metal hosts over OpenSSH: the node-to-node baseline without Kubernetes.

The client host runs the tool's client, the server host its server (started on
entry, stopped on exit over ssh). CPU per side is the /proc/stat of each host,
read over ssh (command.py). A profiled run records perf on each host (perf.py).
"""

from __future__ import annotations

import logging
import select
import shlex
import subprocess
from collections.abc import Sequence

from ...collectors import Server
from ...host import cpu
from ...settings.environment import Environment
from ...vocabulary.schema import SIDES
from .. import KILL_WAIT_S, LocalProcess, Placement, Target, TargetError, wait_listening
from . import perf
from .command import CHECK_TIMEOUT_S, COMMAND_TIMEOUT_S, host_label, run, ssh_argv

_log = logging.getLogger(__name__)  # the default for log=: where benchlib.base.logs sends messages

__all__ = ["SshTarget", "render", "ssh_argv"]

SERVER_EXIT_TIMEOUT_S = 10  # the local ssh of a stopped server
SERVER_LISTEN_TIMEOUT_S = 15
SERVER_START_TIMEOUT_S = 30  # connect (ConnectTimeout 10 s), log in, and the remote shell's first line
SERVER_POLL_S = 0.2  # every check is an ssh round trip: poll less often than the lab does


def render(env: Environment, scenarios: list[str], servers: list[Server]) -> list[tuple[str, object]]:
    """What the target runs on entry, as (title, command)."""
    out: list[tuple[str, object]] = [(f"{side}: check", shlex.join(ssh_argv(env, side, ["true"]))) for side in SIDES]
    for server in servers:
        out.append(
            (
                f"server: start {server.name}",
                shlex.join(ssh_argv(env, "server", ["sh", "-c", 'echo $$; exec "$@"', "sh", *server.argv])),
            )
        )
    return out


class SshTarget(Target):
    kind = "ssh"
    # one pair of hosts serves every scenario: nothing to switch between runs
    interleaves_scenarios = True
    can_profile = True  # with perf on each host (check_profiling)
    perf_is_remote = True
    render = staticmethod(render)  # the commands each host runs, as `benchlib render` prints them

    def __init__(
        self,
        env: Environment,
        scenarios: list[str],
        servers: Sequence[Server] = (),
        commands: Sequence[str] = (),
        log=_log.info,
    ):
        if env.ssh is None:
            raise TargetError(f"environment {env.name}: target ssh needs an ssh: section")
        super().__init__(env, scenarios, servers, commands, log)
        self._servers: list[tuple[str, subprocess.Popen, int]] = []  # (server name, local ssh, remote pid)

    def _check(self, side: str, remote: list[str], timeout: float = COMMAND_TIMEOUT_S) -> str:
        return run(self.env, side, remote, timeout)

    def _host(self, side: str) -> str:
        return host_label(self.env, side)

    # -- lifecycle ----------------------------------------------------------------
    def prepare(self) -> None:
        needed = {"client": [*self.commands, "cat"], "server": [s.argv[0] for s in self.servers] + ["taskset"]}
        for side, commands in needed.items():
            script = "; ".join(f"command -v {shlex.quote(c)} >/dev/null || echo {shlex.quote(c)}" for c in commands)
            missing = self._check(side, ["sh", "-c", script], timeout=CHECK_TIMEOUT_S).split()
            if missing:
                raise TargetError(f"ssh: {self._host(side)} lacks {missing} (install them on that host)")

    def setup(self) -> None:
        cpus = self._cpus()
        s = self.env.ssh
        for name in self.scenarios:
            self.placements[name] = Placement(
                scenario=name,
                server_address=s.server.address or s.server.host,
                client_node=s.client.host,
                server_node=s.server.host,
                client_cpus=cpus["client"],
                server_cpus=cpus["server"],
                details={"ssh_client": self._host("client"), "ssh_server": self._host("server")},
            )

    def _cpus(self) -> dict[str, list[int]]:
        if self.env.cpus:
            return {"client": self.env.cpus.client, "server": self.env.cpus.server}
        return {side: sorted(self._snapshot(side).counters) for side in SIDES}

    def start_server(self, scenario: str, server: Server, cpus: list[int]) -> None:
        """One server process serves every scenario: the hosts are the scenario."""
        if any(name == server.name for name, _, _ in self._servers):
            return
        # The remote shell prints its PID, then becomes the server: we stop it
        # by that PID, since ending the ssh session does not end a command
        # that has no terminal.
        remote = ["sh", "-c", 'echo $$; exec "$@"', "sh", "taskset", "-c", ",".join(map(str, cpus)), *server.argv]
        proc = subprocess.Popen(
            ssh_argv(self.env, "server", remote),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        assert proc.stdout is not None and proc.stderr is not None  # both piped
        # bounded: a login that never runs our command (a forced command, a shell
        # startup file waiting for input) would otherwise hang the campaign here
        if select.select([proc.stdout], [], [], SERVER_START_TIMEOUT_S)[0]:
            first = proc.stdout.readline().strip()
        else:
            first = f"no output within {SERVER_START_TIMEOUT_S} s"
        if not first.isdigit():
            proc.kill()
            _, err = proc.communicate(timeout=KILL_WAIT_S)
            raise TargetError(
                f"ssh: {server.name} on {self._host('server')} did not start: {err.strip() or first or 'no output'}"
            )
        self._servers.append((server.name, proc, int(first)))
        wait_listening(
            server,
            proc,
            lambda argv: self._check("server", argv),
            "ssh",
            f"on {self._host('server')}",
            proc.stderr.read,
            timeout_s=SERVER_LISTEN_TIMEOUT_S,
            poll_s=SERVER_POLL_S,
        )

    def teardown(self) -> None:
        errors = []
        for _, proc, pid in self._servers:
            try:
                self._check("server", ["kill", str(pid)], timeout=CHECK_TIMEOUT_S)
            except TargetError as exc:
                errors.append(str(exc))
            try:
                proc.wait(timeout=SERVER_EXIT_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._servers.clear()
        if errors:
            raise TargetError("ssh: could not stop every server: " + "; ".join(errors))

    # -- what the runner uses ---------------------------------------------------------
    @classmethod
    def profiling_check(cls, env) -> str:
        return perf.check_profiling(env)

    def recorder(self, placement: Placement, hz: int, perf_version: str) -> perf.SshRecorder:
        return perf.SshRecorder(
            self.env, {"client": placement.client_cpus, "server": placement.server_cpus}, hz, perf_version
        )

    def activate(self, scenario: str) -> None:
        """Nothing to switch: the hosts are the scenario."""

    def spawn(self, scenario: str, side: str, argv: list[str]) -> LocalProcess:
        return LocalProcess(ssh_argv(self.env, side, argv))

    def cpu_snapshot(self, scenario: str, side: str) -> cpu.Snapshot:
        return self._snapshot(side)

    def _snapshot(self, side: str) -> cpu.Snapshot:
        return cpu.take(self._check(side, ["cat", "/proc/stat"]))

    def describe(self) -> dict:
        versions = {
            "kernel": self._check("client", ["uname", "-r"]).strip(),
            "server_kernel": self._check("server", ["uname", "-r"]).strip(),
        }
        return {
            "target": "ssh",
            "versions": versions,
            "clk_tck": int(self._check("client", ["getconf", "CLK_TCK"]).strip()),
        }
