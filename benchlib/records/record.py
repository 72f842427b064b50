"""Raw run records: the one place that knows how a run is stored on disk.

A campaign's records live below ``data/raw/<campaign>/``, one directory per run::

    <environment>/<scenario>/<test>/r<block:03d>/   a measured run
    <environment>/<scenario>/<test>/p<block:03d>/   a profiled run (never among the measured ones)
        meta.json           keys, test parameters, commands, exit codes, outcome, placement, target,
                            the target's datapath processes (proxies) over the CPU window
        cpu.json            each side's /proc/stat counters at the start and end of the CPU window
        stdout-<i>.txt      what client process i printed, byte for byte (UTF-8 or not)
        stderr-<i>.txt
        failed-attempt-<n>/ the output of earlier attempts that failed or were disturbed
        profile.folded.gz   a profiled run's CPU profile: perf's stacks, folded (benchlib.profiling.stacks)
        SHA256SUMS          the sha256 of every other file

A record is built under a temporary name and renamed into place once complete,
so a record that exists is complete and a resumed campaign skips it. A record
directory that lacks its meta.json or SHA256SUMS (someone removed them) is not
a record: collect moves it aside (``.<name>.incomplete-<time>``, never read)
and measures the run again. Records are read back only through `load`, which
verifies the checksums, refuses a ``schema_version`` it does not know, migrates older ones and checks
every field against the one schema of the current version (`benchlib.records.record_schema`); `survey` checks a
campaign's directories against its plan.

A campaign holds only the directories and regular files benchlib wrote. A symbolic link, a FIFO, a
device or a socket anywhere in it is refused, never followed, opened or quoted: a link out of the
project would be read as a record (and cached and pushed by DVC), a read of a FIFO would wait forever.
`foreign` lists them; every read of a record file goes through `read_file`.

The record format has a version (``schema_version``, SCHEMA_VERSION now); each migration below says
what its version changed.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import json
import os
import shutil
import stat
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from ..base import limits
from ..base.errors import RecordError
from ..base.files import temporary
from ..collectors import RECORDED_PARAMS
from ..host import cpu
from ..profiling import stacks
from ..settings.environment import Environment
from ..settings.identity import PROSE_KEYS
from ..settings.project import environment_dir, project_root
from ..settings.scenarios import DEFAULTS as SCENARIO_DEFAULTS
from ..vocabulary.schema import check_name
from . import record_schema

SCHEMA_VERSION = 7
CHECKSUMS = "SHA256SUMS"
META = "meta.json"
CPU = "cpu.json"
PROFILE = "profile.folded.gz"
FAILED_ATTEMPT = "failed-attempt-{n}"


def campaign_dir(campaign: str, raw_root: Path | None = None) -> Path:
    return (raw_root or project_root() / "data" / "raw") / campaign


@functools.lru_cache(maxsize=8)
def _root_of(cwd: str) -> Path:
    return project_root()  # found from the working directory, which is cwd


def table_path(path: str | Path) -> str:
    """A record's path as the tables keep it: relative to the project where it lies inside it, so that
    the tables' bytes do not depend on where the project lives; else absolute (another revision's
    records, a temporary raw root)."""
    p, root = Path(path), _root_of(os.getcwd())
    return p.relative_to(root).as_posix() if p.is_absolute() and p.is_relative_to(root) else str(p)


def located(text: str | Path) -> Path:
    """The directory that a path the tables keep (`table_path`) names, wherever the command runs."""
    p = Path(text)
    return p if p.is_absolute() else _root_of(os.getcwd()) / p


def run_id(environment: str, scenario: str, test: str, block: int, profiled: bool = False) -> str:
    """Unique within the campaign, and the record's path below the campaign directory. A profiled
    run (p) is apart from the measured runs (r) of its block: perf's own load is in its numbers."""
    return f"{environment}/{scenario}/{test}/{'p' if profiled else 'r'}{block:03d}"


def exists(cdir: Path, rid: str) -> bool:
    return complete(cdir / rid)


def complete(path: Path) -> bool:
    """Whether ``path`` is a directory (not a link to one) holding a whole record: its meta.json and
    SHA256SUMS are there (whether they are its own files is checked when it is loaded)."""
    return os.path.isdir(path) and not os.path.islink(path) and _present(path / META) and _present(path / CHECKSUMS)


