"""Service rules rendered the way kube-proxy renders them, for the lab's
service-scaling scenarios. Pure functions: text in the formats
``iptables-restore`` and ``nft -f`` read.

iptables mode: every new connection walks KUBE-SERVICES rule by rule until
its ClusterIP:port matches, so the cost grows with the number of services.
nftables mode: one verdict-map lookup keyed by address . protocol . port,
whatever the number of services.

The lab's benchmark service sits in the middle of the service list, where a
service of a real cluster sits on average; the other services are decoys with
two endpoints each that never receive traffic.
"""

from __future__ import annotations

import hashlib
import ipaddress
from dataclasses import dataclass

# ClusterIPs come from the lab's benchmark range (RFC 2544), above the node wire.
SERVICE_CIDR = ipaddress.ip_network("198.18.128.0/17")
DECOY_ENDPOINTS = ("198.19.2.201", "198.19.2.202")
DECOY_PORT = 80


@dataclass(frozen=True)
class Service:
    name: str
    cluster_ip: str
    ports: tuple[int, ...]
    endpoints: tuple[str, ...]


def services(count: int, target_endpoint: str, target_ports: tuple[int, ...]) -> tuple[list[Service], Service]:
    """``count`` services in rendering order (the benchmark one included), and the benchmark one."""
    if count < 1:
        raise ValueError(f"services: need at least 1, got {count}")
    if count > SERVICE_CIDR.num_addresses - 2:
        raise ValueError(f"services: at most {SERVICE_CIDR.num_addresses - 2} fit in {SERVICE_CIDR}")
    target_at = count // 2
    out = []
    for i in range(count):
        ip = str(SERVICE_CIDR.network_address + 1 + i)
        if i == target_at:
            out.append(Service("benchlib/bench", ip, target_ports, (target_endpoint,)))
        else:
            out.append(Service(f"decoy/svc-{i}", ip, (DECOY_PORT,), DECOY_ENDPOINTS))
    return out, out[target_at]


def _chain(prefix: str, *parts: str) -> str:
    # kube-proxy names chains by a hash of the service port (and endpoint)
    digest = hashlib.sha256("/".join(parts).encode()).hexdigest()[:16].upper()
    return f"{prefix}-{digest}"


def iptables_rules(svcs: list[Service], pod_cidr: str) -> str:
    """The nat table as kube-proxy's iptables mode writes it (iptables-restore format)."""
    chains = [":KUBE-SERVICES - [0:0]", ":KUBE-MARK-MASQ - [0:0]", ":KUBE-POSTROUTING - [0:0]"]
    rules = [
        '-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
        '-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
        '-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING',
        "-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000",
        "-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN",
        "-A KUBE-POSTROUTING -j MARK --set-xmark 0x4000/0x0",
        "-A KUBE-POSTROUTING -j MASQUERADE --random-fully",
    ]
    for svc in svcs:
        for port in svc.ports:
            svc_chain = _chain("KUBE-SVC", svc.name, str(port))
            chains.append(f":{svc_chain} - [0:0]")
            rules.append(
                f'-A KUBE-SERVICES -d {svc.cluster_ip}/32 -p tcp -m comment --comment "{svc.name}:{port} '
                f'cluster IP" -m tcp --dport {port} -j {svc_chain}'
            )
            rules.append(
                f"-A {svc_chain} ! -s {pod_cidr} -d {svc.cluster_ip}/32 -p tcp -m tcp --dport {port} -j KUBE-MARK-MASQ"
            )
            n = len(svc.endpoints)
            for k, ep in enumerate(svc.endpoints):
                sep_chain = _chain("KUBE-SEP", svc.name, str(port), ep)
                chains.append(f":{sep_chain} - [0:0]")
                # endpoint k of n is taken with probability 1/(n-k) among those left, the last always
                pick = f"-m statistic --mode random --probability {1 / (n - k):.10f} " if k < n - 1 else ""
                rules.append(f"-A {svc_chain} {pick}-j {sep_chain}")
                rules.append(f"-A {sep_chain} -s {ep}/32 -j KUBE-MARK-MASQ")
                rules.append(f"-A {sep_chain} -p tcp -m tcp -j DNAT --to-destination {ep}:{port}")
    return "\n".join(["*nat", *chains, *rules, "COMMIT", ""])


def nftables_ruleset(svcs: list[Service], pod_cidr: str) -> str:
    """The table kube-proxy's nftables mode writes: a verdict map from address . protocol . port."""
    lines = [
        "table ip kube-proxy {",
        "  chain mark-for-masquerade { meta mark set meta mark | 0x4000; }",
        "  chain masquerading { type nat hook postrouting priority 100; policy accept;",
        "    meta mark & 0x4000 == 0 return; meta mark set meta mark ^ 0x4000; masquerade fully-random; }",
        "  map service-ips { type ipv4_addr . inet_proto . inet_service : verdict; }",
        "  chain services { ip daddr . meta l4proto . th dport vmap @service-ips; }",
        "  chain nat-prerouting { type nat hook prerouting priority -100; policy accept; jump services; }",
        "  chain nat-output { type nat hook output priority -100; policy accept; jump services; }",
    ]
    elements = []
    for svc in svcs:
        for port in svc.ports:
            svc_chain = _chain("service", svc.name, str(port))
            eps = [_chain("endpoint", svc.name, str(port), ep) for ep in svc.endpoints]
            for ep, ep_chain in zip(svc.endpoints, eps, strict=True):
                lines.append(
                    f"  chain {ep_chain} {{ ip saddr {ep} jump mark-for-masquerade; "
                    f"meta l4proto tcp dnat to {ep}:{port}; }}"
                )
            picks = ", ".join(f"{k} : goto {c}" for k, c in enumerate(eps))
            lines.append(
                f"  chain {svc_chain} {{ ip daddr {svc.cluster_ip} tcp dport {port} "
                f"ip saddr != {pod_cidr} jump mark-for-masquerade; "
                f"numgen random mod {len(eps)} vmap {{ {picks} }}; }}"
            )
            elements.append(f"{svc.cluster_ip} . tcp . {port} : goto {svc_chain}")
    lines.append("}")
    lines.append("add element ip kube-proxy service-ips { " + ", ".join(elements) + " }")
    return "\n".join(lines) + "\n"
