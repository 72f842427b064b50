"""The lab's datapaths as data: how pods attach to their node and how a node
reaches the other node's pods. `build` turns one scenario into namespaces.

Every scenario has two nodes joined by a veth "wire". ``host`` runs client
and server on the nodes themselves; every other topology gives each node a
pod (a namespace behind a veth pair) and routes pod traffic between nodes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from benchlib.base.errors import TargetError

from . import bpf, encryption, rtnl
from .addresses import (
    NODE_IP,
    NODE_IP6,
    NODE_PREFIX,
    NODE_PREFIX6,
    NODES,
    OTHER,
    POD_GW,
    POD_GW6,
    POD_IP,
    POD_IP6,
    bridge_ip,
    pod_subnet,
    pod_subnet6,
    vxlan_ip,
)
from .netns import in_ns, ip, json_field

VXLAN_ID, VXLAN_PORT = 42, 4789
JUMBO_HBH_BYTES = 8  # IPv6 Hop-by-Hop header with the jumbo payload option (RFC 2675)


@dataclass(frozen=True)
class Topology:
    # how a pod attaches: "routed" (a /32 behind a link-local gateway the node
    # answers for, as Calico does), "bridged" (on a Linux bridge, cni0 style)
    # or "netkit" (a netkit pair instead of veth, Cilium 1.16+); None: no pods,
    # the nodes are the sides
    pods: str | None
    # how a node reaches the other node's pod subnet: "wire" (a plain route),
    # "vxlan" (flannel-style overlay) or "wireguard" (through the tunnel)
    remote: str | None = None
    encrypt: Callable[[dict[int, str], int], dict] | None = None  # (nodes, mtu) -> what to record
    host_routing: bool = False  # tc BPF programs move pod traffic past the node's stack (Cilium)
    commands: tuple[str, ...] = ()  # what its scenarios need beyond every scenario's
    features: tuple[str, ...] = ()  # kernel features the probe tries before building (probes.FEATURES)


TOPOLOGIES: dict[str, Topology] = {
    "host": Topology(pods=None),
    "veth-routed": Topology("routed", "wire"),
    "bridge": Topology("bridged", "wire", features=("bridge",)),
    "vxlan": Topology("bridged", "vxlan", features=("vxlan",)),
    "ebpf-host-routing": Topology(
        "routed", "wire", host_routing=True, commands=("tc",), features=("ebpf-host-routing",)
    ),
    "wireguard": Topology(
        "routed", "wireguard", encrypt=encryption.wireguard, commands=("wg",), features=("wireguard",)
    ),
    # the xfrm policy catches pod traffic on the plain route
    "ipsec": Topology("routed", "wire", encrypt=lambda nodes, mtu: encryption.ipsec(nodes), features=("ipsec",)),
    # refused at preflight wherever the kernel lacks netkit (Linux < 6.7 or CONFIG_NETKIT off)
    "netkit": Topology("netkit", "wire", features=("netkit",)),
}


def topology_of(name: str, sc) -> str:
    """A scenario's topology: its own setting, else its name."""
    topology = sc.topology or name
    if topology not in TOPOLOGIES:
        raise TargetError(f"lab: scenario {name}: no topology {topology!r}; set topology: to one of {list(TOPOLOGIES)}")
    return topology


@dataclass(frozen=True)
class Built:
    """A scenario's namespaces: its nodes and the namespace of each side."""

    nodes: dict[int, str]
    sides: dict[str, str]  # client, server -> namespace
    server_address: str
    details: dict  # what the record says about the datapath


