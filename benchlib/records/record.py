"""A run's record: its typed fields, written atomically, and read back only through `load`, which
verifies the checksums (`benchlib.records.integrity`), refuses a ``schema_version`` it does not know,
migrates older ones (`benchlib.records.migrations`) and checks every field against the one schema of
the current version (`benchlib.records.record_schema`). Where it lies: `benchlib.records.layout`."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from ..base import limits
from ..base.errors import RecordError
from ..base.files import temporary
from ..host import cpu
from ..profiling import stacks
from ..vocabulary.schema import check_name
from . import record_schema
from .integrity import verify, write_checksums
from .layout import CPU, FAILED_ATTEMPT, META, PROFILE, run_id
from .migrations import SCHEMA_VERSION, migrate


@dataclass(frozen=True)
class Output:
    """What one client process printed, exactly: bytes, whether or not they are UTF-8 (the
    collector's parser decides what it can read)."""

    stdout: bytes
    stderr: bytes


@dataclass(frozen=True)
class Attempt:
    """One try at a run. A run that fails is tried again; the record keeps every try."""

    outcome: str  # one of record_schema.OUTCOMES
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
    # the target's own datapath processes (service-mesh proxies) over the CPU window, by name
    processes: dict[str, dict] | None = None
    # the scenario as the environment defined it (config.scenario_definition); None: not recorded (version < 4)
    scenario_definition: dict | None = None
    profiled: bool = False
    # how the profile was recorded (perf version, event, CPUs, samples, ...); None: not profiled, or perf failed
    profile: dict | None = None
    profile_folded: bytes | None = None  # profile.folded.gz's bytes (stacks.folded_bytes)
    # CPU other processes took over the last attempt's window (disturbance.usage); None: not measured
    foreign_cpu: dict | None = None
    # the quiet window of the last attempt: daemons frozen, kept, failed (quiet.Window.end); None: none asked
    quiet: dict | None = None

    @property
    def run_id(self) -> str:
        return run_id(self.environment, self.scenario, self.test, self.block, self.profiled)

    @property
    def outcome(self) -> str:
        return self.attempts[-1].outcome

    @property
    def failure_reason(self) -> str | None:
        return self.attempts[-1].reason

    @property
    def stdouts(self) -> list[bytes]:
        return [o.stdout for o in self.attempts[-1].outputs]

    # -- JSON form --------------------------------------------------------------------
    def meta_json(self) -> dict:
        return {
            "schema_version": SCHEMA_VERSION,
            "campaign": self.campaign,
            "environment": self.environment,
            "scenario": self.scenario,
            "test": self.test,
            "run_id": self.run_id,
            "block": self.block,
            "order": self.order,
            "tool": self.tool,
            "kind": self.kind,
            "test_params": self.test_params,
            "commands": self.commands,
            "exit_codes": self.exit_codes,
            "started_at": self.started_at.isoformat(),
            "ended_at": self.ended_at.isoformat(),
            "outcome": self.outcome,
            "failure_reason": self.failure_reason,
            "attempts": [
                {"outcome": a.outcome, "reason": a.reason, "started_at": a.started_at.isoformat()}
                for a in self.attempts
            ],
            "placement": self.placement,
            "target": self.target,
            "processes": self.processes or {},
            "scenario_definition": self.scenario_definition,
            "profiled": self.profiled,
            "profile": self.profile,
            "foreign_cpu": self.foreign_cpu,
            "quiet": self.quiet,
        }

    def cpu_json(self) -> dict:
        return {
            "clk_tck": self.clk_tck,
            "sides": {
                side: {"node": s.node, "cpus": s.cpus, "start": s.start.to_json(), "end": s.end.to_json()}
                for side, s in self.cpu.items()
            },
        }

    # -- disk ---------------------------------------------------------------------------
    def write(self, cdir: Path) -> Path:
        """Write the record atomically below the campaign directory: build it under a temporary name, then rename.

        A record already in place is kept, never overwritten: this one is then discarded with a
        RecordError (the caller must not count it), which only a second writer can cause.
        """
        final = cdir / self.run_id
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = temporary(final)
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            _write_outputs(tmp, self.attempts[-1].outputs)
            for n, earlier in enumerate(self.attempts[:-1], start=1):
                _write_outputs(tmp / FAILED_ATTEMPT.format(n=n), earlier.outputs)
            (tmp / CPU).write_text(json.dumps(self.cpu_json(), indent=1))
            if self.profile_folded is not None:
                (tmp / PROFILE).write_bytes(self.profile_folded)
            (tmp / META).write_text(json.dumps(self.meta_json(), indent=1))
            write_checksums(tmp)
        except OSError as exc:  # a full disk names no file: name the record
            shutil.rmtree(tmp, ignore_errors=True)
            raise OSError(exc.errno, exc.strerror, exc.filename or str(final)) from None
        if final.exists() or final.is_symlink():
            shutil.rmtree(tmp)
            raise RecordError(f"{final}: already there; kept it and discarded the run just measured")
        os.replace(tmp, final)
        return final


def process_window(start: dict, end: dict) -> dict:
    """A datapath process over the CPU window, as recorded: its side, CPUs and version, its CPU
    ticks (user + system, /proc/<pid>/stat) at the window's start and end, and its peak RSS within
    the window (reset at the start), and, for a proxy whose counters are live (Envoy), the bytes it had
    carried at the start and end (absent otherwise and in records from before they were kept)."""
    return {
        "side": end["side"],
        "cpus": end["cpus"],
        "version": end["version"],
        "cpu_ticks": [start["cpu_ticks"], end["cpu_ticks"]],
        "peak_rss_kib": end["peak_rss_kib"],
        **({"bytes": [start["bytes"], end["bytes"]]} if "bytes" in end else {}),
    }


def _write_outputs(dirpath: Path, outputs: tuple[Output, ...]) -> None:
    dirpath.mkdir(parents=True, exist_ok=True)
    for i, o in enumerate(outputs):
        (dirpath / f"stdout-{i}.txt").write_bytes(o.stdout)
        (dirpath / f"stderr-{i}.txt").write_bytes(o.stderr)


def _document(files: dict[str, bytes], name: str, path: Path):
    """A JSON file of the record, parsed (depth bounded: limits.parse_json); RecordError naming it."""
    try:
        return limits.parse_json(files[name])
    except KeyError:
        raise RecordError(f"{path}: {name} missing") from None
    except ValueError as exc:  # JSON and UTF-8 errors are ValueErrors
        raise RecordError(f"{path}: {name}: unreadable ({' '.join(str(exc).split())[:200]})") from None


def _outputs(files: dict[str, bytes], prefix: str, n: int, path: Path) -> tuple[Output, ...]:
    """What the attempt's ``n`` client processes printed, from the files below ``prefix``."""
    try:
        return tuple(Output(files[f"{prefix}stdout-{i}.txt"], files[f"{prefix}stderr-{i}.txt"]) for i in range(n))
    except KeyError as exc:
        raise RecordError(f"{path}: {exc.args[0]} missing ({META} commands: {n} client processes)") from None


def load(path: Path) -> RunRecord:
    """The record in directory ``path``, verified, version-checked, migrated and checked against the
    schema (record_schema); RecordError names what is wrong: the record, the file, the field."""
    files = verify(path)
    meta = _document(files, META, path)
    if not isinstance(meta, dict):
        raise RecordError(f"{path}: {META}: not a JSON object")
    meta = migrate(meta, path)
    record_schema.check_meta(meta, f"{path}: {META}")
    cpu_doc = _document(files, CPU, path)
    record_schema.check_cpu(cpu_doc, f"{path}: {CPU}")
    n, last = len(meta["commands"]), len(meta["attempts"])
    attempts = tuple(
        Attempt(
            a["outcome"],
            a["reason"],
            datetime.fromisoformat(a["started_at"]),
            _outputs(files, "" if k == last else FAILED_ATTEMPT.format(n=k) + "/", n, path),
        )
        for k, a in enumerate(meta["attempts"], start=1)
    )
    if (meta["outcome"], meta["failure_reason"]) != (attempts[-1].outcome, attempts[-1].reason):
        raise RecordError(f"{path}: {META}: outcome and failure_reason differ from the last of its attempts")
    rec = RunRecord(
        campaign=meta["campaign"],
        environment=meta["environment"],
        scenario=meta["scenario"],
        test=meta["test"],
        block=meta["block"],
        order=meta["order"],
        tool=meta["tool"],
        kind=meta["kind"],
        test_params=meta["test_params"],
        commands=meta["commands"],
        exit_codes=meta["exit_codes"],
        started_at=datetime.fromisoformat(meta["started_at"]),
        ended_at=datetime.fromisoformat(meta["ended_at"]),
        placement=meta["placement"],
        target=meta["target"],
        clk_tck=cpu_doc["clk_tck"],
        cpu={
            side: SideCpu(s["node"], s["cpus"], cpu.Snapshot.from_json(s["start"]), cpu.Snapshot.from_json(s["end"]))
            for side, s in cpu_doc["sides"].items()
        },
        attempts=attempts,
        processes=meta["processes"],
        scenario_definition=meta["scenario_definition"],
        profiled=meta["profiled"],
        profile=meta["profile"],
        profile_folded=files.get(PROFILE),
        foreign_cpu=meta["foreign_cpu"],
        quiet=meta["quiet"],
    )
    if (rec.profile is None) != (rec.profile_folded is None):
        which = f"{PROFILE} missing" if rec.profile_folded is None else f"{PROFILE} without a profile in {META}"
        raise RecordError(f"{path}: {which}")
    if rec.profile is not None and rec.profile_folded is not None and stacks.empty(rec.profile_folded):
        raise RecordError(  # the schema's samples are >= 1
            f"{path}: {PROFILE}: holds no sample, {META} profile.samples says {rec.profile['samples']} "
            "(emptied after the run?)"
        )
    check_names(rec, path)
    if rec.run_id != meta["run_id"]:
        raise RecordError(
            f"{path}: {META}: run_id {record_schema.shown(meta['run_id'])} is not the run its keys make, {rec.run_id!r}"
        )
    if not path.as_posix().endswith("/" + rec.run_id):
        raise RecordError(f"{path}: holds run {rec.run_id!r} (moved or renamed after it was recorded?)")
    return rec


def check_names(rec: RunRecord, path: Path) -> None:
    """The names of a record read back become its path and the tables' key columns: each must be one
    that params.yaml and the environment could have given (config.NAME_RULE)."""
    for key in ("campaign", "environment", "scenario", "test"):
        try:
            check_name(getattr(rec, key))
        except ValueError as exc:
            raise RecordError(f"{path}: {META}: {key}: {exc}") from None


def utc(ts: float) -> datetime:
    """An epoch time (time.time()) as the record stores it."""
    return datetime.fromtimestamp(ts, UTC)
