"""Service-mesh shapes: which proxies stand where, what they listen on and
connect to, and the capture rules that bring a pod's traffic to them (pure).
The lab runs every shape, with HAProxy or Envoy; the Kubernetes target runs
the sidecar shapes with Envoy.

Five shapes (`Scenario.mesh`):

- ``server-sidecar``: the server pod's inbound TCP is redirected to a proxy
  in that pod, which connects to the server on 127.0.0.1 (one hop);
- ``sidecars``: the client pod's outbound TCP is redirected to its own proxy
  (an OUTPUT rule sparing the proxy's uid, as Istio's init container
  installs), which connects to the original destination, where the server
  sidecar catches it (two hops);
- ``sidecars-mtls``: the same with mutual TLS between the two proxies;
- ``node-proxies-mtls``: no sidecars; each node's proxy catches its pods'
  traffic to the other node's pods and carries it over mutual TLS to the
  other node's proxy (Istio ambient's ztunnel, L4 only);
- ``node-proxies-waypoint``: the node proxies of ``node-proxies-mtls``, but
  the client node's proxy tunnels to a waypoint (Istio ambient's L7 proxy,
  on the server's node at an address of its own), which ends the tunnel,
  parses HTTP, and tunnels again to the server's node proxy (Envoy only:
  the tunnels are HBONE).

Sidecars parse HTTP on the ports a server declares as HTTP (`Server.l7`), as
Envoy does; everything else is forwarded as TCP.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...vocabulary.meshes import MESHES, MTLS_MESHES, NODE_MESHES  # noqa: F401 (the shapes' names; targets read them here)

PROXY_UID = 1337  # Istio's proxy uid: the client pod's capture rule spares this uid's own connections
OUTBOUND_TCP, OUTBOUND_HTTP = 15001, 15002  # Istio captures outbound on 15001
INBOUND_TCP, INBOUND_HTTP = 15006, 15007  # ... and inbound on 15006
TUNNEL = 15008  # ztunnel's node-to-node (HBONE) port
# The waypoint's address: in the server node's pod subnet, as a waypoint pod on that node would have
WAYPOINT_IP = "198.19.2.200"


@dataclass(frozen=True)
class Listener:
    """One frontend: where it listens, what it parses, and where it connects.

    ``upstream`` "0.0.0.0" is the connection's original destination (behind a
    tunnel's end: the CONNECT authority); any other address keeps only the
    original port, or, for an HBONE tunnel, is the peer whose port 15008 it
    opens (the waypoint)."""

    name: str
    port: int
    mode: str  # "tcp" or "http"
    upstream: str
    tls_in: bool = False  # terminate mutual TLS (the peer must show a certificate of the lab's CA)
    tls_out: str | None = None  # originate mutual TLS; the identity the peer's certificate must carry
    address: str = "0.0.0.0"  # where it listens: every address of its namespace, or one of its own


@dataclass(frozen=True)
class Proxy:
    """One proxy process: which pod or node it serves and whose CPUs it runs on."""

    name: str  # client-sidecar, server-sidecar, node1, node2
    side: str  # client or server
    namespace: str
    listeners: tuple[Listener, ...]
    identity: str  # the subject of its certificate (mTLS shapes)
    http_ports: tuple[int, ...] = ()  # a waypoint parses HTTP on these destination ports


def proxies(mesh: str, nodes: dict[int, str], pods: dict[int, str], http_ports: list[int]) -> list[Proxy]:
    """The proxies of a mesh shape (pure)."""
    mtls = mesh == "sidecars-mtls"
    if mesh in NODE_MESHES:
        # each node proxy does both directions for its own pods, as ztunnel does
        node_proxies = [
            Proxy(
                f"node{i}",
                "client" if i == 1 else "server",
                nodes[i],
                (
                    Listener("outbound", OUTBOUND_TCP, "tcp", "0.0.0.0", tls_out=f"node{3 - i}"),
                    Listener("inbound", TUNNEL, "tcp", "0.0.0.0", tls_in=True),
                ),
                f"node{i}",
            )
            for i in nodes
        ]
        if mesh == "node-proxies-mtls":
            return node_proxies
        # the client's node tunnels to the waypoint, which tunnels on to the server's node; the waypoint
        # starts before the server's node proxy, which listens on the same port in the same namespace
        client_node = Proxy(
            "node1",
            "client",
            nodes[1],
            (Listener("outbound", OUTBOUND_TCP, "tcp", WAYPOINT_IP, tls_out="waypoint"), node_proxies[0].listeners[1]),
            "node1",
        )
        waypoint = Proxy(
            "waypoint",
            "server",
            nodes[2],
            (Listener("inbound", TUNNEL, "http", "0.0.0.0", tls_in=True, tls_out="node2", address=WAYPOINT_IP),),
            "waypoint",
            tuple(http_ports),
        )
        return [client_node, waypoint, node_proxies[1]]
    server = Proxy(
        "server-sidecar",
        "server",
        pods[2],
        (
            Listener("inbound_tcp", INBOUND_TCP, "tcp", "127.0.0.1", tls_in=mtls),
            *([Listener("inbound_http", INBOUND_HTTP, "http", "127.0.0.1", tls_in=mtls)] if http_ports else []),
        ),
        "server-sidecar",
    )
    if mesh == "server-sidecar":
        return [server]
    peer = "server-sidecar" if mtls else None
    client = Proxy(
        "client-sidecar",
        "client",
        pods[1],
        (
            Listener("outbound_tcp", OUTBOUND_TCP, "tcp", "0.0.0.0", tls_out=peer),
            *([Listener("outbound_http", OUTBOUND_HTTP, "http", "0.0.0.0", tls_out=peer)] if http_ports else []),
        ),
        "client-sidecar",
    )
    return [client, server]


def capture_rules(proxy: Proxy, http_ports: list[int], pod_subnets: dict[int, str] | None = None) -> str:
    """iptables-restore input (nat table) that sends the traffic this proxy serves to its listeners.
    ``pod_subnets`` (node i: its pods' subnet) place the node proxies' and the waypoint's rules."""
    http = [f"--dport {p}" for p in http_ports]
    if proxy.name == "client-sidecar":  # the pod's outbound, but not the proxy's own connections
        chain, match = "OUTPUT", f"-p tcp ! -o lo -m owner ! --uid-owner {PROXY_UID}"
        tcp_port, http_port = OUTBOUND_TCP, OUTBOUND_HTTP
    elif proxy.name == "server-sidecar":  # what arrives from outside the pod
        chain, match = "PREROUTING", "-p tcp -i eth0"
        tcp_port, http_port = INBOUND_TCP, INBOUND_HTTP
    elif proxy.name == "waypoint":
        # what arrives for the waypoint is its own, not the node's to capture (inserted before the node's
        # rules); its tunnels to the node's pods are caught by the node's proxy, as they would be had
        # the waypoint run in a pod
        return (
            "\n".join(
                [
                    "*nat",
                    f"-I PREROUTING 1 -p tcp -d {WAYPOINT_IP} -j RETURN",
                    f"-A OUTPUT -p tcp -d {_subnets(pod_subnets)[2]} --dport {TUNNEL} -j REDIRECT --to-ports {TUNNEL}",
                    "COMMIT",
                ]
            )
            + "\n"
        )
    else:  # a node: its pods' traffic to other nodes' pods, and pod traffic arriving from the wire
        i, subnets = int(proxy.name.removeprefix("node")), _subnets(pod_subnets)
        return (
            "\n".join(
                [
                    "*nat",
                    f"-A PREROUTING -p tcp -i veth0 -s {subnets[i]} -d {subnets[3 - i]} "
                    f"-j REDIRECT --to-ports {OUTBOUND_TCP}",
                    f"-A PREROUTING -p tcp -i eth0 -d {subnets[i]} -j REDIRECT --to-ports {TUNNEL}",
                    "COMMIT",
                ]
            )
            + "\n"
        )
    rules = [f"-A {chain} {match} {port} -j REDIRECT --to-ports {http_port}" for port in http]
    rules.append(f"-A {chain} {match} -j REDIRECT --to-ports {tcp_port}")
    return "\n".join(["*nat", *rules, "COMMIT"]) + "\n"


def spiffe_id(identity: str) -> str:
    """The SPIFFE URI a proxy's certificate carries, as Istio names a service account's workloads."""
    return f"spiffe://cluster.local/ns/default/sa/{identity}"


def _subnets(pod_subnets: dict[int, str] | None) -> dict[int, str]:
    if pod_subnets is None:
        raise ValueError("capture rules of node proxies need the nodes' pod subnets")
    return pod_subnets


def describe(mesh: str, kind: str, version: str, http_ports: list[int], plan: list[Proxy]) -> dict:
    """What a run records of its mesh (the placement's ``mesh``): the shape, the proxy and its version,
    and each proxy's side and listeners; never a certificate or key."""
    return {
        "kind": mesh,
        "proxy": kind,
        "proxy_version": version,
        "http_ports": http_ports,
        "proxies": {
            p.name: {
                "side": p.side,
                "namespace": p.namespace,
                "listeners": [
                    {
                        "name": ln.name,
                        "port": ln.port,
                        "mode": ln.mode,
                        "tls_in": ln.tls_in,
                        "tls_out": ln.tls_out is not None,
                    }
                    for ln in p.listeners
                ],
            }
            for p in plan
        },
        **(
            {
                "mtls": {
                    "certificates": "EC P-256, one CA per lab or campaign; generated per target, never recorded",
                    "verify": "required both ways",
                }
            }
            if mesh in MTLS_MESHES
            else {}
        ),
    }


def process_usage(stat: str, status: str) -> dict[str, int]:
    """A proxy process's CPU ticks so far (user + system) and its peak RSS in KiB, from its
    /proc/<pid>/stat and /proc/<pid>/status."""
    fields = stat.rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of proc(5))
    peak = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:"))
    return {"cpu_ticks": ticks, "peak_rss_kib": peak}
