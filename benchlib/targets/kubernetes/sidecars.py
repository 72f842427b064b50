"""Envoy as each benchmark pod's sidecar, as Istio injects it, or as each node's proxy, as Istio's
ambient mode runs ztunnel (pure builders).

The mesh shapes and Envoy bootstraps are the lab's own (`mesh.shapes`, `mesh.envoy`); on a
cluster they travel as objects of the scenario:

- a ConfigMap ``<scenario>-mesh``: each proxy's bootstrap and its capture rules
  (iptables-restore input, `shapes.capture_rules`);
- per proxy of an mTLS shape, a Secret ``<scenario>-<proxy>-tls``: the campaign's CA certificate and
  that proxy's own certificate and key, nothing of the other proxy's;
- in the pod, Istio's two containers: ``mesh-init``, an init container with NET_ADMIN and NET_RAW
  that installs the capture rules in the pod's network namespace and copies the certificate files,
  owned by the proxy's uid (key mode 0600), to a memory-backed volume only the pod sees; and
  ``envoy``, a native sidecar (an init container with ``restartPolicy: Always``, as Istio injects
  it where Kubernetes has them) running as uid 1337, so the capture rule spares its own
  connections. Kubernetes starts the benchmark container once Envoy's startup probe passes, and
  restarts a sidecar that dies, as it would Istio's.

Node proxies (``node-proxies-mtls``) run in a host-network pod per node, Envoy as its native sidecar
and a ``mesh-capture`` container that holds the node's capture rules (`node_capture_rules`, in a
chain of their own) while it runs and removes them when stopped: unlike a pod's, the node's network
namespace outlives the scenario.

Envoy's admin interface listens on the pod's loopback, port 15000 (Istio's): the target reads it
through the exec API with the image's busybox wget, in the sidecar's own container, where Envoy is
process 1 and its /proc entries (CPU, peak RSS) are at hand. A unix socket would need a tool to
speak HTTP over it that the image lacks; the loopback is outside both capture rules (the client's
spares ``lo``, the server's takes only what arrives on ``eth0``).
"""

from __future__ import annotations

import json
from pathlib import Path

from ..mesh import envoy, shapes

SIDECAR = "envoy"  # the sidecar container's name (exec and logs name it)
INIT = "mesh-init"
ADMIN_PORT = 15000  # Istio's
CONFIG_DIR = "/etc/benchlib-mesh/config"
SECRET_DIR = "/etc/benchlib-mesh/secret"
TLS_DIR = "/etc/benchlib-mesh/tls"
BOOTSTRAP, RULES = "envoy.json", "capture.rules"
STARTUP_PERIOD_S, STARTUP_FAILURES = 1, 60
CLUSTER_NAME = "benchlib-kubernetes"  # Envoy's node cluster, in its stats and logs
SEPARATOR = "--benchlib--"  # between the parts of `usage_script`'s output
NET_CAPABILITIES = ["NET_ADMIN", "NET_RAW"]  # iptables in a network namespace
CAPTURE = "mesh-capture"  # a node proxy pod's container that holds its node's capture rules
NODE_CHAIN = "BENCHLIB-MESH"
# a node proxy's count of the connections its rules captured (its outbound listener's tcp_proxy)
NODE_CAPTURED = "tcp.outbound_hbone.downstream_cx_total"
# removes a node proxy's rules from its node (the node's network namespace outlives the pod)
NODE_CLEANUP = (
    f"while iptables -t nat -D PREROUTING -j {NODE_CHAIN} 2>/dev/null; do :; done; "
    f"iptables -t nat -F {NODE_CHAIN} 2>/dev/null; "
    f"iptables -t nat -X {NODE_CHAIN} 2>/dev/null; true"
)
NODE_GRACE_S = 10  # a node proxy pod's capture container removes its rules when told to stop


def http_ports(servers) -> list[int]:
    """The ports the sidecars parse as HTTP: those the servers declare as HTTP (`Server.l7`)."""
    return sorted({s.port for s in servers if s.l7 == "http"})


def node_pod_name(object_name: str, i: int) -> str:
    """The node proxy pod on the client's (1) or the server's (2) node."""
    return f"{object_name}-node{i}"


