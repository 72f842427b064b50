"""A Kubernetes cluster, through the official ``kubernetes`` Python client.

One namespace per campaign, labelled ``benchlib.io/campaign=<id>`` and
``benchlib.io/owner=<host>.<pid>``; everything the target creates lives in it, so
deleting it removes everything (a killed campaign's namespace is found by its
owner label and removed by the next start on the same host).

Per scenario (``activate``): the scenario's helm release and commands switch the
cluster, its readiness commands are retried until they pass, then a server pod
and a client pod are created (and a ClusterIP Service for ``placement: service``)
and reused by all runs of that scenario. Commands run through the exec API; a
hostPID DaemonSet pod on each node reads that node's /proc/stat.

Service scaling (``services: N`` with ``placement: service``): besides the
benchmark Service, N-1 one-port filler Services select the same server pod, so
each has an endpoint and kube-proxy (or Cilium's service map) holds a full entry
for it. They are created in parallel, and the target waits until every one has
an EndpointSlice naming the server pod. Each run records the count, the time to
create them and the time until their EndpointSlices existed, the last step the
API shows. When the datapath has programmed them (kube-proxy's sync, Cilium's
service map) is not an API object: a scenario's ``programmed`` commands are
retried until they pass (e.g. reading kube-proxy's sync metrics on each node),
and its ``record`` commands keep what they print with every run.

Each run records the facts of both pods' nodes from the API (podCIDRs, kernel,
kubelet and runtime versions, boot ID). Nodes with one boot ID share one kernel
and its CPUs, as the local cluster's nodes do: per-side CPU is then per CPU set,
not per machine, and ``nodes_share_kernel`` says so.

Exec exit codes and PIDs travel in-band: every command is wrapped as
``sh -c 'echo __BENCHLIB_PID=$$ >&2; <cmd>; echo __BENCHLIB_EXIT=$? >&2'`` and
the markers are removed from stderr, so stdout stays exactly what the tool
printed, whatever the exec implementation does with exit codes. Closing an
exec stream does not end the command in a kubelet, so a kill is an exec of
``kill`` with that PID.
"""
from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

from .. import collectors, cpu
from ..config import Environment, Scenario, environment_dir
from . import Placement, Target, TargetError, service_ports, wait_listening

EXIT_MARKER = "__BENCHLIB_EXIT="
PID_MARKER = "__BENCHLIB_PID="
_MARKER_RE = re.compile(rf"{EXIT_MARKER}(-?\d+)\n?$")
_PID_RE = re.compile(rf"^{PID_MARKER}(\d+)\n")
LABEL_CAMPAIGN = "benchlib.io/campaign"
LABEL_OWNER = "benchlib.io/owner"
LABEL_ROLE = "benchlib.io/role"
LABEL_SCENARIO = "benchlib.io/scenario"
WORKLOAD_ROLE = "benchlib-workload"  # ClusterRole of pipelines/kubernetes/rbac.yaml
SERVICE_NAME_LABEL = "kubernetes.io/service-name"  # set by the EndpointSlice controller
# parallel API requests for filler Services: 1000 one by one would take minutes on a remote API server
SERVICE_WORKERS = 8


def _k8s():
    import kubernetes  # imported lazily: the lab never needs it
    return kubernetes


def wrap(argv: list[str]) -> list[str]:
    """The exec command line: the shell's PID, argv, then argv's exit status, markers on stderr."""
    return ["sh", "-c", f'echo "{PID_MARKER}$$" >&2; {shlex.join(argv)}; echo "{EXIT_MARKER}$?" >&2']


def split_marker(stderr: str) -> tuple[int | None, str]:
    """(exit status or None when the command never finished, stderr without the markers)."""
    stderr = _PID_RE.sub("", stderr, count=1)
    m = _MARKER_RE.search(stderr)
    if not m:
        return None, stderr
    return int(m.group(1)), stderr[: m.start()]


