"""The targets, by the name environment.yaml's ``target`` gives: each one's package is imported only
when asked for, so that a lab campaign never loads the Kubernetes client.

Adding a target: its package below targets/ (a `Target` subclass), a line here, and its scenario
model in benchlib/settings/scenarios/.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..base.errors import ConfigError
from . import Target


def _lab(env=None, scenarios=()) -> type[Target]:
    from .lab import LabTarget

    return LabTarget


def _kubernetes(env=None, scenarios=()) -> type[Target]:
    from .kubernetes import KubernetesTarget
    from .kubernetes.clusters import ClustersTarget, names_clusters

    # scenarios on clusters of their own (kubernetes.clusters): one target over them all
    return ClustersTarget if env is not None and names_clusters(env, scenarios) else KubernetesTarget


def _ssh(env=None, scenarios=()) -> type[Target]:
    from .ssh import SshTarget

    return SshTarget


TARGETS: dict[str, Callable[..., type[Target]]] = {"lab": _lab, "kubernetes": _kubernetes, "ssh": _ssh}


def get(name: str, env=None, scenarios: Sequence[str] = ()) -> type[Target]:
    """The Target class of target ``name``, its package imported now; given the environment and the
    scenarios it will run, the class that runs those."""
    if name not in TARGETS:
        raise ConfigError(f"unknown target {name!r}; known targets: {sorted(TARGETS)}")
    return TARGETS[name](env, scenarios)
