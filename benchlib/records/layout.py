"""Where a run's record lies on disk, and reading it without following anything.

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
        SHA256SUMS          the sha256 of every other file (`benchlib.records.integrity`)

A record is built under a temporary name and renamed into place once complete,
so a record that exists is complete and a resumed campaign skips it. A record
directory that lacks its meta.json or SHA256SUMS (someone removed them) is not
a record: collect moves it aside (``.<name>.incomplete-<time>``, never read)
and measures the run again.

A campaign holds only the directories and regular files benchlib wrote. A symbolic link, a FIFO, a
device or a socket anywhere in it is refused, never followed, opened or quoted: a link out of the
project would be read as a record (and cached and pushed by DVC), a read of a FIFO would wait forever.
`foreign` lists them; every read of a record file goes through `read_file`.
"""

from __future__ import annotations

import errno
import functools
import os
import shutil
import stat
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from ..base import limits
from ..base.errors import RecordError
from ..settings.project import project_root

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


def entry_kind(mode: int) -> str:
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


def foreign_in_record(record_dir: Path | str, name: str, what: str) -> str:
    return f"{record_dir}: {name}: {what}: a record holds only the regular files benchlib wrote (refused, not read)"


def foreign_on_the_way(path: Path, what: str, should: str) -> str:
    return (
        f"{path}: {what} where {should} should be: a campaign holds only the directories and files "
        "benchlib wrote (refused, not followed)"
    )


# what stands at each depth below a campaign directory (0: the campaign directory itself)
_DEPTHS = ("the campaign's directory", "an environment's directory", "a scenario's directory", "a test's directory")


def foreign_at(cdir: Path, path: Path, what: str) -> str:
    parts = path.relative_to(cdir).parts
    if len(parts) > 4:
        return foreign_in_record(cdir.joinpath(*parts[:4]), "/".join(parts[4:]), what)
    return foreign_on_the_way(path, what, _DEPTHS[len(parts)] if len(parts) < 4 else "a record")


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
                found.append(foreign_at(cdir, path, entry_kind(mode)))
            continue
        with os.scandir(path) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    todo.append(Path(entry.path))
                elif not entry.is_file(follow_symlinks=False):
                    found.append(
                        foreign_at(cdir, Path(entry.path), entry_kind(entry.stat(follow_symlinks=False).st_mode))
                    )
    return sorted(found)


def read_file(record_dir: str, name: str) -> bytes:
    """The bytes of file ``name`` of a record. Anything but a regular file is refused (RecordError)
    without being followed or opened: a FIFO never blocks the read, a link never leaks what it points
    to; a file larger than limits.RECORD_FILE_BYTES is refused too. FileNotFoundError if there is
    nothing by that name."""
    mode = os.lstat(os.path.join(record_dir, name)).st_mode
    if not stat.S_ISREG(mode):
        raise RecordError(foreign_in_record(record_dir, name, entry_kind(mode)))
    return read_regular(record_dir, name)


def read_regular(record_dir: str, name: str) -> bytes:
    """read_file of a file already seen to be a regular file (its lstat, or the scandir of its
    directory): refused all the same should a link or a FIFO have taken its place since."""
    path = os.path.join(record_dir, name)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise RecordError(foreign_in_record(record_dir, name, "a symbolic link")) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise RecordError(foreign_in_record(record_dir, name, entry_kind(st.st_mode)))
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


def find(cdir: Path) -> list[Path]:
    """Every complete record of a campaign, in path order."""
    return list(walk(cdir))


def walk(cdir: Path) -> Iterator[Path]:
    """Every complete record of a campaign, in path order, one at a time: a million records'
    paths held in a list take about 280 MB. A link or special file where a directory of the campaign
    or a record should be is a RecordError."""
    for path, entry in record_slots(cdir, None):
        # the entry's type from the directory listing: no stat of each record directory
        if entry.is_dir(follow_symlinks=False):
            if os.path.lexists(os.path.join(entry.path, META)):
                yield path
        elif not entry.is_file(follow_symlinks=False):
            raise RecordError(foreign_at(cdir, path, entry_kind(entry.stat(follow_symlinks=False).st_mode)))


def record_slots(cdir: Path, problems: list[str] | None) -> Iterator[tuple[Path, os.DirEntry]]:
    """Every entry where a record should stand (four levels below ``cdir``; names starting with "."
    are being written or set aside), in path order, with its directory entry, reached without
    following a link: a link or special file on the way is named in ``problems``, or raised
    (RecordError) where that is None."""

    def refuse(path: Path, mode: int) -> None:
        line = foreign_at(cdir, path, entry_kind(mode))
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
