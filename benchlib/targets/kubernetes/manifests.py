"""What the Kubernetes target applies, as plain dicts: pure builders.

Every object carries ``benchlib.io/session=<id>``, the id of one target
session (one `benchlib collect` on one environment), and a role; pods and
Services also name their scenario. `render` lists them all, in order, for
`benchlib render` and for the dry-run test against a real API server.
"""

from __future__ import annotations

import re
import shlex

from ...collectors import Server
from ...settings.environment import Environment
from ...settings.project import environment_dir
from ...settings.scenarios import KubernetesScenario, KubernetesSettings
from .. import TargetError, service_ports
from ..mesh.shapes import MTLS_MESHES, NODE_MESHES, Proxy
from . import sidecars

LABEL_SESSION = "benchlib.io/session"
LABEL_OWNER = "benchlib.io/owner"
LABEL_ROLE = "benchlib.io/role"
LABEL_SCENARIO = "benchlib.io/scenario"
HELM_TIMEOUT = "15m"  # a CNI rollout on a large node group
NAME_MAX = 40  # scenario part of an object name (names are at most 63 characters)
FILLER = "filler"  # the role label of the filler Services and their EndpointSlices
SERVICE_NAME_LABEL = "kubernetes.io/service-name"  # which Service an EndpointSlice serves
MANAGED_BY_LABEL = "endpointslice.kubernetes.io/managed-by"
MANAGED_BY = "benchlib"  # the fillers' slices: the EndpointSlice controller leaves them alone
# a filler's one endpoint: in the benchmark range (RFC 2544) and outside every range of the local
# cluster's address plan (targets/lab/addresses.py), never a pod, node or Service address
FILLER_ADDRESS = "198.18.63.254"
FILLER_PORT = 80


# the benchmark container of every pod the target creates: exec names it, because a mesh's
# injected sidecar makes a pod hold more than one container
CONTAINER = "bench"


def object_name(scenario: str) -> str:
    return re.sub(r"[^a-z0-9-]", "-", scenario.lower())[:NAME_MAX].strip("-")


def pod_name(scenario: str, role: str) -> str:
    return f"{object_name(scenario)}-{role}"


def kubernetes_settings(env: Environment) -> KubernetesSettings:
    """The environment's kubernetes: section, which a kubernetes target's environment has."""
    if env.kubernetes is None:
        raise TargetError(f"environment {env.name}: target kubernetes needs a kubernetes: section")
    return env.kubernetes


def namespace_name(env: Environment, session: str) -> str:
    return f"{kubernetes_settings(env).namespace_prefix}-{session}"


def scenario_commands(env: Environment, scenario: str) -> list[str]:
    """The shell commands that switch the cluster to a scenario: its commands, then helm."""
    sc = KubernetesScenario.of(env, scenario)
    commands = list(sc.apply)
    if sc.helm:
        h = sc.helm
        argv = [
            "helm",
            "upgrade",
            "--install",
            h.release,
            h.chart,
            "--version",
            h.version,
            "--namespace",
            h.namespace,
            "--values",
            h.values,
            "--wait",
            "--timeout",
            HELM_TIMEOUT,
        ]
        if h.repo:
            argv += ["--repo", h.repo]
        commands.append(" ".join([shlex.join(argv), *h.extra_args]))
    return commands


def pod_manifest(
    env: Environment, scenario: str, role: str, session: str, servers: list[Server], server_node: str | None = None
) -> dict:
    """The client or server pod of a scenario. The client of a same-node
    scenario follows the server (``server_node`` once known, else pod affinity)."""
    k = kubernetes_settings(env)
    sc = KubernetesScenario.of(env, scenario)
    labels = {LABEL_SESSION: session, LABEL_ROLE: role, LABEL_SCENARIO: object_name(scenario)}
    ports = [{"containerPort": s.port, "protocol": s.protocol.upper()} for s in servers] if role == "server" else []
    spec: dict = {
        "containers": [
            {
                "name": CONTAINER,
                "image": k.image,
                "imagePullPolicy": k.image_pull_policy,
                "command": ["sleep", "infinity"],
                "ports": ports,
            }
        ],
        "terminationGracePeriodSeconds": 1,
        "restartPolicy": "Never",
        "nodeSelector": dict(k.node_selector),
    }
    if sc.placement == "host-network":
        spec["hostNetwork"] = True
        spec["dnsPolicy"] = "ClusterFirstWithHostNet"
    other = {
        "matchLabels": {
            LABEL_SESSION: session,
            LABEL_SCENARIO: object_name(scenario),
            LABEL_ROLE: "server" if role == "client" else "client",
        }
    }
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
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": pod_name(scenario, role), "labels": labels},
        "spec": spec,
    }
    proxy = sidecars.proxy_of(mesh_plan(env, scenario, servers), role)
    if proxy is None:
        return pod
    cpus = (env.cpus.client if role == "client" else env.cpus.server) if env.cpus else None
    mtls = sc.mesh in MTLS_MESHES
    return sidecars.inject(pod, object_name(scenario), proxy, k.image, k.image_pull_policy, cpus, mtls)


