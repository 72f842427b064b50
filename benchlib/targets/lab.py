"""The embedded two-node lab: network namespaces joined by a veth "wire".

Each scenario gets its own set of namespaces, named ``bl-<pid>_<n>-<scenario>-<role>``
(roles n1/n2 for the nodes, p1/p2 for the pods on them), so all scenarios of a
campaign can stand side by side and runs can be interleaved. Everything the lab
creates lives inside those namespaces: deleting them (and killing the processes
in them) removes every link, route and rule.

Ownership: the process that builds a lab holds an flock on
``/run/benchlib/bl-<pid>_<n>.lock`` for the lab's lifetime. Namespaces whose lock
is free belong to a dead campaign and are removed by the next start (or by
``benchlib lab clean``).

Addresses come from 198.18.0.0/15, the range RFC 2544 reserves for benchmark
networks; the namespaces have no route out of the machine.
"""
from __future__ import annotations

import fcntl
import itertools
import json
import os
import platform
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .. import bpf
from .. import cpu
from ..collectors import Server
from ..config import Environment, Scenario
from . import LocalProcess, Placement, Target, TargetError, kubeproxy, service_ports, wait_listening

PREFIX = "bl-"
LOCK_DIR = Path("/run/benchlib")
NODE_IP = {1: "198.18.0.1", 2: "198.18.0.2"}
POD_IP = {1: "198.19.1.10", 2: "198.19.2.10"}
POD_GW = "169.254.1.1"  # the routed-veth gateway every pod sees (as Calico does)
VXLAN_ID, VXLAN_PORT = 42, 4789
WG_PORT = 51820
# Cilium's IPsec default: AES-GCM as ESP's AEAD (RFC 4106), 128-bit key + 32-bit salt, 128-bit ICV
IPSEC_AEAD, IPSEC_KEY_BYTES, IPSEC_ICV_BITS, IPSEC_REQID = "rfc4106(gcm(aes))", 20, 128, 1
REQUIRED_COMMANDS = ("ip", "sysctl", "ss", "taskset")
# topologies whose pods own a /32 behind a link-local gateway, routed by the node
ROUTED_PODS = ("veth-routed", "ebpf-host-routing", "wireguard", "ipsec")


def _run(argv: list[str], what: str, stdin: str | None = None) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, input=stdin)
    if proc.returncode != 0:
        raise TargetError(f"lab: {what} failed: `{' '.join(argv)}`: {proc.stderr.strip()}")
    return proc.stdout


def ip(ns: str | None, *args: str) -> str:
    return _run(["ip", *(["-n", ns] if ns else []), *args], "ip " + " ".join(args[:2]))


def in_ns(ns: str, *argv: str) -> str:
    return _run(["ip", "netns", "exec", ns, *argv], argv[0])


def list_namespaces() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def remove_namespace(ns: str) -> None:
    """Kill what runs inside ``ns`` (netservers of a killed campaign), then delete it."""
    pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
    for pid in pids:
        try:
            os.kill(int(pid), 9)
        except ProcessLookupError:
            pass
    subprocess.run(["ip", "netns", "del", ns], capture_output=True)


_LAB_ID = re.compile(rf"^({PREFIX}\d+_\d+)-")
_instances = itertools.count()


def _lab_id_of(ns: str) -> str | None:
    match = _LAB_ID.match(ns)
    return match.group(1) if match else None