class ExecProcess:
    """A command running in a pod through the exec API, shaped like LocalProcess."""

    def __init__(self, target: "KubernetesTarget", pod: str, argv: list[str]):
        self.argv = argv
        self._target, self._pod = target, pod
        self._ws = target._open_exec(pod, wrap(argv))
        self._out: list[str] = []
        self._err: list[str] = []
        self.returncode: int | None = None
        self._killed = False
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        try:
            while self._ws.is_open():
                self._ws.update(timeout=0.5)
                self._out.append(self._ws.read_stdout(timeout=0) if self._ws.peek_stdout() else "")
                self._err.append(self._ws.read_stderr(timeout=0) if self._ws.peek_stderr() else "")
        except Exception as exc:  # a dropped connection ends the command like a kill
            if not self._killed:
                self._err.append(f"\nbenchlib: exec stream failed: {exc}\n")
        code, stderr = split_marker("".join(self._err))
        self._err = [stderr]
        # -9: killed by us or the connection dropped before the command ended
        self.returncode = code if code is not None and not self._killed else -9

    def poll(self) -> int | None:
        return None if self._reader.is_alive() else self.returncode

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        self._reader.join(timeout)
        if self._reader.is_alive():
            raise subprocess.TimeoutExpired(self.argv, timeout)
        return "".join(self._out), "".join(self._err)

    def kill(self) -> None:
        self._killed = True
        deadline = time.monotonic() + 5
        while self._reader.is_alive() and time.monotonic() < deadline:
            m = _PID_RE.match("".join(self._err))
            if m:  # the wrapping shell's children, then the shell
                try:
                    self._target.exec(self._pod, ["sh", "-c", f"pkill -KILL -P {m.group(1)}; kill -KILL {m.group(1)}"])
                except Exception as exc:  # the pod is gone: so is the command
                    self._err.append(f"\nbenchlib: kill failed: {_reason(exc)}\n")
                break
            time.sleep(0.05)
        self._ws.close()


def _name(scenario: str) -> str:
    return re.sub(r"[^a-z0-9-]", "-", scenario.lower())[:40].strip("-")


def scenario_commands(env: Environment, scenario: str) -> list[str]:
    """The shell commands that switch the cluster to a scenario: its commands, then helm."""
    sc = env.scenarios[scenario]
    commands = list(sc.apply)
    if sc.helm:
        h = sc.helm
        argv = ["helm", "upgrade", "--install", h.release, h.chart, "--version", h.version,
                "--namespace", h.namespace, "--values", h.values, "--wait", "--timeout", "15m"]
        if h.repo:
            argv += ["--repo", h.repo]
        commands.append(" ".join([shlex.join(argv), *h.extra_args]))
    return commands


def pod_manifest(env: Environment, scenario: str, role: str, campaign: str,
                 server_node: str | None = None) -> dict:
    """The client or server pod of a scenario. The client of a same-node
    scenario follows the server (``server_node`` once known, else pod affinity)."""
    k = env.kubernetes
    sc = env.scenarios[scenario]
    labels = {LABEL_CAMPAIGN: campaign, LABEL_ROLE: role, LABEL_SCENARIO: _name(scenario)}
    spec: dict = {
        "containers": [{"name": "bench", "image": k.image, "imagePullPolicy": k.image_pull_policy,
                        "command": ["sleep", "infinity"],
                        "ports": [{"containerPort": collectors.get("netperf").PORT}] if role == "server" else []}],
        "terminationGracePeriodSeconds": 1,
        "restartPolicy": "Never",
        "nodeSelector": dict(k.node_selector),
    }
    host_network = sc.placement == "host-network"
    if host_network:
        spec["hostNetwork"] = True
        spec["dnsPolicy"] = "ClusterFirstWithHostNet"
    other = {"matchLabels": {LABEL_CAMPAIGN: campaign, LABEL_SCENARIO: _name(scenario),
                             LABEL_ROLE: "server" if role == "client" else "client"}}
    term = {"labelSelector": other, "topologyKey": "kubernetes.io/hostname"}
    if sc.placement == "same-node":
        node = server_node or k.server_node
        if node:
            spec["nodeSelector"]["kubernetes.io/hostname"] = node
        elif role == "client":
            spec["affinity"] = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    elif k.client_node:
        spec["nodeSelector"]["kubernetes.io/hostname"] = k.client_node if role == "client" else k.server_node
    else:  # two distinct nodes, chosen by the scheduler
        spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    if not spec["nodeSelector"]:
        del spec["nodeSelector"]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{_name(scenario)}-{role}", "labels": labels}, "spec": spec}


