"""Two bare-metal hosts over OpenSSH: the node-to-node baseline without Kubernetes.

The client host runs the tool's client, the server host its server (started on
entry, stopped on exit over ssh). CPU per side is the /proc/stat of each host,
read over ssh. Host keys are checked (``StrictHostKeyChecking=yes``, with
``known_hosts`` from the environment when given) and ssh never prompts
(``BatchMode=yes``).

A profiled run records `perf record -a -g` on each host (SshRecorder) and
keeps each side's samples taken on its CPUs within the CPU window. The window
is mapped onto each host's clock through /proc/uptime, read as perf starts:
perf stamps samples with CLOCK_BOOTTIME, the clock /proc/uptime counts, so the
mapping is as exact as /proc/uptime's 10 ms plus the one-way ssh latency.
"""

from __future__ import annotations

import os
import select
import shlex
import shutil
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .. import cpu, profiling, stacks
from ..collectors import Server
from ..config import Environment, SshHost
from ..schema import SIDES
from . import KILL_WAIT_S, LocalProcess, Placement, Target, TargetError, wait_listening

CHECK_TIMEOUT_S = 30  # a `command -v` or `kill` over ssh
COMMAND_TIMEOUT_S = 60  # any other short command over ssh
SERVER_EXIT_TIMEOUT_S = 10  # the local ssh of a stopped server
SERVER_LISTEN_TIMEOUT_S = 15
SERVER_START_TIMEOUT_S = 30  # connect (ConnectTimeout 10 s), log in, and the remote shell's first line
SERVER_POLL_S = 0.2  # every check is an ssh round trip: poll less often than the lab does


def ssh_argv(env: Environment, side: str, remote: list[str]) -> list[str]:
    """The local command line that runs ``remote`` on one side's host."""
    s = env.ssh
    if s is None:
        raise TargetError(f"environment {env.name}: target ssh needs an ssh: section")
    h: SshHost = getattr(s, side)
    argv = [
        *s.command,
        "-p",
        str(h.port),
        "-l",
        h.user,
        "-o",
        "BatchMode=yes",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "ConnectTimeout=10",
    ]
    if h.identity_file:
        argv += ["-i", os.path.expanduser(h.identity_file), "-o", "IdentitiesOnly=yes"]
    if s.known_hosts:
        argv += ["-o", f"UserKnownHostsFile={os.path.expanduser(s.known_hosts)}"]
    for opt in s.options:
        argv += ["-o", opt]
    # ssh hands the remote side one string for its shell: quote every word
    return argv + [h.host, "--", shlex.join(remote)]


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


# One line per host: perf's version, the two kernel settings perf needs, and whether we are root.
PERF_FACTS = (
    'printf "perf=%s\\n" "$(perf --version 2>/dev/null)"; '
    'printf "kptr_restrict=%s\\n" "$(cat /proc/sys/kernel/kptr_restrict 2>/dev/null)"; '
    'printf "perf_event_paranoid=%s\\n" "$(cat /proc/sys/kernel/perf_event_paranoid 2>/dev/null)"; '
    'printf "uid=%s\\n" "$(id -u)"'
)
# Makes a directory for perf.data, says (PID, directory, uptime, kernel), then becomes perf record.
PERF_RECORD = (
    "d=$(mktemp -d /tmp/benchlib-perf.XXXXXX) || exit 1; "
    'echo "$$ $d $(cut -d" " -f1 /proc/uptime) $(uname -r)"; '
    'exec "$@" -o "$d/perf.data" 2>"$d/record.stderr"'
)
UPTIME_RESOLUTION_S = 0.01


def _facts(text: str) -> dict[str, str]:
    pairs = (line.partition("=") for line in text.splitlines())
    return {key: value for key, sep, value in pairs if sep}


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


@dataclass
class _HostRecord:
    proc: subprocess.Popen  # the local ssh that runs perf record
    pid: int  # perf record's PID on the host
    directory: str  # on the host: perf.data and perf's stderr
    offset_s: float  # the host's CLOCK_BOOTTIME minus time.monotonic() here
    kernel: str


