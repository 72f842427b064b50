"""The real Calico as the local cluster's CNI (scripts/k8s-local-cluster.sh cni calico).

calico-node (felix), the calico CNI plugin and calico-ipam built from a Calico source checkout
(`build calico`); felix per node as a host process in the node's network namespace and a private
mount namespace, in its iptables, nftables and eBPF dataplanes. Every check reads Calico's own state
(its IPAM blocks, its eBPF NAT table, its rules) or the kernel's (links, BPF programs on cgroups and
devices, packets on the wire). Without a Calico source and without the network the build refuses in
one line, and these tests skip with that line.
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
from pathlib import Path

import pytest

from benchlib.measure import runner
from benchlib.measure.plan import Plan
from benchlib.settings.loading import load_environment
from benchlib.tables import tidy
from benchlib.targets.kubernetes import KubernetesTarget
from benchlib.targets.lab.addresses import CLUSTER_POD_CIDR
from tests.conftest import require_root, short_params
from tests.local_cluster import CLUSTER, NETPERF, cluster_script, in_node, leftovers, run_tool, serving_cluster, sysctls
from tests.support.cilium import cilium_env, count_packets, unified_cgroup

NODES = ("bk8s-node1", "bk8s-node2")
GLOBAL_SYSCTLS = ["kernel.unprivileged_bpf_disabled"]  # felix sets it machine-wide in eBPF mode
HOST_DIRS = [Path("/run/calico"), Path("/var/lib/calico"), Path("/usr/lib/calico")]
POOL = ipaddress.ip_network(CLUSTER_POD_CIDR)


def switch(*args: str) -> str:
    done = cluster_script("cni", "calico", *args)
    assert done.returncode == 0, done.stderr
    return done.stderr


def kubectl_json(*args: str) -> dict:
    done = cluster_script("kubectl", *args, "-o", "json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def calico_cgroups() -> set[str]:
    """Every cgroup (relative to the cgroup2 root) with a Calico program attached."""
    root = str(unified_cgroup())
    tree = subprocess.run(["bpftool", "cgroup", "tree", root], capture_output=True, text=True, check=True).stdout
    found, current = set(), None
    for line in tree.splitlines():
        if line.startswith("/"):
            current = line.split()[0]
        elif "cali" in line and current is not None:
            found.add("/" + current[len(root) :].lstrip("/"))
    return found


def host_tc_programs() -> str:
    """The machine's own network namespace: its devices' tc and XDP programs."""
    return subprocess.run(["bpftool", "net", "show"], capture_output=True, text=True, check=True).stdout


def calico_env(scenarios: dict):

    return cilium_env(scenarios)


@pytest.fixture(autouse=True)
def environment_folder(tmp_path, monkeypatch):
    monkeypatch.setattr("benchlib.targets.kubernetes.scenarios.environment_dir", lambda name: tmp_path)


@pytest.fixture(scope="module")
def calico():
    require_root()
    built = subprocess.run(["bash", str(CLUSTER), "build", "calico"], capture_output=True, text=True)
    if built.returncode != 0:
        # no checkout and no network: the one skip a run that requires every test accepts, with its reason
        if built.stderr.startswith("k8s-local-cluster.sh: no Calico source: "):
            [line] = built.stderr.splitlines()
            pytest.skip(line)
        pytest.fail(built.stderr)
    subprocess.run(["bash", str(CLUSTER), "build"], check=True)
    host = sysctls(GLOBAL_SYSCTLS)
    up = cluster_script("up", "--nodes", "2", "--cni", "calico", "--dataplane", "iptables")
    assert up.returncode == 0, up.stderr
    yield host
    cluster_script("down")


@pytest.mark.parametrize(
    "args, refusal",
    [
        (["--dataplane", "ebpf", "--proxy-mode", "iptables"], "Calico's eBPF dataplane replaces kube-proxy"),
        (["--dataplane", "nftables", "--proxy-mode", "iptables"], "beside kube-proxy in nftables mode only"),
        (["--dataplane", "iptables", "--proxy-mode", "none"], "leaves Services to kube-proxy"),
        (["--dataplane", "bpf"], "--dataplane bpf: choose iptables, nftables or ebpf"),
        (["--routing", "tunnel"], "--routing tunnel: choose vxlan or native (Calico)"),
    ],
)
def test_unsupported_calico_combinations_are_refused_in_one_line_before_anything(tmp_path, args, refusal):
    # an empty state dir: were the refusal late, it would say "no cluster is up" instead
    env = {**os.environ, "BENCHLIB_K8S_STATE": str(tmp_path / "state")}
    done = subprocess.run(
        ["bash", str(CLUSTER), "cni", "calico", *args], capture_output=True, text=True, env=env, timeout=60
    )
    [line] = done.stderr.splitlines()
    assert done.returncode == 2 and line.startswith("k8s-local-cluster.sh: ") and refusal in line, done.stderr
    assert not (tmp_path / "state").exists()


def test_pods_get_calico_ipam_addresses_and_talk_across_and_within_nodes(calico):
    switch("--dataplane", "iptables", "--routing", "vxlan")
    env = calico_env(
        {
            "pod-to-pod": {"description": "two nodes", "placement": "pod-to-pod"},
            "same-node": {"description": "one node", "placement": "same-node"},
        }
    )
    with serving_cluster(env, "pod-to-pod") as target:
        pl = target.placement("pod-to-pod")
        blocks = {
            ipaddress.ip_network(b["spec"]["cidr"]): b["spec"]["affinity"]
            for b in kubectl_json("get", "ipamblocks.crd.projectcalico.org")["items"]
        }
        for side in ("client", "server"):  # from the pool, in a block of calico-ipam's affine to the pod's node
            ip = ipaddress.ip_address(pl.details[f"{side}_pod_ip"])
            [block] = [net for net in blocks if ip in net]
            assert ip in POOL and blocks[block] == f"host:{getattr(pl, f'{side}_node')}"
        result = {}
        vxlan = count_packets(
            pl.client_node, "udp port 4789", lambda: result.update(run_tool(target, "pod-to-pod", "TCP_RR"))
        )
        assert vxlan >= result["transaction_rate"], (vxlan, result)  # each request inside a VXLAN packet
    with serving_cluster(env, "same-node") as target:
        pl = target.placement("same-node")
        assert pl.client_node == pl.server_node
        assert run_tool(target, "same-node", "TCP_RR")["transaction_rate"] > 1000


def test_native_routing_carries_pod_traffic_on_the_wire_without_vxlan(calico):
    switch("--dataplane", "iptables", "--routing", "native")
    env = calico_env({"pod-to-pod": {"description": "two nodes", "placement": "pod-to-pod"}})
    with serving_cluster(env, "pod-to-pod") as target:
        node = target.placement("pod-to-pod").client_node
        result, packets = {}, {}

        def plain_pod_packets():
            packets["pods"] = count_packets(
                node, f"tcp and net {POOL}", lambda: result.update(run_tool(target, "pod-to-pod", "TCP_RR"))
            )

        vxlan = count_packets(node, "udp port 4789", plain_pod_packets)
        # the pods' own addresses on the wire (routes to the other node's block), nothing encapsulated
        assert vxlan == 0 and packets["pods"] >= result["transaction_rate"], (vxlan, packets, result)


@pytest.mark.parametrize("dataplane", ["iptables", "nftables", "ebpf"])
def test_a_cluster_ip_answers_in_each_dataplane(calico, dataplane):
    switch("--dataplane", dataplane)
    programmed = (
        [f"bash {CLUSTER.parent.parent}/pipelines/local-cilium/calico-synced.sh"] if dataplane == "ebpf" else []
    )
    env = calico_env({"service": {"description": "ClusterIP", "placement": "service", "programmed": programmed}})
    with serving_cluster(env, "service") as target:
        pl = target.placement("service")
        assert run_tool(target, "service", "TCP_CRR")["connection_rate"] > 200
        rules = in_node(pl.client_node, "iptables-save")
        tables = in_node(pl.client_node, "nft", "list", "tables")
        if dataplane == "iptables":
            assert ":cali-" in rules and "table ip calico" not in tables
        elif dataplane == "nftables":  # felix's own table, none of its iptables chains
            assert "table ip calico" in tables and ":cali-" not in rules
        else:  # felix's eBPF NAT has the ClusterIP; no kube-proxy rule anywhere
            nat = cluster_script("calico-node", pl.client_node[-1], "-bpf", "nat", "dump").stdout
            assert pl.server_address in nat
            assert (
                "KUBE-SVC" not in rules
                and not subprocess.run(["pgrep", "-f", "hyperkube kube-proxy "], capture_output=True, text=True).stdout
            )


def test_ebpf_programs_stay_on_the_nodes_and_no_machine_wide_setting_changes(calico):
    switch("--dataplane", "ebpf")
    # the connect-time load balancer (off where the release's does not load on recent kernels): on the
    # nodes' cgroups only, never "/", which holds every process of the machine
    felix = Path("/var/lib/benchlib-k8s/run/calico-node1.pid").read_text().strip()
    ctlb = "FELIX_BPFCONNECTTIMELOADBALANCING=TCP" in Path(f"/proc/{felix}/environ").read_text().split("\0")
    assert calico_cgroups() == ({"/bk8s-node1", "/bk8s-node2"} if ctlb else set())
    for name in NODES:
        assert "cali" in in_node(name, "bpftool", "net", "show", "dev", "wire0")
    assert "cali" not in host_tc_programs()
    assert sysctls(GLOBAL_SYSCTLS) == calico
    for d in HOST_DIRS[:2]:  # felix's state is in each node's own directories
        assert not d.exists() or not any(d.iterdir())


def test_the_shipped_calico_scenarios_record_calicos_state(calico, tmp_path, monkeypatch):
    monkeypatch.undo()  # the shipped environment's own folder (its calico-synced.sh)
    env = load_environment("local-cilium")
    scenarios = ["calico-iptables", "calico-ebpf-service-4"]
    env = env.model_copy(update={"scenarios": {s: env.scenarios[s] for s in scenarios}})
    tests = {"rr": {"tool": "netperf", "kind": "TCP_RR", "duration_s": 1, "message_size": 1}}
    params = short_params("calico", scenarios, tests, repetitions=1, retries=1)
    logs = []
    counts = runner.run_environment(
        params,
        Plan(environment=env, scenarios=scenarios, tests=params.tests),
        KubernetesTarget(env, scenarios, NETPERF, log=logs.append),
        raw_root=tmp_path / "raw",
        log=logs.append,
    )
    assert counts["ok"] == 2 and counts["failed"] == 0, (counts, logs)
    runs, _ = tidy.build_tables(tmp_path / "raw" / "calico")
    assert set(runs["outcome"]) == {"ok"}
    meta = {
        s: json.loads((tmp_path / "raw" / "calico" / "local-cilium" / s / "rr" / "r000" / "meta.json").read_text())[
            "placement"
        ]["scenario_record"]
        for s in scenarios
    }
    assert meta["calico-iptables"]["pod_network"] == "calico iptables vxlan iptables"
    assert '"type": "calico-ipam"' in meta["calico-iptables"]["cni_config"]
    status = meta["calico-iptables"]["calico_status"]
    assert "FELIX_BPFENABLED=false" in status and "vxlanMode=Always" in status and f"cidr={POOL}" in status
    ebpf = meta["calico-ebpf-service-4"]
    assert ebpf["pod_network"] == "calico none vxlan ebpf" and "FELIX_BPFENABLED=true" in ebpf["calico_status"]
    assert "Service frontends in the eBPF NAT table" in ebpf["calico_status"]


def test_a_felix_that_is_not_ready_in_time_fails_the_switch_and_leaves_the_bridge_working(calico):
    switch("--dataplane", "iptables", "--routing", "vxlan")  # kube-proxy iptables already runs: no wait for it
    done = subprocess.run(
        ["bash", str(CLUSTER), "cni", "calico", "--dataplane", "iptables", "--routing", "native"],
        capture_output=True,
        text=True,
        timeout=120,
        # no time at all: felix, just started, cannot be ready at its first check (with 1 s it sometimes was)
        env={**os.environ, "BENCHLIB_FELIX_READY_S": "0"},
    )
    assert done.returncode == 1
    assert (
        "k8s-local-cluster.sh: felix on node 1 not ready after 0s (the cluster is back on the bridge CNI" in done.stderr
    )
    assert "--- last lines of /var/lib/benchlib-k8s/logs/calico-node1.failed.log ---" in done.stderr
    assert Path("/var/lib/benchlib-k8s/network").read_text().strip() == "bridge iptables - -"
    assert not subprocess.run(["pgrep", "-f", "calico-node -felix"], capture_output=True, text=True).stdout
    env = calico_env({"pod-to-pod": {"description": "two nodes", "placement": "pod-to-pod"}})
    with serving_cluster(env, "pod-to-pod") as target:
        assert run_tool(target, "pod-to-pod", "TCP_RR")["transaction_rate"] > 1000


def test_switching_to_the_bridge_and_down_leave_nothing_of_calico(calico):
    switch("--dataplane", "ebpf")
    done = cluster_script("cni", "bridge")
    assert done.returncode == 0, done.stderr
    for name in NODES:
        assert "cali" not in in_node(name, "ip", "-o", "link", "show")
        assert "cali" not in in_node(name, "iptables-save").lower()
        assert "cali" not in in_node(name, "ipset", "list", "-n")
        assert "calico" not in in_node(name, "nft", "list", "tables")
        assert "cali" not in in_node(name, "bpftool", "net", "show")
        assert "169.254.1.1" not in in_node(name, "ip", "route")
    assert calico_cgroups() == set()
    env = calico_env({"pod-to-pod": {"description": "two nodes", "placement": "pod-to-pod"}})
    with serving_cluster(env, "pod-to-pod") as target:
        assert run_tool(target, "pod-to-pod", "TCP_RR")["transaction_rate"] > 1000
    down = cluster_script("down")
    assert down.returncode == 0, down.stderr
    assert leftovers() == []
    assert not any(d.exists() for d in HOST_DIRS)
    assert sysctls(GLOBAL_SYSCTLS) == calico
    assert not subprocess.run(["pgrep", "-f", "calico-node"], capture_output=True, text=True).stdout
