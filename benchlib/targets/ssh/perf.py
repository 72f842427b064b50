"""CPU profiles over SSH: `perf record -a -g` on each host, and what perf needs there.

Each side keeps its own host's samples taken on its CPUs within the CPU window.
The window is mapped onto each host's clock through /proc/uptime, read once perf
samples: perf stamps samples with CLOCK_BOOTTIME, the clock /proc/uptime counts,
so the mapping is as exact as /proc/uptime's 10 ms plus the one-way ssh latency.
"""

from __future__ import annotations

import select
import shlex
import shutil
import subprocess
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from ...profiling import perf_record, stacks
from ...settings.environment import Environment
from ...vocabulary.schema import SIDES
from .. import TargetError
from .command import CHECK_TIMEOUT_S, FIRST_LINE_TIMEOUT_S, host_label, run, ssh_argv

# One line per host: perf's version, the two kernel settings perf needs, and whether we are root.
PERF_FACTS = (
    'printf "perf=%s\\n" "$(perf --version 2>/dev/null)"; '
    'printf "kptr_restrict=%s\\n" "$(cat /proc/sys/kernel/kptr_restrict 2>/dev/null)"; '
    'printf "perf_event_paranoid=%s\\n" "$(cat /proc/sys/kernel/perf_event_paranoid 2>/dev/null)"; '
    'printf "uid=%s\\n" "$(id -u)"'
)
# Makes a directory for perf.data, starts perf record with its events disabled, enables them
# through perf's control FIFO and waits for its acknowledgement (perf may take a second or more to
# start on a busy host: sampling must cover the whole window), says (PID, directory, uptime,
# kernel), then waits for perf. A perf that never acknowledges is killed and the line never comes.
PERF_RECORD = (
    'd=$(mktemp -d /tmp/benchlib-perf.XXXXXX) && mkfifo "$d/ctl" "$d/ack" || exit 1; '
    '"$@" -D -1 --control "fifo:$d/ctl,$d/ack" -o "$d/perf.data" 2>"$d/record.stderr" & p=$!; '
    'timeout 20 sh -c \'echo enable >"$1/ctl" && read -r a <"$1/ack"\' sh "$d" || { kill $p; exit 1; }; '
    'echo "$p $d $(cut -d" " -f1 /proc/uptime) $(uname -r)"; '
    "wait $p"
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

    def __init__(self, env: Environment, cpus: dict[str, list[int]], hz: int, version: str):
        self.env, self.cpus, self.hz, self.version = env, cpus, hz, version
        self.argv = ["perf", "record", "-a", "-g", "-k", "CLOCK_BOOTTIME", "-F", str(hz)]
        self.hosts: dict[str, _HostRecord] = {}
        self.start_error = "not started"
        self.dir = Path(tempfile.mkdtemp(prefix="benchlib-perf-"))  # the local ssh's stderr

    def mark(self) -> None:
        """The remote hosts' BPF counters are not read."""

    def start(self) -> None:
        for side in SIDES:
            err = open(self.dir / f"{side}.record.stderr", "wb")  # noqa: SIM115 (ssh writes it while perf runs)
            proc = subprocess.Popen(
                ssh_argv(self.env, side, ["sh", "-c", PERF_RECORD, "sh", *self.argv]),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                start_new_session=True,
            )
            err.close()
            assert proc.stdout is not None  # piped
            ready = select.select([proc.stdout], [], [], FIRST_LINE_TIMEOUT_S)[0]
            line = proc.stdout.readline().split() if ready else []
            now = time.monotonic()
            if len(line) != 4 or not line[0].isdigit():
                proc.kill()
                proc.wait()
                self.start_error = f"{side} host {host_label(self.env, side)}: record did not start: {self._tail(side)}"
                return
            pid, directory, uptime, kernel = line
            # /proc/uptime is read before the line is sent, and shows whole hundredths: its middle
            offset = float(uptime) + UPTIME_RESOLUTION_S / 2 - now
            self.hosts[side] = _HostRecord(proc, int(pid), directory, offset, kernel)

    def stop(self) -> None:
        """SIGINT to each host's perf record: it writes perf.data out, then its ssh ends (`finish`)."""
        if len(self.hosts) != len(SIDES):
            raise perf_record.PerfError(self.start_error)
        for side, h in self.hosts.items():
            if h.proc.poll() is not None:
                raise perf_record.PerfError(
                    f"{side} host: record exited {h.proc.returncode} before the window ended: {self._remote_tail(h)}"
                )
            run(self.env, side, ["kill", "-INT", str(h.pid)], timeout=CHECK_TIMEOUT_S)

    def finish(self) -> None:
        """Each host's perf record's end after `stop`: perf.data written."""
        for side, h in self.hosts.items():
            try:
                h.proc.wait(timeout=perf_record.STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                raise perf_record.PerfError(
                    f"{side} host: record still running {perf_record.STOP_TIMEOUT_S} s after SIGINT"
                ) from None
            # perf record ends itself with the SIGINT it caught (the remote shell then says 130):
            # perf's own last line tells a written perf.data from a failure
            tail = self._remote_tail(h)
            if h.proc.returncode not in (0, 130) or "Captured and wrote" not in tail:
                raise perf_record.PerfError(
                    f"{side} host: record exited {h.proc.returncode}: {tail} {self._tail(side)}"
                )

    def profile(self, start: float, end: float, own_pids: frozenset[int] | None = None) -> perf_record.Profile:
        """``own_pids`` is this machine's: a host's processes are not told apart (no foreign category)."""
        folded: Counter = Counter()
        events: set[str] = set()
        for side, h in self.hosts.items():
            argv = ssh_argv(
                self.env,
                side,
                ["perf", "script", "-F", stacks.PERF_SCRIPT_FIELDS + ",time", "-i", f"{h.directory}/perf.data"],
            )
            on_side, seen = perf_record.fold_window(
                argv, start + h.offset_s, end + h.offset_s, frozenset(self.cpus[side]), self.dir / f"{side}.script"
            )
            if not on_side:
                raise perf_record.PerfError(f"{side} host: recorded no samples on CPUs {self.cpus[side]}")
            folded += stacks.on_host(on_side, side)
            events |= seen
        kernels = {side: h.kernel for side, h in self.hosts.items()}
        return perf_record.Profile(
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
                run(self.env, side, ["sh", "-c", remote], timeout=CHECK_TIMEOUT_S)
            except TargetError:
                pass
            if h.proc.poll() is None:
                h.proc.kill()
            h.proc.wait()
        self.hosts.clear()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _tail(self, side: str) -> str:
        return perf_record.last_line(self.dir / f"{side}.record.stderr")

    def _remote_tail(self, h: _HostRecord) -> str:
        side = next(s for s, r in self.hosts.items() if r is h)
        try:
            out = run(self.env, side, ["tail", "-n", "1", f"{h.directory}/record.stderr"], CHECK_TIMEOUT_S)
        except TargetError as exc:
            return str(exc)
        return out.strip() or "(no output)"


def check_profiling(env: Environment) -> str:
    """perf on each host, and the kernel settings it needs there: its version, or TargetError with
    one line per problem naming the host."""
    problems, versions = [], {}
    for side in SIDES:
        facts = _facts(run(env, side, ["sh", "-c", PERF_FACTS], timeout=CHECK_TIMEOUT_S))
        versions[side] = facts.get("perf") or None
        problems += [
            f"{side} host {host_label(env, side)}: {p}"
            for p in perf_record.plan_problems(
                "ssh",
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
