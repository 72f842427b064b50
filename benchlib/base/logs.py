"""Where messages go: the terminal (stderr) and the campaign's log file, through `logging`.

benchlib's own messages (logger ``benchlib`` and below: progress lines, warnings, errors) reach
the terminal at the level -q/-v choose. Everything else that logs or warns (papermill, the
notebooks' kernel, DVC, Python warnings) goes only to the campaign's log file while a command
keeps one, and to the terminal only with -v or when there is no log file to hold it. The log file,
``data/raw/<campaign>.log``, sits beside the campaign's records, outside them: no record, checksum
or DVC stage output contains it, so appending to it changes no stage's inputs.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import sys
from pathlib import Path

from . import escape

NAME = "benchlib"
QUIET, NORMAL, VERBOSE = -1, 0, 1
_FILE_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def get(name: str = NAME) -> logging.Logger:
    return logging.getLogger(name)


# `log.info(line, extra=RESULT)`: a command's result (collect's counts), on the terminal even with -q
RESULT = {"result": True}


class _Terminal(logging.Filter):
    """benchlib's records at the chosen level, and its results at any; others only with -v or while
    no log file holds them."""

    def __init__(self, verbosity: int):
        super().__init__()
        self.verbose = verbosity >= VERBOSE
        self.level = {QUIET: logging.WARNING, NORMAL: logging.INFO}.get(verbosity, logging.DEBUG)
        self.file_open = False

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < self.level and not getattr(record, "result", False):
            return False
        ours = record.name == NAME or record.name.startswith(NAME + ".")
        return ours or self.verbose or not self.file_open


class _Escaping(logging.Formatter):
    """Messages carry names, failure reasons and tool output from records: their control characters
    (an ANSI escape, a carriage return) are written as escapes, so they cannot drive the terminal
    or hide what the line says, on the terminal or when the log file is read on one."""

    def format(self, record: logging.LogRecord) -> str:
        return escape.printable(super().format(record))


_terminal: _Terminal | None = None


def setup(verbosity: int = NORMAL) -> None:
    """The terminal handler on stderr: warnings, errors and results with -q, progress too by default, debug with -v."""
    global _terminal
    logging.raiseExceptions = False  # a closed terminal (SIGHUP, EIO) must not stop a teardown
    root = logging.getLogger()
    for handler in [h for h in root.handlers if h.get_name() == "benchlib"]:
        root.removeHandler(handler)
        handler.close()
    _terminal = _Terminal(verbosity)
    console = logging.StreamHandler(sys.stderr)
    console.set_name("benchlib")  # ours, to replace on the next call
    console.setFormatter(_Escaping("%(message)s"))
    console.addFilter(_terminal)  # the level too: a result passes it below the level
    root.addHandler(console)
    root.setLevel(logging.DEBUG if verbosity >= VERBOSE else logging.INFO)
    logging.captureWarnings(True)  # warnings.warn -> logger py.warnings -> the log file


def campaign_log(raw_root: Path, campaign: str) -> Path:
    return raw_root / f"{campaign}.log"


def to_file(path: Path) -> Path:
    """Append every record from here on to ``path`` (with time, level and logger). A link or a FIFO
    there is refused (OSError), never written through: the log sits beside the records, where
    anyone who can write the project could plant one (collect runs as root)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file", str(path))
    handler = logging.StreamHandler(open(fd, "a", encoding="utf-8", errors="replace"))  # noqa: SIM115 (the handler's for the process)
    handler.set_name("benchlib")
    handler.setFormatter(_Escaping(_FILE_FORMAT))
    logging.getLogger().addHandler(handler)
    if _terminal is not None:
        _terminal.file_open = True
    return path
