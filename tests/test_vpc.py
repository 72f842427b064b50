"""The real AWS VPC CNI as the local cluster's CNI (scripts/k8s-local-cluster.sh cni vpc).

ipamd (aws-k8s-agent), aws-cni and egress-cni v1.23.2 and ec2-metadata-mock built from the Go module
proxy; per node the metadata mock and ipamd in the node's network namespace, ipamd in IMDS-only mode
(no EC2 API: the mocked AWS is the instance metadata alone). Every check reads ipamd's own state (its
introspection API) or the node's kernel (rules, routes, chains, tables, links). One cluster for the
module: bring-ups are the expensive part.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from benchlib.targets import TargetError
from benchlib.targets.lab.addresses import CLUSTER_WIRE
from tests.conftest import cannot_run, require_root
from tests.local_cluster import CLUSTER, STATE, cluster_script, in_node, leftovers, run_tool, serving_cluster
from tests.support.cilium import cilium_env

NODES = ("bk8s-node1", "bk8s-node2")
SUBNET = ipaddress.ip_network(CLUSTER_WIRE)  # the mocked VPC's one subnet: nodes and pods
PROCESSES = ("aws-k8s-agent", "ec2-metadata-mock")
# accepts connections on the address and port it is given and never answers
PORT_HOLDER = """
import socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past the previous mock's TIME_WAIT, as the mock binds
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen()
print("listening", flush=True)
time.sleep(600)
"""


def switch(*args: str) -> str:
    done = cluster_script("cni", *args)
    assert done.returncode == 0, done.stderr
    return done.stderr


def running(name: str) -> str:
    return subprocess.run(["pgrep", "-af", name], capture_output=True, text=True).stdout


def enis(node: str) -> dict[str, dict]:
    """ipamd's ENIs on the node per network card, from its introspection API."""
    return json.loads(in_node(node, "curl", "-sf", "http://127.0.0.1:61679/v1/enis"))


def pool(node: str) -> dict[str, dict]:
    """ipamd's assigned addresses on the node: address -> its entry."""
    return {
        ip: entry
        for card in enis(node).values()
        for eni in card["ENIs"].values()
        for cidr in eni["AvailableIPv4Cidrs"].values()
        for ip, entry in cidr["IPAddresses"].items()
    }


def back_on_a_working_bridge(stderr: str, component: str) -> None:
    """After a failed switch: the failing component's log tail shown, the cluster on the bridge with
    nothing of the VPC CNI running, and a real run across it."""
    assert f"--- last lines of /var/lib/benchlib-k8s/logs/{component}.failed.log ---" in stderr, stderr
    assert (STATE / "network").read_text().strip() == "bridge iptables - -"
    assert not [line for p in PROCESSES for line in running(p).splitlines()]
    env = cilium_env({"pod-to-pod": {"description": "two nodes", "placement": "pod-to-pod"}})
    with serving_cluster(env, "pod-to-pod") as target:
        assert run_tool(target, "pod-to-pod", "TCP_RR")["transaction_rate"] > 1000


@pytest.fixture(scope="module")
def vpc():
    require_root()
    built = subprocess.run(["bash", str(CLUSTER), "build", "vpc"], capture_output=True, text=True)
    if built.returncode != 0:
        # no Go module proxy: the one reason a run that requires every test accepts, with its line
        if "from the Go module proxy" in built.stderr:
            cannot_run(built.stderr.strip().splitlines()[-1])
        pytest.fail(built.stderr)
    subprocess.run(["bash", str(CLUSTER), "build"], check=True)
    up = cluster_script("up", "--nodes", "2", "--cni", "vpc")
    assert up.returncode == 0, up.stderr
    yield STATE
    cluster_script("down")


def test_bad_vpc_options_are_refused_and_a_missing_build_named_before_anything(tmp_path):
    # an empty state dir and cache: were a refusal late, it would say "no cluster is up" instead
    env = {**os.environ, "BENCHLIB_K8S_STATE": str(tmp_path / "state"), "BENCHLIB_CACHE": str(tmp_path / "cache")}
    for args, code, line in [
        (["--routing", "native"], 2, "k8s-local-cluster.sh: cni: unknown argument '--routing' (the vpc CNI has no"),
        (["--proxy-mode", "none"], 2, "k8s-local-cluster.sh: --proxy-mode none: the VPC CNI leaves Services to"),
        ([], 1, f"k8s-local-cluster.sh: no VPC CNI build at {tmp_path}/cache/vpc-cni/bin-vpc1.23.2"),
    ]:
        done = subprocess.run(["bash", str(CLUSTER), "cni", "vpc", *args], capture_output=True, text=True, env=env)
        [message] = done.stderr.splitlines()
        assert done.returncode == code and message.startswith(line), done.stderr
    assert not (tmp_path / "state").exists()


