"""One measurement at a time per machine, and a measurement that dies with its pipeline.

Two measurements at once load the same CPUs, and both report wrong numbers
without a word. So `benchlib collect` holds an exclusive flock(2) on
`LOCK_PATH` for the whole collection, whatever the campaign, environment or
target, and a second one (or `benchlib lab clean`) is refused at once. The
kernel drops the lock when its holder exits, however it dies: it is never
stale. The holder writes one line into the file, "pid <pid>: <what>", which a
refused command quotes.

Shell scripts take the same lock with flock(1); open the file with ``>>``,
never ``>``, so that a refused attempt does not erase the holder's line::

    exec 9>>/run/benchlib/collect.lock
    flock -n 9 || { echo "busy: $(cat /run/benchlib/collect.lock)" >&2; exit 1; }
    # ... the lock is held until fd 9 is closed or the script exits
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..base.errors import BenchlibError

LOCK_PATH = Path("/run/benchlib/collect.lock")
_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


class Busy(BenchlibError):
    """Another measurement holds the machine."""


def holder(path: Path = LOCK_PATH) -> str:
    try:
        return path.read_text(errors="replace").strip() or "a process that has not said who it is"
    except OSError:
        return "unknown"


@contextmanager
def exclusive(what: str, path: Path = LOCK_PATH) -> Iterator[None]:
    """Hold the machine for the block; Busy at once, naming the holder, if another process holds it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
            raise Busy(
                f"{path}: another measurement runs on this machine ({holder(path)}); "
                "one at a time, or both measure each other's load: wait for it, or stop it"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}: {what}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """Have the kernel send us ``sig`` when the process that started us dies (prctl PR_SET_PDEATHSIG).

    dvc runs a stage's command through a shell, without a process group of
    its own, and does not pass SIGTERM on: killed, dvc would leave the
    command running and measuring. dvc.yaml's cmd ``exec``s, so that our
    parent is dvc itself and not a shell that outlives it (dash, /bin/sh on
    Debian, does not exec a lone command). Exits at once if the parent is
    already gone.
    """
    parent = os.getppid()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent:  # it died before the prctl took effect
        os.kill(os.getpid(), sig)