def mesh_plan(env: Environment, scenario: str, servers: list[Server]) -> list[Proxy]:
    """The scenario's proxies, sidecars or node proxies (none without a mesh)."""
    sc = KubernetesScenario.of(env, scenario)
    if not sc.mesh:
        return []
    pods = {role: pod_name(scenario, role) for role in ("client", "server")}
    return sidecars.plan(sc.mesh, object_name(scenario), pods, sidecars.http_ports(servers))


def mesh_configmap(
    env: Environment, scenario: str, session: str, servers: list[Server], pod_subnets: dict[int, str] | None = None
) -> dict:
    """The ConfigMap of the scenario's proxies: their bootstraps and capture rules (node proxies': for
    the ``pod_subnets`` of the client's (1) and the server's (2) node)."""
    sc = KubernetesScenario.of(env, scenario)
    return sidecars.configmap_manifest(
        object_name(scenario),
        _mesh_labels(scenario, session),
        mesh_plan(env, scenario, servers),
        sidecars.http_ports(servers),
        sc.mesh in MTLS_MESHES,
        pod_subnets,
    )


def _mesh_labels(scenario: str, session: str) -> dict:
    return {LABEL_SESSION: session, LABEL_ROLE: "mesh", LABEL_SCENARIO: object_name(scenario)}


def node_proxy_pods(env: Environment, scenario: str, session: str, servers: list[Server], nodes: dict[int, str]):
    """The node proxy pods of a node-proxy mesh, on the client's (1) and the server's (2) node."""
    k = kubernetes_settings(env)
    cpus = {1: env.cpus.client, 2: env.cpus.server} if env.cpus else {1: None, 2: None}
    return [
        sidecars.node_proxy_pod(
            object_name(scenario),
            _mesh_labels(scenario, session),
            proxy,
            nodes[i],
            k.image,
            k.image_pull_policy,
            cpus[i],
        )
        for i, proxy in ((int(p.name.removeprefix("node")), p) for p in mesh_plan(env, scenario, servers))
    ]


def mesh_secret(scenario: str, session: str, proxy: Proxy, files: dict[str, str]) -> dict:
    """The Secret of one sidecar's certificate files (``files``: name -> PEM text)."""
    return sidecars.secret_manifest(object_name(scenario), _mesh_labels(scenario, session), proxy, files)


def service_manifest(scenario: str, session: str, ports: list[tuple[int, str]]) -> dict:
    """The benchmark Service of a scenario: its server pod behind every server port."""
    name = object_name(scenario)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": f"{name}-server",
            "labels": {LABEL_SESSION: session, LABEL_SCENARIO: name, LABEL_ROLE: "service"},
        },
        "spec": {
            "type": "ClusterIP",
            "selector": {LABEL_SESSION: session, LABEL_SCENARIO: name, LABEL_ROLE: "server"},
            "ports": [
                {"name": f"{proto}-{p}", "port": p, "targetPort": p, "protocol": proto.upper()} for p, proto in ports
            ],
        },
    }


def fillers_for(placement: str | None, services: int | None) -> int:
    """How many fillers a scenario needs (targets/kubernetes/services.py): its Service count less
    its benchmark Service; none without a Service count."""
    return max((services or 1) - 1, 0) if placement == "service" else 0


def filler_name(index: int) -> str:
    return f"fill-{index}"


def filler_manifests(session: str, index: int) -> tuple[dict, dict]:
    """Filler ``index``'s Service (no selector: its endpoint is written, not selected) and its
    EndpointSlice (owned by the Service once it exists)."""
    name = filler_name(index)
    labels = {LABEL_SESSION: session, LABEL_ROLE: FILLER}
    port = {"name": f"tcp-{FILLER_PORT}", "port": FILLER_PORT, "protocol": "TCP"}
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "labels": labels},
        "spec": {"type": "ClusterIP", "ports": [{**port, "targetPort": FILLER_PORT}]},
    }
    endpoints = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": name,
            "labels": {**labels, SERVICE_NAME_LABEL: name, MANAGED_BY_LABEL: MANAGED_BY},
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": [FILLER_ADDRESS], "conditions": {"ready": True}}],
        "ports": [port],
    }
    return service, endpoints