def _present(path: Path) -> bool:
    return os.path.lexists(path)


def _what(mode: int) -> str:
    """What a directory entry that is not a regular file is, for a message."""
    for test, what in (
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a device"),
        (stat.S_ISBLK, "a device"),
        (stat.S_ISDIR, "a directory"),
    ):
        if test(mode):
            return what
    return "not a regular file"


def _foreign_in_record(record_dir: Path | str, name: str, what: str) -> str:
    return f"{record_dir}: {name}: {what}: a record holds only the regular files benchlib wrote (refused, not read)"


def _foreign_on_the_way(path: Path, what: str, should: str) -> str:
    return (
        f"{path}: {what} where {should} should be: a campaign holds only the directories and files "
        "benchlib wrote (refused, not followed)"
    )


# what stands at each depth below a campaign directory (0: the campaign directory itself)
_DEPTHS = ("the campaign's directory", "an environment's directory", "a scenario's directory", "a test's directory")


def _foreign_at(cdir: Path, path: Path, what: str) -> str:
    parts = path.relative_to(cdir).parts
    if len(parts) > 4:
        return _foreign_in_record(cdir.joinpath(*parts[:4]), "/".join(parts[4:]), what)
    return _foreign_on_the_way(path, what, _DEPTHS[len(parts)] if len(parts) < 4 else "a record")


def foreign(cdir: Path) -> list[str]:
    """One line for each entry of the campaign directory ``cdir`` (and ``cdir`` itself) that is
    neither a directory nor a regular file, hidden ones included (DVC commits those too). Nothing is
    followed, opened or read."""
    found, todo = [], [cdir]
    while todo:
        path = todo.pop()
        try:
            mode = os.lstat(path).st_mode
        except (FileNotFoundError, NotADirectoryError):
            continue
        if not stat.S_ISDIR(mode):
            if not stat.S_ISREG(mode):
                found.append(_foreign_at(cdir, path, _what(mode)))
            continue
        with os.scandir(path) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    todo.append(Path(entry.path))
                elif not entry.is_file(follow_symlinks=False):
                    found.append(_foreign_at(cdir, Path(entry.path), _what(entry.stat(follow_symlinks=False).st_mode)))
    return sorted(found)


def read_file(record_dir: str, name: str) -> bytes:
    """The bytes of file ``name`` of a record. Anything but a regular file is refused (RecordError)
    without being followed or opened: a FIFO never blocks the read, a link never leaks what it points
    to; a file larger than limits.RECORD_FILE_BYTES is refused too. FileNotFoundError if there is
    nothing by that name."""
    mode = os.lstat(os.path.join(record_dir, name)).st_mode
    if not stat.S_ISREG(mode):
        raise RecordError(_foreign_in_record(record_dir, name, _what(mode)))
    return _read_regular(record_dir, name)


def _read_regular(record_dir: str, name: str) -> bytes:
    """read_file of a file already seen to be a regular file (its lstat, or the scandir of its
    directory): refused all the same should a link or a FIFO have taken its place since."""
    path = os.path.join(record_dir, name)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise RecordError(_foreign_in_record(record_dir, name, "a symbolic link")) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise RecordError(_foreign_in_record(record_dir, name, _what(st.st_mode)))
        data = limits.read_capped(fd, st.st_size, limits.RECORD_FILE_BYTES)
    finally:
        os.close(fd)
    if len(data) > limits.RECORD_FILE_BYTES:
        raise RecordError(f"{path}: larger than {limits.size_text(limits.RECORD_FILE_BYTES)}, the cap on such a file")
    return data


def set_aside_incomplete(cdir: Path, rids: Iterable[str]) -> list[tuple[Path, Path]]:
    """Move what stands where a record of ``rids`` should be but is not one out of the way, kept
    under a hidden name that nothing reads, so the run can be measured again. Returns (path, new name)."""
    moved = []
    for rid in rids:
        path = cdir / rid
        if (path.exists() or path.is_symlink()) and not complete(path):
            aside = path.with_name(f".{path.name}.incomplete-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}")
            os.replace(path, aside)
            moved.append((path, aside))
    return moved


