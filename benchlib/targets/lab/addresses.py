"""The lab's addresses: all from 198.18.0.0/15, the range RFC 2544 reserves for
benchmark networks. The namespaces have no route out of the machine."""

from __future__ import annotations

import ipaddress

NODES = (1, 2)  # node 1 holds the client, node 2 the server
OTHER = {1: 2, 2: 1}  # the node across the wire
NODE_IP = {1: "198.18.0.1", 2: "198.18.0.2"}
NODE_PREFIX = 24
POD_CIDR = "198.19.0.0/16"  # every pod subnet; kube-proxy does not masquerade traffic from it
POD_IP = {1: "198.19.1.10", 2: "198.19.2.10"}
POD_GW = "169.254.1.1"  # the routed-veth gateway every pod sees (as Calico does)


def pod_subnet(i: int) -> str:
    """Node i's pod subnet."""
    return f"198.19.{i}.0/24"


def bridge_ip(i: int) -> str:
    """Node i's address on its pod bridge, the bridged pods' gateway."""
    return f"198.19.{i}.1"


def vxlan_ip(i: int) -> str:
    """Node i's address on its VXLAN device (the network address of its pod subnet, as flannel does)."""
    return f"198.19.{i}.0"


# IPv6 (the BIG TCP scenarios): 2001:2::/48, the prefix RFC 5180 reserves for
# benchmarking, laid out like the IPv4 plan: the wire 2001:2::/64, node i's
# pods 2001:2:0:i::/64.
NODE_IP6 = {1: "2001:2::1", 2: "2001:2::2"}
NODE_PREFIX6 = 64
POD_IP6 = {1: "2001:2:0:1::10", 2: "2001:2:0:2::10"}
POD_GW6 = "fe80::1"  # the link-local gateway every IPv6 pod sees, answered by its node (as Calico does)


def pod_subnet6(i: int) -> str:
    """Node i's IPv6 pod subnet."""
    return f"2001:2:0:{i}::/64"


# The local Kubernetes cluster (scripts/k8s-local-cluster.sh), in the same benchmark range and apart
# from the lab's addresses above and the lab's Services (kubeproxy.SERVICE_CIDR): its nodes sit on
# one wire, the controller manager gives each node a /24 of the cluster CIDR, and the apiserver's
# Service takes the first address of the Service range.
CLUSTER_WIRE = "198.18.32.0/24"  # node i has the subnet's address i
CLUSTER_POD_CIDR = "198.18.64.0/19"
CLUSTER_NODE_POD_PREFIX = 24
CLUSTER_SERVICE_CIDR = "198.18.96.0/19"


def cluster_shell() -> str:
    """The cluster's address plan as KEY=VALUE lines, which scripts/cluster/common.sh reads."""
    wire = ipaddress.ip_network(CLUSTER_WIRE)
    plan = {
        "WIRE_NET": str(wire.network_address).rsplit(".", 1)[0],
        "WIRE_PREFIX": wire.prefixlen,
        "CLUSTER_CIDR": CLUSTER_POD_CIDR,
        "NODE_CIDR_PREFIX": CLUSTER_NODE_POD_PREFIX,
        "SERVICE_CIDR": CLUSTER_SERVICE_CIDR,
        "API_SERVICE_IP": ipaddress.ip_network(CLUSTER_SERVICE_CIDR)[1],
    }
    return "".join(f"{key}={value}\n" for key, value in plan.items())
