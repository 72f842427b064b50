"""The targets, by the name environment.yaml's ``target`` gives: each one's package is imported only
when asked for, so that a lab campaign never loads the Kubernetes client.

Adding a target: its package below targets/ (a `Target` subclass), a line here, and its scenario
model in benchlib/settings/scenarios/.
"""

from __future__ import annotations

from collections.abc import Callable

from ..base.errors import ConfigError
from . import Target


def _lab() -> type[Target]:
    from .lab import LabTarget

    return LabTarget


def _kubernetes() -> type[Target]:
    from .kubernetes import KubernetesTarget

    return KubernetesTarget


def _ssh() -> type[Target]:
    from .ssh import SshTarget

    return SshTarget


TARGETS: dict[str, Callable[[], type[Target]]] = {"lab": _lab, "kubernetes": _kubernetes, "ssh": _ssh}


def get(name: str) -> type[Target]:
    """The Target class of target ``name``, its package imported now."""
    if name not in TARGETS:
        raise ConfigError(f"unknown target {name!r}; known targets: {sorted(TARGETS)}")
    return TARGETS[name]()
