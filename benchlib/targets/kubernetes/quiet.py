"""Quiet measurement windows: the nodes' host daemons frozen while a run's CPU window is open.

On a cluster whose nodes run on this machine (the local cluster of
scripts/k8s-local-cluster.sh), the control plane, the kubelets, containerd,
kube-proxy and the CNI agents share the CPUs with the measurement. Their
work is not the datapath's while a test runs: the pods, the kernel's rules
and eBPF programs carry the traffic. So, from the first CPU snapshot to the
last, the daemons named by the environment's pid files are moved into a
cgroup of their own and frozen, then thawed and moved back before the
window's last snapshot (which itself goes through the API, the kubelet and
containerd). Only each daemon's own process moves: the containerd-shims that
hold the tools' stdio, and the pods, stay where they are and keep running.

A frozen cluster must never be left behind. Thawing happens in ``finally``;
and a watchdog process of its own session (so Ctrl-C on the terminal does
not reach it) thaws and moves the daemons back when a window outlives its
deadline, or at once when the pipe from benchlib closes (benchlib exited,
however: SIGKILL included). A later session also thaws and removes the
cgroups of sessions whose process is gone; `k8s-local-cluster.sh down` does
the same before stopping the daemons.

The freezer is probed at run time: cgroup v2 (``cgroup.freeze``) on a
unified hierarchy, else the v1 freezer (``freezer.state``), else the v2
hierarchy of a hybrid mount. Where none can be used, the runs go on without
quiet windows, one warning says why, and each record says so.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

_log = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
PREFIX = "benchlib-quiet-"  # + the owner's pid: a killed session's cgroup is found by it
WATCHDOG = Path(__file__).with_name("quiet_watchdog.py")
FREEZE_WAIT_S = 1.0  # a task in uninterruptible sleep delays its freezing; longer is reported, not waited for
WATCHDOG_MARGIN_S = 5.0  # past a window's end, the watchdog thaws whatever benchlib did not
WATCHDOG_REPLY_S = 5.0
# how long a release keeps moving stragglers out before it leaves the cgroup to the next session; a
# child a daemon forked as the cgroup's pids were read (kube-proxy's iptables-restore) is born inside
# and keeps it busy (the watchdog's RMDIR_S is the same for its own release)
RELEASE_S = 2.0


class QuietError(Exception):
    """Freezing cannot be done here (no freezer, no permission): the runs go on without it."""


@dataclass(frozen=True)
class Freezer:
    """One cgroup hierarchy that can freeze: v2 (cgroup.freeze) or the v1 freezer controller."""

    version: int  # 1 or 2
    root: Path  # where the hierarchy is mounted

    @property
    def mechanism(self) -> str:
        return "cgroup v2 cgroup.freeze" if self.version == 2 else "cgroup v1 freezer"

    def cgroup_of(self, pid: int) -> Path:
        """The directory of the process's cgroup in this hierarchy."""
        for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if (self.version == 2 and controllers == "") or (self.version == 1 and "freezer" in controllers.split(",")):
                return self.root / path.lstrip("/")
        raise QuietError(f"process {pid} is in no cgroup of {self.root}")

    def move(self, pid: int, cgroup: Path) -> None:
        (cgroup / "cgroup.procs").write_text(f"{pid}\n")

    def procs(self, cgroup: Path) -> list[int]:
        try:
            return [int(p) for p in (cgroup / "cgroup.procs").read_text().split()]
        except FileNotFoundError:
            return []

    def set_frozen(self, cgroup: Path, frozen: bool) -> None:
        if self.version == 2:
            (cgroup / "cgroup.freeze").write_text("1" if frozen else "0")
        else:
            (cgroup / "freezer.state").write_text("FROZEN" if frozen else "THAWED")

    def state(self, cgroup: Path) -> str:
        """FROZEN, FREEZING or THAWED, in v1's words for both versions."""
        if self.version == 1:
            return (cgroup / "freezer.state").read_text().strip()
        events = dict(line.split() for line in (cgroup / "cgroup.events").read_text().splitlines())
        wanted = (cgroup / "cgroup.freeze").read_text().strip() == "1"
        if events.get("frozen") == "1":
            return "FROZEN"
        return "FREEZING" if wanted else "THAWED"