def cpu_daemonset(env: Environment, session: str) -> dict:
    """hostPID pods on every node; /proc/stat inside them is the node's. On the host network, so
    that they outlive a CNI switch between scenarios (and never depend on the network measured)."""
    labels = {LABEL_SESSION: session, LABEL_ROLE: "cpu"}
    k = kubernetes_settings(env)
    pod = {
        "hostPID": True,
        "hostNetwork": True,
        "terminationGracePeriodSeconds": 1,
        "tolerations": [{"operator": "Exists"}],
        "containers": [
            {
                "name": CONTAINER,
                "image": k.image,
                "imagePullPolicy": k.image_pull_policy,
                "command": ["sleep", "infinity"],
            }
        ],
    }
    if k.node_selector:
        pod["nodeSelector"] = dict(k.node_selector)
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "benchlib-cpu", "labels": labels},
        "spec": {"selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels}, "spec": pod}},
    }


def namespace_labels_patch(previous: dict[str, str], labels: dict[str, str]) -> dict:
    """The namespace patch that removes the previous scenario's labels and sets this one's
    (a service mesh's injection label, e.g. istio-injection: enabled)."""
    return {"metadata": {"labels": {**{key: None for key in previous}, **labels}}}


def namespace_manifest(env: Environment, session: str, owner: str) -> dict:
    # hostNetwork and hostPID pods need the privileged Pod Security level
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": namespace_name(env, session),
            "labels": {LABEL_SESSION: session, LABEL_OWNER: owner, "pod-security.kubernetes.io/enforce": "privileged"},
        },
    }


# the nodes `render` shows for node proxies, which are placed only once the benchmark pods are
RENDERED_NODES = {1: "<the client's node>", 2: "<the server's node>"}


def render(env: Environment, scenarios: list[str], servers: list[Server]) -> list[tuple[str, object]]:
    """Everything the target would apply, in order, as (title, manifest or command)."""
    out: list[tuple[str, object]] = [
        ("namespace", namespace_manifest(env, "<id>", "<host>.<pid>")),
        ("daemonset", cpu_daemonset(env, "<id>")),
    ]
    for name in scenarios:
        sc = KubernetesScenario.of(env, name)
        for command in scenario_commands(env, name):
            out.append((f"{name}: apply", command))
        if sc.namespace_labels:  # a patch of the namespace above, as kubectl would put it
            labels = " ".join(f"{k}={v}" for k, v in sc.namespace_labels.items())
            out.append(
                (
                    f"{name}: namespace labels, set before its pods are created and removed after",
                    f"kubectl label namespace {namespace_name(env, '<id>')} {labels} --overwrite",
                )
            )
        if sc.helm:
            out.append((f"{name}: helm values {sc.helm.values}", (environment_dir(env.name) / sc.helm.values)))
        for command in sc.ready:
            out.append((f"{name}: ready when", command))
        for command in sc.programmed:
            out.append((f"{name}: programmed when", command))
        for key, command in sc.record.items():
            out.append((f"{name}: record {key}", command))
        if sc.mesh:
            subnets = (
                {i: f"<pod CIDR of {node[1:-1]}>" for i, node in RENDERED_NODES.items()}
                if sc.mesh in NODE_MESHES
                else None
            )
            out.append((f"{name}: mesh config", mesh_configmap(env, name, "<id>", servers, subnets)))
            if sc.mesh in MTLS_MESHES:
                for proxy in mesh_plan(env, name, servers):
                    files = {
                        f: "<generated per campaign>"
                        for f in ("ca.crt", f"{proxy.identity}.crt", f"{proxy.identity}.key")
                    }
                    out.append((f"{name}: mesh certificates of {proxy.name}", mesh_secret(name, "<id>", proxy, files)))
        out.append((f"{name}: server pod", pod_manifest(env, name, "server", "<id>", servers)))
        out.append((f"{name}: client pod", pod_manifest(env, name, "client", "<id>", servers)))
        if sc.mesh in NODE_MESHES:
            for pod in node_proxy_pods(env, name, "<id>", servers, RENDERED_NODES):
                out.append((f"{name}: node proxy pod, once both pods are placed", pod))
        if sc.placement == "service":
            out.append((f"{name}: service", service_manifest(name, "<id>", service_ports(servers))))
        fillers = fillers_for(sc.placement, sc.services if isinstance(sc.services, int) else None)
        if fillers:  # (a list of counts was expanded into scenarios on load)
            service, endpoints = filler_manifests("<id>", 1)
            what = f"{fillers} like this one, {filler_name(1)} to {filler_name(fillers)}, kept across scenarios"
            out.append((f"{name}: filler services: {what}", service))
            out.append((f"{name}: their EndpointSlices, each owned by its Service", endpoints))
    return out
