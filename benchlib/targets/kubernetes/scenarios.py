"""Switching a cluster to a scenario: the scenario's shell commands (apply,
helm), retried checks (ready before the pods, programmed after the
Services), what to record, and the facts of the nodes the pods landed on.

Commands run in the environment's folder with the environment's kubeconfig
and context, normally an admin's: switching a CNI is beyond the runner's RBAC.
A scenario on one of kubernetes.clusters gets that cluster's, and its name in
BENCHLIB_K8S_CLUSTER (the local cluster script's --cluster).
"""

from __future__ import annotations

import os
import subprocess
import time

from ...settings.environment import Environment
from ...settings.project import environment_dir
from ...settings.scenarios import KubernetesScenario
from .. import TargetError
from .api import Cluster
from .manifests import kubernetes_settings, scenario_commands

RECORD_TIMEOUT_S = 120
FIRST_RETRY_S, MAX_RETRY_S = 0.5, 5  # most checks pass within seconds; then back off
ERROR_TAIL = 2000  # characters of a failed command's stderr in the error


class Switch:
    def __init__(self, env: Environment, log):
        self.env, self.log = env, log

    def shell(self, command: str, timeout: float, scenario: str) -> subprocess.CompletedProcess:
        settings = kubernetes_settings(self.env)
        env = dict(os.environ)
        cluster = KubernetesScenario.of(self.env, scenario).cluster
        if cluster is not None:
            env["BENCHLIB_K8S_CLUSTER"] = cluster
        if settings.kubeconfig:
            env["KUBECONFIG"] = os.path.expanduser(settings.kubeconfig)
        if settings.context:
            env["BENCHLIB_KUBE_CONTEXT"] = settings.context
        return subprocess.run(
            ["sh", "-c", command],
            cwd=environment_dir(self.env.name),
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def apply(self, scenario: str) -> None:
        """The scenario's commands and helm release, then until its ready checks pass."""
        sc = KubernetesScenario.of(self.env, scenario)
        for command in scenario_commands(self.env, scenario):
            self.log(f"kubernetes: {scenario}: {command}")
            proc = self.shell(command, sc.ready_timeout_s, scenario)
            if proc.returncode != 0:
                raise TargetError(
                    f"kubernetes: scenario {scenario}: `{command}` exited {proc.returncode}: "
                    f"{proc.stderr.strip()[-ERROR_TAIL:]}"
                )
        self.retry_until_ok(scenario, sc.ready, "not ready")

    def retry_until_ok(self, scenario: str, commands: list[str], state: str) -> None:
        """Run each command until it succeeds; fail naming the command after the scenario's ready_timeout_s."""
        timeout_s = KubernetesScenario.of(self.env, scenario).ready_timeout_s
        deadline = time.monotonic() + timeout_s
        for command in commands:
            pause = FIRST_RETRY_S
            while True:
                proc = self.shell(command, timeout_s, scenario)
                if proc.returncode == 0:
                    break
                if time.monotonic() > deadline:
                    raise TargetError(
                        f"kubernetes: scenario {scenario} {state} after {timeout_s:g} s: "
                        f"`{command}` exited {proc.returncode}: {proc.stderr.strip()[-ERROR_TAIL:]}"
                    )
                time.sleep(pause)
                pause = min(pause * 2, MAX_RETRY_S)

    def record(self, scenario: str) -> dict[str, str]:
        out = {}
        for key, command in self.env.scenarios[scenario].record.items():
            proc = self.shell(command, RECORD_TIMEOUT_S, scenario)
            out[key] = proc.stdout.strip() if proc.returncode == 0 else f"(failed: {proc.stderr.strip()[-200:]})"
        return out


def node_facts(cluster: Cluster, client_node: str, server_node: str) -> dict:
    """What the API says of both pods' nodes, recorded with every run. Nodes with one boot ID
    share one kernel, and so its CPUs: per-side CPU is then per CPU set, not per machine."""
    facts = {}
    for name in dict.fromkeys((client_node, server_node)):
        node = cluster.core.read_node(name)
        info = node.status.node_info
        labels = node.metadata.labels or {}
        facts[name] = {
            "instance_type": labels.get("node.kubernetes.io/instance-type"),
            "pod_cidrs": node.spec.pod_cidrs or [node.spec.pod_cidr],
            "kernel": info.kernel_version,
            "kubelet": info.kubelet_version,
            "container_runtime": info.container_runtime_version,
            "os_image": info.os_image,
            "boot_id": info.boot_id,
            "addresses": {a.type: a.address for a in node.status.addresses or []},
        }
    shared = facts[client_node]["boot_id"] == facts[server_node]["boot_id"]
    return {"nodes": facts, "nodes_share_kernel": shared}