def recorded_meta(cdir: Path, rid: str) -> dict | None:
    """A complete record's meta.json, unverified, its test parameters and scenario definition of the
    schema's types (record_schema.Surveyed); None if unreadable or not (load() names it at parse time)."""
    path = cdir / rid
    try:
        meta = limits.parse_json(read_file(str(path), META))
        record_schema.check_surveyed(meta, f"{path}: {META}")
    except (OSError, ValueError):  # RecordError is a ValueError
        return None
    return meta


def recorded_definition(meta: dict | None) -> dict | None:
    """The scenario definition a record's meta.json keeps; None for a record that predates them."""
    return (meta or {}).get("scenario_definition")


def param_changes(recorded: dict, planned: dict) -> list[str]:
    """``field: recorded -> planned`` for every test parameter that differs. A field the record
    predates counts as its default."""
    changes = []
    for key in sorted(set(recorded) | set(planned)):
        default = RECORDED_PARAMS.get(key)
        old, new = recorded.get(key, default), planned.get(key, default)
        if old != new:
            changes.append(f"{key}: {old!r} -> {new!r}")
    return changes


def _flat(prefix: str, value, out: dict) -> None:
    if isinstance(value, dict):  # an empty mapping holds no field
        for k, v in value.items():
            _flat(f"{prefix}.{k}", v, out)
    else:
        out[prefix] = value


def _definition_fields(definition: dict, scenario: str) -> dict:
    """A scenario definition as environment.yaml keys (scenarios.<name>.mtu, cpu_placement.TCP_RR,
    file <path>) -> value, without prose; a field the definition predates counts as its default."""
    out = {}
    environment = {k: None if f.is_required() else f.default for k, f in Environment.model_fields.items()}
    for part, defaults, prefix in (
        ("scenario", SCENARIO_DEFAULTS, f"scenarios.{scenario}."),
        ("environment", environment, ""),
    ):
        given = definition.get(part) or {}
        for key in defaults.keys() | given.keys():
            if key in PROSE_KEYS or key in ("name", "scenarios"):
                continue
            _flat(prefix + key, given[key] if key in given else defaults.get(key), out)
    out.update({f"file {path}": digest for path, digest in (definition.get("files") or {}).items()})
    return out


def _shown(value) -> str:
    if isinstance(value, str) and value.startswith("sha256:"):
        return value[:19]
    text = "(none)" if value is None else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def definition_changes(recorded: dict, planned: dict, scenario: str) -> list[str]:
    """``key: recorded -> planned`` for every field of a scenario definition that differs, named as in
    environment.yaml (a file the definition names: ``file <path>``, by its sha256)."""
    if recorded == planned:
        return []  # the usual case, and cheap: survey asks once per record
    old, new = _definition_fields(recorded, scenario), _definition_fields(planned, scenario)
    return [
        f"{key}: {_shown(old.get(key))} -> {_shown(new.get(key))}"
        for key in sorted(old.keys() | new.keys())
        if old.get(key) != new.get(key)
    ]


def environment_file(environment: str) -> Path:
    return environment_dir(environment) / "environment.yaml"


