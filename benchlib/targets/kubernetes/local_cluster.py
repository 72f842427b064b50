"""The local cluster's pod networks as its script lists them (`k8s-local-cluster.sh cnis`).

Each CNI is a plugin file of the script (scripts/cluster/cni/NAME.sh) that declares what it needs:
the Debian packages and host commands beyond the cluster's, and whether it is built from source
(then `build NAME --check` says whether this machine has the build). benchlib asks the script, so
that a new plugin needs no list here.
"""

from __future__ import annotations

import functools
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ...base.errors import TargetError
from ...settings.scenarios import Scenario

SCRIPT_NAME = "k8s-local-cluster.sh"
SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / SCRIPT_NAME  # this checkout's
SCRIPT_TIMEOUT_S = 30  # listing or checking builds starts nothing


@dataclass(frozen=True)
class Cni:
    name: str
    built_from_source: bool
    packages: tuple[str, ...]  # Debian packages beyond the cluster's (scripts/setup.sh's profile NAME)
    commands: tuple[str, ...]  # host commands its switch runs beyond the cluster's

    @property
    def needs_a_profile(self) -> bool:
        """Whether setup.sh's profile of this CNI installs or builds more than the cluster's."""
        return self.built_from_source or bool(self.packages)


def _script(*args: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(
            ["bash", str(SCRIPT), *args], capture_output=True, text=True, errors="replace", timeout=SCRIPT_TIMEOUT_S
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise TargetError(f"{SCRIPT} {' '.join(args)} failed ({exc})") from exc


def _words(field: str) -> tuple[str, ...]:
    return () if field == "-" else tuple(field.split())


@functools.cache
def cnis() -> dict[str, Cni]:
    """Every CNI of the local cluster's script, by name."""
    r = _script("cnis")
    if r.returncode != 0:
        raise TargetError(f"{SCRIPT} cnis exited {r.returncode}: {r.stderr.strip()}")
    table = {}
    for line in r.stdout.splitlines():
        name, built, packages, commands = line.split("\t")
        table[name] = Cni(name, built == "build", _words(packages), _words(commands))
    return table


def runs_the_local_cluster(scenario: Scenario) -> bool:
    """Whether a scenario's commands call the local cluster's script (its switch, its checks)."""
    commands = [*getattr(scenario, "apply", []), *getattr(scenario, "programmed", []), *scenario.record.values()]
    return any(SCRIPT_NAME in c for c in commands)


def cni_of(scenario: Scenario) -> Cni | None:
    """The local cluster's CNI a scenario switches to (its settings.cni), if it runs the local cluster."""
    if not runs_the_local_cluster(scenario):
        return None
    return cnis().get(str(scenario.settings.get("cni", "")))


def build_check(cni: Cni) -> tuple[bool, str]:
    """Whether this machine has the CNI's build, and where it is or how to make it (one line)."""
    r = _script("build", cni.name, "--check")
    found = ((r.stdout if r.returncode == 0 else r.stderr).strip().splitlines() or ["?"])[-1]
    return r.returncode == 0, found.removeprefix(f"{SCRIPT_NAME}: ")
