"""The embedded two-node lab: network namespaces joined by a veth "wire".

Each scenario gets its own set of namespaces, named ``<lab id>-<scenario>-<role>``
(roles n1/n2 for the nodes, p1/p2 for the pods on them), so all scenarios of a
campaign stand side by side and runs interleave. Everything the lab creates
lives inside those namespaces: deleting them (and killing the processes in
them) removes every link, route and rule.

One module per concern: addresses, topologies (the datapaths as data),
encryption, netfilter (firewall and kube-proxy rules), bpf (host routing),
probes (what the machine must offer), locking (which lab owns what), netns
(commands in namespaces).
"""

from __future__ import annotations

import logging
import os
import platform
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from benchlib.base.errors import DatapathError, TargetError
from benchlib.collectors import Server
from benchlib.host import cpu, disturbance
from benchlib.settings.environment import Environment

from .. import LocalProcess, Placement, Target, service_ports, wait_listening
from ..mesh import certificates, shapes
from . import envoy, haproxy, netfilter, proxies, topologies
from .addresses import POD_GW, POD_IP
from .locking import clean_leftovers, lab_id_of, new_lab_id, release, temp_dir, try_lock
from .netns import COMMAND_TIMEOUT_S, in_ns, ip, list_namespaces, remove_namespace, stop
from .probes import check_machine, preflight, scenario_problems

_log = logging.getLogger(__name__)  # the default for log=: where benchlib.base.logs sends messages

__all__ = [
    "LabTarget",
    "check_machine",
    "clean_leftovers",
    "default_cpus",
    "in_ns",
    "list_namespaces",
    "scenario_problems",
]

SERVER_LISTEN_TIMEOUT_S = 10
SERVER_POLL_S = 0.05
# A TCP_CRR client opens a connection every few milliseconds (the longest gap seen here was 15 ms,
# with four busy loops on the 2 CPUs): this long without one, its test is over.
CLIENT_DONE_IDLE_S = 0.05
CLIENT_DONE_POLL_S = 0.005


