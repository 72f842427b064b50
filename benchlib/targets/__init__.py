"""Targets place the client and the server and run commands on either side.

A target knows nothing about tools or statistics: the runner hands it the
servers to start and the command lines to run, and gets back what the
processes printed. `Target` declares everything the runner relies on.

Each target is one package below this one whose `Target` subclass
`registry.TARGETS` lists under the name an environment's ``target`` gives.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from ..base.errors import TargetError  # noqa: F401 (targets raise it; callers catch targets.TargetError)
from ..collectors import Server
from ..host import cpu, disturbance
from ..profiling import perf_record

_log = logging.getLogger(__name__)  # the default for log=: where benchlib.base.logs sends messages

# After a kill, the output is there at once; a process that escaped its session
# and still holds the pipe must not hold the caller forever.
KILL_WAIT_S = 10


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

    def shared(self) -> Placement:
        """Client and server both on the client's CPUs (cpu_placement shared)."""
        return replace(self, server_cpus=self.client_cpus, details={**self.details, "cpu_placement": "shared"})


@dataclass(frozen=True)
class Result:
    """A command that ran to its end (or was killed): its exit status and output as printed."""

    argv: list[str]
    returncode: int | None  # None: killed after the timeout
    stdout: bytes  # the bytes as printed: whether they are text is the parser's to judge
    stderr: bytes


def shown(output: bytes) -> str:
    """Output as text for a message or a version probe; bytes that are not UTF-8 show as \\xNN."""
    return output.decode("utf-8", "backslashreplace")


class Process(Protocol):
    """A command a target started: the part of subprocess.Popen the runner uses."""

    returncode: int | None

    def poll(self) -> int | None: ...

    def communicate(self, timeout: float | None = None) -> tuple[bytes, bytes]:
        """(stdout, stderr) as printed; raises subprocess.TimeoutExpired like Popen does."""
        ...

    def kill(self) -> None: ...


class QuietWindow(Protocol):
    def end(self) -> dict:
        """Thaw; what was quieted, kept and could not be (the record's ``quiet``)."""
        ...


