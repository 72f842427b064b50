"""Which lab owns which namespaces, and removing those of dead campaigns.

Each lab is named ``bl-<pid>_<n>`` and prefixes its namespaces and its
temporary directory (``/tmp/bl-<pid>_<n>-*``, the servers' logs) with that id.
The process that builds a lab holds an flock on ``/run/benchlib/<id>.lock``
for the lab's lifetime. Namespaces and directories whose lock is free belong
to a campaign that died without tearing down (SIGKILL), and the next start
(or ``benchlib lab clean``) removes them.
"""

from __future__ import annotations

import fcntl
import itertools
import logging
import os
import re
import shutil
import tempfile
from pathlib import Path

from .netns import list_namespaces, remove_namespace

_log = logging.getLogger(__name__)  # the default for log=: where benchlib.base.logs sends messages

PREFIX = "bl-"
LOCK_DIR = Path("/run/benchlib")
_LAB_ID = re.compile(rf"^({PREFIX}\d+_\d+)-")
_instances = itertools.count()


def new_lab_id() -> str:
    """An id no other lab of this or any live process has."""
    return f"{PREFIX}{os.getpid()}_{next(_instances)}"


def lab_id_of(ns: str) -> str | None:
    match = _LAB_ID.match(ns)
    return match.group(1) if match else None


def try_lock(lab_id: str):
    """Take the lab's lock without waiting; None when a live process holds it."""
    LOCK_DIR.mkdir(parents=True, exist_ok=True)
    f = open(LOCK_DIR / f"{lab_id}.lock", "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.close()
        return None
    return f


def release(lab_id: str, lock) -> None:
    if lock:
        (LOCK_DIR / f"{lab_id}.lock").unlink(missing_ok=True)
        lock.close()


def temp_dir(lab_id: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=f"{lab_id}-"))


def clean_leftovers(log=_log.info) -> list[str]:
    """Remove the namespaces and temporary directories of labs whose owner is gone.
    Returns what was removed (namespace names, directory paths)."""
    removed = []
    by_lab: dict[str, list[str]] = {}
    for ns in list_namespaces():
        lab_id = lab_id_of(ns)
        if lab_id:
            by_lab.setdefault(lab_id, []).append(ns)
    for d in Path(tempfile.gettempdir()).glob(f"{PREFIX}*_*-*"):
        lab_id = lab_id_of(d.name)
        if lab_id and d.is_dir() and not d.is_symlink():
            by_lab.setdefault(lab_id, []).append(str(d))
    for lab_id, leftovers in by_lab.items():
        lock = try_lock(lab_id)
        if lock is None:
            continue  # a live campaign owns it
        for item in leftovers:
            if item.startswith("/"):
                shutil.rmtree(item, ignore_errors=True)
            else:
                remove_namespace(item)
            removed.append(item)
        release(lab_id, lock)
    if removed:
        log(f"lab: removed {len(removed)} namespaces and directories left by a killed campaign: {' '.join(removed)}")
    return removed
