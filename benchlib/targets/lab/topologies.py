"""The lab's datapaths as data: how pods attach to their node and how a node
reaches the other node's pods. `build` turns one scenario into namespaces.

Every scenario has two nodes joined by a veth "wire". ``host`` runs client
and server on the nodes themselves; every other topology gives each node a
pod (a namespace behind a veth pair) and routes pod traffic between nodes.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from benchlib.errors import TargetError

from . import bpf, encryption
from .addresses import (NODE_IP, NODE_PREFIX, NODES, OTHER, POD_GW, POD_IP, bridge_ip, pod_subnet,
                        vxlan_ip)
from .netns import in_ns, ip, json_field

VXLAN_ID, VXLAN_PORT = 42, 4789


@dataclass(frozen=True)
class Topology:
    # how a pod attaches: "routed" (a /32 behind a link-local gateway the node
    # answers for, as Calico does) or "bridged" (on a Linux bridge, cni0 style);
    # None: no pods, the nodes are the sides
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
    "ebpf-host-routing": Topology("routed", "wire", host_routing=True, commands=("tc",),
                                  features=("ebpf-host-routing",)),
    "wireguard": Topology("routed", "wireguard", encrypt=encryption.wireguard, commands=("wg",),
                          features=("wireguard",)),
    # the xfrm policy catches pod traffic on the plain route
    "ipsec": Topology("routed", "wire", encrypt=lambda nodes, mtu: encryption.ipsec(nodes),
                      features=("ipsec",)),
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


def build(scenario: str, topology: str, mtu: int, new_ns: Callable[[str], str],
          netfilter_needed: bool) -> Built:
    """Build a scenario's nodes and pods with ``new_ns(role)``, which creates a namespace the lab owns."""
    topo = TOPOLOGIES[topology]
    nodes = {i: new_ns(f"n{i}") for i in NODES}
    ip(None, "link", "add", "eth0", "netns", nodes[1], "type", "veth", "peer", "name", "eth0", "netns", nodes[2])
    for i, node in nodes.items():
        ip(node, "addr", "add", f"{NODE_IP[i]}/{NODE_PREFIX}", "dev", "eth0")
        ip(node, "link", "set", "eth0", "up")
        in_ns(node, "sysctl", "-qw", "net.ipv4.ip_forward=1")
    details: dict = {"topology": topology, "nodes": nodes, "mtu": mtu}
    if topo.pods is None:
        return Built(nodes, {"client": nodes[1], "server": nodes[2]}, NODE_IP[2], details)
    if topo.host_routing and netfilter_needed:
        raise TargetError(f"lab: scenario {scenario}: the BPF programs bypass the node's netfilter, "
                          "so firewall and service_proxy would not apply")
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
    return Built(nodes, {"client": pods[1], "server": pods[2]}, POD_IP[2], details)


def _pod(pod: str, i: int, node: str, attach: str, mtu: int) -> str:
    ip(None, "link", "add", "eth0", "netns", pod, "mtu", str(mtu),
       "type", "veth", "peer", "name", "veth0", "netns", node, "mtu", str(mtu))
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


def _route_remote_pods(node: str, i: int, remote: str) -> None:
    j = OTHER[i]
    if remote == "vxlan":
        ip(node, "link", "add", "vxlan0", "type", "vxlan", "id", str(VXLAN_ID), "local", NODE_IP[i],
           "remote", NODE_IP[j], "dstport", str(VXLAN_PORT), "dev", "eth0")
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