def _mounts() -> list[tuple[str, Path, set[str]]]:
    out = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        _, where, fstype, options, *_ = line.split()
        out.append((fstype, Path(where), set(options.split(","))))
    return out


def probe(mounts: list[tuple[str, Path, set[str]]] | None = None) -> Freezer:
    """The freezer this machine offers, or QuietError saying why there is none we may use."""
    mounts = _mounts() if mounts is None else mounts
    found = None
    for fstype, where, _ in mounts:  # a unified hierarchy first: v2 is where the kernel is going
        if fstype == "cgroup2" and where == CGROUP_ROOT:
            found = Freezer(2, where)
    for fstype, where, options in mounts if found is None else []:
        if fstype == "cgroup" and "freezer" in options:
            found = Freezer(1, where)
    for fstype, where, _ in mounts if found is None else []:  # a hybrid mount's v2 hierarchy freezes too
        if fstype == "cgroup2":
            found = Freezer(2, where)
    if found is None:
        raise QuietError("no cgroup freezer is mounted (neither a cgroup2 hierarchy nor the v1 freezer)")
    if not os.access(found.root, os.W_OK):
        raise QuietError(f"no permission to create cgroups under {found.root} (freezing needs root)")
    return found


def release(freezer: Freezer, cgroup: Path, back: dict[int, Path] | None = None) -> None:
    """Thaw ``cgroup``, move its processes back (to ``back[pid]``, else the parent) and remove it."""
    give_up = time.monotonic() + RELEASE_S
    while cgroup.exists():
        freezer.set_frozen(cgroup, False)
        for pid in freezer.procs(cgroup):
            try:
                freezer.move(pid, (back or {}).get(pid, cgroup.parent))
            except (FileNotFoundError, ProcessLookupError, OSError):
                pass  # it exited meanwhile
        try:
            cgroup.rmdir()
        except FileNotFoundError:
            return
        except OSError:  # a process came in between: move it out too, for up to RELEASE_S
            if time.monotonic() > give_up:
                return  # thawed all the same, removed by the next session
            time.sleep(0.05)


def release_stale(freezer: Freezer, log=_log.info) -> list[str]:
    """Thaw and remove the quiet cgroups of sessions whose process is gone."""
    removed = []
    for cgroup in sorted(freezer.root.glob(f"{PREFIX}*")):
        pid = cgroup.name[len(PREFIX) :]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            log(f"kubernetes: thawing {cgroup}, the quiet cgroup of a killed campaign")
            release(freezer, cgroup)
            removed.append(str(cgroup))
    return removed


