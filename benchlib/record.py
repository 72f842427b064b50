"""Raw run records: the one place that knows how a run is stored on disk.

A campaign's records live below ``data/raw/<campaign>/``, one directory per run::

    <environment>/<scenario>/<test>/r<block:03d>/
        meta.json           keys, test parameters, commands, exit codes, outcome, placement, target
        cpu.json            each side's /proc/stat counters at the start and end of the CPU window
        stdout-<i>.txt      what client process i printed, exactly
        stderr-<i>.txt
        failed-attempt-<n>/ the output of earlier attempts that failed
        SHA256SUMS          the sha256 of every other file

A record is built under a temporary name and renamed into place once complete,
so a record that exists is complete and a resumed campaign skips it. Records
are read back only through `load`, which verifies the checksums, refuses a
``schema_version`` it does not know and migrates older ones.

Versions: 1 the first; 2 dropped ``repetition`` (it always equalled ``block``).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from . import cpu
from .config import project_root
from .errors import RecordError
from .schema import SIDES

SCHEMA_VERSION = 2
CHECKSUMS = "SHA256SUMS"
META = "meta.json"
CPU = "cpu.json"
FAILED_ATTEMPT = "failed-attempt-{n}"
OUTCOMES = ("ok", "failed")


def campaign_dir(campaign: str, raw_root: Path | None = None) -> Path:
    return (raw_root or project_root() / "data" / "raw") / campaign


def run_id(environment: str, scenario: str, test: str, block: int) -> str:
    """Unique within the campaign, and the record's path below the campaign directory."""
    return f"{environment}/{scenario}/{test}/r{block:03d}"


def exists(cdir: Path, rid: str) -> bool:
    return (cdir / rid / META).exists()


def find(cdir: Path) -> list[Path]:
    """Every complete record of a campaign, in path order."""
    return sorted(p.parent for p in cdir.glob(f"*/*/*/*/{META}") if not p.parent.name.startswith("."))


def remove_partial(cdir: Path) -> int:
    """Remove the temporary directories of records whose writer was killed; they are never valid data."""
    partial = list(cdir.glob("*/*/*/.*.tmp-*")) if cdir.exists() else []
    for p in partial:
        shutil.rmtree(p, ignore_errors=True)
    return len(partial)


@dataclass(frozen=True)
class Output:
    """What one client process printed, exactly."""

    stdout: str
    stderr: str


@dataclass(frozen=True)
class Attempt:
    """One try at a run. A run that fails is tried again; the record keeps every try."""

    outcome: str  # one of OUTCOMES
    reason: str | None  # why it failed; None when ok
    started_at: datetime
    outputs: tuple[Output, ...]  # one per client process


@dataclass(frozen=True)
class SideCpu:
    """One side's CPUs and their counters at the start and end of the CPU window."""

    node: str
    cpus: list[int]
    start: cpu.Snapshot
    end: cpu.Snapshot


