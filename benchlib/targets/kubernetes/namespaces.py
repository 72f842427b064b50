"""A target session's namespace: created with its owner's labels and the runner's role binding,
deleted (and waited for) at teardown, and found and deleted by the next session on the same host
when its owner was killed."""

from __future__ import annotations

import logging
import socket
import time

from ...base.processes import alive
from ...settings.environment import Environment
from .. import TargetError
from .api import Cluster, Refused, absent, attempt, k8s, refusal
from .manifests import LABEL_OWNER, namespace_manifest

_log = logging.getLogger(__name__)  # the default for log=: where benchlib.base.logs sends messages

WORKLOAD_ROLE = "benchlib-workload"  # ClusterRole of pipelines/kubernetes/rbac.yaml
DELETE_TIMEOUT_S = 120
RBAC_SETTLE_S = 10  # RBAC caches refresh quickly but not instantly


def create(cluster: Cluster, env: Environment, session: str, owner: str) -> None:
    """The session's namespace (`cluster.namespace`), with the runner's own permissions inside it
    (pipelines/kubernetes/rbac.yaml), once they are in force."""
    k, core, namespace = k8s(), cluster.core, cluster.namespace
    with refusal(f"cannot create namespace {namespace}"):
        core.create_namespace(namespace_manifest(env, session, owner))  # pyright: ignore[reportArgumentType] (the client sends a manifest dict as it is; the annotation names only its model)
    user = (
        k.client.AuthenticationV1Api(cluster.client)
        .create_self_subject_review({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
        .status.user_info.username
    )
    with refusal(f"cannot bind ClusterRole {WORKLOAD_ROLE} in {namespace} (apply pipelines/kubernetes/rbac.yaml)"):
        cluster.rbac.create_namespaced_role_binding(
            namespace,
            {  # pyright: ignore[reportArgumentType] (the client sends a manifest dict as it is; the annotation names only its model)
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": "benchlib-runner"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": WORKLOAD_ROLE},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
            },
        )
    deadline = time.monotonic() + RBAC_SETTLE_S
    while time.monotonic() < deadline:
        if not isinstance(attempt(lambda: core.list_namespaced_pod(namespace)), Refused):
            return
        time.sleep(0.2)


def delete(cluster: Cluster, name: str, timeout: float = DELETE_TIMEOUT_S) -> None:
    """Delete namespace ``name`` and wait until it is gone."""
    core = cluster.core
    if absent(lambda: core.delete_namespace(name), f"cannot delete namespace {name}"):
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if absent(lambda: core.read_namespace(name), f"cannot read namespace {name}"):
            return
        time.sleep(0.5)
    raise TargetError(f"kubernetes: namespace {name} still exists {timeout:g} s after deletion")


def delete_orphans(cluster: Cluster, log=_log.info) -> list[str]:
    """Delete the namespaces of sessions started on this host whose process is gone; their names."""
    host = socket.gethostname()
    removed = []
    for ns in cluster.core.list_namespace(label_selector=LABEL_OWNER).items:
        owner_host, _, pid = ns.metadata.labels.get(LABEL_OWNER, "").rpartition(".")
        if owner_host == host and pid.isdigit() and not alive(int(pid)) and ns.metadata.name:
            log(f"kubernetes: removing namespace {ns.metadata.name} left by a killed campaign")
            delete(cluster, ns.metadata.name)
            removed.append(ns.metadata.name)
    return removed
