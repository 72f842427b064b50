"""scripts/k8s-local-cluster.sh without a cluster: where its addresses come from, and its refusal to
change the cluster under a running measurement. The script runs for real, against a lock directory and
a state directory of the test's own (BENCHLIB_LOCK_DIR, BENCHLIB_K8S_STATE)."""

from __future__ import annotations

import ipaddress
import os
import subprocess
import sys
import textwrap

import pytest

from benchlib.targets.lab import addresses
from benchlib.targets.lab.kubeproxy import SERVICE_CIDR as LAB_SERVICE_CIDR
from tests.conftest import REPO

CLUSTER = REPO / "scripts" / "k8s-local-cluster.sh"


def shell_addresses() -> dict[str, str]:
    """The address variables as the cluster script's pieces see them after load_addresses."""
    names = ["WIRE_NET", "WIRE_PREFIX", "CLUSTER_CIDR", "NODE_CIDR_PREFIX", "SERVICE_CIDR", "API_SERVICE_IP"]
    script = (
        f"set -eu; PROJECT={REPO}; . {REPO}/scripts/cluster/common.sh; load_addresses; "
        + "; ".join(f'echo "{n}=${n}"' for n in names)
        + '; echo "NODE2=$(node_ip 2)"'
    )
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True).stdout
    return dict(line.split("=", 1) for line in out.splitlines())


def test_the_cluster_scripts_take_their_addresses_from_benchlib():
    got = shell_addresses()
    assert got["CLUSTER_CIDR"] == addresses.CLUSTER_POD_CIDR
    assert got["SERVICE_CIDR"] == addresses.CLUSTER_SERVICE_CIDR
    assert int(got["NODE_CIDR_PREFIX"]) == addresses.CLUSTER_NODE_POD_PREFIX
    wire = ipaddress.ip_network(addresses.CLUSTER_WIRE)
    assert ipaddress.ip_address(got["NODE2"]) == wire[2] and int(got["WIRE_PREFIX"]) == wire.prefixlen
    # the kubernetes Service: the first address of the range, which the apiserver's certificate names
    assert ipaddress.ip_address(got["API_SERVICE_IP"]) == ipaddress.ip_network(got["SERVICE_CIDR"])[1]


def test_the_cluster_plan_is_in_the_benchmark_range_and_apart_from_the_labs():
    benchmark = ipaddress.ip_network("198.18.0.0/15")
    cluster = [
        ipaddress.ip_network(n)
        for n in (addresses.CLUSTER_WIRE, addresses.CLUSTER_POD_CIDR, addresses.CLUSTER_SERVICE_CIDR)
    ]
    lab = [
        ipaddress.ip_network(f"{addresses.NODE_IP[1]}/{addresses.NODE_PREFIX}", strict=False),
        ipaddress.ip_network(addresses.POD_CIDR),
        LAB_SERVICE_CIDR,
    ]
    assert all(net.subnet_of(benchmark) for net in cluster)
    assert not [(a, b) for a in cluster for b in cluster + lab if a is not b and a.overlaps(b)]


@pytest.fixture
def measurement(tmp_path):
    """A measurement holding the lock as `benchlib collect` does (machine.exclusive), in a process of
    its own; it runs `child` (the script's argv) as its descendant when given one."""
    lock_dir = tmp_path / "locks"
    env = {**os.environ, "BENCHLIB_LOCK_DIR": str(lock_dir), "BENCHLIB_K8S_STATE": str(tmp_path / "state")}

    def hold(*child: str) -> subprocess.Popen:
        code = textwrap.dedent(f"""
            import subprocess, sys
            from pathlib import Path
            from benchlib.host import machine
            with machine.exclusive("benchlib collect --env local-k8s (test)", Path({str(lock_dir / "collect.lock")!r})):
                print("held", flush=True)
                child = {list(child)!r}
                if child:
                    done = subprocess.run(child, capture_output=True, text=True)
                    print(done.returncode, done.stderr.replace(chr(10), " | "), flush=True)
                else:
                    sys.stdin.read()
            """)
        proc = subprocess.Popen(
            [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        assert proc.stdout.readline() == "held\n"
        return proc

    def script(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", str(CLUSTER), *args], capture_output=True, text=True, env=env, timeout=60)

    return hold, script


@pytest.mark.parametrize(
    "command", [["cni", "bridge"], ["cni", "cilium", "--routing", "native"], ["proxy-mode", "nftables"]]
)
def test_cni_and_proxy_mode_are_refused_while_another_process_measures(measurement, command):
    hold, script = measurement
    holder = hold()
    try:
        refused = script(*command)
    finally:
        holder.communicate("")
    assert refused.returncode == 1
    [line] = refused.stderr.splitlines()
    assert line.startswith(
        "k8s-local-cluster.sh: refused: a measurement is running "
        f"(pid {holder.pid}: benchlib collect --env local-k8s (test))"
    ), line
    # with the measurement over, the same command gets past the lock (and finds no cluster)
    after = script(*command)
    assert after.returncode == 1 and "no cluster is up" in after.stderr and "refused" not in after.stderr


def test_the_measurement_itself_may_switch_the_cluster(measurement):
    """A campaign's scenario runs `cni` from inside the collection that holds the lock."""
    hold, _ = measurement
    out, _ = hold("bash", str(CLUSTER), "cni", "bridge", "--proxy-mode", "iptables").communicate()
    code, stderr = out.split(" ", 1)
    assert code == "1" and "no cluster is up" in stderr and "refused" not in stderr, out


def test_bad_network_options_are_refused_before_any_lock(measurement):
    _, script = measurement
    bad = script("cni", "flannel")
    assert (
        bad.returncode == 2
        and bad.stderr.strip() == "k8s-local-cluster.sh: --cni flannel: choose one of: bridge cilium calico vpc"
    )
    bad = script("cni", "bridge", "--lb", "socket")
    assert bad.returncode == 2 and "--routing and --lb are Cilium's options" in bad.stderr
    bad = script("up", "--nodes", "3")
    assert bad.returncode == 2 and bad.stderr.strip() == "k8s-local-cluster.sh: --nodes 3: choose 1 or 2"
