"""The `benchlib` commands, one module each: the command declares its arguments (`add_parser`) next
to what it does (`run`), which is calling the library. `benchlib.cli` builds the command line from
them, in this order."""

from __future__ import annotations

from . import (
    analyse,
    collect,
    compare,
    completion,
    doctor,
    history,
    lab,
    parse,
    render,
    report,
    summary,
    validate,
    verify,
)

# the order of `benchlib --help` and of a bare `benchlib`'s list
COMMANDS = (
    validate,
    collect,
    parse,
    verify,
    analyse,
    doctor,
    completion,
    summary,
    report,
    compare,
    history,
    render,
    lab,
)
