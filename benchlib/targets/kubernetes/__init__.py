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
scenario; a scenario with a ``mesh`` injects Envoy sidecars into them
(sidecars.py: a ConfigMap of bootstraps and capture rules, a Secret of each
sidecar's certificates, from a CA made per target session); then its ``programmed`` checks are retried, for what the API does
not show (a kube-proxy sync, a Cilium service map). Each run records the
nodes' facts from the API and the scenario's ``record`` outputs. Commands
reach pods through the exec API (api.py); CPU is read per node by a hostPID
DaemonSet (sampling.py). The manifests are pure builders (manifests.py). Each run reads every
sidecar's Envoy (CPU, peak RSS, bytes carried) at both edges of its CPU
window, as the lab reads its proxies; a sidecar that died fails that run.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import tempfile
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from ...base.errors import DatapathError
from ...collectors import Server
from ...host import cpu, disturbance
from ...settings.environment import Environment
from .. import Placement, Target, TargetError, service_ports, shown, wait_listening
from ..mesh import certificates, envoy, shapes
from . import quiet, services, sidecars
from .api import PID_MARKER, Cluster, ExecProcess, Refused, absent, attempt, k8s, placed, reason, refusal
from .manifests import (
    LABEL_OWNER,
    LABEL_SESSION,
    fillers_for,
    mesh_configmap,
    mesh_plan,
    mesh_secret,
    namespace_labels_patch,
    namespace_manifest,
    namespace_name,
    node_proxy_pods,
    object_name,
    pod_manifest,
    pod_name,
    render,
    scenario_commands,
)
from .sampling import NodeCpu, agent_usage
from .scenarios import Switch, node_facts

_log = logging.getLogger(__name__)  # the default for log=: where benchlib.base.logs sends messages

__all__ = ["KubernetesTarget", "render", "LABEL_OWNER", "LABEL_SESSION", "PID_MARKER"]

WORKLOAD_ROLE = "benchlib-workload"  # ClusterRole of pipelines/kubernetes/rbac.yaml
NAMESPACE_DELETE_TIMEOUT_S = 120
RBAC_SETTLE_S = 10  # RBAC caches refresh quickly but not instantly
# each poll is an exec through the API server: right after 4000 Services were deleted beside Calico's eBPF
# dataplane, netserver was not seen listening within 15 s
SERVER_LISTEN_TIMEOUT_S, SERVER_POLL_S = 60, 0.2
SIDECAR_POLL_S = 0.5
TLS_PREFIX = "benchlib-mesh-"  # + the owner's pid: a killed session's keys are found and removed
CAPTURE_PROBE_TIMEOUT_S = 10  # one connection through the node proxies, or its refusal
# a bound on the Service proxies' freeze while fillers are written (5000 take minutes); past it the
# watchdog thaws them and the writes go on beside them
FILLERS_FREEZE_MAX_S = 1200
QUIET_START_WAIT_S = 2  # for the clients' PID markers before a quiet window (they come well before it)


@dataclass
class Sidecars:
    """The active scenario's sidecars: the proxies, their Envoy's version, and each Envoy's start time
    (ticks since boot) when last seen alive: another start time is a sidecar Kubernetes restarted."""

    plan: list[shapes.Proxy]
    version: str
    started: dict[str, int] = field(default_factory=dict)


class KubernetesTarget(Target):
    kind = "kubernetes"
    can_profile = True  # where the nodes run on this machine's kernel (a local cluster): profile_unavailable
    # switching a CNI costs minutes: scenarios run in rounds, each pod network visited once per round
    interleaves_scenarios = False
    render = staticmethod(render)  # the namespace, pods and Services, as `benchlib render` prints them

    def __init__(
        self,
        env: Environment,
        scenarios: list[str],
        servers: Sequence[Server] = (),
        commands: Sequence[str] = (),
        log=_log.info,
    ):
        if env.kubernetes is None:
            raise TargetError(f"environment {env.name}: target kubernetes needs a kubernetes: section")
        super().__init__(env, scenarios, servers, commands, log)
        self.settings = env.kubernetes
        # part of the namespace's name, a DNS label: an environment's '.' and '_' become '-'
        self.session = f"{object_name(env.name[:20])}-{uuid.uuid4().hex[:8]}"
        self.owner = f"{socket.gethostname()}.{os.getpid()}"
        self.namespace = namespace_name(env, self.session)
        self._cluster: Cluster | None = None
        self._node_cpu: NodeCpu | None = None
        self.switch = Switch(env, log)
        self._active: str | None = None  # the scenario whose pods and Services exist
        self._namespace_labels: dict[str, str] = {}  # the active scenario's namespace_labels
        self._servers: list[ExecProcess] = []
        self._sidecars: dict[str, Sidecars] = {}  # the active scenario's, if it has a mesh
        self._tls_dir: Path | None = None  # the session's CA and sidecar certificates (mTLS meshes)
        self._quiet: quiet.Quiet | None = None  # the nodes' host daemons, frozen over CPU windows
        self._owns_quiet = True  # False: the windows of a campaign over several clusters (clusters.py)
        # the name of this cluster among a campaign's (kubernetes.clusters), "" for the environment's own
        self.cluster_name = ""
        # whether scenarios of one pod network keep their pods while another is activated (side by side)
        self.keeps_scenarios = False
        # frozen while filler Services are written (a benchmark empties it to compare)
        self.service_proxies = list(self.settings.quiet.service_proxies) if self.settings.quiet else []

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
        q = self.settings.quiet
        if q is not None and self._owns_quiet:
            keep = {pattern: "kept running (kubernetes.quiet.keep)" for pattern in q.keep}
            self._quiet = quiet.Quiet(Path(q.pid_dir), keep, q.max_window_s, self.log)
            self._quiet.start()

    def teardown(self) -> None:
        if self._quiet is not None and self._owns_quiet:
            self._quiet.close()
        self._quiet = None
        self._stop_servers()
        if self._tls_dir is not None:
            shutil.rmtree(self._tls_dir, ignore_errors=True)
            self._tls_dir = None
        if self._cluster is None:
            return
        if self._active is not None and self.env.scenarios[self._active].mesh in shapes.NODE_MESHES:
            try:  # their rules live in the nodes, not in the namespace
                self._stop_node_proxies(self._active)
            except Exception as exc:  # the namespace goes all the same; its deletion stops their pods
                self.log(f"kubernetes: stopping the node proxies failed ({reason(exc)})")
        try:  # in parallel: faster than the namespace controller for many Services
            services.set_fillers(self.cluster, self.session, 0, self.log)
        except Exception as exc:
            self.log(
                f"kubernetes: deleting the filler Services failed ({reason(exc)}); the namespace deletion removes them"
            )
        self._delete_namespace(self.namespace)

    def clean_leftovers(self) -> list[str]:
        """Delete the namespaces, and the certificate directories, of sessions started on this host
        whose process is gone."""
        host = socket.gethostname()
        removed = remove_stale_certificates(self.log)
        for ns in self.cluster.core.list_namespace(label_selector=LABEL_OWNER).items:
            owner_host, _, pid = ns.metadata.labels.get(LABEL_OWNER, "").rpartition(".")
            if owner_host == host and pid.isdigit() and not _alive(int(pid)) and ns.metadata.name:
                self.log(f"kubernetes: removing namespace {ns.metadata.name} left by a killed campaign")
                self._delete_namespace(ns.metadata.name)
                removed.append(ns.metadata.name)
        return removed

    def _create_namespace(self) -> None:
        k, core = k8s(), self.cluster.core
        with refusal(f"cannot create namespace {self.namespace}"):
            core.create_namespace(namespace_manifest(self.env, self.session, self.owner))  # pyright: ignore[reportArgumentType] (the client sends a manifest dict as it is; the annotation names only its model)
        # the runner's own permissions inside its namespace (pipelines/kubernetes/rbac.yaml)
        user = (
            k.client.AuthenticationV1Api(self.cluster.client)
            .create_self_subject_review({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
            .status.user_info.username
        )
        with refusal(
            f"cannot bind ClusterRole {WORKLOAD_ROLE} in {self.namespace} (apply pipelines/kubernetes/rbac.yaml)"
        ):
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
        deadline = time.monotonic() + RBAC_SETTLE_S
        while time.monotonic() < deadline:
            if not isinstance(attempt(lambda: core.list_namespaced_pod(self.namespace)), Refused):
                return
            time.sleep(0.2)

    def _delete_namespace(self, name: str, timeout: float = NAMESPACE_DELETE_TIMEOUT_S) -> None:
        core = self.cluster.core
        if absent(lambda: core.delete_namespace(name), f"cannot delete namespace {name}"):
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if absent(lambda: core.read_namespace(name), f"cannot read namespace {name}"):
                return
            time.sleep(0.5)
        raise TargetError(f"kubernetes: namespace {name} still exists {timeout:g} s after deletion")

    # -- scenarios -----------------------------------------------------------------
    def switch_of(self, scenario: str) -> str:
        # the pod network is what a scenario's commands switch; the same commands are the same network
        return "\n".join(scenario_commands(self.env, scenario))

    def kept_objects(self, scenario: str) -> int:
        sc = self.env.scenarios[scenario]
        return fillers_for(sc.placement, sc.services)

    def activate(self, scenario: str) -> None:
        sc = self.env.scenarios[scenario]
        # side by side on the pod network in place: the other scenarios' pods and servers stay
        in_place = self._active is not None and self.switch_of(self._active) == self.switch_of(scenario)
        if not (self.keeps_scenarios and in_place):
            self._remove_scenario_objects()
            self.switch.apply(scenario)
        self._label_namespace(sc.namespace_labels)
        if sc.mesh and sc.mesh not in shapes.NODE_MESHES:  # node proxies wait for their nodes
            self._create_mesh_objects(scenario)
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
        service_ip = None
        extra = self._set_fillers(self.kept_objects(scenario))
        if sc.placement == "service":
            start = time.monotonic()
            service_ip = services.create(
                self.cluster, scenario, self.session, service_ports(self.servers), server_ip, timeout, self.log
            )
            extra.update(services=sc.services or 1, service_ready_s=round(time.monotonic() - start, 3))
        if sc.mesh in shapes.NODE_MESHES:
            self._start_node_proxies(scenario, {1: client_node, 2: server_node})
        if sc.mesh:
            extra["mesh"] = self._meet_sidecars(scenario)
        if sc.mesh in shapes.NODE_MESHES:
            self._check_node_capture(scenario, client_pod, server_ip)
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

    def placement_for(self, scenario: str, kind: str) -> Placement:
        """split: the scenario's placement. shared (environment cpu_placement): both pods' processes on
        the client's CPUs, as in the lab; a veth delivers on the sending CPU, so the whole path's work
        lands there. Only where both nodes run on one kernel: on two machines one CPU set is no place."""
        base = self.placement(scenario)
        if self.cpu_placement(scenario, kind) == "split":
            return base
        if not base.details.get("nodes_share_kernel"):
            raise TargetError(
                f"scenario {scenario}: cpu_placement {kind}: shared needs client node {base.client_node} and "
                f"server node {base.server_node} on one kernel (nodes of one machine, as on the local cluster); "
                "these are machines of their own: set it split, or remove it"
            )
        return base.shared()

    def _set_fillers(self, count: int) -> dict:
        """The fillers brought to ``count``, the Service proxies (kubernetes.quiet.service_proxies)
        frozen while thousands are written: thawed, each programs the change once."""
        changes = services.filler_changes(self.cluster, count)
        if self._quiet is None or not self.service_proxies or not any(changes):
            return services.write_fillers(self.cluster, self.session, changes, self.log)
        window = self._quiet.freeze_only(self.service_proxies, FILLERS_FREEZE_MAX_S)
        try:
            extra = services.write_fillers(self.cluster, self.session, changes, self.log)
        finally:
            frozen = window.end()
        return {**extra, "fillers_quiet": frozen}

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
        with refusal(f"cannot label namespace {self.namespace} with {labels}"):
            self.cluster.core.patch_namespace(self.namespace, namespace_labels_patch(self._namespace_labels, labels))
        self._namespace_labels = dict(labels)

    def _remove_scenario_objects(self) -> None:
        self._stop_servers()
        if self._active is None:
            return
        if self.env.scenarios[self._active].mesh in shapes.NODE_MESHES:
            self._stop_node_proxies(self._active)
        for role in ("client", "server"):
            self.cluster.delete_pod(pod_name(self._active, role))
        if self.env.scenarios[self._active].placement == "service":
            services.delete(self.cluster, self._active)
        if self.env.scenarios[self._active].mesh:
            self._delete_mesh_objects(self._active)
        self._active = None

    # -- sidecars ------------------------------------------------------------------
    def _create_mesh_objects(self, scenario: str, pod_subnets: dict[int, str] | None = None) -> None:
        """The scenario's ConfigMap (bootstraps, capture rules) and, for mTLS, each proxy's Secret,
        before the proxies' pods. An earlier failed activation's objects are replaced."""
        sc = self.env.scenarios[scenario]
        self._delete_mesh_objects(scenario)
        core = self.cluster.core
        with refusal(f"scenario {scenario}: cannot create its mesh objects"):
            config = mesh_configmap(self.env, scenario, self.session, self.servers, pod_subnets)
            core.create_namespaced_config_map(self.namespace, config)  # pyright: ignore[reportArgumentType] (a manifest dict, sent as it is)
            if sc.mesh in shapes.MTLS_MESHES:
                for proxy in mesh_plan(self.env, scenario, self.servers):
                    secret = mesh_secret(scenario, self.session, proxy, self._certificate_files(proxy))
                    core.create_namespaced_secret(self.namespace, secret)  # pyright: ignore[reportArgumentType] (a manifest dict, sent as it is)

    def _certificate_files(self, proxy: shapes.Proxy) -> dict[str, str]:
        """The CA certificate and ``proxy``'s certificate and key, from the session's CA (made at the
        first mTLS scenario, in a private directory removed at teardown, or by the next session's
        `clean_leftovers` after a kill)."""
        if self._tls_dir is None:
            self._tls_dir = Path(tempfile.mkdtemp(prefix=f"{TLS_PREFIX}{os.getpid()}-"))
            certificates.make_certificates(self._tls_dir, ["client-sidecar", "server-sidecar", "node1", "node2"])
        names = ("ca.crt", f"{proxy.identity}.crt", f"{proxy.identity}.key")
        return {name: (self._tls_dir / name).read_text() for name in names}

    def _delete_mesh_objects(self, scenario: str) -> None:
        self._sidecars.pop(scenario, None)
        core = self.cluster.core
        name = object_name(scenario)
        deletions = [(core.delete_namespaced_config_map, sidecars.configmap_name(name))]
        deletions += [
            (core.delete_namespaced_secret, sidecars.secret_name(name, p))
            for p in mesh_plan(self.env, scenario, self.servers)
        ]
        for delete, obj in deletions:
            absent(partial(delete, obj, self.namespace), f"scenario {scenario}: cannot delete {obj}")

    def _start_node_proxies(self, scenario: str, nodes: dict[int, str]) -> None:
        """A node proxy pod on the client's (1) and the server's (2) node, once the benchmark pods are
        placed: their rules capture traffic between those nodes' pod subnets."""
        subnets = {}
        for i, node in nodes.items():
            spec = self.cluster.core.read_node(node).spec
            subnets[i] = (spec.pod_cidrs or [spec.pod_cidr])[0]
        self._create_mesh_objects(scenario, subnets)
        timeout = self.settings.pod_ready_timeout_s
        for pod in node_proxy_pods(self.env, scenario, self.session, self.servers, nodes):
            self.cluster.start_pod(pod, timeout)

    def _check_node_capture(self, scenario: str, client_pod: str, server_ip: str) -> None:
        """One connection from the client pod to the server pod must reach the client node's proxy.
        A pod network that takes pod traffic past the node's netfilter leaves the capture rules idle,
        and every run would fail as carrying nothing: stop before the runs, saying why."""
        before = self.sidecar_counters(scenario, "node1").get(sidecars.NODE_CAPTURED, 0)
        url = f"http://{server_ip}:{self.servers[0].port}/"  # the rules capture every TCP port
        self.cluster.run(client_pod, ["fortio", "curl", "-timeout", "3s", url], timeout=CAPTURE_PROBE_TIMEOUT_S)
        if self.sidecar_counters(scenario, "node1").get(sidecars.NODE_CAPTURED, 0) > before:
            return
        raise TargetError(
            f"kubernetes: scenario {scenario}: the node proxies captured nothing: a connection from the client "
            f"pod to {server_ip} never reached node 1's proxy, so its rules in the node's nat table (chain "
            f"{sidecars.NODE_CHAIN}) never saw it. mesh: node-proxies-mtls needs a pod network whose pod "
            "traffic crosses the node's iptables, as the bridge CNI's does; Cilium's eBPF host routing and its "
            "VXLAN tunnel take it past them (Istio ambient redirects inside each pod's namespace instead)"
        )

    def _stop_node_proxies(self, scenario: str) -> None:
        """Remove the node proxies' capture rules from their nodes, then their pods (whose capture
        container removes them as well when told to stop, should this exec not reach it)."""
        for proxy in mesh_plan(self.env, scenario, self.servers):
            try:
                self.cluster.run(proxy.namespace, ["sh", "-c", sidecars.NODE_CLEANUP], container=sidecars.CAPTURE)
            except Exception as exc:  # a pod that never started, or is gone
                self.log(f"kubernetes: node proxy {proxy.name}: removing its rules by exec failed ({reason(exc)})")
            self.cluster.delete_pod(proxy.namespace, grace_period_s=sidecars.NODE_GRACE_S)
        for proxy in mesh_plan(self.env, scenario, self.servers):  # gone before other rules come
            self.cluster.wait_deleted(proxy.namespace, sidecars.NODE_GRACE_S + NAMESPACE_DELETE_TIMEOUT_S)

    def _meet_sidecars(self, scenario: str) -> dict:
        """Once the pods are ready: each sidecar's Envoy version and start time; the mesh's record."""
        sc = self.env.scenarios[scenario]
        plan = mesh_plan(self.env, scenario, self.servers)
        first = plan[0].namespace  # a proxy's "namespace" is its pod
        out = self.cluster.run(first, ["envoy", "--version"], container=sidecars.SIDECAR)
        version = envoy.parse_version(shown(out.stdout))
        if out.returncode != 0 or version is None:
            raise TargetError(
                f"kubernetes: scenario {scenario}: `envoy --version` in pod {first} exited {out.returncode}: "
                f"{shown(out.stdout + out.stderr).strip()[-300:]}"
            )
        state = self._sidecars[scenario] = Sidecars(plan, version)
        for proxy in plan:
            state.started[proxy.name] = self._read_sidecar(scenario, proxy, reset_peak=False)["started"]
        return {
            **shapes.describe(sc.mesh or "", "envoy", version, sidecars.http_ports(self.servers), plan),
            "sidecar": {
                "container": sidecars.SIDECAR,
                "admin": f"127.0.0.1:{sidecars.ADMIN_PORT}",
                "image": self.settings.image,
            },
        }

    def _read_sidecar(self, scenario: str, proxy: shapes.Proxy, reset_peak: bool) -> dict:
        """One reading of a sidecar's Envoy (`sidecars.parse_usage`); DatapathError, with Envoy's log
        tail, when it cannot be read."""
        pod = proxy.namespace
        try:
            r = self.cluster.run(pod, ["sh", "-c", sidecars.usage_script(reset_peak)], container=sidecars.SIDECAR)
            if r.returncode != 0:
                raise ValueError(f"exited {r.returncode}: {shown(r.stderr).strip()[-300:]}")
            return sidecars.parse_usage(shown(r.stdout))
        except (ValueError, TargetError) as exc:
            problem = str(exc)
        except Exception as exc:  # the exec API refuses a container that is not running
            problem = reason(exc)
        raise DatapathError(
            f"kubernetes: scenario {scenario}: sidecar {proxy.name} in pod {pod} cannot be read ({problem}); "
            f"Envoy's log ends:\n{self.cluster.log_tail(pod, sidecars.SIDECAR)}"
        )

    def sidecar_counters(self, scenario: str, proxy: str) -> dict[str, int]:
        """Every counter and gauge of a sidecar's Envoy (its admin /stats), by name."""
        pod = next(p.namespace for p in self._sidecars[scenario].plan if p.name == proxy)
        url = f"http://127.0.0.1:{sidecars.ADMIN_PORT}/stats"
        return envoy.parse_stats(self.cluster.check(pod, ["wget", "-q", "-O", "-", url], container=sidecars.SIDECAR))

    def datapath_usage(self, scenario: str, reset_peak: bool) -> dict[str, dict]:
        """Each sidecar's Envoy: its CPU ticks, peak RSS and bytes carried so far. Raises DatapathError,
        with Envoy's log tail, when one cannot be read or Kubernetes restarted it since last seen."""
        state = self._sidecars.get(scenario)
        if state is None:
            return {}
        pl = self.placements[scenario]
        cpus = {"client": pl.client_cpus, "server": pl.server_cpus}
        # both sidecars at once: an exec takes a tenth of a second or more, and the readings bound the
        # run's CPU window
        with ThreadPoolExecutor(len(state.plan)) as pool:
            readings = [pool.submit(self._read_sidecar, scenario, p, reset_peak) for p in state.plan]
        out = {}
        for proxy, reading in zip(state.plan, readings, strict=True):
            found = reading.result()
            if found.pop("started") != state.started[proxy.name]:
                raise DatapathError(
                    f"kubernetes: scenario {scenario}: sidecar {proxy.name} in pod {proxy.namespace} was "
                    f"restarted by Kubernetes (its Envoy exited); the log of the one that exited ends:\n"
                    f"{self.cluster.log_tail(proxy.namespace, sidecars.SIDECAR)}"
                )
            out[proxy.name] = {"side": proxy.side, "cpus": cpus[proxy.side], "version": state.version, **found}
        return out

    def recover(self, scenario: str) -> list[str]:
        """Wait until Kubernetes has restarted every sidecar of the scenario that died and its Envoy
        is ready again (its capture rules stay in the pod), so the next runs find their path whole.
        Returns the names of those restarted."""
        state = self._sidecars.get(scenario)
        if state is None:
            return []
        restarted = []
        timeout = self.settings.pod_ready_timeout_s
        for proxy in state.plan:
            deadline = time.monotonic() + timeout
            while True:
                if self._sidecar_started(proxy.namespace):
                    try:
                        started = self._read_sidecar(scenario, proxy, reset_peak=False)["started"]
                        break
                    except DatapathError:
                        pass  # the one that died, not yet seen dead by the kubelet
                if time.monotonic() > deadline:
                    raise TargetError(
                        f"kubernetes: scenario {scenario}: sidecar {proxy.name} not started again within "
                        f"{timeout:g} s; Envoy's log ends:\n{self.cluster.log_tail(proxy.namespace, sidecars.SIDECAR)}"
                    )
                time.sleep(SIDECAR_POLL_S)
            if started != state.started[proxy.name]:
                state.started[proxy.name] = started
                restarted.append(proxy.name)
        return restarted

    def _sidecar_started(self, pod: str) -> bool:
        """Whether the pod's sidecar runs and has passed its startup probe (Envoy is ready)."""
        status = self.cluster.core.read_namespaced_pod(pod, self.namespace).status
        found = [c for c in status.init_container_statuses or [] if c.name == sidecars.SIDECAR]
        return bool(found and found[0].started and found[0].state and found[0].state.running)

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

    def quiet_window(self, scenario: str, seconds: float, procs: Sequence) -> quiet.Window | quiet.Unquiet | None:
        """Freeze the nodes' host daemons (kubernetes.quiet) for a CPU window, all but those the
        scenario keeps running; once every client has printed its PID marker, so none of them is
        still being started through the daemons about to freeze."""
        if self._quiet is None:
            return None
        needs = {
            p: "the scenario's datapath needs it (keep_running)" for p in self.env.scenarios[scenario].keep_running
        }
        deadline = time.monotonic() + QUIET_START_WAIT_S
        while not all(getattr(p, "started", lambda: True)() for p in procs):
            if time.monotonic() > deadline:
                return quiet.Unquiet(seconds, f"a client had not started {QUIET_START_WAIT_S:g} s into the window")
            time.sleep(0.01)
        return self._quiet.window(seconds, needs, self.cluster_name)

    def foreign_snapshot(self, scenario: str) -> disturbance.Snapshot | None:
        """On a cluster whose nodes are this machine (kubernetes.quiet names the host daemons' pid files:
        the local cluster), every process but the cluster's and the harness's: the cluster's are those
        in any network namespace but the machine's own (the nodes' and the pods') and the host daemons
        with what they started. Elsewhere the nodes' processes are out of sight: None."""
        if self._quiet is None:
            return None
        host = os.stat("/proc/self/ns/net").st_ino  # the harness runs in the machine's own namespace
        daemons = self._quiet.daemons().values()
        return disturbance.scan(set(), os.getpid(), outside=host, own_roots=daemons)

    def cpu_snapshot(self, scenario: str, side: str) -> cpu.Snapshot:
        pl = self.placements[scenario]
        return self.node_cpu.snapshot(pl.client_node if side == "client" else pl.server_node)

    def describe(self) -> dict:
        pod = self.node_cpu.any_pod()
        versions = {
            "kernel": self.cluster.check(pod, ["uname", "-r"]).strip(),
            "kubernetes": self.cluster.server_version,
        }
        if any(self.env.scenarios[s].mesh for s in self.scenarios):  # the sidecars' Envoy: the image's
            versions["envoy"] = envoy.parse_version(self.cluster.check(pod, ["envoy", "--version"])) or "unknown"
        return {
            "target": "kubernetes",
            "context": self.settings.context,
            "namespace": self.namespace,
            "session": self.session,
            "image": self.settings.image,
            "versions": versions,
            "clk_tck": int(self.cluster.check(pod, ["getconf", "CLK_TCK"]).strip()),
            "machine": self._node_machine(pod),
        }

    def _node_machine(self, pod: str) -> dict[str, str | int]:
        """The node's CPU model, online CPUs and memory (cpu.machine), read in a pod on it."""
        text = self.cluster.check(pod, ["sh", "-c", MACHINE_SCRIPT])
        cpuinfo, meminfo, cpus = text.split(MACHINE_SEPARATOR)
        return cpu.machine_facts(cpuinfo, meminfo, int(cpus.strip()))


# what describe reads of a node: its /proc/cpuinfo, /proc/meminfo and online CPUs, apart
MACHINE_SEPARATOR = "--benchlib-machine--\n"
MACHINE_SCRIPT = (
    f"cat /proc/cpuinfo; echo {MACHINE_SEPARATOR.strip()}; cat /proc/meminfo; echo {MACHINE_SEPARATOR.strip()}; "
    "getconf _NPROCESSORS_ONLN"
)


def remove_stale_certificates(log=_log.info, directory: Path | None = None) -> list[str]:
    """Remove the mesh certificate directories (CA and proxy keys) left by killed sessions: those whose
    owner pid, in the name, is gone."""
    removed = []
    for path in Path(directory or tempfile.gettempdir()).glob(f"{TLS_PREFIX}*"):
        pid = path.name[len(TLS_PREFIX) :].split("-")[0]
        if pid.isdigit() and not _alive(int(pid)):
            log(f"kubernetes: removing {path}, the mesh certificates of a killed campaign")
            shutil.rmtree(path, ignore_errors=True)
            removed.append(str(path))
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
