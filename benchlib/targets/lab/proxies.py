"""Service-mesh shapes in the lab: which proxies stand where, what they listen
on and connect to, the capture rules that bring a pod's traffic to them, and
the certificates of their mutual TLS. Two backends run them: HAProxy
(`haproxy`) and Envoy as Istio configures it (`envoy`), each satisfying
`Backend`.

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
Envoy does; everything else is forwarded as TCP. Certificates are made for
each lab with openssl in the lab's private directory and never recorded.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from .addresses import OTHER, pod_subnet
from .netns import apply, run

MESHES = ("server-sidecar", "sidecars", "sidecars-mtls", "node-proxies-mtls", "node-proxies-waypoint")
MTLS_MESHES = ("sidecars-mtls", "node-proxies-mtls", "node-proxies-waypoint")
NODE_MESHES = ("node-proxies-mtls", "node-proxies-waypoint")
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


class Backend(Protocol):
    """What the lab needs of a proxy: both backend modules (`haproxy`, `envoy`) provide these."""

    def version(self) -> str: ...

    def start(self, proxy: Proxy, cpus: list[int], workdir: Path, tls_dir: Path | None) -> subprocess.Popen:
        """Start the proxy in its namespace, pinned to ``cpus`` (the caller waits for its listeners)."""
        ...

    def stats_socket(self, workdir: Path, proxy: Proxy) -> Path:
        """Where the proxy answers for its counters."""
        ...

    def output(self, workdir: Path, proxy: Proxy) -> str:
        """What the proxy logged, for errors."""
        ...

    def bytes_carried(self, sock_path: Path) -> int | None:
        """Bytes carried so far by the proxy's live counters; None where it has none."""
        ...


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


def capture_rules(proxy: Proxy, http_ports: list[int]) -> str:
    """iptables-restore input (nat table) that sends the traffic this proxy serves to its listeners (pure)."""
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
                    f"-A OUTPUT -p tcp -d {pod_subnet(2)} --dport {TUNNEL} -j REDIRECT --to-ports {TUNNEL}",
                    "COMMIT",
                ]
            )
            + "\n"
        )
    else:  # a node: its pods' traffic to other nodes' pods, and pod traffic arriving from the wire
        i = int(proxy.name.removeprefix("node"))
        return (
            "\n".join(
                [
                    "*nat",
                    f"-A PREROUTING -p tcp -i veth0 -s {pod_subnet(i)} -d {pod_subnet(OTHER[i])} "
                    f"-j REDIRECT --to-ports {OUTBOUND_TCP}",
                    f"-A PREROUTING -p tcp -i eth0 -d {pod_subnet(i)} -j REDIRECT --to-ports {TUNNEL}",
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


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to a file that is mode 0600 from its creation (a key is never readable by others)."""
    path.unlink(missing_ok=True)
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as out:
        out.write(text)


def make_certificates(tls_dir: Path, identities: list[str]) -> None:
    """A CA and one certificate per identity (EC P-256, valid a day), as PEM files in ``tls_dir``.

    ``<identity>.crt`` and ``.key`` as Envoy reads them; ``<identity>.pem`` holds both, as HAProxy does."""
    tls_dir.mkdir(mode=0o700, exist_ok=True)
    tls_dir.chmod(0o700)
    ca_key, ca_crt = tls_dir / "ca.key", tls_dir / "ca.crt"
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run(
        [
            "openssl",
            "req",
            "-x509",
            *ec,
            "-keyout",
            str(ca_key),
            "-out",
            str(ca_crt),
            "-days",
            "1",
            "-subj",
            "/CN=benchlib lab CA",
        ],
        "openssl: the lab's CA",
    )
    for name in identities:
        key, csr, crt = (tls_dir / f"{name}.{ext}" for ext in ("key", "csr", "crt"))
        run(
            ["openssl", "req", *ec, "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={name}"],
            f"openssl: {name}'s key",
        )
        ext = tls_dir / f"{name}.ext"
        # the DNS name for HAProxy's verifyhost, the SPIFFE URI for Envoy's SAN match
        ext.write_text(f"subjectAltName=DNS:{name},URI:{spiffe_id(name)}\nextendedKeyUsage=serverAuth,clientAuth\n")
        run(
            [
                "openssl",
                "x509",
                "-req",
                "-in",
                str(csr),
                "-CA",
                str(ca_crt),
                "-CAkey",
                str(ca_key),
                "-CAcreateserial",
                "-days",
                "1",
                "-extfile",
                str(ext),
                "-out",
                str(crt),
            ],
            f"openssl: {name}'s certificate",
        )
        write_private(tls_dir / f"{name}.pem", crt.read_text() + key.read_text())
        for p in (csr, ext):
            p.unlink()


def usage(pid: int, reset_peak: bool) -> dict[str, int]:
    """The process's CPU ticks so far (user + system) and its peak RSS in KiB.

    With ``reset_peak`` the peak is reset afterwards (clear_refs 5), so the next
    reading is the peak since now."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of proc(5))
    status = Path(f"/proc/{pid}/status").read_text()
    peak = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:"))
    if reset_peak:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    return {"cpu_ticks": ticks, "peak_rss_kib": peak}


def install_capture(proxy: Proxy, http_ports: list[int]) -> None:
    apply(proxy.namespace, ["iptables-restore", "--noflush"], capture_rules(proxy, http_ports))
