"""Running commands in the lab's network namespaces, and removing them."""

from __future__ import annotations

import json
import os
import signal
import subprocess

from benchlib.base.errors import TargetError

STOP_TIMEOUT_S = 3  # a server's grace between SIGTERM and SIGKILL
COMMAND_TIMEOUT_S = 60  # set-up and clean-up commands (ip, sysctl, nft, tc) take well under a second


def _run(argv: list[str], stdin: str | None = None) -> subprocess.CompletedProcess:
    """A set-up command, killed if it hangs (a hung `ip` would hold the lab and the machine lock)."""
    try:
        return subprocess.run(argv, capture_output=True, text=True, input=stdin, timeout=COMMAND_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise TargetError(f"lab: `{' '.join(argv)}` did not finish within {COMMAND_TIMEOUT_S} s") from None


def run(argv: list[str], what: str, stdin: str | None = None) -> str:
    """stdout of a command that must succeed; TargetError with its stderr otherwise."""
    proc = _run(argv, stdin)
    if proc.returncode != 0:
        raise TargetError(f"lab: {what} failed: `{' '.join(argv)}`: {proc.stderr.strip()}")
    return proc.stdout


def ip(ns: str | None, *args: str) -> str:
    return run(["ip", *(["-n", ns] if ns else []), *args], "ip " + " ".join(args[:2]))


def in_ns(ns: str, *argv: str) -> str:
    return run(["ip", "netns", "exec", ns, *argv], argv[0])


def apply(ns: str, argv: list[str], text: str) -> None:
    """Run ``argv`` in ``ns`` with ``text`` on stdin (rules, keys: never in argv)."""
    proc = _run(["ip", "netns", "exec", ns, *argv], text)
    if proc.returncode != 0:
        raise TargetError(f"lab: `{' '.join(argv)}` in {ns} failed: {proc.stderr.strip()[:2000]}")


def apply_ip(ns: str, lines: list[str], what: str) -> None:
    """Run `ip` commands read from stdin, so key material never shows in a process's argv."""
    proc = _run(["ip", "-n", ns, "-batch", "-"], "\n".join(lines) + "\n")
    if proc.returncode != 0:
        raise TargetError(f"{what}: {' '.join(proc.stderr.split())}")


def json_field(text: str, key: str) -> str:
    """A field of the first object of `ip -j` output."""
    return json.loads(text)[0][key]


def list_namespaces() -> list[str]:
    out = _run(["ip", "netns", "list"]).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def remove_namespace(ns: str) -> None:
    """Kill what runs inside ``ns`` (servers of a killed campaign), then delete it."""
    pids = _run(["ip", "netns", "pids", ns]).stdout.split()
    for pid in pids:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass
    _run(["ip", "netns", "del", ns])


def stop(proc: subprocess.Popen) -> None:
    """Stop a server the lab started (in a session of its own): SIGTERM, then SIGKILL."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=STOP_TIMEOUT_S)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