class SshRecorder:
    """`perf record -a -g` on each side's host from `start` until `stop`; `profile` keeps each host's
    samples on its side's CPUs within the window, their CPU frames naming the side (stacks.on_host)."""

    def __init__(self, target: SshTarget, cpus: dict[str, list[int]], hz: int, version: str):
        self.target, self.cpus, self.hz, self.version = target, cpus, hz, version
        self.argv = ["perf", "record", "-a", "-g", "-k", "CLOCK_BOOTTIME", "-F", str(hz)]
        self.hosts: dict[str, _HostRecord] = {}
        self.start_error = "not started"
        self.dir = Path(tempfile.mkdtemp(prefix="benchlib-perf-"))  # the local ssh's stderr

    def start(self) -> None:
        for side in SIDES:
            err = open(self.dir / f"{side}.record.stderr", "wb")  # noqa: SIM115 (ssh writes it while perf runs)
            proc = subprocess.Popen(
                ssh_argv(self.target.env, side, ["sh", "-c", PERF_RECORD, "sh", *self.argv]),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                start_new_session=True,
            )
            err.close()
            assert proc.stdout is not None  # piped
            ready = select.select([proc.stdout], [], [], SERVER_START_TIMEOUT_S)[0]
            line = proc.stdout.readline().split() if ready else []
            now = time.monotonic()
            if len(line) != 4 or not line[0].isdigit():
                proc.kill()
                proc.wait()
                self.start_error = f"{side} host {self.target._host(side)}: record did not start: {self._tail(side)}"
                return
            pid, directory, uptime, kernel = line
            # /proc/uptime is read before the line is sent, and shows whole hundredths: its middle
            offset = float(uptime) + UPTIME_RESOLUTION_S / 2 - now
            self.hosts[side] = _HostRecord(proc, int(pid), directory, offset, kernel)

    def stop(self) -> None:
        """SIGINT to each host's perf record (it writes perf.data out); its ssh then ends."""
        if len(self.hosts) != len(SIDES):
            raise profiling.PerfError(self.start_error)
        for side, h in self.hosts.items():
            if h.proc.poll() is not None:
                raise profiling.PerfError(
                    f"{side} host: record exited {h.proc.returncode} before the window ended: {self._remote_tail(h)}"
                )
            self.target._check(side, ["kill", "-INT", str(h.pid)], timeout=CHECK_TIMEOUT_S)
        for side, h in self.hosts.items():
            try:
                h.proc.wait(timeout=profiling.STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                raise profiling.PerfError(
                    f"{side} host: record still running {profiling.STOP_TIMEOUT_S} s after SIGINT"
                ) from None
            # perf record ends itself with the SIGINT it caught, and ssh says 255 for a command a
            # signal ended: perf's own last line tells a written perf.data from a failure
            tail = self._remote_tail(h)
            if h.proc.returncode not in (0, 255) or "Captured and wrote" not in tail:
                raise profiling.PerfError(f"{side} host: record exited {h.proc.returncode}: {tail} {self._tail(side)}")

    def profile(self, start: float, end: float) -> profiling.Profile:
        folded: Counter = Counter()
        events: set[str] = set()
        for side, h in self.hosts.items():
            argv = ssh_argv(
                self.target.env,
                side,
                ["perf", "script", "-F", stacks.PERF_SCRIPT_FIELDS + ",time", "-i", f"{h.directory}/perf.data"],
            )
            on_side, seen = profiling.fold_window(
                argv, start + h.offset_s, end + h.offset_s, frozenset(self.cpus[side]), self.dir / f"{side}.script"
            )
            if not on_side:
                raise profiling.PerfError(f"{side} host: recorded no samples on CPUs {self.cpus[side]}")
            folded += stacks.on_host(on_side, side)
            events |= seen
        kernels = {side: h.kernel for side, h in self.hosts.items()}
        return profiling.Profile(
            stacks.folded_bytes(folded),
            {
                "perf_version": self.version,
                "event": ",".join(sorted(events)),
                "frequency_hz": self.hz,
                "kernel": kernels["client"]
                if len(set(kernels.values())) == 1
                else "; ".join(f"{side} {k}" for side, k in kernels.items()),
                "cpus": self.cpus,
                "attribution": "host",
                "clock": {
                    side: {"offset_s": round(h.offset_s, 6), "resolution_s": UPTIME_RESOLUTION_S}
                    for side, h in self.hosts.items()
                },
                "window_s": round(end - start, 6),
                "samples": sum(folded.values()),
                "kernel_symbols": stacks.kernel_symbols(folded),
                "command": self.argv,
            },
        )

    def close(self) -> None:
        """Stop any perf still running and delete each host's perf.data; best effort, as after a fault."""
        for side, h in self.hosts.items():
            remote = f"kill {h.pid} 2>/dev/null; rm -rf {shlex.quote(h.directory)}"
            try:
                self.target._check(side, ["sh", "-c", remote], timeout=CHECK_TIMEOUT_S)
            except TargetError:
                pass
            if h.proc.poll() is None:
                h.proc.kill()
            h.proc.wait()
        self.hosts.clear()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _tail(self, side: str) -> str:
        return profiling.last_line(self.dir / f"{side}.record.stderr")

    def _remote_tail(self, h: _HostRecord) -> str:
        side = next(s for s, r in self.hosts.items() if r is h)
        try:
            out = self.target._check(side, ["tail", "-n", "1", f"{h.directory}/record.stderr"], CHECK_TIMEOUT_S)
        except TargetError as exc:
            return str(exc)
        return out.strip() or "(no output)"


class SshTarget(Target):
    kind = "ssh"
    # one pair of hosts serves every scenario: nothing to switch between runs
    interleaves_scenarios = True
    profiles = True  # with perf on each host (check_profiling)
    perf_is_remote = True

    def __init__(
        self,
        env: Environment,
        scenarios: list[str],
        servers: Sequence[Server] = (),
        commands: Sequence[str] = (),
        log=print,
    ):
        if env.ssh is None:
            raise TargetError(f"environment {env.name}: target ssh needs an ssh: section")
        super().__init__(env, scenarios, servers, commands, log)
        self._servers: list[tuple[str, subprocess.Popen, int]] = []  # (server name, local ssh, remote pid)

    def _check(self, side: str, remote: list[str], timeout: float = COMMAND_TIMEOUT_S) -> str:
        """stdout of a command on one side's host, which must succeed."""
        argv = ssh_argv(self.env, side, remote)
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise TargetError(f"ssh: `{shlex.join(remote)}` on {self._host(side)} took over {timeout} s") from None
        if proc.returncode != 0:
            raise TargetError(
                f"ssh: `{shlex.join(remote)}` on {self._host(side)} exited {proc.returncode}: {proc.stderr.strip()}"
            )
        return proc.stdout

    def _host(self, side: str) -> str:
        h = getattr(self.env.ssh, side)
        return f"{h.user}@{h.host}:{h.port}"

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
    def check_profiling(self) -> str:
        """perf on each host, and the kernel settings it needs there: its version, or TargetError with
        one line per problem naming the host."""
        problems, versions = [], {}
        for side in SIDES:
            facts = _facts(self._check(side, ["sh", "-c", PERF_FACTS], timeout=CHECK_TIMEOUT_S))
            versions[side] = facts.get("perf") or None
            problems += [
                f"{side} host {self._host(side)}: {p}"
                for p in profiling.plan_problems(
                    self.kind,
                    True,
                    versions[side],
                    _int(facts.get("kptr_restrict")),
                    _int(facts.get("perf_event_paranoid")),
                    facts.get("uid") == "0",
                )
            ]
        if problems:
            raise TargetError("cannot record profiled runs:\n  " + "\n  ".join(problems))
        if versions["client"] == versions["server"]:
            return str(versions["client"])
        return "; ".join(f"{side} {v}" for side, v in versions.items())

    def recorder(self, placement: Placement, hz: int, perf_version: str) -> SshRecorder:
        return SshRecorder(self, {"client": placement.client_cpus, "server": placement.server_cpus}, hz, perf_version)

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