def _try_lock(lab_id: str):
    """Take the lab's lock without waiting; None when a live process holds it."""
    LOCK_DIR.mkdir(parents=True, exist_ok=True)
    f = open(LOCK_DIR / f"{lab_id}.lock", "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.close()
        return None
    return f


def _release(lab_id: str, lock) -> None:
    if lock:
        (LOCK_DIR / f"{lab_id}.lock").unlink(missing_ok=True)
        lock.close()


def clean_leftovers(log=print) -> list[str]:
    """Remove the namespaces of labs whose owner is gone. Returns what was removed."""
    removed = []
    by_lab: dict[str, list[str]] = {}
    for ns in list_namespaces():
        lab_id = _lab_id_of(ns)
        if lab_id:
            by_lab.setdefault(lab_id, []).append(ns)
    for lab_id, namespaces in by_lab.items():
        lock = _try_lock(lab_id)
        if lock is None:
            continue  # a live campaign owns it
        for ns in namespaces:
            remove_namespace(ns)
            removed.append(ns)
        _release(lab_id, lock)
    if removed:
        log(f"lab: removed {len(removed)} namespaces left by a killed campaign: {' '.join(removed)}")
    return removed


def default_cpus() -> tuple[list[int], list[int]]:
    """Split the CPUs this process may use: first half client, second half server."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise TargetError(f"lab: needs at least 2 CPUs to pin client and server apart, have {cpus}")
    half = len(cpus) // 2
    return cpus[:half], cpus[half:]


def preflight(env: Environment, scenarios: list[str], commands: list[str]) -> None:
    """Check privilege, commands and kernel features before anything is built.

    Raises TargetError naming everything that is missing.
    """
    check_machine(env, commands)
    problems = scenario_problems(env, scenarios)
    if problems:
        raise TargetError("lab: cannot run these scenarios here (nothing was built):\n  - " + "\n  - ".join(
            f"scenario {name} needs {reason}" for name, reasons in problems.items() for reason in reasons))


def check_machine(env: Environment, commands: list[str]) -> None:
    """What every scenario needs: root, the commands (the runs' and the servers'), the CPUs, namespaces and veth."""
    missing = []
    if os.geteuid() != 0:
        missing.append("root privileges (the lab creates network namespaces; run as root)")
    commands = list(REQUIRED_COMMANDS) + list(commands)
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
    """What each scenario needs that this machine lacks, by scenario (only those lacking something).

    Kernel features are tried, once each, in a throwaway namespace: a config
    file can say a feature is built, only trying it says it works here.
    """
    needs = {name: _needs(env.scenarios[name].topology or name, env.scenarios[name]) for name in scenarios}
    absent = _probe(sorted({f for _, features in needs.values() for f in features}))
    problems = {}
    for name, (commands, features) in needs.items():
        reasons = [f"command `{c}` (run scripts/setup.sh)" for c in commands if shutil.which(c) is None]
        reasons += [absent[f] for f in features if f in absent]
        if reasons:
            problems[name] = reasons
    return problems


def _needs(topology: str, sc: Scenario) -> tuple[list[str], list[str]]:
    """The commands and kernel features one scenario needs beyond what every scenario needs."""
    commands, features = [], []
    if sc.service_proxy == "nftables":
        commands.append("nft")
    if sc.service_proxy == "iptables" or sc.firewall:
        commands.append("iptables-restore")
    if topology in ("bridge", "vxlan"):
        features.append(topology)
    if topology == "ebpf-host-routing":
        commands.append("tc")
        features.append("ebpf-host-routing")
    if topology == "wireguard":
        commands.append("wg")
        features.append("wireguard")
    if topology == "ipsec":
        features.append("ipsec")
    return commands, features


_FEATURES = {
    "veth": "the kernel's veth link type",
    "bridge": "the kernel's bridge link type, CONFIG_BRIDGE",
    "vxlan": "the kernel's VXLAN link type, CONFIG_VXLAN",
    "ebpf-host-routing": "tc BPF host-routing, which this machine cannot load",
    "wireguard": "the kernel's WireGuard module, CONFIG_WIREGUARD",
    "ipsec": "IPsec ESP with AES-GCM, CONFIG_INET_ESP and CONFIG_CRYPTO_GCM",
}


def _probe(features: list[str]) -> dict[str, str]:
    """Why each feature the kernel refuses is missing, tried in a throwaway namespace."""
    if not features:
        return {}
    lab_id = f"{PREFIX}{os.getpid()}_{next(_instances)}"
    probe = f"{lab_id}-probe"
    lock = _try_lock(lab_id)  # so a concurrent clean-up leaves the probe alone
    try:
        proc = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
        if proc.returncode != 0:
            return {f: f"network namespaces (ip netns add: {proc.stderr.strip()})" for f in features}
        absent = {}
        for feature in features:
            try:
                _try_feature(probe, feature)
            except TargetError as e:
                absent[feature] = f"{_FEATURES[feature]} ({e})"
        return absent
    finally:
        remove_namespace(probe)
        _release(lab_id, lock)


def _try_feature(probe: str, feature: str) -> None:
    """Create in ``probe`` what the feature's scenarios create; raises TargetError with the kernel's answer."""
    if feature == "ebpf-host-routing":
        ip(probe, "link", "add", "bv0", "type", "veth", "peer", "name", "bv1")
        bpf.attach(probe, "bv0", bpf.FROM_POD)
        bpf.attach(probe, "bv1", bpf.FROM_WIRE)
    elif feature == "ipsec":
        # a throwaway key: this SA never carries a packet
        _apply_ip(probe, [_xfrm_state(1, 2, "0x" + secrets.token_hex(IPSEC_KEY_BYTES))],
                  f"ip xfrm state add ... proto esp ... aead {IPSEC_AEAD}")
    else:
        extra = {"veth": ["peer", "name", "pv1"], "vxlan": ["id", "1", "dstport", str(VXLAN_PORT)]}.get(feature, [])
        proc = subprocess.run(["ip", "-n", probe, "link", "add", f"p{feature[:4]}0", "type", feature, *extra],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise TargetError(f"ip link add type {feature}: {proc.stderr.strip()}")


def _mask(cpus: list[int]) -> str:
    return format(sum(1 << c for c in cpus), "x")


class LabTarget(Target):
    """Builds the scenarios' namespaces once, serves every run, tears down on exit."""

    kind = "lab"
    # every scenario stands at once, so runs of different scenarios can alternate
    interleaves_scenarios = True

    def __init__(self, env: Environment, scenarios: list[str], servers: list[Server] = (),
                 commands: list[str] = (), log=print):
        super().__init__(env, scenarios, servers, commands, log)
        self.lab_id = f"{PREFIX}{os.getpid()}_{next(_instances)}"
        if env.cpus:
            self.client_cpus, self.server_cpus = env.cpus.client, env.cpus.server
        else:
            self.client_cpus, self.server_cpus = default_cpus()
        self._lock = None
        self._namespaces: list[str] = []
        self._servers: list[subprocess.Popen] = []
        self._logdir: Path | None = None

    # -- lifecycle -----------------------------------------------------------------
    def prepare(self) -> None:
        preflight(self.env, self.scenarios, [*self.commands, *(s.argv[0] for s in self.servers)])
        clean_leftovers(self.log)
        self._lock = _try_lock(self.lab_id)
        if self._lock is None:
            raise TargetError(f"lab: {self.lab_id} is already in use")
        self._logdir = Path(tempfile.mkdtemp(prefix=f"{self.lab_id}-"))

    def setup(self) -> None:
        for name in self.scenarios:
            self.placements[name] = self._build(name)

    def teardown(self) -> None:
        for proc in self._servers:
            _stop(proc)
        self._servers.clear()
        for ns in reversed(self._namespaces):
            remove_namespace(ns)
        self._namespaces.clear()
        left = [ns for ns in list_namespaces() if _lab_id_of(ns) == self.lab_id]
        if self._logdir:
            shutil.rmtree(self._logdir, ignore_errors=True)
        _release(self.lab_id, self._lock)
        self._lock = None
        if left:
            raise TargetError(f"lab: teardown left namespaces behind: {left}")

    # -- what the runner uses ---------------------------------------------------------
    def namespace(self, scenario: str, side: str) -> str:
        return self.placements[scenario].details["namespaces"][side]

    def activate(self, scenario: str) -> None:
        """Nothing to switch: every scenario was built on entry."""

    def spawn(self, scenario: str, side: str, argv: list[str]) -> LocalProcess:
        return LocalProcess(["ip", "netns", "exec", self.namespace(scenario, side), *argv])

    def cpu_snapshot(self, scenario: str, side: str) -> cpu.Snapshot:
        return cpu.read_local()  # both lab "nodes" share this kernel's /proc/stat

    def describe(self) -> dict:
        iproute2 = subprocess.run(["ip", "-V"], capture_output=True, text=True).stdout.strip()
        return {"target": "lab", "lab_id": self.lab_id,
                "versions": {"kernel": platform.release(), "iproute2": iproute2}, "clk_tck": cpu.clk_tck()}

    # -- building ------------------------------------------------------------------
    def _ns(self, scenario: str, role: str) -> str:
        name = f"{self.lab_id}-{scenario}-{role}"
        ip(None, "netns", "add", name)
        self._namespaces.append(name)
        ip(name, "link", "set", "lo", "up")
        for key in ("net.ipv6.conf.all.disable_ipv6", "net.ipv4.conf.all.rp_filter",
                    "net.ipv4.conf.default.rp_filter"):
            in_ns(name, "sysctl", "-qw", f"{key}={1 if 'ipv6' in key else 0}")
        return name

    def _build(self, name: str) -> Placement:
        sc = self.env.scenarios[name]
        topology = sc.topology or name
        nodes = {i: self._ns(name, f"n{i}") for i in (1, 2)}
        ip(None, "link", "add", "eth0", "netns", nodes[1], "type", "veth", "peer", "name", "eth0", "netns", nodes[2])
        for i, node in nodes.items():
            ip(node, "addr", "add", f"{NODE_IP[i]}/24", "dev", "eth0")
            ip(node, "link", "set", "eth0", "up")
            in_ns(node, "sysctl", "-qw", "net.ipv4.ip_forward=1")
        sides = {"client": nodes[1], "server": nodes[2]}
        server_address = NODE_IP[2]
        encryption = None
        if topology != "host":
            pods = {i: self._pod(name, i, nodes[i], topology, sc.mtu) for i in (1, 2)}
            if topology == "wireguard":
                encryption = self._wireguard(nodes, sc.mtu)
            elif topology == "ipsec":
                encryption = self._ipsec(nodes)
            for i in (1, 2):
                self._route_remote_pods(nodes[i], i, 3 - i, topology)
            if encryption:
                _verify_encrypted(name, topology, nodes, pods)
            if topology == "ebpf-host-routing":
                if sc.firewall or sc.service_proxy:
                    raise TargetError(f"lab: scenario {name}: the BPF programs bypass the node's netfilter, "
                                      "so firewall and service_proxy would not apply")
                for i in (1, 2):
                    self._host_routing(nodes[i], pods[i], i)
            sides = {"client": pods[1], "server": pods[2]}
            server_address = POD_IP[2]
        details = {"topology": topology, "namespaces": sides, "nodes": nodes, "mtu": sc.mtu}
        if topology == "ebpf-host-routing":
            details["bpf_object"] = bpf.object_path().name  # names the hash of the source it ran
        if encryption:
            details["encryption"] = encryption  # algorithms and parameters, never a key
        if sc.firewall:
            for node in nodes.values():
                _apply(node, ["iptables-restore"], _firewall_rules(sc.firewall))
            details["firewall"] = sc.firewall
        if sc.service_proxy:
            if topology == "host":
                raise TargetError(f"lab: scenario {name}: services need pods (a topology other than host)")
            service_info = self._install_services(nodes[1], sc.service_proxy, sc.services, POD_IP[2])
            server_address = service_info["cluster_ip"]
            details.update(service_info)
        side_cpus = {"client": self.client_cpus, "server": self.server_cpus}
        side_namespaces = {"client": [nodes[1]] + ([sides["client"]] if topology != "host" else []),
                           "server": [nodes[2]] + ([sides["server"]] if topology != "host" else [])}
        for side, namespaces in side_namespaces.items():
            for ns in namespaces:
                self._steer_receive(ns, side_cpus[side])
        return Placement(
            scenario=name, server_address=server_address,
            client_node=nodes[1], server_node=nodes[2],
            client_cpus=self.client_cpus, server_cpus=self.server_cpus, details=details)

    def _pod(self, scenario: str, i: int, node: str, topology: str, mtu: int) -> str:
        pod = self._ns(scenario, f"p{i}")
        ip(None, "link", "add", "eth0", "netns", pod, "mtu", str(mtu),
           "type", "veth", "peer", "name", "veth0", "netns", node, "mtu", str(mtu))
        ip(pod, "link", "set", "eth0", "up")
        if topology in ROUTED_PODS:
            # Calico-style: the pod owns a /32 and reaches everything through a
            # link-local gateway that the node's veth end answers for.
            ip(pod, "addr", "add", f"{POD_IP[i]}/32", "dev", "eth0")
            ip(node, "link", "set", "veth0", "up")
            node_mac = ip(node, "-j", "link", "show", "veth0")
            mac = _json_field(node_mac, "address")
            ip(pod, "route", "add", POD_GW, "dev", "eth0", "scope", "link")
            ip(pod, "route", "add", "default", "via", POD_GW, "dev", "eth0")
            ip(pod, "neigh", "add", POD_GW, "lladdr", mac, "dev", "eth0", "nud", "permanent")
            ip(node, "route", "add", f"{POD_IP[i]}/32", "dev", "veth0")
        else:  # bridge and vxlan: pods on a Linux bridge (cni0 / docker0 style)
            ip(node, "link", "add", "br0", "type", "bridge")
            ip(node, "addr", "add", f"198.19.{i}.1/24", "dev", "br0")
            ip(node, "link", "set", "veth0", "master", "br0")
            ip(node, "link", "set", "veth0", "up")
            ip(node, "link", "set", "br0", "up")
            ip(pod, "addr", "add", f"{POD_IP[i]}/24", "dev", "eth0")
            ip(pod, "route", "add", "default", "via", f"198.19.{i}.1")
        return pod

    def _host_routing(self, node: str, pod: str, i: int) -> None:
        # As Cilium knows its endpoints' MACs, the node knows its pod's: a
        # permanent neighbour lets from_wire resolve the pod without ARP.
        pod_mac = _json_field(ip(pod, "-j", "link", "show", "eth0"), "address")
        ip(node, "neigh", "add", POD_IP[i], "lladdr", pod_mac, "dev", "veth0", "nud", "permanent")
        bpf.attach(node, "veth0", bpf.FROM_POD)
        bpf.attach(node, "eth0", bpf.FROM_WIRE)

    def _route_remote_pods(self, node: str, i: int, j: int, topology: str) -> None:
        remote_pods = f"198.19.{j}.0/24"
        if topology == "vxlan":
            # flannel-style overlay: a VXLAN device per node, the remote pod
            # subnet routed through it, encapsulated over the wire.
            ip(node, "link", "add", "vxlan0", "type", "vxlan", "id", str(VXLAN_ID), "local", NODE_IP[i],
               "remote", NODE_IP[j], "dstport", str(VXLAN_PORT), "dev", "eth0")
            ip(node, "addr", "add", f"198.19.{i}.0/32", "dev", "vxlan0")
            ip(node, "link", "set", "vxlan0", "up")
            ip(node, "route", "add", remote_pods, "via", f"198.19.{j}.0", "dev", "vxlan0", "onlink")
        elif topology == "wireguard":
            ip(node, "route", "add", remote_pods, "dev", "wg0")
        else:  # for ipsec, the xfrm policy catches the pod traffic on this route
            ip(node, "route", "add", remote_pods, "via", NODE_IP[j])

    def _wireguard(self, nodes: dict[int, str], mtu: int) -> dict:
        """A WireGuard device per node, peered with the other node for its pod subnet
        (Cilium's WireGuard mode). Keys are made for this lab and live only in
        memory: the private key reaches `wg` on stdin, never in argv or a file."""
        private = {i: _run(["wg", "genkey"], "wg genkey").strip() for i in nodes}
        public = {i: _run(["wg", "pubkey"], "wg pubkey", stdin=private[i]).strip() for i in nodes}
        for i, node in nodes.items():
            j = 3 - i
            ip(node, "link", "add", "wg0", "mtu", str(mtu), "type", "wireguard")
            _apply(node, ["wg", "set", "wg0", "listen-port", str(WG_PORT), "private-key", "/dev/stdin",
                          "peer", public[j], "allowed-ips", f"198.19.{j}.0/24",
                          "endpoint", f"{NODE_IP[j]}:{WG_PORT}"], private[i] + "\n")
            ip(node, "link", "set", "wg0", "up")
        return {"protocol": "wireguard", "cipher": "ChaCha20-Poly1305 (Noise_IK, Curve25519)",
                "udp_port": WG_PORT, "tunnel_mtu": mtu, "keys": "generated per lab, not recorded"}

    def _ipsec(self, nodes: dict[int, str]) -> dict:
        """ESP in tunnel mode between the node IPs for the pod subnets (Cilium's
        IPsec mode): one SA per direction, each with a random key made for this
        lab and passed to `ip` on stdin only."""
        keys = {(a, 3 - a): "0x" + secrets.token_hex(IPSEC_KEY_BYTES) for a in (1, 2)}
        for i, node in nodes.items():
            j = 3 - i
            tmpl = f"proto esp reqid {IPSEC_REQID} mode tunnel"
            lines = [_xfrm_state(a, b, key) for (a, b), key in keys.items()]
            # out: encrypt what leaves for the remote pods; fwd: admit remote pod
            # traffic only if it arrived through the SA (plaintext is dropped)
            lines += [f"xfrm policy add src 198.19.{i}.0/24 dst 198.19.{j}.0/24 dir out "
                      f"tmpl src {NODE_IP[i]} dst {NODE_IP[j]} {tmpl}",
                      f"xfrm policy add src 198.19.{j}.0/24 dst 198.19.{i}.0/24 dir fwd "
                      f"tmpl src {NODE_IP[j]} dst {NODE_IP[i]} {tmpl}"]
            _apply_ip(node, lines, f"lab: ip xfrm in {node}")
        return {"protocol": "esp", "mode": "tunnel", "aead": IPSEC_AEAD, "key_bits": 8 * IPSEC_KEY_BYTES,
                "icv_bits": IPSEC_ICV_BITS, "spi": {f"{a}->{b}": hex(_spi(a)) for a, b in keys},
                "keys": "random per lab, not recorded"}

    def _install_services(self, node: str, proxy: str, count: int, endpoint: str) -> dict:
        """kube-proxy's rules for ``count`` services on the client's node; returns what to record."""
        # the rules render TCP only, like the services of the 2021 study
        ports = [port for port, protocol in service_ports(self.servers) if protocol == "tcp"]
        svcs, bench = kubeproxy.services(count, endpoint, tuple(ports))
        if proxy == "iptables":
            text, argv = kubeproxy.iptables_rules(svcs, "198.19.0.0/16"), ["iptables-restore"]
        else:
            text, argv = kubeproxy.nftables_ruleset(svcs, "198.19.0.0/16"), ["nft", "-f", "-"]
        started = time.monotonic()
        _apply(node, argv, text)
        elapsed = time.monotonic() - started
        return {"service_proxy": proxy, "services": count, "cluster_ip": bench.cluster_ip,
                "service_position": svcs.index(bench), "service_rules": _count_rules(node, proxy),
                "service_rules_apply_s": round(elapsed, 3)}

    def _steer_receive(self, ns: str, cpus: list[int]) -> None:
        # veth delivers a packet on the sending CPU. RPS moves receive
        # processing to the receiving side's CPUs, as a NIC interrupt on the
        # other machine would, so sender and receiver CPU can be told apart.
        in_ns(ns, "sh", "-c", f"for f in /sys/class/net/*/queues/rx-*/rps_cpus; do echo {_mask(cpus)} > $f; done")

    def start_server(self, scenario: str, server: Server, cpus: list[int]) -> None:
        ns = self.namespace(scenario, "server")
        logfile = self._logdir / f"{server.name}-{scenario}.log"
        with open(logfile, "w") as log:
            proc = subprocess.Popen(["ip", "netns", "exec", ns, "taskset", "-c", ",".join(map(str, cpus)),
                                     *server.argv],
                                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self._servers.append(proc)
        wait_listening(server, proc, lambda argv: in_ns(ns, *argv), "lab", f"in {ns}", logfile.read_text,
                       timeout_s=10, poll_s=0.05)


def _spi(sender: int) -> int:
    return 0x1000 + sender


def _xfrm_state(a: int, b: int, key: str) -> str:
    """The SA for ESP from node a to node b (a line for `ip -batch`)."""
    return (f"xfrm state add src {NODE_IP[a]} dst {NODE_IP[b]} proto esp spi {hex(_spi(a))} "
            f"reqid {IPSEC_REQID} mode tunnel aead {IPSEC_AEAD} {key} {IPSEC_ICV_BITS}")


def _apply_ip(ns: str, lines: list[str], what: str) -> None:
    """Run `ip` commands read from stdin, so key material never shows in a process's argv."""
    proc = subprocess.run(["ip", "-n", ns, "-batch", "-"], input="\n".join(lines) + "\n",
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise TargetError(f"{what}: {' '.join(proc.stderr.split())}")


# one packet each way: a SYN to a closed port and the RST it earns
_ROUND_TRIP = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], 9), timeout=3).close()
except ConnectionRefusedError:
    pass
