"""CPU profiles of profiled runs: `perf record` over the CPU window, folded into stacks.

perf runs on this machine, system-wide, at ``experiment.profile_hz``; the fold
keeps the samples taken on the CPUs of both sides of the run within the CPU
window (the same window as cpu.json), by their CLOCK_MONOTONIC time. perf takes
0.2-0.25 s to start sampling here (more on a busy machine): it starts with its
events disabled, and the tool starts once perf has acknowledged enabling them
through its control FIFO; it stops right after the window. Not `perf record -C` nor `perf script --time`: with
either, perf misses the fork of a task outside them (netserver's test process,
forked on the server's CPU before the window) and names it ":<pid>". Only the
folded stacks are kept (benchlib.profiling.stacks); perf.data is deleted. A perf that
fails fails its profiled run alone.

Whether perf can profile at all is checked before any run (`plan_problems`,
a pure function of the machine's values, and `check_plan`, which reads them).
"""

from __future__ import annotations

import os
import re
import select
import shutil
import signal
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ..base.errors import TargetError
from . import bpfstats, stacks

VERSION_TIMEOUT_S = 10
START_TIMEOUT_S = 20  # perf record to start sampling: 0.2-0.25 s here, a second or more on a busy machine
EXTRA_S = 0.6  # a profiled run's time beyond a measured one's, for estimates (BENCHMARKS.md sections 2 and 3)
STOP_TIMEOUT_S = 30  # perf record writes its buffers out after SIGINT: seconds at most
SCRIPT_TIMEOUT_S = 120  # perf script resolves symbols of a few thousand samples; far less than this
KPTR_RESTRICT = Path("/proc/sys/kernel/kptr_restrict")
PERF_EVENT_PARANOID = Path("/proc/sys/kernel/perf_event_paranoid")
BPF_JIT_KALLSYMS = Path("/proc/sys/net/core/bpf_jit_kallsyms")
OFF = "or set experiment.profile_runs: 0"


class PerfError(Exception):
    """perf failed during a profiled run: the run fails with this reason, the campaign goes on."""


def plan_problems(
    target: str,
    target_profiles: bool,
    perf_version: str | None,
    kptr_restrict: int | None,
    perf_event_paranoid: int | None,
    root: bool,
) -> list[str]:
    """One line per reason profiled runs cannot be recorded (empty: they can): the values of this
    machine in, messages naming the setting and its fix out."""
    if not target_profiles:
        return [
            f"experiment.profile_runs: target {target} cannot profile (perf runs on this machine, "
            f"its runs run on others): {OFF}"
        ]
    problems = []
    if not perf_version:
        problems.append(
            "experiment.profile_runs: `perf` is not on PATH or does not answer `perf --version`: "
            f"install it (apt-get install linux-perf) {OFF}"
        )
    if kptr_restrict is not None and (kptr_restrict >= 2 or (kptr_restrict != 0 and not root)):
        problems.append(
            f"{KPTR_RESTRICT} is {kptr_restrict}: kernel symbols are hidden from perf and profiles "
            f"would show only [unknown]: run `sysctl -w kernel.kptr_restrict=0` {OFF}"
        )
    if perf_event_paranoid is not None and perf_event_paranoid > -1 and not root:
        problems.append(
            f"{PERF_EVENT_PARANOID} is {perf_event_paranoid}: a user other than root cannot profile "
            f"every CPU (perf record -a): run `sysctl -w kernel.perf_event_paranoid=-1` or run as root "
            f"{OFF}"
        )
    return problems


