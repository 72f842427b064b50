"""The names that become paths or key columns, checked where they enter (schema.NAME_RULE)."""

from __future__ import annotations

import typing
from typing import Annotated

from pydantic import AfterValidator

from ..base.errors import ConfigError
from ..vocabulary.schema import check_name

# Every name that becomes a path or a key column follows schema.NAME_RULE: checked where it enters, by the
# models (Name) and by require_name for a name given on the command line.


def require_name(name: str, what: str) -> str:
    """``name`` given by ``what`` (a command-line argument, say), checked before it becomes a path."""
    try:
        return check_name(name)
    except ValueError as exc:
        raise ConfigError(f"{what}: {exc}") from None


def check_distinct(names: typing.Iterable[str]) -> None:
    """ValueError if two names differ only in case: on a case-insensitive file system (macOS,
    Windows) their records would share one directory."""
    seen: dict[str, str] = {}
    for name in names:
        other = seen.setdefault(name.casefold(), name)
        if other != name:
            raise ValueError(f"{other!r} and {name!r} differ only in case (one directory where case is ignored)")


Name = Annotated[str, AfterValidator(check_name)]