def build(
    scenario: str,
    topology: str,
    mtu: int,
    new_ns: Callable[[str], str],
    netfilter_needed: bool,
    ip_family: int = 4,
    big_tcp: int | None = None,
) -> Built:
    """Build a scenario's nodes and pods with ``new_ns(role)``, which creates a namespace the lab owns.

    ``ip_family`` 6 adds IPv6 addresses and routes (the benchmark traffic then
    uses them); ``big_tcp`` sets the GSO/GRO max size of that family on every link."""
    topo = TOPOLOGIES[topology]
    ipv6 = ip_family == 6
    nodes = {i: new_ns(f"n{i}") for i in NODES}
    ip(None, "link", "add", "eth0", "netns", nodes[1], "type", "veth", "peer", "name", "eth0", "netns", nodes[2])
    for i, node in nodes.items():
        ip(node, "addr", "add", f"{NODE_IP[i]}/{NODE_PREFIX}", "dev", "eth0")
        if ipv6:
            ip(node, "-6", "addr", "add", f"{NODE_IP6[i]}/{NODE_PREFIX6}", "dev", "eth0", "nodad")
            in_ns(node, "sysctl", "-qw", "net.ipv6.conf.all.forwarding=1")
        ip(node, "link", "set", "eth0", "up")
        in_ns(node, "sysctl", "-qw", "net.ipv4.ip_forward=1")
    details: dict = {"topology": topology, "nodes": nodes, "mtu": mtu, "ip_family": ip_family}
    links = [(node, "eth0") for node in nodes.values()]
    if topo.pods is None:
        if big_tcp:
            details["big_tcp"] = set_big_tcp(links, big_tcp, ip_family)
        return Built(nodes, {"client": nodes[1], "server": nodes[2]}, (NODE_IP6 if ipv6 else NODE_IP)[2], details)
    if topo.host_routing and netfilter_needed:
        raise TargetError(
            f"lab: scenario {scenario}: the BPF programs bypass the node's netfilter, "
            "so firewall and service_proxy would not apply"
        )
    pods = {i: _pod(new_ns(f"p{i}"), i, nodes[i], topo.pods, mtu) for i in NODES}
    if topo.encrypt:
        details["encryption"] = topo.encrypt(nodes, mtu)  # algorithms and parameters, never a key
    for i in NODES:
        _route_remote_pods(nodes[i], i, topo.remote)
    if topo.encrypt:
        encryption.verify_encrypted(scenario, topology, nodes, pods)
    if topo.host_routing:
        for i in NODES:
            _host_routing(nodes[i], pods[i], i)
        details["bpf_object"] = bpf.object_path().name  # names the hash of the source it ran
    if ipv6:
        for i in NODES:
            _pod6(pods[i], i, nodes[i])
            ip(nodes[i], "-6", "route", "add", pod_subnet6(OTHER[i]), "via", NODE_IP6[OTHER[i]])
    if big_tcp:
        links += [(ns, dev) for i in NODES for ns, dev in ((nodes[i], "veth0"), (pods[i], "eth0"))]
        details["big_tcp"] = set_big_tcp(links, big_tcp, ip_family)
    if big_tcp and ipv6:
        # The kernel's IPv6 forwarding checks a GSO packet's segments against the route MTU
        # counting the 8-byte Hop-by-Hop jumbo option that only packets above 64 KiB carry
        # inside the kernel (the wire's segments never do): at equal MTUs every BIG TCP packet
        # earns a Packet Too Big (Ip6InTooBigErrors) and throughput collapses. So the nodes'
        # links get 8 bytes more at every size, and the pods keep the scenario's MTU.
        for ns, dev in [(node, dev) for node in nodes.values() for dev in ("eth0", "veth0")]:
            ip(ns, "link", "set", "dev", dev, "mtu", str(mtu + JUMBO_HBH_BYTES))
        details["node_mtu"] = mtu + JUMBO_HBH_BYTES
    return Built(nodes, {"client": pods[1], "server": pods[2]}, (POD_IP6 if ipv6 else POD_IP)[2], details)


def _pod6(pod: str, i: int, node: str) -> None:
    """The routed pod's IPv6 side: a /128 behind the link-local gateway its node answers for."""
    ip(pod, "-6", "addr", "add", f"{POD_IP6[i]}/128", "dev", "eth0", "nodad")
    mac = json_field(ip(node, "-j", "link", "show", "veth0"), "address")
    ip(pod, "-6", "neigh", "add", POD_GW6, "lladdr", mac, "dev", "eth0", "nud", "permanent")
    ip(pod, "-6", "route", "add", "default", "via", POD_GW6, "dev", "eth0")
    ip(node, "-6", "route", "add", f"{POD_IP6[i]}/128", "dev", "veth0")


