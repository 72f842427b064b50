"""What the lab needs from this machine, checked before anything is built.

Kernel features are tried, once each, in a throwaway namespace: a config
file can say a feature is built, only trying it says it works here.
"""

from __future__ import annotations

import os
import shutil
import subprocess

from benchlib.base.errors import TargetError
from benchlib.settings.environment import Environment
from benchlib.settings.scenarios import LabScenario

from ..mesh import shapes
from . import bpf, encryption, haproxy
from .locking import new_lab_id, release, try_lock
from .netns import COMMAND_TIMEOUT_S, apply, apply_ip, ip, remove_namespace
from .topologies import TOPOLOGIES, VXLAN_PORT, set_big_tcp, topology_of

REQUIRED_COMMANDS = ("ip", "sysctl", "ss", "taskset")
BIG_TCP_PROBE_SIZE = 131072  # a size only BIG TCP allows
FEATURES = {
    "veth": "the kernel's veth link type",
    "bridge": "the kernel's bridge link type, CONFIG_BRIDGE",
    "vxlan": "the kernel's VXLAN link type, CONFIG_VXLAN",
    "ebpf-host-routing": "tc BPF host-routing, which this machine cannot load",
    "wireguard": "the kernel's WireGuard module, CONFIG_WIREGUARD",
    "ipsec": "IPsec ESP with AES-GCM, CONFIG_INET_ESP and CONFIG_CRYPTO_GCM",
    "netkit": "the kernel's netkit link type, CONFIG_NETKIT (Linux 6.7)",
    "big-tcp": "IPv6 BIG TCP (gso_max_size/gro_max_size above 65536 on a veth, Linux 5.19)",
    "big-tcp-ipv4": "IPv4 BIG TCP (gso_ipv4_max_size/gro_ipv4_max_size, Linux 6.3)",
    "mesh-capture": "iptables REDIRECT with an owner match, CONFIG_NETFILTER_XT_TARGET_REDIRECT and _MATCH_OWNER",
}


def preflight(env: Environment, scenarios: list[str], commands: list[str]) -> None:
    """Check privilege, commands and kernel features; raises TargetError naming everything missing."""
    check_machine(env, commands)
    problems = scenario_problems(env, scenarios)
    if problems:
        raise TargetError(
            "lab: cannot run these scenarios here (nothing was built):\n  - "
            + "\n  - ".join(
                f"scenario {name} needs {reason}" for name, reasons in problems.items() for reason in reasons
            )
        )


def check_machine(env: Environment, commands: list[str]) -> None:
    """What every scenario needs: root, the commands (the runs' and the servers'), the CPUs, namespaces and veth."""
    missing = []
    if os.geteuid() != 0:
        missing.append("root privileges (the lab creates network namespaces; run as root)")
    commands = [*REQUIRED_COMMANDS, *commands]
    missing += [f"command `{c}` (run scripts/setup.sh)" for c in dict.fromkeys(commands) if shutil.which(c) is None]
    if env.cpus:
        allowed = os.sched_getaffinity(0)
        bad = [c for c in env.cpus.client + env.cpus.server if c not in allowed]
        if bad:
            missing.append(f"CPUs {bad} named in {env.name}/environment.yaml cpus (allowed: {sorted(allowed)})")
    if not missing:
        missing += _probe(["veth"]).values()
    if missing:
        raise TargetError("lab: cannot run, missing:\n  - " + "\n  - ".join(missing))


def scenario_problems(env: Environment, scenarios: list[str]) -> dict[str, list[str]]:
    """What each scenario needs that this machine lacks, by scenario (only those lacking something)."""
    needs = {name: _needs(name, LabScenario.of(env, name)) for name in scenarios}
    absent = _probe(sorted({f for _, features in needs.values() for f in features}))
    problems = {}
    for name, (commands, features) in needs.items():
        reasons = [f"command `{c}` (run scripts/setup.sh)" for c in commands if shutil.which(c) is None]
        reasons += [absent[f] for f in features if f in absent]
        if reasons:
            problems[name] = reasons
    return problems


def _needs(name: str, sc: LabScenario) -> tuple[list[str], list[str]]:
    """The commands and kernel features one scenario needs beyond what every scenario needs."""
    topo = TOPOLOGIES[topology_of(name, sc)]
    commands, features = list(topo.commands), list(topo.features)
    if sc.service_proxy == "nftables":
        commands.append("nft")
    if sc.service_proxy == "iptables" or sc.firewall or sc.mesh or sc.filter_rules:
        commands.append("iptables-restore")
    if sc.big_tcp and sc.big_tcp > 65536:  # up to 65536: every kernel
        features.append("big-tcp" if sc.ip_family == 6 else "big-tcp-ipv4")
    if sc.mesh:
        commands += [haproxy.BINARY, "openssl"] if sc.proxy == "haproxy" else ["openssl"]
        features.append("mesh-capture")
    return commands, features


def _probe(features: list[str]) -> dict[str, str]:
    """Why each feature the kernel refuses is missing, tried in a throwaway namespace."""
    if not features:
        return {}
    lab_id = new_lab_id()
    probe = f"{lab_id}-probe"
    lock = try_lock(lab_id)  # so a concurrent clean-up leaves the probe alone
    try:
        proc = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
        if proc.returncode != 0:
            return {f: f"network namespaces (ip netns add: {proc.stderr.strip()})" for f in features}
        absent = {}
        for feature in features:
            try:
                _try_feature(probe, feature)
            except TargetError as e:
                absent[feature] = f"{FEATURES[feature]} ({e})"
        return absent
    finally:
        remove_namespace(probe)
        release(lab_id, lock)


def _try_feature(probe: str, feature: str) -> None:
    """Create in ``probe`` what the feature's scenarios create; raises TargetError with the kernel's answer."""
    if feature == "ebpf-host-routing":
        ip(probe, "link", "add", "bv0", "type", "veth", "peer", "name", "bv1")
        bpf.attach(probe, "bv0", bpf.FROM_POD)
        bpf.attach(probe, "bv1", bpf.FROM_WIRE)
    elif feature in ("big-tcp", "big-tcp-ipv4"):
        family = 6 if feature == "big-tcp" else 4
        ip(probe, "link", "add", f"pbig{family}", "type", "veth", "peer", "name", f"pbig{family}p")
        set_big_tcp([(probe, f"pbig{family}")], BIG_TCP_PROBE_SIZE, family)
    elif feature == "mesh-capture":
        sidecar = shapes.Proxy("client-sidecar", "client", probe, (), "")
        apply(probe, ["iptables-restore", "--noflush"], shapes.capture_rules(sidecar, [80]))
    elif feature == "ipsec":
        # a throwaway key: this SA never carries a packet
        apply_ip(
            probe,
            [encryption.xfrm_state(1, 2, encryption.random_key())],
            f"ip xfrm state add ... proto esp ... aead {encryption.IPSEC_AEAD}",
        )
    else:
        extra = {"veth": ["peer", "name", "pv1"], "vxlan": ["id", "1", "dstport", str(VXLAN_PORT)]}.get(feature, [])
        proc = subprocess.run(
            ["ip", "-n", probe, "link", "add", f"p{feature[:4]}0", "type", feature, *extra],
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
        )
        if proc.returncode != 0:
            raise TargetError(f"ip link add type {feature}: {proc.stderr.strip()}")
