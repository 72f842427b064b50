"""scripts/k8s-local-cluster.sh without a cluster: where its addresses come from, its refusal to
change the cluster under a running measurement, and the names that keep several local clusters apart. The script runs for real, against a lock directory and
a state directory of the test's own (BENCHLIB_LOCK_DIR, BENCHLIB_K8S_STATE)."""

from __future__ import annotations

import ipaddress
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

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
        and bad.stderr.strip() == "k8s-local-cluster.sh: --cni flannel: choose one of: bridge calico cilium vpc"
    )
    bad = script("cni", "bridge", "--lb", "socket")
    assert bad.returncode == 2 and "--routing and --lb are Cilium's options" in bad.stderr
    bad = script("up", "--nodes", "3")
    assert bad.returncode == 2 and bad.stderr.strip() == "k8s-local-cluster.sh: --nodes 3: choose 1 or 2"


def cluster_names(name: str, state_base: Path, *extra: str) -> dict[str, str]:
    """The names scripts/cluster/name.sh gives the local cluster `name`, after the shell lines `extra`."""
    names = ["CLUSTER_NAME", "STATE", "PREFIX", "LINK_PREFIX", "KUBE_CONTEXT", "KUBE_USER_SUFFIX", "HOST_API_PORT"]
    script = (
        f"set -eu; PROJECT={REPO}; cd {REPO}; "
        + "".join(f". scripts/cluster/{piece}.sh; " for piece in ("common", "host", "pki", "control-plane"))
        + f"cluster_identity {name}; "
        + "".join(f"{line}; " for line in extra)
        + "; ".join(f'echo "{n}=${n}"' for n in names)
    )
    env = {**os.environ, "BENCHLIB_K8S_STATE": str(state_base)}
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True, env=env).stdout
    return dict(line.split("=", 1) for line in out.splitlines())


@pytest.mark.parametrize("value", ["A1", "1a", "abcdefghi", "a-b", "", "local"])
def test_a_bad_cluster_name_is_refused_naming_it(tmp_path, value):
    env = {**os.environ, "BENCHLIB_K8S_STATE": str(tmp_path / "state"), "BENCHLIB_LOCK_DIR": str(tmp_path)}
    by_option = subprocess.run(
        ["bash", str(CLUSTER), "--cluster", value, "status"], capture_output=True, text=True, env=env
    )
    [line] = by_option.stderr.splitlines()
    assert by_option.returncode == 2 and line.startswith(f"k8s-local-cluster.sh: --cluster '{value}': "), line
    if value:  # an empty variable is the default cluster
        env["BENCHLIB_K8S_CLUSTER"] = value
        by_env = subprocess.run(["bash", str(CLUSTER), "status"], capture_output=True, text=True, env=env)
        [line] = by_env.stderr.splitlines()
        assert by_env.returncode == 2 and line.startswith(f"k8s-local-cluster.sh: BENCHLIB_K8S_CLUSTER='{value}': "), (
            line
        )


def test_the_option_wins_over_the_variable(tmp_path):
    env = {**os.environ, "BENCHLIB_K8S_STATE": str(tmp_path / "state"), "BENCHLIB_K8S_CLUSTER": "Bad"}
    done = subprocess.run(["bash", str(CLUSTER), "--cluster", "b", "status"], capture_output=True, text=True, env=env)
    assert (done.returncode, done.stdout) == (1, "down\n"), done.stderr  # cluster b, not up: no refusal


def test_the_default_cluster_keeps_its_names(tmp_path):
    expected = {
        "CLUSTER_NAME": "",
        "STATE": "/var/lib/benchlib-k8s",
        "PREFIX": "bk8s",
        "LINK_PREFIX": "bk8s",
        "KUBE_CONTEXT": "benchlib-local",
        "KUBE_USER_SUFFIX": "",
        "HOST_API_PORT": "16443",
    }
    env = {k: v for k, v in os.environ.items() if k != "BENCHLIB_K8S_STATE"}
    script = f"set -eu; PROJECT={REPO}; . {REPO}/scripts/cluster/common.sh; cluster_identity default; " + "; ".join(
        f'echo "{n}=${n}"' for n in expected
    )
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True, env=env).stdout
    assert dict(line.split("=", 1) for line in out.splitlines()) == expected


def test_a_named_cluster_has_names_of_its_own(tmp_path):
    got = cluster_names("abcdefgh", tmp_path / "state")
    assert got == {
        "CLUSTER_NAME": "abcdefgh",
        "STATE": f"{tmp_path}/state-abcdefgh",
        "PREFIX": "bk8s-abcdefgh",
        "LINK_PREFIX": "bk-abcdefgh",
        "KUBE_CONTEXT": "benchlib-abcdefgh",
        "KUBE_USER_SUFFIX": "@benchlib-abcdefgh",
        "HOST_API_PORT": "",  # chosen at `up`
    }
    # the bridge CNI's bridge, the longest link name, fits Linux's 15 characters
    assert len(got["LINK_PREFIX"] + "-br0") <= 15


def test_kubeconfigs_of_two_clusters_merge(tmp_path):
    """Every name in a kubeconfig is the cluster's own: two clusters' files merged keep both."""
    merged: dict[str, set[str]] = {"clusters": set(), "users": set(), "contexts": set()}
    for name in ("default", "b"):
        state = tmp_path / ("state" if name == "default" else f"state-{name}")
        (state / "pki").mkdir(parents=True)
        (state / "pki" / "tokens.csv").write_text("t0k3n,admin,admin,system:masters\n")
        cluster_names(name, tmp_path / "state", 'kubeconfig "$STATE/admin.kubeconfig" admin https://127.0.0.1:1')
        config = yaml.safe_load((state / "admin.kubeconfig").read_text())
        for key in merged:
            merged[key] |= {entry["name"] for entry in config[key]}
        if name == "default":  # as before clusters had names
            assert config["current-context"] == "benchlib-local" and config["users"][0]["name"] == "admin"
    assert merged == {
        "clusters": {"benchlib-local", "benchlib-b"},
        "users": {"admin", "admin@benchlib-b"},
        "contexts": {"benchlib-local", "benchlib-b"},
    }


def test_a_named_cluster_takes_a_port_no_other_cluster_and_no_listener_has(tmp_path):
    other = tmp_path / "state-x"
    other.mkdir()
    (other / "api-port").write_text("16444\n")
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 16445))
        listener.listen()
        got = cluster_names("b", tmp_path / "state", "HOST_API_PORT=$(choose_api_port)")
    assert 16446 <= int(got["HOST_API_PORT"]) <= 16543


def test_the_local_clusters_are_found_by_their_state_dirs(tmp_path):
    for d in ("state", "state-x", "state-Bad", "state-toolongname"):
        (tmp_path / d).mkdir()
    script = f"set -eu; PROJECT={REPO}; . {REPO}/scripts/cluster/name.sh; local_clusters"
    env = {**os.environ, "BENCHLIB_K8S_STATE": str(tmp_path / "state")}
    found = set(
        subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True, env=env).stdout.split()
    )
    # (a real cluster's node namespaces on this machine are found too)
    assert {"default", "x"} <= found and not found & {"Bad", "toolongname"}
