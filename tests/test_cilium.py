"""The real Cilium agent as the local cluster's CNI (scripts/k8s-local-cluster.sh --cni cilium).

cilium-agent, -operator and -cni v1.17.6 built from the Go module proxy; the
datapath compiled by clang when the agent starts; one agent per node, in the
node's network namespace and a private mount namespace. Every check reads
Cilium's own state (its service map, its conntrack table, its devices) or the
kernel's (BPF programs on cgroups, packets on the wire). Nothing is faked.
"""

from __future__ import annotations

import fcntl
import ipaddress
import json
import os
import re
import subprocess
from pathlib import Path

import polars as pl
import pytest

from benchlib.measure import runner
from benchlib.measure.plan import Plan
from benchlib.settings.loading import load_environment
from benchlib.tables import tidy
from benchlib.targets import TargetError
from benchlib.targets.kubernetes import KubernetesTarget, sidecars
from tests.conftest import REPO, require_root, short_params
from tests.local_cluster import (
    CLUSTER,
    NETPERF,
    STATE,
    cluster_script,
    execd_commands,
    in_node,
    leftovers,
    run_tool,
    serving_cluster,
    sysctls,
)
from tests.support.cilium import cilium_env, count_packets, unified_cgroup

LAUNCHER = REPO / "scripts/cluster/cni/cilium-agent-ns.sh"
CILIUM_SYNCED = f"bash {REPO}/pipelines/local-cilium/cilium-synced.sh"
# the agent would set both machine-wide; its private mount namespace makes them read-only to it
GLOBAL_SYSCTLS = ["kernel.unprivileged_bpf_disabled", "kernel.timer_migration"]
NODES = ("bk8s-node1", "bk8s-node2")


def cilium_cgroups() -> set[str]:
    """Every cgroup (relative to the cgroup2 root, "/" for the root) with a Cilium program attached."""
    tree = subprocess.run(
        ["bpftool", "cgroup", "tree", str(unified_cgroup())], capture_output=True, text=True, check=True
    ).stdout
    found, current = set(), None
    for line in tree.splitlines():
        if line.startswith("/"):
            current = line.split()[0]
        elif "cil_" in line and current is not None:
            found.add("/" + current[len(str(unified_cgroup())) :].lstrip("/"))
    return found


def switch(*args: str) -> str:
    done = cluster_script("cni", *args)
    assert done.returncode == 0, done.stderr
    return done.stderr