def daemons(pid_dir: Path) -> dict[str, int]:
    """Every daemon of the pid directory (name.pid) whose process runs, by name."""
    found = {}
    for path in sorted(pid_dir.glob("*.pid")):
        try:
            pid = int(path.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
        if Path(f"/proc/{pid}").exists():
            found[path.stem] = pid
    return found


def choose(
    running: dict[str, int], keep: dict[str, str], only: list[str] | None = None
) -> tuple[dict[str, int], dict[str, str]]:
    """(to freeze by name, kept by name with why) of the daemons running; ``keep``: glob -> why;
    ``only``: globs, the daemons matching none of them kept too."""
    frozen, kept = {}, {}
    for name, pid in running.items():
        why = next((w for pattern, w in keep.items() if fnmatch.fnmatchcase(name, pattern)), None)
        if why is None and only is not None and not any(fnmatch.fnmatchcase(name, p) for p in only):
            why = "not among those frozen here"
        if why is None:
            frozen[name] = pid
        else:
            kept[name] = why
    return frozen, kept


class Watchdog:
    """The detached process that thaws after a deadline, or when this process's pipe to it closes."""

    def __init__(self, freezer: Freezer, cgroup: Path):
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-S", str(WATCHDOG), str(freezer.version), str(cgroup)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            start_new_session=True,  # Ctrl-C on the terminal must not stop it before it thaws
        )

    def tell(self, line: str) -> None:
        """Send one command and wait for its acknowledgement (so a freeze never precedes the arming)."""
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        reply = self.proc.stdout.readline()
        if not reply:
            raise QuietError(f"the watchdog exited ({self.proc.poll()})")

    def close(self) -> None:
        """Close its pipe: it releases the cgroup (a no-op once thawed) and exits."""
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(WATCHDOG_REPLY_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Quiet:
    """A session's quiet windows: one cgroup, one watchdog, the daemons of one pid directory, and of the
    other clusters a campaign measures side by side (``others``: cluster name -> its pid directory).
    A window freezes every cluster's daemons; what the run keeps running is kept in its own cluster only."""

    def __init__(
        self,
        pid_dir: Path | None,
        keep: dict[str, str],
        max_window_s: float,
        log=_log.info,
        others: dict[str, Path] | None = None,
    ):
        self.keep, self.max_window_s, self.log = keep, max_window_s, log
        # "": the environment's own cluster (None: only other clusters' daemons run here)
        self.pid_dirs = {**({"": pid_dir} if pid_dir is not None else {}), **(others or {})}
        self.unavailable: str | None = None
        self.freezer: Freezer | None = None
        self.cgroup: Path | None = None
        self.watchdog: Watchdog | None = None

    def start(self) -> None:
        """Probe the freezer and clean what killed sessions left; on failure, one warning and no windows."""
        try:
            self.freezer = probe()
            release_stale(self.freezer, self.log)
            for cluster, pid_dir in self.pid_dirs.items():
                if not pid_dir.is_dir():
                    where = f"kubernetes.clusters.{cluster}.quiet.pid_dir" if cluster else "quiet.pid_dir"
                    raise QuietError(f"{pid_dir} ({where}) is not a directory")
            self.cgroup = self.freezer.root / f"{PREFIX}{os.getpid()}"
            self.cgroup.mkdir(exist_ok=True)
            self.watchdog = Watchdog(self.freezer, self.cgroup)
            self.watchdog.tell("disarm")  # it runs and answers
        except (QuietError, OSError) as exc:
            self.unavailable = f"{exc}"
            self.log(f"kubernetes: warning: no quiet measurement windows: {exc}")
            self.close()

    def close(self) -> None:
        if self.watchdog is not None:
            self.watchdog.close()
            self.watchdog = None
        if self.freezer is not None and self.cgroup is not None:
            release(self.freezer, self.cgroup)
        self.cgroup = None

    def window(self, seconds: float, needs: dict[str, str], cluster: str = "") -> Window:
        """Freeze now for a window of ``seconds``, keeping ``needs`` (glob -> why) of ``cluster``'s daemons
        as well; end() thaws."""
        return Window(self, seconds, self.keep, max_s=self.max_window_s, needs=(cluster, needs))

    def daemons(self) -> dict[str, int]:
        """Every running daemon of every cluster, by name: the own cluster's as named by their pid files,
        the others' as <cluster>/<name>."""
        return {
            f"{cluster}/{name}" if cluster else name: pid
            for cluster, pid_dir in self.pid_dirs.items()
            for name, pid in daemons(pid_dir).items()
        }

    def freeze_only(self, patterns: list[str], seconds: float) -> Window:
        """Freeze now only the daemons matching ``patterns`` (globs), for at most ``seconds`` (then the
        watchdog thaws them); end() thaws. No max_window_s: that bound is for the kubelets' leases."""
        return Window(self, seconds, dict(self.keep), only=patterns)


class Unquiet:
    """A window that could not be quieted, and why."""

    def __init__(self, seconds: float, why: str):
        self.result = {"window_s": round(seconds, 3), "unavailable": why}

    def end(self) -> dict:
        return self.result


class Window:
    """One frozen window. end() thaws, moves the daemons back, and returns what the record keeps."""

    def __init__(
        self,
        quiet: Quiet,
        seconds: float,
        keep: dict[str, str],
        max_s: float | None = None,
        only: list[str] | None = None,
        needs: tuple[str, dict[str, str]] = ("", {}),
    ):
        self.quiet = quiet
        self.needs = needs  # (cluster, glob -> why): what that cluster's run keeps running
        self.back: dict[int, Path] = {}
        self.result: dict = {"window_s": round(seconds, 3)}
        self.started = time.monotonic()
        if quiet.unavailable is not None or quiet.freezer is None or quiet.cgroup is None or quiet.watchdog is None:
            self.result["unavailable"] = quiet.unavailable or "quiet windows were not started"
            return
        if max_s is not None and seconds > max_s:
            self.result["unavailable"] = (
                f"the window ({seconds:g} s) is longer than quiet.max_window_s ({max_s:g} s): "
                "a longer freeze lets node leases expire"
            )
            return
        try:
            self._freeze(quiet.freezer, quiet.cgroup, quiet.watchdog, seconds, keep, only)
        except OSError as exc:  # never a crash, never half frozen: undo, and say why
            release(quiet.freezer, quiet.cgroup, self.back)
            quiet.cgroup.mkdir(exist_ok=True)
            self.result = {"window_s": round(seconds, 3), "unavailable": f"freezing failed: {exc}"}

    def _freeze(
        self, freezer: Freezer, cgroup: Path, watchdog: Watchdog, seconds: float, keep: dict, only: list[str] | None
    ) -> None:
        frozen, kept = {}, {}
        own, needs = self.needs
        for cluster, pid_dir in self.quiet.pid_dirs.items():
            found, spared = choose(daemons(pid_dir), {**keep, **needs} if cluster == own else keep, only)
            prefix = f"{cluster}/" if cluster else ""
            frozen.update({prefix + n: pid for n, pid in found.items()})
            kept.update({prefix + n: why for n, why in spared.items()})
        failed = {}
        for name, pid in frozen.items():
            try:
                self.back[pid] = freezer.cgroup_of(pid)
            except (OSError, QuietError) as exc:
                failed[name] = f"its cgroup cannot be read: {exc}"
        # armed with the way back before anything moves: a kill from here on is undone by the watchdog
        plan = {"seconds": seconds + WATCHDOG_MARGIN_S, "back": {str(p): str(c) for p, c in self.back.items()}}
        try:
            watchdog.tell("arm " + json.dumps(plan))
        except (QuietError, OSError) as exc:  # never frozen without a watchdog armed
            self.result["unavailable"] = f"the watchdog cannot be armed: {exc}"
            return
        moved = {}
        for name, pid in frozen.items():
            if name in failed:
                continue
            try:
                freezer.move(pid, cgroup)
                moved[name] = pid
            except OSError as exc:
                failed[name] = f"cannot be moved into {cgroup}: {exc.strerror or exc}"
        freezer.set_frozen(cgroup, True)
        deadline = time.monotonic() + FREEZE_WAIT_S
        while freezer.state(cgroup) != "FROZEN" and time.monotonic() < deadline:
            time.sleep(0.005)
        state = freezer.state(cgroup)
        self.result.update(
            mechanism=freezer.mechanism,
            frozen=moved,
            kept=kept,
            failed=failed,
            freeze_state=state,  # FREEZING: a daemon was in uninterruptible sleep and froze late, if at all
            freeze_ms=round((time.monotonic() - self.started) * 1000, 1),
        )

    def end(self) -> dict:
        """Thaw (idempotent) and return the record's ``quiet``: what was frozen, kept, and could not be."""
        q = self.quiet
        if "frozen" not in self.result or q.freezer is None or q.cgroup is None:
            return self.result
        if "frozen_s" in self.result:
            return self.result
        freezer, cgroup = q.freezer, q.cgroup
        try:
            thawing = time.monotonic()
            freezer.set_frozen(cgroup, False)
            self.result["frozen_s"] = round(thawing - self.started, 3)
            for pid in freezer.procs(cgroup):
                try:
                    freezer.move(pid, self.back.get(pid, cgroup.parent))
                except OSError:
                    pass  # exited meanwhile
            self.result["thawed"] = freezer.state(cgroup) == "THAWED"
            # thawed and every daemon back in its own cgroup: with freeze_ms, what a window costs
            self.result["thaw_ms"] = round((time.monotonic() - thawing) * 1000, 1)
        except OSError as exc:  # the watchdog, still armed, thaws within its margin
            self.result.update(frozen_s=round(time.monotonic() - self.started, 3), thawed=False)
            q.log(f"kubernetes: thawing {cgroup} failed ({exc}); the quiet watchdog thaws it")
            return self.result
        if q.watchdog is not None:
            try:
                q.watchdog.tell("disarm")
            except (QuietError, OSError) as exc:  # thawed all the same; the next window starts it again
                q.log(f"kubernetes: the quiet watchdog is gone ({exc})")
        return self.result
