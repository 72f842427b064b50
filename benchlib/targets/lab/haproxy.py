"""HAProxy as the lab's mesh proxy (a `proxies.Backend`).

HAProxy (Debian's package) rather than nginx or stunnel: one binary does L7
HTTP and L4 TCP, terminates and originates mutual TLS, connects to a
connection's original destination (SO_ORIGINAL_DST after an iptables
REDIRECT, as Envoy and ztunnel do) and answers on a stats socket with its
own per-listener connection and byte counters, which the tests use to prove
each hop is on the path. stunnel is L4 only and lacks per-listener counters;
nginx needs a separate stream module for TCP and has no original-destination
support.
"""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

from ...vocabulary.meshes import WITHOUT_WAYPOINT
from ..mesh.shapes import PROXY_UID, Proxy
from .netns import run

BINARY = "haproxy"
MESHES = WITHOUT_WAYPOINT  # the mesh shapes it runs: a waypoint's HBONE tunnels it does not end
TIMEOUT = "10m"  # a netperf control connection idles for a whole run


def _mtls(tls_dir: Path | None, identity: str) -> str:
    """HAProxy's options for mutual TLS as ``identity``, with the lab's CA."""
    if tls_dir is None:
        raise ValueError(f"{identity}: mutual TLS without the lab's certificates")
    return f"ssl crt {tls_dir / identity}.pem ca-file {tls_dir / 'ca.crt'} verify required"


def haproxy_cfg(proxy: Proxy, stats_socket: Path, tls_dir: Path | None) -> str:
    """The proxy's haproxy.cfg. Pure: certificates are referenced by path."""
    lines = [
        "global",
        f"    uid {PROXY_UID}",
        f"    gid {PROXY_UID}",
        f"    stats socket {stats_socket} mode 600 level admin",
        # HAProxy wants two descriptors per connection: its default exceeds this machine's limit
        "    maxconn 4096",
        "defaults",
        "    timeout connect 5s",
        f"    timeout client {TIMEOUT}",
        f"    timeout server {TIMEOUT}",
    ]
    for ln in proxy.listeners:
        bind = f"    bind :{ln.port}"
        if ln.tls_in:
            bind += f" {_mtls(tls_dir, proxy.identity)}"
        server = f"    server upstream {ln.upstream}"  # no port: the original destination's port
        if ln.tls_out:
            server += f" {_mtls(tls_dir, proxy.identity)} verifyhost {ln.tls_out}"
        lines += ["", f"listen {ln.name}", f"    mode {ln.mode}", bind, server]
        if ln.mode == "http":
            lines.append("    option http-keep-alive")
    return "\n".join(lines) + "\n"


def version() -> str:
    """'2.6.12-1+deb12u4' from `haproxy -v`."""
    first = run([BINARY, "-v"], "haproxy -v").splitlines()[0]  # "HAProxy version 2.6.12-1+deb12u4 2026/10/17 - ..."
    return first.split()[2]


def start(proxy: Proxy, cpus: list[int], workdir: Path, tls_dir: Path | None) -> subprocess.Popen:
    """Start the proxy in its namespace, pinned to ``cpus`` (the caller waits for its listeners)."""
    cfg = workdir / f"{proxy.name}.cfg"
    cfg.write_text(haproxy_cfg(proxy, stats_socket(workdir, proxy), tls_dir))
    log = workdir / f"{proxy.name}.log"
    with open(log, "w") as out:
        # ip netns exec and taskset exec the next program: the Popen's pid is haproxy's
        return subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                proxy.namespace,
                "taskset",
                "-c",
                ",".join(map(str, cpus)),
                BINARY,
                "-db",
                "-f",
                str(cfg),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def stats_socket(workdir: Path, proxy: Proxy) -> Path:
    return workdir / f"{proxy.name}.sock"


def output(workdir: Path, proxy: Proxy) -> str:
    """What the proxy printed, for errors."""
    log = workdir / f"{proxy.name}.log"
    return log.read_text(errors="replace") if log.exists() else ""


def bytes_carried(sock_path: Path) -> None:
    """None: HAProxy counts a TCP connection's bytes only when it ends, and netperf's connections
    outlive a run's CPU window, so its counters cannot tell whether a run went through it."""
    return None


def query(sock_path: Path, command: str) -> str:
    """One command on a proxy's stats socket (``show stat``, ``show info``)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        s.connect(str(sock_path))
        s.sendall(command.encode() + b"\n")
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks).decode()


def counters(sock_path: Path) -> dict[str, dict[str, int]]:
    """Per listener: sessions so far (stot) and bytes in and out, from the proxy's own `show stat`."""
    text = query(sock_path, "show stat")
    header, *rows = [line for line in text.splitlines() if line.strip()]
    names = header.lstrip("# ").split(",")
    out = {}
    for row in rows:
        rec = dict(zip(names, row.split(","), strict=False))  # a row may end with empty fields
        if rec["svname"] == "FRONTEND":
            out[rec["pxname"]] = {k: int(rec[k] or 0) for k in ("stot", "bin", "bout")}
    return out


def info(sock_path: Path) -> dict[str, str]:
    """`show info` as a dict (CumConns, CumSslConns, ...)."""
    return dict(line.split(": ", 1) for line in query(sock_path, "show info").splitlines() if ": " in line)