def cilium_dbg(node: int, *args: str) -> str:
    done = cluster_script("cilium-dbg", str(node), *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def cilium():
    require_root()
    for what in ([], ["cilium"]):  # no-ops once built (cached per machine)
        subprocess.run(["bash", str(CLUSTER), "build", *what], check=True)
    host_sysctls = sysctls(GLOBAL_SYSCTLS)
    up = cluster_script("up", "--nodes", "2", "--cni", "cilium", "--routing", "tunnel")
    assert up.returncode == 0, up.stderr
    yield host_sysctls
    cluster_script("down")


@pytest.fixture(autouse=True)
def environment_folder(tmp_path, monkeypatch):
    monkeypatch.setattr("benchlib.targets.kubernetes.scenarios.environment_dir", lambda name: tmp_path)


@pytest.fixture
def launch_scratch(tmp_path):
    """What the agent's launcher needs, without a cluster: /run/cilium to mount over, a node netns and a
    node cgroup (and a sibling cgroup that is not the node's)."""
    require_root()
    # one at a time across the test workers: the first made /run/cilium, and removes it after its test
    lock = open("/tmp/benchlib-launch-scratch.lock", "w")  # noqa: SIM115 (held for the fixture's life)
    fcntl.flock(lock, fcntl.LOCK_EX)
    made_run = not Path("/run/cilium").exists()
    Path("/run/cilium").mkdir(exist_ok=True)
    name = f"bl-launch-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    node, sibling = unified_cgroup() / name, unified_cgroup() / f"{name}-other"
    node.mkdir()
    sibling.mkdir()
    try:
        yield tmp_path, name, node, sibling
    finally:
        node.rmdir()
        sibling.rmdir()
        subprocess.run(["ip", "netns", "del", name], check=True)
        if made_run:
            Path("/run/cilium").rmdir()
        lock.close()  # and with it the lock


def launch(run_dir: Path, cgroup_dir: Path, node_cgroup: str, netns: str, *argv: str):
    return subprocess.run(
        [
            "unshare",
            "--mount",
            "--propagation",
            "slave",
            "--",
            "sh",
            str(LAUNCHER),
            str(run_dir),
            str(cgroup_dir),
            node_cgroup,
            netns,
            *argv,
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )


@pytest.mark.parametrize("given", ["root", "sibling"])
def test_the_launcher_refuses_an_agent_whose_cgroup_is_not_its_nodes(launch_scratch, given):
    run_dir, netns, node, sibling = launch_scratch
    wrong = {"root": unified_cgroup(), "sibling": sibling}[given]
    marker = run_dir / "agent-ran"
    done = launch(run_dir, wrong, f"/{node.name}", netns, "touch", str(marker))
    assert done.returncode == 3, done.stderr
    shown = "/" if given == "root" else f"/{sibling.name}"
    assert f"refusing to start: /run/cilium/cgroupv2 is cgroup {shown}, not /{node.name}" in done.stderr
    assert not marker.exists()


def test_the_launcher_gives_the_agent_the_nodes_netns_and_private_mounts(launch_scratch):
    run_dir, netns, node, _ = launch_scratch
    probe = (
        "readlink /proc/self/ns/net; stat -f -c %T /sys/fs/bpf; ls /run/cilium; "
        "cat /proc/sys/kernel/timer_migration > /proc/sys/kernel/timer_migration || echo sysctl-read-only"
    )
    (run_dir / "from-the-node").write_text("")
    done = launch(run_dir, node, f"/{node.name}", netns, "sh", "-c", probe)
    assert done.returncode == 0, done.stderr
    out = done.stdout.split()
    node_ns = subprocess.run(
        ["ip", "netns", "exec", netns, "readlink", "/proc/self/ns/net"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out[0] == node_ns != os.readlink("/proc/self/ns/net")
    assert out[1] == "bpf_fs" and "from-the-node" in out and "sysctl-read-only" in out
    # and none of it is seen outside: the machine's /run/cilium does not show the node's directory
    assert "from-the-node" not in os.listdir("/run/cilium")


def test_socket_lb_is_on_the_nodes_cgroups_only_and_no_machine_wide_setting_changes(cilium):
    assert cilium_cgroups() == {"/bk8s-node1", "/bk8s-node2"}  # never "/": every process of the machine
    for node in (1, 2):
        attached = subprocess.run(
            ["bpftool", "cgroup", "show", str(unified_cgroup() / f"bk8s-node{node}")],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert "cil_sock4_connect" in attached
    assert sysctls(GLOBAL_SYSCTLS) == cilium
    # the agents' sockets, state and the CNI plugin's delete queue are in each node's own /run/cilium
    assert not any(Path("/run/cilium").iterdir())
    status = cilium_dbg(1, "status")
    assert "KubeProxyReplacement:    True" in status and "Routing:                 Network: Tunnel [vxlan]" in status


def pods_get_cilium_addresses_and_the_wire_shows_the_routing_mode(routing: str) -> None:
    switch("cilium", "--routing", routing)
    env = cilium_env({"pod-to-pod": {"description": "two nodes", "placement": "pod-to-pod"}})
    with serving_cluster(env, "pod-to-pod") as target:
        pl = target.placement("pod-to-pod")
        # addresses from the node's podCIDR, handed out by Cilium's IPAM: its endpoint list has them
        for side in ("client", "server"):
            node = getattr(pl, f"{side}_node")
            ip = pl.details[f"{side}_pod_ip"]
            cidrs = pl.details["nodes"][node]["pod_cidrs"]
            assert any(ipaddress.ip_address(ip) in ipaddress.ip_network(c) for c in cidrs)
            endpoints = json.loads(cilium_dbg(int(node[-1]), "endpoint", "list", "-o", "json"))
            assert ip in [a.get("ipv4") for e in endpoints for a in e["status"]["networking"]["addressing"]]
        server_ip = pl.details["server_pod_ip"]
        result = {}
        vxlan = count_packets(
            pl.client_node, "udp port 8472", lambda: result.update(run_tool(target, "pod-to-pod", "TCP_RR"))
        )
        transactions = result["transaction_rate"] * 1  # a 1 s run
        if routing == "tunnel":  # every request crosses the wire inside a VXLAN packet
            assert vxlan >= transactions, (vxlan, transactions)
        else:  # the pods' own addresses on the wire, no encapsulation
            plain = count_packets(
                pl.client_node, f"host {server_ip}", lambda: result.update(run_tool(target, "pod-to-pod", "TCP_RR"))
            )
            assert vxlan < 10 and plain >= result["transaction_rate"], (vxlan, plain, result)


def test_pods_get_cilium_addresses_and_vxlan_carries_them_in_tunnel_mode(cilium):
    pods_get_cilium_addresses_and_the_wire_shows_the_routing_mode("tunnel")  # the module's own: no switch


def test_campaign_on_the_shipped_cilium_environment_records_ciliums_state(cilium, tmp_path, monkeypatch):
    """Cilium (VXLAN, no kube-proxy) -> a ClusterIP through Cilium (native routing) -> the bridge, one visit
    each, as a round of the preset visits them; then nothing of Cilium is left on the bridge."""
    monkeypatch.undo()  # the shipped environment's own folder (its cilium-synced.sh)
    env = load_environment("local-cilium")
    scenarios = ["cilium-vxlan-ebpf", "cilium-ebpf-4", "bridge-iptables"]  # in this order (seed 7 keeps it)
    env = env.model_copy(update={"scenarios": {s: env.scenarios[s] for s in scenarios}})
    tests = {"rr": {"tool": "netperf", "kind": "TCP_RR", "duration_s": 1, "message_size": 1}}
    params = short_params("cilium", scenarios, tests, repetitions=1, retries=1)
    data = params.model_dump(mode="json")
    data["experiment"]["profile_runs"] = 1  # a profile of each datapath, beside its measured run
    params = type(params).model_validate(data)
    plan = Plan(environment=env, scenarios=scenarios, tests=params.tests)
    logs = []
    counts = runner.run_environment(
        params,
        plan,
        KubernetesTarget(env, scenarios, NETPERF, log=logs.append),
        raw_root=tmp_path / "raw",
        log=logs.append,
    )
    assert counts["ok"] == 6 and counts["failed"] == 0, (counts, logs)
    runs, metrics = tidy.build_tables(tmp_path / "raw" / "cilium")
    assert set(runs["outcome"]) == {"ok"}
    # the profiles say which datapath carried the packets: the bridge's frames with the bridge CNI,
    # Cilium's BPF programs with Cilium (perf sees the nodes: they run on this machine's kernel)
    profile_runs, profiles = tidy.build_profile_tables(tmp_path / "raw" / "cilium")
    assert set(profile_runs["outcome"]) == {"ok"} and set(profile_runs["attribution"]) == {"cpu"}
    frames = {
        s: " ".join(profiles.filter(pl.col("scenario") == s)["stack"].to_list())
        for s in ("bridge-iptables", "cilium-vxlan-ebpf")
    }
    # Cilium's own programs by their names (cil_from_container, ...): other BPF programs run on either
    # datapath, e.g. the device filter runc attaches to every container's cgroup
    cilium_program = re.compile(r"bpf_prog_[0-9a-f]+_cil_")
    assert "br_handle_frame" in frames["bridge-iptables"] and not cilium_program.search(frames["bridge-iptables"])
    assert cilium_program.search(frames["cilium-vxlan-ebpf"]) and "vxlan_" in frames["cilium-vxlan-ebpf"]
    assert set(profiles["side"]) == {"client", "server"}
    metas = {
        s: json.loads((tmp_path / "raw" / "cilium" / "local-cilium" / s / "rr" / "r000" / "meta.json").read_text())[
            "placement"
        ]
        for s in scenarios
    }
    assert metas["bridge-iptables"]["scenario_record"]["pod_network"] == "bridge iptables - -"
    vxlan = metas["cilium-vxlan-ebpf"]["scenario_record"]
    assert vxlan["pod_network"] == "cilium none tunnel socket"
    assert "cilium-cni" in vxlan["cni_config"]
    assert "1.17.6" in vxlan["cilium_status"] and "Network: Tunnel [vxlan]" in vxlan["cilium_status"]
    svc = metas["cilium-ebpf-4"]["scenario_record"]["cilium_status"]
    # the map holds the 4 Services and the API server's own
    assert svc.count("ClusterIP frontends in the service map") == 2 and "5 ClusterIP frontends" in svc
    assert metas["cilium-ebpf-4"]["scenario_settings"]["study"] == "D"
    # compare lists the CNI's config as a setup fact, not the agent's status ("24s ago", endpoint ids)
    facts = tidy.record_facts({"placement": metas["cilium-vxlan-ebpf"]})
    assert "placement.scenario_record.cni_config" in facts
    assert "placement.scenario_record.cilium_status" not in facts
    assert not execd_commands()
    # the last visit switched Cilium (native routing, no kube-proxy) to the bridge: nothing of it is left
    assert (STATE / "network").read_text().strip() == "bridge iptables - -"
    for name in NODES:
        links = in_node(name, "ip", "-o", "link", "show")
        assert "cilium_" not in links and " lxc" not in links
        assert "CILIUM" not in in_node(name, "iptables-save")
        assert "cil_" not in in_node(name, "bpftool", "net", "show")
    assert cilium_cgroups() == set()
    assert "cilium-agent" not in subprocess.run(["pgrep", "-af", "cilium"], capture_output=True, text=True).stdout


def test_pods_get_cilium_addresses_and_the_wire_carries_them_plain_in_native_mode(cilium):
    pods_get_cilium_addresses_and_the_wire_shows_the_routing_mode("native")  # from the bridge the campaign left


def test_envoy_sidecars_carry_traffic_on_cilium_and_node_proxies_stop_before_any_run_saying_why(cilium):
    """Sidecars capture inside each pod, whatever the pod network; the node proxies' rules sit in the
    node's nat table, which Cilium's eBPF host routing takes pod traffic past."""
    switch("cilium", "--routing", "native")
    mesh = {"placement": "pod-to-pod", "proxy": "envoy"}
    env = cilium_env(
        {
            "sidecars": {"description": "mTLS sidecars", "mesh": "sidecars-mtls", **mesh},
            "node-proxies": {"description": "HBONE node proxies", "mesh": "node-proxies-mtls", **mesh},
        }
    )
    with serving_cluster(env, "sidecars") as target:
        before = target.datapath_usage("sidecars", reset_peak=True)
        assert run_tool(target, "sidecars", "TCP_RR")["transaction_rate"] > 500
        assert runner.idle_proxies(before, target.datapath_usage("sidecars", reset_peak=False)) == []
    with pytest.raises(TargetError, match=r"node proxies captured nothing.*eBPF host routing"):
        with serving_cluster(env, "node-proxies"):
            pass
    for name in NODES:
        assert sidecars.NODE_CHAIN not in in_node(name, "iptables-save", "-t", "nat")
    assert not execd_commands()


@pytest.mark.parametrize("lb", ["socket", "packet"])
def test_a_cluster_ip_is_served_by_ciliums_load_balancer_without_kube_proxy(cilium, lb):
    switch("cilium", "--routing", "native", "--lb", lb)
    env = cilium_env({"service": {"description": "ClusterIP", "placement": "service", "programmed": [CILIUM_SYNCED]}})
    with serving_cluster(env, "service") as target:
        pl = target.placement("service")
        node = int(pl.client_node[-1])
        services = json.loads(cilium_dbg(node, "service", "list", "-o", "json"))
        frontends = {s["spec"]["frontend-address"]["ip"] for s in services}
        assert pl.server_address in frontends  # the ClusterIP is in the agent's service map
        for name in NODES:  # and no kube-proxy rule exists anywhere
            nat = in_node(name, "iptables-save", "-t", "nat")
            assert "KUBE-SERVICES" not in nat and "KUBE-SVC" not in nat
        assert not subprocess.run(["pgrep", "-f", "hyperkube kube-proxy "], capture_output=True, text=True).stdout
        cilium_dbg(node, "bpf", "ct", "flush", "global")
        m = run_tool(target, "service", "TCP_CRR")
        assert m["connection_rate"] > 500
        ct = cilium_dbg(node, "bpf", "ct", "list", "global")
        to_cluster_ip = [line for line in ct.splitlines() if pl.server_address in line]
        if lb == "socket":  # translated at connect(): the datapath only ever sees the pod address
            assert not to_cluster_ip
        else:  # translated per packet: the service's own conntrack entries name the ClusterIP
            assert len(to_cluster_ip) >= 100, ct[-2000:]


def test_cilium_beside_kube_proxy_leaves_services_to_kube_proxy(cilium):
    switch("cilium", "--routing", "tunnel", "--proxy-mode", "iptables")
    status = cilium_dbg(1, "status")
    assert "KubeProxyReplacement:    False" in status
    assert cilium_cgroups() == set()  # no socket load balancer without kube-proxy replacement
    nat = in_node("bk8s-node1", "iptables-save", "-t", "nat")
    assert "KUBE-SERVICES" in nat


def test_down_leaves_no_cilium_program_mount_or_process(cilium):
    down = cluster_script("down")
    assert down.returncode == 0, down.stderr
    assert leftovers() == []
    assert cilium_cgroups() == set()
    assert not Path("/run/cilium").exists()
    assert sysctls(GLOBAL_SYSCTLS) == cilium
    assert not [line for line in open("/proc/self/mounts") if line.split()[2] == "bpf" and "benchlib" in line]
    assert not subprocess.run(["pgrep", "-f", "cilium-"], capture_output=True, text=True).stdout
