"""Collectors: one module per tool, each a pure command builder and a pure parser."""


class ParseError(ValueError):
    """A tool's output could not be turned into metrics."""
