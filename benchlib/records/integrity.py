"""A record's checksums: written once it is whole, verified on every load, and a cheap fingerprint
of what stands in its directory for telling an unchanged record from the file system alone."""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from pathlib import Path

from ..base.errors import RecordError
from .layout import CHECKSUMS, entry_kind, foreign_in_record, foreign_on_the_way, read_regular


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
        raise RecordError(foreign_on_the_way(path, entry_kind(mode), "a record"))
    present = _record_files(base)
    if CHECKSUMS not in present:
        raise RecordError(f"{path}: {CHECKSUMS} missing (incomplete or foreign record)")
    try:
        sums = read_regular(base, CHECKSUMS).decode()  # _record_files saw a regular file
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
            data = read_regular(base, name)
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
                        foreign_in_record(record_dir, name, entry_kind(entry.stat(follow_symlinks=False).st_mode))
                    )
    return names