except OSError as e:
    sys.exit(str(e))
"""


def _encrypted_count(topology: str, node: str, i: int) -> int:
    """What node i has sent through its encryption so far: bytes to the WireGuard
    peer, or packets through its outbound ESP SA."""
    if topology == "wireguard":
        out = in_ns(node, "wg", "show", "wg0", "transfer")  # "<peer key>\t<rx bytes>\t<tx bytes>"
        return sum(int(line.split()[2]) for line in out.splitlines() if line.strip())
    out = ip(node, "-s", "xfrm", "state", "list", "src", NODE_IP[i], "dst", NODE_IP[3 - i])
    # the "lifetime current" line; the output also holds the key, so it is never logged
    match = re.search(r"(\d+)\(bytes\), (\d+)\(packets\)", out)
    if not match:
        raise TargetError(f"lab: no counters for the ESP SA {NODE_IP[i]} -> {NODE_IP[3 - i]} in {node}")
    return int(match.group(2))


def _verify_encrypted(scenario: str, topology: str, nodes: dict[int, str], pods: dict[int, str]) -> None:
    """A path that silently skipped the encryption would be a fake result: prove
    that pod traffic in both directions went through it, or refuse the scenario."""
    def round_trip() -> None:
        proc = subprocess.run(["ip", "netns", "exec", pods[1], sys.executable, "-c", _ROUND_TRIP, POD_IP[2]],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise TargetError(f"lab: scenario {scenario}: pod {POD_IP[1]} cannot reach pod {POD_IP[2]} "
                              f"through {topology}: {proc.stderr.strip()}")

    round_trip()  # the first one also completes WireGuard's handshake, which the counters would include
    before = {i: _encrypted_count(topology, node, i) for i, node in nodes.items()}
    round_trip()
    idle = [node for i, node in nodes.items() if _encrypted_count(topology, node, i) <= before[i]]
    if idle:
        raise TargetError(f"lab: scenario {scenario}: pod traffic left {idle} without going through "
                          f"{topology} (its counters did not move); refusing to measure an unencrypted path")


def _apply(ns: str, argv: list[str], text: str) -> None:
    proc = subprocess.run(["ip", "netns", "exec", ns, *argv], input=text, capture_output=True, text=True)
    if proc.returncode != 0:
        raise TargetError(f"lab: `{' '.join(argv)}` in {ns} failed: {proc.stderr.strip()[:2000]}")


def _count_rules(ns: str, proxy: str) -> int:
    """Rules the kernel holds after applying (not the text we sent)."""
    if proxy == "iptables":
        return in_ns(ns, "iptables-save", "-t", "nat").count("\n-A ")
    dump = json.loads(in_ns(ns, "nft", "-j", "list", "table", "ip", "kube-proxy"))
    return sum(1 for item in dump["nftables"] if "rule" in item)


def _firewall_rules(kind: str) -> str:
    """A stateful node firewall: every packet goes through connection tracking,
    unless ``notrack`` exempts the TCP benchmark traffic in the raw table (as the
    2021 study did with -j NOTRACK)."""
    filter_table = ["*filter",
                    "-A INPUT -m conntrack --ctstate ESTABLISHED,RELATED,NEW,UNTRACKED -j ACCEPT",
                    "-A FORWARD -m conntrack --ctstate ESTABLISHED,RELATED,NEW,UNTRACKED -j ACCEPT",
                    "-A OUTPUT -m conntrack --ctstate ESTABLISHED,RELATED,NEW,UNTRACKED -j ACCEPT",
                    "COMMIT"]
    raw_table = ["*raw", "-A PREROUTING -p tcp -j NOTRACK", "-A OUTPUT -p tcp -j NOTRACK", "COMMIT"]
    return "\n".join(filter_table + (raw_table if kind == "notrack" else [])) + "\n"


def _json_field(text: str, key: str) -> str:
    return json.loads(text)[0][key]


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, 15)
            proc.wait(timeout=3)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, 9)
            except ProcessLookupError:
                pass
            proc.wait()