def perf_version() -> str | None:
    """`perf --version`'s answer ("perf version 6.1.192"), None if perf is missing or broken."""
    perf = shutil.which("perf")
    if perf is None:
        return None
    try:
        r = subprocess.run([perf, "--version"], capture_output=True, text=True, timeout=VERSION_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout.strip() if r.returncode == 0 and r.stdout.strip() else None


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def bpf_event_flags(jit_kallsyms: int | None) -> list[str]:
    """perf record's BPF side-band thread ends on its next poll, up to a second after perf is told to
    stop (half a second a profiled run on average). Where /proc/kallsyms names the JIT-ed BPF programs
    (net.core.bpf_jit_kallsyms = 1), perf script names a datapath's programs from it (they stay loaded
    past the run) and the thread is left out; elsewhere only its events name them."""
    return ["--no-bpf-event"] if jit_kallsyms == 1 else []


def check_plan(target: str, target_profiles: bool, root: bool | None = None) -> str:
    """perf's version, or TargetError with one line per problem (`plan_problems`) on this machine, for
    perf run as root or not (default: as this process runs)."""
    version = perf_version() if target_profiles else None
    root = os.geteuid() == 0 if root is None else root
    problems = plan_problems(
        target, target_profiles, version, _read_int(KPTR_RESTRICT), _read_int(PERF_EVENT_PARANOID), root
    )
    if problems:
        raise TargetError("cannot record profiled runs:\n  " + "\n  ".join(problems))
    assert version is not None  # plan_problems names a missing perf
    return version


@dataclass(frozen=True)
class Profile:
    folded: bytes  # stacks.folded_bytes
    meta: dict  # as a record's meta.json keeps it under "profile"


class ProfileRecorder(Protocol):
    """What records a profiled run: perf from `start` until `stop`, which only asks perf to stop:
    perf writes its data out (most of a second) while the run's tool ends, and `finish` waits for it;
    `profile` folds the CPU window (time.monotonic() here); `close` leaves no perf process and no
    perf.data behind."""

    def start(self) -> None: ...
    def mark(self) -> None: ...  # at each edge of the CPU window: the BPF programs' counters
    def stop(self) -> None: ...
    def finish(self) -> None: ...
    def profile(self, start: float, end: float, own_pids: frozenset[int] | None = None) -> Profile: ...
    def close(self) -> None: ...


class Recorder:
    """`perf record` on this machine from `start` until `stop`, kept for ``cpus``; `profile` folds
    what it recorded."""

    def __init__(self, cpus: dict[str, list[int]], hz: int, version: str):
        self.cpus, self.hz, self.version = cpus, hz, version
        self.dir = Path(tempfile.mkdtemp(prefix="benchlib-perf-"))
        self.data = self.dir / "perf.data"
        self.union = frozenset(c for cs in cpus.values() for c in cs)
        self.argv = [
            *("perf", "record", "-a", "-g", "-k", "CLOCK_MONOTONIC", "-F", str(hz)),
            *bpf_event_flags(_read_int(BPF_JIT_KALLSYMS)),
            *("-o", str(self.data)),
        ]
        self.proc: subprocess.Popen | None = None
        self.start_error = "not started"
        self.stderr = self.dir / "record.stderr"
        self.bpf: bpfstats.Window | None = None
        self._fifos: list[int] = []  # perf's control FIFO and its acknowledgements

    def start(self) -> None:
        """perf record, its events disabled, then enabled through its control FIFO: returns once perf
        acknowledges, so that sampling covers the tool's whole run however long perf took to start."""
        self.bpf = bpfstats.Window()
        ctl, ack = self.dir / "ctl", self.dir / "ack"
        os.mkfifo(ctl)
        os.mkfifo(ack)
        # opened read-write: neither open waits for perf, and "enable" waits in the FIFO until perf reads it
        self._fifos = [os.open(f, os.O_RDWR | os.O_CLOEXEC) for f in (ctl, ack)]
        argv = [*self.argv, "-D", "-1", "--control", f"fifo:{ctl},{ack}"]
        with open(self.stderr, "wb") as err:
            try:
                self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
            except OSError as exc:  # perf removed since the plan check: this run fails, not the campaign
                self.start_error = f"cannot start `perf record`: {exc.strerror}"
                return
        os.write(self._fifos[0], b"enable\n")
        why = self._unacknowledged()
        if why is not None:
            self._end_perf()
            self.proc, self.start_error = None, why

    def _unacknowledged(self) -> str | None:
        """None once perf acknowledges "enable" (it writes "ack\n" and its C string's NUL); else why not."""
        assert self.proc is not None
        deadline, answer = time.monotonic() + START_TIMEOUT_S, b""
        while b"\n" not in answer:
            if self.proc.poll() is not None:
                return f"record exited {self.proc.returncode} before it sampled: {self._last_line()}"
            if time.monotonic() > deadline:
                return f"record did not start sampling within {START_TIMEOUT_S} s: {self._last_line()}"
            if select.select([self._fifos[1]], [], [], 0.05)[0]:
                answer += os.read(self._fifos[1], 64)
        return None

    def mark(self) -> None:
        if self.bpf is not None:
            self.bpf.mark()

    def stop(self) -> None:
        """SIGINT ends perf record as Ctrl-C does: it writes perf.data out (`finish` waits for that)."""
        if self.proc is None:
            raise PerfError(self.start_error)
        if self.proc.poll() is not None:
            raise PerfError(f"record exited {self.proc.returncode} before the window ended: {self._last_line()}")
        self.proc.send_signal(signal.SIGINT)

    def finish(self) -> None:
        """perf record's end after `stop` (it writes perf.data out: 0.02-0.2 s here, 0.75 s with its BPF
        side-band thread, see `bpf_event_flags`); killed if it overruns."""
        assert self.proc is not None  # stop() raised otherwise
        try:
            self.proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise PerfError(
                f"record still running {STOP_TIMEOUT_S} s after SIGINT; killed it: {self._last_line()}"
            ) from None
        if self.proc.returncode not in (0, -signal.SIGINT) or not self.data.is_file():
            raise PerfError(f"record exited {self.proc.returncode}: {self._last_line()}")

    def profile(self, start: float, end: float, own_pids: frozenset[int] | None = None) -> Profile:
        """perf script's stacks between ``start`` and ``end`` (time.monotonic()), folded, and what
        the record says of them; the samples of tasks not in ``own_pids`` marked (stacks.fold)."""
        argv = ["perf", "script", "-F", stacks.PERF_SCRIPT_FIELDS + ",time", "-i", str(self.data)]
        folded, events = fold_window(argv, start, end, self.union, self.dir / "script.stderr", own_pids)
        samples = sum(folded.values())
        if not samples:
            raise PerfError(f"recorded no samples: {self._last_line()}")
        return Profile(
            stacks.folded_bytes(folded),
            {
                "perf_version": self.version,
                "event": ",".join(sorted(events)),
                "frequency_hz": self.hz,
                "kernel": os.uname().release,
                "cpus": self.cpus,
                "attribution": stacks.attribution(self.cpus),
                "window_s": round(end - start, 6),
                "samples": samples,
                "kernel_symbols": stacks.kernel_symbols(folded),
                "command": self.argv,
                "bpf": self.bpf.record() if self.bpf is not None else None,
            },
        )

    def close(self) -> None:
        """Kill perf if it still runs, delete perf.data, and put kernel.bpf_stats_enabled back."""
        if self.bpf is not None:
            self.bpf.close()
        self._end_perf()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _end_perf(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for fd in self._fifos:
            os.close(fd)
        self._fifos = []

    def _last_line(self) -> str:
        return last_line(self.stderr)


def fold_window(
    argv: list[str],
    start: float,
    end: float,
    cpus: frozenset[int],
    err_path: Path,
    own_pids: frozenset[int] | None = None,
) -> tuple[Counter, set[str]]:
    """The stacks `argv` (a `perf script -F PERF_SCRIPT_FIELDS,time`, here or over ssh) prints for
    samples taken on ``cpus`` between ``start`` and ``end`` (perf's clock), folded, and the events they
    were taken on; read as perf prints them, so a long profile is never held whole as text."""
    with open(err_path, "wb") as err:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, text=True, errors="replace"
        )
        assert proc.stdout is not None  # piped
        events: set[str] = set()
        timer = _Deadline(proc, SCRIPT_TIMEOUT_S)
        try:
            folded = stacks.fold(_window(proc.stdout, start, end, cpus, events), own_pids)
        finally:
            proc.stdout.close()
            timer.cancel()
            proc.wait()
    if timer.fired:
        raise PerfError(f"script still running after {SCRIPT_TIMEOUT_S} s; killed it")
    if proc.returncode != 0:
        raise PerfError(f"script exited {proc.returncode}: {last_line(err_path)}")
    return folded, events


def last_line(path: Path) -> str:
    try:
        lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        lines = []
    return lines[-1][:300] if lines else "(no output)"


# a sample line with its time: "netperf 1234/1234 [000] 24882.707932: cpu-clock:ppp: "
_TIMED = re.compile(r"^(?P<head>.*?\s\[(?P<cpu>\d+)\])\s+(?P<time>\d+\.\d+):\s+(?P<event>\S+?):?\s*$")


def _window(lines: Iterable[str], start: float, end: float, cpus: frozenset[int], events: set[str]) -> Iterator[str]:
    """The samples of `perf script -F ...,time` taken on ``cpus`` between ``start`` and ``end``,
    without their time (as stacks.fold reads them); notes in ``events`` the events they were taken on."""
    keep = True
    for line in lines:
        if line[:1] not in (" ", "\t", "\n", ""):
            m = _TIMED.match(line.rstrip("\n"))
            if m:
                keep = start <= float(m["time"]) <= end and int(m["cpu"]) in cpus
                if keep:
                    events.add(m["event"].split(":")[0])  # cpu-clock:ppp: the event, then its modifiers
                    yield f"{m['head']} {m['event']}:\n"
                continue
        if keep or not line.strip():
            yield line


class _Deadline:
    """Kill ``proc`` after ``seconds`` unless cancelled first."""

    def __init__(self, proc: subprocess.Popen, seconds: float):
        import threading

        self.fired = False

        def fire() -> None:
            self.fired = True
            proc.kill()

        self._timer = threading.Timer(seconds, fire)
        self._timer.daemon = True
        self._timer.start()

    def cancel(self) -> None:
        self._timer.cancel()