def survey(
    cdir: Path, planned: dict[str, dict] | None, definitions: dict[str, dict] | None = None
) -> tuple[list[Path], list[str]]:
    """The record directories of a campaign that match its plan, and one line naming the path of
    every one that does not: a file or an incomplete directory where a record should be, a run the
    plan does not have, a record measured with other test parameters or another definition of its
    scenario, a copy of another record.

    ``planned``: run id -> the test parameters the plan gives it; None for a campaign without a plan
    at hand (`compare`): then only what no plan can excuse is named (files, incomplete records, copies).
    ``definitions``: run id -> the definition of its scenario (`config.scenario_definition`) the plan
    gives it; a record measured under another one is named, a record that predates them is not.
    """
    good, problems, seen = [], [], {}
    for path, entry in _slots(cdir, problems):
        rid = path.relative_to(cdir).as_posix()
        mode = entry.stat(follow_symlinks=False).st_mode
        if stat.S_ISREG(mode):
            problems.append(f"{path}: not a directory, where a record should be")
        elif not stat.S_ISDIR(mode):
            problems.append(_foreign_at(cdir, path, _what(mode)))
        elif not complete(path):
            problems.append(
                f"{path}: incomplete record ({META} or {CHECKSUMS} missing); "
                "`benchlib collect` sets it aside and measures the run again"
            )
        elif planned is not None and rid not in planned:
            problems.append(f"{path}: run {rid} is not in the plan (scenarios, tests, repetitions)")
        else:
            try:
                meta = limits.parse_json(read_file(str(path), META))
                holds = record_schema.check_surveyed(meta, f"{path}: {META}")["run_id"]
            except RecordError as exc:
                problems.append(str(exc))
                continue
            except ValueError as exc:  # not JSON, or nested beyond the cap
                problems.append(f"{path}: {META}: unreadable ({' '.join(str(exc).split())[:200]})")
                continue
            except OSError as exc:
                problems.append(f"{path}: {META} unreadable ({type(exc).__name__}: {exc})")
                continue
            changes = [] if planned is None else param_changes(meta.get("test_params") or {}, planned[rid])
            recorded = recorded_definition(meta)
            redefined = (
                []
                if definitions is None or recorded is None or rid not in definitions
                else definition_changes(recorded, definitions[rid], rid.split("/")[1])
            )
            if holds in seen:
                problems.append(f"{path}: holds run {holds!r}, like {seen[holds]} (a copy?)")
            elif changes:
                problems.append(f"{path}: measured with other test parameters than the plan's: {'; '.join(changes)}")
            elif redefined:
                problems.append(
                    f"{path}: measured with another definition of scenario {rid.split('/')[1]} than "
                    f"{environment_file(rid.split('/')[0])} gives now: {'; '.join(redefined)}"
                )
            else:
                seen[holds] = path
                good.append(path)
    return good, problems


def find(cdir: Path) -> list[Path]:
    """Every complete record of a campaign, in path order."""
    return list(walk(cdir))


def walk(cdir: Path) -> Iterator[Path]:
    """Every complete record of a campaign, in path order, one at a time: a million records'
    paths held in a list take about 280 MB. A link or special file where a directory of the campaign
    or a record should be is a RecordError."""
    for path, entry in _slots(cdir, None):
        # the entry's type from the directory listing: no stat of each record directory
        if entry.is_dir(follow_symlinks=False):
            if os.path.lexists(os.path.join(entry.path, META)):
                yield path
        elif not entry.is_file(follow_symlinks=False):
            raise RecordError(_foreign_at(cdir, path, _what(entry.stat(follow_symlinks=False).st_mode)))


def _slots(cdir: Path, problems: list[str] | None) -> Iterator[tuple[Path, os.DirEntry]]:
    """Every entry where a record should stand (four levels below ``cdir``; names starting with "."
    are being written or set aside), in path order, with its directory entry, reached without
    following a link: a link or special file on the way is named in ``problems``, or raised
    (RecordError) where that is None."""

    def refuse(path: Path, mode: int) -> None:
        line = _foreign_at(cdir, path, _what(mode))
        if problems is None:
            raise RecordError(line)
        problems.append(line)

    def below(path: Path, depth: int) -> Iterator[tuple[Path, os.DirEntry]]:
        try:
            with os.scandir(path) as it:
                entries = sorted((e for e in it if not e.name.startswith(".")), key=lambda e: e.name)
        except (FileNotFoundError, NotADirectoryError):
            return
        for entry in entries:
            child = path / entry.name
            if depth == 4:
                yield child, entry
            elif entry.is_dir(follow_symlinks=False):
                yield from below(child, depth + 1)
            elif not entry.is_file(follow_symlinks=False):  # a regular file there is no record: passed over
                refuse(child, entry.stat(follow_symlinks=False).st_mode)

    try:
        mode = os.lstat(cdir).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return
    if stat.S_ISDIR(mode):
        yield from below(cdir, 1)
    elif not stat.S_ISREG(mode):
        refuse(cdir, mode)


def remove_partial(cdir: Path) -> int:
    """Remove the temporary directories of records whose writer was killed; they are never valid data."""
    partial = list(cdir.glob("*/*/*/.*.tmp-*")) if cdir.exists() else []
    for p in partial:
        shutil.rmtree(p, ignore_errors=True)
    return len(partial)


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


