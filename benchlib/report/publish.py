"""A report published whole or not at all: `benchlib report` writes every file of it into a staging
directory inside the out dir, then swaps the staged entries in for the previous ones, so that an
interrupted or failing report (a kill, Ctrl-C, a failing notebook, a full disk) leaves the previous
report as it was. The staging directory is inside the out dir, not beside it, so that the swap is a
rename on one filesystem even where the out dir is a mount point."""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..base import files
from ..vocabulary import schema
from . import export

# <out>/.report.tmp-<pid>: the staging directory (files.temporary), and <out>/.report.tmp-<pid>-previous
# the previous entries during the swap; .dvcignore keeps both out of DVC's outputs
STAGING = "report"

# the out dir's folders that hold more than the report's own files: a user's files in figures/ and blog/
# (the report lists its own there in export.WRITTEN), another command's notebooks (`benchlib compare`'s)
SHARED_FOLDERS = ("figures", "blog", "notebooks")


def _previous(out: Path) -> Path:
    return files.temporary(out / STAGING, "-previous")


def staging_dir(out: Path) -> Path:
    """A new, empty staging directory in ``out`` for this process, after removing what a killed report
    left there (schema.remove_stale_temporaries: a running report's stays)."""
    out.mkdir(parents=True, exist_ok=True)
    schema.remove_stale_temporaries(out, [STAGING])
    staging = files.temporary(out / STAGING)
    for own in (staging, _previous(out)):  # this process's own, from a report that failed earlier in it
        shutil.rmtree(own, ignore_errors=True)
    staging.mkdir()
    return staging


def swap_in(staging: Path, out: Path) -> None:
    """Put each entry of ``staging`` into ``out`` in place of the previous one of its name, and remove
    ``staging``. The shared folders first get what the previous ones hold that is not the previous
    report's (`carry_over`), so only the report's own files are replaced. Each entry is two renames (the
    previous one aside, the new one in), and any exception between them (Ctrl-C, a refused rename) puts
    every previous entry back; only a SIGKILL within those few renames leaves a mix, which the next
    report replaces. Two reports into one out dir swap one after the other (an flock on it)."""
    with _locked(out):
        carry_over(out, staging)
        names = sorted(p.name for p in staging.iterdir())
        for name in names:
            _refuse_another_kind(staging / name, out / name)
        previous = _previous(out)
        previous.mkdir()
        try:
            for name in names:
                if os.path.lexists(out / name):
                    os.rename(out / name, previous / name)
                os.rename(staging / name, out / name)
        except BaseException:
            _put_back(names, staging, previous, out)
            previous.rmdir()  # empty once all is back; left for the next report if not
            raise
        # the new report is in place: what is left to remove is no reason to fail it
        shutil.rmtree(previous, ignore_errors=True)
        shutil.rmtree(staging, ignore_errors=True)


def _put_back(names: list[str], staging: Path, previous: Path, out: Path) -> None:
    # judged by where each entry is, not by a count of renames done, which an interruption right after
    # a rename would leave one short
    for name in names:
        if not os.path.lexists(staging / name) and os.path.lexists(out / name):
            os.rename(out / name, staging / name)
        if os.path.lexists(previous / name):
            os.rename(previous / name, out / name)


def _refuse_another_kind(new: Path, old: Path) -> None:
    """A file where the report puts a folder, or a folder where it puts a file, is not the previous
    report's: refused, before anything is swapped, rather than removed."""
    if not os.path.lexists(old) or old.is_dir() == new.is_dir():
        return
    if new.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "not a directory, where the report writes a folder", str(old))
    raise IsADirectoryError(errno.EISDIR, "a directory, where the report writes a file", str(old))


def carry_over(out: Path, staging: Path) -> None:
    """Copy into the staged shared folders (SHARED_FOLDERS) what the previous ones in ``out`` hold that is
    not the previous report's: a file of the user's own in figures/ or blog/ (one their export.WRITTEN
    does not list), another command's notebook in notebooks/; a file the new report wrote wins. The
    previous report's files there go with the swap, so a campaign's figures never reach the next one's
    blog index."""
    for folder in SHARED_FOLDERS:
        old, new = out / folder, staging / folder
        if not old.is_dir() or old.is_symlink():
            continue
        reports = set() if folder == "notebooks" else {export.WRITTEN, *export.written_names(old)}
        new.mkdir(exist_ok=True)
        for path in old.iterdir():
            if path.name in reports or os.path.lexists(new / path.name):
                continue
            if path.is_dir() and not path.is_symlink():
                shutil.copytree(path, new / path.name, symlinks=True)
            else:
                shutil.copy2(path, new / path.name, follow_symlinks=False)


@contextmanager
def _locked(directory: Path) -> Iterator[None]:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # released when the descriptor closes
        yield
    finally:
        os.close(fd)
