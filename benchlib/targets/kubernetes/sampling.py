"""CPU per node: a hostPID pod of a DaemonSet on every node reads that node's
/proc/stat; and the CNI agent's CPU and memory from the metrics API.
"""

from __future__ import annotations

import time

from ...host import cpu
from ...settings.environment import Environment
from .. import TargetError
from .api import Cluster, Refused, attempt, is_ready, k8s, placed
from .manifests import LABEL_ROLE, cpu_daemonset

POLL_S = 0.3


class NodeCpu:
    """The sampling pod of every node. They start beside the scenario's first pods (on the host network,
    they need no pod network) and are waited for when first read."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        self._pods: dict[str, str] = {}  # node -> pod
        self._deadline = 0.0
        self._timeout_s = 0.0

    def start(self, env: Environment, session: str, timeout_s: float) -> None:
        """Create the DaemonSet, without waiting for its pods."""
        self.cluster.apps.create_namespaced_daemon_set(self.cluster.namespace, cpu_daemonset(env, session))  # pyright: ignore[reportArgumentType] (the client sends a manifest dict as it is; the annotation names only its model)
        self._timeout_s, self._deadline = timeout_s, time.monotonic() + timeout_s

    @property
    def pods(self) -> dict[str, str]:
        """node -> its sampling pod, once every one is ready."""
        while not self._pods:
            pods = self.cluster.core.list_namespaced_pod(
                self.cluster.namespace, label_selector=f"{LABEL_ROLE}=cpu"
            ).items
            ready = [p for p in pods if is_ready(p)]
            if pods and len(ready) == len(pods):
                self._pods = {node: name for name, node, _ in map(placed, ready)}
            elif time.monotonic() > self._deadline:
                pending = [p.metadata.name for p in pods if not is_ready(p) and p.metadata.name] or ["(none created)"]
                raise TargetError(
                    f"kubernetes: CPU sampling pods not ready after {self._timeout_s:g} s: {pending}\n"
                    + self.cluster.events(pending[0])
                )
            else:
                time.sleep(POLL_S)
        return self._pods

    def require(self, node: str) -> None:
        if node not in self.pods:
            raise TargetError(f"kubernetes: no CPU sampling pod on node {node}")

    def snapshot(self, node: str) -> cpu.Snapshot:
        return cpu.take(self.cluster.check(self.pods[node], ["cat", "/proc/stat"]))

    def any_pod(self) -> str:
        return next(iter(self.pods.values()))


def agent_usage(cluster: Cluster, agent: dict[str, str] | None) -> dict:
    """CPU and memory of the CNI agent pods from the metrics API, or why they are absent."""
    if agent is None:
        return {"absent": "no cni_agent configured for this environment"}
    metrics = k8s().client.CustomObjectsApi(cluster.client)
    data = attempt(
        lambda: metrics.list_namespaced_custom_object(
            "metrics.k8s.io", "v1beta1", agent["namespace"], "pods", label_selector=agent["selector"]
        )
    )
    if isinstance(data, Refused):
        return {"absent": f"metrics API: {data.reason}"}
    return {
        item["metadata"]["name"]: {c["name"]: c["usage"] for c in item["containers"]}
        for item in (data.get("items", []) if isinstance(data, dict) else [])
    } or {"absent": "no agent pods matched"}
