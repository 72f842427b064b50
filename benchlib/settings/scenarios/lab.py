"""target: lab: the scenario of a datapath built in network namespaces on this machine (targets/lab/)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from ...vocabulary import meshes
from .base import PodScenario, needs_pods

IP6 = "scenarios.{n}: ip_family 6 and big_tcp need target lab and topology host or veth-routed"


class LabScenario(PodScenario):
    target: Literal["lab"] = Field(exclude=True)
    CPU_PLACEMENT: ClassVar[bool] = True
    ELSEWHERE: ClassVar[dict[str, str]] = {
        "service_proxy": (
            "scenarios.{n}.service_proxy: lab only (a cluster's own kube-proxy or CNI serves its Services); remove it"
        ),
        "ip_family": IP6,
        "big_tcp": IP6,
        "services": "scenarios.{n}.services: needs target lab or kubernetes",
    }

    topology: (
        Literal["host", "veth-routed", "bridge", "vxlan", "ebpf-host-routing", "wireguard", "ipsec", "netkit"] | None
    ) = Field(
        default=None,
        description=(
            "lab: the datapath built: host (client and server on the nodes themselves), veth-routed (routed pods, "
            "as Calico), bridge (pods on a Linux bridge), vxlan (an overlay between the nodes), ebpf-host-routing "
            "(tc BPF moves pod traffic past the node's stack, as Cilium), wireguard or ipsec (pod traffic "
            "encrypted between the nodes, as Cilium's transparent encryption), netkit (netkit pairs instead of "
            "veth, Linux 6.7+); unset: the scenario's name"
        ),
    )
    service_proxy: Literal["iptables", "nftables"] | None = Field(
        default=None,
        description=(
            "lab: ClusterIP Services rendered on the client's node as kube-proxy renders them in this mode; "
            "with `services`"
        ),
    )
    firewall: Literal["conntrack", "notrack"] | None = Field(
        default=None,
        description=(
            "lab: a stateful iptables firewall on both nodes: conntrack (every packet through connection "
            "tracking) or notrack (the same, with the TCP benchmark traffic untracked by -j NOTRACK)"
        ),
    )
    filter_rules: int | None = Field(
        default=None,
        ge=1,
        le=100_000,
        description=(
            "lab: this many iptables filter rules that match nothing on the server's node, in INPUT and FORWARD: "
            "a long rule chain in front of the server (a deliberately slower path)"
        ),
    )
    ip_family: Literal[4, 6] = Field(
        default=4,
        description=(
            "lab: the benchmark traffic's IP version: 4, or 6 (nodes and pods also get addresses in 2001:2::/48; "
            "topologies host and veth-routed only)"
        ),
    )
    big_tcp: int | None = Field(
        default=None,
        ge=65536,
        le=524280,
        description=(
            "lab: GSO and GRO max size (bytes) for ip_family on every veth and the wire; 65536 is the limit "
            "before BIG TCP"
        ),
    )

    @classmethod
    def check(cls, env) -> None:
        for n, sc in env.scenarios.items():
            plain = (sc.topology or n) in ("host", "veth-routed")
            if (sc.ip_family == 6 or sc.big_tcp) and not plain:
                raise ValueError(IP6.format(n=n))
            if sc.ip_family == 6 and (sc.mesh or sc.service_proxy or sc.firewall):
                raise ValueError(
                    f"scenarios.{n}: ip_family 6 has no mesh, service_proxy or firewall (their rules are IPv4)"
                )
            if sc.mesh in meshes.WAYPOINT_MESHES and sc.proxy != "envoy":
                raise ValueError(
                    f"scenarios.{n}.mesh: {sc.mesh} needs proxy: envoy (its tunnels are "
                    "HBONE, which HAProxy does not speak)"
                )
            needs_pods(n, sc, sc.topology)
            if (sc.services is None) != (sc.service_proxy is None):
                raise ValueError(f"scenarios.{n}: service_proxy and services go together")
