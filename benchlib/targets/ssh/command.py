"""ssh to one side's host: the local command line that runs a command there, and a short
command's output. Host keys are checked (``StrictHostKeyChecking=yes``, with ``known_hosts`` from
the environment when given) and ssh never prompts (``BatchMode=yes``)."""

from __future__ import annotations

import os
import shlex
import subprocess

from ...settings.environment import Environment
from ...settings.scenarios import SshHost
from .. import TargetError

CHECK_TIMEOUT_S = 30  # a `command -v` or `kill` over ssh
COMMAND_TIMEOUT_S = 60  # any other short command over ssh
FIRST_LINE_TIMEOUT_S = 30  # connect (ConnectTimeout 10 s), log in, and the remote shell's first line


def ssh_argv(env: Environment, side: str, remote: list[str]) -> list[str]:
    """The local command line that runs ``remote`` on one side's host."""
    s = env.ssh
    if s is None:
        raise TargetError(f"environment {env.name}: target ssh needs an ssh: section")
    h: SshHost = getattr(s, side)
    argv = [
        *s.command,
        "-p",
        str(h.port),
        "-l",
        h.user,
        "-o",
        "BatchMode=yes",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "ConnectTimeout=10",
    ]
    if h.identity_file:
        argv += ["-i", os.path.expanduser(h.identity_file), "-o", "IdentitiesOnly=yes"]
    if s.known_hosts:
        argv += ["-o", f"UserKnownHostsFile={os.path.expanduser(s.known_hosts)}"]
    for opt in s.options:
        argv += ["-o", opt]
    # ssh hands the remote side one string for its shell: quote every word
    return argv + [h.host, "--", shlex.join(remote)]


def host_label(env: Environment, side: str) -> str:
    """user@host:port of one side, as messages and records name it."""
    h: SshHost = getattr(env.ssh, side)
    return f"{h.user}@{h.host}:{h.port}"


def run(env: Environment, side: str, remote: list[str], timeout: float = COMMAND_TIMEOUT_S) -> str:
    """stdout of a command on one side's host, which must succeed."""
    argv = ssh_argv(env, side, remote)
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise TargetError(f"ssh: `{shlex.join(remote)}` on {host_label(env, side)} took over {timeout} s") from None
    if proc.returncode != 0:
        raise TargetError(
            f"ssh: `{shlex.join(remote)}` on {host_label(env, side)} exited {proc.returncode}: {proc.stderr.strip()}"
        )
    return proc.stdout