def set_big_tcp(links: list[tuple[str, str]], size: int, ip_family: int) -> dict:
    """Set the GSO and GRO max size of ``ip_family`` on every (namespace, link); return the sizes the
    kernel then reports, per link. IPv6's are iproute2's gso_max_size/gro_max_size; IPv4's
    (gso_ipv4_max_size, Linux 6.3) go through rtnetlink directly, which this iproute2 predates."""
    held = {}
    for ns, dev in links:
        if ip_family == 6:
            ip(ns, "link", "set", "dev", dev, "gso_max_size", str(size), "gro_max_size", str(size))
            link = json.loads(ip(ns, "-d", "-j", "link", "show", "dev", dev))[0]
            sizes = (link["gso_max_size"], link["gro_max_size"])
        else:
            index = int(json_field(ip(ns, "-j", "link", "show", "dev", dev), "ifindex"))
            try:
                rtnl.set_ipv4_big_tcp(ns, index, size)
                sizes = rtnl.ipv4_big_tcp(ns, index)
            except TargetError as e:
                raise TargetError(f"lab: IPv4 BIG TCP on {dev} in {ns}: {e}") from None
        if sizes != (size, size):
            raise TargetError(f"lab: {dev} in {ns} holds GSO/GRO max sizes {sizes} after setting {size}")
        held[f"{ns}/{dev}"] = size
    return {"size": size, "ip_family": ip_family, "links": held}


def _pod(pod: str, i: int, node: str, attach: str, mtu: int) -> str:
    if attach == "netkit":
        # the probe refuses netkit scenarios on kernels without it, this one included: no
        # kernel here has ever built a netkit pod, so none is built untested
        raise TargetError("lab: netkit pods are not implemented (no kernel with netkit was at hand to test them)")
    ip(
        None,
        "link",
        "add",
        "eth0",
        "netns",
        pod,
        "mtu",
        str(mtu),
        "type",
        "veth",
        "peer",
        "name",
        "veth0",
        "netns",
        node,
        "mtu",
        str(mtu),
    )
    ip(pod, "link", "set", "eth0", "up")
    if attach == "routed":
        ip(pod, "addr", "add", f"{POD_IP[i]}/32", "dev", "eth0")
        ip(node, "link", "set", "veth0", "up")
        mac = json_field(ip(node, "-j", "link", "show", "veth0"), "address")
        ip(pod, "route", "add", POD_GW, "dev", "eth0", "scope", "link")
        ip(pod, "route", "add", "default", "via", POD_GW, "dev", "eth0")
        ip(pod, "neigh", "add", POD_GW, "lladdr", mac, "dev", "eth0", "nud", "permanent")
        ip(node, "route", "add", f"{POD_IP[i]}/32", "dev", "veth0")
    else:
        ip(node, "link", "add", "br0", "type", "bridge")
        ip(node, "addr", "add", f"{bridge_ip(i)}/24", "dev", "br0")
        ip(node, "link", "set", "veth0", "master", "br0")
        ip(node, "link", "set", "veth0", "up")
        ip(node, "link", "set", "br0", "up")
        ip(pod, "addr", "add", f"{POD_IP[i]}/24", "dev", "eth0")
        ip(pod, "route", "add", "default", "via", bridge_ip(i))
    return pod


def _route_remote_pods(node: str, i: int, remote: str | None) -> None:
    j = OTHER[i]
    if remote == "vxlan":
        ip(
            node,
            "link",
            "add",
            "vxlan0",
            "type",
            "vxlan",
            "id",
            str(VXLAN_ID),
            "local",
            NODE_IP[i],
            "remote",
            NODE_IP[j],
            "dstport",
            str(VXLAN_PORT),
            "dev",
            "eth0",
        )
        ip(node, "addr", "add", f"{vxlan_ip(i)}/32", "dev", "vxlan0")
        ip(node, "link", "set", "vxlan0", "up")
        ip(node, "route", "add", pod_subnet(j), "via", vxlan_ip(j), "dev", "vxlan0", "onlink")
    elif remote == "wireguard":
        ip(node, "route", "add", pod_subnet(j), "dev", "wg0")
    else:
        ip(node, "route", "add", pod_subnet(j), "via", NODE_IP[j])


def _host_routing(node: str, pod: str, i: int) -> None:
    # As Cilium knows its endpoints' MACs, the node knows its pod's: a
    # permanent neighbour lets from_wire resolve the pod without ARP.
    pod_mac = json_field(ip(pod, "-j", "link", "show", "eth0"), "address")
    ip(node, "neigh", "add", POD_IP[i], "lladdr", pod_mac, "dev", "veth0", "nud", "permanent")
    bpf.attach(node, "veth0", bpf.FROM_POD)
    bpf.attach(node, "eth0", bpf.FROM_WIRE)