def test_pods_get_ipamds_addresses_on_the_vpc_cnis_own_rules_and_netperf_runs(vpc):
    env = cilium_env(
        {
            "pod-to-pod": {"description": "two nodes", "placement": "pod-to-pod"},
            "service": {"description": "ClusterIP", "placement": "service"},
        }
    )
    with serving_cluster(env, "pod-to-pod") as target:
        pl = target.placement("pod-to-pod")
        assert run_tool(target, "pod-to-pod", "TCP_RR")["transaction_rate"] > 1000
        for side in ("client", "server"):
            node, ip = getattr(pl, f"{side}_node"), pl.details[f"{side}_pod_ip"]
            # the address is one of the node's pre-assigned secondary IPs, handed out to this pod by that node's ipamd
            entry = pool(node)[ip]
            assert ipaddress.ip_address(ip) in SUBNET and entry["IPAMKey"]["networkName"] == "aws-cni", entry
            assert entry["IPAMMetadata"]["k8sPodName"] == pl.details[f"{side}_pod"], entry
            rules, routes = in_node(node, "ip", "rule"), in_node(node, "ip", "route")
            assert f"512:\tfrom all to {ip} lookup main" in rules, rules
            assert "1024:\tfrom all fwmark 0x80/0x80 lookup main" in rules, rules
            [route] = [r for r in routes.splitlines() if r.startswith(f"{ip} dev eni")]
            assert "scope link" in route
            nat = in_node(node, "iptables-save", "-t", "nat")
            node_ip = SUBNET[NODES.index(node) + 1]
            assert '-A POSTROUTING -m comment --comment "AWS SNAT CHAIN" -j AWS-SNAT-CHAIN-0' in nat, nat
            assert f"-j SNAT --to-source {node_ip} --random-fully" in nat, nat
            assert "table ip aws-cni" in in_node(node, "nft", "list", "tables")
            assert "mtu 9001" in in_node(node, "ip", "link", "show", "wire0")  # ipamd's, on the primary ENI
    with serving_cluster(env, "service") as target:
        assert run_tool(target, "service", "TCP_CRR")["connection_rate"] > 200


def test_switching_vpc_to_the_bridge_leaves_nothing_of_the_vpc_cni(vpc):
    """Right after the pods test: its pods were on the VPC CNI (veths, /32 routes and rules to remove)."""
    assert (STATE / "network").read_text().startswith("vpc ")
    switch("bridge")
    for node in NODES:
        assert "eni" not in in_node(node, "ip", "-o", "link", "show")
        assert not [r for r in in_node(node, "ip", "rule").splitlines() if r.split(":")[0] in ("512", "1024", "1536")]
        assert "AWS" not in in_node(node, "iptables-save")
        assert "aws-cni" not in in_node(node, "nft", "list", "tables")
        assert "PERMANENT" not in in_node(node, "ip", "neigh", "show", "dev", "wire0")
        assert "mtu 1500" in in_node(node, "ip", "link", "show", "wire0")
    assert "aws-node" not in Path("/proc/self/mounts").read_text()  # its mount point stays until the last down
    assert not [line for p in PROCESSES for line in running(p).splitlines()]


def test_an_ipamd_not_ready_in_time_fails_the_switch_and_leaves_the_bridge_working(vpc):
    switch("bridge")
    done = subprocess.run(
        ["bash", str(CLUSTER), "cni", "vpc"],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "BENCHLIB_VPC_READY_S": "0"},  # ipamd, just started, cannot hold its pool yet
    )
    assert done.returncode == 1, done.stderr
    assert (
        "k8s-local-cluster.sh: timed out after 0s waiting for ipamd on node 1 to hold its 9 pod IPs"
        " (the cluster is back on the bridge CNI" in done.stderr
    ), done.stderr
    back_on_a_working_bridge(done.stderr, "ipamd1")


def test_a_metadata_mock_that_cannot_serve_fails_the_switch_and_leaves_the_bridge_working(vpc):
    """A real process holds the metadata mock's port inside node 1 and never answers: the mock cannot
    serve, ipamd is never started, and the switch fails in one line with the mock's log tail."""
    switch("bridge")
    holder = subprocess.Popen(
        ["ip", "netns", "exec", NODES[0], "python3", "-c", PORT_HOLDER, "127.0.0.1", "1338"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout and holder.stdout.readline().strip() == "listening"
        done = subprocess.run(["bash", str(CLUSTER), "cni", "vpc"], capture_output=True, text=True, timeout=300)
    finally:
        holder.kill()
        holder.wait()
    assert done.returncode == 1, done.stderr
    assert (
        "k8s-local-cluster.sh: imds-mock1 exited while waiting for the metadata mock on node 1 to answer"
        " (the cluster is back on the bridge CNI" in done.stderr
    ), done.stderr
    assert "address already in use" in done.stderr, done.stderr
    back_on_a_working_bridge(done.stderr, "imds-mock1")


def test_a_pool_too_small_for_the_scenarios_pods_fails_in_one_line_with_the_vpc_cnis_reason(vpc):
    """One pod IP per node: a same-node scenario's second pod finds the pool empty. The pod network
    refuses it for real (aws-cni asks ipamd, which has no address left), and activation fails once it
    has refused a few times, naming the pod, its node and the VPC CNI's reason, well before the pod's
    120 s timeout. The one-address network stays for the module's last test, `down`."""
    switch("bridge")
    done = subprocess.run(
        ["bash", str(CLUSTER), "cni", "vpc"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "BENCHLIB_VPC_POD_IPS": "1"},
    )
    assert done.returncode == 0, done.stderr
    cards = enis(NODES[0])
    assert sum(card["TotalIPs"] for card in cards.values()) == 1, cards  # ipamd's whole pool on the node
    env = cilium_env({"same-node": {"description": "one node", "placement": "same-node"}})
    started = time.monotonic()
    with pytest.raises(TargetError) as refused, serving_cluster(env, "same-node"):
        pass
    message = str(refused.value)
    assert re.match(
        r"kubernetes: pod \S+ on bk8s-node\d: the pod network refused it \d+ times, the last: .*"
        r"failed to assign an IP address to container",
        message,
    ), message
    assert "\n" not in message and time.monotonic() - started < 90, message


def test_down_on_the_vpc_cni_leaves_nothing(vpc):
    """The module's last test, on the one-address VPC network the pool test left: `down` straight from it."""
    down = cluster_script("down")
    assert down.returncode == 0, down.stderr
    assert leftovers() == []
    assert not Path("/run/aws-node").exists()
    assert not [line for p in PROCESSES for line in running(p).splitlines()]