def write_checksums(path: Path) -> None:
    """SHA256SUMS of every file of the record directory ``path`` (sha256sum's format)."""
    lines = [
        f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.relative_to(path)}"
        for p in sorted(path.rglob("*"))
        if p.is_file() and p.name != CHECKSUMS
    ]
    (path / CHECKSUMS).write_text("\n".join(lines) + "\n")


def verify(path: Path) -> dict[str, bytes]:
    """Check every file of a record against its checksums; returns their contents.

    The record directory holds regular files (in directories) only, each listed in its SHA256SUMS:
    a link, a FIFO, a device or a file added after the run was recorded is refused unread.
    Loading uses the contents returned here, so each file is read once (at
    100k runs, reading every file twice was half the parse time).
    """
    base = os.fspath(path)  # plain strings and os calls: pathlib's per-file overhead was a third of a parse
    try:
        mode = os.lstat(base).st_mode
    except FileNotFoundError:
        raise RecordError(f"{path}: no such record") from None
    if stat.S_ISREG(mode):
        raise RecordError(f"{path}: not a directory, where a record should be")
    if not stat.S_ISDIR(mode):
        raise RecordError(_foreign_on_the_way(path, _what(mode), "a record"))
    present = _record_files(base)
    if CHECKSUMS not in present:
        raise RecordError(f"{path}: {CHECKSUMS} missing (incomplete or foreign record)")
    try:
        sums = _read_regular(base, CHECKSUMS).decode()  # _record_files saw a regular file
    except UnicodeDecodeError:
        raise RecordError(f"{path / CHECKSUMS}: not text (overwritten?)") from None
    except OSError as exc:
        raise RecordError(f"{path / CHECKSUMS}: unreadable: {exc.strerror}") from None
    files = {}
    for n, line in enumerate(sums.splitlines(), start=1):
        digest, _, name = line.partition("  ")
        if not name or name.startswith("/") or ".." in name.split("/"):
            # its text is not quoted: SHA256SUMS replaced by another file must not show that file
            raise RecordError(f"{path / CHECKSUMS}: line {n} is not '<sha256>  <file name>'")
        if name not in present:
            if os.path.isdir(os.path.join(base, name)):  # no link: _record_files refused those
                raise RecordError(f"{path / name}: unreadable: {os.strerror(errno.EISDIR)}")
            raise RecordError(f"{path / name}: listed in {CHECKSUMS} but missing")
        try:
            data = _read_regular(base, name)
        except OSError as exc:
            raise RecordError(f"{path / name}: unreadable: {exc.strerror}") from None
        if hashlib.sha256(data).hexdigest() != digest:
            raise RecordError(f"{path / name}: checksum mismatch (file changed after it was recorded)")
        files[name] = data
    unlisted = sorted(present - files.keys() - {CHECKSUMS})
    if unlisted:
        more = f" (and {len(unlisted) - 1} more)" if len(unlisted) > 1 else ""
        raise RecordError(
            f"{path}: {unlisted[0]}{more}: not listed in {CHECKSUMS} (added after the run was recorded; not read)"
        )
    return files


def fingerprint(record_dir: str) -> str:
    """A digest of what stands in a record directory, from the file system's metadata alone: every
    entry's name, type, size, inode, mtime and ctime (ns), as DVC tells a changed file. No file is
    opened, so telling 100k unchanged records costs a stat per file; a file edited, replaced, added
    or removed changes it (ctime too, which `touch` cannot set back). Bytes rotting under unchanged
    metadata go unnoticed: `benchlib parse --full` verifies every checksum again."""
    h = hashlib.sha256()
    todo = [""]
    while todo:
        rel = todo.pop()
        with os.scandir(os.path.join(record_dir, rel)) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                st = entry.stat(follow_symlinks=False)
                name = f"{rel}/{entry.name}" if rel else entry.name
                h.update(
                    f"{name}\0{st.st_mode}\0{st.st_size}\0{st.st_ino}\0{st.st_mtime_ns}\0{st.st_ctime_ns}\n".encode()
                )
                if stat.S_ISDIR(st.st_mode):
                    todo.append(name)
    return h.hexdigest()


