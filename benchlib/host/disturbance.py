"""CPU that went to other processes during a run: what tells a run that it was disturbed.

Every process of the machine is read from ``/proc/<pid>/stat`` when a run's CPU window opens and
when it closes. Its CPU time is user + system plus that of the children it reaped (``cutime``,
``cstime``), so the compilers of a ``make`` that outlives the window are counted even though each
lived and died within it. A process is the measurement's own, and not counted, when it

- runs in one of the measurement's network namespaces (the tools, their servers, the scenario's
  proxies: their namespaces' kernel work charged to them included), or, for a local cluster, in
  any network namespace but the machine's own (the nodes', the pods'), or
- is the harness or a process it started (``benchlib collect``, perf), or one of the roots given
  (a local cluster's host daemons) or a process they started;

kernel threads (ksoftirqd, kworkers: network processing, the encryption of a WireGuard or IPsec
path) count as the datapath's, and so does interrupt and softirq time charged to no process. What
is left is foreign: its time over the window, in cores, per CPU and by process.

What it cannot see: a process that started and ended within the window while its parent did not
reap it before the window closed (an orphan's time reaches its new parent, counted there, less
what the orphan had used before the window only if its old parent reaped it); foreign work that
the kernel does in its own threads (a disk flush for another program). CPU the hypervisor gave to
other guests while the run's CPUs wanted it (steal) is no process's: `with_steal` records it apart,
read from the run's own CPU counters, and names it among the takers; a target that cannot tell
processes apart records the steal alone (`steal_only`). Per CPU, a process's time is
put on the CPU it last ran on: exact for a process pinned to one CPU, an approximation for one that
moves between CPUs.
"""

from __future__ import annotations

import os
import time
from collections.abc import Collection, Iterator
from dataclasses import dataclass

PF_KTHREAD = 0x00200000  # task flag of a kernel thread (include/linux/sched.h)
TOP = 3  # foreign processes named in the record


@dataclass(frozen=True)
class Process:
    name: str  # comm
    parent: int
    ticks: int  # utime + stime + cutime + cstime
    cpu: int  # the CPU it last ran on


@dataclass(frozen=True)
class Snapshot:
    mono: float  # time.monotonic() when the scan ended
    ticks_per_s: int  # CLK_TCK of the kernel read
    foreign: dict[tuple[int, int], Process]  # (pid, start time): every process not the measurement's
    own: frozenset[int] = frozenset()  # the pids of the measurement's processes and the kernel's threads


