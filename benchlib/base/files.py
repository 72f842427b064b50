"""Files written whole or not at all: each is written beside its place under a temporary name, then
renamed into place, so a reader (or DVC) never sees half a file and a failure (a full disk, a kill)
leaves the previous file as it was."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path


def temporary(path: Path, what: str = "") -> Path:
    """Where ``path`` is written before it is renamed into place: a hidden name beside it carrying this
    process's pid, so that the next writer tells a killed writer's leftovers from a live one's
    (`schema.remove_stale_temporaries`); .dvcignore keeps DVC from caching them."""
    return path.with_name(f".{path.name}.tmp-{os.getpid()}{what}")


def stage(path: Path, write: Callable[[Path], object]) -> Path:
    """``write(tmp)`` to ``path``'s temporary, which is returned, not yet in place (a set of files is
    renamed into place together). On a failure the temporary is removed; a failure of the disk (an
    OSError) names ``path``."""
    tmp = temporary(path)
    try:
        write(tmp)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise OSError(exc.errno, exc.strerror, str(path)) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def write_atomically(path: Path, write: Callable[[Path], object]) -> Path:
    """``path`` written whole by ``write(tmp)`` (`stage`), then renamed into place."""
    tmp = stage(path, write)
    try:
        tmp.replace(path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise OSError(exc.errno, exc.strerror, str(path)) from None
    return path