def _record_files(record_dir: str) -> set[str]:
    """The names ('/'-separated, relative) of the regular files below a record directory; anything
    that is neither a regular file nor a directory is a RecordError, and is never followed or opened."""
    names, todo = set(), [""]
    while todo:
        rel = todo.pop()
        with os.scandir(os.path.join(record_dir, rel)) as entries:
            for entry in entries:
                name = f"{rel}/{entry.name}" if rel else entry.name
                if entry.is_dir(follow_symlinks=False):
                    todo.append(name)
                elif entry.is_file(follow_symlinks=False):
                    names.add(name)
                else:
                    raise RecordError(
                        _foreign_in_record(record_dir, name, _what(entry.stat(follow_symlinks=False).st_mode))
                    )
    return names


def _v6_to_v7(meta: dict, path: Path) -> dict:
    """Version 7 added ``quiet`` (`benchlib.targets.kubernetes.quiet`: the host daemons frozen over the CPU
    window, those kept running and why, those that could not be frozen); an older run's is unknown."""
    return {**meta, "quiet": None, "schema_version": 7}


def _v5_to_v6(meta: dict, path: Path) -> dict:
    """Version 6 added ``foreign_cpu`` (`benchlib.host.disturbance`: the CPU other processes and the
    hypervisor took over the window, and which; where the target cannot tell processes apart, the steal
    alone and the processes' fields null) and the outcome ``disturbed``; an older run's is unknown."""
    return {**meta, "foreign_cpu": None, "schema_version": 6}


def _v4_to_v5(meta: dict, path: Path) -> dict:
    """Version 5 added ``profiled`` (the run was a profiled one, its id ``p<block>``) and ``profile`` (how
    its profile.folded.gz was recorded: perf version, event, frequency, kernel, CPUs, attribution,
    window, samples, whether kernel symbols were visible); an older run is a measured one, without a
    profile. A profile may hold ``bpf`` (`benchlib.profiling.bpfstats`: each BPF program's counters at
    the window's edges and where it is attached, or why they could not be read); a profile without it
    counted no BPF program."""
    return {**meta, "profiled": False, "profile": None, "schema_version": 5}


def _v3_to_v4(meta: dict, path: Path) -> dict:
    """Version 4 added ``scenario_definition`` (`config.scenario_definition`: the scenario as the
    environment defined it when the run was measured). An older run's is unknown: nothing says what its
    scenario was, so collect and parse accept it without comparing it with the environment as it is."""
    return {**meta, "scenario_definition": None, "schema_version": 4}


def _v2_to_v3(meta: dict, path: Path) -> dict:
    """Version 3 added ``processes``: the CPU ticks and peak RSS of the processes a target runs on the
    datapath itself (the lab's service-mesh proxies) over the CPU window; older runs had none."""
    return {**meta, "processes": {}, "schema_version": 3}


def _v1_to_v2(meta: dict, path: Path) -> dict:
    """Version 1, the first, wrote ``repetition`` beside ``block``, always equal to it; version 2
    dropped it."""
    meta = dict(meta)
    repetition = meta.pop("repetition", None)
    if repetition != meta.get("block"):
        raise RecordError(
            f"{path}: {META}: repetition {record_schema.shown(repetition)} differs from block "
            f"{record_schema.shown(meta.get('block'))}; "
            "version 1 records always have them equal"
        )
    return {**meta, "schema_version": 2}


# MIGRATIONS[v] turns a version-v meta.json into version v + 1
MIGRATIONS = {1: _v1_to_v2, 2: _v2_to_v3, 3: _v3_to_v4, 4: _v4_to_v5, 5: _v5_to_v6, 6: _v6_to_v7}


def migrate(meta: dict, path: Path) -> dict:
    """meta.json of any known version, as the current version writes it."""
    version = meta.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= SCHEMA_VERSION:
        raise RecordError(
            f"{path}: {META}: schema_version {record_schema.shown(version)} is unknown; this benchlib reads "
            f"versions 1 to {SCHEMA_VERSION} (was the record written by a newer benchlib?)"
        )
    while version < SCHEMA_VERSION:
        meta = MIGRATIONS[version](meta, path)
        version = meta["schema_version"]
    return meta


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
