"""A Kubernetes cluster, through the official ``kubernetes`` Python client.

One namespace per target session (one `benchlib collect` on one
environment), labelled ``benchlib.io/session=<id>`` and
``benchlib.io/owner=<host>.<pid>``; everything the target creates lives in it,
so deleting it removes everything (a killed session's namespace is found by
its owner label and removed by the next start on the same host).

Per scenario (``activate``): the scenario's commands and helm release switch
the cluster (scenarios.py) and its ready checks are retried until they pass;
then a server pod and a client pod are created (and, for ``placement:
service``, the Services of services.py) and reused by all runs of that
scenario; then its ``programmed`` checks are retried, for what the API does
not show (a kube-proxy sync, a Cilium service map). Each run records the
nodes' facts from the API and the scenario's ``record`` outputs. Commands
reach pods through the exec API (api.py); CPU is read per node by a hostPID
DaemonSet (sampling.py). The manifests are pure builders (manifests.py).
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from ... import cpu
from ...collectors import Server
from ...config import Environment
from .. import Placement, Target, TargetError, service_ports, shown, wait_listening
from . import services
from .api import PID_MARKER, Cluster, ExecProcess, k8s, placed, reason
from .manifests import (
    LABEL_OWNER,
    LABEL_SESSION,
    namespace_labels_patch,
    namespace_manifest,
    namespace_name,
    pod_manifest,
    pod_name,
    render,
)
from .sampling import NodeCpu, agent_usage
from .scenarios import Switch, node_facts

__all__ = ["KubernetesTarget", "render", "LABEL_OWNER", "LABEL_SESSION", "PID_MARKER"]

WORKLOAD_ROLE = "benchlib-workload"  # ClusterRole of pipelines/kubernetes/rbac.yaml
NAMESPACE_DELETE_TIMEOUT_S = 120
RBAC_SETTLE_S = 10  # RBAC caches refresh quickly but not instantly
SERVER_LISTEN_TIMEOUT_S, SERVER_POLL_S = 15, 0.2


class KubernetesTarget(Target):
    kind = "kubernetes"
    profiles = True  # where the nodes run on this machine's kernel (a local cluster): profile_unavailable
    # switching a CNI costs minutes: scenarios run one after another
    interleaves_scenarios = False

    def __init__(
        self,
        env: Environment,
        scenarios: list[str],
        servers: Sequence[Server] = (),
        commands: Sequence[str] = (),
        log=print,
    ):
        if env.kubernetes is None:
            raise TargetError(f"environment {env.name}: target kubernetes needs a kubernetes: section")
        super().__init__(env, scenarios, servers, commands, log)
        self.settings = env.kubernetes
        self.session = f"{env.name[:20]}-{uuid.uuid4().hex[:8]}".lower()
        self.owner = f"{socket.gethostname()}.{os.getpid()}"
        self.namespace = namespace_name(env, self.session)
        self._cluster: Cluster | None = None
        self._node_cpu: NodeCpu | None = None
        self.switch = Switch(env, log)
        self._active: str | None = None  # the scenario whose pods and Services exist
        self._namespace_labels: dict[str, str] = {}  # the active scenario's namespace_labels
        self._servers: list[ExecProcess] = []

    @property
    def cluster(self) -> Cluster:
        if self._cluster is None:
            raise TargetError("kubernetes: the cluster is used before prepare()")
        return self._cluster

    @property
    def node_cpu(self) -> NodeCpu:
        if self._node_cpu is None:
            raise TargetError("kubernetes: the CPU sampling pods are used before prepare()")
        return self._node_cpu

    # -- life cycle ----------------------------------------------------------------
    def prepare(self) -> None:
        self._cluster = Cluster(self.settings.kubeconfig, self.settings.context, self.namespace)
        self._node_cpu = NodeCpu(self._cluster)
        self.clean_leftovers()

    def setup(self) -> None:
        self._create_namespace()
        self.node_cpu.start(self.env, self.session, self.settings.pod_ready_timeout_s)

    def teardown(self) -> None:
        self._stop_servers()
        if self._cluster is None:
            return
        if self._active is not None and self.env.scenarios[self._active].placement == "service":
            try:  # in parallel: faster than the namespace controller for many Services
                services.delete(self.cluster, self._active, self.log)
            except Exception as exc:
                self.log(
                    f"kubernetes: deleting the Services failed ({reason(exc)}); the namespace deletion removes them"
                )
        self._delete_namespace(self.namespace)

    def clean_leftovers(self) -> list[str]:
        """Delete the namespaces of sessions started on this host whose process is gone."""
        host = socket.gethostname()
        removed = []
        for ns in self.cluster.core.list_namespace(label_selector=LABEL_OWNER).items:
            owner_host, _, pid = ns.metadata.labels.get(LABEL_OWNER, "").rpartition(".")
            if owner_host == host and pid.isdigit() and not _alive(int(pid)) and ns.metadata.name:
                self.log(f"kubernetes: removing namespace {ns.metadata.name} left by a killed campaign")
                self._delete_namespace(ns.metadata.name)
                removed.append(ns.metadata.name)
        return removed

    def _create_namespace(self) -> None:
        k, core = k8s(), self.cluster.core
        try:
            core.create_namespace(namespace_manifest(self.env, self.session, self.owner))  # pyright: ignore[reportArgumentType] (the client sends a manifest dict as it is; the annotation names only its model)
        except k.client.ApiException as exc:
            raise TargetError(f"kubernetes: cannot create namespace {self.namespace}: {reason(exc)}") from None
        # the runner's own permissions inside its namespace (pipelines/kubernetes/rbac.yaml)
        user = (
            k.client.AuthenticationV1Api(self.cluster.client)
            .create_self_subject_review({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
            .status.user_info.username
        )
        try:
            self.cluster.rbac.create_namespaced_role_binding(
                self.namespace,
                {  # pyright: ignore[reportArgumentType] (the client sends a manifest dict as it is; the annotation names only its model)
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "RoleBinding",
                    "metadata": {"name": "benchlib-runner"},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": WORKLOAD_ROLE},
                    "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
                },
            )
        except k.client.ApiException as exc:
            raise TargetError(
                f"kubernetes: cannot bind ClusterRole {WORKLOAD_ROLE} in {self.namespace} "
                f"(apply pipelines/kubernetes/rbac.yaml): {reason(exc)}"
            ) from None
        deadline = time.monotonic() + RBAC_SETTLE_S
        while time.monotonic() < deadline:
            try:
                core.list_namespaced_pod(self.namespace)
                return
            except k.client.ApiException:
                time.sleep(0.2)

    def _delete_namespace(self, name: str, timeout: float = NAMESPACE_DELETE_TIMEOUT_S) -> None:
        k, core = k8s(), self.cluster.core
        try:
            core.delete_namespace(name)
        except k.client.ApiException as exc:
            if exc.status == 404:
                return
            raise TargetError(f"kubernetes: cannot delete namespace {name}: {reason(exc)}") from None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                core.read_namespace(name)
            except k.client.ApiException as exc:
                if exc.status == 404:
                    return
                raise
            time.sleep(0.5)
        raise TargetError(f"kubernetes: namespace {name} still exists {timeout:g} s after deletion")

    # -- scenarios -----------------------------------------------------------------
    def activate(self, scenario: str) -> None:
        sc = self.env.scenarios[scenario]
        self._remove_scenario_objects()
        self.switch.apply(scenario)
        self._label_namespace(sc.namespace_labels)
        timeout = self.settings.pod_ready_timeout_s
        server = self.cluster.start_pod(pod_manifest(self.env, scenario, "server", self.session, self.servers), timeout)
        server_pod, server_node, server_ip = placed(server)
        client = self.cluster.start_pod(
            pod_manifest(
                self.env,
                scenario,
                "client",
                self.session,
                self.servers,
                server_node if sc.placement == "same-node" else None,
            ),
            timeout,
        )
        client_pod, client_node, client_ip = placed(client)
        self._active = scenario  # from here on, _remove_scenario_objects cleans up after a failure
        service_ip, extra = None, {}
        if sc.placement == "service":
            service_ip, extra = services.create(
                self.cluster,
                scenario,
                self.session,
                service_ports(self.servers),
                sc.services or 1,
                server_ip,
                timeout,
                self.log,
            )
        if sc.programmed:
            start = time.monotonic()
            self.switch.retry_until_ok(scenario, sc.programmed, "not programmed")
            extra["programmed_s"] = round(time.monotonic() - start, 3)
        for node in (client_node, server_node):
            self.node_cpu.require(node)
        client_cpus, server_cpus = self._side_cpus(client_node, server_node)
        details = {
            "placement": sc.placement,
            "namespace": self.namespace,
            "session": self.session,
            "client_pod": client_pod,
            "server_pod": server_pod,
            "client_pod_ip": client_ip,
            "server_pod_ip": server_ip,
            "host_network": sc.placement == "host-network",
            "service_ip": service_ip,
            **extra,
            "scenario_settings": dict(sc.settings),
            "scenario_record": self.switch.record(scenario),
            "cni_agent_usage": agent_usage(self.cluster, self.settings.cni_agent),
            **node_facts(self.cluster, client_node, server_node),
        }
        self.placements[scenario] = Placement(
            scenario=scenario,
            server_address=service_ip or server_ip,
            client_node=client_node,
            server_node=server_node,
            client_cpus=client_cpus,
            server_cpus=server_cpus,
            details=details,
        )

    def profile_unavailable(self, scenario: str) -> str | None:
        """perf here sees a node's work only where the node runs on this machine's kernel (same boot ID)."""
        here = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        nodes = self.placements[scenario].details["nodes"]
        elsewhere = sorted(name for name, facts in nodes.items() if facts.get("boot_id") != here)
        return f"node(s) {', '.join(elsewhere)} run on another machine's kernel" if elsewhere else None

    def _label_namespace(self, labels: dict[str, str]) -> None:
        """Give the namespace this scenario's labels (and drop the previous one's) before its pods exist."""
        if not labels and not self._namespace_labels:
            return
        try:
            self.cluster.core.patch_namespace(self.namespace, namespace_labels_patch(self._namespace_labels, labels))
        except k8s().client.ApiException as exc:
            raise TargetError(
                f"kubernetes: cannot label namespace {self.namespace} with {labels}: {reason(exc)}"
            ) from None
        self._namespace_labels = dict(labels)

    def _remove_scenario_objects(self) -> None:
        self._stop_servers()
        if self._active is None:
            return
        for role in ("client", "server"):
            self.cluster.delete_pod(pod_name(self._active, role))
        if self.env.scenarios[self._active].placement == "service":
            services.delete(self.cluster, self._active, self.log)
        self._active = None

    def _side_cpus(self, client_node: str, server_node: str) -> tuple[list[int], list[int]]:
        if self.env.cpus:
            return self.env.cpus.client, self.env.cpus.server
        # default: every CPU of each side's node
        return (
            sorted(self.node_cpu.snapshot(client_node).counters),
            sorted(self.node_cpu.snapshot(server_node).counters),
        )

    def start_server(self, scenario: str, server: Server, cpus: list[int]) -> None:
        pod = self.placements[scenario].details["server_pod"]
        proc = self.cluster.spawn(pod, ["taskset", "-c", ",".join(map(str, cpus)), *server.argv])
        self._servers.append(proc)

        def ss(argv: list[str]) -> str:
            r = self.cluster.run(pod, argv)
            return shown(r.stdout) if r.returncode == 0 else ""

        wait_listening(
            server,
            proc,
            ss,
            "kubernetes",
            f"in pod {pod}",
            lambda: shown(b"".join(proc.communicate())),
            timeout_s=SERVER_LISTEN_TIMEOUT_S,
            poll_s=SERVER_POLL_S,
        )

    def _stop_servers(self) -> None:
        for proc in self._servers:
            proc.kill()
        self._servers.clear()

    # -- what the runner uses --------------------------------------------------------
    def spawn(self, scenario: str, side: str, argv: list[str]) -> ExecProcess:
        return self.cluster.spawn(self.placements[scenario].details[f"{side}_pod"], argv)

    def cpu_snapshot(self, scenario: str, side: str) -> cpu.Snapshot:
        pl = self.placements[scenario]
        return self.node_cpu.snapshot(pl.client_node if side == "client" else pl.server_node)

    def describe(self) -> dict:
        pod = self.node_cpu.any_pod()
        versions = {
            "kernel": self.cluster.check(pod, ["uname", "-r"]).strip(),
            "kubernetes": self.cluster.server_version,
        }
        return {
            "target": "kubernetes",
            "context": self.settings.context,
            "namespace": self.namespace,
            "session": self.session,
            "image": self.settings.image,
            "versions": versions,
            "clk_tck": int(self.cluster.check(pod, ["getconf", "CLK_TCK"]).strip()),
        }


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