def _stat(pid: str) -> tuple[str, list[str]] | None:
    """(comm, the fields after it) of a process; None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read().decode(errors="replace")
    except OSError:
        return None
    # comm may hold spaces and parentheses: it ends at the last ")"
    head, _, rest = text.rpartition(")")
    return head.partition("(")[2], rest.split()


def _netns(pid: str) -> int | None:
    try:
        return int(os.readlink(f"/proc/{pid}/ns/net").split("[")[1].rstrip("]"))
    except (OSError, IndexError, ValueError):
        return None


def scan(
    own_namespaces: set[int], own_root: int, outside: int | None = None, own_roots: Collection[int] = ()
) -> Snapshot:
    """Every process of this machine that is neither the measurement's nor a kernel thread, with its CPU
    time so far, and the pids of those that are (``own``: what a CPU profile's samples are told by).

    ``own_namespaces``: the inode numbers of the measurement's network namespaces; ``outside``: the
    inode of a network namespace whose processes are foreign unless otherwise the measurement's,
    every other namespace's being its own; ``own_root``: the pid of the harness, whose descendants are
    the measurement's too, as are those of ``own_roots``."""
    roots = {own_root, *own_roots}
    procs: dict[int, tuple[str, list[str]]] = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            stat = _stat(pid)
            if stat is not None:
                procs[int(pid)] = stat
    parents = {pid: int(fields[1]) for pid, (_, fields) in procs.items()}

    def lineage(pid: int) -> Iterator[int]:
        """The process, then its ancestors; a parent chain is short, and a loop in a racy read must not
        hang the run."""
        for _ in range(64):
            yield pid
            if pid <= 1 or pid not in parents:
                return
            pid = parents[pid]

    def harness(pid: int) -> bool:
        return any(p in roots for p in lineage(pid))

    def in_own_namespace(pid: int) -> bool:  # read only for the processes neither kernel's nor harness's
        # a process that has exited and is not yet reaped (a zombie: a tool just done, its wrapper) has
        # no namespace left to read: it ran in its parent's, which reaps it
        netns = next((n for p in lineage(pid) if (n := _netns(str(p))) is not None), None)
        return netns in own_namespaces or (outside is not None and netns is not None and netns != outside)

    foreign, own = {}, set()
    for pid, (name, f) in procs.items():
        if int(f[6]) & PF_KTHREAD or harness(pid) or in_own_namespace(pid):
            own.add(pid)
            continue
        ticks = sum(int(v) for v in f[11:15])
        foreign[(pid, int(f[19]))] = Process(name, int(f[1]), ticks, int(f[36]))
    return Snapshot(time.monotonic(), os.sysconf("SC_CLK_TCK"), foreign, frozenset(own))


def usage(start: Snapshot, end: Snapshot, measured_cpus: list[int]) -> dict:
    """The foreign CPU over the window between two scans, as the record keeps it: ``cores`` (on the
    whole machine), ``cpus`` (per CPU), ``measured_cores`` (on ``measured_cpus``, the run's own CPUs:
    what the disturbed threshold applies to) and ``top``, the processes that took most of those."""
    window = end.mono - start.mono
    if window <= 0:
        return {"window_s": window, "cores": 0.0, "cpus": {}, "measured_cores": 0.0, "top": []}
    delta = {key: p.ticks - (start.foreign[key].ticks if key in start.foreign else 0) for key, p in end.foreign.items()}
    # A process reaped within the window adds its whole life to its parent's cutime, and the parent's
    # to its own parent's if that one is reaped too: take what it had used before the window opened
    # off its nearest ancestor still alive.
    alive = {key[0]: key for key in end.foreign}
    before = {key[0]: p for key, p in start.foreign.items()}
    reaped: dict[tuple[int, int], list[str]] = {}  # the names of the processes whose time an ancestor holds
    for key, p in start.foreign.items():
        if key in end.foreign:
            continue
        parent = p.parent
        for _ in range(64):  # a parent chain is short; a loop in a racy read must not hang the run
            if parent in alive:
                delta[alive[parent]] -= p.ticks
                reaped.setdefault(alive[parent], []).append(p.name)
                break
            if parent not in before:
                break
            parent = before[parent].parent
    cores = {key: max(0, d) / end.ticks_per_s / window for key, d in delta.items()}
    per_cpu: dict[int, float] = {}
    for key, c in cores.items():
        per_cpu[end.foreign[key].cpu] = per_cpu.get(end.foreign[key].cpu, 0.0) + c
    top = sorted((c, key) for key, c in cores.items() if c > 0 and end.foreign[key].cpu in measured_cpus)[::-1][:TOP]
    return {
        "window_s": round(window, 6),
        "cores": round(sum(cores.values()), 6),
        "cpus": {str(c): round(v, 6) for c, v in sorted(per_cpu.items())},
        "measured_cores": round(sum(v for c, v in per_cpu.items() if c in measured_cpus), 6),
        "top": [
            {
                "name": end.foreign[key].name,
                "pid": key[0],
                "cores": round(c, 6),
                "reaped": sorted(set(reaped.get(key, []))),
            }
            for c, key in top
        ],
    }


STEAL = "hypervisor (steal)"  # the taker's name for the CPU other guests of the machine had


def with_steal(foreign: dict, steal_cores: float) -> dict:
    """``foreign`` (usage) with the steal of the run's CPUs beside the processes' cores, as
    ``steal_cores``, and among ``top`` where it took more than a process named there."""
    if steal_cores <= 0:
        return {**foreign, "steal_cores": 0.0}
    taker = {"name": STEAL, "pid": 0, "cores": round(steal_cores, 6), "reaped": []}
    top = sorted([*foreign["top"], taker], key=lambda p: p["cores"], reverse=True)[:TOP]
    return {**foreign, "steal_cores": round(steal_cores, 6), "top": top}


def steal_only(steal_cores: float) -> dict:
    """The record's foreign CPU where the target cannot tell other processes apart (a cluster's nodes
    seen through its API, SSH hosts): the processes' fields unknown (None), the steal read from the
    run's own CPU counters all the same."""
    return with_steal({"window_s": None, "cores": None, "cpus": None, "measured_cores": None, "top": []}, steal_cores)


def top_text(foreign: dict) -> str:
    """The processes that took most, e.g. ``sha256sum 0.98, make (cc) 0.40`` (cores; in parentheses the
    processes that ended within the window, whose time their parent holds)."""
    return ", ".join(
        f"{p['name']}{' (' + ', '.join(p['reaped']) + ')' if p.get('reaped') else ''} {p['cores']:.2f}"
        for p in foreign["top"]
    )
