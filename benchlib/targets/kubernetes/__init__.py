"""A Kubernetes cluster, through the official ``kubernetes`` Python client.

One namespace per target session (one `benchlib collect` on one
environment), labelled ``benchlib.io/session=<id>`` and
``benchlib.io/owner=<host>.<pid>``; everything the target creates lives in it,
so deleting it removes everything (namespaces.py: a killed session's namespace
is found by its owner label and removed by the next start on the same host).

Per scenario, ``activate`` runs named steps: the scenario's commands and helm
release switch the pod network (scenarios.py) and its ready checks are retried
until they pass; a server pod and a client pod are started and reused by all
runs of that scenario; then what the scenario adds: filler Services, for
``placement: service`` the Services of services.py, for a ``mesh`` its Envoy
proxies (mesh_proxies.py: sidecars injected into the pods or a proxy pod per
node, with certificates from a CA made per target session); then its
``programmed`` checks are retried, for what the API does not show (a
kube-proxy sync, a Cilium service map). Each run records the nodes' facts from
the API and the scenario's ``record`` outputs. Commands reach pods through the
exec API (api.py); CPU is read per node by a hostPID DaemonSet (sampling.py).
The manifests are pure builders (manifests.py). Each run reads every proxy's
Envoy (CPU, peak RSS, bytes carried) at both edges of its CPU window, as the
lab reads its proxies; a sidecar that died fails that run.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ...collectors import Server
from ...host import cpu, disturbance
from ...settings.environment import Environment
from .. import Placement, Target, TargetError, service_ports, shown, wait_listening
from ..mesh import envoy, shapes
from . import namespaces, quiet, services
from .api import PID_MARKER, Cluster, ExecProcess, placed, reason, refusal
from .manifests import (
    LABEL_OWNER,
    LABEL_SESSION,
    fillers_for,
    namespace_labels_patch,
    namespace_name,
    object_name,
    pod_manifest,
    pod_name,
    render,
    scenario_commands,
)
from .mesh_proxies import MeshProxies, remove_stale_certificates
from .sampling import NodeCpu, agent_usage
from .scenarios import Switch, node_facts

_log = logging.getLogger(__name__)  # the default for log=: where benchlib.base.logs sends messages

__all__ = ["KubernetesTarget", "render", "LABEL_OWNER", "LABEL_SESSION", "PID_MARKER"]

# each poll is an exec through the API server: right after 4000 Services were deleted beside Calico's eBPF
# dataplane, netserver was not seen listening within 15 s
SERVER_LISTEN_TIMEOUT_S, SERVER_POLL_S = 60, 0.2
# a bound on the Service proxies' freeze while fillers are written (5000 take minutes); past it the
# watchdog thaws them and the writes go on beside them
FILLERS_FREEZE_MAX_S = 1200
QUIET_START_WAIT_S = 2  # for the clients' PID markers before a quiet window (they come well before it)


@dataclass(frozen=True)
class Pods:
    """Where a scenario's server and client pods were placed: name, node and pod IP of each."""

    server: str
    server_node: str
    server_ip: str
    client: str
    client_node: str
    client_ip: str


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
        self._mesh: MeshProxies | None = None
        self.switch = Switch(env, log)
        self._active: str | None = None  # the scenario whose pods and Services exist
        self._namespace_labels: dict[str, str] = {}  # the active scenario's namespace_labels
        self._servers: list[ExecProcess] = []
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

    @property
    def mesh(self) -> MeshProxies:
        if self._mesh is None:
            raise TargetError("kubernetes: the mesh proxies are used before prepare()")
        return self._mesh

    # -- life cycle ----------------------------------------------------------------
    def prepare(self) -> None:
        self._cluster = Cluster(self.settings.kubeconfig, self.settings.context, self.namespace)
        self._node_cpu = NodeCpu(self._cluster)
        self._mesh = MeshProxies(
            self._cluster,
            self.env,
            self.session,
            self.servers,
            self.settings.pod_ready_timeout_s,
            self.log,
        )
        self.clean_leftovers()

    def share_quiet(self, windows: quiet.Quiet) -> None:
        """Use a campaign's quiet windows over several clusters (clusters.py) instead of its own."""
        self._quiet, self._owns_quiet = windows, False

    def setup(self) -> None:
        namespaces.create(self.cluster, self.env, self.session, self.owner)
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
        if self._mesh is not None:
            self._mesh.close()
        if self._cluster is None:
            return
        if self._active is not None and self.env.scenarios[self._active].mesh in shapes.NODE_MESHES:
            try:  # their rules live in the nodes, not in the namespace
                self.mesh.stop_node_proxies(self._active)
            except Exception as exc:  # the namespace goes all the same; its deletion stops their pods
                self.log(f"kubernetes: stopping the node proxies failed ({reason(exc)})")
        try:  # in parallel: faster than the namespace controller for many Services
            services.set_fillers(self.cluster, self.session, 0, self.log)
        except Exception as exc:
            self.log(
                f"kubernetes: deleting the filler Services failed ({reason(exc)}); the namespace deletion removes them"
            )
        namespaces.delete(self.cluster, self.namespace)

    def clean_leftovers(self) -> list[str]:
        """Delete the namespaces, and the certificate directories, of sessions started on this host
        whose process is gone."""
        return remove_stale_certificates(self.log) + namespaces.delete_orphans(self.cluster, self.log)

    # -- scenarios -----------------------------------------------------------------
    def switch_of(self, scenario: str) -> str:
        # the pod network is what a scenario's commands switch; the same commands are the same network
        return "\n".join(scenario_commands(self.env, scenario))

    def kept_objects(self, scenario: str) -> int:
        sc = self.env.scenarios[scenario]
        return fillers_for(sc.placement, sc.services)

    def activate(self, scenario: str) -> None:
        """The pod network switched, the pods placed, then what the scenario adds on them (fillers,
        Services, the mesh), its datapath checked programmed, and its placement recorded."""
        sc = self.env.scenarios[scenario]
        self._switch_pod_network(scenario)
        self._label_namespace(sc.namespace_labels)
        if sc.mesh and sc.mesh not in shapes.NODE_MESHES:  # sidecars are in the pods; node proxies wait for them
            self.mesh.create_objects(scenario)
        pods = self._start_pods(scenario)
        self._active = scenario  # from here on, _remove_scenario_objects cleans up after a failure
        extra = self._set_fillers(self.kept_objects(scenario))
        service_ip, services_made = self._start_services(scenario, pods)
        extra.update(services_made)
        if sc.mesh:
            extra["mesh"] = self._start_mesh(scenario, pods)
        if sc.programmed:
            start = time.monotonic()
            self.switch.retry_until_ok(scenario, sc.programmed, "not programmed")
            extra["programmed_s"] = round(time.monotonic() - start, 3)
        self.placements[scenario] = self._placement(scenario, pods, service_ip, extra)

    def _switch_pod_network(self, scenario: str) -> None:
        """The previous scenario's objects removed and this one's commands applied, unless both are on
        one pod network side by side: then the other scenarios' pods and servers stay."""
        in_place = self._active is not None and self.switch_of(self._active) == self.switch_of(scenario)
        if not (self.keeps_scenarios and in_place):
            self._remove_scenario_objects()
            self.switch.apply(scenario)

    def _start_pods(self, scenario: str) -> Pods:
        """The server pod, then the client pod (on the server's node for ``placement: same-node``), the
        client created once the server has its node, so that the two start side by side. Each pod has
        ``pod_ready_timeout_s`` from its creation, the server's scheduling included."""
        sc = self.env.scenarios[scenario]
        timeout = self.settings.pod_ready_timeout_s
        server_since = time.monotonic()
        server = self.cluster.create_pod(pod_manifest(self.env, scenario, "server", self.session, self.servers))
        # the client's placement reads the server's: its node, or its presence for the anti-affinity
        server_node = self.cluster.wait_scheduled(server, timeout, server_since)
        beside = server_node if sc.placement == "same-node" else None
        client_since = time.monotonic()
        client = self.cluster.create_pod(pod_manifest(self.env, scenario, "client", self.session, self.servers, beside))
        server_pod, _, server_ip = placed(self.cluster.wait_ready(server, timeout, server_since))
        client_pod = self.cluster.wait_ready(client, timeout, client_since)
        return Pods(server_pod, server_node, server_ip, *placed(client_pod))

    def _start_services(self, scenario: str, pods: Pods) -> tuple[str | None, dict]:
        """For ``placement: service``: the Services in front of the server pod, their IP and record."""
        sc = self.env.scenarios[scenario]
        if sc.placement != "service":
            return None, {}
        start = time.monotonic()
        service_ip = services.create(
            self.cluster,
            scenario,
            self.session,
            service_ports(self.servers),
            pods.server_ip,
            self.settings.pod_ready_timeout_s,
            self.log,
        )
        return service_ip, {"services": sc.services or 1, "service_ready_s": round(time.monotonic() - start, 3)}

    def _start_mesh(self, scenario: str, pods: Pods) -> dict:
        """The node proxies on the pods' nodes (a node mesh), every proxy met, and a node mesh's capture
        checked with one connection; the mesh's record."""
        node_mesh = self.env.scenarios[scenario].mesh in shapes.NODE_MESHES
        if node_mesh:
            self.mesh.start_node_proxies(scenario, {1: pods.client_node, 2: pods.server_node})
        record = self.mesh.meet(scenario, self.settings.image)
        if node_mesh:
            self.mesh.check_node_capture(scenario, pods.client, pods.server_ip)
        return record

    def _placement(self, scenario: str, pods: Pods, service_ip: str | None, extra: dict) -> Placement:
        """The scenario's placement, with what its runs record of the cluster."""
        sc = self.env.scenarios[scenario]
        for node in (pods.client_node, pods.server_node):
            self.node_cpu.require(node)
        client_cpus, server_cpus = self._side_cpus(pods.client_node, pods.server_node)
        details = {
            "placement": sc.placement,
            "namespace": self.namespace,
            "session": self.session,
            "client_pod": pods.client,
            "server_pod": pods.server,
            "client_pod_ip": pods.client_ip,
            "server_pod_ip": pods.server_ip,
            "host_network": sc.placement == "host-network",
            "service_ip": service_ip,
            **extra,
            "scenario_settings": dict(sc.settings),
            "scenario_record": self.switch.record(scenario),
            "cni_agent_usage": agent_usage(self.cluster, self.settings.cni_agent),
            **node_facts(self.cluster, pods.client_node, pods.server_node),
        }
        return Placement(
            scenario=scenario,
            server_address=service_ip or pods.server_ip,
            client_node=pods.client_node,
            server_node=pods.server_node,
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
            self.mesh.stop_node_proxies(self._active)
        for role in ("client", "server"):
            self.cluster.delete_pod(pod_name(self._active, role))
        if self.env.scenarios[self._active].placement == "service":
            services.delete(self.cluster, self._active)
        if self.env.scenarios[self._active].mesh:
            self.mesh.delete_objects(self._active)
        self._active = None

    def sidecar_counters(self, scenario: str, proxy: str) -> dict[str, int]:
        """Every counter and gauge of a proxy's Envoy (its admin /stats), by name."""
        return self.mesh.counters(scenario, proxy)

    def datapath_usage(self, scenario: str, reset_peak: bool) -> dict[str, dict]:
        """Each proxy's Envoy: its CPU ticks, peak RSS and bytes carried so far (MeshProxies.usage)."""
        return self.mesh.usage(scenario, self.placements[scenario], reset_peak)

    def recover(self, scenario: str) -> list[str]:
        """Wait until Kubernetes has restarted every proxy of the scenario that died (MeshProxies.recover)."""
        return self.mesh.recover(scenario)

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