@dataclass(frozen=True)
class RunRecord:
    """One run as recorded: the last attempt in full, the earlier ones by outcome and output."""

    campaign: str
    environment: str
    scenario: str
    test: str
    block: int  # 0-based; every configuration runs once per block
    order: int  # position in the environment's whole schedule
    tool: str
    kind: str
    test_params: dict
    commands: list[list[str]]  # the last attempt's, one per client process
    exit_codes: list[int | None]  # None: killed after the run's timeout
    started_at: datetime
    ended_at: datetime
    placement: dict  # server address, nodes and CPUs of both sides, and what the target adds
    target: dict  # the target's facts and every tool's version ("versions")
    clk_tck: int
    cpu: dict[str, SideCpu]  # by side
    attempts: tuple[Attempt, ...]  # the last one is the run's

    @property
    def run_id(self) -> str:
        return run_id(self.environment, self.scenario, self.test, self.block)

    @property
    def outcome(self) -> str:
        return self.attempts[-1].outcome

    @property
    def failure_reason(self) -> str | None:
        return self.attempts[-1].reason

    @property
    def stdouts(self) -> list[str]:
        return [o.stdout for o in self.attempts[-1].outputs]

    # -- JSON form --------------------------------------------------------------------
    def meta_json(self) -> dict:
        return {
            "schema_version": SCHEMA_VERSION,
            "campaign": self.campaign, "environment": self.environment, "scenario": self.scenario,
            "test": self.test, "run_id": self.run_id, "block": self.block, "order": self.order,
            "tool": self.tool, "kind": self.kind, "test_params": self.test_params,
            "commands": self.commands, "exit_codes": self.exit_codes,
            "started_at": self.started_at.isoformat(), "ended_at": self.ended_at.isoformat(),
            "outcome": self.outcome, "failure_reason": self.failure_reason,
            "attempts": [{"outcome": a.outcome, "reason": a.reason, "started_at": a.started_at.isoformat()}
                         for a in self.attempts],
            "placement": self.placement,
            "target": self.target,
        }

    def cpu_json(self) -> dict:
        return {"clk_tck": self.clk_tck, "sides": {
            side: {"node": s.node, "cpus": s.cpus, "start": s.start.to_json(), "end": s.end.to_json()}
            for side, s in self.cpu.items()}}

    # -- disk ---------------------------------------------------------------------------
    def write(self, cdir: Path) -> Path:
        """Write the record atomically below the campaign directory: build it under a temporary name, then rename.

        A record already in place is kept: records are never overwritten.
        """
        final = cdir / self.run_id
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = final.parent / f".{final.name}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        _write_outputs(tmp, self.attempts[-1].outputs)
        for n, earlier in enumerate(self.attempts[:-1], start=1):
            _write_outputs(tmp / FAILED_ATTEMPT.format(n=n), earlier.outputs)
        (tmp / CPU).write_text(json.dumps(self.cpu_json(), indent=1))
        (tmp / META).write_text(json.dumps(self.meta_json(), indent=1))
        write_checksums(tmp)
        if final.exists():
            shutil.rmtree(tmp)
        else:
            os.replace(tmp, final)
        return final


def _write_outputs(dirpath: Path, outputs: tuple[Output, ...]) -> None:
    dirpath.mkdir(parents=True, exist_ok=True)
    for i, o in enumerate(outputs):
        (dirpath / f"stdout-{i}.txt").write_text(o.stdout)
        (dirpath / f"stderr-{i}.txt").write_text(o.stderr)


def write_checksums(path: Path) -> None:
    """SHA256SUMS of every file of the record directory ``path`` (sha256sum's format)."""
    lines = [f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.relative_to(path)}"
             for p in sorted(path.rglob("*")) if p.is_file() and p.name != CHECKSUMS]
    (path / CHECKSUMS).write_text("\n".join(lines) + "\n")


def verify(path: Path) -> dict[str, bytes]:
    """Check every file of a record against its checksums; returns their contents.

    Loading uses the contents returned here, so each file is read once (at
    100k runs, reading every file twice was half the parse time).
    """
    try:
        sums = (path / CHECKSUMS).read_text()
    except FileNotFoundError:
        raise RecordError(f"{path}: {CHECKSUMS} missing (incomplete or foreign record)") from None
    files = {}
    for line in sums.splitlines():
        digest, _, name = line.partition("  ")
        try:
            data = (path / name).read_bytes()
        except FileNotFoundError:
            raise RecordError(f"{path / name}: listed in {CHECKSUMS} but missing") from None
        if hashlib.sha256(data).hexdigest() != digest:
            raise RecordError(f"{path / name}: checksum mismatch (file changed after it was recorded)")
        files[name] = data
    return files


