"""The errors benchlib raises on purpose. Every message names what is wrong
(the file and key, the record, the run or the command), so the CLI prints it
as it is and exits 2; anything else is a bug and keeps its traceback."""

from __future__ import annotations


class BenchlibError(Exception):
    """Base of every error whose message is meant for the user."""


class ConfigError(BenchlibError, ValueError):
    """params.yaml or an environment definition is invalid."""


class ParseError(BenchlibError, ValueError):
    """A tool's output (or /proc/stat) could not be turned into metrics."""


class TargetError(BenchlibError, RuntimeError):
    """The target cannot be used (missing privilege, tool or kernel feature, failed set-up)."""


class DatapathError(TargetError):
    """A process the target runs on a run's datapath (a mesh proxy) died: that run fails, the campaign
    goes on once the target has started it again (`Target.recover`)."""


class RecordError(BenchlibError, ValueError):
    """A raw record is corrupt, truncated, inconsistent or of an unknown version, or a campaign's records are
    missing or cannot be fetched; the message names the record or the campaign."""


class SchemaError(BenchlibError, ValueError):
    """A tidy table does not have the columns, types or values it must have."""


class NotebookError(BenchlibError, RuntimeError):
    """An analysis notebook raised; the message names the notebook, the error and the executed copy
    that keeps its traceback."""
