"""Per-CPU /proc/stat sampling and per-side CPU accounting.

A side (client or server) owns a set of CPUs on its node. Its busy time over
the steady-state window is the sum over those CPUs of every /proc/stat field
except idle and iowait. guest and guest_nice are already included in user and
nice, so they are not added again.

The window's length is what the side's CPUs counted in it, busy and idle
(as mpstat measures it), not the harness's wall clock: a tickless
kernel counts busy time at ticks but idle time to the microsecond, so busy ticks over
a short wall window can read a few ticks above 100 %, and on a cluster node the
wall window also holds the latency of reading the counters from a pod.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from ..base.errors import ParseError

FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal", "guest", "guest_nice")
_IDLE = {"idle", "iowait"}
_GUEST = {"guest", "guest_nice"}  # counted inside user/nice already
BUSY_FIELDS = tuple(f for f in FIELDS if f not in _IDLE | _GUEST)
_BUSY_IDX = tuple(FIELDS.index(f) for f in BUSY_FIELDS)
_COUNTED_IDX = _BUSY_IDX + tuple(FIELDS.index(f) for f in _IDLE)  # every tick a CPU counted in a window
_STEAL_IDX = FIELDS.index("steal")


def parse_proc_stat(text: str) -> dict[int, list[int]]:
    """Per-CPU counters (clock ticks) from /proc/stat text; the aggregate line is skipped."""
    counters = {}
    for line in text.splitlines():
        if line.startswith("cpu") and line[3:4].isdigit():
            name, *values = line.split()
            # kernels before 2.6.33 print fewer fields; the missing ones are zero
            try:
                counters[int(name[3:])] = [int(v) for v in values[: len(FIELDS)]] + [0] * (len(FIELDS) - len(values))
            except ValueError:
                raise ParseError(f"/proc/stat line is not numeric: {line[:80]!r}") from None
    if not counters:
        raise ParseError("/proc/stat has no per-CPU lines")
    return counters


@dataclass
class Snapshot:
    wall: float  # time.time(), for the record
    mono: float  # time.monotonic(), for the window length
    counters: dict[int, list[int]]

    def to_json(self) -> dict:
        return {"wall": self.wall, "mono": self.mono, "counters": {str(c): v for c, v in sorted(self.counters.items())}}

    @classmethod
    def from_json(cls, data: dict) -> Snapshot:
        return cls(data["wall"], data["mono"], {int(c): v for c, v in data["counters"].items()})


def take(proc_stat_text: str) -> Snapshot:
    return Snapshot(time.time(), time.monotonic(), parse_proc_stat(proc_stat_text))


def read_local() -> Snapshot:
    with open("/proc/stat") as f:
        return take(f.read())


def clk_tck() -> int:
    return os.sysconf("SC_CLK_TCK")


def machine() -> dict[str, str | int]:
    """This machine's CPU model, online CPUs and memory: what two campaigns' records should agree on
    before their numbers are compared."""
    with open("/proc/cpuinfo") as cpuinfo, open("/proc/meminfo") as meminfo:
        return machine_facts(cpuinfo.read(), meminfo.read(), os.cpu_count() or 0)


def machine_facts(cpuinfo: str, meminfo: str, cpus: int) -> dict[str, str | int]:
    """`machine`'s facts from the text of /proc/cpuinfo and /proc/meminfo and the online CPUs (a
    cluster node's, read in a pod on it)."""

    def first(text: str, key: str) -> str:
        return next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith(key)), "unknown")

    return {"cpu_model": first(cpuinfo, "model name"), "cpus": cpus, "memory": first(meminfo, "MemTotal")}


def side_usage(start: Snapshot, end: Snapshot, cpus: list[int], ticks_per_s: int) -> dict[str, float]:
    """busy CPU-seconds per second (cores) and busy % of the side's CPUs over the window. Sum first,
    then divide: busy ticks summed over the side's CPUs, over the window's length in the ticks those
    CPUs counted (their mean)."""
    window = end.mono - start.mono
    if window <= 0:
        raise ParseError(f"CPU window has non-positive length {window:.3f} s")
    missing = [c for c in cpus if c not in start.counters or c not in end.counters]
    if missing:
        raise ParseError(f"CPU counters missing for CPUs {missing}")
    deltas = [[e - s for e, s in zip(end.counters[c], start.counters[c], strict=True)] for c in cpus]
    if min(min(d) for d in deltas) < 0:
        raise ParseError("CPU counters went backwards (reboot or CPU hotplug during the run?)")
    busy = sum(d[i] for d in deltas for i in _BUSY_IDX)
    counted = sum(d[i] for d in deltas for i in _COUNTED_IDX)
    if counted == 0:
        raise ParseError(f"the CPUs counted no tick in the {window:.3f} s window (shorter than 1/{ticks_per_s} s?)")
    window_ticks = counted / len(cpus)
    cores = busy / window_ticks
    return {"cpu_busy_cores": cores, "cpu_busy_pct": 100.0 * cores / len(cpus)}


def steal_cores(start: Snapshot, end: Snapshot, cpus: list[int]) -> float:
    """The CPU these CPUs wanted but the hypervisor gave to others (/proc/stat's steal), in cores over
    the window they counted (as side_usage measures it); 0 where the counters do not cover them."""
    steal = counted = 0
    for c in cpus:
        if c not in start.counters or c not in end.counters:
            return 0.0
        delta = [e - s for e, s in zip(end.counters[c], start.counters[c], strict=True)]
        steal += max(0, delta[_STEAL_IDX])
        counted += sum(max(0, delta[i]) for i in _COUNTED_IDX)
    return steal / (counted / len(cpus)) if counted else 0.0
