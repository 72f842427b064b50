"""The local cluster of scripts/k8s-local-cluster.sh, as the cluster tests reach it: its script,
its nodes' network namespaces (named after the nodes), and what a `down` must leave behind."""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
from pathlib import Path

from benchlib import collectors
from benchlib.measure import runner
from benchlib.settings.environment import Environment
from benchlib.targets.kubernetes import PID_MARKER, KubernetesTarget
from benchlib.targets.lab.addresses import CLUSTER_SERVICE_CIDR
from tests.conftest import REPO, require_root

NETPERF = collectors.servers(["netperf"])
CLUSTER = REPO / "scripts" / "k8s-local-cluster.sh"
STATE = Path("/var/lib/benchlib-k8s")
STATE_B = Path("/var/lib/benchlib-k8s-b")  # a second local cluster, named b
SERVICE_CIDR = ipaddress.ip_network(CLUSTER_SERVICE_CIDR)


def bridge_cluster(local_cluster_left_up):
    """The local two-node cluster, bridge CNI and kube-proxy iptables, for a test module (a fixture
    generator). The modules that use it run one after the other (tests/conftest.py) and share one
    bring-up: `up` of a cluster already up only switches it back to the bridge if a module left another
    pod network; the session's end takes it down (`local_cluster_left_up`)."""
    require_root()
    subprocess.run(["bash", str(CLUSTER), "build"], check=True)  # a no-op once built (cached per machine)
    up = cluster_script("up", "--nodes", "2", "--proxy-mode", "iptables")
    assert up.returncode == 0, up.stderr
    yield STATE


def cluster_script(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(CLUSTER), *args], capture_output=True, text=True, timeout=timeout)


def k8s_env(scenarios: dict | None = None, **settings) -> Environment:
    return Environment.model_validate(
        {
            "name": "k8s-test",
            "description": "the local two-node cluster",
            "target": "kubernetes",
            "cpus": {"client": [0], "server": [1]},
            "kubernetes": {
                "kubeconfig": str(STATE / "runner.kubeconfig"),
                "image": "localhost/benchlib/bench:1",
                "image_pull_policy": "Never",
                "pod_ready_timeout_s": 60,
                **settings,
            },
            "scenarios": scenarios
            or {
                "pod-to-pod": {
                    "description": "two nodes",
                    "placement": "pod-to-pod",
                    "apply": ["echo switched > switched.txt"],
                    "ready": ["test -s switched.txt"],
                    "record": {"kernel": "uname -r"},
                    "settings": {"cni": "bridge"},
                },
                "same-node": {"description": "one node", "placement": "same-node"},
                "host-network": {"description": "node to node", "placement": "host-network"},
                "service": {"description": "through a ClusterIP", "placement": "service"},
            },
        }
    )


def in_node(node: str, *argv: str) -> str:
    # the local cluster names each node's network namespace after the node
    return subprocess.run(
        ["nsenter", f"--net=/run/netns/{node}", *argv], capture_output=True, text=True, check=True
    ).stdout


def wire_packets(node: str) -> tuple[int, int]:
    """(rx, tx) packets of the node's end of the inter-node wire."""
    stats = json.loads(in_node(node, "ip", "-s", "-j", "link", "show", "wire0"))[0]["stats64"]
    return stats["rx"]["packets"], stats["tx"]["packets"]


def run_tool(target: KubernetesTarget, scenario: str, kind: str, duration_s: int = 1) -> dict:
    """One netperf run from the scenario's client pod to its server address: the parsed metrics."""
    netperf = collectors.get("netperf")
    pl = target.placement(scenario)
    [inv] = netperf.commands(kind, pl.server_address, duration_s, 1, 1, pl.client_cpus, pl.server_cpus)
    proc = target.spawn(scenario, "client", inv.argv)
    out, err = proc.communicate(60)
    assert proc.returncode == 0, (out, err)
    return netperf.parse(kind, [out])


def execd_commands() -> list[str]:
    """Commands the target exec'd that still run (container processes are visible from the host)."""
    return subprocess.run(["pgrep", "-af", PID_MARKER], capture_output=True, text=True).stdout.splitlines()


def leftovers() -> list[str]:
    """Everything a cluster leaves on the host, by kind; empty after a clean `down`."""
    left = [
        f"netns {n}"
        for n in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
        if n.startswith("bk8s-")
    ]
    left += [f"mount {line.split()[1]}" for line in open("/proc/self/mounts") if str(STATE) in line]
    left += [
        f"process {p}"
        for p in subprocess.run(["pgrep", "-af", str(STATE)], capture_output=True, text=True).stdout.splitlines()
    ]
    left += [f"cgroup {c}" for c in Path("/sys/fs/cgroup").glob("*/bk8s-node*")]
    left += [f"quiet cgroup {c}" for c in quiet_cgroups()]
    left += [f"path {p}" for p in (STATE, Path("/var/lib/kubelet/device-plugins/kubelet.sock")) if p.exists()]
    logs = Path("/var/log/containers")
    left += [f"log link {p}" for p in (logs.iterdir() if logs.exists() else []) if str(STATE) in os.readlink(p)]
    return left


def quiet_cgroups() -> list[Path]:
    """The quiet windows' cgroups on this machine (benchlib.targets.kubernetes.quiet), in any hierarchy."""
    root = Path("/sys/fs/cgroup")
    return sorted([*root.glob("benchlib-quiet-*"), *root.glob("*/benchlib-quiet-*")])


def frozen_cgroups() -> list[str]:
    """Every cgroup of the machine that is frozen or freezing, v1 and v2 (empty: nothing frozen).

    The watchdog removes its cgroups while this walks them, so a cgroup that vanishes mid-walk counts as thawed.
    """
    out = []
    for directory, _, files in os.walk("/sys/fs/cgroup"):  # os.walk skips directories removed under it
        here = Path(directory)
        if "freezer.state" in files and _read(here / "freezer.state") not in ("", "THAWED"):
            out.append(directory)
        if "cgroup.events" in files and (
            "frozen 1" in _read(here / "cgroup.events").splitlines() or _read(here / "cgroup.freeze") == "1"
        ):
            out.append(directory)
    return sorted(set(out))


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:  # removed since it was listed
        return ""


def sysctls(keys: list[str]) -> dict[str, str]:
    return {k: subprocess.run(["sysctl", "-n", k], capture_output=True, text=True).stdout.strip() for k in keys}


def serving_cluster(env: Environment, scenario: str):
    """The target on one scenario, its pods made and netperf's server started (a context manager)."""
    return runner.serving(KubernetesTarget(env, [scenario], NETPERF, log=lambda m: None))


def two_cluster_env() -> Environment:
    """The default cluster and cluster b, one scenario on each, with quiet windows over both."""
    return k8s_env(
        {
            "here": {"description": "the default cluster", "placement": "pod-to-pod"},
            "there": {
                "description": "cluster b",
                "placement": "same-node",
                "cluster": "b",
                "record": {"cluster": "echo $BENCHLIB_K8S_CLUSTER"},
            },
        },
        quiet={"pid_dir": str(STATE / "run")},
        clusters={"b": {"kubeconfig": str(STATE_B / "runner.kubeconfig"), "quiet": {"pid_dir": str(STATE_B / "run")}}},
    )
