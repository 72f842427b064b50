"""A scenario's Envoy proxies on the cluster, as a target session runs them: the sidecars of the
benchmark pods or a proxy pod per node (the objects and scripts are the pure builders of
sidecars.py and manifests.py).

For each scenario with a ``mesh``: its ConfigMap and, for mTLS, each proxy's Secret, from a CA
made per target session in a private directory; the node proxies' pods and their capture rules
in the nodes; each Envoy's version and start time once ready; its readings (CPU, peak RSS, bytes
carried) at both edges of a run's CPU window; and, after a sidecar died, the wait for Kubernetes
to restart it.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from ...base.errors import DatapathError
from ...base.processes import alive
from ...collectors import Server
from ...settings.environment import Environment
from ...settings.scenarios import KubernetesScenario
from .. import Placement, TargetError, shown
from ..mesh import certificates, envoy, shapes
from . import namespaces, sidecars
from .api import Cluster, absent, reason, refusal
from .manifests import mesh_configmap, mesh_plan, mesh_secret, node_proxy_pods, object_name

_log = logging.getLogger(__name__)  # the default for log=: where benchlib.base.logs sends messages

SIDECAR_POLL_S = 0.5
TLS_PREFIX = "benchlib-mesh-"  # + the owner's pid: a killed session's keys are found and removed
CAPTURE_PROBE_TIMEOUT_S = 10  # one connection through the node proxies, or its refusal


@dataclass
class Sidecars:
    """A scenario's proxies, their Envoy's version, and each Envoy's start time (ticks since boot)
    when last seen alive: another start time is a proxy Kubernetes restarted."""

    plan: list[shapes.Proxy]
    version: str
    started: dict[str, int] = field(default_factory=dict)


class MeshProxies:
    """The Envoy proxies of one target session's scenarios, in its namespace."""

    def __init__(
        self,
        cluster: Cluster,
        env: Environment,
        session: str,
        servers: list[Server],
        pod_ready_timeout_s: float,
        log=_log.info,
    ):
        self.cluster, self.env, self.session, self.servers, self.log = cluster, env, session, servers, log
        self.pod_ready_timeout_s = pod_ready_timeout_s
        self.met: dict[str, Sidecars] = {}  # per scenario whose proxies are ready
        self._tls_dir: Path | None = None  # the session's CA and proxy certificates (mTLS meshes)

    def close(self) -> None:
        """Remove the session's certificates."""
        if self._tls_dir is not None:
            shutil.rmtree(self._tls_dir, ignore_errors=True)
            self._tls_dir = None

    # -- objects ---------------------------------------------------------------------
    def create_objects(self, scenario: str, pod_subnets: dict[int, str] | None = None) -> None:
        """The scenario's ConfigMap (bootstraps, capture rules) and, for mTLS, each proxy's Secret,
        before the proxies' pods. An earlier failed activation's objects are replaced."""
        sc = KubernetesScenario.of(self.env, scenario)
        self.delete_objects(scenario)
        core, namespace = self.cluster.core, self.cluster.namespace
        with refusal(f"scenario {scenario}: cannot create its mesh objects"):
            config = mesh_configmap(self.env, scenario, self.session, self.servers, pod_subnets)
            core.create_namespaced_config_map(namespace, config)  # pyright: ignore[reportArgumentType] (a manifest dict, sent as it is)
            if sc.mesh in shapes.MTLS_MESHES:
                for proxy in mesh_plan(self.env, scenario, self.servers):
                    secret = mesh_secret(scenario, self.session, proxy, self._certificate_files(proxy))
                    core.create_namespaced_secret(namespace, secret)  # pyright: ignore[reportArgumentType] (a manifest dict, sent as it is)

    def delete_objects(self, scenario: str) -> None:
        self.met.pop(scenario, None)
        core = self.cluster.core
        name = object_name(scenario)
        deletions = [(core.delete_namespaced_config_map, sidecars.configmap_name(name))]
        deletions += [
            (core.delete_namespaced_secret, sidecars.secret_name(name, p))
            for p in mesh_plan(self.env, scenario, self.servers)
        ]
        for delete, obj in deletions:
            absent(partial(delete, obj, self.cluster.namespace), f"scenario {scenario}: cannot delete {obj}")

    def _certificate_files(self, proxy: shapes.Proxy) -> dict[str, str]:
        """The CA certificate and ``proxy``'s certificate and key, from the session's CA (made at the
        first mTLS scenario, in a private directory removed by `close`, or by the next session's
        `remove_stale_certificates` after a kill)."""
        if self._tls_dir is None:
            self._tls_dir = Path(tempfile.mkdtemp(prefix=f"{TLS_PREFIX}{os.getpid()}-"))
            certificates.make_certificates(self._tls_dir, ["client-sidecar", "server-sidecar", "node1", "node2"])
        names = ("ca.crt", f"{proxy.identity}.crt", f"{proxy.identity}.key")
        return {name: (self._tls_dir / name).read_text() for name in names}

    # -- node proxies ------------------------------------------------------------------
    def start_node_proxies(self, scenario: str, nodes: dict[int, str]) -> None:
        """A node proxy pod on the client's (1) and the server's (2) node, once the benchmark pods are
        placed: their rules capture traffic between those nodes' pod subnets."""
        subnets = {}
        for i, node in nodes.items():
            spec = self.cluster.core.read_node(node).spec
            subnets[i] = (spec.pod_cidrs or [spec.pod_cidr])[0]
        self.create_objects(scenario, subnets)
        for pod in node_proxy_pods(self.env, scenario, self.session, self.servers, nodes):
            self.cluster.start_pod(pod, self.pod_ready_timeout_s)

    def check_node_capture(self, scenario: str, client_pod: str, server_ip: str) -> None:
        """One connection from the client pod to the server pod must reach the client node's proxy.
        A pod network that takes pod traffic past the node's netfilter leaves the capture rules idle,
        and every run would fail as carrying nothing: stop before the runs, saying why."""
        before = self.counters(scenario, "node1").get(sidecars.NODE_CAPTURED, 0)
        url = f"http://{server_ip}:{self.servers[0].port}/"  # the rules capture every TCP port
        self.cluster.run(client_pod, ["fortio", "curl", "-timeout", "3s", url], timeout=CAPTURE_PROBE_TIMEOUT_S)
        if self.counters(scenario, "node1").get(sidecars.NODE_CAPTURED, 0) > before:
            return
        raise TargetError(
            f"kubernetes: scenario {scenario}: the node proxies captured nothing: a connection from the client "
            f"pod to {server_ip} never reached node 1's proxy, so its rules in the node's nat table (chain "
            f"{sidecars.NODE_CHAIN}) never saw it. mesh: node-proxies-mtls needs a pod network whose pod "
            "traffic crosses the node's iptables, as the bridge CNI's does; Cilium's eBPF host routing and its "
            "VXLAN tunnel take it past them (Istio ambient redirects inside each pod's namespace instead)"
        )

    def stop_node_proxies(self, scenario: str) -> None:
        """Remove the node proxies' capture rules from their nodes, then their pods (whose capture
        container removes them as well when told to stop, should this exec not reach it)."""
        for proxy in mesh_plan(self.env, scenario, self.servers):
            try:
                self.cluster.run(proxy.namespace, ["sh", "-c", sidecars.NODE_CLEANUP], container=sidecars.CAPTURE)
            except Exception as exc:  # a pod that never started, or is gone
                self.log(f"kubernetes: node proxy {proxy.name}: removing its rules by exec failed ({reason(exc)})")
            self.cluster.delete_pod(proxy.namespace, grace_period_s=sidecars.NODE_GRACE_S)
        for proxy in mesh_plan(self.env, scenario, self.servers):  # gone before other rules come
            self.cluster.wait_deleted(proxy.namespace, sidecars.NODE_GRACE_S + namespaces.DELETE_TIMEOUT_S)

    # -- readings ----------------------------------------------------------------------
    def meet(self, scenario: str, image: str) -> dict:
        """Once the pods are ready: each proxy's Envoy version and start time; the mesh's record."""
        sc = KubernetesScenario.of(self.env, scenario)
        plan = mesh_plan(self.env, scenario, self.servers)
        first = plan[0].namespace  # a proxy's "namespace" is its pod
        out = self.cluster.run(first, ["envoy", "--version"], container=sidecars.SIDECAR)
        version = envoy.parse_version(shown(out.stdout))
        if out.returncode != 0 or version is None:
            raise TargetError(
                f"kubernetes: scenario {scenario}: `envoy --version` in pod {first} exited {out.returncode}: "
                f"{shown(out.stdout + out.stderr).strip()[-300:]}"
            )
        state = self.met[scenario] = Sidecars(plan, version)
        for proxy in plan:
            state.started[proxy.name] = self._read(scenario, proxy, reset_peak=False)["started"]
        return {
            **shapes.describe(sc.mesh or "", "envoy", version, sidecars.http_ports(self.servers), plan),
            "sidecar": {"container": sidecars.SIDECAR, "admin": f"127.0.0.1:{sidecars.ADMIN_PORT}", "image": image},
        }

    def _read(self, scenario: str, proxy: shapes.Proxy, reset_peak: bool) -> dict:
        """One reading of a proxy's Envoy (`sidecars.parse_usage`); DatapathError, with Envoy's log
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

    def counters(self, scenario: str, proxy: str) -> dict[str, int]:
        """Every counter and gauge of a proxy's Envoy (its admin /stats), by name."""
        pod = next(p.namespace for p in self.met[scenario].plan if p.name == proxy)
        url = f"http://127.0.0.1:{sidecars.ADMIN_PORT}/stats"
        return envoy.parse_stats(self.cluster.check(pod, ["wget", "-q", "-O", "-", url], container=sidecars.SIDECAR))

    def usage(self, scenario: str, placement: Placement, reset_peak: bool) -> dict[str, dict]:
        """Each proxy's Envoy: its CPU ticks, peak RSS and bytes carried so far. Raises DatapathError,
        with Envoy's log tail, when one cannot be read or Kubernetes restarted it since last seen."""
        state = self.met.get(scenario)
        if state is None:
            return {}
        cpus = {"client": placement.client_cpus, "server": placement.server_cpus}
        # both proxies at once: an exec takes a tenth of a second or more, and the readings bound the
        # run's CPU window
        with ThreadPoolExecutor(len(state.plan)) as pool:
            readings = [pool.submit(self._read, scenario, p, reset_peak) for p in state.plan]
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
        """Wait until Kubernetes has restarted every proxy of the scenario that died and its Envoy
        is ready again (its capture rules stay in the pod), so the next runs find their path whole.
        Returns the names of those restarted."""
        state = self.met.get(scenario)
        if state is None:
            return []
        restarted = []
        timeout = self.pod_ready_timeout_s
        for proxy in state.plan:
            deadline = time.monotonic() + timeout
            while True:
                if self._started(proxy.namespace):
                    try:
                        started = self._read(scenario, proxy, reset_peak=False)["started"]
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

    def _started(self, pod: str) -> bool:
        """Whether the pod's sidecar runs and has passed its startup probe (Envoy is ready)."""
        status = self.cluster.core.read_namespaced_pod(pod, self.cluster.namespace).status
        found = [c for c in status.init_container_statuses or [] if c.name == sidecars.SIDECAR]
        return bool(found and found[0].started and found[0].state and found[0].state.running)


def remove_stale_certificates(log=_log.info, directory: Path | None = None) -> list[str]:
    """Remove the mesh certificate directories (CA and proxy keys) left by killed sessions: those whose
    owner pid, in the name, is gone."""
    removed = []
    for path in Path(directory or tempfile.gettempdir()).glob(f"{TLS_PREFIX}*"):
        pid = path.name[len(TLS_PREFIX) :].split("-")[0]
        if pid.isdigit() and not alive(int(pid)):
            log(f"kubernetes: removing {path}, the mesh certificates of a killed campaign")
            shutil.rmtree(path, ignore_errors=True)
            removed.append(str(path))
    return removed
