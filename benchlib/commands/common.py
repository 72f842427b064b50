"""What every command shares: its exit codes, the campaign definition, how a result is printed and
how its --help is laid out. Light: the pipeline's commands import it, so no stage depends on more."""

from __future__ import annotations

import argparse

import shtab

from ..base import escape, logs
from ..settings.campaign import Params
from ..settings.loading import load_params

FILE = shtab.FILE  # completes --params and other file arguments with file names
EXIT_ERROR = 2  # a BenchlibError: the message says what to fix
EXIT_REGRESSION = 1  # compare: a significant regression beyond the threshold
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it

log = logs.get()
RESULT = logs.RESULT  # log.info(line, extra=RESULT): a command's result, on the terminal even with -q


def out(text: str, **kw) -> None:
    """A command's output on stdout: names and reasons in it come from records, so their control
    characters are written as escapes (stderr's messages get the same from benchlib.base.logs)."""
    print(escape.printable(text), **kw)


def params(args) -> Params:
    return load_params(args.params)


def whole_number(low: int, high: int):
    """An argument type for a count: a whole number from ``low`` to ``high`` (argparse names the option
    on error). The digits are checked before int() reads them: a 5,000-digit number is refused, not
    converted."""

    def parse(text: str) -> int:
        digits = text.strip()
        if (
            not (digits.isascii() and digits.isdigit())
            or len(digits) > len(str(high))
            or not low <= int(digits) <= high
        ):
            raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a whole number from {low} to {high:,}")
        return int(digits)

    return parse


class HelpFormatter(argparse.HelpFormatter):
    """Fills each line of a description or epilog on its own, keeps blank lines, and leaves lines that
    start with spaces (examples) as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return "\n".join(
            indent + line if line.startswith(" ") else super(HelpFormatter, self)._fill_text(line, width, indent)
            for line in text.splitlines()
        )


def epilog(examples: list[str], exit_codes: str) -> str:
    """A command's --help ends with examples and its exit codes."""
    return "\n".join(["Examples:", *(f"  {e}" for e in examples), "", f"Exit codes: {exit_codes}"])


ERRORS = "2 an error, one line on stderr naming what to fix"  # every command's exit code 2


def add(subparsers, name: str, *, examples: list[str], exit_codes: str, **kw) -> argparse.ArgumentParser:
    """The command's parser, with its examples and exit codes in its --help."""
    return subparsers.add_parser(name, formatter_class=HelpFormatter, epilog=epilog(examples, exit_codes), **kw)
