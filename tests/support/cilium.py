"""The local cluster with Cilium: its environment, the cgroup its programs attach to, packets on the wire."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

from benchlib.settings.environment import Environment
from tests.local_cluster import STATE


def unified_cgroup() -> Path:
    hybrid = Path("/sys/fs/cgroup/unified")
    return hybrid if (hybrid / "cgroup.procs").exists() else Path("/sys/fs/cgroup")


def cilium_env(scenarios: dict) -> Environment:
    return Environment.model_validate(
        {
            "name": "cilium-test",
            "description": "the local two-node cluster with Cilium",
            "target": "kubernetes",
            "cpus": {"client": [0], "server": [1]},
            "kubernetes": {
                "kubeconfig": str(STATE / "runner.kubeconfig"),
                "image": "localhost/benchlib/bench:1",
                "image_pull_policy": "Never",
                "pod_ready_timeout_s": 120,
            },
            "scenarios": scenarios,
        }
    )


def count_packets(node: str, bpf_filter: str, during) -> int:
    """Packets matching a capture filter on the node's end of the wire while `during()` runs."""
    capture = subprocess.Popen(
        ["nsenter", f"--net=/run/netns/{node}", "tcpdump", "-i", "wire0", "-nn", "-q", "-w", "/dev/null", bpf_filter],
        stderr=subprocess.PIPE,
        text=True,
    )
    threading.Event().wait(1)  # tcpdump attaches
    try:
        during()
    finally:
        capture.terminate()
        err = capture.communicate(10)[1]
    return int(next(line for line in err.splitlines() if "packets captured" in line).split()[0])