def service_manifest(scenario: str, campaign: str, ports: list[tuple[int, str]], filler: int = 0) -> dict:
    """The benchmark Service of a scenario (``filler`` 0), or filler Service number ``filler``:
    the same server pod behind one port (TCP if any, like most Services), which no client uses."""
    name, role = (f"{_name(scenario)}-server", "service") if not filler else (f"{_name(scenario)}-fill-{filler}", "filler")
    if filler:
        ports = sorted(ports, key=lambda p: p[1] != "tcp")[:1]
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name,
                         "labels": {LABEL_CAMPAIGN: campaign, LABEL_SCENARIO: _name(scenario), LABEL_ROLE: role}},
            "spec": {"type": "ClusterIP",
                     "selector": {LABEL_CAMPAIGN: campaign, LABEL_SCENARIO: _name(scenario), LABEL_ROLE: "server"},
                     "ports": [{"name": f"{proto}-{p}", "port": p, "targetPort": p, "protocol": proto.upper()}
                               for p, proto in ports]}}


def cpu_daemonset(env: Environment, campaign: str) -> dict:
    """hostPID pods on every node; /proc/stat inside them is the node's."""
    labels = {LABEL_CAMPAIGN: campaign, LABEL_ROLE: "cpu"}
    pod = {"hostPID": True, "terminationGracePeriodSeconds": 1, "tolerations": [{"operator": "Exists"}],
           "containers": [{"name": "cpu", "image": env.kubernetes.image,
                           "imagePullPolicy": env.kubernetes.image_pull_policy, "command": ["sleep", "infinity"]}]}
    if env.kubernetes.node_selector:
        pod["nodeSelector"] = dict(env.kubernetes.node_selector)
    return {"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "benchlib-cpu", "labels": labels},
            "spec": {"selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels}, "spec": pod}}}


def render(env: Environment, scenarios: list[str], servers: list[collectors.Server]) -> list[tuple[str, object]]:
    """Everything the target would apply, in order, as (title, manifest or command)."""
    out: list[tuple[str, object]] = [("namespace", {"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": f"{env.kubernetes.namespace_prefix}-<id>", "labels": {LABEL_CAMPAIGN: "<id>"}}}),
        ("daemonset", cpu_daemonset(env, "<id>"))]
    for name in scenarios:
        sc = env.scenarios[name]
        for command in scenario_commands(env, name):
            out.append((f"{name}: apply", command))
        if sc.helm:
            out.append((f"{name}: helm values {sc.helm.values}", (environment_dir(env.name) / sc.helm.values)))
        for command in sc.ready:
            out.append((f"{name}: ready when", command))
        for command in sc.programmed:
            out.append((f"{name}: programmed when", command))
        for key, command in sc.record.items():
            out.append((f"{name}: record {key}", command))
        out.append((f"{name}: server pod", pod_manifest(env, name, "server", "<id>")))
        out.append((f"{name}: client pod", pod_manifest(env, name, "client", "<id>")))
        if sc.placement == "service":
            out.append((f"{name}: service", service_manifest(name, "<id>", service_ports(servers))))
        if (sc.services or 1) > 1:
            out.append((f"{name}: filler services: {sc.services - 1} like this one, "
                        f"named {_name(name)}-fill-1 to -{sc.services - 1}",
                        service_manifest(name, "<id>", service_ports(servers), filler=1)))
    return out


class KubernetesTarget(Target):
    kind = "kubernetes"
    # switching a CNI costs minutes: scenarios run one after another
    interleaves_scenarios = False

    def __init__(self, env: Environment, scenarios: list[str], servers: list[collectors.Server] | None = None,
                 commands: list[str] = (), log=print):
        if env.kubernetes is None:
            raise TargetError(f"environment {env.name}: target kubernetes needs a kubernetes: section")
        if servers is None:  # as before: the netperf server's ports on the Services
            servers = [collectors.get("netperf").SERVER]
        super().__init__(env, scenarios, servers, commands, log)
        self.settings = env.kubernetes
        self.campaign = f"{env.name[:20]}-{uuid.uuid4().hex[:8]}".lower()
        self.namespace = f"{self.settings.namespace_prefix}-{self.campaign}"
        self.owner = f"{socket.gethostname()}.{os.getpid()}"
        self._active: str | None = None
        self._servers: list[ExecProcess] = []
        self._cpu_pods: dict[str, str] = {}  # node -> pod
        self._exec_lock = threading.Lock()
        self._api = None

    # -- API access ---------------------------------------------------------------
    def _connect(self) -> None:
        k = _k8s()
        path = self.settings.kubeconfig and os.path.expanduser(self.settings.kubeconfig)
        try:
            self._api = k.config.new_client_from_config(config_file=path, context=self.settings.context)
            # exec streams patch their client while connecting: they get their own
            self._exec_api = k.client.CoreV1Api(k.config.new_client_from_config(
                config_file=path, context=self.settings.context))
            self.core = k.client.CoreV1Api(self._api)
            self.apps = k.client.AppsV1Api(self._api)
            self.rbac = k.client.RbacAuthorizationV1Api(self._api)
            self.server_version = k.client.VersionApi(self._api).get_code().git_version
        except Exception as exc:
            raise TargetError(f"kubernetes: cannot reach the cluster (kubeconfig {path or 'default'}, "
                              f"context {self.settings.context or 'current'}): {_reason(exc)}") from None

    def _open_exec(self, pod: str, command: list[str]):
        from kubernetes.stream import stream
        with self._exec_lock:
            return stream(self._exec_api.connect_get_namespaced_pod_exec, pod, self.namespace,
                          command=command, stderr=True, stdin=False, stdout=True, tty=False,
                          _preload_content=False)

    def exec(self, pod: str, argv: list[str], timeout: float = 60) -> tuple[int, str, str]:
        proc = ExecProcess(self, pod, argv)
        try:
            out, err = proc.communicate(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise TargetError(f"kubernetes: `{shlex.join(argv)}` in pod {pod} did not finish in {timeout} s")
        return proc.returncode, out, err

    def _check(self, pod: str, argv: list[str]) -> str:
        rc, out, err = self.exec(pod, argv)
        if rc != 0:
            raise TargetError(f"kubernetes: `{shlex.join(argv)}` in pod {pod} exited {rc}: {err.strip()}")
        return out

    # -- lifecycle ----------------------------------------------------------------
    def prepare(self) -> None:
        self._connect()
        self.clean_leftovers()

    def setup(self) -> None:
        self._create_namespace()
        self.apps.create_namespaced_daemon_set(self.namespace, cpu_daemonset(self.env, self.campaign))
        self._wait_cpu_pods()

    def teardown(self, timeout: float = 120) -> None:
        for proc in self._servers:
            proc.kill()
        self._servers.clear()
        if self._api is None:
            return
        # many Services go faster in parallel than through the namespace controller, which deletes them
        # one by one where the API server has no delete-collection for Services (older versions)
        try:
            self._delete_services(self._active)
        except Exception as exc:
            self.log(f"kubernetes: deleting the Services failed ({_reason(exc)}); the namespace deletion removes them")
        self._delete_namespace(self.namespace, timeout)

    def _delete_namespace(self, name: str, timeout: float) -> None:
        k = _k8s()
        try:
            self.core.delete_namespace(name)
        except k.client.ApiException as exc:
            if exc.status == 404:
                return
            raise TargetError(f"kubernetes: cannot delete namespace {name}: {_reason(exc)}") from None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                self.core.read_namespace(name)
            except k.client.ApiException as exc:
                if exc.status == 404:
                    return
                raise
            time.sleep(0.5)
        raise TargetError(f"kubernetes: namespace {name} still exists {timeout:g} s after deletion")

    def clean_leftovers(self) -> list[str]:
        """Delete namespaces of campaigns started on this host whose process is gone."""
        host = socket.gethostname()
        removed = []
        for ns in self.core.list_namespace(label_selector=LABEL_OWNER).items:
            owner = ns.metadata.labels.get(LABEL_OWNER, "")
            owner_host, _, pid = owner.rpartition(".")
            if owner_host == host and pid.isdigit() and not _alive(int(pid)):
                self.log(f"kubernetes: removing namespace {ns.metadata.name} left by a killed campaign")
                self._delete_namespace(ns.metadata.name, 120)
                removed.append(ns.metadata.name)
        return removed

    def _create_namespace(self) -> None:
        k = _k8s()
        # hostNetwork and hostPID pods need the privileged Pod Security level
        labels = {LABEL_CAMPAIGN: self.campaign, LABEL_OWNER: self.owner,
                  "pod-security.kubernetes.io/enforce": "privileged"}
        try:
            self.core.create_namespace({"apiVersion": "v1", "kind": "Namespace",
                                        "metadata": {"name": self.namespace, "labels": labels}})
        except k.client.ApiException as exc:
            raise TargetError(f"kubernetes: cannot create namespace {self.namespace}: {_reason(exc)}") from None
        # The runner's own permissions inside its namespace (pipelines/kubernetes/rbac.yaml).
        user = k.client.AuthenticationV1Api(self._api).create_self_subject_review(
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}).status.user_info.username
        try:
            self.rbac.create_namespaced_role_binding(self.namespace, {
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": "benchlib-runner"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": WORKLOAD_ROLE},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]})
        except k.client.ApiException as exc:
            raise TargetError(f"kubernetes: cannot bind ClusterRole {WORKLOAD_ROLE} in {self.namespace} "
                              f"(apply pipelines/kubernetes/rbac.yaml): {_reason(exc)}") from None
        # RBAC caches refresh quickly but not instantly
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                self.core.list_namespaced_pod(self.namespace)
                return
            except k.client.ApiException:
                time.sleep(0.2)

    def _wait_cpu_pods(self) -> None:
        deadline = time.monotonic() + self.settings.pod_ready_timeout_s
        while True:
            pods = self.core.list_namespaced_pod(self.namespace, label_selector=f"{LABEL_ROLE}=cpu").items
            ready = [p for p in pods if _is_ready(p)]
            if pods and len(ready) == len(pods):
                self._cpu_pods = {p.spec.node_name: p.metadata.name for p in ready}
                return
            if time.monotonic() > deadline:
                pending = [p.metadata.name for p in pods if not _is_ready(p)] or ["(none created)"]
                raise TargetError(f"kubernetes: CPU sampling pods not ready after "
                                  f"{self.settings.pod_ready_timeout_s:g} s: {pending}\n"
                                  + self._events(pending[0]))
            time.sleep(0.3)

    # -- scenarios ----------------------------------------------------------------
    def activate(self, scenario: str) -> None:
        sc = self.env.scenarios[scenario]
        self._remove_scenario_objects()
        self._switch(scenario, sc)
        server = self._start_pod(pod_manifest(self.env, scenario, "server", self.campaign))
        client = self._start_pod(pod_manifest(self.env, scenario, "client", self.campaign,
                                              server.spec.node_name if sc.placement == "same-node" else None))
        self._active = scenario  # from here on, _remove_scenario_objects cleans up after a failure
        service_ip, services = None, {}
        if sc.placement == "service":
            service_ip, services = self._create_services(scenario, sc.services or 1, server.status.pod_ip)
        if sc.programmed:
            start = time.monotonic()
            self._retry_until_ok(scenario, sc.programmed, sc.ready_timeout_s, "not programmed")
            services["programmed_s"] = round(time.monotonic() - start, 3)
        for name in (client.spec.node_name, server.spec.node_name):
            if name not in self._cpu_pods:
                raise TargetError(f"kubernetes: no CPU sampling pod on node {name}")
        address = service_ip or server.status.pod_ip
        client_cpus, server_cpus = self._side_cpus(client.spec.node_name, server.spec.node_name)
        details = {"placement": sc.placement, "namespace": self.namespace,
                   "client_pod": client.metadata.name, "server_pod": server.metadata.name,
                   "client_pod_ip": client.status.pod_ip, "server_pod_ip": server.status.pod_ip,
                   "host_network": sc.placement == "host-network", "service_ip": service_ip,
                   **services, "scenario_settings": dict(sc.settings), "scenario_record": self._record(sc),
                   "cni_agent_usage": self.agent_usage(),
                   **self._node_facts(client.spec.node_name, server.spec.node_name)}
        self.placements[scenario] = Placement(
            scenario=scenario, server_address=address, client_node=client.spec.node_name,
            server_node=server.spec.node_name, client_cpus=client_cpus, server_cpus=server_cpus,
            details=details)

    def start_server(self, scenario: str, server: collectors.Server, cpus: list[int]) -> None:
        self._start_server(self.placements[scenario].details["server_pod"], server, cpus)

    def _shell(self, command: str, timeout: float) -> subprocess.CompletedProcess:
        env = dict(os.environ)
        if self.settings.kubeconfig:
            env["KUBECONFIG"] = os.path.expanduser(self.settings.kubeconfig)
        if self.settings.context:
            env["BENCHLIB_KUBE_CONTEXT"] = self.settings.context
        return subprocess.run(["sh", "-c", command], cwd=environment_dir(self.env.name), env=env,
                              capture_output=True, text=True, timeout=timeout)

    def _switch(self, scenario: str, sc: Scenario) -> None:
        for command in scenario_commands(self.env, scenario):
            self.log(f"kubernetes: {scenario}: {command}")
            proc = self._shell(command, sc.ready_timeout_s)
            if proc.returncode != 0:
                raise TargetError(f"kubernetes: scenario {scenario}: `{command}` exited {proc.returncode}: "
                                  f"{proc.stderr.strip()[-2000:]}")
        self._retry_until_ok(scenario, sc.ready, sc.ready_timeout_s, "not ready")

    def _retry_until_ok(self, scenario: str, commands: list[str], timeout_s: float, state: str) -> None:
        """Run each command until it succeeds; fail naming the command once ``timeout_s`` has passed."""
        deadline = time.monotonic() + timeout_s
        for command in commands:
            pause = 0.5  # short first: most checks pass within seconds; then back off
            while True:
                proc = self._shell(command, timeout_s)
                if proc.returncode == 0:
                    break
                if time.monotonic() > deadline:
                    raise TargetError(f"kubernetes: scenario {scenario} {state} after {timeout_s:g} s: "
                                      f"`{command}` exited {proc.returncode}: {proc.stderr.strip()[-2000:]}")
                time.sleep(pause)
                pause = min(pause * 2, 5)

    def _record(self, sc: Scenario) -> dict[str, str]:
        out = {}
        for key, command in sc.record.items():
            proc = self._shell(command, 120)
            out[key] = proc.stdout.strip() if proc.returncode == 0 else f"(failed: {proc.stderr.strip()[-200:]})"
        return out

    def _node_facts(self, client_node: str, server_node: str) -> dict:
        """What the API says of both pods' nodes, recorded with every run. Nodes with the same
        boot ID share one kernel, and so their CPUs: per-side CPU is then not per machine."""
        facts = {}
        for name in dict.fromkeys((client_node, server_node)):
            node = self.core.read_node(name)
            info = node.status.node_info
            facts[name] = {"pod_cidrs": node.spec.pod_cidrs or [node.spec.pod_cidr],
                           "kernel": info.kernel_version, "kubelet": info.kubelet_version,
                           "container_runtime": info.container_runtime_version, "os_image": info.os_image,
                           "boot_id": info.boot_id,
                           "addresses": {a.type: a.address for a in node.status.addresses or []}}
        shared = client_node != server_node and facts[client_node]["boot_id"] == facts[server_node]["boot_id"]
        return {"nodes": facts, "nodes_share_kernel": client_node == server_node or shared}

    def _start_pod(self, manifest: dict):
        k = _k8s()
        name = manifest["metadata"]["name"]
        try:
            self.core.create_namespaced_pod(self.namespace, manifest)
        except k.client.ApiException as exc:
            raise TargetError(f"kubernetes: cannot create pod {name}: {_reason(exc)}") from None
        deadline = time.monotonic() + self.settings.pod_ready_timeout_s
        while time.monotonic() < deadline:
            pod = self.core.read_namespaced_pod(name, self.namespace)
            if _is_ready(pod):
                return pod
            if pod.status.phase in ("Failed", "Succeeded"):
                break
            time.sleep(0.3)
        raise TargetError(f"kubernetes: pod {self.namespace}/{name} did not become ready within "
                          f"{self.settings.pod_ready_timeout_s:g} s (phase {pod.status.phase})\n"
                          + self._events(name))

    def _events(self, pod: str) -> str:
        events = self.core.list_namespaced_event(self.namespace, field_selector=f"involvedObject.name={pod}").items
        lines = [f"  {e.type} {e.reason}: {e.message}" for e in events]
        return "pod events:\n" + ("\n".join(lines) if lines else "  (none)")

    def _remove_scenario_objects(self) -> None:
        k = _k8s()
        for proc in self._servers:
            proc.kill()
        self._servers.clear()
        if self._active is None:
            return
        name = _name(self._active)
        for role in ("client", "server"):
            try:
                self.core.delete_namespaced_pod(f"{name}-{role}", self.namespace, grace_period_seconds=0)
            except k.client.ApiException as exc:
                if exc.status != 404:  # a pod that failed to start may not exist
                    raise
        self._delete_services(self._active)
        self._active = None

    # -- services -----------------------------------------------------------------
    def _create_services(self, scenario: str, count: int, server_ip: str) -> tuple[str, dict]:
        """The benchmark Service and count-1 fillers; returns its ClusterIP and what to record."""
        ports = service_ports(self.servers)
        manifests = [service_manifest(scenario, self.campaign, ports, filler=i) for i in range(count)]
        start = time.monotonic()
        created = []
        with ThreadPoolExecutor(SERVICE_WORKERS) as pool:
            for svc in pool.map(self._create_service, manifests):
                created.append(svc)
                if count > 1 and (len(created) % 100 == 0 or len(created) == count):
                    self.log(f"kubernetes: {scenario}: {len(created)}/{count} Services created "
                             f"({time.monotonic() - start:.1f} s)")
        create_s = time.monotonic() - start
        self._wait_endpoint_slices(scenario, {m["metadata"]["name"] for m in manifests}, server_ip, start)
        return created[0].spec.cluster_ip, {
            "services": count, "services_create_s": round(create_s, 3),
            "services_endpointslices_s": round(time.monotonic() - start, 3)}

    def _create_service(self, manifest: dict):
        k = _k8s()
        try:
            return self.core.create_namespaced_service(self.namespace, manifest)
        except k.client.ApiException as exc:
            raise TargetError(f"kubernetes: cannot create Service {manifest['metadata']['name']}: "
                              f"{_reason(exc)}") from None

    def _wait_endpoint_slices(self, scenario: str, names: set[str], server_ip: str, start: float) -> None:
        """Until every Service in ``names`` has an EndpointSlice with the server pod's address."""
        k = _k8s()
        discovery = k.client.DiscoveryV1Api(self._api)
        deadline = start + self.settings.pod_ready_timeout_s
        last_log = time.monotonic()
        while True:
            covered, token = set(), None
            while True:  # paged: a thousand slices in one answer is a large response
                page = discovery.list_namespaced_endpoint_slice(
                    self.namespace, label_selector=SERVICE_NAME_LABEL, limit=500, _continue=token)
                covered |= {s.metadata.labels.get(SERVICE_NAME_LABEL) for s in page.items
                            if any(server_ip in e.addresses for e in s.endpoints or [])}
                token = page.metadata._continue
                if not token:
                    break
            missing = names - covered
            if not missing:
                return
            if time.monotonic() > deadline:
                raise TargetError(f"kubernetes: {scenario}: {len(missing)} of {len(names)} Services have no "
                                  f"EndpointSlice with the server pod ({server_ip}) after "
                                  f"{self.settings.pod_ready_timeout_s:g} s, e.g. {sorted(missing)[:3]}")
            if time.monotonic() - last_log > 5:
                self.log(f"kubernetes: {scenario}: EndpointSlices for {len(names) - len(missing)}/{len(names)} "
                         f"Services ({time.monotonic() - start:.1f} s)")
                last_log = time.monotonic()
            time.sleep(0.2)

    def _delete_services(self, scenario: str | None) -> None:
        """Every Service of a scenario, one request each: older API servers have no delete-collection
        for Services (1.34 has)."""
        if scenario is None or self.env.scenarios[scenario].placement != "service":
            return
        k = _k8s()
        names = [s.metadata.name for s in self.core.list_namespaced_service(
            self.namespace, label_selector=f"{LABEL_SCENARIO}={_name(scenario)}").items]

        def delete(name: str) -> None:
            try:
                self.core.delete_namespaced_service(name, self.namespace)
            except k.client.ApiException as exc:
                if exc.status != 404:
                    raise

        start = time.monotonic()
        with ThreadPoolExecutor(SERVICE_WORKERS) as pool:
            list(pool.map(delete, names))
        if len(names) > 1:
            self.log(f"kubernetes: {scenario}: {len(names)} Services deleted ({time.monotonic() - start:.1f} s)")

    def _side_cpus(self, client_node: str, server_node: str) -> tuple[list[int], list[int]]:
        if self.env.cpus:
            return self.env.cpus.client, self.env.cpus.server
        # default: every CPU of each side's node
        return (sorted(self.cpu_snapshot_of(client_node).counters),
                sorted(self.cpu_snapshot_of(server_node).counters))

    def _start_server(self, pod: str, server: collectors.Server, cpus: list[int]) -> None:
        proc = ExecProcess(self, pod, ["taskset", "-c", ",".join(map(str, cpus)), *server.argv])
        self._servers.append(proc)

        def ss(argv: list[str]) -> str:
            rc, out, _ = self.exec(pod, argv)
            return out if rc == 0 else ""

        wait_listening(server, proc, ss, "kubernetes", f"in pod {pod}", lambda: "".join(proc.communicate()),
                       timeout_s=15, poll_s=0.2)

    # -- what the runner uses --------------------------------------------------------
    def placement(self, scenario: str) -> Placement:
        return self.placements[scenario]

    def spawn(self, scenario: str, side: str, argv: list[str]) -> ExecProcess:
        return ExecProcess(self, self.placements[scenario].details[f"{side}_pod"], argv)

    def cpu_snapshot_of(self, node: str) -> cpu.Snapshot:
        return cpu.take(self._check(self._cpu_pods[node], ["cat", "/proc/stat"]))

    def cpu_snapshot(self, scenario: str, side: str) -> cpu.Snapshot:
        pl = self.placements[scenario]
        return self.cpu_snapshot_of(pl.client_node if side == "client" else pl.server_node)

    def agent_usage(self) -> dict:
        """CPU and memory of the CNI agent pods from the metrics API, or why they are absent."""
        agent = self.settings.cni_agent
        if agent is None:
            return {"absent": "no cni_agent configured for this environment"}
        k = _k8s()
        try:
            data = k.client.CustomObjectsApi(self._api).list_namespaced_custom_object(
                "metrics.k8s.io", "v1beta1", agent["namespace"], "pods", label_selector=agent["selector"])
        except k.client.ApiException as exc:
            return {"absent": f"metrics API: {_reason(exc)}"}
        return {item["metadata"]["name"]: {c["name"]: c["usage"] for c in item["containers"]}
                for item in data.get("items", [])} or {"absent": "no agent pods matched"}

    def describe(self) -> dict:
        pod = next(iter(self._cpu_pods.values()))
        versions = {"kernel": self._check(pod, ["uname", "-r"]).strip(), "kubernetes": self.server_version}
        return {"target": "kubernetes", "context": self.settings.context, "namespace": self.namespace,
                "image": self.settings.image, "versions": versions,
                "clk_tck": int(self._check(pod, ["getconf", "CLK_TCK"]).strip())}


def _is_ready(pod) -> bool:
    return pod.status.phase == "Running" and any(
        c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _reason(exc: Exception) -> str:
    """An API error's message without its headers (which may carry tokens)."""
    body = getattr(exc, "body", None)
    if body:
        try:
            import json
            return f"{exc.status} {json.loads(body).get('message', body)}"
        except ValueError:
            return f"{getattr(exc, 'status', '')} {body}"
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