def plan(mesh: str, object_name: str, pods: dict[str, str], ports: list[int]) -> list[shapes.Proxy]:
    """The scenario's proxies (`shapes.proxies`); ``pods``: the client and server pod names. A proxy's
    "namespace" is the pod it runs in: its sidecar's pod, or its node proxy pod."""
    nodes = {i: node_pod_name(object_name, i) for i in (1, 2)}
    return shapes.proxies(mesh, nodes, {1: pods["client"], 2: pods["server"]}, ports)


def proxy_of(proxies: list[shapes.Proxy], role: str) -> shapes.Proxy | None:
    """The sidecar of the client or server pod, if the shape gives it one (node proxies run in pods of
    their own)."""
    return next((p for p in proxies if p.name == f"{role}-sidecar"), None)


def configmap_name(object_name: str) -> str:
    return f"{object_name}-mesh"


def secret_name(object_name: str, proxy: shapes.Proxy) -> str:
    return f"{object_name}-{proxy.name}-tls"


def bootstrap(proxy: shapes.Proxy, mtls: bool) -> dict:
    """The sidecar's bootstrap: the lab's builder, its admin on the pod's loopback, its files where the
    init container put them."""
    return envoy.bootstrap(proxy, envoy.admin_loopback(ADMIN_PORT), Path(TLS_DIR) if mtls else None, CLUSTER_NAME)


def configmap_manifest(
    object_name: str,
    labels: dict,
    proxies: list[shapes.Proxy],
    ports: list[int],
    mtls: bool,
    pod_subnets: dict[int, str] | None = None,
) -> dict:
    """Every proxy's bootstrap (``<proxy>.json``) and capture rules (``<proxy>.rules``); node proxies'
    rules need the nodes' ``pod_subnets`` (1: the client's node, 2: the server's)."""
    data = {}
    for p in proxies:
        data[f"{p.name}.json"] = json.dumps(bootstrap(p, mtls), indent=1)
        if p.name.endswith("-sidecar"):
            data[f"{p.name}.rules"] = shapes.capture_rules(p, ports)
        else:
            if pod_subnets is None:
                raise ValueError(f"{p.name}: a node proxy's capture rules need the nodes' pod subnets")
            i = int(p.name.removeprefix("node"))
            data[f"{p.name}.rules"] = node_capture_rules(pod_subnets[i], pod_subnets[3 - i])
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": configmap_name(object_name), "labels": labels},
        "data": data,
    }


def secret_manifest(object_name: str, labels: dict, proxy: shapes.Proxy, files: dict[str, str]) -> dict:
    """The proxy's certificate files: ``files`` maps ca.crt, <identity>.crt and <identity>.key to their
    PEM text (the other proxies' files are refused: a pod gets its own key only)."""
    wanted = {"ca.crt", f"{proxy.identity}.crt", f"{proxy.identity}.key"}
    if set(files) != wanted:
        raise ValueError(f"{proxy.name}: its Secret holds {sorted(wanted)}, got {sorted(files)}")
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {"name": secret_name(object_name, proxy), "labels": labels},
        "stringData": files,
    }


def init_script(mtls: bool, capture: bool = True) -> str:
    """What ``mesh-init`` runs as root: the capture rules (a sidecar's: the pod's network namespace
    goes with the pod), then the certificate files handed to the proxy's uid (a key never readable by
    anyone else, not even for a moment: umask 077)."""
    lines = ["set -e"]
    if capture:
        lines.append(f"iptables-restore --noflush < {CONFIG_DIR}/{RULES}")
    if mtls:
        uid = shapes.PROXY_UID
        lines += [
            "umask 077",
            f'for f in {SECRET_DIR}/*; do cp -L "$f" {TLS_DIR}/; done',
            f"chown -R {uid}:{uid} {TLS_DIR}",
            f"chmod 0700 {TLS_DIR}",
            f"chmod 0600 {TLS_DIR}/*.key",
            f"chmod 0644 {TLS_DIR}/*.crt",
        ]
    return "\n".join(lines) + "\n"


def envoy_command(cpus: list[int] | None) -> list[str]:
    """Envoy in the foreground as process 1 of its container (taskset execs it), pinned to its side's
    CPUs where the environment pins the benchmark, logging to the container's log."""
    pin = ["taskset", "-c", ",".join(map(str, cpus))] if cpus else []
    return [
        *pin,
        "envoy",
        "-c",
        f"{CONFIG_DIR}/{BOOTSTRAP}",
        "--concurrency",
        str(envoy.CONCURRENCY),
        "--disable-hot-restart",
        "-l",
        "warning",
    ]


