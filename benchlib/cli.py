"""`benchlib`: the command line. Each command lives in benchlib.commands with its own arguments; this
module builds the parser from them, adds the global options, sets up logging and turns the errors a
user can fix into one line and exit code 2."""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
from pathlib import Path

from .base import logs
from .base.errors import BenchlibError
from .commands import COMMANDS
from .commands.common import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_REGRESSION, FILE, params
from .settings.project import find_project, project_root

__all__ = ["EXIT_ERROR", "EXIT_INTERRUPTED", "EXIT_REGRESSION", "build_parser", "main", "version_text"]

log = logs.get()


# The commands of the pipeline's stages: their messages, and what their libraries log or warn
# (papermill, the notebooks' kernels), also go to the campaign's log file. Set up here, not in the
# commands: where messages go changes no stage's output, so logs.py is no stage's dependency.
CAMPAIGN_COMMANDS = ("collect", "parse", "analyse", "report")


def _campaign_log(args) -> None:
    p = params(args)
    path = logs.campaign_log(project_root() / "data" / "raw", p.experiment.campaign)
    try:
        logs.to_file(path)
    except OSError as exc:  # a read-only data/raw (pulled records, say) must not stop parse or the report
        log.warning(f"benchlib: no log file: {path}: {exc.strerror or exc}")
        return
    command = " ".join([args.command, *(["--env", args.env] if args.command == "collect" else [])])
    logs.get("command").info(f"benchlib {command} ({version_text()}), {p.source} -> {path}")


def _verbosity_options(parser: argparse.ArgumentParser, default) -> None:
    parser.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=default if default is not None else 0,
        help="also debug messages, and on the terminal what libraries log (papermill, the "
        "notebooks' kernels), which otherwise goes only to the campaign's log file",
    )
    parser.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        default=default if default is not None else False,
        help="no progress lines: only warnings, errors and results",
    )


def _accept_global_options(sub: argparse._SubParsersAction) -> None:
    """Let every command take --params, -v and -q after its name too (`benchlib validate --params F`).
    SUPPRESS: a command that is not given one keeps the value given before the command."""
    for parser in set(sub.choices.values()):
        parser.add_argument(
            "--params", default=argparse.SUPPRESS, help="the campaign definition (as before the command)"
        ).complete = FILE
        _verbosity_options(parser, argparse.SUPPRESS)
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                _accept_global_options(action)


# Tracked files a pipeline run rewrites by design: DVC's lock of what each stage ran on, and the metrics
# kept in git for `dvc metrics diff`. A changed one means "results of a run here", not changed code.
PIPELINE_FILES = ("dvc.lock", "reports/metrics.json")


def version_text(root: Path | None = None) -> str:
    """'benchlib 0.1.0 (git 1a2b3c4)'; '-dirty' and the changed files when the checkout's tracked files
    differ from the commit, except the files a pipeline run rewrites, which are named as such."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        text = f"benchlib {version('benchlib')}"
    except PackageNotFoundError:
        text = "benchlib (not installed)"
    root = root or Path(__file__).resolve().parent.parent
    try:
        rev = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10
        )
        diff = subprocess.run(
            ["git", "-C", str(root), "diff", "--name-only", "HEAD", "--"], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return f"{text} (no git revision: git is not available)"
    if rev.returncode != 0:
        return f"{text} (no git revision: {root} is not a git checkout)"
    changed = diff.stdout.split() if diff.returncode == 0 else []
    code = [f for f in changed if f not in PIPELINE_FILES]
    ran = [f for f in changed if f in PIPELINE_FILES]
    shown = ", ".join(code[:3]) + (f" and {len(code) - 3} more" if len(code) > 3 else "")
    return (
        f"{text} (git {rev.stdout.strip()}"
        + (f"-dirty: {shown} changed" if code else "")
        + (f"; {' and '.join(ran)} from a pipeline run here" if ran else "")
        + ")"
    )


class _VersionAction(argparse.Action):
    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        print(version_text())
        parser.exit()


def _tools_on_path() -> None:
    """Put the checkout's .tools/bin (fortio, from scripts/setup.sh) first on PATH, for the
    tools this process starts on this machine; targets elsewhere have their own PATH."""
    tools = Path(__file__).resolve().parent.parent / ".tools" / "bin"
    if tools.is_dir() and str(tools) not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = f"{tools}{os.pathsep}{os.environ.get('PATH', '')}"


def _ascii_safe_output() -> None:
    """A terminal that cannot show a character (an ASCII-only locale, PYTHONIOENCODING=ascii) gets
    '?' for it: a file name or a tool's output must never turn a message into a traceback."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="replace")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="benchlib",
        description="Rerunnable container-network benchmarks. `dvc repro` calls these commands; "
        "you can call them yourself to validate, collect, parse or clean up.",
        epilog="A new measurement needs a new experiment.campaign in params.yaml: raw records "
        "of a campaign are never overwritten, and an interrupted campaign resumes.",
    )
    p.add_argument(
        "--params",
        help="the campaign definition (default: params.yaml of the project "
        "around the working directory); before or after the command",
    ).complete = FILE  # pyright: ignore[reportAttributeAccessIssue] (shtab reads this attribute)
    _verbosity_options(p, None)
    p.add_argument("--version", action=_VersionAction, help="print the package version and git revision, then exit")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(sub)
    _accept_global_options(sub)
    p.set_defaults(root_parser=p)  # `benchlib completion` completes the whole command line
    return p


def command_list(parser: argparse.ArgumentParser) -> str:
    """What a bare `benchlib` prints: each command with its one-line description."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    width = max(len(c.dest) for c in sub._choices_actions)
    return "\n".join(
        [
            f"usage: {parser.prog} [--params FILE] [-v] [-q] COMMAND ...",
            "",
            "commands:",
            *(f"  {c.dest:<{width}}  {c.help}" for c in sub._choices_actions),
            "",
            f"`{parser.prog} COMMAND --help` shows a command's options, examples and exit codes; "
            f"`{parser.prog} --help` the global options.",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    _ascii_safe_output()
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:  # a bare `benchlib`: what it can do, as a usage error (nothing was done)
        print(command_list(parser), file=sys.stderr)
        return EXIT_ERROR
    logs.setup(
        logs.VERBOSE if getattr(args, "verbose", 0) else logs.QUIET if getattr(args, "quiet", False) else logs.NORMAL
    )
    _tools_on_path()
    root, found = find_project()
    if not found:
        log.warning(f"benchlib: no project (dvc.yaml) at or above {Path.cwd()}: using the project at {root}")
    try:
        if args.command in CAMPAIGN_COMMANDS:
            _campaign_log(args)
        return args.func(args)
    except BenchlibError as exc:
        log.error(f"benchlib: error: {exc}")
        return EXIT_ERROR
    except OSError as exc:  # what the user's machine can cause: full or read-only disk, permissions, names
        where = " -> ".join(str(f) for f in (exc.filename, exc.filename2) if f is not None) or "(no path)"
        log.error(f"benchlib: error: {where}: {exc.strerror or exc}")
        return EXIT_ERROR
    except subprocess.TimeoutExpired as exc:
        log.error(f"benchlib: error: `{' '.join(map(str, exc.cmd))}` did not finish within {exc.timeout:g} s")
        return EXIT_ERROR
    except KeyboardInterrupt:
        # what an interrupted command leaves is its own to say (its parser's `interrupted`)
        log.warning(f"benchlib: interrupted; {getattr(args, 'interrupted', 'run the same command again')}")
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
