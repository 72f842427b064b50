"""A fixture's files made once for the whole test session, also when pytest-xdist runs it on several
workers: each worker has a session of its own, and the unit tier hands out single tests, so a worker
never knows which others will need the same fixture."""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

DONE = ".made"  # written last: a folder without it is a make that failed or was cut short


def made_once(tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[Path], None]) -> Path:
    """The folder ``name``, filled by ``make(folder)`` on the first ask of the session. The first worker
    to ask makes it under a lock; a worker asking meanwhile waits, then reads what it made."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):  # each worker's base is a folder of the session's
        root = root.parent
    folder = root / name
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not (folder / DONE).exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            make(folder)
            (folder / DONE).touch()
    return folder