def _v1_to_v2(meta: dict, path: Path) -> dict:
    """Version 1 wrote ``repetition`` beside ``block``, always equal to it."""
    meta = dict(meta)
    repetition = meta.pop("repetition", None)
    if repetition != meta.get("block"):
        raise RecordError(f"{path}: {META}: repetition {repetition!r} differs from block {meta.get('block')!r}; "
                          "version 1 records always have them equal")
    return {**meta, "schema_version": 2}


# MIGRATIONS[v] turns a version-v meta.json into version v + 1
MIGRATIONS = {1: _v1_to_v2}


def migrate(meta: dict, path: Path) -> dict:
    """meta.json of any known version, as the current version writes it."""
    version = meta.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= SCHEMA_VERSION:
        raise RecordError(f"{path}: {META}: schema_version {version!r} is unknown; this benchlib reads "
                          f"versions 1 to {SCHEMA_VERSION} (was the record written by a newer benchlib?)")
    while version < SCHEMA_VERSION:
        meta = MIGRATIONS[version](meta, path)
        version = meta["schema_version"]
    return meta


def _time(text: str) -> datetime:
    t = datetime.fromisoformat(text)
    if t.tzinfo is None:
        raise ValueError(f"time {text!r} has no time zone")
    return t


def load(path: Path) -> RunRecord:
    """The record in directory ``path``, verified, version-checked and migrated; RecordError names what is wrong."""
    files = verify(path)
    try:
        meta = migrate(json.loads(files[META]), path)
        cpu_doc = json.loads(files[CPU])
        n = len(meta["commands"])
        attempts = []
        for k, a in enumerate(meta["attempts"], start=1):
            prefix = "" if k == len(meta["attempts"]) else FAILED_ATTEMPT.format(n=k) + "/"
            outputs = tuple(Output(files[f"{prefix}stdout-{i}.txt"].decode(), files[f"{prefix}stderr-{i}.txt"].decode())
                            for i in range(n))
            if a["outcome"] not in OUTCOMES:
                raise ValueError(f"attempt {k}: outcome {a['outcome']!r} is not one of {OUTCOMES}")
            attempts.append(Attempt(a["outcome"], a["reason"], _time(a["started_at"]), outputs))
        if not attempts:
            raise ValueError("no attempts")
        if (meta["outcome"], meta["failure_reason"]) != (attempts[-1].outcome, attempts[-1].reason):
            raise ValueError("outcome differs from the last attempt's")
        sides = {side: SideCpu(s["node"], s["cpus"], cpu.Snapshot.from_json(s["start"]),
                               cpu.Snapshot.from_json(s["end"]))
                 for side, s in cpu_doc["sides"].items()}
        if set(sides) != set(SIDES):
            raise ValueError(f"{CPU} has sides {sorted(sides)}, expected {list(SIDES)}")
        rec = RunRecord(
            campaign=meta["campaign"], environment=meta["environment"], scenario=meta["scenario"],
            test=meta["test"], block=meta["block"], order=meta["order"], tool=meta["tool"], kind=meta["kind"],
            test_params=meta["test_params"], commands=meta["commands"], exit_codes=meta["exit_codes"],
            started_at=_time(meta["started_at"]), ended_at=_time(meta["ended_at"]),
            placement=meta["placement"], target=meta["target"], clk_tck=cpu_doc["clk_tck"], cpu=sides,
            attempts=tuple(attempts))
    except RecordError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as exc:  # JSON and UTF-8 errors are ValueErrors
        raise RecordError(f"{path}: malformed record ({type(exc).__name__}: {exc})") from None
    if rec.run_id != meta["run_id"]:
        raise RecordError(f"{path}: {META} says run {meta['run_id']!r}, its keys make {rec.run_id!r}")
    if not path.as_posix().endswith("/" + rec.run_id):
        raise RecordError(f"{path}: holds run {rec.run_id!r} (moved or renamed after it was recorded?)")
    return rec


def utc(ts: float) -> datetime:
    """An epoch time (time.time()) as the record stores it."""
    return datetime.fromtimestamp(ts, timezone.utc)