class Target(ABC):
    """What the runner needs from a place to run benchmarks.

    Life cycle: ``with target:`` calls `prepare` (check and claim what must be
    exclusive; a failure leaves nothing to tear down), then `setup` (build; a
    failure tears down what was built); leaving the block always calls
    `teardown`.

    Inside the block the runner calls, in this order:

    1. `describe()` once: the target's facts, recorded with every run.
    2. Before the first run of each scenario, and never again for it:
       `activate(scenario)`, then `start_server(scenario, server, cpus)` for
       every server the campaign's tools need (`Placement.server_cpus`).
       A target that cannot hold scenarios side by side
       (``interleaves_scenarios = False``) gets them in rounds instead: each
       block visits every `switch_of` once and each of its scenarios once
       there, activated again at every visit, so activating the next one may
       remove the previous one.
    3. After the first scenario's servers: `run(scenario, "client", argv,
       timeout)` for each tool's version probe.
    4. For every run: `placement`, `spawn` of each client process, and
       `cpu_snapshot` of both sides and `datapath_usage` at the start and
       end of the CPU window.

    ``servers`` and ``commands`` say what will run where, without naming a
    tool: a target checks the commands exist before building anything, and
    forwards the servers' ports where it puts a service in front of them.
    """

    kind = ""
    interleaves_scenarios = True  # whether runs of different scenarios may alternate
    ends_server_wait = False  # whether end_server_wait works (a signal into the server's processes)
    # whether perf on this machine can profile its runs (perf_record.check_plan); `profile_unavailable`
    # then says, per scenario once activated, whether it can indeed
    can_profile = False
    perf_is_remote = False  # whether check_profiling asks other machines (doctor and collect do; validate not)
    # what `benchlib render` prints: (title, manifest or command) of what the target applies; None: nothing
    render: Callable[..., list[tuple[str, object]]] | None = None

    def __init__(
        self,
        env,
        scenarios: list[str],
        servers: Sequence[Server] = (),
        commands: Sequence[str] = (),
        log=_log.info,
    ):
        self.env, self.scenarios, self.log = env, scenarios, log
        self.servers, self.commands = list(servers), list(commands)
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

    def prepare(self) -> None:  # noqa: B027 (an optional hook: most targets have nothing to prepare)
        pass

    @abstractmethod
    def setup(self) -> None: ...

    @abstractmethod
    def teardown(self) -> None: ...

    def placement(self, scenario: str) -> Placement:
        return self.placements[scenario]

    def placement_for(self, scenario: str, kind: str) -> Placement:
        """Where a run of test ``kind`` goes: the scenario's placement, unless the target places
        some kinds otherwise (the lab's shared CPU placement)."""
        return self.placement(scenario)

    def cpu_placement(self, scenario: str, kind: str) -> str:
        """split or shared (environment cpu_placement) for a run of test ``kind``. A scenario with mesh
        proxies runs split: its proxies are pinned per side and carry every TCP connection, so a shared
        set would miss the server side's proxy."""
        return "split" if self.env.scenarios[scenario].mesh else self.env.cpu_placement.get(kind, "split")

    def switch_of(self, scenario: str) -> str:
        """What activating ``scenario`` switches at a cost (a pod network): scenarios with the same
        switch share one visit of each round. Asked only where scenarios do not interleave."""
        return scenario

    def kept_objects(self, scenario: str) -> int:
        """How many objects the scenario needs that the next scenario keeps and adds to or deletes
        from (the Kubernetes target's filler Services): a visit orders its scenarios by it, so
        that each activation changes few. Asked only where scenarios do not interleave."""
        return 0

    @abstractmethod
    def activate(self, scenario: str) -> None:
        """Make the scenario the one runs measure; its placement is known afterwards."""

    @abstractmethod
    def start_server(self, scenario: str, server: Server, cpus: list[int]) -> None:
        """Start ``server`` on the scenario's server side, pinned to ``cpus``; return once it listens.

        The target stops it at teardown (or when the scenario is replaced)."""

    @abstractmethod
    def spawn(self, scenario: str, side: str, argv: list[str]) -> Process:
        """Start ``argv`` on one side of the scenario and return at once."""

    def run(self, scenario: str, side: str, argv: list[str], timeout: float) -> Result:
        """Run a short command on one side to its end; killed after ``timeout`` s (returncode None)."""
        proc = self.spawn(scenario, side, argv)
        try:
            out, err = proc.communicate(timeout=timeout)
            return Result(argv, proc.returncode, out, err)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate(timeout=KILL_WAIT_S)
            return Result(argv, None, out, err)

    @abstractmethod
    def cpu_snapshot(self, scenario: str, side: str) -> cpu.Snapshot:
        """/proc/stat of the node that side of the scenario runs on."""

    def end_server_wait(self, scenario: str, server: Server, latest: float) -> None:
        """Fire the timer the server's test processes wait on after a test (netserver's TCP_CRR pad) as
        soon as the client is done, at ``latest`` (time.monotonic()) at the latest. Only targets with
        ``ends_server_wait`` can; on the others a run waits it out."""
        raise NotImplementedError(f"target {self.kind} cannot end a server's wait")

    def datapath_usage(self, scenario: str, reset_peak: bool) -> dict[str, dict]:
        """The processes the target itself runs on the scenario's datapath (service-mesh proxies), by
        name: ``side``, ``cpus``, ``version``, ``cpu_ticks`` (user + system so far) and ``peak_rss_kib``
        (since the last reading with ``reset_peak``). None by default. Raises DatapathError when one of
        them died."""
        return {}

    def foreign_snapshot(self, scenario: str) -> disturbance.Snapshot | None:
        """The processes of the machine that are not the measurement's (`benchlib.host.disturbance`), read
        when the CPU window opens and closes; None where the target cannot tell them apart (the
        default: the run's foreign CPU is then not recorded)."""
        return None

    def quiet_window(self, scenario: str, seconds: float, procs: Sequence[Process]) -> QuietWindow | None:
        """Quiet the machine now, for a CPU window of ``seconds`` during which ``procs`` (the run's
        clients, started) measure: freeze what the scenario does not need. None: the target has
        nothing it can quiet (the default). The runner calls ``end()`` on what it returns before the
        window's last reading, also on failure."""
        return None

    def recover(self, scenario: str) -> list[str]:
        """Start again the datapath processes of the scenario that died; returns their names."""
        return []

    def profile_unavailable(self, scenario: str) -> str | None:
        """Why perf on this machine cannot profile the active scenario's runs; None: it can."""
        return None if self.can_profile else f"target {self.kind} runs its commands on other machines"

    def check_profiling(self) -> str:
        """perf's version where the runs run, or TargetError naming each setting that stops it."""
        return self.profiling_check(self.env)

    @classmethod
    def profiling_check(cls, env) -> str:
        """`check_profiling` of an environment, before any target is built (doctor asks it)."""
        return perf_record.check_plan(cls.kind, cls.can_profile)

    def recorder(self, placement: Placement, hz: int, perf_version: str) -> perf_record.ProfileRecorder:
        """What records a profiled run's CPU window: `perf record -a -g` on this machine."""
        return perf_record.Recorder(
            {"client": placement.client_cpus, "server": placement.server_cpus}, hz, perf_version
        )

    @abstractmethod
    def describe(self) -> dict:
        """The target's facts for every record: ``target``, ``clk_tck`` and ``versions`` (kernel, ...)."""


def service_ports(servers: Sequence[Server]) -> list[tuple[int, str]]:
    """Every (port, protocol) a service in front of these servers forwards."""
    return sorted({p for s in servers for p in s.ports()})


def wait_listening(
    server,
    proc,
    ss: Callable[[list[str]], str],
    target: str,
    place: str,
    output: Callable[[], str],
    timeout_s: float,
    poll_s: float,
) -> None:
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
    raise TargetError(f"{target}: {server.name} {place} did not listen on port {server.port} within {timeout_s:g} s")


class LocalProcess:
    """A command a target started on this machine, in a session of its own so
    that killing it takes its children along (``ip netns exec``, ``ssh``, ...).

    Its output is read from the start, as it comes: the runner asks for it only
    at the end of a run, and a tool that prints while it runs would otherwise
    block on a full pipe (64 KiB). dnsperf -v prints a line per query: blocked,
    it stopped reading answers for a second and counted ~100 queries lost per
    run, with its rate and latency off as well.

    The runner only uses communicate, poll, returncode and kill, which a remote
    target's process object provides as well.
    """

    def __init__(self, argv: list[str]):
        self._p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        self._output = (b"", b"")
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        self._output = self._p.communicate()

    @property
    def returncode(self) -> int | None:
        return self._p.returncode

    def poll(self) -> int | None:
        return self._p.poll()

    def communicate(self, timeout: float | None = None) -> tuple[bytes, bytes]:
        """(stdout, stderr) as printed; raises subprocess.TimeoutExpired like Popen does."""
        self._reader.join(timeout)
        if timeout is not None and self._reader.is_alive():  # (without a timeout, join waits for the end)
            raise subprocess.TimeoutExpired(self._p.args, timeout)
        return self._output

    def kill(self) -> None:
        try:
            os.killpg(self._p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