def default_cpus() -> tuple[list[int], list[int]]:
    """Split the CPUs this process may use: first half client, second half server."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise TargetError(f"lab: needs at least 2 CPUs to pin client and server apart, have {cpus}")
    half = len(cpus) // 2
    return cpus[:half], cpus[half:]


def accepted(pid: int) -> int | None:
    """TCP connections accepted so far in the network namespace of process ``pid`` (PassiveOpens of its
    /proc/<pid>/net/snmp); None if the process is gone."""
    try:
        lines = Path(f"/proc/{pid}/net/snmp").read_text().splitlines()
    except (FileNotFoundError, ProcessLookupError):
        return None
    names, values = (line.split() for line in lines if line.startswith("Tcp:"))
    return int(values[names.index("PassiveOpens")])


def child_pids(pid: int) -> list[int]:
    """The children of a process (from /proc: the kernel's list of each of its threads' children)."""
    tasks = Path(f"/proc/{pid}/task")
    try:
        return [int(c) for t in tasks.iterdir() for c in (t / "children").read_text().split()]
    except FileNotFoundError:
        return []  # the process is gone


BACKENDS: dict[str, proxies.Backend] = {"haproxy": haproxy, "envoy": envoy}  # by Scenario.proxy


def _mask(cpus: list[int]) -> str:
    return format(sum(1 << c for c in cpus), "x")


class LabTarget(Target):
    """Builds every scenario's namespaces on entry, serves every run, tears down on exit."""

    kind = "lab"
    can_profile = True  # every namespace runs on this machine's kernel
    # every scenario stands at once, so runs of different scenarios can alternate
    interleaves_scenarios = True
    ends_server_wait = True  # the servers are this machine's processes

    def __init__(
        self,
        env: Environment,
        scenarios: list[str],
        servers: Sequence[Server] = (),
        commands: Sequence[str] = (),
        log=_log.info,
    ):
        super().__init__(env, scenarios, servers, commands, log)
        self.lab_id = new_lab_id()
        if env.cpus:
            self.client_cpus, self.server_cpus = env.cpus.client, env.cpus.server
        else:
            self.client_cpus, self.server_cpus = default_cpus()
        self._lock = None
        self._namespaces: list[str] = []
        self._servers: list[subprocess.Popen] = []
        self._server_pids: dict[tuple[str, str], int] = {}  # (scenario, server name): the tool's server
        self._accepted_at_spawn: dict[str, int | None] = {}  # by scenario: its servers' accepts when a client started
        self._logdir: Path | None = None
        # per scenario: its mesh proxies and their processes
        self._proxies: dict[str, list[tuple[shapes.Proxy, subprocess.Popen]]] = {}
        self._backends: dict[str, proxies.Backend] = {}  # per scenario with a mesh: its proxy's
        self._tls_dirs: dict[str, Path | None] = {}  # per scenario with a mesh: its certificates, if any
        self._proxy_versions: dict[str, str] = {}  # by proxy kind (haproxy, envoy)
        # per scenario: its namespaces by side, and the CPU placement their receive steering is set for
        self._side_namespaces: dict[str, dict[str, list[str]]] = {}
        self._rps_masks: dict[str, str] = {}  # by namespace: the receive CPUs its devices' RPS was set to
        self._namespace_inodes: set[int] | None = None  # what foreign_snapshot tells the lab's processes by

    @property
    def _logs(self) -> Path:
        """Where the servers and proxies log (made by prepare)."""
        if self._logdir is None:
            raise TargetError("lab: used before prepare()")
        return self._logdir

    # -- life cycle ---------------------------------------------------------------------
    def prepare(self) -> None:
        preflight(self.env, self.scenarios, [*self.commands, *(s.argv[0] for s in self.servers)])
        clean_leftovers(self.log)
        self._lock = try_lock(self.lab_id)
        if self._lock is None:
            raise TargetError(f"lab: {self.lab_id} is already in use")
        self._logdir = temp_dir(self.lab_id)

    def setup(self) -> None:
        for name in self.scenarios:
            self.placements[name] = self._build(name)

    def teardown(self) -> None:
        for proc in self._servers:
            stop(proc)
        self._servers.clear()
        self._server_pids.clear()
        for ns in reversed(self._namespaces):
            remove_namespace(ns)
        self._namespaces.clear()
        self._namespace_inodes = None
        left = [ns for ns in list_namespaces() if lab_id_of(ns) == self.lab_id]
        if self._logdir:
            shutil.rmtree(self._logdir, ignore_errors=True)
        release(self.lab_id, self._lock)
        self._lock = None
        if left:
            raise TargetError(f"lab: teardown left namespaces behind: {left}")

    # -- what the runner uses -------------------------------------------------------------
    def namespace(self, scenario: str, side: str) -> str:
        return self.placements[scenario].details["namespaces"][side]

    def activate(self, scenario: str) -> None:
        """Nothing to switch: every scenario was built on entry."""

    def start_server(self, scenario: str, server: Server, cpus: list[int]) -> None:
        ns = self.namespace(scenario, "server")
        logfile = self._logs / f"{server.name}-{scenario}.log"
        with open(logfile, "w") as log:
            proc = subprocess.Popen(
                ["ip", "netns", "exec", ns, "taskset", "-c", ",".join(map(str, cpus)), *server.argv],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._servers.append(proc)
        self._server_pids[(scenario, server.name)] = proc.pid  # ip netns exec and taskset exec the server
        wait_listening(
            server,
            proc,
            lambda argv: in_ns(ns, *argv),
            "lab",
            f"in {ns}",
            logfile.read_text,
            timeout_s=SERVER_LISTEN_TIMEOUT_S,
            poll_s=SERVER_POLL_S,
        )

    def placement_for(self, scenario: str, kind: str) -> Placement:
        """split: the scenario's placement. shared (Target.cpu_placement): client and server both on
        the client's CPUs, receive processing too; both sides then measure that one CPU set."""
        mode = self.cpu_placement(scenario, kind)
        self._steer_receive(scenario, mode)
        base = self.placement(scenario)
        return base if mode == "split" else base.shared()

    def end_server_wait(self, scenario: str, server: Server, latest: float) -> None:
        """SIGALRM, the signal of the timer they wait on, to the server's test processes (its children):
        netserver's TCP_CRR child leaves accept() and reports (docs/concepts/cpu.md, "TCP_CRR ends with its
        test"). Fired once the client has connected and then opened no connection for CLIENT_DONE_IDLE_S
        (the server namespace's accepts), or at ``latest``."""
        pid = self._server_pids[(scenario, server.name)]
        before, count, changed = self._accepted_at_spawn.get(scenario), accepted(pid), time.monotonic()
        while (now := time.monotonic()) < latest:
            if before is not None and count is not None and count > before and now - changed >= CLIENT_DONE_IDLE_S:
                break
            time.sleep(min(CLIENT_DONE_POLL_S, latest - now))
            if (seen := accepted(pid)) != count:
                count, changed = seen, time.monotonic()
        for child in child_pids(pid):
            try:
                os.kill(child, signal.SIGALRM)
            except ProcessLookupError:
                pass  # that test ended on its own meanwhile

    def spawn(self, scenario: str, side: str, argv: list[str]) -> LocalProcess:
        if side == "client":  # what end_server_wait counts the client's connections from
            servers = [pid for (s, _), pid in self._server_pids.items() if s == scenario]
            self._accepted_at_spawn[scenario] = accepted(servers[0]) if servers else None
        return LocalProcess(["ip", "netns", "exec", self.namespace(scenario, side), *argv])

    def cpu_snapshot(self, scenario: str, side: str) -> cpu.Snapshot:
        return cpu.read_local()  # both lab "nodes" share this kernel's /proc/stat

    def foreign_snapshot(self, scenario: str) -> disturbance.Snapshot:
        """Every process of this machine but the lab's (in any of its namespaces: every scenario's tools,
        servers and proxies) and the harness's own (this process and what it started)."""
        if self._namespace_inodes is None:
            self._namespace_inodes = {os.stat(f"/run/netns/{ns}").st_ino for ns in self._namespaces}
        return disturbance.scan(self._namespace_inodes, os.getpid())

    def describe(self) -> dict:
        iproute2 = subprocess.run(
            ["ip", "-V"], capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S
        ).stdout.strip()
        versions = {"kernel": platform.release(), "iproute2": iproute2}
        versions.update(self._proxy_versions)
        return {
            "target": "lab",
            "lab_id": self.lab_id,
            "versions": versions,
            "clk_tck": cpu.clk_tck(),
            "machine": cpu.machine(),
        }

    # -- building -------------------------------------------------------------------------
    def _ns(self, scenario: str, role: str, ipv6: bool = False) -> str:
        name = f"{self.lab_id}-{scenario}-{role}"
        ip(None, "netns", "add", name)
        self._namespaces.append(name)
        ip(name, "link", "set", "lo", "up")
        # IPv6 stays off unless the scenario's traffic uses it (no router solicitations, no DAD waits)
        for key, value in (
            ("net.ipv6.conf.all.disable_ipv6", int(not ipv6)),
            ("net.ipv4.conf.all.rp_filter", 0),
            ("net.ipv4.conf.default.rp_filter", 0),
            *((("net.ipv6.conf.default.accept_dad", 0),) if ipv6 else ()),
        ):
            in_ns(name, "sysctl", "-qw", f"{key}={value}")
        return name

    def _build(self, name: str) -> Placement:
        sc = self.env.scenarios[name]
        topology = topologies.topology_of(name, sc)
        built = topologies.build(
            name,
            topology,
            sc.mtu,
            lambda role: self._ns(name, role, sc.ip_family == 6),
            netfilter_needed=bool(sc.firewall or sc.service_proxy or sc.filter_rules),
            ip_family=sc.ip_family,
            big_tcp=sc.big_tcp,
        )
        nodes, sides, server_address = built.nodes, built.sides, built.server_address
        # the lab's "nodes" are namespaces of this one kernel: per-side CPU is per CPU set
        details = {**built.details, "namespaces": sides, "nodes_share_kernel": True}
        if sc.firewall:
            for node in nodes.values():
                netfilter.install_firewall(node, sc.firewall)
            details["firewall"] = sc.firewall
        if sc.filter_rules:
            details["filter_rules"] = netfilter.install_rule_chain(nodes[2], sc.filter_rules)
        if sc.mesh:
            details["mesh"] = self._mesh(name, sc.mesh, sc.proxy, nodes, sides)
        if sc.service_proxy:
            if topology == "host":
                raise TargetError(f"lab: scenario {name}: services need pods (a topology other than host)")
            # kube-proxy's rules on the client's node; the rules render TCP only
            ports = [port for port, protocol in service_ports(self.servers) if protocol == "tcp"]
            service_info = netfilter.install_services(nodes[1], sc.service_proxy, sc.services, POD_IP[2], ports)
            server_address = service_info["cluster_ip"]
            details.update(service_info)
        node_of = {"client": nodes[1], "server": nodes[2]}
        # the node, and its pod if any
        self._side_namespaces[name] = {side: list(dict.fromkeys([node_of[side], sides[side]])) for side in node_of}
        self._steer_receive(name, "split")
        details["cpu_placement"] = "split"
        return Placement(
            scenario=name,
            server_address=server_address,
            client_node=nodes[1],
            server_node=nodes[2],
            client_cpus=self.client_cpus,
            server_cpus=self.server_cpus,
            details=details,
        )

    def _mesh(self, name: str, mesh: str, kind: str, nodes: dict[int, str], sides: dict[str, str]) -> dict:
        """Start the scenario's proxies (``kind``: haproxy or envoy) on their side's CPUs and capture the
        pod traffic into them."""
        http_ports = sorted({s.port for s in self.servers if s.l7 == "http"})
        plan = shapes.proxies(mesh, nodes, {1: sides["client"], 2: sides["server"]}, http_ports)
        workdir = self._logs / name
        workdir.mkdir()
        tls_dir = workdir / "tls" if mesh in shapes.MTLS_MESHES else None
        if tls_dir:
            certificates.make_certificates(tls_dir, [p.identity for p in plan])
        if mesh in shapes.NODE_MESHES:
            # REDIRECT needs an address on the incoming device: the pods' gateway address, on the node's side
            for node in nodes.values():
                ip(node, "addr", "add", f"{POD_GW}/32", "dev", "veth0")
        if mesh == "node-proxies-waypoint":  # the waypoint's own address, on the server's node
            ip(nodes[2], "addr", "add", f"{shapes.WAYPOINT_IP}/32", "dev", "lo")
        backend = self._backends[name] = BACKENDS[kind]
        self._tls_dirs[name] = tls_dir
        if kind not in self._proxy_versions:
            self._proxy_versions[kind] = backend.version()
        self._proxies[name] = []
        for proxy in plan:
            self._proxies[name].append((proxy, self._start_proxy(name, proxy)))
            proxies.install_capture(proxy, http_ports)
        return shapes.describe(mesh, kind, self._proxy_versions[kind], http_ports, plan)

    def _start_proxy(self, scenario: str, proxy: shapes.Proxy) -> subprocess.Popen:
        """Start one of the scenario's proxies on its side's CPUs and wait for its listeners."""
        backend, workdir = self._backends[scenario], self._logs / scenario
        cpus = {"client": self.client_cpus, "server": self.server_cpus}
        proc = backend.start(proxy, cpus[proxy.side], workdir, self._tls_dirs[scenario])
        self._servers.append(proc)  # stopped at teardown with the tools' servers
        for ln in proxy.listeners:
            # on its own address, a listener must be told from another proxy's on the same port
            where = "" if ln.address == "0.0.0.0" else f" and src {ln.address}"
            wait_listening(
                Server(f"{self.env.scenarios[scenario].proxy} {proxy.name}", [], ln.port),
                proc,
                lambda argv, ns=proxy.namespace, where=where: in_ns(ns, *argv[:-1], argv[-1] + where),
                "lab",
                f"in {proxy.namespace}",
                lambda: backend.output(workdir, proxy),
                timeout_s=SERVER_LISTEN_TIMEOUT_S,
                poll_s=SERVER_POLL_S,
            )
        return proc

    def stats_socket(self, scenario: str, proxy: str) -> Path:
        """A mesh proxy's stats socket: HAProxy's, or Envoy's admin interface (the tests read its counters)."""
        found = next(p for p, _ in self._proxies[scenario] if p.name == proxy)
        return self._backends[scenario].stats_socket(self._logs / scenario, found)

    def datapath_usage(self, scenario: str, reset_peak: bool) -> dict[str, dict]:
        """Raises DatapathError, with the proxy's last words, when one of the scenario's proxies died."""
        cpus = {"client": self.client_cpus, "server": self.server_cpus}
        out = {}
        for proxy, proc in self._proxies.get(scenario, []):
            backend = self._backends[scenario]  # every scenario with proxies has its backend
            if proc.poll() is not None:
                tail = backend.output(self._logs / scenario, proxy).strip()[-400:]
                raise DatapathError(
                    f"lab: scenario {scenario}: proxy {proxy.name} exited {proc.returncode}: "
                    f"{tail or '(it logged nothing)'}"
                )
            out[proxy.name] = {
                "side": proxy.side,
                "cpus": cpus[proxy.side],
                "version": self._proxy_versions[self.env.scenarios[scenario].proxy],
                **proxies.usage(proc.pid, reset_peak),
            }
            # the bytes it has carried so far, by its own live counters, where it keeps them: a run during
            # which they did not move did not go through it
            carried = backend.bytes_carried(self.stats_socket(scenario, proxy.name))
            if carried is not None:
                out[proxy.name]["bytes"] = carried
        return out

    def recover(self, scenario: str) -> list[str]:
        """Start again every proxy of the scenario that died (its capture rules stay in place), so the
        runs after a failed one find their path whole. Returns the names of those restarted."""
        restarted = []
        for i, (proxy, proc) in enumerate(self._proxies.get(scenario, [])):
            if proc.poll() is not None:
                self._proxies[scenario][i] = (proxy, self._start_proxy(scenario, proxy))
                restarted.append(proxy.name)
        return restarted

    def _steer_receive(self, scenario: str, mode: str) -> None:
        # veth delivers a packet on the sending CPU. RPS moves receive
        # processing to the receiving side's CPUs, as a NIC interrupt on the
        # other machine would, so sender and receiver CPU can be told apart
        # (split); shared keeps all of it on the one CPU set. Only namespaces whose mask changes are
        # written (the server side's, between split and shared runs): each write is an `ip netns exec`.
        for side, namespaces in self._side_namespaces[scenario].items():
            mask = _mask(self.client_cpus if side == "client" or mode == "shared" else self.server_cpus)
            for ns in namespaces:
                if self._rps_masks.get(ns) != mask:
                    in_ns(ns, "sh", "-c", f"for f in /sys/class/net/*/queues/rx-*/rps_cpus; do echo {mask} > $f; done")
                    self._rps_masks[ns] = mask
