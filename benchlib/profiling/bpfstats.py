"""The kernel's own accounting of its BPF programs over a profiled run's CPU window.

With ``kernel.bpf_stats_enabled`` set to 1 the kernel counts, per loaded program, how often it ran
(run_cnt) and for how long (run_time_ns); `bpftool prog show --json` prints both (only once
non-zero). A profiled run turns the setting on before its window, reads every program at the
window's edges, and puts the previous value back when it ends, failed or not. The counters go into
the record as bpftool printed them (meta.json, profile.bpf), with where each program is attached as
`bpftool net show` prints it in every named network namespace; `table` makes them tidy (per program
and run: the profile_bpf table), which the analysis puts per unit of work (analysis.profiles).

Counting costs a clock read per program run: a profiled run's numbers, like its perf samples, are
never a measured run's.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import polars as pl

from ..vocabulary.schema import PROFILE_BPF_SCHEMA

STATS = Path("/proc/sys/kernel/bpf_stats_enabled")
NETNS = Path("/run/netns")
TIMEOUT_S = 10
LAB_ID = re.compile(r"^bl-\d+_\d+-")
# what a program entry keeps: the rest (maps, BTF ids, pids) says nothing of its cost
FIELDS = ("id", "type", "name", "tag", "run_cnt", "run_time_ns")


def _bpftool(argv: list[str], netns: str | None = None) -> list | dict | None:
    """bpftool's JSON answer to ``argv`` (in the named network namespace ``netns``); None without a
    working bpftool or an answer."""
    tool = shutil.which("bpftool")
    if tool is None:
        return None
    inside = ["ip", "netns", "exec", netns] if netns else []
    try:
        r = subprocess.run([*inside, tool, *argv, "--json"], capture_output=True, text=True, timeout=TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if r.returncode != 0:
        return None
    try:
        return json.loads(r.stdout)
    except json.JSONDecodeError:
        return None


def programs() -> list[dict] | None:
    """Every loaded program's FIELDS as bpftool prints them; None without a working bpftool."""
    out = _bpftool(["prog", "show"])
    if not isinstance(out, list):
        return None
    return [{k: p[k] for k in FIELDS if k in p} for p in out]


def attachments() -> list[dict]:
    """Where programs hang on devices: one entry per namespace (None: this one), as `bpftool net show`
    prints it there."""
    names = sorted(p.name for p in NETNS.iterdir()) if NETNS.is_dir() else []
    return [{"netns": ns, "net": _bpftool(["net", "show"], ns)} for ns in [None, *names]]


class Window:
    """kernel.bpf_stats_enabled on from construction until `close`, which restores the previous value;
    `mark` reads every program (call it at the CPU window's start and end)."""

    def __init__(self) -> None:
        self.marks: list[list[dict] | None] = []
        self.error: str | None = None
        try:
            self.previous: str | None = STATS.read_text().strip()
            STATS.write_text("1")
        except OSError as exc:
            self.previous, self.error = None, f"cannot turn on {STATS}: {exc.strerror}"
        if self.error is None and shutil.which("bpftool") is None:
            self.error = "bpftool is not on PATH (apt-get install bpftool)"

    def mark(self) -> None:
        if self.error is None:
            self.marks.append(programs())

    def close(self) -> None:
        if self.previous is not None:
            try:
                STATS.write_text(self.previous)
            except OSError:
                pass
            self.previous = None

    def record(self) -> dict:
        """What meta.json keeps: the counters at the window's edges and the attachments, or why not."""
        if self.error is None and (len(self.marks) != 2 or None in self.marks):
            self.error = "bpftool prog show did not answer at both edges of the window"
        if self.error is not None:
            return {"error": self.error}
        return {"before": self.marks[0], "after": self.marks[1], "attached": attachments()}


def _attach_points(attached: list[dict]) -> dict[int, str]:
    """{program id: "<netns> <device> <hook>"} from `bpftool net show` in each namespace."""
    points: dict[int, list[str]] = {}
    for entry in attached:
        # a lab's namespaces carry its id (bl-<pid>_<n>-), which differs from run to run
        ns = LAB_ID.sub("", entry.get("netns") or "host")
        for net in entry.get("net") or []:
            for hook, items in net.items():  # "xdp", "tc", "flow_dissector"
                for it in items or []:
                    # tc's kind reads "clsact/ingress"
                    kind = str(it.get("kind", "")).rpartition("/")[2] if hook == "tc" else ""
                    where = " ".join(filter(None, [ns, it.get("devname"), hook, kind]))
                    pid = it.get("id") or it.get("prog_id")
                    if pid is not None:
                        points.setdefault(int(pid), []).append(where)
    return {pid: ", ".join(sorted(set(w))) for pid, w in points.items()}


def rows(run_id: str, bpf: dict | None) -> list[dict]:
    """One row (PROFILE_BPF_SCHEMA) per program that ran within the window of ``run_id`` (its counters'
    difference); none where the record has no counters. Plain dicts: parse workers build no polars
    frame per record."""
    if not bpf or "after" not in bpf:
        return []
    before = {p["id"]: p for p in bpf["before"]}
    attach = _attach_points(bpf.get("attached") or [])
    out = []
    for p in bpf["after"]:
        b = before.get(p["id"], {})
        cnt = p.get("run_cnt", 0) - b.get("run_cnt", 0)
        ns = p.get("run_time_ns", 0) - b.get("run_time_ns", 0)
        if cnt > 0:
            out.append(
                {
                    "run_id": run_id,
                    "id": p["id"],
                    "name": p.get("name", ""),
                    "type": p.get("type", ""),
                    "attach": attach.get(p["id"], ""),
                    "run_cnt": cnt,
                    "run_time_ns": ns,
                }
            )
    return out


def table(run_id: str, bpf: dict | None) -> pl.DataFrame:
    """`rows` as a table of PROFILE_BPF_SCHEMA."""
    return pl.DataFrame(rows(run_id, bpf), schema=PROFILE_BPF_SCHEMA)
