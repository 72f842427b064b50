"""`benchlib completion`: the shell completion script, generated from the parser."""

from __future__ import annotations

import shtab

from .common import add


def add_parser(subparsers) -> None:
    s = add(
        subparsers,
        "completion",
        help="print the shell completion script (bash or zsh)",
        description="Print a completion script for benchlib's commands and options, generated "
        'from this parser by shtab. Bash: `eval "$(benchlib completion bash)"` in '
        "~/.bashrc, or save it as ~/.local/share/bash-completion/completions/benchlib. "
        "Zsh: save it as _benchlib in a directory of $fpath.",
        examples=[
            "benchlib completion bash > ~/.local/share/bash-completion/completions/benchlib",
            "benchlib completion zsh > ~/.zfunc/_benchlib",
        ],
        exit_codes="0 printed; 2 a shell other than bash or zsh.",
    )
    s.add_argument("shell", choices=["bash", "zsh"])
    s.set_defaults(func=run)


def run(args) -> int:
    print(shtab.complete(args.root_parser, shell=args.shell), end="")  # the whole command line (cli sets it)
    return 0