def inject(
    pod: dict,
    object_name: str,
    proxy: shapes.Proxy,
    image: str,
    pull_policy: str,
    cpus: list[int] | None,
    mtls: bool,
) -> dict:
    """``pod`` with ``proxy`` injected as Istio injects its sidecar: the init container that captures
    the pod's traffic, then Envoy as a native sidecar, ready before the benchmark container starts."""
    spec = pod["spec"]
    init, sidecar, volumes = _proxy_containers(object_name, proxy, image, pull_policy, cpus, mtls, capture=True)
    return {
        **pod,
        "spec": {
            **spec,
            "initContainers": [*spec.get("initContainers", []), init, sidecar],
            "volumes": [*spec.get("volumes", []), *volumes],
        },
    }


def _proxy_containers(
    object_name: str,
    proxy: shapes.Proxy,
    image: str,
    pull_policy: str,
    cpus: list[int] | None,
    mtls: bool,
    capture: bool,
) -> tuple[dict, dict, list[dict]]:
    """(mesh-init, the Envoy native sidecar, their volumes) of a proxy's pod."""
    config = {
        "name": "mesh-config",
        "configMap": {
            "name": configmap_name(object_name),
            "items": [
                {"key": f"{proxy.name}.json", "path": BOOTSTRAP},
                {"key": f"{proxy.name}.rules", "path": RULES},
            ],
        },
    }
    volumes = [config]
    init_mounts = [{"name": "mesh-config", "mountPath": CONFIG_DIR, "readOnly": True}]
    envoy_mounts = [{"name": "mesh-config", "mountPath": CONFIG_DIR, "readOnly": True}]
    if mtls:
        volumes += [
            {"name": "mesh-secret", "secret": {"secretName": secret_name(object_name, proxy), "defaultMode": 0o400}},
            {"name": "mesh-tls", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
        ]
        init_mounts += [
            {"name": "mesh-secret", "mountPath": SECRET_DIR, "readOnly": True},
            {"name": "mesh-tls", "mountPath": TLS_DIR},
        ]
        envoy_mounts.append({"name": "mesh-tls", "mountPath": TLS_DIR, "readOnly": True})
    uid = shapes.PROXY_UID
    init = {
        "name": INIT,
        "image": image,
        "imagePullPolicy": pull_policy,
        "command": ["sh", "-c", init_script(mtls, capture)],
        "securityContext": {"runAsUser": 0, **({"capabilities": {"add": NET_CAPABILITIES}} if capture else {})},
        "volumeMounts": init_mounts,
    }
    sidecar = {
        "name": SIDECAR,
        "image": image,
        "imagePullPolicy": pull_policy,
        "restartPolicy": "Always",  # a native sidecar: up before the benchmark container, restarted if it dies
        "command": envoy_command(cpus),
        "securityContext": {
            "runAsUser": uid,
            "runAsGroup": uid,
            "runAsNonRoot": True,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        },
        # Envoy's own readiness (its listeners are up); a startup probe only, so no probe execs into
        # the pod while runs measure
        "startupProbe": {
            "exec": {"command": ["wget", "-q", "-O", "/dev/null", f"http://127.0.0.1:{ADMIN_PORT}/ready"]},
            "periodSeconds": STARTUP_PERIOD_S,
            "failureThreshold": STARTUP_FAILURES,
        },
        "volumeMounts": envoy_mounts,
    }
    return init, sidecar, volumes


def node_capture_rules(own: str, other: str) -> str:
    """iptables-restore input (nat table) for a node proxy in its node's network namespace, in a chain
    of its own (`NODE_CLEANUP` removes it): TCP from this node's pods to the other node's, to the
    proxy's outbound listener; HBONE tunnels to this node's pods (port 15008), to its tunnel's end.
    Traffic between pods of one node, and every other connection of the node, is left alone."""
    chain = NODE_CHAIN
    return (
        "\n".join(
            [
                "*nat",
                f":{chain} - [0:0]",
                f"-A PREROUTING -j {chain}",
                f"-A {chain} -p tcp -s {own} -d {other} -j REDIRECT --to-ports {shapes.OUTBOUND_TCP}",
                f"-A {chain} -p tcp -d {own} --dport {shapes.TUNNEL} -j REDIRECT --to-ports {shapes.TUNNEL}",
                "COMMIT",
            ]
        )
        + "\n"
    )


def capture_script() -> str:
    """The node proxy pod's capture container: its rules in the node's nat table while it runs (after
    Envoy is ready: it starts after the native sidecar), removed when it is told to stop."""
    return (
        "\n".join(
            [
                NODE_CLEANUP,
                f"iptables-restore --noflush < {CONFIG_DIR}/{RULES}",
                "sleep infinity & sleeper=$!",
                f"trap '{NODE_CLEANUP}; kill $sleeper; exit 0' TERM INT",
                "wait $sleeper",
            ]
        )
        + "\n"
    )


def node_proxy_pod(
    object_name: str,
    labels: dict,
    proxy: shapes.Proxy,
    node: str,
    image: str,
    pull_policy: str,
    cpus: list[int] | None,
) -> dict:
    """A node proxy (Istio ambient's ztunnel, as Envoy): a host-network pod on ``node``: Envoy as its
    native sidecar, then the container holding the node's capture rules (HBONE is always mutual TLS)."""
    init, sidecar, volumes = _proxy_containers(object_name, proxy, image, pull_policy, cpus, True, capture=False)
    capture = {
        "name": CAPTURE,
        "image": image,
        "imagePullPolicy": pull_policy,
        "command": ["sh", "-c", capture_script()],
        "securityContext": {"runAsUser": 0, "capabilities": {"add": NET_CAPABILITIES}},
        "volumeMounts": [{"name": "mesh-config", "mountPath": CONFIG_DIR, "readOnly": True}],
        # ready once the rules are in: the target measures nothing before
        "startupProbe": {
            "exec": {"command": ["iptables", "-t", "nat", "-S", NODE_CHAIN]},
            "periodSeconds": STARTUP_PERIOD_S,
            "failureThreshold": STARTUP_FAILURES,
        },
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": proxy.namespace, "labels": labels},
        "spec": {
            "hostNetwork": True,
            "dnsPolicy": "ClusterFirstWithHostNet",
            "nodeSelector": {"kubernetes.io/hostname": node},
            "tolerations": [{"operator": "Exists"}],
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": NODE_GRACE_S,
            "initContainers": [init, sidecar],
            "containers": [capture],
            "volumes": volumes,
        },
    }


def usage_script(reset_peak: bool) -> str:
    """What the target runs in the sidecar's container at each edge of a run's CPU window: Envoy's
    (process 1's) /proc stat and status, then the byte counters of its clusters; with ``reset_peak``
    the peak RSS is reset afterwards, as the lab does."""
    lines = [
        "set -e",
        "cat /proc/1/stat",
        f"echo {SEPARATOR}",
        "cat /proc/1/status",
        f"echo {SEPARATOR}",
        f"wget -q -O - 'http://127.0.0.1:{ADMIN_PORT}/stats?filter=upstream_cx_.x_bytes_total'",
    ]
    if reset_peak:
        lines.append("echo 5 > /proc/1/clear_refs")
    return "\n".join(lines) + "\n"


def parse_usage(text: str) -> dict:
    """(`usage_script`'s output) -> cpu_ticks, peak_rss_kib, bytes, and ``started``: Envoy's start
    time in ticks since boot, which changes when Kubernetes restarted the sidecar."""
    parts = text.split(SEPARATOR + "\n")
    if len(parts) != 3:
        raise ValueError(f"expected /proc/1/stat, /proc/1/status and /stats, got {text[:300]!r}")
    stat, status, stats = parts
    comm = stat[stat.index("(") + 1 : stat.rindex(")")]
    if comm != "envoy":
        raise ValueError(f"process 1 of the sidecar is {comm!r}, not envoy")
    started = int(stat.rsplit(")", 1)[1].split()[19])  # starttime, field 22 of proc(5)
    return {
        **shapes.process_usage(stat, status),
        "bytes": envoy.bytes_carried(envoy.parse_stats(stats)),
        "started": started,
    }
