"""What the lab puts in the nodes' netfilter: a stateful firewall, and service
rules rendered as kube-proxy renders them (kubeproxy.py)."""

from __future__ import annotations

import json
import time

from . import kubeproxy
from .addresses import POD_CIDR
from .netns import apply, in_ns


def firewall_rules(kind: str) -> str:
    """A stateful node firewall: every packet goes through connection tracking,
    unless ``notrack`` exempts the TCP benchmark traffic in the raw table (as the
    2021 study did with -j NOTRACK)."""
    filter_table = [
        "*filter",
        "-A INPUT -m conntrack --ctstate ESTABLISHED,RELATED,NEW,UNTRACKED -j ACCEPT",
        "-A FORWARD -m conntrack --ctstate ESTABLISHED,RELATED,NEW,UNTRACKED -j ACCEPT",
        "-A OUTPUT -m conntrack --ctstate ESTABLISHED,RELATED,NEW,UNTRACKED -j ACCEPT",
        "COMMIT",
    ]
    raw_table = ["*raw", "-A PREROUTING -p tcp -j NOTRACK", "-A OUTPUT -p tcp -j NOTRACK", "COMMIT"]
    return "\n".join(filter_table + (raw_table if kind == "notrack" else [])) + "\n"


def install_firewall(node: str, kind: str) -> None:
    apply(node, ["iptables-restore"], firewall_rules(kind))


# Sources that never send to the lab (TEST-NET-1, RFC 5737): a chain rule never matches,
# so every packet to the server is checked against all of them and then accepted.
_NEVER_SOURCE = "192.0.2.1/32"


def rule_chain(count: int) -> str:
    """``count`` filter rules in front of the server that match nothing, in INPUT (node-to-node
    traffic) and FORWARD (traffic to pods): the cost of a long node firewall, rule by rule."""
    rules = [
        f"-A {chain} -s {_NEVER_SOURCE} -p tcp --dport {1 + i} -j DROP"
        for chain in ("INPUT", "FORWARD")
        for i in range(count)
    ]
    return "\n".join(["*filter", *rules, "COMMIT"]) + "\n"


def install_rule_chain(node: str, count: int) -> int:
    """The rule chain on ``node``; returns the filter rules the kernel then holds."""
    apply(node, ["iptables-restore", "--noflush"], rule_chain(count))
    return in_ns(node, "iptables-save", "-t", "filter").count("\n-A ")


def count_rules(ns: str, proxy: str) -> int:
    """Rules the kernel holds after applying (not the text we sent)."""
    if proxy == "iptables":
        return in_ns(ns, "iptables-save", "-t", "nat").count("\n-A ")
    dump = json.loads(in_ns(ns, "nft", "-j", "list", "table", "ip", "kube-proxy"))
    return sum(1 for item in dump["nftables"] if "rule" in item)


def install_services(node: str, proxy: str, count: int, endpoint: str, ports: list[int]) -> dict:
    """kube-proxy's rules for ``count`` services in front of ``endpoint``:``ports``; returns what to record."""
    svcs, bench = kubeproxy.services(count, endpoint, tuple(ports))
    if proxy == "iptables":
        text, argv = kubeproxy.iptables_rules(svcs, POD_CIDR), ["iptables-restore"]
    else:
        text, argv = kubeproxy.nftables_ruleset(svcs, POD_CIDR), ["nft", "-f", "-"]
    started = time.monotonic()
    apply(node, argv, text)
    elapsed = time.monotonic() - started
    return {
        "service_proxy": proxy,
        "services": count,
        "cluster_ip": bench.cluster_ip,
        "service_position": svcs.index(bench),
        "service_rules": count_rules(node, proxy),
        "service_rules_apply_s": round(elapsed, 3),
    }
